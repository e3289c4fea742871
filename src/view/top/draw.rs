//! Drawing one frame of `tasklock top` from the view's state: a pure function of what
//! the store said last and what the person did, so that a frame can be drawn for a test
//! (`tasklock top --once`) exactly as on screen. No I/O here. The frame: a header line,
//! the sections (all four side by side on a large terminal, one at a time behind a tab
//! line on a small one), a footer line; a key's or an agent's detail and the help drawn
//! over them (detail.rs); the sections' tables (tables.rs).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::detail::detail;
use super::parts::{Styles, cut, inert, width};
use super::tables::{agents, checkouts, events, waits};
use super::{App, Mode, Pane};
use crate::clock::Time;
use crate::liveness::State;

/// Whether the sections are shown one at a time, behind a tab line: a terminal too
/// narrow for the Waits & freezes pane beside the agents, or too short for four panes.
pub fn tabbed(body: Rect) -> bool {
    body.width < 100 || body.height < 20
}

pub fn draw(f: &mut Frame, app: &App, now: Time) {
    let st = Styles::new(app.color);
    let area = f.area();
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(
        Paragraph::new(header(app, now, head.width)).style(st.title()),
        head,
    );
    f.render_widget(Paragraph::new(footer(app, foot.width)), foot);

    if tabbed(body) {
        let [tabs_line, pane] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(2)]).areas(body);
        f.render_widget(Paragraph::new(tabs(app, &st, tabs_line.width)), tabs_line);
        section(f, app, app.focus, pane, &st, now);
    } else {
        let [top, middle, bottom] = Layout::vertical([
            Constraint::Percentage(40),
            Constraint::Percentage(30),
            Constraint::Percentage(30),
        ])
        .areas(body);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)])
                .areas(middle);
        section(f, app, Pane::Checkouts, top, &st, now);
        section(f, app, Pane::Agents, left, &st, now);
        section(f, app, Pane::Waits, right, &st, now);
        section(f, app, Pane::Events, bottom, &st, now);
    }
    if let Some(d) = &app.detail {
        detail(f, app, d, area, &st, now);
    }
    if app.help {
        help(f, app, area, &st);
    }
}

fn section(f: &mut Frame, app: &App, pane: Pane, area: Rect, st: &Styles, now: Time) {
    match pane {
        Pane::Checkouts => checkouts(f, app, area, st, now),
        Pane::Agents => agents(f, app, area, st, now),
        Pane::Waits => waits(f, app, area, st, now),
        Pane::Events => events(f, app, area, st),
    }
}

/// How many rows each section has now.
fn counts(app: &App) -> [usize; 4] {
    [
        app.visible_checkouts().len(),
        app.visible_agents().len(),
        app.wait_items().len(),
        app.visible_events().len(),
    ]
}

/// "▶1 Checkouts (4)  2 Agents (4)  3 Waits & freezes (2)  4 Events (7)", the section in
/// focus reversed: shorter words, then no counts, where the line is narrow.
fn tabs(app: &App, st: &Styles, cols: u16) -> Line<'static> {
    let n = counts(app);
    let short = |p: Pane| match p {
        Pane::Waits => "Waits",
        p => p.word(),
    };
    let forms: [Box<dyn Fn(usize, Pane) -> String>; 3] = [
        Box::new(|i, p| format!("{} {} ({})", i + 1, p.word(), n[i])),
        Box::new(|i, p| format!("{} {} ({})", i + 1, short(p), n[i])),
        Box::new(|i, p| format!("{} {}", i + 1, short(p))),
    ];
    let labels = forms
        .iter()
        .map(|form| {
            Pane::ALL
                .iter()
                .enumerate()
                .map(|(i, p)| form(i, *p))
                .collect::<Vec<_>>()
        })
        .find(|l| l.iter().map(|s| width(s) + 3).sum::<usize>() <= usize::from(cols))
        .unwrap_or_else(|| {
            Pane::ALL
                .iter()
                .enumerate()
                .map(|(i, p)| forms[2](i, *p))
                .collect()
        });
    let mut spans = Vec::new();
    for (p, label) in Pane::ALL.iter().zip(labels) {
        if *p == app.focus {
            spans.push(Span::styled(format!("▶{label} "), st.focused()));
        } else {
            spans.push(Span::raw(format!(" {label} ")));
        }
        spans.push(Span::raw(" "));
    }
    Line::from(spans)
}

/// The header: the counts that matter first, the store's name last; what does not fit
/// the width goes from the ends (the store, then the title), never the counts.
fn header(app: &App, now: Time, cols: u16) -> Line<'static> {
    let mut counts = vec![now.format("%H:%M:%S").to_string()];
    match &app.fleet {
        Some(fl) => {
            counts.push(plural(fl.checkouts.len(), "checkout"));
            let n = |s: State| fl.agents.iter().filter(|a| a.row.state == s).count();
            let mut agents = plural(fl.agents.len(), "agent");
            let trouble: Vec<String> = [(n(State::Stalled), "stalled"), (n(State::Dead), "dead")]
                .iter()
                .filter(|(k, _)| *k > 0)
                .map(|(k, w)| format!("{k} {w}"))
                .collect();
            if !trouble.is_empty() {
                agents.push_str(&format!(" ({})", trouble.join(", ")));
            }
            counts.push(agents);
            let waiting: usize = fl.queues.values().map(|q| q.length).sum();
            if waiting > 0 {
                counts.push(format!("{waiting} waiting"));
            }
            if !fl.cycles.is_empty() {
                counts.push(plural(fl.cycles.len(), "deadlock"));
            }
            if !fl.freezes.is_empty() {
                counts.push(plural(fl.freezes.len(), "freeze"));
            }
            if fl.corrupt > 0 {
                counts.push(format!("{} unreadable", fl.corrupt));
            }
        }
        None => counts.push("reading the store…".into()),
    }
    if let Some(e) = &app.error {
        counts.push(format!("error: {}", inert(e)));
    }
    // The title if it fits; the store's name cut to what is left, if enough is.
    let mut line = counts.join(" · ");
    let cols = usize::from(cols);
    if width(&line) + 15 <= cols {
        line = format!("tasklock top · {line}");
    }
    if let Some(fl) = &app.fleet {
        let left = cols.saturating_sub(width(&line) + 3);
        if left >= 24 {
            line = format!("{line} · {}", cut(&inert(&fl.store), left));
        }
    }
    Line::from(line)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn footer(app: &App, cols: u16) -> Line<'static> {
    match &app.mode {
        Mode::Filter => Line::from(format!("/{}▏  (enter: keep, esc: clear)", app.filter)),
        Mode::FreezeFor { key, input } => Line::from(format!(
            "freeze {} for: {input}▏  (like 30m or 2h; enter: freeze, esc: cancel)",
            cut(&inert(key), 40)
        )),
        Mode::Confirm { prompt, .. } => Line::from(format!("{prompt} [y/N]")),
        Mode::Normal => {
            if let Some(m) = &app.message {
                return Line::from(cut(&inert(m), 200));
            }
            // What does not fit goes, the least needed first; help and why the view
            // is read-only stay.
            let mut keys = vec![
                "? help",
                "q quit",
                "1-4/tab section",
                "↑↓ move",
                "enter detail",
                "/ filter",
                "s sort",
                "S reverse",
            ];
            if app.can_act.is_ok() {
                keys.push("r force-release");
                keys.push("f freeze");
            }
            let pre = if app.filter.is_empty() {
                String::new()
            } else {
                format!("filter: {} · ", inert(&app.filter))
            };
            let post = match &app.can_act {
                Err(why) => format!(" · read-only ({why})"),
                Ok(()) => String::new(),
            };
            let line = |keys: &[&str]| format!("{pre}{}{post}", keys.join(" · "));
            while keys.len() > 2 && width(&line(&keys)) > usize::from(cols) {
                let least = [
                    "S reverse",
                    "1-4/tab section",
                    "↑↓ move",
                    "/ filter",
                    "enter detail",
                    "s sort",
                ]
                .iter()
                .find_map(|k| keys.iter().position(|x| x == k))
                .unwrap_or(keys.len() - 1);
                keys.remove(least);
            }
            Line::from(line(&keys))
        }
    }
}

/// Every key of the view, over the sections; any key closes it.
fn help(f: &mut Frame, app: &App, area: Rect, st: &Styles) {
    let mut rows: Vec<(&str, String)> = vec![
        ("?", "this help; esc or ? closes it".into()),
        ("q  esc", "quit".into()),
        (
            "1 2 3 4",
            "Checkouts · Agents · Waits & freezes · Events".into(),
        ),
        ("tab  ← →", "the next or the previous section".into()),
        (
            "↑ ↓  j k",
            "move; g or home the first, G or end the last".into(),
        ),
        ("enter", "the selected key's or agent's detail".into()),
        (
            "/",
            "filter every section (enter keeps it, esc clears it)".into(),
        ),
        (
            "s",
            "sort by the next column (attention, key, lease, held)".into(),
        ),
        ("S", "reverse the sort (▲ ascending, ▼ descending)".into()),
    ];
    match &app.can_act {
        Ok(()) => {
            rows.push(("r", "force-release the selected key (asks first)".into()));
            rows.push((
                "f",
                "freeze the selected key for a time (asks first)".into(),
            ));
        }
        Err(why) => rows.push(("r  f", format!("force-release, freeze: read-only ({why})"))),
    }
    let mut lines: Vec<Line> = rows
        .into_iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!(" {k:<10}"), st.title()),
                Span::raw(what),
            ])
        })
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(" ▶ marks the section in focus."));
    lines.push(Line::from(
        " Attention first: dead, deadlocked, stalled, waiting.",
    ));
    let w = (lines.iter().map(Line::width).max().unwrap_or(20) as u16 + 2).min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(" Help: keys ", st.focused()))
        .title_bottom(" esc close ");
    f.render_widget(Paragraph::new(lines).block(block), rect);
}

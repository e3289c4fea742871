//! Drawing one frame of `tasklock top` from the view's state: a pure function of what
//! the store said last and what the person did, so that a frame can be drawn for a test
//! (`tasklock top --once`) exactly as on screen. No I/O here.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};

use super::{App, Detail, Mode, Pane};
use crate::clock::Time;
use crate::engine::fleet::{FleetAgent, FleetCheckout};
use crate::liveness::State;
use crate::store::{AuditEvent, Event};

/// Other agents' text (keys, names, reasons, notes) drawn inert: control characters,
/// escape sequences and bidirectional overrides are shown as `\u{…}`, never obeyed.
pub fn inert(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || is_bidi_or_separator(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn is_bidi_or_separator(c: char) -> bool {
    matches!(c,
        '\u{200e}' | '\u{200f}' | '\u{061c}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{2028}' | '\u{2029}'
        | '\u{feff}')
}

/// At most `max` characters of `s`, with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// "42s", "5m", "3h", "2d": the coarse form a table cell has room for.
pub fn short(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=99 => format!("{s}s"),
        100..=5999 => format!("{}m", s / 60),
        6000..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A bar that runs down as the lease does: `width` cells, the part left filled.
pub fn lease_bar(c: &FleetCheckout, now: Time, width: usize) -> String {
    let total = (c.view.expires_at - c.view.renewed_at)
        .num_milliseconds()
        .max(1);
    let left = (c.view.expires_at - now).num_milliseconds().clamp(0, total);
    let filled = ((left * width as i64 + total - 1) / total) as usize;
    let mut bar = "█".repeat(filled.min(width));
    bar.push_str(&"·".repeat(width - filled.min(width)));
    bar
}

pub struct Styles {
    color: bool,
}

impl Styles {
    pub fn new(color: bool) -> Styles {
        Styles { color }
    }
    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn state(&self, s: State) -> Style {
        match s {
            State::Alive => self.fg(Color::Green),
            State::Stalled => self.fg(Color::Yellow),
            State::Dead => self.fg(Color::Red).add_modifier(Modifier::BOLD),
        }
    }
    /// The agent's own colour before its name (as on the page); nothing without colour.
    fn swatch(&self, app: &App, id: &str, label: String, style: Style) -> Line<'static> {
        if !self.color {
            return Line::from(Span::styled(label, style));
        }
        let (r, g, b) = app.colours.rgb(id);
        Line::from(vec![
            Span::styled("■ ", Style::default().fg(Color::Rgb(r, g, b))),
            Span::styled(label, style),
        ])
    }
    fn title(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    fn selected(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
}

fn state_word(s: State) -> &'static str {
    match s {
        State::Alive => "alive",
        State::Stalled => "stalled",
        State::Dead => "dead",
    }
}

/// What the next command to meet a checkout will do with it.
fn ending_word(r: crate::report::ReapReason) -> &'static str {
    match r {
        crate::report::ReapReason::Timeout => "ending: lease over",
        _ => "ending: holder dead",
    }
}

fn holder_label(c: &FleetCheckout) -> String {
    let who = match &c.view.agent.name {
        Some(n) => format!("{} ({})", inert(n), inert(&c.view.agent.id)),
        None => inert(&c.view.agent.id),
    };
    match c.holder_client {
        Some(client) => format!("{who} · {client}"),
        None => who,
    }
}

fn agent_label(a: &FleetAgent) -> String {
    let who = match &a.row.name {
        Some(n) => format!("{} ({})", inert(n), inert(&a.row.id)),
        None => inert(&a.row.id),
    };
    match a.client {
        Some(client) => format!("{who} · {client}"),
        None => who,
    }
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
    f.render_widget(Paragraph::new(header(app, now)).style(st.title()), head);
    f.render_widget(Paragraph::new(footer(app)), foot);

    // On a short terminal the pane in focus takes the body; otherwise all four share it.
    if body.height < 16 {
        match app.focus {
            Pane::Checkouts => checkouts(f, app, body, &st, now),
            Pane::Agents => agents(f, app, body, &st, now),
            Pane::Events => events(f, app, body, &st),
        }
    } else {
        let [top, middle, bottom] = Layout::vertical([
            Constraint::Percentage(40),
            Constraint::Percentage(30),
            Constraint::Percentage(30),
        ])
        .areas(body);
        checkouts(f, app, top, &st, now);
        let [left, right] = if middle.width >= 100 {
            Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)])
                .areas(middle)
        } else {
            [middle, Rect::default()]
        };
        agents(f, app, left, &st, now);
        if right.width > 0 {
            waits(f, app, right, &st, now);
        }
        events(f, app, bottom, &st);
    }
    if let Some(d) = &app.detail {
        detail(f, app, d, area, &st, now);
    }
}

fn header(app: &App, now: Time) -> Line<'static> {
    let mut parts = vec![
        "tasklock top".to_string(),
        now.format("%H:%M:%S").to_string(),
    ];
    match &app.fleet {
        Some(fl) => {
            parts.push(plural(fl.checkouts.len(), "checkout"));
            let dead = fl
                .agents
                .iter()
                .filter(|a| a.row.state == State::Dead)
                .count();
            let stalled = fl
                .agents
                .iter()
                .filter(|a| a.row.state == State::Stalled)
                .count();
            let mut agents = plural(fl.agents.len(), "agent");
            if stalled + dead > 0 {
                agents.push_str(&format!(" ({stalled} stalled, {dead} dead)"));
            }
            parts.push(agents);
            let waiting: usize = fl.queues.values().map(|q| q.length).sum();
            if waiting > 0 {
                parts.push(format!("{waiting} waiting"));
            }
            if !fl.cycles.is_empty() {
                parts.push(plural(fl.cycles.len(), "deadlock"));
            }
            if !fl.freezes.is_empty() {
                parts.push(plural(fl.freezes.len(), "freeze"));
            }
            if fl.corrupt > 0 {
                parts.push(format!("{} unreadable", fl.corrupt));
            }
        }
        None => parts.push("reading the store…".into()),
    }
    if let Some(e) = &app.error {
        parts.push(format!("error: {}", inert(e)));
    }
    if let Some(fl) = &app.fleet {
        parts.push(inert(&fl.store));
    }
    Line::from(parts.join(" · "))
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn footer(app: &App) -> Line<'static> {
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
            let mut keys = vec!["q quit", "tab pane", "↑↓ move", "/ filter", "enter detail"];
            keys.push("s sort");
            if app.can_act.is_ok() {
                keys.push("r force-release");
                keys.push("f freeze");
            }
            let mut line = keys.join(" · ");
            if !app.filter.is_empty() {
                line = format!("filter: {} · {line}", inert(&app.filter));
            }
            if let Err(why) = &app.can_act {
                line.push_str(&format!(" · read-only ({why})"));
            }
            Line::from(line)
        }
    }
}

/// The columns of `all` whose index is in `keep`, in order.
fn columns<T>(all: Vec<T>, keep: &[usize]) -> Vec<T> {
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, c)| c)
        .collect()
}

/// Of `len` rows in a bordered pane of `area` with `header` lines above the rows, the
/// first to draw, how many, and where the selection is among them: the selected row is
/// always on screen.
fn window(len: usize, selected: usize, area: Rect, header: u16) -> (usize, usize, usize) {
    let fits = usize::from(area.height.saturating_sub(2 + header)).max(1);
    let selected = selected.min(len.saturating_sub(1));
    let first = selected.saturating_sub(fits - 1);
    (first, fits.min(len - first.min(len)), selected - first)
}

fn pane_block(title: String, focused: bool, st: &Styles) -> Block<'static> {
    let b = Block::default().borders(Borders::ALL).title(title);
    if focused {
        b.border_style(st.title()).title_style(st.title())
    } else {
        b
    }
}

fn checkouts(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let rows_data = app.visible_checkouts();
    let title = format!(" Checkouts ({}) · by {} ", rows_data.len(), app.sort.word());
    // A narrow terminal keeps what matters most: whose, for how long, who waits.
    let keep: &[usize] = if area.width < 100 {
        &[0, 1, 4, 7]
    } else {
        &[0, 1, 2, 3, 4, 5, 6, 7, 8]
    };
    let pick = |all: Vec<Cell<'static>>| columns(all, keep);
    let header = Row::new(pick(
        [
            "KEY", "HOLDER", "TOKEN", "HELD", "LEASE", "SLOT", "PATHS", "QUEUE", "REASON",
        ]
        .map(Cell::from)
        .to_vec(),
    ))
    .style(st.title());
    // Only the rows that fit are built: a fleet of 10,000 checkouts draws as fast as ten.
    let (first, shown, sel) = window(rows_data.len(), app.selected[0], area, 1);
    let rows: Vec<Row> = rows_data[first..first + shown]
        .iter()
        .map(|c| {
            let left = c.view.expires_at - now;
            let lease = match c.ending {
                Some(r) => ending_word(r).to_string(),
                None => format!("{} {}", lease_bar(c, now, 8), short(left)),
            };
            Row::new(pick(vec![
                Cell::from(inert(&c.view.key)),
                Cell::from(st.swatch(
                    app,
                    &c.view.agent.id,
                    holder_label(c),
                    st.state(c.holder_state),
                )),
                Cell::from(c.view.token.to_string()),
                Cell::from(short(now - c.view.acquired_at)),
                Cell::from(lease),
                Cell::from(match (c.view.slot, c.view.slots) {
                    (Some(s), Some(n)) => format!("{s}/{n}"),
                    _ => String::new(),
                }),
                Cell::from(inert(&c.view.paths.join(" "))),
                Cell::from(if c.queued > 0 {
                    c.queued.to_string()
                } else {
                    String::new()
                }),
                Cell::from(inert(c.view.reason.as_deref().unwrap_or(""))),
            ]))
        })
        .collect();
    let widths = [
        Constraint::Fill(3),
        Constraint::Fill(5),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(19),
        Constraint::Length(5),
        Constraint::Fill(2),
        Constraint::Length(5),
        Constraint::Fill(2),
    ]
    .to_vec();
    let empty = rows.is_empty();
    let table = Table::new(rows, columns(widths, keep)).header(header);
    let focused = app.focus == Pane::Checkouts;
    table_pane(
        f,
        area,
        table,
        pane_block(title, focused, st),
        focused.then_some(sel),
        st,
    );
    if empty && area.height > 3 {
        let inner = Rect::new(area.x + 2, area.y + 2, area.width.saturating_sub(4), 1);
        let text = if app.fleet.is_some() {
            "No active checkouts."
        } else {
            ""
        };
        f.render_widget(Paragraph::new(text), inner);
    }
}

fn agents(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let list = app.visible_agents();
    let title = format!(" Agents ({}) ", list.len());
    // The host matters only when the fleet spans more than one.
    let hosts: std::collections::BTreeSet<&str> =
        list.iter().map(|a| a.row.host.as_str()).collect();
    let keep: &[usize] = if hosts.len() > 1 {
        &[0, 1, 2, 3, 4, 5, 6]
    } else {
        &[0, 1, 2, 4, 5, 6]
    };
    let pick = |all: Vec<Cell<'static>>| columns(all, keep);
    let header = Row::new(pick(
        [
            "AGENT",
            "STATE",
            "LAST BEAT",
            "HOST",
            "HOLDS",
            "WAITS FOR",
            "STATUS",
        ]
        .map(Cell::from)
        .to_vec(),
    ))
    .style(st.title());
    let (first, shown, sel) = window(list.len(), app.selected[1], area, 1);
    let rows: Vec<Row> = list[first..first + shown]
        .iter()
        .map(|a| {
            let state = match a.row.cause {
                Some(c) if a.row.state == State::Dead => {
                    format!(
                        "dead: {}",
                        serde_json::to_value(c)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    )
                }
                _ => state_word(a.row.state).to_string(),
            };
            Row::new(pick(vec![
                Cell::from(st.swatch(app, &a.row.id, agent_label(a), Style::default())),
                Cell::from(state).style(st.state(a.row.state)),
                Cell::from(match a.row.last_heartbeat {
                    Some(t) => format!("{} ago", short(now - t)),
                    None => "never".into(),
                }),
                Cell::from(inert(&a.row.host)),
                Cell::from(inert(&a.row.checkouts.join(" "))),
                Cell::from(inert(&a.waiting_for().join(" "))),
                Cell::from(inert(a.row.status.as_deref().unwrap_or(""))),
            ]))
        })
        .collect();
    let widths = [
        Constraint::Fill(4),
        Constraint::Length(18),
        Constraint::Length(9),
        Constraint::Fill(1),
        Constraint::Fill(2),
        Constraint::Fill(2),
        Constraint::Fill(2),
    ]
    .to_vec();
    let table = Table::new(rows, columns(widths, keep)).header(header);
    let focused = app.focus == Pane::Agents;
    table_pane(
        f,
        area,
        table,
        pane_block(title, focused, st),
        focused.then_some(sel),
        st,
    );
}

fn waits(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let mut lines: Vec<Line> = Vec::new();
    if let Some(fl) = &app.fleet {
        for cyc in &fl.cycles {
            let mut names: Vec<String> = cyc.iter().map(|a| inert(a)).collect();
            names.push(names[0].clone());
            lines.push(Line::from(Span::styled(
                format!("deadlock: {}", names.join(" → ")),
                st.fg(Color::Red).add_modifier(Modifier::BOLD),
            )));
        }
        for w in fl
            .waits
            .iter()
            .filter(|w| app.matches(&[&w.waiter, &w.key, &w.blocker]))
        {
            let in_cycle = fl
                .cycles
                .iter()
                .any(|c| c.contains(&w.waiter) && c.contains(&w.blocker));
            let text = format!(
                "{} waits for {} on {}",
                inert(&w.waiter),
                inert(&w.blocker),
                inert(&w.key)
            );
            lines.push(if in_cycle {
                Line::from(Span::styled(text, st.fg(Color::Red)))
            } else {
                Line::from(text)
            });
        }
        for fr in &fl.freezes {
            if !app.matches(&[&fr.pattern]) {
                continue;
            }
            lines.push(Line::from(Span::styled(
                format!(
                    "frozen: {} for {} more{}",
                    inert(&fr.pattern),
                    short(fr.until - now),
                    fr.reason
                        .as_deref()
                        .map(|r| format!(" ({})", inert(r)))
                        .unwrap_or_default()
                ),
                st.fg(Color::Cyan),
            )));
        }
        if lines.is_empty() {
            lines.push(Line::from("Nobody waits."));
        }
    }
    let p = Paragraph::new(lines)
        .block(pane_block(" Waits & freezes ".into(), false, st))
        .wrap(Wrap { trim: false });
    f.render_widget(p, area);
}

pub fn event_line(e: &AuditEvent) -> String {
    let mut s = format!(
        "{} {} {} {}",
        e.ts.format("%H:%M:%S"),
        inert(&e.event),
        inert(&e.key),
        inert(&e.agent)
    );
    if let Some(t) = e.token {
        s.push_str(&format!(" token {t}"));
    }
    if let Some(r) = &e.reason {
        s.push_str(&format!(" ({})", cut(&inert(r), 60)));
    }
    if let Some(b) = &e.by {
        s.push_str(&format!(" by {}", inert(b)));
    }
    if let Some(h) = &e.holder {
        s.push_str(&format!(" held by {}", inert(h)));
    }
    s
}

fn events(f: &mut Frame, app: &App, area: Rect, st: &Styles) {
    let list = app.visible_events();
    let (first, shown, sel) = window(list.len(), app.selected[2], area, 0);
    let items: Vec<Row> = list[first..first + shown]
        .iter()
        .map(|e| {
            let style = match e.kind() {
                Some(Event::AutoRelease | Event::ForceRelease | Event::Deadlock) => {
                    st.fg(Color::Red)
                }
                Some(Event::Deny | Event::Queue) => st.fg(Color::Yellow),
                Some(Event::Acquire | Event::Notify) => st.fg(Color::Green),
                _ => Style::default(),
            };
            Row::new(vec![Cell::from(event_line(e))]).style(style)
        })
        .collect();
    let title = format!(" Events ({}) · newest first ", list.len());
    let focused = app.focus == Pane::Events;
    let table = Table::new(items, [Constraint::Fill(1)]);
    table_pane(
        f,
        area,
        table,
        pane_block(title, focused, st),
        focused.then_some(sel),
        st,
    );
}

/// A list pane: its table (rows already cut to what fits) in `block`, with `selected`
/// (among those rows) highlighted when the pane has the focus.
fn table_pane(
    f: &mut Frame,
    area: Rect,
    table: Table,
    block: Block,
    selected: Option<usize>,
    st: &Styles,
) {
    let mut state = TableState::default();
    state.select(selected);
    let table = table.block(block).row_highlight_style(st.selected());
    f.render_stateful_widget(table, area, &mut state);
}

fn detail(f: &mut Frame, app: &App, d: &Detail, area: Rect, st: &Styles, now: Time) {
    let w = area.width.saturating_sub(8).max(20).min(area.width);
    let h = area.height.saturating_sub(4).max(5).min(area.height);
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let (title, lines) = match d {
        Detail::Key { key, notes, why } => (
            format!(" {} ", cut(&inert(key), 60)),
            key_detail(app, key, notes, why, st, now),
        ),
        Detail::Agent { id } => (
            format!(" {} ", cut(&inert(id), 60)),
            agent_detail(app, id, st, now),
        ),
    };
    f.render_widget(Clear, rect);
    let p = Paragraph::new(lines)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .title_bottom(" esc close "),
        )
        .wrap(Wrap { trim: false });
    f.render_widget(p, rect);
}

/// A title line, then the last twenty events `mine` picks, newest first.
fn history<'a>(
    lines: &mut Vec<Line<'a>>,
    app: &App,
    st: &Styles,
    mine: impl Fn(&AuditEvent) -> bool,
) {
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("History", st.title())));
    for e in app.events.iter().rev().filter(|e| mine(e)).take(20) {
        lines.push(Line::from(format!("  {}", event_line(e))));
    }
}

/// Who holds `key` now, each holder's lease, reason and paths.
fn holders_lines(app: &App, key: &str, now: Time) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let held: Vec<&FleetCheckout> = app
        .fleet
        .iter()
        .flat_map(|fl| fl.checkouts.iter())
        .filter(|c| c.view.key == key)
        .collect();
    if held.is_empty() {
        lines.push(Line::from("Free: nobody holds it."));
    }
    for c in held {
        lines.push(Line::from(format!(
            "Held by {} ({}), token {}, since {} ({} ago)",
            holder_label(c),
            state_word(c.holder_state),
            c.view.token,
            c.view.acquired_at.format("%Y-%m-%dT%H:%M:%SZ"),
            short(now - c.view.acquired_at)
        )));
        lines.push(Line::from(match c.ending {
            Some(r) => format!(
                "{} ({}): the next command that meets it ends it",
                ending_word(r),
                r.as_str()
            ),
            None => format!(
                "Lease ends {} (in {})",
                c.view.expires_at.format("%Y-%m-%dT%H:%M:%SZ"),
                short(c.view.expires_at - now)
            ),
        }));
        if let Some(r) = &c.view.reason {
            lines.push(Line::from(format!("Reason: {}", inert(r))));
        }
        if !c.view.paths.is_empty() {
            lines.push(Line::from(format!(
                "Paths: {}",
                inert(&c.view.paths.join(" "))
            )));
        }
    }
    lines
}

fn key_detail(
    app: &App,
    key: &str,
    notes: &Option<std::result::Result<Vec<String>, String>>,
    why: &[String],
    st: &Styles,
    now: Time,
) -> Vec<Line<'static>> {
    let mut lines = holders_lines(app, key, now);
    if let Some(q) = app.fleet.as_ref().and_then(|fl| fl.queues.get(key)) {
        if let Some(r) = &q.reserved_for {
            lines.push(Line::from(format!(
                "Reserved for {} until {}",
                inert(&r.agent),
                r.until.format("%H:%M:%S")
            )));
        }
        if !q.waiters.is_empty() {
            let names: Vec<String> = q.waiters.iter().map(|w| inert(w)).collect();
            lines.push(Line::from(format!("Queue: {}", names.join(", "))));
        }
    }
    if let Some(fr) = app
        .fleet
        .as_ref()
        .and_then(|fl| fl.freezes.iter().find(|fr| fr.covers(key)))
    {
        lines.push(Line::from(format!(
            "Frozen until {} by {}",
            fr.until.format("%H:%M:%S"),
            inert(&fr.by)
        )));
    }
    if !why.is_empty() {
        lines.push(Line::from(""));
        lines.push(Line::from(Span::styled("Why", st.title())));
        for w in why {
            lines.push(Line::from(format!("  {}", inert(w))));
        }
    }
    lines.push(Line::from(""));
    match notes {
        None => lines.push(Line::from("Notes: reading…")),
        Some(Err(e)) => lines.push(Line::from(format!("Notes: {}", inert(e)))),
        Some(Ok(n)) if n.is_empty() => lines.push(Line::from("No notes for the next holder.")),
        Some(Ok(n)) => {
            lines.push(Line::from(Span::styled("Notes", st.title())));
            for note in n {
                lines.push(Line::from(format!("  {}", inert(note))));
            }
        }
    }
    history(&mut lines, app, st, |e| e.key == key);
    lines
}

fn agent_detail(app: &App, id: &str, st: &Styles, now: Time) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let found = app
        .fleet
        .as_ref()
        .and_then(|fl| fl.agents.iter().find(|a| a.row.id == id));
    let Some(a) = found else {
        lines.push(Line::from("No longer listed."));
        history(&mut lines, app, st, |e| {
            e.agent == id || e.by.as_deref() == Some(id)
        });
        return lines;
    };
    let either = |v: &[String]| {
        if v.is_empty() {
            "nothing".to_string()
        } else {
            inert(&v.join(", "))
        }
    };
    lines.push(Line::from(format!(
        "{}: {}{}",
        agent_label(a),
        state_word(a.row.state),
        a.row
            .cause
            .and_then(|c| serde_json::to_value(c).ok())
            .and_then(|v| v.as_str().map(|s| format!(" ({s})")))
            .unwrap_or_default()
    )));
    lines.push(Line::from(format!(
        "Host {}, pid {}, {} heartbeats, last {}",
        inert(&a.row.host),
        a.row
            .pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "unknown".into()),
        a.row.heartbeats,
        a.row
            .last_heartbeat
            .map(|t| format!("{} ago", short(now - t)))
            .unwrap_or_else(|| "never".into())
    )));
    if let Some(s) = &a.row.status {
        lines.push(Line::from(format!("Status: {}", inert(s))));
    }
    lines.push(Line::from(format!("Holds: {}", either(&a.row.checkouts))));
    lines.push(Line::from(format!(
        "Waits for: {}",
        either(a.waiting_for())
    )));
    history(&mut lines, app, st, |e| {
        e.agent == id || e.by.as_deref() == Some(id)
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_drawn_inert() {
        assert_eq!(inert("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(inert("x\u{202e}y\u{2028}z"), "x\\u{202e}y\\u{2028}z");
        assert_eq!(inert("plain ключ"), "plain ключ");
    }

    #[test]
    fn the_selected_row_is_always_drawn() {
        let area = Rect::new(0, 0, 80, 12); // 12 - 2 borders - 1 header = 9 rows fit
        assert_eq!(window(100, 0, area, 1), (0, 9, 0));
        assert_eq!(window(100, 8, area, 1), (0, 9, 8));
        assert_eq!(window(100, 9, area, 1), (1, 9, 8));
        assert_eq!(window(100, 500, area, 1), (91, 9, 8));
        assert_eq!(window(3, 1, area, 1), (0, 3, 1));
        assert_eq!(window(0, 0, area, 1), (0, 0, 0));
    }

    #[test]
    fn short_durations() {
        assert_eq!(short(chrono::Duration::seconds(42)), "42s");
        assert_eq!(short(chrono::Duration::seconds(600)), "10m");
        assert_eq!(short(chrono::Duration::seconds(-5)), "0s");
        assert_eq!(short(chrono::Duration::hours(5)), "5h");
    }
}

//! The sections of `tasklock top` as tables: checkouts, agents, waits and freezes,
//! events. Columns take the width of what they show (up to a cap), the last text column
//! the rest; text too long for its column is cut with `…` (keys and paths in the middle,
//! so that a pattern keeps its `**`). Only the rows that fit are built: a fleet of
//! 10,000 checkouts draws as fast as ten.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table, TableState};

use super::parts::{
    Styles, cut, cut_middle, ending_word, holder_label, inert, lease_bar, pane_block, short,
    state_word, width,
};
use super::{App, Pane, Sort, WaitItem};
use crate::clock::Time;
use crate::store::{AuditEvent, Event};

/// How a column's text is cut.
#[derive(Clone, Copy)]
enum Cut {
    End,
    Middle,
}

/// A column: its heading, its widest (0: the rest of the line), how it is cut, and
/// when it gives room to the last column on a narrow line (0: never, as a lease or a
/// count; the highest first: a path before a name, a name before a key).
struct Col {
    head: String,
    cap: usize,
    cut: Cut,
    gives: u8,
}

fn col(head: &str, cap: usize, cut: Cut) -> Col {
    Col {
        head: head.to_string(),
        cap,
        cut,
        gives: 0,
    }
}

/// A column of names, keys or paths: it gives room to the last, `order` highest first.
fn text_col(head: &str, cap: usize, cut: Cut, order: u8) -> Col {
    Col {
        gives: order,
        ..col(head, cap, cut)
    }
}

/// The narrowest a column that gives room becomes.
const NARROWEST: usize = 12;

/// A cell: its text, its style, and the agent colour drawn before it (`■ `), if any.
struct Text {
    text: String,
    style: Style,
    swatch: Option<Color>,
}

fn plain(text: String) -> Text {
    Text {
        text,
        style: Style::default(),
        swatch: None,
    }
}

/// Each column's width in `inner` columns: what its widest cell (or heading) needs,
/// up to its cap; the column without a cap takes the rest. When that rest is narrow,
/// the columns of paths, names and keys give some back, in their order, down to
/// [`NARROWEST`].
fn widths(inner: usize, cols: &[Col], rows: &[Vec<Text>]) -> Vec<usize> {
    let need = |i: usize| {
        rows.iter()
            .map(|r| width(&r[i].text) + if r[i].swatch.is_some() { 2 } else { 0 })
            .chain([width(&cols[i].head)])
            .max()
            .unwrap_or(0)
    };
    let mut w: Vec<usize> = (0..cols.len())
        .map(|i| match cols[i].cap {
            0 => 0,
            cap => need(i).min(cap),
        })
        .collect();
    let rest_col = cols.iter().position(|c| c.cap == 0);
    let rest = |w: &[usize]| inner.saturating_sub(w.iter().sum::<usize>() + cols.len() - 1);
    if let Some(r) = rest_col {
        let want = need(r).min(10);
        let mut givers: Vec<usize> = (0..cols.len()).filter(|i| cols[*i].gives > 0).collect();
        givers.sort_by_key(|i| std::cmp::Reverse(cols[*i].gives));
        for i in givers {
            let used = w.iter().sum::<usize>() + cols.len() - 1;
            let short = (used + want).saturating_sub(inner);
            w[i] -= short.min(w[i].saturating_sub(NARROWEST));
        }
        w[r] = rest(&w);
    }
    w
}

/// A table of `cols` and `rows` in `inner` columns: headings, cells cut to their column.
fn sized_table(inner: usize, cols: &[Col], rows: Vec<Vec<Text>>, st: &Styles) -> Table<'static> {
    let w = widths(inner, cols, &rows);
    let header = Row::new(
        cols.iter()
            .zip(&w)
            .map(|(c, w)| Cell::from(cut(&c.head, *w)))
            .collect::<Vec<_>>(),
    )
    .style(st.title());
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| {
            Row::new(
                r.into_iter()
                    .zip(cols.iter().zip(&w))
                    .map(|(t, (c, w))| cell(t, c.cut, *w))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let constraints: Vec<Constraint> = w.iter().map(|w| Constraint::Length(*w as u16)).collect();
    Table::new(rows, constraints).header(header)
}

fn cell(t: Text, how: Cut, w: usize) -> Cell<'static> {
    let room = w.saturating_sub(if t.swatch.is_some() { 2 } else { 0 });
    let text = match how {
        Cut::End => cut(&t.text, room),
        Cut::Middle => cut_middle(&t.text, room),
    };
    match t.swatch {
        Some(c) => Cell::from(Line::from(vec![
            Span::styled("■ ", Style::default().fg(c)),
            Span::styled(text, t.style),
        ])),
        None => Cell::from(Span::styled(text, t.style)),
    }
}

/// "process_gone", "silent": a death's cause as the JSON names it.
fn cause_word(c: crate::liveness::Cause) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The agent's own colour (as on the page), when there is colour.
fn swatch(app: &App, st: &Styles, id: &str) -> Option<Color> {
    st.color.then(|| {
        let (r, g, b) = app.colours.rgb(id);
        Color::Rgb(r, g, b)
    })
}

/// Of `len` rows in a bordered pane of `area` with `header` lines above the rows, the
/// first to draw, how many, and where the selection is among them: the selected row is
/// always on screen.
pub fn window(len: usize, selected: usize, area: Rect, header: u16) -> (usize, usize, usize) {
    let fits = usize::from(area.height.saturating_sub(2 + header)).max(1);
    let selected = selected.min(len.saturating_sub(1));
    let first = selected.saturating_sub(fits - 1);
    (first, fits.min(len - first.min(len)), selected - first)
}

/// A section: its table (rows already cut to what fits) in its frame, `sel` (among
/// those rows) highlighted when it has the focus, and how many rows are out of sight.
struct Shown {
    pane: Pane,
    title: String,
    len: usize,
    first: usize,
    shown: usize,
    sel: usize,
}

fn draw_pane(f: &mut Frame, app: &App, area: Rect, table: Table, s: Shown, st: &Styles) {
    let focused = app.focus == s.pane;
    let hidden = (s.first, s.len - s.first - s.shown);
    let mut state = TableState::default();
    state.select(focused.then_some(s.sel));
    let table = table
        .block(pane_block(s.title, focused, hidden, st))
        .row_highlight_style(st.selected());
    f.render_stateful_widget(table, area, &mut state);
}

/// Which heading the sort marks (`▲` ascending, `▼` descending).
fn sort_column(sort: Sort) -> &'static str {
    match sort {
        Sort::Attention => "HOLDER",
        Sort::Key => "KEY",
        Sort::LeaseLeft => "LEASE",
        Sort::Held => "HELD",
    }
}

pub fn checkouts(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let list = app.visible_checkouts();
    let arrow = if app.descending() { "▼" } else { "▲" };
    let title = format!(
        " Checkouts ({}) · by {} {arrow} ",
        list.len(),
        app.sort.word()
    );
    let (first, shown, sel) = window(list.len(), app.selected[0], area, 1);
    let inner = usize::from(area.width.saturating_sub(2));
    let narrow = inner < 98;
    let rows: Vec<Vec<Text>> = list[first..first + shown]
        .iter()
        .map(|c| {
            let lease = match c.ending {
                Some(r) if narrow => ending_word(r).trim_start_matches("ending: ").to_string(),
                Some(r) => ending_word(r).to_string(),
                None => format!(
                    "{} {}",
                    lease_bar(c, now, if narrow { 4 } else { 8 }),
                    short(c.view.expires_at - now)
                ),
            };
            vec![
                plain(inert(&c.view.key)),
                Text {
                    text: holder_label(c),
                    style: st.state(c.holder_state),
                    swatch: swatch(app, st, &c.view.agent.id),
                },
                plain(c.view.token.to_string()),
                plain(short(now - c.view.acquired_at)),
                plain(lease),
                plain(match (c.view.slot, c.view.slots) {
                    (Some(s), Some(n)) => format!("{s}/{n}"),
                    _ => String::new(),
                }),
                plain(inert(&c.view.paths.join(" "))),
                plain(if c.queued > 0 {
                    c.queued.to_string()
                } else {
                    String::new()
                }),
                plain(inert(
                    c.view.worktree.as_ref().map_or("", |w| w.path.as_str()),
                )),
                plain(inert(c.view.reason.as_deref().unwrap_or(""))),
            ]
        })
        .collect();
    let mut cols = vec![
        text_col("KEY", 32, Cut::Middle, 1),
        text_col("HOLDER", 36, Cut::End, 2),
        col("TOKEN", 6, Cut::End),
        col("HELD", 5, Cut::End),
        col("LEASE", 19, Cut::End),
        col("SLOT", 5, Cut::End),
        text_col("PATHS", 40, Cut::Middle, 3),
        col("QUEUE", 5, Cut::End),
        text_col("WORKTREE", 32, Cut::Middle, 4),
        col("REASON", 0, Cut::End),
    ];
    let marked = sort_column(app.sort);
    for c in &mut cols {
        if c.head == marked {
            c.head = format!("{} {arrow}", c.head);
        }
    }
    // A narrow terminal keeps what matters most: what, whose, for how long, which
    // paths, who waits, why; a column nobody has a value in (slots, paths, queue,
    // worktree) is left out.
    let empty = |i: usize| rows.iter().all(|r| r[i].text.is_empty());
    let keep: Vec<usize> = (0..cols.len())
        .filter(|i| !narrow || [0, 1, 4, 6, 7, 9].contains(i))
        .filter(|i| ![5, 6, 7, 8].contains(i) || !empty(*i))
        .collect();
    let (cols, rows) = pick(cols, rows, &keep);
    let nothing = rows.is_empty();
    let table = sized_table(inner, &cols, rows, st);
    let s = Shown {
        pane: Pane::Checkouts,
        title,
        len: list.len(),
        first,
        shown,
        sel,
    };
    draw_pane(f, app, area, table, s, st);
    if nothing && area.height > 3 && app.fleet.is_some() {
        let inner = Rect::new(area.x + 2, area.y + 2, area.width.saturating_sub(4), 1);
        f.render_widget(
            ratatui::widgets::Paragraph::new("No active checkouts."),
            inner,
        );
    }
}

/// The columns of `keep` of `cols` and of each row.
fn pick(cols: Vec<Col>, rows: Vec<Vec<Text>>, keep: &[usize]) -> (Vec<Col>, Vec<Vec<Text>>) {
    fn only<T>(v: Vec<T>, keep: &[usize]) -> Vec<T> {
        v.into_iter()
            .enumerate()
            .filter(|(i, _)| keep.contains(i))
            .map(|(_, c)| c)
            .collect()
    }
    let rows = rows.into_iter().map(|r| only(r, keep)).collect();
    (only(cols, keep), rows)
}

pub fn agents(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let list = app.visible_agents();
    let (first, shown, sel) = window(list.len(), app.selected[1], area, 1);
    let rows: Vec<Vec<Text>> = list[first..first + shown]
        .iter()
        .map(|a| {
            let state = match a.row.cause {
                Some(c) if a.row.state == crate::liveness::State::Dead => {
                    format!("dead: {}", cause_word(c))
                }
                _ if app.deadlocked(&a.row.id) => {
                    format!("{}, deadlocked", state_word(a.row.state))
                }
                _ => state_word(a.row.state).to_string(),
            };
            let who = crate::identity::label(&a.row.id, a.row.name.as_deref(), None);
            vec![
                Text {
                    text: match a.client {
                        Some(client) => format!("{} · {client}", inert(&who)),
                        None => inert(&who),
                    },
                    style: Style::default(),
                    swatch: swatch(app, st, &a.row.id),
                },
                Text {
                    text: state,
                    style: st.state(a.row.state),
                    swatch: None,
                },
                plain(match a.row.last_heartbeat {
                    Some(t) => format!("{} ago", short(now - t)),
                    None => "never".into(),
                }),
                plain(inert(&a.row.host)),
                plain(inert(&a.row.checkouts.join(" "))),
                plain(inert(&a.waiting_for().join(" "))),
                plain(inert(a.row.status.as_deref().unwrap_or(""))),
            ]
        })
        .collect();
    let cols = vec![
        text_col("AGENT", 36, Cut::End, 1),
        col("STATE", 24, Cut::End),
        col("LAST BEAT", 9, Cut::End),
        text_col("HOST", 16, Cut::End, 4),
        text_col("HOLDS", 24, Cut::End, 2),
        text_col("WAITS FOR", 24, Cut::End, 3),
        col("STATUS", 0, Cut::End),
    ];
    // The host matters only when the fleet spans more than one.
    let hosts: std::collections::BTreeSet<&str> =
        list.iter().map(|a| a.row.host.as_str()).collect();
    let keep: Vec<usize> = (0..cols.len())
        .filter(|i| *i != 3 || hosts.len() > 1)
        .collect();
    let (cols, rows) = pick(cols, rows, &keep);
    let table = sized_table(usize::from(area.width.saturating_sub(2)), &cols, rows, st);
    let s = Shown {
        pane: Pane::Agents,
        title: format!(" Agents ({}) · attention first ", list.len()),
        len: list.len(),
        first,
        shown,
        sel,
    };
    draw_pane(f, app, area, table, s, st);
}

pub fn waits(f: &mut Frame, app: &App, area: Rect, st: &Styles, now: Time) {
    let items = app.wait_items();
    let inner = usize::from(area.width.saturating_sub(2));
    let (first, shown, sel) = window(items.len(), app.selected[2], area, 0);
    let mut rows: Vec<Row> = items[first..first + shown]
        .iter()
        .map(|item| {
            let (text, style) = match item {
                WaitItem::Cycle(cycle) => {
                    let mut names: Vec<String> = cycle.iter().map(|a| app.who(a)).collect();
                    names.push(names[0].clone());
                    (
                        format!("deadlock: {}", names.join(" → ")),
                        st.fg(Color::Red).add_modifier(Modifier::BOLD),
                    )
                }
                WaitItem::Wait { wait, in_cycle } => (
                    format!(
                        "{} waits for {} on {}",
                        app.who(&wait.waiter),
                        app.who(&wait.blocker),
                        wait.key
                    ),
                    if *in_cycle {
                        st.fg(Color::Red)
                    } else {
                        st.fg(Color::Yellow)
                    },
                ),
                WaitItem::Reserved { key, reservation } => (
                    format!(
                        "{key} reserved for {} for {} more",
                        app.who(&reservation.agent),
                        short(reservation.until - now)
                    ),
                    Style::default(),
                ),
                WaitItem::Frozen(fr) => (
                    format!(
                        "frozen: {} for {} more{}",
                        fr.pattern,
                        short(fr.until - now),
                        fr.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    ),
                    st.fg(Color::Cyan),
                ),
            };
            Row::new(vec![Cell::from(cut(&inert(&text), inner))]).style(style)
        })
        .collect();
    if items.is_empty() && app.fleet.is_some() {
        rows.push(Row::new(vec![Cell::from(
            "Nobody waits; nothing is frozen.",
        )]));
    }
    let table = Table::new(rows, [Constraint::Fill(1)]);
    let s = Shown {
        pane: Pane::Waits,
        title: format!(" Waits & freezes ({}) ", items.len()),
        len: items.len(),
        first,
        shown,
        sel,
    };
    draw_pane(f, app, area, table, s, st);
}

/// An event as a line: its time, then who did what (render::events, the CLI's words).
pub fn event_line(e: &AuditEvent) -> String {
    format!(
        "{} {}",
        e.ts.format("%H:%M:%S"),
        inert(&crate::render::events::sentence(e))
    )
}

pub fn events(f: &mut Frame, app: &App, area: Rect, st: &Styles) {
    let list = app.visible_events();
    let inner = usize::from(area.width.saturating_sub(2));
    let (first, shown, sel) = window(list.len(), app.selected[3], area, 0);
    let items: Vec<Row> = list[first..first + shown]
        .iter()
        .map(|e| {
            let style = match e.kind() {
                Some(Event::AutoRelease | Event::ForceRelease | Event::Deadlock) => {
                    st.fg(Color::Red)
                }
                Some(Event::Deny | Event::Queue | Event::Refused) => st.fg(Color::Yellow),
                Some(Event::Acquire | Event::Handoff) => st.fg(Color::Green),
                Some(Event::Freeze | Event::Unfreeze) => st.fg(Color::Cyan),
                _ => Style::default(),
            };
            Row::new(vec![Cell::from(cut(&event_line(e), inner))]).style(style)
        })
        .collect();
    let table = Table::new(items, [Constraint::Fill(1)]);
    let s = Shown {
        pane: Pane::Events,
        title: format!(" Events ({}) · newest first ", list.len()),
        len: list.len(),
        first,
        shown,
        sel,
    };
    draw_pane(f, app, area, table, s, st);
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn columns_take_what_they_show_and_the_last_the_rest() {
        let cols = [
            text_col("KEY", 32, Cut::Middle, 1),
            text_col("HOLDER", 30, Cut::End, 2),
            col("REASON", 0, Cut::End),
        ];
        let rows = vec![vec![
            plain("task-1".into()),
            plain("erin".into()),
            plain("fix the login redirect".into()),
        ]];
        assert_eq!(widths(60, &cols, &rows), [6, 6, 46]);
    }
}

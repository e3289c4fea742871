//! A key's or an agent's detail, drawn over the sections: who holds the key, its queue,
//! its freeze, what `tasklock why` says of it (its next step in the CLI's own words),
//! its notes and its history; an agent's state, what it holds and waits for.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use super::parts::{Styles, cut, ending_word, holder_label, inert, short, state_word};
use super::tables::event_line;
use super::{App, Detail};
use crate::clock::Time;
use crate::engine::fleet::FleetCheckout;
use crate::store::AuditEvent;

pub fn detail(f: &mut Frame, app: &App, d: &Detail, area: Rect, st: &Styles, now: Time) {
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
        if let Some(w) = &c.view.worktree {
            lines.push(Line::from(format!(
                "Worktree: {} on branch {}",
                inert(&w.path),
                inert(&w.branch)
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
                inert(&app.who(&r.agent)),
                r.until.format("%H:%M:%S")
            )));
        }
        if !q.waiters.is_empty() {
            let names: Vec<String> = q.waiters.iter().map(|w| inert(&app.who(w))).collect();
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
            inert(&app.who(&fr.by))
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
        {
            let who = inert(&app.who(&a.row.id));
            match a.client {
                Some(client) => format!("{who} · {client}"),
                None => who,
            }
        },
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

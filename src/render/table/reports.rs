//! The reports that have a form for people: `list`, `status`, `agents`, a checkout and
//! `release`/`renew`/`leave`. `None`: this report is printed as its markdown.

use std::fmt::Write;

use super::{Fit, Printer, Table};
use crate::duration::humanize;
use crate::error::Outcome;
use crate::liveness::State;
use crate::render::Invocation;
use crate::render::markdown::{self, queue_words, reaped_words, state_words};
use crate::report::*;

/// "2 checkouts · holder a1 · ownership unproven": the count and what every row shares.
fn heading(first: String, said: Vec<String>) -> String {
    let mut out = first;
    for s in said {
        let _ = write!(out, " · {s}");
    }
    out.push_str("\n\n");
    out
}

fn plural(n: usize, one: &str) -> String {
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

/// "a2", or "a2 +3" with three more behind it.
fn waiting(q: &QueueView) -> String {
    match q.waiters.split_first() {
        Some((next, [])) => next.clone(),
        Some((next, rest)) => format!("{next} +{}", rest.len()),
        None => String::new(),
    }
}

fn ownership(proven: bool) -> String {
    (if proven { "secret" } else { "unproven" }).into()
}

pub(super) fn list(r: &ListReport, t: &Printer) -> Option<String> {
    if r.checkouts.is_empty() || !r.corrupt.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        ("Key", Fit::Keep),
        ("Holder", Fit::Keep),
        ("Host", Fit::Keep),
        ("Ownership", Fit::Keep),
        ("Since", Fit::Keep),
        ("Lease ends", Fit::Keep),
        ("Queue", Fit::Cut),
        ("Paths", Fit::Cut),
        ("Worktree", Fit::Cut),
        ("Reason", Fit::Cut),
    ]);
    for c in &r.checkouts {
        let slot = match (c.slot, c.slots) {
            (Some(n), Some(of)) => format!(" ({n}/{of})"),
            _ => String::new(),
        };
        let queue = r.queues.get(&c.key).filter(|q| q.length > 0);
        table.row(vec![
            format!("{}{slot}", c.key),
            c.agent.label(),
            c.agent.host.clone(),
            ownership(c.proven),
            t.ago(&c.acquired_at),
            t.when(&c.expires_at),
            queue.map(waiting).unwrap_or_default(),
            c.paths.join(", "),
            c.worktree
                .as_ref()
                .map(markdown::shown_path)
                .unwrap_or_default(),
            c.reason.clone().unwrap_or_default(),
        ]);
    }
    let said = table.said_once(&["Holder", "Host", "Ownership"]);
    let mine = r.mine.as_ref().map(|m| format!(" held by {m}"));
    let mut out = heading(
        format!(
            "{}{}",
            plural(r.checkouts.len(), "checkout"),
            mine.unwrap_or_default()
        ),
        said,
    );
    out.push_str(&table.render(t.width()));
    reserved(&mut out, r, t);
    Some(out)
}

/// Free keys held back for the head of their queue.
fn reserved(out: &mut String, r: &ListReport, t: &Printer) {
    let mut table = Table::new(&[
        ("Reserved key", Fit::Keep),
        ("For", Fit::Keep),
        ("Until", Fit::Keep),
        ("Queue", Fit::Cut),
    ]);
    for (k, q) in &r.queues {
        for res in q.reserved_for.iter().chain(&q.also_reserved) {
            table.row(vec![
                k.clone(),
                res.agent.clone(),
                t.when(&res.until),
                waiting(q),
            ]);
        }
    }
    if r.queues.values().any(|q| q.reserved_for.is_some()) {
        out.push('\n');
        out.push_str(&table.render(t.width()));
    }
}

pub(super) fn status(r: &StatusReport, t: &Printer) -> Option<String> {
    if !r.holders.is_empty() || r.outcome == Outcome::Corrupt {
        return None;
    }
    let mut out = String::new();
    match &r.checkout {
        Some(c) => {
            let _ = writeln!(
                out,
                "{} is held by {} (token {}, {})",
                c.key,
                c.agent.label(),
                c.token,
                if c.proven {
                    "bound to its secret"
                } else {
                    "unproven"
                }
            );
            let _ = writeln!(
                out,
                "since {} · lease ends {} · host {}",
                t.when(&c.acquired_at),
                t.when(&c.expires_at),
                c.agent.host
            );
            if let Some(reason) = &c.reason {
                let _ = writeln!(out, "reason: {}", markdown::visible(reason));
            }
            if !c.paths.is_empty() {
                let _ = writeln!(out, "paths: {}", c.paths.join(", "));
            }
            if let Some(w) = &c.worktree {
                let _ = writeln!(
                    out,
                    "worktree: {} (branch {})",
                    markdown::shown_path(w),
                    w.branch
                );
            }
        }
        None => {
            let _ = writeln!(out, "{} is free", r.key);
        }
    }
    if r.queue.length > 0 || r.queue.reserved_for.is_some() {
        let _ = write!(out, "queue: {}", queue_words(&r.queue));
        if let Some(res) = &r.queue.reserved_for {
            let _ = write!(
                out,
                " · reserved for {} until {}",
                res.agent,
                t.when(&res.until)
            );
        }
        out.push('\n');
    }
    if let Some(e) = &r.released {
        let _ = writeln!(
            out,
            "ended just now: {}",
            t.localize(&reaped_words(e, &r.now))
        );
    }
    for n in &r.notes {
        let _ = writeln!(
            out,
            "note {} {}: {}",
            t.ago(&n.ts),
            n.agent,
            markdown::visible(&n.text)
        );
    }
    Some(out)
}

pub(super) fn agents(r: &AgentsReport, t: &Printer) -> Option<String> {
    if r.agents.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        ("Agent", Fit::Keep),
        ("Name", Fit::Keep),
        ("Host", Fit::Keep),
        ("State", Fit::Keep),
        ("Last heartbeat", Fit::Keep),
        ("Checkouts", Fit::Cut),
        ("Status", Fit::Cut),
    ]);
    for a in &r.agents {
        table.row(vec![
            a.id.clone(),
            a.name.clone().unwrap_or_default(),
            a.host.clone(),
            state_words(a),
            a.last_heartbeat
                .map(|h| t.ago(&h))
                .unwrap_or_else(|| "never".into()),
            a.holds_and_waits(|keys| keys.join(", ")),
            a.status.clone().unwrap_or_default(),
        ]);
    }
    let count = |s: State| r.agents.iter().filter(|a| a.state == s).count();
    let said = table.said_once(&["Host", "State"]);
    let first = format!(
        "{}: {} alive, {} stalled, {} dead",
        plural(r.agents.len(), "agent"),
        count(State::Alive),
        count(State::Stalled),
        count(State::Dead)
    );
    let mut out = heading(first, said);
    out.push_str(&table.render(t.width()));
    for e in &r.ended {
        let _ = writeln!(
            out,
            "ended {} of {} (token {}): {}",
            e.key,
            e.agent,
            e.token,
            e.reason.as_str()
        );
    }
    if r.hidden > 0 {
        let _ = writeln!(out, "{} older dead not shown (--all shows them)", r.hidden);
    }
    Some(out)
}

pub(super) fn checkout(r: &CheckoutReport, inv: &Invocation, t: &Printer) -> Option<String> {
    match (r.outcome, &r.checkout) {
        (Outcome::Granted | Outcome::Renewed | Outcome::AlreadyHeld, Some(c)) => {
            let what = match r.outcome {
                Outcome::AlreadyHeld => "Already yours:",
                _ => "Checked out",
            };
            let mut out = format!(
                "{what} {} (token {}) until {}\n",
                r.key,
                c.token,
                t.when(&c.expires_at)
            );
            if let Some(prev) = &r.took_over {
                let _ = writeln!(
                    out,
                    "took over from {}",
                    t.localize(&reaped_words(prev, &r.now))
                );
            }
            let _ = writeln!(
                out,
                "release with {}",
                inv.cmd("release", &r.key).trim_matches('`')
            );
            Some(out)
        }
        // The verdict and what to do: the details are `status`'s.
        (Outcome::Conflict, Some(_)) if r.holders.is_empty() => {
            let md = markdown::checkout(r, inv);
            Some(t.localize(&verdict_and_next(&md)))
        }
        _ => None,
    }
}

/// The markdown's first line and its `Next:` paragraph.
fn verdict_and_next(md: &str) -> String {
    let first = md.lines().next().unwrap_or_default();
    let next = md.lines().rev().find(|l| l.starts_with("Next:"));
    match next {
        Some(n) => format!("{first}\n{n}\n"),
        None => format!("{first}\n"),
    }
}

pub(super) fn keys(r: &KeysReport, t: &Printer) -> Option<String> {
    // What became of a worktree, and how to finish a kept one: the markdown says it.
    if r.results.is_empty() || !r.worktrees.is_empty() {
        return None;
    }
    let mut out = String::new();
    for k in &r.results {
        let line = match (k.outcome, &k.checkout) {
            (Outcome::Released, Some(c)) => {
                let held = (r.now - c.acquired_at).num_seconds().max(0).unsigned_abs();
                format!("Released {} after {}", k.key, humanize(held))
            }
            (Outcome::Renewed, Some(c)) => {
                format!("Renewed {} until {}", k.key, t.when(&c.expires_at))
            }
            (Outcome::LeftQueue, _) => format!("Left the queue of {}", k.key),
            _ => return None,
        };
        let _ = writeln!(out, "{line}");
    }
    if let Some(n) = &r.note {
        let _ = writeln!(out, "note: {}", markdown::visible(n));
    }
    Some(out)
}

pub(super) fn inbox(r: &InboxReport, t: &Printer) -> Option<String> {
    if r.messages.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        ("Time", Fit::Keep),
        ("Type", Fit::Keep),
        ("Key", Fit::Keep),
        ("From", Fit::Keep),
        ("Message", Fit::Cut),
    ]);
    for m in &r.messages {
        table.row(vec![
            t.ago(&m.ts),
            m.kind.to_string(),
            m.key.clone(),
            m.from.clone().unwrap_or_else(|| "tasklock".into()),
            t.localize(&m.body),
        ]);
    }
    let said = table.said_once(&["Type", "From"]);
    let read = if r.marked_read {
        "now marked read"
    } else {
        "left unread"
    };
    let first = format!("{} ({read})", plural(r.messages.len(), "unread message"));
    let mut out = heading(first, said);
    out.push_str(&table.render(t.width()));
    Some(out)
}

/// `backlog`: the keys in line, then the claimed ones and who claimed them.
pub(super) fn backlog(r: &BacklogReport, t: &Printer) -> Option<String> {
    let counts = format!("{} ready, {} claimed", r.ready, r.claimed);
    let first = match (r.added, &r.removed) {
        (Some(n), _) => format!("Added {} to the backlog: {counts}", plural(n, "key")),
        (_, Some(gone)) => format!(
            "Removed {} from the backlog: {counts}",
            plural(gone.len(), "key")
        ),
        _ if r.ready == 0 && r.claimed == 0 => return None,
        _ => format!("Backlog: {counts}"),
    };
    let mut table = Table::new(&[
        ("Next", Fit::Keep),
        ("Key", Fit::Keep),
        ("Claimed by", Fit::Keep),
    ]);
    for (i, k) in r.next.iter().enumerate() {
        table.row(vec![(i + 1).to_string(), k.key.clone(), String::new()]);
    }
    for k in r.claims.iter().flatten() {
        let by = k.claimed_by.clone().unwrap_or_else(|| "-".into());
        table.row(vec![String::new(), k.key.clone(), by]);
    }
    let mut out = heading(first, Vec::new());
    if !table.is_empty() {
        out.push_str(&table.render(t.width()));
    }
    let more = r.ready.saturating_sub(r.next.len() as u64);
    if more > 0 {
        let _ = writeln!(out, "…and {more} more ready");
    }
    Some(out)
}

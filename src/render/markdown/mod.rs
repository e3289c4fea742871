//! Markdown for agents: a one-line verdict, the details, then what to do next.

use std::fmt::Write;

use super::Invocation;
use crate::clock::{Time, with_relative};
use crate::error::{Outcome, UPGRADE, newer_format};
use crate::key::Line;
use crate::liveness::{Cause, State};
use crate::report::ReapReason;
use crate::report::*;
use crate::store::{AuditEvent, EndHow, Event, Freeze, MessageKind, Note};

mod agents;
mod backlog;
mod checkout;
mod commit;
mod keys;
mod setup;
mod state;
mod worktrees;

pub(in crate::render) use agents::state_words;
use agents::*;
use backlog::*;
pub(in crate::render) use checkout::checkout;
use checkout::*;
use commit::*;
use keys::*;
use setup::*;
use state::*;
pub use state::{AUDIT_HEADER, audit_row, why_next};
pub(in crate::render) use worktrees::shown_path;
use worktrees::*;

pub fn report(r: &Report, inv: &Invocation) -> String {
    match r {
        Report::Checkout(r) => checkout(r, inv),
        Report::Keys(r) => keys(r, inv),
        Report::Status(r) => status(r, inv),
        Report::List(r) => list(r, inv),
        Report::Verify(r) => verify(r),
        Report::Heartbeat(r) => heartbeat(r),
        Report::Agents(r) => agents(r),
        Report::Note(r) => note(r, inv),
        Report::Give(r) => give(r, inv),
        Report::Watch(r) => watch(r),
        Report::Run(r) => run(r),
        Report::Any(r) => any(r, inv),
        Report::Next(r) => next(r, inv),
        Report::Backlog(r) => backlog(r, inv),
        Report::Inbox(r) => inbox(r),
        Report::Init(r) => init(r, inv),
        Report::Freeze(r) => freeze(r, inv),
        Report::Why(r) => why(r, inv),
        Report::Audit(r) => audit(r),
        Report::Doctor(r) => doctor(r),
        Report::Guard(r) => guard(r, inv),
        Report::Stage(r) => stage(r, inv),
        Report::Setup(r) => setup(r, inv),
        Report::Worktrees(r) => worktrees(r, inv),
    }
}

/// An inline code span that survives backticks in the text.
pub fn code(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if longest > 0 || s.starts_with(' ') || s.ends_with(' ') {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

/// A code span inside a table cell. Backslashes are literal in a code span, so only the
/// cell separator `|` is escaped (GFM reads `\|` as `|` even inside code). A control or
/// deceptive character (a file name may hold one) is shown as its code point, `\u{a}`,
/// so that it neither breaks the table nor turns text around.
pub fn code_cell(s: &str) -> String {
    code(&visible(s)).replace('|', "\\|")
}

/// `s` with its control and deceptive characters written as `\u{…}`.
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| c.is_control() || crate::error::deceptive(c);
    if !s.chars().any(hidden) {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// Text safe inside a table cell.
pub fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

fn checkout_lines(out: &mut String, c: &CheckoutView, now: &Time) {
    let _ = writeln!(out, "- Holder: {}", c.agent.label());
    if let Some(p) = &c.agent.parent {
        let _ = writeln!(out, "- Subagent of session: {}", code(p));
    }
    let _ = writeln!(out, "- Host: {}", c.agent.host);
    if let (Some(n), Some(of)) = (c.slot, c.slots) {
        let _ = writeln!(out, "- Slot: {n} of {of}");
    }
    if !c.paths.is_empty() {
        let _ = writeln!(out, "- Paths: {}", code_list(&c.paths));
    }
    if let Some(w) = &c.worktree {
        let _ = writeln!(
            out,
            "- Worktree: {} on branch {}",
            code(&shown_path(w)),
            code(&w.branch)
        );
    }
    let _ = writeln!(out, "- Fencing token: {}", c.token);
    let _ = writeln!(out, "- Since: {}", with_relative(&c.acquired_at, now));
    if c.renewed_at != c.acquired_at {
        let _ = writeln!(out, "- Renewed: {}", with_relative(&c.renewed_at, now));
    }
    let _ = writeln!(out, "- Lease ends: {}", with_relative(&c.expires_at, now));
    let _ = writeln!(
        out,
        "- Reason: {}",
        c.reason.as_deref().unwrap_or("(none given)")
    );
    let _ = writeln!(
        out,
        "- Ownership: {}",
        if c.proven {
            "bound to the holder's secret"
        } else {
            "unproven (made without a secret: any caller naming the holder can act for it)"
        }
    );
}

/// `a`, `b` as code spans.
fn code_list(items: &[String]) -> String {
    items.iter().map(|p| code(p)).collect::<Vec<_>>().join(", ")
}

/// The refusal of a caller that names a holder bound to a secret it did not give.
fn secret_refused_words(k: &str, c: Option<&CheckoutView>) -> String {
    let holder = c.map(|c| c.agent.label()).unwrap_or_default();
    format!(
        "Not the holder: {k} is bound to the secret of {holder}, and this command did not give it (TASKLOCK_SECRET is missing or another)."
    )
}

const SECRET_NEXT: &str = "Next: only that agent's own session can act on it (its hooks set TASKLOCK_SECRET); another agent cannot, whatever id it names. If you are not that agent, work on something else or queue for the key; when its holder ends, the checkout ends with it.";

/// "is frozen by ops until 2026-… (in 2h), by the freeze on `deploy://*`: release 1.2".
fn freeze_words(f: &Freeze, key: &str, now: &Time) -> String {
    let scope = if f.pattern != key {
        format!(", by the freeze on {}", code(&f.pattern))
    } else {
        String::new()
    };
    let why = f
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!(
        "is frozen by {} until {}{scope}{why}",
        label(&f.by, f.name.as_deref()),
        with_relative(&f.until, now)
    )
}

pub(in crate::render) fn queue_words(q: &QueueView) -> String {
    match q.waiters.first() {
        Some(next) => format!(
            "{} waiting (next: {next}{})",
            q.length,
            crate::identity::other_user_suffix(q.waiter_users.first().and_then(Option::as_ref))
        ),
        None => "0 waiting".into(),
    }
}

/// "agent-a (token 1), whose lease ran out 2026-… (5m ago)".
pub(in crate::render) fn reaped_words(p: &Reaped, now: &Time) -> String {
    let why = match p.reason {
        ReapReason::Timeout => format!("whose lease ran out {}", with_relative(&p.expires_at, now)),
        ReapReason::AgentDeath => match p.cause {
            Some(Cause::ProcessGone) => "whose agent is dead (its process is gone)".to_string(),
            Some(Cause::PidReused) => {
                "whose agent is dead (its pid now belongs to another process)".to_string()
            }
            Some(Cause::Silent) => "whose agent is dead (its heartbeats stopped)".to_string(),
            Some(Cause::Ended) => "whose agent has ended".to_string(),
            None => "whose agent is dead".to_string(),
        },
        ReapReason::SessionEnd => "whose session ended".to_string(),
        ReapReason::SubagentEnd => "whose subagent stopped".to_string(),
    };
    format!("{} (token {}), {why}", p.agent.label(), p.token)
}

/// "agent-a (token 3) released it 2026-… (5m ago)", or how else its checkout ended.
fn previous_words(p: &Previous, now: &Time) -> Option<String> {
    let agent = p.agent.as_ref()?;
    let when = p
        .ended_at
        .map(|t| with_relative(&t, now))
        .unwrap_or_default();
    let by = p.by.as_deref();
    let how = match p.ended {
        Some(EndHow::Released) => format!("released it {when}"),
        Some(EndHow::ForceReleased) => {
            format!("{} force-released it {when}", by.unwrap_or("another agent"))
        }
        Some(EndHow::Timeout) => match by {
            Some(b) => format!("its lease ran out; {b} ended it {when}"),
            None => format!("its lease ran out; it ended {when}"),
        },
        Some(EndHow::AgentDeath) => {
            let why = match p.cause.as_deref() {
                Some("process_gone") => "its process was gone",
                Some("pid_reused") => "its pid belonged to another process",
                Some("silent") => "its heartbeats had stopped",
                Some("ended") => "it had ended",
                _ => "it was judged dead",
            };
            match by {
                Some(b) => format!("{why}; {b} ended its checkout {when}"),
                None => format!("{why}; its checkout ended {when}"),
            }
        }
        Some(EndHow::SessionEnd) => format!("its session ended {when}"),
        Some(EndHow::SubagentEnd) => format!("the subagent stopped {when}"),
        Some(EndHow::Other) | None => format!("its checkout ended {when}"),
    };
    let token = p.token.map(|t| format!(" (token {t})")).unwrap_or_default();
    Some(format!("{}{token}, {how}", agent.label()))
}

fn notes_lines(out: &mut String, notes: &[Note], now: &Time) {
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(out, "- Recent notes:");
    for n in notes {
        let _ = writeln!(
            out,
            "  - {} {}: {}",
            with_relative(&n.ts, now),
            n.agent,
            n.text
        );
    }
}

fn outcome_words(o: Outcome) -> &'static str {
    match o {
        Outcome::Granted => "granted",
        Outcome::AlreadyHeld => "already held by you",
        Outcome::Renewed => "renewed",
        Outcome::Released => "released",
        Outcome::ForceReleased => "force-released",
        Outcome::Valid => "valid",
        Outcome::Noted => "noted",
        Outcome::Free => "free",
        Outcome::Held => "held",
        Outcome::Conflict => "held by another agent",
        Outcome::Frozen => "frozen",
        Outcome::Deadlock => "deadlock",
        Outcome::AgentGone => "stopped waiting: your agent's process is gone",
        Outcome::NoSuchCheckout => "no such checkout",
        Outcome::NotHolder => "not the holder",
        Outcome::SecretRefused => "refused: not the holder's secret",
        Outcome::StaleToken => "stale token",
        Outcome::LeaseLost => "lease lost",
        Outcome::Corrupt => "corrupt record (see below)",
        Outcome::LeftQueue => "left its queue",
        Outcome::NotQueued => "not in its queue",
        Outcome::BacklogEmpty => "the backlog is empty",
        Outcome::Given => "given",
        Outcome::UnknownAgent => "no such agent",
        Outcome::AgentDead => "the receiver has ended or is dead",
        Outcome::ReceiverHolds => "the receiver already holds a slot",
    }
}

fn key_list(keys: &[String]) -> String {
    if keys.is_empty() {
        return "-".into();
    }
    keys.iter().map(|k| code(k)).collect::<Vec<_>>().join(", ")
}

fn label(id: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("{id} ({n})"),
        None => id.to_string(),
    }
}

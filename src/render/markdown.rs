//! Markdown for agents: a one-line verdict, the details, then what to do next.

use std::fmt::Write;

use super::Invocation;
use crate::clock::{Time, with_relative};
use crate::error::{Outcome, UPGRADE, newer_format, shell_quote};
use crate::liveness::{Cause, State};
use crate::report::ReapReason;
use crate::report::*;
use crate::store::{AuditEvent, EndHow, Freeze, MessageKind, Note};

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
        Report::Watch(r) => watch(r),
        Report::Run(r) => run(r),
        Report::Any(r) => any(r, inv),
        Report::Inbox(r) => inbox(r),
        Report::Init(r) => init(r, inv),
        Report::Freeze(r) => freeze(r, inv),
        Report::Why(r) => why(r, inv),
        Report::Audit(r) => audit(r),
        Report::Doctor(r) => doctor(r),
        Report::Guard(r) => guard(r, inv),
        Report::Stage(r) => stage(r, inv),
        Report::Setup(r) => setup(r, inv),
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
/// cell separator `|` is escaped (GFM reads `\|` as `|` even inside code).
pub fn code_cell(s: &str) -> String {
    code(s).replace('|', "\\|")
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

/// The checkouts whose paths are in the way, as a table.
fn overlaps_table(out: &mut String, overlaps: &[OverlapView], now: &Time) {
    let _ = writeln!(
        out,
        "| Held by | Key | Their path | Yours | Both cover | Until |\n|---|---|---|---|---|---|"
    );
    for o in overlaps {
        let until = with_relative(&o.until, now);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&o.agent.label()),
            code_cell(&o.key),
            code_cell(&o.theirs),
            code_cell(&o.mine),
            code_cell(&o.witness),
            if o.reserved {
                format!("reserved for the head of its queue until {until}")
            } else {
                until
            }
        );
    }
}

/// The refusal of a caller that names a holder bound to a secret it did not give.
fn secret_refused_words(k: &str, c: Option<&CheckoutView>) -> String {
    let holder = c.map(|c| c.agent.label()).unwrap_or_default();
    format!(
        "Not the holder: {k} is bound to the secret of {holder}, and this command did not give it (TASKLOCK_SECRET is missing or another)."
    )
}

const SECRET_NEXT: &str = "Next: only that agent's own session can act on it (its hooks set TASKLOCK_SECRET); another agent cannot, whatever id it names. If you are not that agent, work on something else or queue for the key; when its holder ends, the checkout ends with it.";

fn checkout(r: &CheckoutReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    match (r.outcome, &r.checkout) {
        (Outcome::SecretRefused, c) => {
            let _ = writeln!(out, "{}", secret_refused_words(&k, c.as_ref()));
            let _ = writeln!(out, "\n{SECRET_NEXT}");
        }
        (Outcome::Deadlock, _) => {
            let _ = writeln!(
                out,
                "Deadlock: waiting for {k} would close a wait-for cycle; you were not queued."
            );
            let _ = writeln!(out, "\n- Cycle: {}", cycle_words(&r.cycle));
            let _ = writeln!(
                out,
                "\nNext: release one of the keys you hold that others wait for ({}), or work on something else; never wait in a cycle.",
                inv.code("release KEY")
            );
        }
        (Outcome::AgentGone, holder) => {
            let _ = writeln!(
                out,
                "Stopped waiting: your agent's process is gone, so {k} will not be handed to you; you are out of its queue."
            );
            if let Some(c) = holder {
                out.push('\n');
                checkout_lines(&mut out, c, &r.now);
            }
            let _ = writeln!(
                out,
                "\nNext: nothing, if the agent has ended. If it is still at work, register its live process ({}) and wait again.",
                inv.code("heartbeat --pid PID")
            );
        }
        (Outcome::Frozen, holder) => {
            if let Some(f) = &r.frozen {
                let _ = writeln!(out, "Frozen: {k} {}.", freeze_words(f, &r.key, &r.now));
            } else {
                let _ = writeln!(out, "Frozen: {k} cannot be checked out now.");
            }
            if let Some(c) = holder {
                out.push('\n');
                checkout_lines(&mut out, c, &r.now);
                let _ = writeln!(
                    out,
                    "- The holder keeps it until its lease ends, but cannot renew while frozen."
                );
            }
            let pattern = r
                .frozen
                .as_ref()
                .map(|f| f.pattern.as_str())
                .unwrap_or(&r.key);
            let _ = writeln!(
                out,
                "\nNext: work on something else; the freeze ends by itself. Only if it must end early: {} (audited).",
                inv.cmd("unfreeze", pattern)
            );
        }
        (Outcome::Conflict, holder) if !r.overlaps.is_empty() => {
            match holder {
                Some(c) => {
                    let _ = writeln!(
                        out,
                        "Conflict: the paths you added to {k} overlap checkouts of other agents; your checkout of {k} is unchanged (token {}).",
                        c.token
                    );
                }
                None if r.args().starts_with("--path") => {
                    let _ = writeln!(
                        out,
                        "Conflict: the paths of {k} overlap checkouts of other agents; nothing was checked out."
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "Conflict: the paths asked for with {k} overlap checkouts of other agents; nothing was checked out."
                    );
                }
            }
            out.push('\n');
            overlaps_table(&mut out, &r.overlaps, &r.now);
            out.push('\n');
            let _ = writeln!(out, "- Queue: {} waiting", r.queue_length);
            if let Some(p) = r.position {
                let _ = writeln!(out, "- Your place in the queue: {p}");
            }
            if r.push_wake {
                out.push_str(push_wake_line(r.push_via.as_deref()));
            }
            if let Some(prev) = &r.took_over {
                let _ = writeln!(out, "- Ended: {}", reaped_words(prev, &r.now));
            }
            let next = match (r.position, holder) {
                (Some(_), _) => format!(
                    "Next: work on other files; when the paths are free, your inbox says so ({}) and they are held for you for the handoff grace. Or block until then with {}.",
                    inv.code("inbox"),
                    inv.code(&format!("checkout {} --wait", r.args()))
                ),
                (None, _) => format!(
                    "Next: work on other files, or {} to be told when they free up; do not retry in a loop.",
                    inv.code(&format!("checkout {} --queue", r.args()))
                ),
            };
            let _ = writeln!(out, "\n{next}");
        }
        (Outcome::Conflict, holder) => {
            match (&r.reserved_for, holder) {
                _ if !r.holders.is_empty() || r.slots.is_some() => {
                    slots_taken(&mut out, r);
                }
                (Some(res), None) => {
                    let _ = writeln!(
                        out,
                        "Reserved: {k} is free but reserved for {}, the head of its queue, until {}.",
                        res.agent,
                        with_relative(&res.until, &r.now)
                    );
                    out.push('\n');
                }
                (_, Some(c)) => {
                    let _ = writeln!(
                        out,
                        "Conflict: {k} is held by {}; its lease ends {}.",
                        c.agent.label(),
                        with_relative(&c.expires_at, &r.now)
                    );
                    out.push('\n');
                    checkout_lines(&mut out, c, &r.now);
                }
                (None, None) => {
                    let _ = writeln!(out, "Conflict: {k} cannot be taken now.");
                    out.push('\n');
                }
            }
            let _ = writeln!(out, "- Queue: {} waiting", r.queue_length);
            if let Some(p) = r.position {
                let _ = writeln!(out, "- Your place in the queue: {p}");
            }
            if r.push_wake {
                out.push_str(push_wake_line(r.push_via.as_deref()));
            }
            if let Some(prev) = &r.took_over {
                let _ = writeln!(out, "- Ended: {}", reaped_words(prev, &r.now));
            }
            let next = match r.position {
                Some(_) => format!(
                    "Next: work on something else; when {k} is handed to you, your inbox says so ({}) and it is held for you for the handoff grace. Or block until then with {}.",
                    inv.code("inbox"),
                    inv.code(&format!("checkout {} --wait", r.args()))
                ),
                None if r.command == "run" => format!(
                    "Next: work on something else, or {} to wait in line and run the command once the key is yours; do not retry in a loop.",
                    inv.run_wait(&r.key)
                ),
                None if holder.is_none() && r.reserved_for.is_some() => format!(
                    "Next: work on something else, or {} to take your turn after the agents already waiting; do not retry in a loop.",
                    inv.code(&format!("checkout {} --queue", r.args()))
                ),
                None => format!(
                    "Next: work on something else, or {} to be told when it frees up; do not retry in a loop.",
                    inv.code(&format!("checkout {} --queue", r.args()))
                ),
            };
            let _ = writeln!(out, "\n{next}");
        }
        (_, Some(c)) => {
            if r.outcome == Outcome::AlreadyHeld {
                let _ = writeln!(
                    out,
                    "Already yours: you have held {k} since {} under token {}; this was not a new checkout. Lease extended to {}.",
                    with_relative(&c.acquired_at, &r.now),
                    c.token,
                    with_relative(&c.expires_at, &r.now)
                );
            } else {
                let _ = writeln!(
                    out,
                    "Checked out {k} (token {}); lease ends {}.",
                    c.token,
                    with_relative(&c.expires_at, &r.now)
                );
            }
            out.push('\n');
            checkout_lines(&mut out, c, &r.now);
            if let Some(prev) = &r.took_over {
                let _ = writeln!(out, "- Took over from: {}", reaped_words(prev, &r.now));
            } else if let Some(p) = &r.previous
                && let Some(words) = previous_words(p, &r.now)
            {
                let _ = writeln!(out, "- Previous holder: {words}");
            }
            match (&r.previous, &r.took_over) {
                (Some(p), _) => notes_lines(&mut out, &p.notes, &r.now),
                (None, Some(prev)) => notes_lines(&mut out, &prev.notes, &r.now),
                (None, None) => {}
            }
            if r.queue_length > 0 {
                let _ = writeln!(out, "- Queue: {} waiting after you", r.queue_length);
            }
            let _ = writeln!(
                out,
                "\nNext: do the work, then {}. If it takes longer, {}. Before an irreversible step (push, deploy), {}.",
                inv.cmd("release", &r.key),
                inv.cmd("renew", &r.key),
                inv.code(&format!(
                    "verify {} --token {}",
                    shell_quote(&r.key),
                    c.token
                ))
            );
        }
        (_, None) => {
            let _ = writeln!(out, "{k}: {}", outcome_words(r.outcome));
        }
    }
    out
}

/// A key with slots that has none to give: who holds them, and who is served first.
fn slots_taken(out: &mut String, r: &CheckoutReport) {
    let k = code(&r.key);
    let slots = r.slots.unwrap_or_default();
    let held = r.holders.len();
    if held as u32 >= slots {
        let _ = writeln!(
            out,
            "Conflict: all {slots} slot{} of {k} are taken.",
            if slots == 1 { "" } else { "s" }
        );
    } else {
        let _ = writeln!(
            out,
            "Conflict: {held} of the {slots} slots of {k} {} taken, and the free ones are reserved for the agents ahead of you in its queue.",
            if held == 1 { "is" } else { "are" }
        );
    }
    out.push('\n');
    holders_table(out, &r.holders, &r.now);
    out.push('\n');
}

/// The holders of a key with slots, one row per slot.
fn holders_table(out: &mut String, holders: &[CheckoutView], now: &Time) {
    out.push_str("| Slot | Holder | Token | Since | Lease ends |\n|---|---|---|---|---|\n");
    for c in holders {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            c.slot.map_or("-".to_string(), |n| n.to_string()),
            cell(&c.agent.label()),
            c.token,
            with_relative(&c.acquired_at, now),
            with_relative(&c.expires_at, now)
        );
    }
}

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

fn queue_words(q: &QueueView) -> String {
    match q.waiters.first() {
        Some(next) => format!(
            "{} waiting (next: {next}{})",
            q.length,
            crate::identity::other_user_suffix(q.waiter_users.first().and_then(Option::as_ref))
        ),
        None => "0 waiting".into(),
    }
}

fn cycle_words(cycle: &[String]) -> String {
    cycle
        .iter()
        .enumerate()
        .map(|(i, s)| if i % 2 == 1 { code(s) } else { s.clone() })
        .collect::<Vec<_>>()
        .join(" → ")
}

fn any(r: &AnyReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let n = r.refused.len();
    let _ = writeln!(out, "Conflict: none of the {n} keys can be taken now.");
    out.push_str("\n| Key | Held by | Lease ends | Queue |\n|---|---|---|---|\n");
    for c in &r.refused {
        let (who, ends) = match (&c.checkout, &c.reserved_for) {
            (Some(h), _) => (h.agent.label(), with_relative(&h.expires_at, &r.now)),
            (None, Some(res)) => (
                format!("reserved for {}", res.agent),
                with_relative(&res.until, &r.now),
            ),
            (None, None) if c.outcome == Outcome::Corrupt => {
                ("damaged record (skipped)".into(), "-".into())
            }
            (None, None) => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code_cell(&c.key),
            cell(&who),
            ends,
            c.queue_length
        );
    }
    let _ = writeln!(
        out,
        "\nNext: work on something else, or queue for one key with {}.",
        inv.code("checkout KEY --queue")
    );
    out
}

/// What a queued agent whose session takes pushes is promised.
fn push_wake_line(via: Option<&str>) -> &'static str {
    if via == Some(crate::store::Via::Codex.as_str()) {
        "- When it is your turn: tasklock queues the news in this Codex session, which takes it up within seconds, even if it is idle\n"
    } else {
        "- When it is your turn: tasklock tells this session at once, even if it is idle\n"
    }
}

/// How pushing a message into the agent's session went, in words.
fn delivery_text(d: Option<&crate::store::Delivery>, now: &crate::clock::Time) -> String {
    match d {
        None => "not pushed (read at the next prompt)".into(),
        Some(d) if d.delivered => format!("pushed {}", with_relative(&d.at, now)),
        Some(d) => format!(
            "not pushed {}: {}",
            with_relative(&d.at, now),
            d.error.as_deref().unwrap_or("unknown")
        ),
    }
}

fn inbox(r: &InboxReport) -> String {
    let mut out = String::new();
    if r.messages.is_empty() {
        out.push_str("No unread messages.\n");
        return out;
    }
    let n = r.messages.len();
    let _ = writeln!(
        out,
        "{n} unread message{}{}.",
        if n == 1 { "" } else { "s" },
        if r.marked_read {
            "; now marked read"
        } else {
            " (left unread)"
        }
    );
    // Whether each message was pushed into the session, when any push was tried.
    let pushed = r.messages.iter().any(|m| m.delivery.is_some());
    out.push_str("\n| Time | Type | Key | From | Message |");
    out.push_str(if pushed {
        " Pushed |\n|---|---|---|---|---|---|\n"
    } else {
        "\n|---|---|---|---|---|\n"
    });
    for m in &r.messages {
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} |",
            with_relative(&m.ts, &r.now),
            m.kind,
            code_cell(&m.key),
            cell(&format!(
                "{}{}",
                m.from.as_deref().unwrap_or("tasklock"),
                crate::identity::other_user_suffix(m.user.as_ref())
            )),
            cell(&m.body)
        );
        if pushed {
            let _ = write!(
                out,
                " {} |",
                cell(&delivery_text(m.delivery.as_ref(), &r.now))
            );
        }
        out.push('\n');
    }
    let next = if r.messages.iter().any(|m| m.kind == MessageKind::Reserved) {
        "Next: a key reserved for you is yours only for the handoff grace: check it out now."
    } else {
        "Next: act on what concerns your current work; lost checkouts must be checked out again."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

/// "agent-a (token 1), whose lease ran out 2026-… (5m ago)".
fn reaped_words(p: &Reaped, now: &Time) -> String {
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

fn keys(r: &KeysReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let releasing = r.command == KeysCommand::Release;
    if r.results.is_empty() {
        let _ = match r.command {
            KeysCommand::Leave => writeln!(out, "You wait in no queue; nothing to leave."),
            _ => writeln!(
                out,
                "You hold no checkouts; nothing to {}.",
                r.command.as_str()
            ),
        };
        return out;
    }
    let ok = r
        .results
        .iter()
        .filter(|k| k.outcome.exit_code() == 0)
        .count();
    let verdict = match (r.command, r.results.len()) {
        (_, 1) => single_verdict(&r.results[0], r),
        (KeysCommand::Release, n) => format!("Released {ok} of {n} checkouts."),
        (KeysCommand::Renew, n) => format!("Renewed {ok} of {n} checkouts."),
        (KeysCommand::Leave, n) => format!("Left {ok} of {n} queues."),
    };
    let _ = writeln!(out, "{verdict}");
    if r.results.len() > 1 || r.results[0].checkout.is_some() {
        out.push('\n');
    }
    if r.results.len() > 1 {
        out.push_str("| Key | Result | Token | Lease ends |\n|---|---|---|---|\n");
        for k in &r.results {
            let (token, ends) = match &k.checkout {
                Some(c) => (c.token.to_string(), with_relative(&c.expires_at, &r.now)),
                None => ("-".into(), "-".into()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {token} | {ends} |",
                code_cell(&k.key),
                outcome_words(k.outcome)
            );
        }
    } else if let Some(c) = &r.results[0].checkout {
        checkout_lines(&mut out, c, &r.now);
    }
    if let Some(n) = &r.note {
        let _ = writeln!(out, "- Note: {n}");
    }
    for k in r.results.iter().filter(|k| k.outcome == Outcome::Corrupt) {
        let problem = k.problem.as_deref().unwrap_or_default();
        let fix = if newer_format(problem) {
            UPGRADE.to_string()
        } else {
            format!(
                "if nobody works on it, {} (audited).",
                inv.cmd("release --force", &k.key)
            )
        };
        let _ = writeln!(out, "\n{problem}\nFix: {fix}");
    }
    for k in r.results.iter().filter(|k| k.outcome == Outcome::NotHolder) {
        if let Some(problem) = &k.problem {
            let _ = writeln!(out, "\n{problem}");
        }
    }
    let next: &str = if r.results.iter().any(|k| k.outcome == Outcome::Frozen) {
        "Next: renewals are refused until the freeze ends; finish before your lease ends, or release and check out again after the freeze."
    } else if r.results.iter().any(|k| k.outcome == Outcome::LeaseLost) {
        "Next: a lost lease means another agent may have taken the key; check out again before doing more work on it, and re-check anything written after the lease ended."
    } else if r
        .results
        .iter()
        .any(|k| k.outcome == Outcome::SecretRefused)
    {
        SECRET_NEXT
    } else if let Some(k) = r
        .results
        .iter()
        .find(|k| k.outcome == Outcome::NotHolder && k.problem.is_some())
    {
        // A force that was refused: forcing again is not the way.
        &format!(
            "Next: ask a person to release it from a terminal, or queue for it: {}; do not retry in a loop.",
            inv.code(&format!("checkout {} --queue", shell_quote(&k.key)))
        )
    } else if let Some(k) = r.results.iter().find(|k| k.outcome == Outcome::NotHolder) {
        &format!(
            "Next: only the holder can do this. A checkout whose holder is gone ends by itself; to take a live agent's checkout away, a person at a terminal (or a caller with the operator secret) runs {} (audited). Otherwise queue for it: {}.",
            inv.cmd("release --force", &k.key),
            inv.code(&format!("checkout {} --queue", shell_quote(&k.key)))
        )
    } else if r.results.iter().any(|k| k.outcome == Outcome::NotQueued) {
        &format!(
            "Next: nothing to do for a queue you are not in; {} shows the queues.",
            inv.code("list")
        )
    } else if r
        .results
        .iter()
        .any(|k| k.outcome == Outcome::NoSuchCheckout)
    {
        &format!(
            "Next: nothing to do for a key nobody holds; {} shows what is held.",
            inv.code("list")
        )
    } else if releasing || r.command == KeysCommand::Leave {
        &format!(
            "Next: pick your next task with {}.",
            inv.code("checkout KEY")
        )
    } else {
        "Next: keep working; renew again before the lease ends."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

fn single_verdict(k: &KeyResult, r: &KeysReport) -> String {
    let key = code(&k.key);
    match k.outcome {
        Outcome::Released => format!("Released {key}."),
        Outcome::ForceReleased => match &k.checkout {
            Some(c) => format!("Force-released {key} (was held by {}).", c.agent.label()),
            None => format!("Force-released {key}: removed the damaged record."),
        },
        Outcome::Renewed => match &k.checkout {
            Some(c) => format!(
                "Renewed {key} (token {}); lease ends {}.",
                c.token,
                with_relative(&c.expires_at, &r.now)
            ),
            None => format!("Renewed {key}."),
        },
        Outcome::LeaseLost => format!(
            "Lease lost: your checkout of {key} ran out {} and has been released; it was not {}.",
            k.checkout
                .as_ref()
                .map(|c| with_relative(&c.expires_at, &r.now))
                .unwrap_or_default(),
            if r.command == KeysCommand::Renew {
                "renewed"
            } else {
                "held any more"
            }
        ),
        Outcome::NoSuchCheckout => format!("No such checkout: nobody holds {key}."),
        Outcome::LeftQueue => format!("Left the queue of {key}."),
        Outcome::NotQueued => format!("Not queued: you are not in the queue of {key}."),
        Outcome::Frozen => match &k.frozen {
            Some(f) => format!(
                "Frozen: {key} {}; your lease was not extended (you keep the key until it ends).",
                freeze_words(f, &k.key, &r.now)
            ),
            None => format!("Frozen: {key} cannot be renewed now."),
        },
        Outcome::NotHolder => match &k.checkout {
            Some(c) => format!("Not the holder: {key} is held by {}.", c.agent.label()),
            None => format!("Not the holder of {key}."),
        },
        Outcome::SecretRefused => secret_refused_words(&key, k.checkout.as_ref()),
        other => format!("{key}: {}", outcome_words(other)),
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
    }
}

fn status(r: &StatusReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    if let Some(slots) = r.slots.filter(|_| !r.holders.is_empty()) {
        let held = r.holders.len();
        let _ = writeln!(
            out,
            "{k} has {slots} slot{}: {held} held, {} free.",
            if slots == 1 { "" } else { "s" },
            (slots as usize).saturating_sub(held)
        );
        out.push('\n');
        holders_table(&mut out, &r.holders, &r.now);
        let _ = writeln!(out, "\n- Queue: {}", queue_words(&r.queue));
        notes_lines(&mut out, &r.notes, &r.now);
        let _ = writeln!(
            out,
            "\nNext: if one is yours, {} when done; otherwise {} takes a free slot or queues for one.",
            inv.cmd("release", &r.key),
            inv.code(&format!("checkout {} --queue", shell_quote(&r.key)))
        );
        return out;
    }
    match &r.checkout {
        Some(c) => {
            let _ = writeln!(
                out,
                "{k} is held by {}; its lease ends {}.",
                c.agent.label(),
                with_relative(&c.expires_at, &r.now)
            );
            out.push('\n');
            checkout_lines(&mut out, c, &r.now);
            let _ = writeln!(out, "- Queue: {}", queue_words(&r.queue));
            notes_lines(&mut out, &r.notes, &r.now);
            let _ = writeln!(
                out,
                "\nNext: if it is yours, {} when done; otherwise pick another task.",
                inv.cmd("release", &r.key)
            );
        }
        None => {
            match &r.queue.reserved_for {
                Some(res) => {
                    let _ = writeln!(
                        out,
                        "{k} is free but reserved for {}, the head of its queue, until {}.",
                        res.agent,
                        with_relative(&res.until, &r.now)
                    );
                    let _ = writeln!(out, "\n- Queue: {}", queue_words(&r.queue));
                }
                None => {
                    let _ = writeln!(out, "{k} is free.");
                }
            }
            if let Some(e) = &r.released {
                let _ = writeln!(
                    out,
                    "\n- Last holder: {}; released just now ({}).",
                    reaped_words(e, &r.now),
                    e.reason.as_str()
                );
            }
            if !r.notes.is_empty() {
                out.push('\n');
                notes_lines(&mut out, &r.notes, &r.now);
            }
            match &r.queue.reserved_for {
                Some(res) => {
                    let _ = writeln!(
                        out,
                        "\nNext: only {} may take it now; anyone else: {}.",
                        res.agent,
                        inv.code(&format!("checkout {} --queue", shell_quote(&r.key)))
                    );
                }
                None => {
                    let _ = writeln!(out, "\nNext: {} to take it.", inv.cmd("checkout", &r.key));
                }
            }
        }
    }
    out
}

fn list(r: &ListReport, inv: &Invocation) -> String {
    let mut out = String::new();
    if r.checkouts.is_empty() && r.corrupt.is_empty() && (r.mine.is_some() || r.queues.is_empty()) {
        match &r.mine {
            Some(id) => {
                let _ = writeln!(out, "No active checkouts held by {id}.");
            }
            None => out.push_str("No active checkouts.\n"),
        }
        return out;
    }
    let n = r.checkouts.len();
    let _ = writeln!(
        out,
        "{n} active checkout{}{}{}.",
        if n == 1 { "" } else { "s" },
        r.mine
            .as_ref()
            .map(|m| format!(" held by {m}"))
            .unwrap_or_default(),
        if r.corrupt.is_empty() {
            String::new()
        } else {
            format!(
                ", {} corrupt record{}",
                r.corrupt.len(),
                if r.corrupt.len() == 1 { "" } else { "s" }
            )
        }
    );
    // A Paths column only when some checkout covers paths.
    let with_paths = r.checkouts.iter().any(|c| !c.paths.is_empty());
    if n > 0 {
        out.push_str(if with_paths {
            "\n| Key | Paths | Holder | Token | Since | Lease ends | Queue | Reason |\n|---|---|---|---|---|---|---|---|\n"
        } else {
            "\n| Key | Holder | Token | Since | Lease ends | Queue | Reason |\n|---|---|---|---|---|---|---|\n"
        });
        for c in &r.checkouts {
            let queue = r
                .queues
                .get(&c.key)
                .map(queue_words)
                .unwrap_or_else(|| "0 waiting".into());
            let _ = writeln!(
                out,
                "| {}{}{} | {} | {} | {} | {} | {} | {} |",
                code_cell(&c.key),
                match (c.slot, c.slots) {
                    (Some(n), Some(of)) => format!(" (slot {n} of {of})"),
                    _ => String::new(),
                },
                if with_paths {
                    format!(
                        " | {}",
                        c.paths
                            .iter()
                            .map(|p| code_cell(p))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    String::new()
                },
                cell(&format!(
                    "{}{}",
                    match &c.agent.parent {
                        Some(p) => format!("{}, subagent of session {}", c.agent.label(), code(p)),
                        None => c.agent.label(),
                    },
                    if c.proven { "" } else { " (unproven)" }
                )),
                c.token,
                with_relative(&c.acquired_at, &r.now),
                with_relative(&c.expires_at, &r.now),
                cell(&queue),
                cell(c.reason.as_deref().unwrap_or(""))
            );
        }
    }
    let reserved: Vec<_> = r
        .queues
        .iter()
        .flat_map(|(k, q)| {
            q.reserved_for
                .iter()
                .chain(&q.also_reserved)
                .map(move |res| (k, q, res))
        })
        .collect();
    if !reserved.is_empty() {
        out.push_str("\n| Free key reserved | For | Until | Queue |\n|---|---|---|---|\n");
        for (k, q, res) in reserved {
            let _ = writeln!(
                out,
                "| {}{} | {} | {} | {} |",
                code_cell(k),
                if q.slots.is_some() { " (a slot)" } else { "" },
                cell(&res.agent),
                with_relative(&res.until, &r.now),
                cell(&queue_words(q))
            );
        }
    }
    if !r.corrupt.is_empty() {
        out.push_str("\n| Corrupt record | Problem |\n|---|---|\n");
        for c in &r.corrupt {
            let _ = writeln!(out, "| {} | {} |", cell(&c.path), cell(&c.problem));
        }
        let (newer, damaged): (Vec<_>, Vec<_>) =
            r.corrupt.iter().partition(|c| newer_format(&c.problem));
        if !damaged.is_empty() {
            let _ = writeln!(
                out,
                "\nNext: inspect each corrupt file; {} removes one (audited). Its key is in the file, or in the file name with %XX escapes.",
                inv.code("release KEY --force")
            );
        }
        if !newer.is_empty() {
            let _ = writeln!(
                out,
                "\nNext: {} record{} of a newer format: {UPGRADE}",
                newer.len(),
                if newer.len() == 1 { " is" } else { "s are" }
            );
        }
    }
    out
}

fn verify(r: &VerifyReport) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    let line = match r.outcome {
        Outcome::Valid => format!("Valid: you hold {k} under token {}.", r.token),
        Outcome::StaleToken => format!(
            "Stale token: you hold {k}, but under token {}, not {}.",
            r.checkout.as_ref().map(|c| c.token).unwrap_or_default(),
            r.token
        ),
        Outcome::NotHolder => format!(
            "Not the holder: {k} is held by {}.",
            r.checkout
                .as_ref()
                .map(|c| c.agent.label())
                .unwrap_or_default()
        ),
        Outcome::LeaseLost => {
            format!("Lease lost: your checkout of {k} ran out and has been released.")
        }
        Outcome::SecretRefused => secret_refused_words(&k, r.checkout.as_ref()),
        _ => format!("No such checkout: nobody holds {k}."),
    };
    let _ = writeln!(out, "{line}");
    if let Some(c) = &r.checkout {
        out.push('\n');
        checkout_lines(&mut out, c, &r.now);
    }
    let next = if r.valid {
        "Next: go ahead with the irreversible step."
    } else if r.outcome == Outcome::SecretRefused {
        SECRET_NEXT
    } else {
        "Next: stop; do not push, deploy or publish for this key. Check it out again and redo the work from a known state."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

fn key_list(keys: &[String]) -> String {
    if keys.is_empty() {
        return "-".into();
    }
    keys.iter().map(|k| code(k)).collect::<Vec<_>>().join(", ")
}

fn state_words(a: &AgentRow) -> String {
    let base = match a.state {
        State::Alive => "alive",
        State::Stalled => "stalled",
        State::Dead => "dead",
    };
    match (a.cause, a.registered) {
        (Some(Cause::ProcessGone), _) => format!("{base} (process gone)"),
        (Some(Cause::PidReused), _) => format!("{base} (pid reused)"),
        (Some(Cause::Silent), _) => format!("{base} (no heartbeat)"),
        (Some(Cause::Ended), _) => format!("{base} (ended)"),
        (None, false) => format!("{base} (no heartbeat yet; lease only)"),
        (None, true) => base.to_string(),
    }
}

fn ended_lines(out: &mut String, ended: &[EndedCheckout]) {
    for e in ended {
        let _ = writeln!(
            out,
            "- Released {} of {} (token {}): {}",
            code(&e.key),
            e.agent,
            e.token,
            e.reason.as_str()
        );
    }
}

fn heartbeat(r: &HeartbeatReport) -> String {
    let mut out = String::new();
    let a = &r.agent;
    let _ = writeln!(
        out,
        "Heartbeat recorded for {}: {}, beat {}.",
        label(&a.id, a.name.as_deref()),
        state_words(a),
        a.heartbeats
    );
    out.push('\n');
    if let Some(s) = &a.status {
        let _ = writeln!(out, "- Status: {s}");
    }
    if let Some(p) = a.pid {
        let _ = writeln!(out, "- Process: pid {p} on {}", a.host);
    }
    let _ = writeln!(out, "- Holding: {}", key_list(&a.checkouts));
    if !r.renewed.is_empty() {
        let _ = writeln!(out, "- Renewed: {}", key_list(&r.renewed));
    }
    if !r.lost.is_empty() {
        let _ = writeln!(
            out,
            "- Lease lost: {} (ran out before this beat; released, not renewed)",
            key_list(&r.lost)
        );
    }
    if !r.frozen.is_empty() {
        let _ = writeln!(
            out,
            "- Not renewed while frozen: {} (you keep them until their leases end)",
            key_list(&r.frozen)
        );
    }
    ended_lines(&mut out, &r.ended);
    let next = if r.lost.is_empty() {
        "Next: keep working and keep beating; the hooks from `tasklock init` beat for you."
    } else {
        "Next: check out lost keys again before doing more work on them; another agent may hold them now."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

fn label(id: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("{id} ({n})"),
        None => id.to_string(),
    }
}

fn agents(r: &AgentsReport) -> String {
    let mut out = String::new();
    if r.agents.is_empty() {
        out.push_str(if r.hidden > 0 {
            "No live or recently ended agents.\n"
        } else {
            "No known agents.\n"
        });
        if !r.ended.is_empty() {
            out.push('\n');
            ended_lines(&mut out, &r.ended);
        }
        agents_hidden(&mut out, r);
        return out;
    }
    let count = |s: State| r.agents.iter().filter(|a| a.state == s).count();
    let n = r.agents.len();
    let _ = writeln!(
        out,
        "{n} agent{}: {} alive, {} stalled, {} dead.",
        if n == 1 { "" } else { "s" },
        count(State::Alive),
        count(State::Stalled),
        count(State::Dead)
    );
    out.push_str("\n| Agent | Name | State | Last heartbeat | Checkouts | Status |\n|---|---|---|---|---|---|\n");
    for a in &r.agents {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&a.id),
            cell(a.name.as_deref().unwrap_or("")),
            state_words(a),
            a.last_heartbeat
                .map(|t| with_relative(&t, &r.now))
                .unwrap_or_else(|| "never".into()),
            key_list(&a.checkouts).replace('|', "\\|"),
            cell(a.status.as_deref().unwrap_or(""))
        );
    }
    if !r.ended.is_empty() {
        out.push('\n');
        ended_lines(&mut out, &r.ended);
    }
    agents_hidden(&mut out, r);
    out.push_str("\nStalled: no heartbeat for a while, checkouts kept. Dead: process gone or silent too long; its checkouts are released by the next command that meets them.\n");
    out
}

/// How many agents `agents` left out, and how many long-dead ones it forgot.
fn agents_hidden(out: &mut String, r: &AgentsReport) {
    if r.hidden > 0 {
        let _ = writeln!(
            out,
            "\n{} older dead agent{} not shown; `tasklock agents --all` lists every known agent.",
            r.hidden,
            if r.hidden == 1 { "" } else { "s" }
        );
    }
    if r.pruned > 0 {
        let _ = writeln!(
            out,
            "\nForgot {} agent{} dead for longer than agent_retention (config.yaml, default 24h): registry entry removed.",
            r.pruned,
            if r.pruned == 1 { "" } else { "s" }
        );
    }
}

fn note(r: &NoteReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    match (r.outcome, &r.note) {
        (Outcome::Noted, Some(n)) => {
            let _ = writeln!(
                out,
                "Noted on {k} (token {}): {}",
                n.token.unwrap_or_default(),
                n.text
            );
            let _ = writeln!(
                out,
                "\nNext: notes stay after release; the next holder sees them in {}.",
                inv.without_agent().cmd("status", &r.key)
            );
        }
        (Outcome::NotHolder, _) => {
            let _ = writeln!(
                out,
                "Not the holder: {k} is held by {}; only its holder can add notes.",
                r.checkout
                    .as_ref()
                    .map(|c| c.agent.label())
                    .unwrap_or_default()
            );
        }
        (Outcome::LeaseLost, _) => {
            let _ = writeln!(
                out,
                "Lease lost: your checkout of {k} ran out and has been released; the note was not added."
            );
        }
        (Outcome::SecretRefused, _) => {
            let _ = writeln!(out, "{}", secret_refused_words(&k, r.checkout.as_ref()));
            let _ = writeln!(out, "\n{SECRET_NEXT}");
        }
        _ => {
            let _ = writeln!(
                out,
                "No such checkout: nobody holds {k}; check it out first."
            );
        }
    }
    out
}

fn watch(r: &WatchReport) -> String {
    match r.outcome {
        "detached" => format!(
            "Watching pid {} for {} in the background (watcher pid {}).\n\nNext: nothing; when pid {} exits, its checkouts are released at once.\n",
            r.pid,
            r.agent,
            r.watcher_pid.unwrap_or_default(),
            r.pid
        ),
        "already_watched" => format!(
            "Another watcher already beats for {}; this one stopped at once (checkouts kept).\n",
            r.agent
        ),
        "superseded" => format!(
            "Process {} of {} exited, but {} has registered another process since, one this watcher cannot check from here (another host); checkouts kept, this watcher stopped.\n",
            r.pid, r.agent, r.agent
        ),
        "process_exited" => format!(
            "Process {} of {} exited; released {} checkout{}: {}.\n",
            r.pid,
            r.agent,
            r.released.len(),
            if r.released.len() == 1 { "" } else { "s" },
            key_list(&r.released)
        ),
        _ => format!(
            "Stopped watching pid {} for {} after {} beat{}; checkouts kept.\n",
            r.pid,
            r.agent,
            r.beats,
            if r.beats == 1 { "" } else { "s" }
        ),
    }
}

fn run(r: &RunReport) -> String {
    let k = code(&r.key);
    let ran = match r.cmd_exit {
        Some(c) => format!("the command exited with {c}"),
        None => "the command could not be started".into(),
    };
    let released = if r.released {
        "released"
    } else {
        "not released (it was no longer ours)"
    };
    let mut out = format!(
        "tasklock run: {ran} under {k} (token {}); {released}.\n",
        r.token
    );
    if r.lease_lost {
        out.push_str("tasklock run: WARNING: the lease was lost while the command ran; treat its effects as unguarded.\n");
    }
    out
}

fn setup(r: &crate::report::SetupReport, inv: &Invocation) -> String {
    let changed = r
        .changes
        .iter()
        .filter(|c| c.action == "created" || c.action == "updated")
        .count();
    let kept = r.changes.iter().filter(|c| c.action == "kept").count();
    let mut out = if r.dry_run {
        format!(
            "Dry run: `tasklock setup` would change {changed} of {} paths for the skills of tasklock {}.\n",
            r.changes.len(),
            r.version
        )
    } else if changed == 0 {
        format!(
            "Nothing to do: the skills of tasklock {} are in place.\n",
            r.version
        )
    } else {
        format!(
            "Installed the skills of tasklock {}: {changed} of {} paths changed.\n",
            r.version,
            r.changes.len()
        )
    };
    changes_table(&mut out, "Path", &r.changes, r.dry_run);
    let next = if r.dry_run {
        format!("Next: run {} to apply.", inv.code("setup"))
    } else if kept > 0 {
        format!(
            "Next: the paths kept are not this version's; {} replaces them. Then, in each project, {}.",
            inv.code("setup --force"),
            inv.code("init")
        )
    } else {
        format!(
            "Next: new Claude Code and Codex sessions load the skills; in each project, {} wires the hooks.",
            inv.code("init")
        )
    };
    let _ = writeln!(out, "\n{next}");
    out
}

/// The table of what `init` or `setup` changed (or, in a dry run, would change: every
/// action but `unchanged` and `kept` reads "would be …").
fn changes_table(out: &mut String, first: &str, changes: &[crate::report::Change], dry_run: bool) {
    let _ = write!(out, "\n| {first} | Action | What |\n|---|---|---|\n");
    for c in changes {
        let action = if dry_run && c.action != "unchanged" && c.action != "kept" {
            format!("would be {}", c.action)
        } else {
            c.action.clone()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            cell(&c.path),
            action,
            cell(&c.what)
        );
    }
}

fn init(r: &InitReport, inv: &Invocation) -> String {
    let changed = r.changes.iter().filter(|c| c.action != "unchanged").count();
    let mut out = if r.dry_run {
        format!(
            "Dry run: `tasklock init` would change {changed} file{} in {}.\n",
            if changed == 1 { "" } else { "s" },
            r.project
        )
    } else if changed == 0 {
        format!("Nothing to do: {} is already set up.\n", r.project)
    } else {
        format!(
            "Set up {}: {changed} file{} changed.\n",
            r.project,
            if changed == 1 { "" } else { "s" }
        )
    };
    changes_table(&mut out, "File", &r.changes, r.dry_run);
    let next = if r.dry_run {
        &format!(
            "Next: run {} to apply.",
            inv.code(
                if r.changes.iter().any(|c| c.path.ends_with("pre-commit")) {
                    "init --git-hook"
                } else {
                    "init"
                }
            )
        )
    } else {
        "Next: commit `.claude/settings.json`, `.codex/` and the instructions so every agent session coordinates; make sure `tasklock` is on PATH for the hooks and the MCP server."
    };
    let _ = writeln!(out, "\n{next}");
    if r.git_hook_offered {
        let _ = writeln!(
            out,
            "\nTo refuse commits of files other agents have checked out (and of edits made under a lost checkout), add the git pre-commit guard: {}. It runs before an existing pre-commit hook or from husky's.",
            inv.code("init --git-hook")
        );
    }
    mcp_setup(&mut out, &r.mcp);
    out
}

/// How to give other MCP clients the tools (`tasklock mcp`), printed by `init`.
fn mcp_setup(out: &mut String, m: &crate::report::McpSetup) {
    let _ = writeln!(
        out,
        "\nMCP clients get the same commands as tools from {} (one server per session; its checkouts are released when the session ends). Codex: the project's `.codex/config.toml` above. Others:\n- Claude Code: {}\n- Codex, for every project: {}\n- Cursor, Claude Desktop and most others, in their `mcpServers` JSON:\n\n```json\n{}\n```",
        code(&format!("{} {}", m.command, m.args.join(" "))),
        code(&m.claude_code),
        code(&m.codex),
        m.mcp_servers
    );
}

fn freeze(r: &FreezeReport, inv: &Invocation) -> String {
    let p = code(&r.pattern);
    match (&r.freeze, r.frozen) {
        (Some(f), true) => format!(
            "Frozen: {p} {}.\n\nNo checkout of {} succeeds until then; holders keep their checkouts until their leases end but cannot renew.\n\nNext: {} ends it early.\n",
            freeze_words(f, &r.pattern, &r.now),
            if f.pattern.ends_with('*') {
                "any matching key"
            } else {
                "it"
            },
            inv.cmd("unfreeze", &f.pattern)
        ),
        (Some(f), false) => format!(
            "Unfrozen: {p}; it had been frozen by {} until {}.\n\nNext: checkouts of it work again.\n",
            f.by,
            crate::clock::rfc3339(&f.until)
        ),
        (None, _) => match &r.covered_by {
            Some(f) => format!(
                "Not frozen by its own freeze: {p} {}.\n\nNext: {} ends that freeze, for every key it covers.\n",
                freeze_words(f, &r.pattern, &r.now),
                inv.cmd("unfreeze", &f.pattern)
            ),
            None => format!("Not frozen: there is no freeze on {p}.\n"),
        },
    }
}

fn why(r: &WhyReport, inv: &Invocation) -> String {
    let k = code(&r.key);
    let verdict = match (r.can_checkout, r.state.as_str()) {
        (_, "yours") => format!("{k} is yours."),
        (true, _) => format!("You can check out {k} now."),
        (false, _) => format!("You cannot check out {k} now."),
    };
    let mut out = format!("{verdict}\n\n");
    for reason in &r.reasons {
        let _ = writeln!(out, "- {reason}");
    }
    let _ = writeln!(
        out,
        "\nNext: {}",
        why_next(&r.advice, &r.key, &r.paths, inv)
    );
    out
}

/// The advice of `why`, in words, with suggested commands carrying the caller's flags.
/// `paths`: the paths asked about with the key, which a checkout must ask for again.
pub fn why_next(advice: &WhyNext, key: &str, paths: &[String], inv: &Invocation) -> String {
    let co = crate::key::checkout_args(key, paths);
    match advice {
        WhyNext::KeepWorking => format!(
            "keep working; release it when done ({}).",
            inv.cmd("release", key)
        ),
        WhyNext::Checkout => format!("{}.", inv.code(&format!("checkout {co}"))),
        WhyNext::CheckoutReserved => format!(
            "it is reserved for you: check it out now with {}, before the reservation lapses.",
            inv.code(&format!("checkout {co}"))
        ),
        WhyNext::Frozen => "work on something else until the freeze ends.".into(),
        WhyNext::Corrupt => format!(
            "inspect the file; {} if nobody works on it.",
            inv.code(&format!("release {} --force", shell_quote(key)))
        ),
        WhyNext::Upgrade => crate::error::UPGRADE.into(),
        WhyNext::FirstInLine { holder } => format!(
            "you are first in line: when {holder} releases it, it is reserved for you and your inbox says so ({}). Work on something else meanwhile, or block until then with {}; no need to queue again.",
            inv.code("inbox"),
            inv.code(&format!("checkout {co} --wait"))
        ),
        WhyNext::InLine { position } => format!(
            "you are number {position} in its queue; your inbox tells you when it is yours. Work on something else meanwhile, or block until then with {}; no need to queue again.",
            inv.code(&format!("checkout {co} --wait"))
        ),
        WhyNext::Queue => format!(
            "work on something else, or {}.",
            inv.code(&format!("checkout {co} --queue"))
        ),
    }
}

pub const AUDIT_HEADER: &str =
    "| Time | Event | Key | Agent | Token | Detail |\n|---|---|---|---|---|---|\n";

/// One audit event as a table row.
pub fn audit_row(e: &AuditEvent, now: &Time) -> String {
    let mut detail = Vec::new();
    if let Some(r) = &e.reason {
        detail.push(format!("reason: {r}"));
    }
    if let Some(b) = &e.by {
        detail.push(format!("by: {b}"));
    }
    if let Some(h) = &e.holder {
        detail.push(format!("holder: {h}"));
    }
    if let Some(d) = &e.detail {
        detail.push(d.clone());
    }
    if !e.paths.is_empty() && e.event == "acquire" {
        detail.push(format!("paths: {}", e.paths.join(", ")));
    }
    format!(
        "| {} | {} | {} | {} | {} | {} |",
        with_relative(&e.ts, now),
        e.event,
        code_cell(&e.key),
        cell(&label(&e.agent, e.name.as_deref())),
        e.token.map(|t| t.to_string()).unwrap_or_default(),
        cell(&detail.join("; "))
    )
}

fn audit(r: &AuditReport) -> String {
    let mut out = String::new();
    if r.events.is_empty() {
        out.push_str("No matching audit events.\n");
        return out;
    }
    let n = r.events.len();
    if n < r.matched {
        let _ = writeln!(out, "The last {n} of {} matching audit events.", r.matched);
    } else {
        let _ = writeln!(
            out,
            "{n} matching audit event{}.",
            if n == 1 { "" } else { "s" }
        );
    }
    out.push('\n');
    out.push_str(AUDIT_HEADER);
    for e in &r.events {
        let _ = writeln!(out, "{}", audit_row(e, &r.now));
    }
    if r.unreadable_lines > 0 {
        let _ = writeln!(
            out,
            "\n{} unreadable line(s) in the log were skipped.",
            r.unreadable_lines
        );
    }
    if n < r.matched {
        out.push_str(
            "\nNext: `--limit 0` shows all; `--since`, `--key` and `--agent` narrow it.\n",
        );
    }
    out
}

fn guard(r: &GuardReport, inv: &Invocation) -> String {
    let mut out = String::new();
    if r.files.is_empty() {
        if r.edited_by_agents.is_empty() {
            out.push_str("Commit allowed: no staged file is checked out or was last edited by another live agent, or was edited under a checkout you lost.\n");
            return out;
        }
        let n = r.edited_by_agents.len();
        let _ = writeln!(
            out,
            "Commit allowed, carrying other agents' edits: you have no agent identity (a person at the terminal), so edits are not judged by who made them; {n} staged file{} {} last edited by live agents.\n",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" }
        );
        let files: Vec<&GuardFile> = r.edited_by_agents.iter().collect();
        edits_table(&mut out, &files, &r.now);
        out.push_str(
            "\nNext: check that you mean to commit their work; they may still be changing it.\n",
        );
        return out;
    }
    let n = r.files.len();
    let edited: Vec<&GuardFile> = r
        .files
        .iter()
        .filter(|f| f.verdict == GuardVerdict::Edited)
        .collect();
    let other: Vec<&GuardFile> = r
        .files
        .iter()
        .filter(|f| f.verdict != GuardVerdict::Edited)
        .collect();
    let (s, are, were) = if n == 1 {
        ("", "is", "was")
    } else {
        ("s", "are", "were")
    };
    if edited.is_empty() {
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {are} checked out by other agents or edited under a checkout you lost.\n"
        );
    } else if other.is_empty() {
        let mut agents: Vec<String> = edited
            .iter()
            .filter_map(|f| f.edit.as_ref())
            .map(|e| code(&e.agent))
            .collect();
        agents.dedup();
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {were} last edited by another live agent ({}).\n",
            agents.join(", ")
        );
    } else {
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {are} checked out by other agents, last edited by other live agents or edited under a checkout you lost.\n"
        );
    }
    if !other.is_empty() {
        out.push_str("| File | Why | Key | Token | Until |\n|---|---|---|---|---|\n");
    }
    for f in &other {
        let (why, until) = match (&f.checkout, f.verdict) {
            (Some(c), GuardVerdict::Held) => (
                format!(
                    "held by {} (pattern {})",
                    c.agent.label(),
                    code(f.pattern.as_deref().unwrap_or(""))
                ),
                with_relative(&c.expires_at, &r.now),
            ),
            _ => (
                match f.ended {
                    Some(how) => format!(
                        "you edited it under a checkout you lost ({})",
                        match how {
                            EndHow::Timeout => "its lease ran out",
                            EndHow::AgentDeath => "you were judged dead",
                            EndHow::ForceReleased => "it was force-released",
                            EndHow::SessionEnd => "your session ended",
                            EndHow::SubagentEnd => "its subagent stopped",
                            EndHow::Released | EndHow::Other => "it ended",
                        }
                    ),
                    None => "you edited it under a checkout you no longer hold".to_string(),
                },
                String::new(),
            ),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            code_cell(&f.file),
            cell(&why),
            code_cell(f.key.as_deref().unwrap_or("")),
            f.token.map(|t| t.to_string()).unwrap_or_default(),
            until
        );
    }
    if !edited.is_empty() {
        if !other.is_empty() {
            out.push('\n');
        }
        edits_table(&mut out, &edited, &r.now);
    }
    if let Some(cmd) = &r.unstage {
        let _ = writeln!(
            out,
            "\nUnstage the files that are other agents' (from the top of the worktree): {}",
            code(cmd)
        );
    }
    let held = r.files.iter().any(|f| f.verdict == GuardVerdict::Held);
    let lost = r.files.iter().any(|f| f.verdict == GuardVerdict::Lost);
    let mut next = Vec::new();
    if held {
        next.push(
            "leave the files others hold to them: unstage them and commit the rest, or ask their holders"
                .to_string(),
        );
    }
    if !edited.is_empty() {
        next.push(format!(
            "the files other agents edited last are their work, for them to commit: unstage them, and stage only your own edits with {}",
            inv.code("stage")
        ));
    }
    if lost {
        next.push(format!(
            "for a checkout you lost, check it out again ({}), check your changes against what others did since, then commit",
            inv.code("checkout --path FILE")
        ));
    }
    let _ = writeln!(
        out,
        "\nNext: {}. A person who is sure can skip this check with {}.",
        next.join("; "),
        code("git commit --no-verify")
    );
    out
}

fn stage(r: &StageReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let n = r.files.len();
    let s = if n == 1 { "" } else { "s" };
    if n == 0 {
        out.push_str(
            "Nothing to stage: none of the files you edited last differs from the index.\n",
        );
    } else {
        if r.dry_run {
            let _ = writeln!(
                out,
                "Would stage {n} file{s} you edited last (dry run: nothing staged).\n"
            );
        } else {
            let _ = writeln!(out, "Staged {n} file{s} you edited last.\n");
        }
        out.push_str("| File | Change | Edited |\n|---|---|---|\n");
        for f in &r.files {
            let mut when = with_relative(&f.edited_at, &r.now);
            if f.agent != r.agent {
                let _ = write!(when, " by subagent {}", code(&f.agent));
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                code_cell(&f.file),
                f.change,
                cell(&when)
            );
        }
    }
    let next = if n == 0 {
        "nothing of yours to commit".to_string()
    } else if r.dry_run {
        format!("{} stages them", inv.code("stage"))
    } else {
        format!("check them with {}, then commit", code("git diff --cached"))
    };
    let _ = writeln!(
        out,
        "\nNext: {next}. Files other agents edited last stay as they are. Only edits made with Edit, Write, MultiEdit or NotebookEdit are recorded: stage a file you changed through a shell command yourself ({}).",
        code("git add -- FILE")
    );
    out
}

/// The staged files other agents edited last: who, and when.
fn edits_table(out: &mut String, files: &[&GuardFile], now: &Time) {
    out.push_str("| File | Last edited by | When |\n|---|---|---|\n");
    for f in files {
        let Some(e) = &f.edit else { continue };
        let mut who = code(&e.agent);
        if let Some(name) = &e.name {
            let _ = write!(who, " ({name})");
        }
        if e.state == crate::liveness::State::Stalled {
            who.push_str(", stalled");
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            code_cell(&f.file),
            cell(&who),
            with_relative(&e.edited_at, now)
        );
    }
}

fn doctor(r: &DoctorReport) -> String {
    let fails = r.checks.iter().filter(|c| c.status == "fail").count();
    let warns = r.checks.iter().filter(|c| c.status == "warn").count();
    let mut out = if fails > 0 {
        format!(
            "Unhealthy: {fails} problem{} to fix, {warns} warning{}.\n",
            if fails == 1 { "" } else { "s" },
            if warns == 1 { "" } else { "s" }
        )
    } else if warns > 0 {
        format!(
            "Healthy, with {warns} warning{}.\n",
            if warns == 1 { "" } else { "s" }
        )
    } else {
        "Healthy.\n".to_string()
    };
    out.push('\n');
    for c in &r.checks {
        let mark = match c.status.as_str() {
            "ok" => "[x]",
            "warn" => "[!]",
            _ => "[ ]",
        };
        let _ = writeln!(out, "- {mark} {}: {}", c.name, c.detail);
        if let Some(f) = &c.fix {
            let _ = writeln!(out, "  - Fix: {f}");
        }
    }
    let _ = writeln!(out, "\nLock directory: {}", r.lock_dir);
    out
}

//! What the store shows: `status`, `list`, `why` and `audit`.

use super::*;

pub(super) fn status(r: &StatusReport, inv: &Invocation) -> String {
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
            inv.code_of(&Line::new("checkout").arg(&r.key).flag("--queue"))
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
                inv.for_holder(&c.agent.id).cmd("release", &r.key)
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
                        inv.code_of(&Line::new("checkout").arg(&r.key).flag("--queue"))
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

pub(super) fn list(r: &ListReport, inv: &Invocation) -> String {
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
    // A Worktree column only when some checkout has one.
    let with_worktree = r.checkouts.iter().any(|c| c.worktree.is_some());
    if n > 0 {
        out.push_str(if with_paths {
            "\n| Key | Paths | Holder | Token | Since | Lease ends | Queue | Reason |"
        } else {
            "\n| Key | Holder | Token | Since | Lease ends | Queue | Reason |"
        });
        out.push_str(if with_worktree { " Worktree |\n" } else { "\n" });
        let columns = 7 + usize::from(with_paths) + usize::from(with_worktree);
        let _ = writeln!(out, "|{}", "---|".repeat(columns));
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
            if with_worktree {
                out.pop();
                let _ = writeln!(
                    out,
                    " {} |",
                    c.worktree
                        .as_ref()
                        .map(|w| code_cell(&shown_path(w)))
                        .unwrap_or_else(|| "-".into())
                );
            }
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

pub(super) fn why(r: &WhyReport, inv: &Invocation) -> String {
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
    let co = crate::key::checkout_line(key, paths);
    match advice {
        WhyNext::KeepWorking => format!(
            "keep working; release it when done ({}).",
            inv.cmd("release", key)
        ),
        WhyNext::Checkout => format!("{}.", inv.code_of(&co)),
        WhyNext::CheckoutReserved => format!(
            "it is reserved for you: check it out now with {}, before the reservation lapses.",
            inv.code_of(&co)
        ),
        WhyNext::Frozen => "work on something else until the freeze ends.".into(),
        WhyNext::Secret => format!(
            "give the secret it was checked out with (`TASKLOCK_SECRET`), then {}.",
            inv.code_of(&co)
        ),
        WhyNext::Corrupt => format!(
            "inspect the file; {} if nobody works on it.",
            inv.code_of(&Line::new("release").arg(key).flag("--force"))
        ),
        WhyNext::Upgrade => crate::error::UPGRADE.into(),
        WhyNext::FirstInLine { holder } => format!(
            "you are first in line: when {holder} releases it, it is reserved for you and your inbox says so ({}). Work on something else meanwhile, or block until then with {}; no need to queue again.",
            inv.code("inbox"),
            inv.code_of(&co.clone().flag("--wait"))
        ),
        WhyNext::InLine { position } => format!(
            "you are number {position} in its queue; your inbox tells you when it is yours. Work on something else meanwhile, or block until then with {}; no need to queue again.",
            inv.code_of(&co.clone().flag("--wait"))
        ),
        WhyNext::Queue => format!(
            "work on something else, or {}.",
            inv.code_of(&co.clone().flag("--queue"))
        ),
        WhyNext::Deadlock { queue } => format!(
            "leave the queue you wait in ({}) or release what others wait for, then {}.",
            inv.cmd("leave", queue),
            inv.code_of(&co)
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
    if !e.paths.is_empty() && e.is(Event::Acquire) {
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

pub(super) fn audit(r: &AuditReport) -> String {
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

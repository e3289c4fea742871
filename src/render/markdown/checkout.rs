//! `checkout`, `checkout --any` and `run`'s refusal: grants, conflicts over keys, paths and slots, deadlocks.

use super::*;

/// The checkouts whose paths are in the way, as a table.
pub(super) fn overlaps_table(out: &mut String, overlaps: &[OverlapView], now: &Time) {
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

pub(in crate::render) fn checkout(r: &CheckoutReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    match (r.outcome, &r.checkout) {
        (Outcome::SecretRefused, c) => {
            let _ = writeln!(out, "{}", secret_refused_words(&k, c.as_ref()));
            let _ = writeln!(out, "\n{SECRET_NEXT}");
        }
        (Outcome::Deadlock, _) => deadlock(&mut out, r, inv, &k),
        (Outcome::AgentGone, holder) => agent_gone(&mut out, r, inv, &k, holder.as_ref()),
        (Outcome::Frozen, holder) => frozen(&mut out, r, &k, holder.as_ref()),
        (Outcome::Conflict, holder) if !r.overlaps.is_empty() => {
            paths_conflict(&mut out, r, inv, &k, holder.as_ref())
        }
        (Outcome::Conflict, holder) => key_conflict(&mut out, r, inv, &k, holder.as_ref()),
        (_, Some(c)) => granted(&mut out, r, inv, &k, c),
        (_, None) => {
            let _ = writeln!(out, "{k}: {}", outcome_words(r.outcome));
        }
    }
    out
}

fn deadlock(out: &mut String, r: &CheckoutReport, inv: &Invocation, k: &str) {
    if r.cycle.get(1) != Some(&r.key) {
        let _ = writeln!(
            out,
            "Deadlock: taking {k} now would close a wait-for cycle through your own place in the queue of {}; nothing was taken.",
            code(r.cycle.get(1).map(String::as_str).unwrap_or_default())
        );
        let _ = writeln!(out, "\n- Cycle: {}", cycle_words(&r.cycle));
        let _ = writeln!(
            out,
            "\nNext: leave the queue you wait in ({}) or release what others wait for, then take {k}; never wait in a cycle.",
            inv.code("leave KEY")
        );
        return;
    }
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

fn agent_gone(
    out: &mut String,
    r: &CheckoutReport,
    inv: &Invocation,
    k: &str,
    holder: Option<&CheckoutView>,
) {
    let _ = writeln!(
        out,
        "Stopped waiting: your agent's process is gone, so {k} will not be handed to you; you are out of its queue."
    );
    if let Some(c) = holder {
        out.push('\n');
        checkout_lines(out, c, &r.now);
    }
    let _ = writeln!(
        out,
        "\nNext: nothing, if the agent has ended. If it is still at work, register its live process ({}) and wait again.",
        inv.code("heartbeat --pid PID")
    );
}

fn frozen(out: &mut String, r: &CheckoutReport, k: &str, holder: Option<&CheckoutView>) {
    if let Some(f) = &r.frozen {
        let _ = writeln!(out, "Frozen: {k} {}.", freeze_words(f, &r.key, &r.now));
    } else {
        let _ = writeln!(out, "Frozen: {k} cannot be checked out now.");
    }
    if let Some(c) = holder {
        out.push('\n');
        checkout_lines(out, c, &r.now);
        let _ = writeln!(
            out,
            "- The holder keeps it until its lease ends, but cannot renew while frozen."
        );
    }
    let _ = writeln!(
        out,
        "\nNext: work on something else; the freeze ends by itself."
    );
}

/// The lines every refusal ends with: the queue, your place in it, a cycle of others it
/// waits behind, how you will be told, and a checkout that was ended on the way.
fn queue_lines(out: &mut String, r: &CheckoutReport) {
    let _ = writeln!(out, "- Queue: {} waiting", r.queue_length);
    if let Some(p) = r.position {
        let _ = writeln!(out, "- Your place in the queue: {p}");
    }
    if !r.waits_behind.is_empty() {
        let _ = writeln!(
            out,
            "- Waiting behind a wait-for cycle of other agents: {}. It is not yours to break: you keep your place, and your turn comes once one of them gives something up.",
            cycle_words(&r.waits_behind)
        );
    }
    dropped_lines(out, &r.dropped);
    if r.push_wake {
        out.push_str(push_wake_line(r.push_via.as_deref()));
    }
    if let Some(prev) = &r.took_over {
        let _ = writeln!(out, "- Ended: {}", reaped_words(prev, &r.now));
    }
}

fn paths_conflict(
    out: &mut String,
    r: &CheckoutReport,
    inv: &Invocation,
    k: &str,
    holder: Option<&CheckoutView>,
) {
    match holder {
        Some(c) => {
            let _ = writeln!(
                out,
                "Conflict: the paths you added to {k} overlap checkouts of other agents; your checkout of {k} is unchanged (token {}).",
                c.token
            );
        }
        None if !r.line().has_operands() => {
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
    overlaps_table(out, &r.overlaps, &r.now);
    out.push('\n');
    queue_lines(out, r);
    let next = match r.position {
        Some(_) => format!(
            "Next: work on other files; when the paths are free, your inbox says so ({}) and they are held for you for the handoff grace. Or block until then with {}.",
            inv.code("inbox"),
            inv.code_of(&r.line().flag("--wait"))
        ),
        None => format!(
            "Next: work on other files, or {} to be told when they free up; do not retry in a loop.",
            inv.code_of(&r.line().flag("--queue"))
        ),
    };
    let _ = writeln!(out, "\n{next}");
}

fn key_conflict(
    out: &mut String,
    r: &CheckoutReport,
    inv: &Invocation,
    k: &str,
    holder: Option<&CheckoutView>,
) {
    match (&r.reserved_for, holder) {
        _ if !r.holders.is_empty() || r.slots.is_some() => {
            slots_taken(out, r);
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
            checkout_lines(out, c, &r.now);
        }
        (None, None) => {
            let _ = writeln!(out, "Conflict: {k} cannot be taken now.");
            out.push('\n');
        }
    }
    queue_lines(out, r);
    let next = match r.position {
        Some(_) => format!(
            "Next: work on something else; when {k} is handed to you, your inbox says so ({}) and it is held for you for the handoff grace. Or block until then with {}.",
            inv.code("inbox"),
            inv.code_of(&r.line().flag("--wait"))
        ),
        None if r.command == "run" => format!(
            "Next: work on something else, or {} to wait in line and run the command once the key is yours; do not retry in a loop.",
            inv.run_wait(&r.key)
        ),
        None if holder.is_none() && r.reserved_for.is_some() => format!(
            "Next: work on something else, or {} to take your turn after the agents already waiting; do not retry in a loop.",
            inv.code_of(&r.line().flag("--queue"))
        ),
        None => format!(
            "Next: work on something else, or {} to be told when it frees up; do not retry in a loop.",
            inv.code_of(&r.line().flag("--queue"))
        ),
    };
    let _ = writeln!(out, "\n{next}");
}

fn granted(out: &mut String, r: &CheckoutReport, inv: &Invocation, k: &str, c: &CheckoutView) {
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
    checkout_lines(out, c, &r.now);
    if let Some(prev) = &r.took_over {
        let _ = writeln!(out, "- Took over from: {}", reaped_words(prev, &r.now));
    } else if let Some(p) = &r.previous
        && let Some(words) = previous_words(p, &r.now)
    {
        let _ = writeln!(out, "- Previous holder: {words}");
    }
    match (&r.previous, &r.took_over) {
        (Some(p), _) => notes_lines(out, &p.notes, &r.now),
        (None, Some(prev)) => notes_lines(out, &prev.notes, &r.now),
        (None, None) => {}
    }
    if r.queue_length > 0 {
        let _ = writeln!(out, "- Queue: {} waiting after you", r.queue_length);
    }
    dropped_lines(out, &r.dropped);
    if let (Some(made), Some(w)) = (r.worktree, &c.worktree) {
        let _ = writeln!(
            out,
            "\nWork in the worktree ({}): {}.",
            match made {
                WorktreeMade::Created => "made now",
                WorktreeMade::Reused => "it was there already",
            },
            code(&format!("cd {}", crate::error::shell_quote(&w.path)))
        );
    }
    let _ = writeln!(
        out,
        "\nNext: do the work, then {}. If it takes longer, {}. Before an irreversible step (push, deploy), {}.",
        inv.cmd("release", &r.key),
        inv.cmd("renew", &r.key),
        inv.code_of(
            &Line::new("verify")
                .arg(&r.key)
                .opt("--token", &c.token.to_string())
        )
    );
}

/// A key with slots that has none to give: who holds them, and who is served first.
pub(super) fn slots_taken(out: &mut String, r: &CheckoutReport) {
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
pub(super) fn holders_table(out: &mut String, holders: &[CheckoutView], now: &Time) {
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

/// The passive places in queues the checkout dropped, each with the cycle it would have
/// closed.
pub(super) fn dropped_lines(out: &mut String, dropped: &[Dropped]) {
    for p in dropped {
        let _ = writeln!(
            out,
            "- Dropped: the place of {} in the queue of {} (queued with `--queue`, not blocked in a wait), which would have closed a wait-for cycle: {}. {} was told.",
            p.agent,
            code(&p.key),
            cycle_words(&p.cycle),
            p.agent
        );
    }
}

pub(super) fn cycle_words(cycle: &[String]) -> String {
    cycle
        .iter()
        .enumerate()
        .map(|(i, s)| if i % 2 == 1 { code(s) } else { s.clone() })
        .collect::<Vec<_>>()
        .join(" → ")
}

pub(super) fn any(r: &AnyReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let n = r.refused.len();
    let _ = writeln!(out, "Conflict: none of the {n} keys can be taken now.");
    out.push_str(&refusal_table(&r.refused, &r.now));
    let _ = writeln!(
        out,
        "\nNext: work on something else, or queue for one key with {}.",
        inv.code("checkout KEY --queue")
    );
    out
}

/// One row per refused key: who holds it (or for whom it is reserved), until when, and
/// its queue.
pub(super) fn refusal_table(refused: &[CheckoutReport], now: &Time) -> String {
    let mut out = String::from("\n| Key | Held by | Lease ends | Queue |\n|---|---|---|---|\n");
    for c in refused {
        let (who, ends) = match (&c.checkout, &c.reserved_for) {
            (Some(h), _) => (h.agent.label(), with_relative(&h.expires_at, now)),
            (None, Some(res)) => (
                format!("reserved for {}", res.agent),
                with_relative(&res.until, now),
            ),
            (None, None) if c.outcome == Outcome::Corrupt => {
                ("damaged record (skipped)".into(), "-".into())
            }
            (None, None) => match &c.frozen {
                Some(f) => (
                    format!("frozen until {}", with_relative(&f.until, now)),
                    "-".into(),
                ),
                None => ("-".into(), "-".into()),
            },
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
    out
}

/// What a queued agent whose session takes pushes is promised.
pub(super) fn push_wake_line(via: Option<&str>) -> &'static str {
    if via == Some(crate::store::Via::Codex.as_str()) {
        "- When it is your turn: tasklock queues the news in this Codex session, which takes it up within seconds, even if it is idle\n"
    } else {
        "- When it is your turn: tasklock tells this session at once, even if it is idle\n"
    }
}

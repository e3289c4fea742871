//! Agents and their lives: `heartbeat`, `heartbeat --watch`, `agents`, `inbox`, and `run`'s end.

use super::*;

/// How pushing a message into the agent's session went, in words.
pub(super) fn delivery_text(
    d: Option<&crate::store::Delivery>,
    now: &crate::clock::Time,
) -> String {
    match d {
        None => "not pushed (read at the next prompt)".into(),
        Some(d) if d.delivered && d.via == crate::store::VIA_MONITOR => {
            format!("shown by its monitor {}", with_relative(&d.at, now))
        }
        Some(d) if d.delivered => format!("pushed {}", with_relative(&d.at, now)),
        Some(d) => format!(
            "not pushed {}: {}",
            with_relative(&d.at, now),
            d.error.as_deref().unwrap_or("unknown")
        ),
    }
}

pub(super) fn inbox(r: &InboxReport) -> String {
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

pub(in crate::render) fn state_words(a: &AgentRow) -> String {
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
        (None, false) if a.checkouts.is_empty() => {
            format!("{base} (no heartbeat yet; queued only)")
        }
        (None, false) => format!("{base} (no heartbeat yet; lease only)"),
        (None, true) => base.to_string(),
    }
}

pub(super) fn ended_lines(out: &mut String, ended: &[EndedCheckout]) {
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

pub(super) fn heartbeat(r: &HeartbeatReport) -> String {
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

pub(super) fn agents(r: &AgentsReport) -> String {
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
            a.holds_and_waits(key_list).replace('|', "\\|"),
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
pub(super) fn agents_hidden(out: &mut String, r: &AgentsReport) {
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

pub(super) fn watch(r: &WatchReport) -> String {
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

pub(super) fn run(r: &RunReport) -> String {
    let k = code(&r.key);
    let ran = match r.cmd_exit {
        Some(c) => format!("the command exited with {c}"),
        None => "the command could not be started".into(),
    };
    let released = if r.kept && !r.lease_lost {
        "kept: it was yours before `run`, and stays checked out"
    } else if r.kept {
        "it was yours before `run`, but is no longer held"
    } else if r.released {
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

//! Pushing inbox messages into their agents' sessions (docs/wake.md).
//!
//! A message is written to the inbox under the guard, like every change; it is pushed only
//! after the change that wrote it was committed ([`flush`], called by every entry point
//! when a command's work is done, and by long-running commands as they go), so a session
//! is never told of a change that was rolled back. The push is made at most once per
//! message, under the guard: the message must still be unread and have no delivery yet;
//! the outcome is recorded with it whatever it was, and the message stays in the inbox
//! for the agent's hooks and `tasklock inbox` either way.

use std::sync::Mutex;

use super::Ctx;
use crate::clock;
use crate::error::Result;
use crate::liveness::{self, Proc};
use crate::store::{AuditEvent, Delivery, Event, MessageKind, Store};

struct Pending {
    ctx: Ctx,
    agent: String,
    id: String,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

/// How many pushes wait for their change to be committed (see [`truncate`]).
pub(crate) fn mark() -> usize {
    PENDING.lock().map(|p| p.len()).unwrap_or_default()
}

/// Forget the pushes registered since `mark`: their change was abandoned.
pub(crate) fn truncate(mark: usize) {
    if let Ok(mut p) = PENDING.lock() {
        p.truncate(mark);
    }
}

/// Push message `id` of `agent` once the current change is committed.
pub(crate) fn after_commit(ctx: &Ctx, agent: &str, id: &str) {
    // A dry run ([`super::dry`]) sent nothing.
    if super::dry::active() {
        return;
    }
    if let Ok(mut p) = PENDING.lock() {
        p.push(Pending {
            ctx: ctx.clone(),
            agent: agent.to_string(),
            id: id.to_string(),
        });
    }
}

/// Push the messages written since the last flush. Failures stay with the messages (or,
/// when the store itself fails, the messages simply stay unread for the hooks to show):
/// nothing here fails the command that wrote them.
pub fn flush() {
    let pending = match PENDING.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(_) => return,
    };
    let mut rest = pending.as_slice();
    while let Some(first) = rest.first() {
        let n = rest
            .iter()
            .take_while(|p| p.ctx.dir == first.ctx.dir)
            .count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        if let Ok(Some(store)) = first.ctx.existing_store() {
            let _ = deliver(&*store, group);
        }
    }
}

fn deliver(store: &dyn Store, group: &[Pending]) -> Result<()> {
    // Most agents cannot be reached (no session socket): look before taking the guard.
    let mut todo = Vec::new();
    for p in group {
        if store
            .read_agent(&p.agent)?
            .is_some_and(|e| e.reach.is_some())
        {
            todo.push(p);
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    // Under the guard: claim each push (its delivery is recorded before the line is
    // written, so it is made at most once), or record why it cannot be made.
    let sends = store.transaction(|g| {
        let mut sends = Vec::new();
        for p in todo {
            let Some(msg) = store.unread(&p.agent)?.into_iter().find(|m| m.id == p.id) else {
                continue; // read already: nothing to push
            };
            if msg.delivery.is_some() {
                continue; // at most once
            }
            // A blocked `checkout --wait` takes its reserved key itself, at once: telling
            // its session to check the key out would only be noise.
            if msg.kind == MessageKind::Reserved
                && store
                    .read_queue(&msg.key)?
                    .waiters
                    .iter()
                    .any(|w| w.agent == p.agent && w.pid.is_some())
            {
                continue;
            }
            let Some(entry) = store.read_agent(&p.agent)? else {
                continue;
            };
            let Some(reach) = entry.reach.clone() else {
                continue;
            };
            let ready = reachable(&entry).and_then(|()| crate::clients::wake::check(&reach));
            let at = clock::now()?;
            record(store, g, &msg, &reach, at, ready.clone().err())?;
            if ready.is_ok() {
                if msg.kind == MessageKind::Reserved {
                    retime(store, g, &msg.key, &p.agent, &p.id, at)?;
                }
                sends.push((msg, reach));
            }
        }
        Ok(sends)
    })?;
    // After the guard: writing the line wakes the session, which then competes for the
    // CPU; nothing of the command's own work is left to be slowed by it. A write that
    // fails after all replaces the record.
    for (msg, reach) in sends {
        if let Err(e) = crate::clients::wake::send(&reach, &crate::clients::wake::text(&msg)) {
            store
                .transaction(|g| record(store, g, &msg, &reach, clock::now()?, Some(e.clone())))?;
        }
    }
    Ok(())
}

/// How long a monitor leaves a message that no push has tried yet to the push: the
/// command that wrote it pushes right after its change is committed, within
/// milliseconds, and a socket wakes a session sooner than a monitor's line does.
pub const MONITOR_GRACE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(400);

/// What [`claim_for_monitor`] found.
pub struct MonitorClaim {
    /// The messages claimed, to be shown now, each with the delivery
    /// [`shown_by_monitor`] records once its line is written.
    pub shown: Vec<crate::store::Message>,
    /// Messages still left to a push (younger than [`MONITOR_GRACE`], none tried): look
    /// again soon.
    pub pending: bool,
}

/// The error of a message the monitor claimed and has not shown yet.
pub const MONITOR_CLAIMED: &str = "claimed by the session's monitor, not shown yet";

/// Claim, for the monitor of `agent`'s session (`inbox --follow`), the unread messages
/// that no push delivered: the one tried failed (another host, another Unix user, a
/// session that did not take the line), or none was tried within [`MONITOR_GRACE`] of
/// the message. Under the guard, as a push is claimed, so that a message is shown by the
/// monitor or pushed into the socket, never both. The claim is recorded as a delivery
/// that is not made yet ([`MONITOR_CLAIMED`]): a push leaves the message alone, and the
/// hooks and the next monitor still show it. It becomes delivered `via: monitor` only
/// once its line is written ([`shown_by_monitor`]): a monitor killed in between loses no
/// message (it may show one twice).
pub fn claim_for_monitor(store: &dyn Store, agent: &str) -> Result<MonitorClaim> {
    let mut pending = false;
    let mut due = |m: &crate::store::Message, now: &clock::Time| match &m.delivery {
        Some(d) => !d.delivered,
        None if *now - m.ts >= MONITOR_GRACE => true,
        None => {
            pending = true;
            false
        }
    };
    let now = clock::now()?;
    if !store.unread(agent)?.iter().any(|m| due(m, &now)) {
        return Ok(MonitorClaim {
            shown: Vec::new(),
            pending,
        });
    }
    let shown = store.transaction(|g| {
        let mut shown = Vec::new();
        let now = clock::now()?;
        for msg in store.unread(agent)? {
            if !due(&msg, &now) {
                continue;
            }
            // A blocked `checkout --wait` takes its reserved key itself (as for a push).
            if msg.kind == MessageKind::Reserved
                && store
                    .read_queue(&msg.key)?
                    .waiters
                    .iter()
                    .any(|w| w.agent == agent && w.pid.is_some())
            {
                continue;
            }
            let at = clock::now()?;
            let claimed = Delivery {
                at,
                delivered: false,
                via: crate::store::VIA_MONITOR.into(),
                error: Some(MONITOR_CLAIMED.into()),
            };
            store.record_delivery(g, &msg.to, &msg.id, &claimed)?;
            shown.push(crate::store::Message {
                delivery: Some(Delivery {
                    delivered: true,
                    error: None,
                    ..claimed
                }),
                ..msg
            });
        }
        Ok(shown)
    })?;
    Ok(MonitorClaim { shown, pending })
}

/// `msg`, claimed by [`claim_for_monitor`], was written out by the monitor: record it
/// delivered `via: monitor` (the delivery it carries), audited; a reservation's grace
/// runs from the claim, as from a push.
pub fn shown_by_monitor(store: &dyn Store, msg: &crate::store::Message) -> Result<()> {
    let Some(d) = &msg.delivery else {
        return Ok(());
    };
    store.transaction(|g| {
        store.record_delivery(g, &msg.to, &msg.id, d)?;
        let mut ev = AuditEvent::new(d.at, Event::Push, &msg.key, &msg.to);
        ev.detail = Some(format!("{}: shown by the session's monitor", msg.kind));
        store.audit(g, &ev)?;
        if msg.kind == MessageKind::Reserved {
            retime(store, g, &msg.key, &msg.to, &msg.id, d.at)?;
        }
        Ok(())
    })
}

/// Record how pushing `msg` went (`error`: why it was not delivered), and audit it.
fn record(
    store: &dyn Store,
    g: &crate::store::Guard,
    msg: &crate::store::Message,
    reach: &crate::store::Reach,
    at: clock::Time,
    error: Option<String>,
) -> Result<()> {
    let d = Delivery {
        at,
        delivered: error.is_none(),
        via: reach.via.as_str().into(),
        error,
    };
    store.record_delivery(g, &msg.to, &msg.id, &d)?;
    let mut ev = AuditEvent::new(at, Event::Push, &msg.key, &msg.to);
    ev.detail = Some(match &d.error {
        None if reach.via == crate::store::Via::Codex => {
            format!("{}: handed to the session's Codex queue", msg.kind)
        }
        None => format!("{}: delivered to the session", msg.kind),
        Some(e) => format!("{}: not delivered: {e}", msg.kind),
    });
    store.audit(g, &ev)
}

/// Is the session's process alive, here? A session elsewhere, or gone, is not pushed to.
fn reachable(entry: &crate::store::AgentEntry) -> std::result::Result<(), String> {
    if entry.ended_at.is_some() {
        return Err("the agent's session ended".into());
    }
    if entry.host != crate::identity::hostname() {
        return Err(format!("the session runs on another host ({})", entry.host));
    }
    let Some(pid) = entry.pid else {
        return Err("the agent registered no process".into());
    };
    match liveness::check_process(
        &entry.host,
        entry.boot_id.as_deref(),
        entry.pid_ns.as_deref(),
        pid,
        entry.pid_start,
    ) {
        Proc::Running => Ok(()),
        Proc::Gone | Proc::Reused => Err("the session's process is gone".into()),
        Proc::Unknown => Err("the session's process cannot be checked from here".into()),
    }
}

/// Moving a reservation's end by less than this is not worth a write: a push made right
/// after the grant (the usual case) leaves the reservation as it is.
const RETIME_AT_LEAST: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// A reservation whose message was pushed runs from the delivery: its grace is counted
/// from when the session was told, not from when the key was freed.
fn retime(
    store: &dyn Store,
    g: &crate::store::Guard,
    key: &str,
    agent: &str,
    id: &str,
    at: clock::Time,
) -> Result<()> {
    let mut q = store.read_queue(key)?;
    let Some(r) = q
        .reservations
        .iter_mut()
        .find(|r| r.agent == agent && r.message.as_deref() == Some(id))
    else {
        return Ok(());
    };
    let until = at + (r.until - r.since);
    if until - r.until >= RETIME_AT_LEAST {
        r.until = until;
        store.write_queue(g, &q)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{FileStore, Queue, Reservation};

    fn at(s: &str) -> clock::Time {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_late_push_moves_the_reservation_and_a_prompt_one_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileStore::open_or_create(&tmp.path().join(".locks")).unwrap();
        let store: &dyn Store = &store;
        let mut q = Queue::empty("k");
        q.reservations = vec![Reservation {
            agent: "a".into(),
            since: at("2026-01-01T00:00:00Z"),
            until: at("2026-01-01T00:02:00Z"),
            message: Some("m1".into()),
        }];
        let until = |store: &dyn Store| store.read_queue("k").unwrap().reservations[0].until;
        store
            .transaction(|g| {
                store.write_queue(g, &q)?;
                // Pushed 200 ms after the grant: left alone.
                retime(store, g, "k", "a", "m1", at("2026-01-01T00:00:00.200Z"))?;
                // Another agent's, or another message's: left alone.
                retime(store, g, "k", "b", "m1", at("2026-01-01T00:00:30Z"))?;
                retime(store, g, "k", "a", "m2", at("2026-01-01T00:00:30Z"))
            })
            .unwrap();
        assert_eq!(until(store), at("2026-01-01T00:02:00Z"));
        // Pushed 30 s after the grant: the grace runs from then.
        store
            .transaction(|g| retime(store, g, "k", "a", "m1", at("2026-01-01T00:00:30Z")))
            .unwrap();
        assert_eq!(until(store), at("2026-01-01T00:02:30Z"));
    }
}

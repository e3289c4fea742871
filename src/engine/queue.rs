//! Queues, handoff reservations, inbox notifications and wait-for cycles. Everything
//! here runs under the guard, inside the command that meets the situation.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};

use super::Ctx;
use crate::duration::to_chrono;
use crate::error::Result;
use crate::identity::Agent;
use crate::liveness::{self, Proc};
use crate::store::{
    AuditEvent, Guard, Message, MessageKind, Queue, Reservation, Slot, Store, Waiter,
};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn audit(ctx: &Ctx, event: &str, key: &str, agent: &str) -> AuditEvent {
    AuditEvent::new(ctx.now, event, key, agent)
}

/// Put a message in `to`'s inbox and audit it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn notify(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    to: &str,
    from: Option<&str>,
    kind: MessageKind,
    key: &str,
    body: &str,
) -> Result<()> {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let msg = Message {
        version: 1,
        id: format!(
            "{:013}-{}-{seq}",
            ctx.now.timestamp_millis().max(0),
            std::process::id()
        ),
        from: from.map(str::to_string),
        to: to.to_string(),
        kind,
        key: key.to_string(),
        ts: ctx.now,
        body: body.to_string(),
        user: Some(crate::identity::UnixUser::current()),
    };
    store.send(g, &msg)?;
    let mut ev = audit(ctx, "notify", key, to);
    ev.by = msg.from.clone();
    ev.detail = Some(kind.to_string());
    store.audit(g, &ev)
}

/// Is a waiter gone: its waiting process died, or its agent is dead?
fn waiter_gone(ctx: &Ctx, store: &dyn Store, w: &Waiter) -> Result<bool> {
    if let Some(pid) = w.pid {
        match liveness::check_process(
            &w.host,
            w.boot_id.as_deref(),
            w.pid_ns.as_deref(),
            pid,
            w.pid_start,
        ) {
            Proc::Gone | Proc::Reused => return Ok(true),
            Proc::Running => {
                // A blocked --wait cannot beat, so silence proves nothing; but an agent
                // whose own process is gone, or that ended, must never be handed the key
                // through an orphaned wait.
                return Ok(store.read_agent(&w.agent)?.is_some_and(|e| {
                    e.ended_at.is_some()
                        || e.pid.is_some_and(|p| {
                            matches!(
                                liveness::check_process(
                                    &e.host,
                                    e.boot_id.as_deref(),
                                    e.pid_ns.as_deref(),
                                    p,
                                    e.pid_start,
                                ),
                                Proc::Gone | Proc::Reused
                            )
                        })
                }));
            }
            Proc::Unknown => {}
        }
    }
    match store.read_agent(&w.agent)? {
        Some(mut e) => {
            // Joining (or keeping a place in) a queue is a sign of life too.
            if e.last_heartbeat.is_some_and(|t| t < w.since) {
                e.last_heartbeat = Some(w.since);
            }
            Ok(liveness::judge_entry(&e, &ctx.now, &ctx.config()?).dead())
        }
        None => Ok(false),
    }
}

/// Bring a queue up to date: drop gone waiters, lapse an expired reservation (passing it
/// on), and when the key is free reserve it for the head. `taker` is an agent about to
/// take the key itself, which needs no message. Returns whether the queue changed.
pub(crate) fn settle(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    key_free: bool,
    taker: Option<&str>,
) -> Result<bool> {
    let before = q.clone();
    let mut kept = Vec::with_capacity(q.waiters.len());
    for w in std::mem::take(&mut q.waiters) {
        if waiter_gone(ctx, store, &w)? {
            let mut ev = audit(ctx, "dequeue", &q.key, &w.agent);
            ev.reason = Some("gone".into());
            store.audit(g, &ev)?;
        } else {
            kept.push(w);
        }
    }
    q.waiters = kept;
    if let Some(res) = q.reservation.clone() {
        let head_is_holder = q.waiters.first().is_some_and(|w| w.agent == res.agent);
        if !key_free || !head_is_holder {
            q.reservation = None;
        } else if ctx.now >= res.until
            && !(taker == Some(res.agent.as_str()) && q.waiters.len() == 1)
        {
            // Late, but nobody else waits: the head that shows up may still take it.
            q.reservation = None;
            q.waiters.remove(0);
            let mut ev = audit(ctx, "lapse", &q.key, &res.agent);
            ev.detail = Some("the reservation's grace ran out; passed to the next waiter".into());
            store.audit(g, &ev)?;
            notify(
                ctx,
                store,
                g,
                &res.agent,
                None,
                MessageKind::ReservationLapsed,
                &q.key,
                "the key was reserved for you but you did not take it in time; you left its queue",
            )?;
        }
    }
    if key_free
        && q.reservation.is_none()
        && let Some(head) = q.waiters.first().map(|w| w.agent.clone())
    {
        {
            let grace = ctx.config()?.handoff_grace;
            let until = ctx.now + to_chrono(grace);
            q.reservation = Some(Reservation {
                agent: head.clone(),
                since: ctx.now,
                until,
            });
            let mut ev = audit(ctx, "handoff", &q.key, &head);
            ev.detail = Some(format!("reserved until {}", crate::clock::rfc3339(&until)));
            store.audit(g, &ev)?;
            if taker != Some(head.as_str()) {
                let command = format!(
                    "tasklock checkout {}",
                    crate::key::checkout_args(&q.key, &q.waiters[0].paths)
                );
                let body = format!(
                    "the key is free and reserved for you until {}; run `{command}` now",
                    crate::clock::rfc3339(&until),
                );
                notify(
                    ctx,
                    store,
                    g,
                    &head,
                    None,
                    MessageKind::Reserved,
                    &q.key,
                    &body,
                )?;
            }
        }
    }
    Ok(*q != before)
}

/// After a key's record is removed: hand it to the head of its queue, if any. A
/// checkout that covered `paths` may also have been all that kept other queued keys
/// from their heads: those are handed on too.
pub(crate) fn after_release(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    paths: &[String],
    taker: Option<&str>,
) -> Result<()> {
    let mut q = store.read_queue(key)?;
    if !(q.waiters.is_empty() && q.reservation.is_none())
        && settle(ctx, store, g, &mut q, true, taker)?
    {
        store.write_queue(g, &q)?;
    }
    if !paths.is_empty() {
        wake_path_waiters(ctx, store, g, key, paths)?;
    }
    Ok(())
}

/// Queues whose head waits for paths that overlap `released` and whose key and paths
/// are now free: reserve each for its head and tell it.
fn wake_path_waiters(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    released: &[String],
) -> Result<()> {
    use super::paths as p;
    let released = p::compile(released);
    for mut q in store.scan_queues()? {
        if q.key == key || q.reservation.is_some() {
            continue;
        }
        let Some(head) = q.waiters.first().cloned() else {
            continue;
        };
        let wanted = p::compile(&head.paths);
        if !released
            .iter()
            .any(|r| wanted.iter().any(|w| crate::paths::overlaps(r, w)))
        {
            continue;
        }
        if !matches!(store.read(&q.key)?, Slot::Free)
            || !p::held_overlaps(store, &head.agent, &q.key, &wanted)?.is_empty()
            || !p::reserved_overlaps(ctx, store, &head.agent, &q.key, &wanted)?.is_empty()
        {
            continue;
        }
        if settle(ctx, store, g, &mut q, true, None)? {
            store.write_queue(g, &q)?;
        }
    }
    Ok(())
}

/// The head of the queue takes the key reserved for it: it leaves the queue, and its
/// unread `reserved` message for the key is marked read (it has done what it said).
pub(crate) fn take_reservation(
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    agent: &str,
) -> Result<()> {
    q.waiters.retain(|w| w.agent != agent);
    q.reservation = None;
    store.write_queue(g, q)?;
    for msg in store.unread(agent)? {
        if msg.kind == MessageKind::Reserved && msg.key == q.key {
            store.mark_read(agent, &msg.id)?;
        }
    }
    Ok(())
}

/// Join (or keep one's place in) a key's queue. `pid` is the blocked `--wait` process.
pub(crate) fn join(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    agent: &Agent,
    pid: Option<u32>,
    paths: &[String],
) -> Result<()> {
    if let Some(w) = q.waiters.iter_mut().find(|w| w.agent == agent.id) {
        if (pid.is_some() && w.pid != pid) || w.paths != paths {
            if pid.is_some() {
                w.pid = pid;
                w.pid_start = pid.and_then(liveness::start_time);
            }
            w.paths = paths.to_vec();
            store.write_queue(g, q)?;
        }
        return Ok(());
    }
    q.waiters.push(Waiter {
        agent: agent.id.clone(),
        name: agent.name.clone(),
        since: ctx.now,
        pid,
        pid_start: pid.and_then(liveness::start_time),
        host: agent.host.clone(),
        boot_id: agent.boot_id.clone(),
        pid_ns: agent.pid_ns.clone(),
        user: Some(crate::identity::UnixUser::current()),
        paths: paths.to_vec(),
    });
    store.write_queue(g, q)?;
    let mut ev = audit(ctx, "queue", &q.key, &agent.id);
    ev.name = agent.name.clone();
    ev.detail = Some(format!("position {}", q.waiters.len()));
    store.audit(g, &ev)
}

/// Leave a key's queue (a `--wait` that ran out); a reservation held passes on.
pub(crate) fn leave(ctx: &Ctx, store: &dyn Store, g: &Guard, key: &str, agent: &str) -> Result<()> {
    let mut q = store.read_queue(key)?;
    let Some(i) = q.waiters.iter().position(|w| w.agent == agent) else {
        return Ok(());
    };
    q.waiters.remove(i);
    if q.reservation.as_ref().is_some_and(|r| r.agent == agent) {
        q.reservation = None;
    }
    let free = matches!(store.read(key)?, Slot::Free);
    settle(ctx, store, g, &mut q, free, None)?;
    store.write_queue(g, &q)?;
    let mut ev = audit(ctx, "dequeue", key, agent);
    ev.reason = Some("wait ended".into());
    store.audit(g, &ev)
}

/// Would `me` waiting for `key` (held or reserved by `holder`) close a wait-for cycle?
/// Returns the cycle as agent, key, agent, …, agent.
pub(crate) fn find_cycle(
    store: &dyn Store,
    me: &str,
    key: &str,
    holder: &str,
) -> Result<Option<Vec<String>>> {
    let queues = store.scan_queues()?;
    // What each agent waits for: a key, and the paths it asked for with it.
    let mut waits: HashMap<String, Vec<(String, Vec<String>)>> = HashMap::new();
    for q in &queues {
        for w in &q.waiters {
            waits
                .entry(w.agent.clone())
                .or_default()
                .push((q.key.clone(), w.paths.clone()));
        }
    }
    let reserved: HashMap<&str, &str> = queues
        .iter()
        .filter_map(|q| {
            q.reservation
                .as_ref()
                .map(|r| (q.key.as_str(), r.agent.as_str()))
        })
        .collect();
    // Who keeps `agent` from `k`: its holder (or the agent it is reserved for), and the
    // holders of other checkouts whose paths overlap the paths `agent` asked for.
    let blockers = |agent: &str, k: &str, paths: &[String]| -> Result<Vec<String>> {
        let mut out: Vec<String> = match store.read(k)? {
            Slot::Held(r) => vec![r.agent.id],
            _ => reserved.get(k).map(|a| a.to_string()).into_iter().collect(),
        };
        if !paths.is_empty() {
            let mine = super::paths::compile(paths);
            for o in super::paths::held_overlaps(store, agent, k, &mine)? {
                if !out.contains(&o.record.agent.id) {
                    out.push(o.record.agent.id);
                }
            }
        }
        Ok(out)
    };
    let mut path = vec![me.to_string(), key.to_string(), holder.to_string()];
    let mut seen = HashSet::new();
    type Blockers<'a> = dyn Fn(&str, &str, &[String]) -> Result<Vec<String>> + 'a;
    fn dfs(
        agent: &str,
        me: &str,
        waits: &HashMap<String, Vec<(String, Vec<String>)>>,
        blockers: &Blockers<'_>,
        path: &mut Vec<String>,
        seen: &mut HashSet<String>,
    ) -> Result<bool> {
        if agent == me {
            return Ok(true);
        }
        if !seen.insert(agent.to_string()) {
            return Ok(false);
        }
        for (k, paths) in waits.get(agent).into_iter().flatten() {
            for h in blockers(agent, k, paths)? {
                if h == agent {
                    continue;
                }
                path.push(k.clone());
                path.push(h.clone());
                if dfs(&h, me, waits, blockers, path, seen)? {
                    return Ok(true);
                }
                path.pop();
                path.pop();
            }
        }
        Ok(false)
    }
    if dfs(holder, me, &waits, &blockers, &mut path, &mut seen)? {
        Ok(Some(path))
    } else {
        Ok(None)
    }
}

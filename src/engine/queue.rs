//! Queues, handoff reservations, inbox notifications and wait-for cycles. Everything
//! here runs under the guard, inside the command that meets the situation.

use std::sync::atomic::{AtomicU32, Ordering};

use super::waits::Graph;
use super::{Ctx, Scope};
use crate::duration::to_chrono;
use crate::error::Result;
use crate::identity::Agent;
use crate::liveness;
use crate::store::{
    AuditEvent, Event, Guard, Message, MessageKind, Queue, Record, Reservation, Slot, Store, Waiter,
};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The agents handed a reservation by the change of the queues under way, whose cycles
/// are announced once it is done ([`announcing`]).
#[derive(Default)]
struct Deferred {
    depth: u32,
    reserved: std::collections::VecDeque<String>,
}

thread_local! {
    static DEFERRED: std::cell::RefCell<Deferred> = std::cell::RefCell::new(Deferred::default());
}

/// Leaves the change: the outermost one drops what it did not announce (an error).
struct Depth;

impl Drop for Depth {
    fn drop(&mut self) {
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            d.depth -= 1;
            if d.depth == 0 {
                d.reserved.clear();
            }
        });
    }
}

/// Run `f`, a change of the queues, and announce the cycles its reservations closed
/// ([`announce_through`]) once the outermost such change is done: one change may make
/// several reservations (a key handed on, then the paths its checkout held), and a cycle
/// is judged in the state they make together. Announced one reservation at a time, a
/// waiter could be dropped for a cycle that a later reservation of the same change
/// breaks by dropping another: told of a cycle that never stood.
pub(crate) fn announcing<T>(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let outermost = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        d.depth += 1;
        d.depth == 1
    });
    let _depth = Depth;
    let out = f()?;
    if outermost {
        // Dropping a waiter may hand its key on: those reservations are announced next.
        loop {
            let tos: Vec<String> = DEFERRED.with(|d| d.borrow_mut().reserved.drain(..).collect());
            if tos.is_empty() {
                break;
            }
            announce_through(ctx, store, g, &tos)?;
        }
    }
    Ok(out)
}

/// `to` was handed a reservation: announce its cycles when the change is done.
fn defer_announce(reserved: &[String]) {
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        for a in reserved {
            if !d.reserved.contains(a) {
                d.reserved.push_back(a.clone());
            }
        }
    });
}

fn audit(ctx: &Ctx, event: Event, key: &str, agent: &str) -> AuditEvent {
    AuditEvent::new(ctx.now(), event, key, agent)
}

/// [`Scope::notify`], for the callers that do not hold a [`Scope`] yet.
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
) -> Result<String> {
    Scope::new(ctx, store, g).notify(to, from, kind, key, body)
}

impl Scope<'_> {
    /// Put a message in `to`'s inbox about `key`, from `from`, audited; once the change
    /// stands it is pushed into `to`'s session if it can be reached
    /// ([`super::deliver`]). Returns the message's id.
    pub(crate) fn notify(
        &self,
        to: &str,
        from: Option<&str>,
        kind: MessageKind,
        key: &str,
        body: &str,
    ) -> Result<String> {
        let (ctx, store, g) = (self.ctx, self.store, self.guard);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let msg = Message {
            version: 1,
            // Fixed widths: an inbox is read oldest first by (time, id), so ids of one
            // millisecond compare as numbers would (a process id of 4 digits no longer
            // sorts after one of 5, nor a tenth message before the second).
            id: format!(
                "{:013}-{:010}-{seq:06}",
                ctx.now().timestamp_millis().max(0),
                std::process::id()
            ),
            from: from.map(str::to_string),
            to: to.to_string(),
            kind,
            key: key.to_string(),
            ts: ctx.now(),
            body: body.to_string(),
            user: Some(crate::identity::UnixUser::current()),
            delivery: None,
        };
        store.send(g, &msg)?;
        let mut ev = audit(ctx, Event::Notify, key, to);
        ev.by = msg.from.clone();
        ev.detail = Some(kind.to_string());
        store.audit(g, &ev)?;
        super::deliver::after_commit(ctx, to, &msg.id);
        Ok(msg.id)
    }
}

/// Is a waiter gone ([`liveness::waiter_gone`], judged now)?
pub(crate) fn waiter_gone(ctx: &Ctx, store: &dyn Store, w: &Waiter) -> Result<bool> {
    liveness::waiter_gone(store, w, &ctx.now(), &ctx.config()?)
}

/// Who has a key, as far as its queue is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyNow<'a> {
    /// Nobody holds it: any waiter may be served.
    Free,
    /// This agent holds it: only its own entry (a holder waiting to add paths) may be.
    HeldBy(&'a str),
    /// A key with slots, this many of them free: as many waiters may be served.
    Slots(usize),
    /// Nobody can take it (its record is damaged) until it is repaired.
    Unavailable,
}

impl KeyNow<'_> {
    /// A key with slots as its queue sees it.
    pub(crate) fn of_slots(h: &super::slots::Holders) -> KeyNow<'static> {
        if h.corrupt.is_some() {
            KeyNow::Unavailable
        } else {
            KeyNow::Slots(h.free())
        }
    }

    fn serves(self, agent: &str) -> bool {
        match self {
            KeyNow::Free => true,
            KeyNow::HeldBy(h) => h == agent,
            KeyNow::Slots(free) => free > 0,
            KeyNow::Unavailable => false,
        }
    }

    /// How many reservations may stand at once.
    fn room(self) -> usize {
        match self {
            KeyNow::Free | KeyNow::HeldBy(_) => 1,
            KeyNow::Slots(free) => free,
            KeyNow::Unavailable => 0,
        }
    }

    /// The key as a slot read now shows it (a key without slots).
    pub(crate) fn of(slot: &Slot) -> KeyNow<'_> {
        match slot {
            Slot::Held(r) => KeyNow::HeldBy(&r.agent.id),
            Slot::Corrupt { .. } => KeyNow::Unavailable,
            Slot::Free => KeyNow::Free,
        }
    }
}

/// Settle `key`'s queue as the store shows the key now: its own record, or for a key
/// with slots, how many of them are free.
pub(crate) fn settle_now(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    taker: Option<&str>,
) -> Result<Queue> {
    let slot = store.read(key)?;
    let q = store.read_queue(key)?;
    if q.is_empty() {
        return Ok(q);
    }
    match super::slots::Holders::read(store, key, Some(&q), &slot)? {
        Some(h) => settle_key(ctx, store, g, key, KeyNow::of_slots(&h), taker),
        None => settle_key(ctx, store, g, key, KeyNow::of(&slot), taker),
    }
}

/// What [`settle`] did.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The queue differs from what was read: write it.
    pub changed: bool,
    /// Paths that a reservation held until it ended untaken: waiters of other queues
    /// that wanted them may be served now ([`wake_path_waiters`]).
    pub freed: Vec<String>,
    /// Agents (not the taker) the key was reserved for: what waits for them now may
    /// have closed a cycle ([`announce_through`]).
    pub reserved: Vec<String>,
}

/// Does a live agent other than `w`'s hold, or have reserved, a path `w` asked for with
/// `key`? A checkout whose lease is over or whose holder is dead keeps nobody out: the
/// one who comes to take the paths ends it.
fn paths_taken(ctx: &Ctx, store: &dyn Store, key: &str, w: &Waiter) -> Result<bool> {
    if w.paths.is_empty() {
        return Ok(false);
    }
    let wanted = super::paths::compile(&w.paths);
    for o in super::paths::held_overlaps(store, &w.agent, key, &wanted)? {
        if holds_live(ctx, store, &o.record)? {
            return Ok(true);
        }
    }
    Ok(!super::paths::reserved_overlaps(ctx, store, &w.agent, key, &wanted)?.is_empty())
}

/// Is a checkout still its holder's: its lease not over by the skew margin and its
/// holder not dead?
fn holds_live(ctx: &Ctx, store: &dyn Store, r: &Record) -> Result<bool> {
    if r.breakable(&ctx.now()) {
        return Ok(false);
    }
    let entry = store.read_agent(&r.agent.id)?;
    Ok(!liveness::judge_record(r, entry.as_ref(), &ctx.now(), &ctx.config()?).dead())
}

/// Bring a queue up to date: drop gone waiters; end reservations that lapsed or that
/// their waiters can no longer use; and, while there is room (one reservation for a
/// key, one per free slot for a key with slots), reserve the key for the first waiter
/// that can take it now: the key is free (or its own, for a holder waiting to add
/// paths) and no live agent holds or has reserved a path it asked for. Reserved
/// waiters stand at the head, in the order they were served; waiters passed keep their
/// order behind them. `taker` is an agent about to take the key itself, which needs no
/// message.
pub(crate) fn settle(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    key_now: KeyNow<'_>,
    taker: Option<&str>,
) -> Result<Settled> {
    let before = q.clone();
    let mut freed = Vec::new();
    let mut reserved = Vec::new();
    let mut kept = Vec::with_capacity(q.waiters.len());
    for w in std::mem::take(&mut q.waiters) {
        if waiter_gone(ctx, store, &w)? {
            let mut ev = audit(ctx, Event::Dequeue, &q.key, &w.agent);
            ev.reason = Some("gone".into());
            store.audit(g, &ev)?;
            if q.reserved_for(&w.agent).is_some() {
                freed.extend(w.paths.iter().cloned());
            }
        } else {
            kept.push(w);
        }
    }
    q.waiters = kept;
    let mut standing = Vec::with_capacity(q.reservations.len());
    for res in std::mem::take(&mut q.reservations) {
        let Some(i) = q.waiters.iter().position(|w| w.agent == res.agent) else {
            continue;
        };
        if !key_now.serves(&res.agent) || standing.len() >= key_now.room() {
            // No longer a key it can take (or fewer slots than reservations): it waits
            // again, in its place.
            freed.extend(q.waiters[i].paths.iter().cloned());
            continue;
        }
        let unreserved_waiting = q.waiters.len() > standing.len() + 1;
        // Late, but nobody else waits: the waiter that shows up may still take it.
        let keeps = taker == Some(res.agent.as_str()) && !unreserved_waiting;
        if ctx.now() >= res.until && !keeps {
            let h = q.waiters.remove(i);
            freed.extend(h.paths);
            let mut ev = audit(ctx, Event::Lapse, &q.key, &res.agent);
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
            continue;
        }
        standing.push(res);
    }
    // The reserved stand at the head, in the order of their reservations.
    for (at, res) in standing.iter().enumerate() {
        if let Some(i) = q.waiters.iter().position(|w| w.agent == res.agent) {
            let w = q.waiters.remove(i);
            q.waiters.insert(at, w);
        }
    }
    q.reservations = standing;
    while q.reservations.len() < key_now.room() {
        let at = q.reservations.len();
        let mut served = None;
        for (i, w) in q.waiters.iter().enumerate().skip(at) {
            if key_now.serves(&w.agent) && !paths_taken(ctx, store, &q.key, w)? {
                served = Some(i);
                break;
            }
        }
        let Some(i) = served else { break };
        let w = q.waiters.remove(i);
        q.waiters.insert(at, w);
        let holding = matches!(key_now, KeyNow::HeldBy(_));
        reserve(ctx, store, g, q, at, i - at, holding, taker)?;
        let head = &q.waiters[at].agent;
        if taker != Some(head.as_str()) {
            reserved.push(head.clone());
        }
    }
    Ok(Settled {
        changed: *q != before,
        freed,
        reserved,
    })
}

/// Reserve the key for the waiter at `at` (right behind those already reserved) and tell
/// it (unless it is `taker`). `passed` waiters were ahead of it, their paths still held;
/// `holding`: it holds the key and waits to add paths.
#[allow(clippy::too_many_arguments)]
fn reserve(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    at: usize,
    passed: usize,
    holding: bool,
    taker: Option<&str>,
) -> Result<()> {
    let head = q.waiters[at].clone();
    let grace = ctx.config()?.handoff_grace;
    let until = ctx.now() + to_chrono(grace);
    q.reservations.push(Reservation {
        agent: head.agent.clone(),
        since: ctx.now(),
        until,
        message: None,
    });
    let mut ev = audit(ctx, Event::Handoff, &q.key, &head.agent);
    ev.paths = head.paths.clone();
    ev.detail = Some(match passed {
        0 => format!("reserved until {}", crate::clock::rfc3339(&until)),
        n => format!(
            "reserved until {}; passed {n} waiter(s) ahead whose paths are still held",
            crate::clock::rfc3339(&until)
        ),
    });
    store.audit(g, &ev)?;
    if taker == Some(head.agent.as_str()) {
        return Ok(());
    }
    let command = format!(
        "tasklock {}",
        crate::key::checkout_line(&q.key, &head.paths).render(&[])
    );
    let what = if holding {
        "the paths you asked for to add to your checkout are free"
    } else if q.slots.is_some() {
        "a slot of the key is free"
    } else if head.paths.is_empty() {
        "the key is free"
    } else {
        "the key and the paths you asked for are free"
    };
    let body = format!(
        "{what} and reserved for you until {}; run `{command}` now",
        crate::clock::rfc3339(&until),
    );
    let id = notify(
        ctx,
        store,
        g,
        &head.agent,
        None,
        MessageKind::Reserved,
        &q.key,
        &body,
    )?;
    if let Some(r) = q.reservations.last_mut() {
        r.message = Some(id);
    }
    Ok(())
}

/// Settle `key`'s queue as it is stored, write it if it changed, and serve the waiters
/// of other queues that a reservation ended here frees paths for. Returns the queue.
pub(crate) fn settle_key(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    key_now: KeyNow<'_>,
    taker: Option<&str>,
) -> Result<Queue> {
    let q = store.read_queue(key)?;
    settle_read(ctx, store, g, key, q, key_now, taker)
}

/// [`settle_key`] for `q`, `key`'s queue as read under this guard and not changed since.
pub(crate) fn settle_read(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    mut q: Queue,
    key_now: KeyNow<'_>,
    taker: Option<&str>,
) -> Result<Queue> {
    if q.is_empty() {
        return Ok(q);
    }
    let reserved = announcing(ctx, store, g, || {
        let s = settle(ctx, store, g, &mut q, key_now, taker)?;
        if s.changed {
            store.write_queue(g, &q)?;
        }
        wake_path_waiters(ctx, store, g, key, &s.freed)?;
        defer_announce(&s.reserved);
        Ok(!s.reserved.is_empty())
    })?;
    // Announcing its reservations may have dropped waiters of it.
    if reserved {
        store.read_queue(key)
    } else {
        Ok(q)
    }
}

/// After a key's checkout `ended`: its holder leaves the key's queue (it was there only
/// to add paths to what it held), and the key goes to the first waiter that can take it.
/// A checkout that covered paths may also have been all that kept other queues' waiters
/// from their keys: those are served too.
pub(crate) fn after_release(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    ended: &Record,
    taker: Option<&str>,
) -> Result<()> {
    announcing(ctx, store, g, || {
        let key = ended.key.as_str();
        let q = store.read_queue(key)?;
        if !q.is_empty() {
            let who = (ended.agent.id.as_str(), "checkout ended");
            let slot = store.read(key)?;
            match super::slots::Holders::read(store, key, Some(&q), &slot)? {
                Some(h) => {
                    let key_now = KeyNow::of_slots(&h);
                    dequeue_then_settle(ctx, store, g, q, who, key_now, taker)?;
                }
                None => dequeue_then_settle(ctx, store, g, q, who, KeyNow::of(&slot), taker)?,
            }
        }
        wake_path_waiters(ctx, store, g, key, &ended.paths)
    })
}

/// Queues with no reservation that have a waiter wanting a path that overlaps
/// `released`: settle each, so the first of its waiters that can now take its key is
/// served and told.
pub(crate) fn wake_path_waiters(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    released: &[String],
) -> Result<()> {
    if released.is_empty() {
        return Ok(());
    }
    let released = super::paths::compile(released);
    let wants = |w: &Waiter| {
        let wanted = super::paths::compile(&w.paths);
        released
            .iter()
            .any(|r| wanted.iter().any(|p| crate::paths::overlaps(r, p)))
    };
    announcing(ctx, store, g, || {
        for q in store.scan_queues()? {
            if q.key == key || !q.reservations.is_empty() || !q.waiters.iter().any(wants) {
                continue;
            }
            // Each settle may reserve paths the next queue's waiters want: read afresh.
            settle_now(ctx, store, g, &q.key, None)?;
        }
        Ok(())
    })
}

/// `agent` has what it queued for (the key, or the paths it waited to add): it leaves
/// the key's queue, a reservation for it ends, and its unread `reserved` message for the
/// key is marked read (it has done what it said).
pub(crate) fn granted(store: &dyn Store, g: &Guard, q: &mut Queue, agent: &str) -> Result<()> {
    let before = q.waiters.len();
    q.waiters.retain(|w| w.agent != agent);
    let was_reserved = q.reserved_for(agent).is_some();
    if was_reserved {
        q.reservations.retain(|r| r.agent != agent);
    }
    if q.waiters.len() == before && !was_reserved {
        return Ok(());
    }
    store.write_queue(g, q)?;
    if was_reserved {
        for msg in store.unread(agent)? {
            if msg.kind == MessageKind::Reserved && msg.key == q.key {
                store.mark_read(agent, &msg.id)?;
            }
        }
    }
    Ok(())
}

/// Join (or keep one's place in) a key's queue. `pid` is the blocked `--wait` process.
/// A holder waiting to add paths to its own key goes to the head: nobody else can be
/// served the key before it releases.
///
/// A re-join asking for other paths by an agent the key is reserved for changes what
/// its reservation holds: the paths it held before are offered to the waiters of other
/// queues ([`wake_path_waiters`]), whose reservations are checked for cycles as every
/// reservation is; `q` is read again after that.
#[allow(clippy::too_many_arguments)]
pub(crate) fn join(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    q: &mut Queue,
    agent: &Agent,
    pid: Option<u32>,
    paths: &[String],
    holder: bool,
) -> Result<()> {
    if let Some(w) = q.waiters.iter_mut().find(|w| w.agent == agent.id) {
        if (pid.is_some() && w.pid != pid) || w.paths != paths {
            if pid.is_some() {
                w.pid = pid;
                w.pid_start = pid.and_then(crate::os::start_time);
            }
            let changed = w.paths != paths;
            let before = std::mem::replace(&mut w.paths, paths.to_vec());
            store.write_queue(g, q)?;
            if changed {
                // A re-join asking for other paths: a wait of its own, audited as one.
                let mut ev = audit(ctx, Event::Queue, &q.key, &agent.id);
                ev.name = agent.name.clone();
                ev.paths = paths.to_vec();
                ev.detail = Some(format!(
                    "position {}; paths changed",
                    q.position(&agent.id).unwrap_or_default()
                ));
                store.audit(g, &ev)?;
                if q.reserved_for(&agent.id).is_some() && !before.is_empty() {
                    wake_path_waiters(ctx, store, g, &q.key, &before)?;
                    *q = store.read_queue(&q.key)?;
                }
            }
        }
        return Ok(());
    }
    let w = Waiter {
        agent: agent.id.clone(),
        name: agent.name.clone(),
        since: ctx.now(),
        pid,
        pid_start: pid.and_then(crate::os::start_time),
        host: agent.host.clone(),
        boot_id: agent.boot_id.clone(),
        pid_ns: agent.pid_ns.clone(),
        user: Some(crate::identity::UnixUser::current()),
        paths: paths.to_vec(),
    };
    if holder {
        q.waiters.insert(0, w);
    } else {
        q.waiters.push(w);
    }
    store.write_queue(g, q)?;
    let mut ev = audit(ctx, Event::Queue, &q.key, &agent.id);
    ev.name = agent.name.clone();
    ev.paths = paths.to_vec();
    ev.detail = Some(format!(
        "position {}",
        q.position(&agent.id).unwrap_or_default()
    ));
    store.audit(g, &ev)
}

/// Leave a key's queue (a `--wait` that ran out, `leave`, `release` of a key one only
/// queued for); a reservation held passes on. Returns whether `agent` was queued.
pub(crate) fn leave(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    key: &str,
    agent: &str,
    reason: &str,
) -> Result<bool> {
    let q = store.read_queue(key)?;
    if !q.waiters.iter().any(|w| w.agent == agent) {
        return Ok(false);
    }
    let slot = store.read(key)?;
    let key_now = match super::slots::Holders::read(store, key, Some(&q), &slot)? {
        Some(h) => KeyNow::of_slots(&h),
        None => KeyNow::of(&slot),
    };
    announcing(ctx, store, g, || {
        dequeue_then_settle(ctx, store, g, q, (agent, reason), key_now, None)
    })?;
    Ok(true)
}

/// Take `who.0` out of `q` if it is there (audited `dequeue`, reason `who.1`; a
/// reservation it held ends), settle the rest, write the queue if it changed, and offer
/// the paths a reservation ended here held to other queues' waiters.
fn dequeue_then_settle(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    mut q: Queue,
    who: (&str, &str),
    key_now: KeyNow<'_>,
    taker: Option<&str>,
) -> Result<()> {
    let (agent, reason) = who;
    let mut freed = Vec::new();
    let removed = match q.waiters.iter().position(|w| w.agent == agent) {
        Some(i) => {
            let w = q.waiters.remove(i);
            if q.reserved_for(agent).is_some() {
                q.reservations.retain(|r| r.agent != agent);
                freed = w.paths;
            }
            let mut ev = audit(ctx, Event::Dequeue, &q.key, agent);
            ev.reason = Some(reason.into());
            store.audit(g, &ev)?;
            true
        }
        None => false,
    };
    let s = settle(ctx, store, g, &mut q, key_now, taker)?;
    if removed || s.changed {
        store.write_queue(g, &q)?;
    }
    freed.extend(s.freed);
    wake_path_waiters(ctx, store, g, &q.key, &freed)?;
    defer_announce(&s.reserved);
    Ok(())
}

/// The keys whose queues `agent` waits in.
pub(crate) fn queued_keys(store: &dyn Store, agent: &str) -> Result<Vec<String>> {
    Ok(store
        .scan_queues()?
        .into_iter()
        .filter(|q| q.waiters.iter().any(|w| w.agent == agent))
        .map(|q| q.key)
        .collect())
}

/// Each agent of `tos` was just handed something others may wait for (a key reserved
/// for it, with the paths it asked for): every cycle of waits this closed is announced.
/// The waiter whose wait for one of them closes a cycle (the last step of the cycle
/// walked from it; if that is a blocked `--wait`, the first passive place on the cycle
/// instead, when there is one: see [`super::waits::breaking`]) leaves that queue,
/// audited as `deadlock`, and is told by a `deadlock` message naming the cycle.
///
/// The waiters to drop are weighed together before any leaves: cycles can share waits,
/// and a waiter dropped for one cycle can be in another. A wait whose cycles all break
/// once the others have left stays, so each waiter dropped is told of a cycle that
/// stands without it.
pub(crate) fn announce_through(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    tos: &[String],
) -> Result<()> {
    // (waiter, key, the agent of `tos` it waits for).
    let mut drops: Vec<(String, String, String)> = Vec::new();
    let left = |drops: &[(String, String, String)], but: Option<usize>| -> Vec<(String, String)> {
        drops
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != but)
            .map(|(_, (x, k, _))| (x.clone(), k.clone()))
            .collect()
    };
    // Each round takes one more place out, so this ends.
    loop {
        let graph = Graph::without(ctx, store, g, &left(&drops, None))?;
        let Some((to, cycle)) = tos
            .iter()
            .find_map(|to| graph.cycle_through(to).map(|c| (to, c)))
        else {
            break;
        };
        // [to, k, …, x, kx, to]: x waits for kx, kept by `to`. That place goes, unless
        // it is a blocked `--wait` and a passive place on the cycle can go instead.
        let n = cycle.len();
        let closing = (cycle[n - 3].as_str(), cycle[n - 2].as_str());
        let (x, kx) = if graph.passive(closing.0, closing.1) {
            closing
        } else {
            super::waits::places(&cycle)
                .find(|&(a, k)| graph.passive(a, k))
                .unwrap_or(closing)
        };
        drops.push((x.to_string(), kx.to_string(), to.clone()));
    }
    // Last dropped first: a wait that closes no cycle once the others have left stays.
    for i in (0..drops.len()).rev() {
        let (x, kx, _) = &drops[i];
        if Graph::without(ctx, store, g, &left(&drops, Some(i)))?
            .cycle_of(x, kx)
            .is_none()
        {
            drops.remove(i);
        }
    }
    let mut told = Vec::with_capacity(drops.len());
    for i in 0..drops.len() {
        let (x, kx, _) = &drops[i];
        let graph = Graph::without(ctx, store, g, &left(&drops, Some(i)))?;
        told.push(graph.cycle_of(x, kx));
    }
    for ((x, kx, to), cycle) in drops.iter().zip(told) {
        // Kept above only with a cycle, in a graph that the other drops only shrink.
        let Some(cycle) = cycle else { continue };
        let because = if x == to {
            "you were handed what others wait for".to_string()
        } else {
            format!("{to} was handed what you wait for")
        };
        drop_place(ctx, store, g, x, kx, &cycle, &because)?;
    }
    Ok(())
}

/// `x`'s place in the queue of `kx` closes `cycle` (from and back to `x`) `because` of
/// another's change: it leaves that queue, audited as `deadlock` with reason `dropped`,
/// and is told by a `deadlock` message naming the cycle. Returns whether it was queued.
pub(crate) fn drop_place(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    x: &str,
    kx: &str,
    cycle: &[String],
    because: &str,
) -> Result<bool> {
    let words = cycle.join(" → ");
    let mut ev = audit(ctx, Event::Deadlock, kx, x);
    ev.holder = cycle.get(2).cloned();
    ev.reason = Some("dropped".into());
    ev.detail = Some(words.clone());
    store.audit(g, &ev)?;
    if !leave(ctx, store, g, kx, x, "deadlock")? {
        return Ok(false);
    }
    let body = format!(
        "your place in the queue of `{kx}` closed a wait-for cycle when {because} ({words}); you left that queue. Release a key or paths others wait for, or work on something else, before you queue again"
    );
    notify(ctx, store, g, x, None, MessageKind::Deadlock, kx, &body)?;
    Ok(true)
}

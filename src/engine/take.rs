//! Taking a key: the one place that knows the rules of a checkout, with or without
//! paths, slots or a queue. [`attempt`] decides under the store's scope and returns the
//! outcome as a [`CheckoutReport`]; commands (`checkout`, `run`, `--wait`, `--any`), the
//! edit hook and the MCP server all come here.

use std::time::Duration;

use super::decide::{Blocked, Decision, Holding, KeyState, WaitCheck, decide};
use super::queue::{self, KeyNow};
use super::waits::{Breaking, Dropped, Graph, Taking, breaking};
use super::{Ctx, Judge, NOTES_SHOWN, auto_release, auto_release_for, paths, slots};
use crate::duration::to_chrono;
use crate::error::{Error, Outcome, Result};
use crate::identity::Agent;
use crate::report::{CheckoutReport, CheckoutView, OverlapView, Reaped};
use crate::store::{AgentEntry, AuditEvent, Event, Guard, Queue, Record, Slot, Store};

pub use super::decide::Join;

/// Everything a checkout needs besides the key.
#[derive(Debug, Clone)]
pub struct Request {
    pub agent: Agent,
    pub lease: Duration,
    /// The lease was given with `--timeout` (else it is the configured default).
    pub lease_given: bool,
    pub reason: Option<String>,
    /// The caller's secret (`TASKLOCK_SECRET`) as a new checkout stores it: hashed here,
    /// before the guard, so the critical section does no extra I/O.
    pub owner: Option<crate::secret::Proof>,
    /// The paths asked for with the key (stored form), taken with it or not at all.
    pub paths: Vec<String>,
    /// How many slots the key is to have (`--slots`), if given.
    pub slots: Option<u32>,
    /// The agent's long-lived process and its start time (`checkout --pid`), registered
    /// in the checkout's own scope as `heartbeat --pid` registers it.
    pub register: Option<(u32, u64)>,
}

impl Request {
    /// Resolve identity, lease and reason. `pid` names a process whose death ends the
    /// checkout at once (`run`); otherwise the agent's registered process, if any.
    pub fn new(
        ctx: &Ctx,
        timeout: Option<Duration>,
        reason: Option<String>,
        pid: Option<u32>,
    ) -> Result<Request> {
        let mut agent = ctx.agent()?;
        let lease = match timeout {
            Some(t) => t,
            None => ctx.config()?.lease,
        };
        if let Some(r) = &reason {
            check_text("reason", r)?;
        }
        if let Some(pid) = pid {
            agent.pid = Some(pid);
            agent.pid_start = crate::os::start_time(pid);
        }
        Ok(Request {
            agent,
            lease,
            lease_given: timeout.is_some(),
            reason,
            owner: crate::secret::caller()
                .as_deref()
                .map(crate::secret::Proof::of)
                .transpose()?,
            paths: Vec::new(),
            slots: None,
            register: None,
        })
    }

    /// Register `pid` as the agent's long-lived process with the checkout (`--pid`): its
    /// start time is read here, before the scope.
    pub fn registering(mut self, pid: Option<u32>) -> Result<Request> {
        if let Some(pid) = pid {
            let start = crate::os::start_time(pid).ok_or_else(|| {
                Error::Usage(format!(
                    "--pid {pid}: no such process on this host; pass the agent's own long-lived process"
                ))
            })?;
            self.register = Some((pid, start));
        }
        Ok(self)
    }
}

/// What a checkout asks for besides the key and the lease.
#[derive(Debug, Clone, Default)]
pub struct Want {
    pub paths: Vec<String>,
    pub slots: Option<u32>,
    /// `--pid`: the agent's long-lived process, registered with the checkout.
    pub pid: Option<u32>,
}

/// A beat of `agent`: its registry entry `entry` (none before its first beat) as it is
/// after the beat. `pid` (with its start time) registers the agent's long-lived process;
/// without it the one registered stays while the host and boot are the same. `owner`
/// is the secret the entry is bound to (the caller has been judged against it already).
pub fn beaten(
    ctx: &Ctx,
    agent: &Agent,
    entry: Option<&AgentEntry>,
    pid: Option<(u32, u64)>,
    status: Option<String>,
    parent: Option<String>,
    owner: Option<crate::secret::Proof>,
) -> AgentEntry {
    let same_boot = entry.is_some_and(|e| e.host == agent.host && e.boot_id == agent.boot_id);
    let kept = entry.filter(|_| same_boot);
    let new_pid = pid.map(|(p, _)| p);
    AgentEntry {
        version: 1,
        id: agent.id.clone(),
        name: agent
            .name
            .clone()
            .or_else(|| entry.and_then(|e| e.name.clone())),
        host: agent.host.clone(),
        boot_id: agent.boot_id.clone(),
        pid_ns: agent.pid_ns.clone(),
        pid: new_pid.or_else(|| kept.and_then(|e| e.pid)),
        pid_start: pid
            .map(|(_, start)| start)
            .or_else(|| kept.and_then(|e| e.pid_start)),
        first_seen: entry.map(|e| e.first_seen).unwrap_or(ctx.now()),
        last_heartbeat: Some(ctx.now()),
        heartbeats: entry.map(|e| e.heartbeats).unwrap_or(0) + 1,
        status: status.or_else(|| entry.and_then(|e| e.status.clone())),
        ended_at: None,
        ended_reason: None,
        // Where the session takes pushed messages: from the environment of its own
        // hooks and commands, else as recorded while its process is the same.
        reach: crate::clients::wake::reach_for(&agent.id).or_else(|| {
            kept.filter(|e| new_pid.is_none_or(|p| e.pid == Some(p)))
                .and_then(|e| e.reach.clone())
        }),
        parent: parent.or_else(|| entry.and_then(|e| e.parent.clone())),
        owner,
    }
}

/// Record the agent's registered long-lived process in its checkouts; an agent that had
/// ended and is back (same id) is alive again. With [`Request::register`], the checkout
/// is also the agent's beat that registers that process, in the same scope: one write of
/// its registry entry, bound to the caller's secret as a beat binds it.
pub fn with_registered_pid(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: Request,
) -> Result<Request> {
    registered_pid(ctx, store, guard, req, true)
}

/// As [`with_registered_pid`] for an attempt of a wait: a registered process found gone
/// is kept, not forgotten, and put in the request as it is. A wait belongs to that
/// process's life and ends with it (the caller judges it again in the same scope):
/// forgetting it would make the agent look alive to the release that hands the key on.
pub fn with_registered_pid_kept(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: Request,
) -> Result<Request> {
    registered_pid(ctx, store, guard, req, false)
}

/// [`with_registered_pid`]; `forget`: whether a registered process that is gone is
/// forgotten (an agent that asks again) or kept.
fn registered_pid(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    mut req: Request,
    forget: bool,
) -> Result<Request> {
    if let Some(pid) = req.register {
        // A project scope needs the entry's own lock; a claim's scope holds it already.
        store.lock_agent(guard, &req.agent.id, true)?;
        // A new agent (the usual case: one agent per task) is written in the read's round
        // trip; nothing binds it yet, so nothing is refused.
        let new = beaten(
            ctx,
            &req.agent,
            None,
            Some(pid),
            None,
            None,
            req.owner.clone(),
        );
        let entry = match store.register_new(guard, &new)? {
            None => new,
            Some(entry) => {
                let owner = entry.owner.clone();
                let standing = crate::secret::standing_for(&req.agent.id, owner.as_ref());
                if standing.refused() {
                    // Audited by [`audit_refused_registration`] once this scope is
                    // abandoned.
                    return Err(Error::SecretRefused {
                        agent: req.agent.id.clone(),
                        wrong: standing == crate::secret::Standing::WrongSecret,
                    });
                }
                let owner = owner.or_else(|| req.owner.clone());
                let entry = beaten(ctx, &req.agent, Some(&entry), Some(pid), None, None, owner);
                store.write_agent(guard, &entry)?;
                entry
            }
        };
        req.agent.name = entry.name;
        req.agent.parent = entry.parent;
        req.agent.pid = entry.pid;
        req.agent.pid_start = entry.pid_start;
        return Ok(req);
    }
    if let Some(mut entry) = store.read_agent(&req.agent.id)? {
        // An agent that ended, or whose registered process is gone, and asks again: a
        // new checkout must not be bound to that dead process.
        let gone = |e: &AgentEntry| e.ended_at.is_some() || crate::liveness::registered_gone(e);
        if gone(&entry) {
            // Changed under its own lock, read again (a beat may have revived it).
            store.lock_agent(guard, &req.agent.id, true)?;
            entry = store.read_agent(&req.agent.id)?.unwrap_or(entry);
        }
        if gone(&entry) && (forget || !crate::liveness::registered_gone(&entry)) {
            // The process it had is gone: forget it until it registers a new one.
            entry.ended_at = None;
            entry.ended_reason = None;
            entry.pid = None;
            entry.pid_start = None;
            store.write_agent(guard, &entry)?;
        }
        if req.agent.name.is_none() {
            req.agent.name = entry.name.clone();
        }
        req.agent.parent = entry.parent.clone();
        if entry.host == req.agent.host && entry.boot_id == req.agent.boot_id {
            req.agent.pid = entry.pid;
            req.agent.pid_start = entry.pid_start;
        }
    }
    Ok(req)
}

/// A checkout with `--pid` refused for want of the agent's secret: its scope was
/// abandoned (on PostgreSQL rolled back), so the refusal is audited in a scope of its own,
/// judged again there, as a refused beat is.
pub fn audit_refused_registration(ctx: &Ctx, store: &dyn Store, agent: &Agent) -> Result<()> {
    store.transaction(|g| {
        store.lock_agent(g, &agent.id, true)?;
        let owner = store.read_agent(&agent.id)?.and_then(|e| e.owner);
        super::agent_refused(ctx, store, g, agent, owner.as_ref(), "checkout").map(|_| ())
    })
}

/// A checkout scope's result, with a refused registration ([`Request::register`])
/// audited after the scope.
pub fn audited<T>(ctx: &Ctx, store: &dyn Store, req: &Request, r: Result<T>) -> Result<T> {
    if req.register.is_some()
        && let Err(Error::SecretRefused { .. }) = &r
    {
        audit_refused_registration(ctx, store, &req.agent)?;
    }
    r
}

/// One checkout attempt under the guard: the key's state read, the decision made on it
/// ([`decide`]), and carried out ([`apply`]).
pub fn attempt(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    key: &str,
    join: Join,
) -> Result<CheckoutReport> {
    let (state, decision) = decided(ctx, store, guard, req, key, join)?;
    apply(ctx, store, guard, req, join, state, decision)
}

/// What a checkout of `key` by `req` decides now: the key's state as read under `guard`,
/// and the decision made on it, not carried out. Reading ends the checkouts in the way
/// that have ended and settles the key's queue, as any command that meets them does; the
/// waits-for graph is read where the decision needs it (a grant, a wait).
pub fn decided(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    key: &str,
    join: Join,
) -> Result<(KeyState, Decision)> {
    let me = req.agent.id.as_str();
    let mut s = read(ctx, store, guard, req, key)?;
    let mut d = decide(&s, me, join);
    if d.grants_paths_or_key(&s) {
        let paths = granting(&s, req);
        let b = grant_breaks(ctx, store, guard, me, key, &paths, &s.queue)?;
        s.grant_cycle = b.cycle;
        s.dropped = b.dropped;
        d = decide(&s, me, join);
    }
    if d.would_wait(join) {
        let (wait, dropped) = read_wait(ctx, store, guard, req, key, &s.queue)?;
        s.wait = Some(wait);
        s.dropped = dropped;
        d = decide(&s, me, join);
    }
    Ok((s, d))
}

/// All the paths a grant (or a renewal) would cover.
fn granting(s: &KeyState, req: &Request) -> Vec<String> {
    match &s.holding {
        Holding::Mine(r) => r.paths.iter().chain(&s.added).cloned().collect(),
        Holding::Slots { .. } => Vec::new(),
        _ => req.paths.clone(),
    }
}

/// The key's state for `req`, under the guard.
fn read(ctx: &Ctx, store: &dyn Store, guard: &Guard, req: &Request, key: &str) -> Result<KeyState> {
    let mut s = KeyState::new(key);
    if let Some(f) = store.frozen(key, &ctx.now())? {
        let holder = match store.read(key)? {
            Slot::Held(r) => Some(r),
            _ => None,
        };
        s.frozen = Some((f, holder));
        return Ok(s);
    }
    let own = store.read(key)?;
    // The queue as read for its slots, kept for honouring it when nothing since could
    // have changed it.
    let mut read_queue = None;
    // A key with slots, or one asked to have them: its holders are read together. Without
    // `--slots` the count it keeps (its queue's too) wins over config.yaml's.
    let configured = slots::configured(&ctx.config().unwrap_or_default(), key);
    let queued = if req.slots.is_none() {
        let q = store.read_queue(key)?;
        let slots = q.slots;
        read_queue = Some(q);
        slots
    } else {
        None
    };
    if let Some(h) = slots::Holders::read_asked(store, key, &own, queued, req.slots, configured)? {
        if !req.paths.is_empty() {
            return Err(slots::no_paths(key, h.capacity));
        }
        read_slots(ctx, store, guard, req, &mut s, h)?;
    } else {
        read_key(ctx, store, guard, req, &mut s, own, read_queue)?;
    }
    Ok(s)
}

/// A key without slots: who holds it (a checkout that has ended is ended for the
/// caller), the paths asked for in the way, its queue settled.
fn read_key(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    s: &mut KeyState,
    own: Slot,
    read_queue: Option<Queue>,
) -> Result<()> {
    let me = req.agent.id.as_str();
    let key = s.key.clone();
    let mut judge = Judge::new(ctx, store);
    match own {
        Slot::Corrupt { path, problem } => {
            s.holding = Holding::Corrupt { path, problem };
            return Ok(());
        }
        // Our own checkout still stands: its lease not over, its process not gone.
        Slot::Held(current) if current.held_by(me) && judge.own_end(&current)?.is_none() => {
            return read_own(ctx, store, guard, req, s, current);
        }
        // Our own lease ran out or its process is gone (never revived: a new token
        // follows), or another agent's lease is past its end plus the skew margin, or
        // its holder is dead.
        Slot::Held(current) => match take_over(ctx, store, guard, &mut judge, &current, me)? {
            Some(ended) => s.took_over = Some(ended),
            None => {
                let holder = KeyNow::HeldBy(&current.agent.id);
                s.queue = queue::settle_key(ctx, store, guard, &key, holder, None)?;
                s.holding = Holding::Other(current);
                return Ok(());
            }
        },
        Slot::Free => {}
    }
    // The key is free; the paths asked for must be too.
    if !req.paths.is_empty() {
        s.blockers = path_blockers(ctx, store, guard, req, &key, &req.paths)?;
        if !s.blockers.is_empty() {
            s.queue = queue::settle_key(ctx, store, guard, &key, KeyNow::Free, None)?;
            return Ok(());
        }
    }
    // The key is free: its queue is honoured. Read above unless a take-over (which hands
    // the key on through the queue) or path checks came between.
    let taker = Some(me);
    s.queue = match read_queue.filter(|_| s.took_over.is_none() && req.paths.is_empty()) {
        Some(q) => queue::settle_read(ctx, store, guard, &key, q, KeyNow::Free, taker)?,
        None => queue::settle_key(ctx, store, guard, &key, KeyNow::Free, taker)?,
    };
    Ok(())
}

/// The caller's own standing checkout: its secret, and the paths asked for that it does
/// not cover yet, which join it all or none.
fn read_own(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    s: &mut KeyState,
    current: Record,
) -> Result<()> {
    let me = req.agent.id.as_str();
    s.secret_refused =
        crate::secret::standing_for(&current.agent.id, current.owner.as_ref()).refused();
    if !s.secret_refused {
        s.added = req
            .paths
            .iter()
            .filter(|p| !current.paths.contains(p))
            .cloned()
            .collect();
    }
    if !s.added.is_empty() {
        let key = s.key.clone();
        s.blockers = path_blockers(ctx, store, guard, req, &key, &s.added)?;
        s.queue = if s.blockers.is_empty() {
            store.read_queue(&key)?
        } else {
            // Waiting to add paths, the holder queues for its own key: at the head,
            // served when the paths are free, and seen by deadlock detection.
            queue::settle_key(ctx, store, guard, &key, KeyNow::HeldBy(me), None)?
        };
    }
    s.holding = Holding::Mine(current);
    Ok(())
}

/// A key with slots: its holders (checkouts that have ended free their slots first,
/// unless the caller's own stands), its count as asked, its queue settled.
fn read_slots(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    s: &mut KeyState,
    mut h: slots::Holders,
) -> Result<()> {
    let me = req.agent.id.as_str();
    if let Some((path, problem)) = h.corrupt.clone() {
        s.holding = Holding::Corrupt { path, problem };
        return Ok(());
    }
    let mut judge = Judge::new(ctx, store);
    if let Some(current) = h.of(me).cloned()
        && judge.own_end(&current)?.is_none()
    {
        s.secret_refused =
            crate::secret::standing_for(&current.agent.id, current.owner.as_ref()).refused();
        s.holding = Holding::Slots {
            holders: h,
            mine: Some(current),
        };
        return Ok(());
    }
    let mut live = Vec::with_capacity(h.records.len());
    for r in std::mem::take(&mut h.records) {
        match take_over(ctx, store, guard, &mut judge, &r, me)? {
            Some(ended) => {
                s.took_over.get_or_insert(ended);
            }
            None => live.push(r),
        }
    }
    h.records = live;
    set_capacity(ctx, store, guard, &s.key, &mut h)?;
    // The waiters ahead are served first: as many as there are free slots.
    let free = KeyNow::Slots(h.free());
    s.queue = queue::settle_key(ctx, store, guard, &s.key, free, Some(me))?;
    s.holding = Holding::Slots {
        holders: h,
        mine: None,
    };
    Ok(())
}

/// What joining the key's queue (`q`, settled) would do: close a cycle, or wait behind
/// one of other agents; and the passive places in queues it drops so as to close none
/// ([`breaking`]).
fn read_wait(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    key: &str,
    q: &Queue,
) -> Result<(WaitCheck, Vec<Dropped>)> {
    let me = req.agent.id.as_str();
    // A reservation of the key re-joined with other paths holds those paths against
    // others from now on, as paths added to a checkout do: besides its own wait, every
    // wait of the caller is checked; but one through another of its waits that stands
    // already is not its doing.
    let reserved_rejoin = q.reserved_for(me).is_some()
        && q.waiters
            .iter()
            .any(|w| w.agent == me && w.paths != req.paths);
    let through_others = reserved_rejoin
        && Graph::build(ctx, store, Some(guard), None)?
            .cycle_through(me)
            .is_none();
    let find = |g: &Graph| {
        g.cycle_of(me, key)
            .or_else(|| through_others.then(|| g.cycle_through(me)).flatten())
    };
    let joining = (me, key, req.paths.as_slice());
    let Breaking {
        cycle,
        dropped,
        graph,
    } = breaking(ctx, store, guard, (None, Some(joining)), (me, key), find)?;
    let mut leave = false;
    // The wait is not joined. A place the caller had already stays only if it closes no
    // cycle itself (it asked for other paths then).
    if cycle.is_some()
        && let Some(w) = q.waiters.iter().find(|w| w.agent == me)
    {
        leave = w.paths == req.paths
            || Graph::build(ctx, store, Some(guard), None)?
                .cycle_of(me, key)
                .is_some();
    }
    let wait = WaitCheck {
        cycle,
        leave,
        waits_behind: graph.leads_into(me, key).unwrap_or_default(),
    };
    Ok((wait, dropped))
}

/// Carry out `d`, decided on `s` for `req`, under the guard: the one place a checkout
/// writes what it decided. Returns its report.
pub fn apply(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    join: Join,
    mut s: KeyState,
    d: Decision,
) -> Result<CheckoutReport> {
    let dropped = std::mem::take(&mut s.dropped);
    let verb = match &d {
        Decision::Grant | Decision::Renew(_) => "took",
        Decision::Queue(_) => "queued for",
        _ => return applied(ctx, store, guard, req, join, s, d),
    };
    let key = s.key.clone();
    if dropped.is_empty() {
        return applied(ctx, store, guard, req, join, s, d);
    }
    // Made first, then the places are dropped: the key's queue is settled with the
    // change standing, and the reservations those drops make are announced together.
    queue::announcing(ctx, store, guard, || {
        let mut r = applied(ctx, store, guard, req, join, s, d)?;
        let because = format!("{} {verb} `{key}`", req.agent.id);
        for p in &dropped {
            queue::drop_place(ctx, store, guard, &p.agent, &p.key, &p.cycle, &because)?;
        }
        if dropped.iter().any(|p| p.key == key) {
            queue_facts(&mut r, &store.read_queue(&key)?, &req.agent.id);
        }
        r.dropped = dropped;
        Ok(r)
    })
}

/// [`apply`] but for the places it drops.
fn applied(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    join: Join,
    s: KeyState,
    d: Decision,
) -> Result<CheckoutReport> {
    // The outcome is the decision's; a damaged record is an error instead.
    let outcome = d.outcome().unwrap_or(Outcome::Conflict);
    let mut r = CheckoutReport::new(ctx.now(), &s.key, outcome, None);
    r.paths = req.paths.clone();
    r.slots = s.capacity();
    r.took_over = s.took_over.clone();
    match d {
        Decision::Corrupt { path, problem } => Err(Error::Corrupt {
            key: s.key,
            path,
            problem,
        }),
        Decision::Frozen(f, holder) => apply_frozen(ctx, store, guard, req, join, (f, holder), r),
        Decision::NotYours(current) => {
            crate::engine::holder_refused(ctx, store, guard, &current, "checkout")?;
            r.checkout = Some(CheckoutView::from(&current));
            Ok(r)
        }
        Decision::Renew(current) => apply_renew(ctx, store, guard, req, s, current, r),
        Decision::Grant => apply_grant(ctx, store, guard, req, s, r),
        Decision::Deadlock(cycle) => {
            in_the_way(&s, None, &mut r);
            deadlocked(ctx, store, guard, req, r, cycle, &s.queue)
        }
        Decision::Refuse(b) => apply_refusal(ctx, store, guard, req, join, s, &b, None, r),
        Decision::Queue(b) => apply_refusal(ctx, store, guard, req, join, s, &b, Some(None), r),
        Decision::WaitDeadlock(b, cycle) => {
            apply_refusal(ctx, store, guard, req, join, s, &b, Some(Some(cycle)), r)
        }
    }
}

/// Who has the key, on a refusal or a deadlock: the holder (or the caller's own
/// checkout waiting to add paths), every slot's holder for a key with slots.
fn in_the_way(s: &KeyState, blocked: Option<&Blocked>, r: &mut CheckoutReport) {
    match (&s.holding, blocked) {
        (Holding::Slots { holders, .. }, _) => {
            r.holders = holders.records.iter().map(CheckoutView::from).collect();
            r.checkout = r.holders.first().cloned();
        }
        (Holding::Mine(own), _) => r.checkout = Some(CheckoutView::from(own)),
        (_, Some(Blocked::Holder(h))) => r.checkout = Some(CheckoutView::from(h)),
        _ => {}
    }
}

/// A freeze refuses the checkout, audited as `deny` (but for a blocked `--wait`'s polls).
fn apply_frozen(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    join: Join,
    (f, holder): (crate::store::Freeze, Option<Record>),
    mut r: CheckoutReport,
) -> Result<CheckoutReport> {
    let holder = holder.as_ref().map(CheckoutView::from);
    let mut ev = ctx.agent_event(Event::Deny, &r.key, &req.agent);
    ev.reason = Some("frozen".into());
    ev.holder = holder.as_ref().map(|h| h.agent.id.clone());
    ev.detail = Some(format!(
        "frozen by {} until {}",
        f.by,
        crate::clock::rfc3339(&f.until)
    ));
    // A blocked --wait polls: only a plain refusal is worth an event.
    if !matches!(join, Join::Wait(_)) {
        store.audit(guard, &ev)?;
    }
    r.checkout = holder;
    r.frozen = Some(f);
    Ok(r)
}

/// The caller's own checkout goes on: same token, lease extended, the paths it did not
/// cover yet added (what it queued for them is its own now); a slot keeps the key's count.
fn apply_renew(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    s: KeyState,
    current: Record,
    mut r: CheckoutReport,
) -> Result<CheckoutReport> {
    let key = s.key.as_str();
    let added = &s.added;
    let mut renewed = renewed(req, current, ctx.now());
    if let Holding::Slots { mut holders, .. } = s.holding {
        set_capacity(ctx, store, guard, key, &mut holders)?;
        renewed.slots = renewed.slot.map(|_| holders.capacity);
    } else if !added.is_empty() {
        renewed.paths.extend(added.iter().cloned());
        renewed.version = crate::store::version_for(added, None);
    }
    store.replace(guard, &renewed)?;
    if !added.is_empty() {
        let mut q = store.read_queue(key)?;
        crate::warnings::after_change(
            &format!("the paths were added to `{key}`, but its queue was not updated"),
            queue::granted(store, guard, &mut q, &req.agent.id),
        );
    }
    crate::warnings::after_change(
        &format!(
            "`{key}` is still yours and its lease was extended, but the audit log was not written"
        ),
        store.audit(guard, &ctx.event(Event::Renew, &renewed)),
    );
    r.checkout = Some(CheckoutView::from(&renewed));
    Ok(r)
}

/// The key (or its lowest free slot) is the caller's: a new checkout with a new token; a
/// place it had in the queue is done with.
fn apply_grant(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    s: KeyState,
    mut r: CheckoutReport,
) -> Result<CheckoutReport> {
    let now = ctx.now();
    let key = s.key.as_str();
    let mut q = s.queue;
    queue::granted(store, guard, &mut q, &req.agent.id)?;
    let (slot, paths) = match &s.holding {
        Holding::Slots { holders, .. } => (Some(holders.next_slot()), Vec::new()),
        _ => (None, req.paths.clone()),
    };
    let (token, previous) = crate::engine::grant_token(store, guard, key)?;
    let record = Record {
        version: crate::store::version_for(&paths, slot),
        key: key.to_string(),
        token,
        agent: req.agent.clone(),
        acquired_at: now,
        renewed_at: now,
        expires_at: now + to_chrono(req.lease),
        reason: req.reason.clone(),
        owner: req.owner.clone(),
        paths,
        slot,
        slots: r.slots.filter(|_| slot.is_some()),
        worktree: None,
    };
    store.insert(guard, &record)?;
    // From here the key is the caller's: a failure now is a warning, never exit 1.
    let mut ev = ctx.event(Event::Acquire, &record);
    ev.reason = record.reason.clone();
    if let (Some(slot), Some(n)) = (slot, record.slots) {
        ev.detail = Some(format!("slot {slot} of {n}"));
    }
    crate::warnings::after_change(
        &format!("`{key}` is checked out to you, but the audit log was not written"),
        store.audit(guard, &ev),
    );
    r.checkout = Some(CheckoutView::from(&record));
    r.previous = previous;
    r.queue_length = q.waiters.len();
    Ok(r)
}

/// Kept out by `b`: refused (audited as `deny`), or, `waits`, the queue joined; unless
/// the wait would close the cycle `waits` has (audited as `deadlock`, exit 5).
#[allow(clippy::too_many_arguments)]
fn apply_refusal(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    join: Join,
    s: KeyState,
    b: &Blocked,
    waits: Option<Option<Vec<String>>>,
    mut r: CheckoutReport,
) -> Result<CheckoutReport> {
    let key = s.key.as_str();
    let mut q = s.queue.clone();
    if matches!(b, Blocked::Paths { .. }) {
        r.overlaps = s.blockers.clone();
    }
    in_the_way(&s, Some(b), &mut r);
    let wait = s.wait.clone().unwrap_or_default();
    match waits {
        None => deny(ctx, store, guard, req, key, &s, b, &r)?,
        Some(Some(cycle)) => {
            let mut ev = ctx.agent_event(Event::Deadlock, key, &req.agent);
            ev.holder = cycle.get(2).cloned();
            ev.paths = req.paths.clone();
            ev.detail = Some(cycle.join(" → "));
            store.audit(guard, &ev)?;
            if wait.leave {
                queue::leave(ctx, store, guard, key, &req.agent.id, "deadlock")?;
                q = store.read_queue(key)?;
            }
            r.cycle = cycle;
        }
        Some(None) => {
            if let Some(n) = s.capacity() {
                q.slots = Some(n);
            }
            r.waits_behind = wait.waits_behind;
            let pid = match join {
                Join::Wait(p) => Some(p),
                _ => None,
            };
            let holder = matches!(b, Blocked::Paths { own: Some(_) });
            queue::join(
                ctx, store, guard, &mut q, &req.agent, pid, &req.paths, holder,
            )?;
            push_wake(store, req, pid, &mut r)?;
        }
    }
    queue_facts(&mut r, &q, &req.agent.id);
    Ok(r)
}

/// A refusal, audited as `deny` with what kept the caller out.
#[allow(clippy::too_many_arguments)]
fn deny(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    key: &str,
    s: &KeyState,
    b: &Blocked,
    r: &CheckoutReport,
) -> Result<()> {
    let mut ev = ctx.agent_event(Event::Deny, key, &req.agent);
    ev.holder = match b {
        Blocked::Holder(h) => Some(h.agent.id.clone()),
        Blocked::Paths { .. } => s.blockers.first().map(|o| o.agent.id.clone()),
        Blocked::Reserved(res) => Some(res.agent.clone()),
        Blocked::Slots => match &s.holding {
            Holding::Slots { holders, .. } => holders.records.first().map(|r| r.agent.id.clone()),
            _ => None,
        }
        .or_else(|| s.queue.reservations.first().map(|r| r.agent.clone())),
    };
    if let Some(o) = r.overlaps.first() {
        ev.detail = Some(overlap_detail(o));
    } else if let (Blocked::Slots, Holding::Slots { holders, .. }) = (b, &s.holding) {
        let n = holders.records.len() + s.queue.reservations.len();
        ev.detail = Some(format!("all {n} slots are taken"));
    } else if !s.queue.reservations.is_empty() {
        ev.detail = Some("reserved for the head of the queue".into());
    }
    store.audit(guard, &ev)
}

/// A queued agent (not a blocked `--wait`, which learns it itself) is told by its inbox,
/// and at once when its session takes pushes.
fn push_wake(
    store: &dyn Store,
    req: &Request,
    pid: Option<u32>,
    r: &mut CheckoutReport,
) -> Result<()> {
    if pid.is_none()
        && let Some(e) = store.read_agent(&req.agent.id)?
        && e.ended_at.is_none()
        && let Some(reach) = e.reach
    {
        r.push_wake = true;
        r.push_via = Some(reach.via.as_str().to_string());
    }
    Ok(())
}

/// A checkout in the way of `taker` that has ended (its own lease lapsed or its process
/// gone: never revived, a new token follows; another's lease past its end plus the skew
/// margin, or its holder dead) is ended on the taker's behalf; returns what was ended,
/// with the key's notes.
fn take_over(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    judge: &mut Judge,
    r: &Record,
    taker: &str,
) -> Result<Option<Reaped>> {
    let ended = if r.held_by(taker) {
        judge.own_end(r)?
    } else {
        judge.reap_cause(r)?
    };
    let Some((reason, cause)) = ended else {
        return Ok(None);
    };
    auto_release_for(ctx, store, guard, r, Some(taker), reason, Some(taker))?;
    let notes = store.last_notes(&r.key, NOTES_SHOWN)?;
    Ok(Some(Reaped::new(r, reason, cause, notes)))
}

/// The holder checking out again keeps the same checkout (same token), extended by its
/// own lease length, or to `--timeout` from now: never shortened, and never ending before
/// it began (a clock behind the grant).
fn renewed(req: &Request, current: Record, now: crate::clock::Time) -> Record {
    let expires_at = if req.lease_given {
        now + to_chrono(req.lease)
    } else {
        now + (current.expires_at - current.renewed_at)
    }
    .max(current.expires_at)
    .max(current.acquired_at);
    Record {
        renewed_at: now.max(current.acquired_at),
        expires_at,
        reason: req.reason.clone().or(current.reason.clone()),
        agent: current.agent.refreshed(&req.agent),
        ..current
    }
}

/// A checkout asked for a different number of slots than the key keeps: from now on the
/// key has that many. Every slot's record and the queue keep the new count; holders
/// beyond it keep their slots until they let go. Audited as `slots`.
fn set_capacity(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    key: &str,
    h: &mut slots::Holders,
) -> Result<()> {
    if h.stored == Some(h.capacity) {
        return Ok(());
    }
    for r in &mut h.records {
        if r.slot.is_some() && r.slots != Some(h.capacity) {
            r.slots = Some(h.capacity);
            store.replace(guard, r)?;
        }
    }
    let mut q = store.read_queue(key)?;
    if !q.is_empty() && q.slots != Some(h.capacity) {
        q.slots = Some(h.capacity);
        store.write_queue(guard, &q)?;
    }
    if let Some(before) = h.stored {
        let mut ev = AuditEvent::new(ctx.now(), Event::Slots, key, &ctx.agent_id()?);
        ev.detail = Some(format!("{before} → {}", h.capacity));
        store.audit(guard, &ev)?;
    }
    h.stored = Some(h.capacity);
    Ok(())
}

/// What granting `key` (with `paths`, all the paths the checkout would cover) to
/// `agent` does to the cycles of waits: agents that wait for the key or for those paths
/// would then wait for it, while it may wait (in the end) for them. The passive places
/// in queues to drop so that it closes none ([`breaking`]), or the cycle no such drop
/// breaks. A checkout's grant and a give both ask it. An agent that waits for nothing
/// else, the usual case, is answered without building the graph.
pub(crate) fn grant_breaks(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    agent: &str,
    key: &str,
    paths: &[String],
    q: &Queue,
) -> Result<Breaking> {
    if !may_close(store, agent, key, paths, q)? {
        return Ok(Breaking::default());
    }
    let taking = Taking { agent, key, paths };
    let find = |g: &Graph| g.cycle_through(agent);
    breaking(ctx, store, guard, (Some(taking), None), (agent, key), find)
}

/// Could granting `key` with `paths` to `agent` close a cycle at all? Not when nobody
/// would wait for the grant, or `agent` waits for nothing else: the usual case,
/// answered without building the graph.
fn may_close(
    store: &dyn Store,
    agent: &str,
    key: &str,
    paths: &[String],
    q: &Queue,
) -> Result<bool> {
    // A key alone that nobody else queues for: nobody would wait for the grant.
    if paths.is_empty() && !q.waiters.iter().any(|w| w.agent != agent) {
        return Ok(false);
    }
    Ok(store
        .scan_queues()?
        .iter()
        .any(|q| q.key != key && q.waiters.iter().any(|w| w.agent == agent)))
}

/// The caller's grant would close `cycle`: refused (exit 5), nothing taken, audited as
/// `deadlock`. Its places in queues stay as they were, but for a reservation of the key
/// for it (made by this very attempt, perhaps), which would keep the cycle standing: it
/// leaves the key's queue, and the reservation passes on.
fn deadlocked(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    mut r: CheckoutReport,
    cycle: Vec<String>,
    q: &Queue,
) -> Result<CheckoutReport> {
    let mut ev = ctx.agent_event(Event::Deadlock, &r.key, &req.agent);
    ev.holder = cycle.get(2).cloned();
    ev.paths = req.paths.clone();
    ev.detail = Some(cycle.join(" → "));
    store.audit(guard, &ev)?;
    let mut q = q.clone();
    if q.reserved_for(&req.agent.id).is_some() {
        queue::leave(ctx, store, guard, &r.key, &req.agent.id, "deadlock")?;
        q = store.read_queue(&r.key)?;
    }
    queue_facts(&mut r, &q, &req.agent.id);
    r.cycle = cycle;
    Ok(r)
}

/// The live checkouts and reservations of other agents whose paths overlap `wanted`.
/// Checkouts in the way that may be ended (lease over, holder dead) are ended here, as
/// a held key would be.
fn path_blockers(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    key: &str,
    wanted: &[String],
) -> Result<Vec<OverlapView>> {
    let me = &req.agent.id;
    let mine = paths::compile(wanted);
    let mut judge = Judge::new(ctx, store);
    let mut out = Vec::new();
    for o in paths::held_overlaps(store, me, key, &mine)? {
        match judge.reap_reason(&o.record)? {
            Some(reason) => auto_release(ctx, store, guard, &o.record, Some(me), reason)?,
            None => out.push(OverlapView::from(&o)),
        }
    }
    let mut reserved = paths::reservations_meeting(ctx, store, me, key, &mine)?;
    if reserved.iter().any(|(_, live)| !live) {
        // A dead agent's reservation passes on (perhaps to a waiter in our way too).
        for (o, _) in reserved.iter().filter(|(_, live)| !live) {
            queue::settle_now(ctx, store, guard, &o.queue.key, None)?;
        }
        reserved = paths::reservations_meeting(ctx, store, me, key, &mine)?;
    }
    for (o, _) in reserved.iter().filter(|(_, live)| *live) {
        out.push(o.view());
    }
    Ok(out)
}

/// How an overlap reads in the audit log.
pub fn overlap_detail(o: &OverlapView) -> String {
    format!(
        "paths: `{}` overlaps `{}` of `{}` (both cover `{}`)",
        o.mine, o.theirs, o.key, o.witness
    )
}

/// Free text stored in records and shown in tables: bounded and on one line.
pub fn check_text(what: &str, s: &str) -> Result<()> {
    if s.len() > 4096 {
        return Err(Error::Usage(format!("{what} is longer than 4096 bytes")));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::Usage(format!(
            "{what} must be one line without control characters"
        )));
    }
    Ok(())
}

/// Where the key's queue stands, as the report tells `me`: its length, my place in it and
/// whom the key is reserved for.
fn queue_facts(r: &mut CheckoutReport, q: &Queue, me: &str) {
    r.queue_length = q.waiters.len();
    r.position = q.position(me);
    r.reserved_for = q.reservation().cloned();
}

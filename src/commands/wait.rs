//! `checkout KEY --wait [DUR]`: queue, then block until granted or DUR passes.
//!
//! The waiter sleeps on inotify events for its key's record and queue files, with a slow
//! poll as a fallback (and to notice reservations that lapse with no file change). Only
//! the head of the queue may take a freed key, so a release wakes waiters without a
//! stampede: the others find the key reserved and go back to sleep. Every attempt
//! checks the waiter's place against the waits-for graph again, so a wait that has
//! become part of a cycle ends with `deadlock` (exit 5) at its next wake.

use std::time::{Duration, Instant};

use crate::clock::Time;
use crate::engine::bind::bind_to;
use crate::engine::take::{Join, Request, Want, attempt, with_registered_pid_kept};
use crate::engine::{Ctx, queue};
use crate::error::{Outcome, Result};
use crate::liveness::{self, Proc};
use crate::report::{CheckoutReport, CheckoutView, Report};
use crate::store::{Slot, Store};

/// The longest a waiter sleeps without an event before looking again.
const FALLBACK_POLL: Duration = Duration::from_millis(500);

pub fn run(
    ctx: &Ctx,
    key: &str,
    want: Want,
    timeout: Option<Duration>,
    reason: Option<String>,
    wait: Option<Duration>,
) -> Result<Report> {
    run_for(ctx, key, want, timeout, reason, wait, false)
}

/// As [`run`]; with `own_process`, the checkout records this process as the one whose
/// death ends it (`run --wait`).
#[allow(clippy::too_many_arguments)]
pub fn run_for(
    ctx: &Ctx,
    key: &str,
    want: Want,
    timeout: Option<Duration>,
    reason: Option<String>,
    wait: Option<Duration>,
    own_process: bool,
) -> Result<Report> {
    crate::key::validate(key)?;
    let mut req = Request::new(ctx, timeout, reason, None)?;
    req.paths = want.paths;
    req.slots = want.slots;
    let me = req.agent.id.clone();
    let store = ctx.open_store()?;
    let deadline = wait.map(|d| Instant::now() + d);
    // Waiting for the guard (held by a stopped process, say) honours the deadline too.
    crate::store::set_guard_deadline(deadline);
    crate::signals::install();
    let mut last: Option<CheckoutReport> = None;
    let waited = wait_loop(
        ctx,
        &*store,
        key,
        &req,
        &me,
        own_process,
        deadline,
        &mut last,
    );
    match waited {
        // The guard could not be had before the deadline or a signal: a refusal like any
        // other that ran out of time. The queue entry names this process, so it is
        // dropped as soon as anyone meets it after the process is gone.
        Err(crate::error::Error::GuardWaitStopped { .. }) => {
            let now = ctx.at_now(&me)?.now();
            let mut r =
                last.unwrap_or_else(|| CheckoutReport::new(now, key, Outcome::Conflict, None));
            r.now = now;
            r.position = None;
            Ok(Report::Checkout(r))
        }
        other => other,
    }
}

#[allow(clippy::too_many_arguments)]
fn wait_loop(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
    req: &Request,
    me: &str,
    own_process: bool,
    deadline: Option<Instant>,
    last: &mut Option<CheckoutReport>,
) -> Result<Report> {
    let mut changes = store.changes()?;
    let pid = std::process::id();
    let started = ctx.now();
    // The process the agent had registered at the wait's first attempt (or registered
    // with it): the wait is that life's, and ends with it, even once a later command of
    // the agent's has forgotten it.
    let mut born: Option<(u32, Option<u64>)> = None;
    loop {
        let now_ctx = ctx.at_now(me)?;
        // An orphaned wait must never hand the key to a dead agent: stop as soon as the
        // agent's registered process is gone (or the agent was marked ended meanwhile).
        // Judged again under the guard, before anything there forgets that process (a
        // command of the agent's that asks again forgets a registered process that is
        // gone: the wait, begun before, must not take that as a new life).
        let attempted = if agent_gone(store, me, &started, born)? {
            None
        } else {
            store.transaction(|guard| {
                if agent_gone(store, me, &started, born)? {
                    return Ok(None);
                }
                let mut req = with_registered_pid_kept(&now_ctx, store, guard, req.clone())?;
                let registered = req.agent.pid.map(|p| (p, req.agent.pid_start));
                // Judged again as the scope now stands: the process may have died since
                // the look above, and the key must not go to the life that is over.
                if agent_gone(store, me, &started, born.or(registered))? {
                    return Ok(None);
                }
                if own_process {
                    bind_to(&now_ctx, store, key, &mut req, pid)?;
                }
                let report = attempt(&now_ctx, store, guard, &req, key, Join::Wait(pid))?;
                Ok(Some((report, registered)))
            })?
        };
        let Some((report, registered)) = attempted else {
            return gone(&now_ctx, store, key, me, last);
        };
        if born.is_none() {
            born = registered;
        }
        // An attempt may end a dead holder's checkout and reserve keys for others.
        crate::engine::deliver::flush();
        if report.outcome == Outcome::Deadlock && report.position.is_some() {
            // Refused the key itself (taking it would close a cycle through another of
            // the agent's places): the wait ends, and its place here with it.
            let mut report = report;
            let left = ctx.at_now(me)?;
            store.transaction(|guard| queue::leave(&left, store, guard, key, me, "wait ended"))?;
            report.position = None;
            report.queue_length = report.queue_length.saturating_sub(1);
            return Ok(Report::Checkout(report));
        }
        if !matches!(report.outcome, Outcome::Conflict | Outcome::Frozen) {
            return Ok(Report::Checkout(report));
        }
        let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
        if out_of_time || crate::signals::received().is_some() {
            let mut report = report;
            report.position = None;
            report.queue_length = report.queue_length.saturating_sub(1);
            *last = Some(report);
            let left = ctx.at_now(me)?;
            store.transaction(|guard| queue::leave(&left, store, guard, key, me, "wait ended"))?;
            return Ok(Report::Checkout(last.take().expect("just set")));
        }
        *last = Some(report);
        let mut sleep = FALLBACK_POLL;
        if let Some(d) = deadline {
            sleep = sleep.min(d.saturating_duration_since(Instant::now()));
        }
        changes.wait(sleep);
    }
}

/// The wait of an agent that is gone ends: its place in the queue is left, and it is
/// told who holds the key now.
fn gone(
    now_ctx: &Ctx,
    store: &dyn Store,
    key: &str,
    me: &str,
    last: &mut Option<CheckoutReport>,
) -> Result<Report> {
    let (q, holder) = store.transaction(|guard| {
        queue::leave(now_ctx, store, guard, key, me, "wait ended")?;
        let q = store.read_queue(key)?;
        let holder = match store.read(key)? {
            Slot::Held(r) => Some(CheckoutView::from(&r)),
            _ => None,
        };
        Ok((q, holder))
    })?;
    let mut r = last
        .take()
        .unwrap_or_else(|| CheckoutReport::new(now_ctx.now(), key, Outcome::Conflict, None));
    r.now = now_ctx.now();
    r.outcome = Outcome::AgentGone;
    r.checkout = holder;
    r.queue_length = q.waiters.len();
    r.position = None;
    r.reserved_for = q.reservation().cloned();
    Ok(Report::Checkout(r))
}

/// Is the waiting agent gone: its registered process (`heartbeat --pid`) no longer runs
/// (or its pid was reused), or is no longer the one it had when the wait began (`born`),
/// or it was marked ended after the wait began?
fn agent_gone(
    store: &dyn Store,
    me: &str,
    started: &Time,
    born: Option<(u32, Option<u64>)>,
) -> Result<bool> {
    let Some(e) = store.read_agent(me)? else {
        return Ok(false);
    };
    if e.ended_at.is_some_and(|t| t >= *started) {
        return Ok(true);
    }
    if born.is_some_and(|b| e.pid.map(|p| (p, e.pid_start)) != Some(b)) {
        return Ok(true);
    }
    let Some(pid) = e.pid else {
        return Ok(false);
    };
    Ok(matches!(
        liveness::check_process(
            &e.host,
            e.boot_id.as_deref(),
            e.pid_ns.as_deref(),
            pid,
            e.pid_start
        ),
        Proc::Gone | Proc::Reused
    ))
}

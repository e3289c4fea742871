//! `checkout --next`: claim the first key of the project's backlog that can be taken.
//!
//! The store keeps the backlog as an index (see [`crate::store::backlog`]): the keys
//! ready to claim, in order, and the keys claimed. A claim reads the first few ready keys
//! (one, then 16 at a time) and gives each the same judgement as `checkout --any` (a key held by someone else,
//! whose holder is alive and within its lease, is passed over without an attempt; every
//! other key gets the full [`attempt`]), so its cost does not grow with the backlog.
//!
//! The index may lag the checkouts, and is repaired as the claim meets the truth:
//! - a ready key someone holds (taken by a plain `checkout`) is marked claimed by them;
//! - a released, reaped or forced key is ready again (the stores do this when a record is
//!   removed);
//! - a claim whose lease ran out or whose claimer died is found by a sweep, which runs
//!   only when nothing ready can be taken and a claim may have lapsed: its recheck time
//!   (the lease end as last seen) has come, or one of the claimers is dead. The sweep
//!   reads every claim; every other claim reads a constant number of keys.
//!
//! On a store with key scopes (PostgreSQL) a claim first runs in a claim scope
//! ([`claim_by_key`]): keys are taken one at a time under their own locks, passing over
//! those other claims are taking, so claims run side by side. A claim that can take
//! nothing learns so there when nothing is ready and no claim may have lapsed; any other
//! goes on to the project's scope and the rest of the above.

use super::claim::Claiming;
use super::take::{Join, Request, attempt};
use super::{Ctx, Judge};
use crate::clock::Time;
use crate::error::{Error, Outcome, Result};
use crate::report::CheckoutReport;
use crate::store::record::BREAK_GRACE_SECS;
use crate::store::{BacklogClaim, BacklogEntry, BacklogSummary, Guard, Record, Slot, Store};

/// Ready keys read at a time, after the first alone: under the project's scope claims
/// run one at a time, so the first ready key is nearly always free.
const BATCH: usize = 16;

/// What `checkout --next` came to.
#[allow(clippy::large_enum_variant)] // one per command, returned once
pub enum Next {
    Taken(CheckoutReport),
    /// Nothing could be taken: the ready keys refused (frozen, reserved for a queue,
    /// damaged), and the backlog as it stands.
    Refused {
        refused: Vec<CheckoutReport>,
        summary: BacklogSummary,
        /// Whether the claimers' liveness was looked at (none had lapsed). When not,
        /// `summary` names no holders, and [`settle`] looks without the project's lock.
        judged: bool,
    },
}

/// `agent`'s claim of a checkout whose lease ends at `expires_at`, looked at again once
/// that lease could be broken.
fn claim(agent: &str, expires_at: Time) -> BacklogClaim {
    BacklogClaim {
        agent: agent.to_string(),
        recheck: expires_at + chrono::Duration::seconds(BREAK_GRACE_SECS),
    }
}

/// The claim a record stands for.
fn claim_of(r: &Record) -> BacklogClaim {
    claim(&r.agent.id, r.expires_at)
}

/// `checkout --next` whole: `run` claims ([`claim_next`] or [`claim_by_key`]), told
/// whether a claim is known to have lapsed. When it took nothing without looking at the
/// claimers, they are looked at here, after the project's lock is let go: spawn per task
/// makes a claimer per claim, a registry entry each to read, and pollers of a backlog
/// whose every key is claimed would otherwise take turns reading them all under the lock.
/// A claimer found dead (or a recheck come) runs the claim again, to sweep.
pub fn settle(
    ctx: &Ctx,
    store: &dyn Store,
    mut run: impl FnMut(bool) -> Result<Next>,
) -> Result<Next> {
    let (refused, counts) = match run(false)? {
        Next::Refused {
            refused,
            summary,
            judged: false,
        } => (refused, summary),
        judged => return Ok(judged),
    };
    let summary = store.backlog_summary(true)?;
    if summary.claimed > 0 && may_have_lapsed(ctx, &Claiming::new(store), &summary)? {
        return run(true);
    }
    Ok(Next::Refused {
        refused,
        summary: BacklogSummary {
            holders: summary.holders,
            ..counts
        },
        judged: true,
    })
}

/// Claim the first key of the backlog that `req` can take, under the project's scope.
/// Claims are swept when one is known to have `lapsed`, or its recheck time has come;
/// otherwise the claimers are left to [`settle`].
pub fn claim_next(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    lapsed: bool,
) -> Result<Next> {
    let view = Claiming::new(store);
    let mut refused: Vec<CheckoutReport> = Vec::new();
    if let Some(r) = take_ready(ctx, &view, guard, req, &mut refused, ready_in_order(&view))? {
        return Ok(Next::Taken(r));
    }
    let mut summary = view.backlog_summary(false)?;
    let due = summary.claimed > 0 && (lapsed || summary.recheck.is_some_and(|t| t <= ctx.now()));
    if due {
        if sweep(ctx, &view, guard)? {
            refused.clear();
            if let Some(r) =
                take_ready(ctx, &view, guard, req, &mut refused, ready_in_order(&view))?
            {
                return Ok(Next::Taken(r));
            }
        }
        summary = view.backlog_summary(true)?;
    }
    if !refused.is_empty() {
        let ev = super::claim::one_deny(ctx, req, "checkout --next", &refused, view.denied.take());
        store.audit(guard, &ev)?;
    }
    let judged = due || summary.claimed == 0;
    Ok(Next::Refused {
        refused,
        summary,
        judged,
    })
}

/// Claim a key of the backlog in a scope of [`Store::begin_claim`], beside other claims
/// and changes of other keys: the ready keys are taken one at a time
/// ([`Store::backlog_take`] passes over those other scopes are changing) and judged as
/// in [`claim_next`]. When nothing could be taken because nothing is ready and no claim
/// may have lapsed, that is the answer, given here: an exhausted backlog's pollers look
/// at every claimer, and they do it side by side. Anything more (a ready key passed over
/// or refused, a sweep, a refusal to audit) escalates, and [`claim_next`] decides under
/// the project's lock.
pub fn claim_by_key(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    lapsed: bool,
) -> Result<Next> {
    let view = Claiming::new(store);
    let mut refused = Vec::new();
    let source = |after: Option<u64>| Ok(view.backlog_take(guard, after)?.into_iter().collect());
    if let Some(r) = take_ready(ctx, &view, guard, req, &mut refused, source)? {
        return Ok(Next::Taken(r));
    }
    // A claim known to have lapsed is swept under the project's lock.
    if lapsed || !refused.is_empty() {
        return Err(Error::Escalate);
    }
    // Ready keys passed over were being taken by other claims, which may yet let them go.
    let summary = view.backlog_summary(true)?;
    if summary.ready > 0 || (summary.claimed > 0 && may_have_lapsed(ctx, &view, &summary)?) {
        return Err(Error::Escalate);
    }
    Ok(Next::Refused {
        refused,
        summary,
        judged: true,
    })
}

/// The ready keys after a place, one and then [`BATCH`] at a time, under the project's
/// scope.
fn ready_in_order<'v>(
    view: &'v Claiming<'_>,
) -> impl FnMut(Option<u64>) -> Result<Vec<BacklogEntry>> + 'v {
    let mut n = 1;
    move |after| {
        let batch = view.backlog_ready(after, n);
        n = BATCH;
        batch
    }
}

/// Go through the ready keys in order, as `source` gives them after a place, until one
/// is taken; refusals are kept in `refused`.
fn take_ready(
    ctx: &Ctx,
    view: &Claiming<'_>,
    guard: &Guard,
    req: &Request,
    refused: &mut Vec<CheckoutReport>,
    mut source: impl FnMut(Option<u64>) -> Result<Vec<BacklogEntry>>,
) -> Result<Option<CheckoutReport>> {
    let me = req.agent.id.as_str();
    let mut after = None;
    loop {
        let batch = source(after)?;
        let Some(last) = batch.last() else {
            return Ok(None);
        };
        after = Some(last.seq);
        let keys: Vec<String> = batch.into_iter().map(|e| e.key).collect();
        let read = view.read_ahead(guard, &keys)?;
        let mut judge: Option<Judge> = None;
        for (key, (slot, queue)) in keys.iter().zip(read) {
            if let Slot::Held(r) = &slot
                && !r.held_by(me)
                && queue.is_empty()
            {
                let j = judge.get_or_insert_with(|| Judge::new(ctx, view));
                if j.reap_cause(r)?.is_none() {
                    // Taken by a plain checkout: the index learns who has it.
                    view.backlog_mark(guard, key, Some(&claim_of(r)))?;
                    continue;
                }
            }
            judge = None;
            let r = attempt(ctx, view, guard, req, key, Join::No)?;
            if r.outcome.exit_code() == 0 {
                if let Some(c) = &r.checkout {
                    view.backlog_mark(guard, key, Some(&claim(me, c.expires_at)))?;
                }
                return Ok(Some(r));
            }
            match (&r.outcome, &r.checkout) {
                (Outcome::Conflict, Some(h)) if h.agent.id != me => {
                    view.backlog_mark(guard, key, Some(&claim(&h.agent.id, h.expires_at)))?;
                }
                // Frozen, reserved for a queue's head, damaged: it stays ready, in its place.
                _ => {}
            }
            refused.push(r);
        }
    }
}

/// Has a claim's recheck time come, or is one of the claimers dead?
fn may_have_lapsed(ctx: &Ctx, view: &Claiming<'_>, summary: &BacklogSummary) -> Result<bool> {
    if summary.recheck.is_some_and(|t| t <= ctx.now()) {
        return Ok(true);
    }
    let mut judge = Judge::new(ctx, view);
    let cfg = judge.config()?.clone();
    // Spawn per task leaves as many claimers as claims: read the registry in one go.
    judge.expect_agents(summary.holders.iter().map(String::as_str))?;
    for agent in &summary.holders {
        if let Some(entry) = judge.entry(agent)?
            && crate::liveness::judge_entry(&entry, &ctx.now(), &cfg).dead()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Look at every claim: one whose key is free, or whose holder's checkout may be ended,
/// is ready again; the others learn their holder and lease end. Returns whether any key
/// became ready.
fn sweep(ctx: &Ctx, view: &Claiming<'_>, guard: &Guard) -> Result<bool> {
    let claims = view.backlog_claimed()?;
    let keys: Vec<String> = claims.iter().map(|e| e.key.clone()).collect();
    let read = view.read_ahead(guard, &keys)?;
    let mut judge = Judge::new(ctx, view);
    let mut next: Option<Time> = None;
    let mut freed = false;
    for (e, (slot, _)) in claims.iter().zip(read) {
        let keep = match &slot {
            Slot::Held(r) if judge.reap_cause(r)?.is_none() => Some(claim_of(r)),
            _ => None,
        };
        match keep {
            Some(c) => {
                next = Some(next.map_or(c.recheck, |n| n.min(c.recheck)));
                if e.claimed.as_ref() != Some(&c) {
                    view.backlog_mark(guard, &e.key, Some(&c))?;
                }
            }
            None => {
                view.backlog_mark(guard, &e.key, None)?;
                freed = true;
            }
        }
    }
    view.backlog_rechecked(guard, next)?;
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::file::FileStore;

    fn ctx(dir: &std::path::Path, agent: &str) -> Ctx {
        Ctx::new(dir.to_path_buf(), Some(agent.to_string()), None).unwrap()
    }

    fn claimed(ctx: &Ctx, store: &dyn Store, pid: Option<u32>) -> String {
        let req = Request::new(ctx, None, None, None)
            .unwrap()
            .registering(pid)
            .unwrap();
        let next = store.transaction(|g| {
            let req = super::super::take::with_registered_pid(ctx, store, g, req.clone())?;
            claim_next(ctx, store, g, &req, false)
        });
        match next.unwrap() {
            Next::Taken(r) => r.key,
            Next::Refused { .. } => panic!("nothing claimed"),
        }
    }

    /// A claim of a backlog whose every key is claimed reads no claimer and no registry
    /// entry under the lock: it leaves them to [`settle`], which finds the dead one after
    /// the lock is let go and claims again, told so, to sweep.
    #[test]
    fn claimers_are_judged_after_the_lock_is_let_go() {
        let td = tempfile::tempdir().unwrap();
        let dir = td.path().join(".locks");
        let file = FileStore::open_or_create(&dir).unwrap();
        let store: &dyn Store = &file;
        let keys = ["t1".to_string(), "t2".to_string()];
        store.transaction(|g| store.backlog_add(g, &keys)).unwrap();
        let mut dying = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert_eq!(claimed(&ctx(&dir, "a"), store, Some(dying.id())), "t1");
        assert_eq!(claimed(&ctx(&dir, "b"), store, None), "t2");
        dying.kill().unwrap();
        dying.wait().unwrap();

        let c = ctx(&dir, "c");
        let req = Request::new(&c, None, None, None).unwrap();
        let under_lock = |lapsed| store.transaction(|g| claim_next(&c, store, g, &req, lapsed));
        match under_lock(false).unwrap() {
            Next::Refused {
                refused,
                summary,
                judged,
            } => {
                assert!(!judged, "the claimers are left to be judged");
                assert!(refused.is_empty());
                assert_eq!((summary.ready, summary.claimed), (0, 2));
                assert!(summary.holders.is_empty(), "{:?}", summary.holders);
            }
            Next::Taken(r) => panic!("{} taken under the lock, with no sweep asked", r.key),
        }
        match settle(&c, store, under_lock).unwrap() {
            Next::Taken(r) => {
                assert_eq!(r.key, "t1");
                let gone = r.took_over.expect("a's claim ended");
                assert_eq!(gone.agent.id, "a");
            }
            Next::Refused { summary, .. } => panic!("the dead claimer was missed: {summary:?}"),
        }
        // Every claimer alive now: the answer names them, judged.
        match settle(&c, store, under_lock).unwrap() {
            Next::Refused {
                summary, judged, ..
            } => {
                assert!(judged);
                assert_eq!(summary.holders, ["b", "c"]);
                assert_eq!((summary.ready, summary.claimed), (0, 2));
            }
            Next::Taken(r) => panic!("{} taken from a live claimer", r.key),
        }
    }
}

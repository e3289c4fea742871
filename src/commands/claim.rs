//! `checkout --any KEY…`: the first key of the list that can be taken, found by the
//! engine's claim-next ([`crate::engine::claim`]); `checkout --next`: the first of the
//! project's backlog ([`crate::engine::backlog`]).

use std::time::Duration;

use crate::engine::Ctx;
use crate::engine::backlog::{self, Next};
use crate::engine::claim::{Claimed, claim_next};
use crate::engine::take::Request;
use crate::error::{Outcome, Result};
use crate::report::{AnyReport, NextReport, Report};

/// `checkout --any`: the first key of the list that can be taken, all under one guard so
/// agents racing over the same list get different keys; found without a full attempt on
/// every key ahead of it.
pub fn any(
    ctx: &Ctx,
    keys: &[String],
    timeout: Option<Duration>,
    reason: Option<String>,
    pid: Option<u32>,
) -> Result<Report> {
    for k in keys {
        crate::key::validate(k)?;
    }
    let req = Request::new(ctx, timeout, reason, None)?.registering(pid)?;
    let store = ctx.open_store()?;
    let claimed = store.transaction(|guard| {
        let req = crate::engine::take::with_registered_pid(ctx, &*store, guard, req.clone())?;
        claim_next(ctx, &*store, guard, &req, keys)
    });
    let claimed = crate::engine::take::audited(ctx, &*store, &req, claimed)?;
    let refused = match claimed {
        Claimed::Taken(r) => return Ok(Report::Checkout(r)),
        Claimed::Refused(refused) => refused,
    };
    let all_frozen = refused.iter().all(|r| r.outcome == Outcome::Frozen);
    Ok(Report::Any(AnyReport {
        command: "checkout",
        now: ctx.now(),
        outcome: if all_frozen {
            Outcome::Frozen
        } else {
            Outcome::Conflict
        },
        refused,
    }))
}

/// `checkout --next`: the first key of the project's backlog that can be taken; agents
/// racing get different keys.
pub fn next(
    ctx: &Ctx,
    timeout: Option<Duration>,
    reason: Option<String>,
    pid: Option<u32>,
) -> Result<Report> {
    let req = Request::new(ctx, timeout, reason, None)?.registering(pid)?;
    let Some(store) = ctx.existing_store()? else {
        return Ok(Report::Next(NextReport {
            command: "checkout",
            now: ctx.now(),
            outcome: Outcome::BacklogEmpty,
            refused: Vec::new(),
            ready: 0,
            claimed: 0,
            claimers: Vec::new(),
        }));
    };
    // Beside other claims where the store can (keys taken one by one under their own
    // locks); under the project's lock when nothing ready can be taken, or elsewhere.
    let locks = [crate::engine::agent_lock(&req.agent.id)];
    let next = backlog::settle(ctx, &*store, |lapsed| {
        crate::engine::escalating(
            &*store,
            || store.begin_claim(&locks),
            |guard, by_key| {
                let req =
                    crate::engine::take::with_registered_pid(ctx, &*store, guard, req.clone())?;
                if by_key {
                    backlog::claim_by_key(ctx, &*store, guard, &req, lapsed)
                } else {
                    backlog::claim_next(ctx, &*store, guard, &req, lapsed)
                }
            },
        )
    });
    let next = crate::engine::take::audited(ctx, &*store, &req, next)?;
    let (refused, summary) = match next {
        Next::Taken(r) => return Ok(Report::Checkout(r)),
        Next::Refused {
            refused, summary, ..
        } => (refused, summary),
    };
    let outcome = if summary.ready == 0 && summary.claimed == 0 {
        Outcome::BacklogEmpty
    } else if summary.claimed == 0
        && !refused.is_empty()
        && refused.iter().all(|r| r.outcome == Outcome::Frozen)
    {
        Outcome::Frozen
    } else {
        Outcome::Conflict
    };
    Ok(Report::Next(NextReport {
        command: "checkout",
        now: ctx.now(),
        outcome,
        refused,
        ready: summary.ready,
        claimed: summary.claimed,
        claimers: summary.holders,
    }))
}

//! `checkout --any KEY…`: the first key of the list that can be taken, found by the
//! engine's claim-next ([`crate::engine::claim`]).

use std::time::Duration;

use crate::engine::Ctx;
use crate::engine::claim::{Claimed, claim_next};
use crate::engine::take::Request;
use crate::error::{Outcome, Result};
use crate::report::{AnyReport, Report};

/// `checkout --any`: the first key of the list that can be taken, all under one guard so
/// agents racing over the same list get different keys; found without a full attempt on
/// every key ahead of it.
pub fn any(
    ctx: &Ctx,
    keys: &[String],
    timeout: Option<Duration>,
    reason: Option<String>,
) -> Result<Report> {
    for k in keys {
        crate::key::validate(k)?;
    }
    let req = Request::new(ctx, timeout, reason, None)?;
    let store = ctx.open_store()?;
    let claimed = store.transaction(|guard| {
        let req = super::checkout::with_registered_pid(&*store, guard, req)?;
        claim_next(ctx, &*store, guard, &req, keys)
    })?;
    let refused = match claimed {
        Claimed::Taken(r) => return Ok(Report::Checkout(r)),
        Claimed::Refused(refused) => refused,
    };
    let all_frozen = refused.iter().all(|r| r.outcome == Outcome::Frozen);
    Ok(Report::Any(AnyReport {
        command: "checkout",
        now: ctx.now,
        outcome: if all_frozen {
            Outcome::Frozen
        } else {
            Outcome::Conflict
        },
        refused,
    }))
}

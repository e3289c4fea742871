use crate::engine::{Ctx, Judge, ReapReason, Settled, reap};
use crate::error::{Error, Outcome, Result};
use crate::liveness::Cause;
use crate::report::{CheckoutView, Report, VerifyReport};
use crate::store::{Record, Slot};

pub fn run(ctx: &Ctx, key: &str, token: u64) -> Result<Report> {
    crate::key::validate(key)?;
    let me = ctx.agent_id()?;
    let report = |outcome: Outcome, checkout: Option<CheckoutView>| {
        Ok(Report::Verify(VerifyReport {
            command: "verify",
            now: ctx.now(),
            key: key.to_string(),
            token,
            valid: outcome == Outcome::Valid,
            outcome,
            checkout,
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        return report(Outcome::NoSuchCheckout, None);
    };
    // The holder loses its lease at its end, or when its process is gone (renewing never
    // revives it); others' checkouts end after the skew margin or when their holder is dead.
    let mut judge = Judge::new(ctx, &*store);
    let mut ends = |r: &Record, judge: &mut Judge| -> Result<Option<(ReapReason, Option<Cause>)>> {
        if r.held_by(&me) {
            judge.own_end(r)
        } else {
            judge.reap_cause(r)
        }
    };
    let mut slot = crate::engine::slots::read_mine(&*store, key, &me)?;
    if let Slot::Held(r) = &slot
        && ends(r, &mut judge)?.is_some()
    {
        let settled = reap(ctx, &*store, &mut judge, vec![r.id()], Some(&me), &mut ends)?;
        match settled.into_iter().next().map(|(_, s)| s) {
            Some(Settled::Ended { record, .. }) => {
                return if record.held_by(&me) {
                    report(Outcome::LeaseLost, Some(CheckoutView::from(&record)))
                } else {
                    report(Outcome::NoSuchCheckout, None)
                };
            }
            Some(Settled::Kept(now)) => slot = now,
            None => {}
        }
    }
    let r = match slot {
        Slot::Free => return report(Outcome::NoSuchCheckout, None),
        Slot::Corrupt { path, problem } => {
            return Err(Error::Corrupt {
                key: key.to_string(),
                path,
                problem,
            });
        }
        Slot::Held(r) => r,
    };
    if r.held_by(&me) && crate::secret::standing_for(&me, r.owner.as_ref()).refused() {
        store.transaction(|g| crate::engine::holder_refused(ctx, &*store, g, &r, "verify"))?;
        return report(Outcome::SecretRefused, Some(CheckoutView::from(&r)));
    }
    let outcome = if !r.held_by(&me) {
        Outcome::NotHolder
    } else if r.token != token {
        Outcome::StaleToken
    } else {
        Outcome::Valid
    };
    report(outcome, Some(CheckoutView::from(&r)))
}

/// `verify KEY --token N`.
pub fn execute(ctx: &Ctx, a: crate::cli::VerifyArgs) -> Result<Report> {
    run(ctx, &a.key, a.token)
}

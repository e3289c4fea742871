use super::{Ctx, auto_release};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, Report, VerifyReport};
use crate::store::{FileStore, Record, Slot};

pub fn run(ctx: &Ctx, key: &str, token: u64) -> Result<Report> {
    crate::key::validate(key)?;
    let me = ctx.agent_id()?;
    let report = |outcome: Outcome, checkout: Option<CheckoutView>| {
        Ok(Report::Verify(VerifyReport {
            command: "verify",
            now: ctx.now,
            key: key.to_string(),
            token,
            valid: outcome == Outcome::Valid,
            outcome,
            checkout,
        }))
    };
    let Some(store) = FileStore::open_existing(&ctx.dir)? else {
        return report(Outcome::NoSuchCheckout, None);
    };
    // The holder loses its lease at its end; others may break it only after the margin.
    let expired = |r: &Record| {
        if r.held_by(&me) {
            r.expired_for_holder(&ctx.now)
        } else {
            r.breakable(&ctx.now)
        }
    };
    let mut slot = store.read(key)?;
    let mut guard = None;
    if matches!(&slot, Slot::Held(r) if expired(r)) {
        guard = Some(store.lock()?);
        slot = store.read(key)?;
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
    if let (Some(g), true) = (&guard, expired(&r)) {
        auto_release(ctx, &store, g, &r, Some(&me))?;
        return if r.held_by(&me) {
            report(Outcome::LeaseLost, Some(CheckoutView::from(&r)))
        } else {
            report(Outcome::NoSuchCheckout, None)
        };
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

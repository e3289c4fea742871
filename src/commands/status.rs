use super::{Ctx, read_reaping};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, Expired, Report, StatusReport};
use crate::store::{FileStore, Slot};

pub fn run(ctx: &Ctx, key: &str) -> Result<Report> {
    crate::key::validate(key)?;
    let by = ctx.agent_id().ok();
    let (slot, expired) = match FileStore::open_existing(&ctx.dir)? {
        Some(store) => read_reaping(ctx, &store, key, by.as_deref())?,
        None => (Slot::Free, None),
    };
    let checkout = match slot {
        Slot::Corrupt { path, problem } => {
            return Err(Error::Corrupt {
                key: key.to_string(),
                path,
                problem,
            });
        }
        Slot::Held(r) => Some(CheckoutView::from(&r)),
        Slot::Free => None,
    };
    Ok(Report::Status(StatusReport {
        command: "status",
        now: ctx.now,
        key: key.to_string(),
        outcome: if checkout.is_some() {
            Outcome::Held
        } else {
            Outcome::Free
        },
        checkout,
        expired: expired.as_ref().map(Expired::from),
        queue_length: 0,
    }))
}

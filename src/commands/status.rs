use super::{Ctx, NOTES_SHOWN, read_reaping};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, QueueView, Report, StatusReport};
use crate::store::{FileStore, Slot};

pub fn run(ctx: &Ctx, key: &str) -> Result<Report> {
    crate::key::validate(key)?;
    let by = ctx.agent_id().ok();
    let store = FileStore::open_existing(&ctx.dir)?;
    let (slot, released) = match &store {
        Some(store) => read_reaping(ctx, store, key, by.as_deref())?,
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
    let (notes, queue) = match &store {
        Some(s) => (
            s.last_notes(key, NOTES_SHOWN)?,
            QueueView::from_queue(&s.read_queue(key)?),
        ),
        None => (Vec::new(), QueueView::default()),
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
        released,
        notes,
        queue,
    }))
}

use crate::engine::{Ctx, NOTES_SHOWN, queue, read_reaping};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, QueueView, Report, StatusReport};
use crate::store::{Slot, Store};

pub fn run(ctx: &Ctx, key: &str) -> Result<Report> {
    crate::key::validate(key)?;
    let by = ctx.agent_id().ok();
    let store = ctx.existing_store()?;
    let (slot, released) = match store.as_deref() {
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
    let (notes, queue) = match store.as_deref() {
        Some(s) => (
            s.last_notes(key, NOTES_SHOWN)?,
            QueueView::from_queue(&settled_queue(ctx, s, key)?),
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

/// A key's queue brought up to date (lapsed reservations passed on, gone waiters dropped,
/// the key reserved for the first waiter that can take it).
pub(crate) fn settled_queue(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
) -> Result<crate::store::Queue> {
    let q = store.read_queue(key)?;
    if q.waiters.is_empty() && q.reservation.is_none() {
        return Ok(q);
    }
    store.transaction(|guard| {
        let slot = store.read(key)?;
        queue::settle_key(ctx, store, guard, key, queue::KeyNow::of(&slot), None)
    })
}

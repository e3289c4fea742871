use crate::engine::{Ctx, Judge, NOTES_SHOWN, Settled, lapsed, queue, read_reaping, reap};
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
    let mut checkout = match slot {
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
    let (holders, slots) = match store.as_deref() {
        Some(store) => slot_holders(ctx, store, key, by.as_deref())?,
        None => (Vec::new(), None),
    };
    if checkout.is_none() {
        checkout = holders
            .iter()
            .find(|c| Some(c.agent.id.as_str()) == by.as_deref())
            .or(holders.first())
            .cloned();
    }
    let (notes, queue) = match store.as_deref() {
        Some(s) => (
            s.last_notes(key, NOTES_SHOWN)?,
            QueueView::from_queue(&settled_queue(ctx, s, key)?),
        ),
        None => (Vec::new(), QueueView::default()),
    };
    Ok(Report::Status(StatusReport {
        command: "status",
        now: ctx.now(),
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
        slots,
        holders,
    }))
}

/// The holders of a key with slots, the ended ones ended on the way, and how many
/// slots it has (from its records, else its queue).
fn slot_holders(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
    by: Option<&str>,
) -> Result<(Vec<CheckoutView>, Option<u32>)> {
    let mut judge = Judge::new(ctx, store);
    let mut held = Vec::new();
    let mut ended = Vec::new();
    for s in store.read_slots(key)? {
        match s {
            Slot::Held(r) if judge.reap_reason(&r)?.is_some() => ended.push(r.id()),
            Slot::Held(r) => held.push(r),
            Slot::Corrupt { path, problem } => {
                return Err(Error::Corrupt {
                    key: key.to_string(),
                    path,
                    problem,
                });
            }
            Slot::Free => {}
        }
    }
    for (_, settled) in reap(ctx, store, &mut judge, ended, by, &mut lapsed)? {
        if let Settled::Kept(Slot::Held(r)) = settled {
            held.push(r);
        }
    }
    held.sort_by_key(|r| r.slot);
    let slots = held
        .iter()
        .max_by_key(|r| r.token)
        .and_then(|r| r.slots)
        .or(store.read_queue(key)?.slots);
    Ok((held.iter().map(CheckoutView::from).collect(), slots))
}

/// A key's queue brought up to date (lapsed reservations passed on, gone waiters dropped,
/// the key reserved for the first waiter that can take it).
pub(crate) fn settled_queue(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
) -> Result<crate::store::Queue> {
    let q = store.read_queue(key)?;
    if q.is_empty() {
        return Ok(q);
    }
    store.transaction(|guard| queue::settle_now(ctx, store, guard, key, None))
}

/// `status KEY`.
pub fn execute(ctx: &Ctx, a: crate::cli::StatusArgs) -> Result<Report> {
    run(ctx, &a.key)
}

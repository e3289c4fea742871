use super::{Ctx, auto_release};
use crate::error::Result;
use crate::report::{CheckoutView, CorruptEntry, ListReport, Report};
use crate::store::{FileStore, Slot};

pub fn run(ctx: &Ctx, mine: bool) -> Result<Report> {
    let me = if mine {
        Some(ctx.agent_id()?)
    } else {
        ctx.agent_id().ok()
    };
    let mut checkouts = Vec::new();
    let mut corrupt = Vec::new();
    if let Some(store) = FileStore::open_existing(&ctx.dir)? {
        let mut expired = Vec::new();
        for (file, slot) in store.scan()? {
            match slot {
                Slot::Held(r) if r.breakable(&ctx.now) => expired.push(r),
                Slot::Held(r) => {
                    if !mine || me.as_deref().is_some_and(|m| r.held_by(m)) {
                        checkouts.push(CheckoutView::from(&r));
                    }
                }
                Slot::Corrupt { path, problem } => corrupt.push(CorruptEntry {
                    file,
                    path: path.display().to_string(),
                    problem,
                }),
                Slot::Free => {}
            }
        }
        if !expired.is_empty() {
            // Reap under the guard, re-reading each to be sure it is the record we judged.
            let guard = store.lock()?;
            for r in expired {
                match store.read(&r.key)? {
                    Slot::Held(again) if again.token == r.token && again.breakable(&ctx.now) => {
                        auto_release(ctx, &store, &guard, &again, me.as_deref())?;
                    }
                    Slot::Held(again)
                        if !mine || me.as_deref().is_some_and(|m| again.held_by(m)) =>
                    {
                        checkouts.push(CheckoutView::from(&again));
                    }
                    _ => {}
                }
            }
        }
    }
    checkouts.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Report::List(ListReport {
        command: "list",
        now: ctx.now,
        mine: if mine { me } else { None },
        checkouts,
        corrupt,
    }))
}

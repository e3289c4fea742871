use crate::engine::{Ctx, Judge, scan_reaping};
use crate::error::Result;
use crate::report::{CheckoutView, CorruptEntry, ListReport, QueueView, Report};
use crate::store::Slot;

pub fn run(ctx: &Ctx, mine: bool) -> Result<Report> {
    let me = if mine {
        Some(ctx.agent_id()?)
    } else {
        ctx.agent_id().ok()
    };
    let wanted = |id: &str| !mine || me.as_deref() == Some(id);
    let mut checkouts = Vec::new();
    let mut corrupt = Vec::new();
    let mut queues = std::collections::BTreeMap::new();
    if let Some(store) = ctx.existing_store()? {
        let mut judge = Judge::new(ctx, &*store);
        // Checkouts that may be ended are ended on the way, as every command does.
        let (mut slots, _) = scan_reaping(ctx, &*store, &mut judge, me.as_deref())?;
        checkouts.reserve_exact(slots.len());
        // From the end, the records' vector given back as it empties: the views take its
        // place instead of adding to it (at 10,000 checkouts, 4.5 MB of 14).
        let mut taken = 0;
        while let Some(slot) = slots.pop() {
            taken += 1;
            if taken % 1024 == 0 {
                slots.shrink_to_fit();
            }
            match slot {
                Slot::Held(r) if wanted(&r.agent.id) => checkouts.push(CheckoutView::from(r)),
                Slot::Held(_) | Slot::Free => {}
                Slot::Corrupt { path, problem } => corrupt.push(CorruptEntry {
                    file: path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    path: path.display().to_string(),
                    problem,
                }),
            }
        }
        corrupt.reverse();
    }
    if let Some(store) = ctx.existing_store()? {
        // After ending checkouts, so keys just freed show their new reservation.
        for q in store.scan_queues()? {
            if !q.is_empty() {
                super::status::settled_queue(ctx, &*store, &q.key)?;
            }
        }
        // Read again once all are settled: settling one queue may change others (a
        // reservation that closes a cycle drops the waiter that closes it, paths freed
        // serve other queues), and a queue read before that would show a state that
        // never stood.
        for q in store.scan_queues()? {
            if !q.is_empty() {
                queues.insert(q.key.clone(), QueueView::from_queue(&q));
            }
        }
    }
    checkouts.sort_by(|a, b| (&a.key, a.slot).cmp(&(&b.key, b.slot)));
    Ok(Report::List(ListReport {
        command: "list",
        now: ctx.now,
        mine: if mine { me } else { None },
        checkouts,
        corrupt,
        queues,
    }))
}

/// `list [--mine]`.
pub fn execute(ctx: &Ctx, a: crate::cli::ListArgs) -> Result<Report> {
    run(ctx, a.mine)
}

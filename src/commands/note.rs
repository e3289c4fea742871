use super::checkout::check_text;
use crate::engine::{Ctx, Judge, ReapReason, auto_release};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, NoteReport, Report};
use crate::store::{Note, Slot};

/// Append a checkpoint to KEY's history; only its current holder may.
pub fn run(ctx: &Ctx, key: &str, text: String) -> Result<Report> {
    crate::key::validate(key)?;
    if text.trim().is_empty() {
        return Err(Error::Usage("a note must not be empty".into()));
    }
    check_text("note", &text)?;
    let agent = ctx.agent()?;
    let report = |outcome, checkout, note| {
        Ok(Report::Note(NoteReport {
            command: "note",
            now: ctx.now(),
            key: key.to_string(),
            outcome,
            checkout,
            note,
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        return report(Outcome::NoSuchCheckout, None, None);
    };
    store.transaction(|guard| {
        let mut judge = Judge::new(ctx, &*store);
        match crate::engine::slots::read_mine(&*store, key, &agent.id)? {
            Slot::Free => report(Outcome::NoSuchCheckout, None, None),
            Slot::Corrupt { path, problem } => Err(Error::Corrupt {
                key: key.to_string(),
                path,
                problem,
            }),
            // A checkout whose process is gone is ended first, whoever asks: nothing is
            // noted under a checkout that has ended.
            Slot::Held(r)
                if r.held_by(&agent.id)
                    && let Some((ReapReason::AgentDeath, _)) = judge.own_end(&r)? =>
            {
                let death = ReapReason::AgentDeath;
                auto_release(ctx, &*store, guard, &r, Some(&agent.id), death)?;
                report(Outcome::LeaseLost, Some(CheckoutView::from(&r)), None)
            }
            Slot::Held(r)
                if r.held_by(&agent.id)
                    && crate::engine::holder_refused(ctx, &*store, guard, &r, "note")?
                        .is_some() =>
            {
                report(Outcome::SecretRefused, Some(CheckoutView::from(&r)), None)
            }
            Slot::Held(r) if r.held_by(&agent.id) => {
                if r.expired_for_holder(&ctx.now()) {
                    auto_release(
                        ctx,
                        &*store,
                        guard,
                        &r,
                        Some(&agent.id),
                        ReapReason::Timeout,
                    )?;
                    return report(Outcome::LeaseLost, Some(CheckoutView::from(&r)), None);
                }
                let note = Note {
                    ts: ctx.now(),
                    agent: agent.id.clone(),
                    name: agent.name.clone(),
                    token: Some(r.token),
                    text,
                };
                store.append_note(guard, key, &note)?;
                report(Outcome::Noted, Some(CheckoutView::from(&r)), Some(note))
            }
            Slot::Held(r) => {
                if let Some(reason) = judge.reap_reason(&r)? {
                    auto_release(ctx, &*store, guard, &r, Some(&agent.id), reason)?;
                    return report(Outcome::NoSuchCheckout, None, None);
                }
                report(Outcome::NotHolder, Some(CheckoutView::from(&r)), None)
            }
        }
    })
}

/// `note KEY TEXT`.
pub fn execute(ctx: &Ctx, a: crate::cli::NoteArgs) -> Result<Report> {
    run(ctx, &a.key, a.text)
}

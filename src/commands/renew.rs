use std::time::Duration;

use crate::duration::to_chrono;
use crate::engine::{Ctx, Judge, ReapReason, auto_release, held_keys, holder_refused};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, KeyResult, KeysCommand, KeysReport, Report};
use crate::store::{Record, Slot};

pub fn run(ctx: &Ctx, keys: Vec<String>, all: bool, timeout: Option<Duration>) -> Result<Report> {
    let keys = crate::key::validate_all(keys)?;
    let me = ctx.agent_id()?;
    let mut results = Vec::new();
    let report = |results| {
        Ok(Report::Keys(KeysReport {
            command: KeysCommand::Renew,
            now: ctx.now,
            all,
            results,
            note: None,
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        for key in keys.clone() {
            results.push(KeyResult {
                key,
                outcome: Outcome::NoSuchCheckout,
                checkout: None,
                frozen: None,
                problem: None,
            });
        }
        return report(results);
    };
    // Found before taking the guard (a scan); each key is re-read under it.
    let keys = if all { held_keys(&*store, &me)? } else { keys };
    // Each key alone, beside changes to other keys; escalated to the project's lock
    // when a release hands a key on or a force tells its holder.
    let locks = crate::engine::key_locks(&keys, &me);
    let results = crate::engine::transaction_scoped(&*store, &locks, |guard| {
        let mut results = Vec::new();
        let mut judge = Judge::new(ctx, &*store);
        let single = keys.len() == 1;
        for key in keys.clone() {
            let mut frozen = None;
            let (outcome, checkout) = match crate::engine::slots::read_mine(&*store, &key, &me)? {
                Slot::Free => (Outcome::NoSuchCheckout, None),
                Slot::Corrupt { path, problem } => {
                    let e = Error::Corrupt {
                        key: key.clone(),
                        path,
                        problem,
                    };
                    if single {
                        return Err(e);
                    }
                    // Several keys: report it in its row and go on with the others.
                    results.push(KeyResult {
                        key,
                        outcome: Outcome::Corrupt,
                        checkout: None,
                        frozen: None,
                        problem: Some(e.to_string()),
                    });
                    continue;
                }
                // A checkout whose process is gone is ended first, whoever asks: renewing
                // never revives it.
                Slot::Held(r)
                    if r.held_by(&me)
                        && let Some((ReapReason::AgentDeath, _)) = judge.own_end(&r)? =>
                {
                    auto_release(ctx, &*store, guard, &r, Some(&me), ReapReason::AgentDeath)?;
                    (Outcome::LeaseLost, Some(CheckoutView::from(&r)))
                }
                Slot::Held(r)
                    if r.held_by(&me)
                        && holder_refused(ctx, &*store, guard, &r, "renew")?.is_some() =>
                {
                    (Outcome::SecretRefused, Some(CheckoutView::from(&r)))
                }
                Slot::Held(r) if r.held_by(&me) => {
                    if r.expired_for_holder(&ctx.now) {
                        // A lost lease is never revived: someone may already have acted on it.
                        auto_release(ctx, &*store, guard, &r, Some(&me), ReapReason::Timeout)?;
                        (Outcome::LeaseLost, Some(CheckoutView::from(&r)))
                    } else if let Some(f) = store.frozen(&key, &ctx.now)? {
                        // A freeze drains a key: the holder keeps it until its lease ends,
                        // but cannot extend it while the freeze lasts.
                        frozen = Some(f);
                        (Outcome::Frozen, Some(CheckoutView::from(&r)))
                    } else {
                        // Without --timeout the lease keeps its own length, as a heartbeat
                        // renews it: a renewal never shortens a lease by surprise.
                        // A clock far behind (a VM resumed, a bad NTP step) never moves the
                        // lease backwards: never before the grant, and a plain renewal never
                        // before the current end.
                        let expires_at = match timeout {
                            Some(t) => ctx.now + to_chrono(t),
                            None => (ctx.now + (r.expires_at - r.renewed_at)).max(r.expires_at),
                        }
                        .max(r.acquired_at);
                        let renewed = Record {
                            renewed_at: ctx.now.max(r.acquired_at),
                            expires_at,
                            ..r
                        };
                        store.replace(guard, &renewed)?;
                        crate::warnings::after_change(
                            &format!("`{key}` was renewed, but the audit log was not written"),
                            store.audit(guard, &ctx.event("renew", &renewed)),
                        );
                        (Outcome::Renewed, Some(CheckoutView::from(&renewed)))
                    }
                }
                Slot::Held(r) if let Some(reason) = judge.reap_reason(&r)? => {
                    auto_release(ctx, &*store, guard, &r, Some(&me), reason)?;
                    (Outcome::NoSuchCheckout, None)
                }
                Slot::Held(r) => (Outcome::NotHolder, Some(CheckoutView::from(&r))),
            };
            results.push(KeyResult {
                key,
                outcome,
                checkout,
                frozen,
                problem: None,
            });
        }
        Ok(results)
    })?;
    report(results)
}

/// `renew KEY…` / `renew --all`.
pub fn execute(ctx: &Ctx, a: crate::cli::RenewArgs) -> Result<Report> {
    run(ctx, a.keys, a.all, a.timeout)
}

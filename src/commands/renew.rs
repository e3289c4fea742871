use std::time::Duration;

use crate::duration::to_chrono;
use crate::engine::{Ctx, Judge, ReapReason, Scope, auto_release, held_keys, holder_refused};
use crate::error::{Error, Outcome, Result};
use crate::report::{KeyResult, KeysCommand, KeysReport, Report};
use crate::store::{Event, Record, Slot};

pub fn run(ctx: &Ctx, keys: Vec<String>, all: bool, timeout: Option<Duration>) -> Result<Report> {
    let keys = crate::key::validate_all(keys)?;
    let me = ctx.agent_id()?;
    let report = |results| {
        Ok(Report::Keys(KeysReport {
            command: KeysCommand::Renew,
            now: ctx.now(),
            all,
            results,
            note: None,
            worktrees: Vec::new(),
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        let none = |key| KeyResult::new(key, Outcome::NoSuchCheckout, None);
        return report(keys.into_iter().map(none).collect());
    };
    // Found before taking the guard (a scan); each key is re-read under it.
    let keys = if all { held_keys(&*store, &me)? } else { keys };
    // Each key alone, beside changes to other keys; escalated to the project's lock
    // when a release hands a key on or a force tells its holder.
    let locks = crate::engine::key_locks(&keys, &me);
    let results = crate::engine::transaction_scoped(&*store, &locks, |guard| {
        let mut renewing = Renewing {
            scope: Scope::new(ctx, &*store, guard),
            judge: Judge::new(ctx, &*store),
            me: &me,
            timeout,
            single: keys.len() == 1,
        };
        keys.clone()
            .into_iter()
            .map(|key| renewing.key(key))
            .collect::<Result<Vec<_>>>()
    })?;
    report(results)
}

/// A renewal under the scope.
struct Renewing<'a> {
    scope: Scope<'a>,
    judge: Judge<'a>,
    me: &'a str,
    timeout: Option<Duration>,
    /// One key asked for: a corrupt record is the command's error, not a row.
    single: bool,
}

impl Renewing<'_> {
    /// Renew one key, re-read under the guard: its row of the report.
    fn key(&mut self, key: String) -> Result<KeyResult> {
        let (Scope { ctx, store, guard }, me) = (self.scope, self.me);
        let row = |outcome, r: &Record| Ok(KeyResult::new(key.clone(), outcome, Some(r)));
        match crate::engine::slots::read_mine(store, &key, me)? {
            Slot::Free => Ok(KeyResult::new(key, Outcome::NoSuchCheckout, None)),
            Slot::Corrupt { path, problem } => {
                super::corrupt_row(Error::Corrupt { key, path, problem }, self.single)
            }
            // A checkout whose process is gone is ended first, whoever asks: renewing
            // never revives it.
            Slot::Held(r)
                if r.held_by(me)
                    && let Some((ReapReason::AgentDeath, _)) = self.judge.own_end(&r)? =>
            {
                auto_release(ctx, store, guard, &r, Some(me), ReapReason::AgentDeath)?;
                row(Outcome::LeaseLost, &r)
            }
            Slot::Held(r)
                if r.held_by(me) && holder_refused(ctx, store, guard, &r, "renew")?.is_some() =>
            {
                row(Outcome::SecretRefused, &r)
            }
            Slot::Held(r) if r.held_by(me) => {
                if r.expired_for_holder(&ctx.now()) {
                    // A lost lease is never revived: someone may already have acted on it.
                    auto_release(ctx, store, guard, &r, Some(me), ReapReason::Timeout)?;
                    row(Outcome::LeaseLost, &r)
                } else if let Some(f) = store.frozen(&key, &ctx.now())? {
                    // A freeze drains a key: the holder keeps it until its lease ends,
                    // but cannot extend it while the freeze lasts.
                    Ok(KeyResult {
                        frozen: Some(f),
                        ..KeyResult::new(key, Outcome::Frozen, Some(&r))
                    })
                } else {
                    let renewed = self.renew(r)?;
                    row(Outcome::Renewed, &renewed)
                }
            }
            Slot::Held(r) if let Some(reason) = self.judge.reap_reason(&r)? => {
                auto_release(ctx, store, guard, &r, Some(me), reason)?;
                Ok(KeyResult::new(key, Outcome::NoSuchCheckout, None))
            }
            Slot::Held(r) => row(Outcome::NotHolder, &r),
        }
    }

    /// The caller's live lease, renewed and audited.
    fn renew(&self, r: Record) -> Result<Record> {
        let Scope { ctx, store, guard } = self.scope;
        let now = ctx.now();
        // Without --timeout the lease keeps its own length, as a heartbeat renews it: a
        // renewal never shortens a lease by surprise. A clock far behind (a VM resumed,
        // a bad NTP step) never moves the lease backwards: never before the grant, and a
        // plain renewal never before the current end.
        let expires_at = match self.timeout {
            Some(t) => now + to_chrono(t),
            None => (now + (r.expires_at - r.renewed_at)).max(r.expires_at),
        }
        .max(r.acquired_at);
        let renewed = Record {
            renewed_at: now.max(r.acquired_at),
            expires_at,
            ..r
        };
        store.replace(guard, &renewed)?;
        crate::warnings::after_change(
            &format!(
                "`{}` was renewed, but the audit log was not written",
                renewed.key
            ),
            store.audit(guard, &ctx.event(Event::Renew, &renewed)),
        );
        Ok(renewed)
    }
}

/// `renew KEY…` / `renew --all`.
pub fn execute(ctx: &Ctx, a: crate::cli::RenewArgs) -> Result<Report> {
    run(ctx, a.keys, a.all, a.timeout)
}

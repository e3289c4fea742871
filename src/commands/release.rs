use std::io::IsTerminal;

use super::checkout::check_text;
use crate::engine::{Ctx, Judge, ReapReason, auto_release, held_keys, queue};
use crate::engine::{Scope, holder_refused};
use crate::error::{Error, Outcome, Result};
use crate::report::{KeyResult, KeysCommand, KeysReport, Report};
use crate::store::{AuditEvent, EndHow, Event, Record, Slot, Store};
use crate::warnings::after_change;

/// `done`: the work on each key released is finished: it leaves the project's backlog
/// (without it, a key claimed with `checkout --next` goes back there).
pub fn run(
    ctx: &Ctx,
    keys: Vec<String>,
    all: bool,
    force: bool,
    done: bool,
    note: Option<String>,
) -> Result<Report> {
    let keys = crate::key::validate_all(keys)?;
    if let Some(n) = &note {
        check_text("note", n)?;
    }
    let me = ctx.agent_id()?;
    let report = |results: Vec<KeyResult>| {
        // After the store's scope: git runs only for checkouts that had a worktree.
        let worktrees = super::worktrees::after_release(&results);
        Ok(Report::Keys(KeysReport {
            command: KeysCommand::Release,
            now: ctx.now(),
            all,
            results,
            note: note.clone(),
            worktrees,
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        let none = |key| KeyResult::new(key, Outcome::NoSuchCheckout, None);
        return report(keys.into_iter().map(none).collect());
    };
    // Found before taking the guard (a scan); each key is re-read under it. `--all`
    // also leaves every queue the agent waits in.
    let keys = if all {
        let mut keys = held_keys(&*store, &me)?;
        for k in queue::queued_keys(&*store, &me)? {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    } else {
        keys
    };
    // Anyone may end a checkout whose holder is gone.
    let forcer = if force { forcer(ctx)? } else { None };
    // Named in the audit of a force: read before the guard (it reads /etc/passwd).
    let user = force.then(|| crate::identity::UnixUser::current().name);
    // Each key alone, beside changes to other keys; escalated to the project's lock
    // when a release hands a key on or a force tells its holder.
    let locks = crate::engine::key_locks(&keys, &me);
    let results = crate::engine::transaction_scoped(&*store, &locks, |guard| {
        let mut releasing = Releasing {
            scope: Scope::new(ctx, &*store, guard),
            judge: Judge::new(ctx, &*store),
            me: &me,
            all,
            force,
            done,
            note: &note,
            forcer,
            user: user.as_deref().unwrap_or_default(),
            single: keys.len() == 1,
        };
        keys.clone()
            .into_iter()
            .map(|key| releasing.key(key))
            .collect::<Result<Vec<_>>>()
    })?;
    report(results)
}

/// A release under the scope: the caller, what it asked, and the store's guard.
struct Releasing<'a> {
    scope: Scope<'a>,
    judge: Judge<'a>,
    me: &'a str,
    all: bool,
    force: bool,
    done: bool,
    note: &'a Option<String>,
    /// Who may force a live holder's checkout away, if the caller may.
    forcer: Option<&'static str>,
    /// The Unix user, named in the audit of a force.
    user: &'a str,
    /// One key asked for: a corrupt record is the command's error, not a row.
    single: bool,
}

impl Releasing<'_> {
    /// Release one key, re-read under the guard: its row of the report.
    fn key(&mut self, key: String) -> Result<KeyResult> {
        let (Scope { ctx, store, guard }, me) = (self.scope, self.me);
        let slot = crate::engine::slots::read_mine(store, &key, me)?;
        // `--all` ends what the caller holds and leaves its queues: `--force` there
        // never takes a key from anyone else (nor removes a record it cannot read).
        let force = self.force && (!self.all || matches!(&slot, Slot::Held(r) if r.held_by(me)));
        let standing = match &slot {
            Slot::Held(r) if r.held_by(me) => crate::secret::standing_for(me, r.owner.as_ref()),
            _ => crate::secret::Standing::Unbound,
        };
        // A free key one only waits for (reserved for one, say): releasing it means
        // leaving its queue.
        let left = |key: &str| queue::leave(ctx, store, guard, key, me, "left");
        let held = |outcome, r: &Record| Ok(KeyResult::new(key.clone(), outcome, Some(r)));
        match slot {
            Slot::Free if left(&key)? => Ok(KeyResult::new(key, Outcome::LeftQueue, None)),
            Slot::Free => Ok(KeyResult::new(key, Outcome::NoSuchCheckout, None)),
            Slot::Corrupt { path, problem } if !force => {
                super::corrupt_row(Error::Corrupt { key, path, problem }, self.single)
            }
            Slot::Corrupt { problem, .. } => {
                self.remove_corrupt(&key, &problem)?;
                Ok(KeyResult::new(key, Outcome::ForceReleased, None))
            }
            // A checkout whose process is gone is ended first, whoever asks: it ended
            // before this release, and the work done under it was not protected.
            Slot::Held(r)
                if r.held_by(me)
                    && let Some((ReapReason::AgentDeath, _)) = self.judge.own_end(&r)? =>
            {
                auto_release(ctx, store, guard, &r, Some(me), ReapReason::AgentDeath)?;
                held(Outcome::LeaseLost, &r)
            }
            Slot::Held(r) if standing.refused() && !force => {
                holder_refused(ctx, store, guard, &r, "release")?;
                held(Outcome::SecretRefused, &r)
            }
            Slot::Held(r) if r.held_by(me) && !standing.refused() => {
                if r.expired_for_holder(&ctx.now()) {
                    auto_release(ctx, store, guard, &r, Some(me), ReapReason::Timeout)?;
                    held(Outcome::LeaseLost, &r)
                } else {
                    self.release_own(&r)?;
                    held(Outcome::Released, &r)
                }
            }
            Slot::Held(r)
                if force && self.forcer.is_none() && self.judge.reap_reason(&r)?.is_none() =>
            {
                let problem = self.refuse_force(&r)?;
                Ok(KeyResult {
                    problem: Some(problem),
                    ..KeyResult::new(key, Outcome::NotHolder, Some(&r))
                })
            }
            Slot::Held(r) if force => {
                self.force_release(&r)?;
                held(Outcome::ForceReleased, &r)
            }
            Slot::Held(r) if let Some(reason) = self.judge.reap_reason(&r)? => {
                auto_release(ctx, store, guard, &r, Some(me), reason)?;
                let outcome = if left(&key)? {
                    Outcome::LeftQueue
                } else {
                    Outcome::NoSuchCheckout
                };
                Ok(KeyResult::new(key, outcome, None))
            }
            // Another agent's live checkout: `release KEY` changes nothing (exit 4), so a
            // mistaken release never costs a place in line; `--all` leaves the queue.
            Slot::Held(_) if self.all && left(&key)? => {
                Ok(KeyResult::new(key, Outcome::LeftQueue, None))
            }
            Slot::Held(r) => held(Outcome::NotHolder, &r),
        }
    }

    /// `release --force` of a record that cannot be read: removed, audited.
    fn remove_corrupt(&self, key: &str, problem: &str) -> Result<()> {
        let Scope { store, guard, .. } = self.scope;
        store.remove(guard, key, None, None)?;
        let mut ev = AuditEvent::new(self.scope.ctx.now(), Event::ForceRelease, key, self.me);
        ev.reason = self.note.clone();
        ev.detail = Some(format!("removed corrupt record: {problem}"));
        after_change(
            &format!(
                "the corrupt record of `{key}` was removed, but the audit log was not written"
            ),
            store.audit(guard, &ev),
        );
        Ok(())
    }

    /// The caller's own live checkout: removed (and out of the backlog with `--done`);
    /// what follows is bookkeeping, and its failure a warning.
    fn release_own(&self, r: &Record) -> Result<()> {
        let Scope { ctx, store, guard } = self.scope;
        if self.done {
            // First, so that the release does not give it back.
            store.backlog_remove(guard, std::slice::from_ref(&r.key))?;
        }
        store.remove(guard, &r.key, r.slot, Some(&r.paths))?;
        let released = format!("`{}` was released", r.key);
        let mut ev = ctx.event(Event::Release, r);
        ev.reason = self.note.clone();
        after_change(
            &format!("{released}, but the audit log was not written"),
            store.audit(guard, &ev),
        );
        self.bookkeeping(r, &released, EndHow::Released, None, r.agent.name.clone());
        Ok(())
    }

    /// How the checkout ended, for its next holder; the release's note in the key's
    /// history, written by `name`; its queue handed on. Each failure a warning.
    fn bookkeeping(
        &self,
        r: &Record,
        released: &str,
        how: EndHow,
        by: Option<String>,
        name: Option<String>,
    ) {
        let Scope { ctx, store, guard } = self.scope;
        let note = self.note.clone();
        after_change(
            &format!("{released}, but how it ended was not recorded for its next holder"),
            self.scope.record_end(r, how, None, by, note),
        );
        // A release note is the last checkpoint: the next holder reads it.
        after_change(
            &format!("{released}, but the note was not kept"),
            keep_note(ctx, store, guard, r, self.me, name, self.note),
        );
        if how == EndHow::ForceReleased {
            self.tell_holder(r, released);
        }
        after_change(
            &format!("{released}, but its queue was not updated"),
            queue::after_release(ctx, store, guard, r, None),
        );
    }

    /// `--force` of a live holder's checkout by a caller who may not: audited, refused;
    /// the problem to report.
    fn refuse_force(&self, r: &Record) -> Result<String> {
        let mut ev = self.scope.ctx.event(Event::Refused, r);
        ev.by = Some(self.me.to_string());
        ev.reason = Some("force".into());
        ev.detail = Some(format!(
            "release --force of a live holder's checkout by {}, neither a person at a terminal nor holding the operator secret",
            self.user
        ));
        self.scope.store.audit(self.scope.guard, &ev)?;
        Ok(format!(
            "--force refused: {} is alive and its lease has not run out. Only a person at a terminal or a caller with the operator secret (TASKLOCK_OPERATOR_SECRET) may take a live agent's checkout away.",
            r.agent.label()
        ))
    }

    /// Another's checkout (or one whose holder is gone) taken away: removed, audited, its
    /// holder told.
    fn force_release(&self, r: &Record) -> Result<()> {
        let (Scope { ctx, store, guard }, me) = (self.scope, self.me);
        store.remove(guard, &r.key, r.slot, Some(&r.paths))?;
        let released = format!("`{}` was force-released", r.key);
        let mut ev = ctx.event(Event::ForceRelease, r);
        ev.by = Some(me.to_string());
        ev.reason = self.note.clone();
        ev.detail = Some(format!(
            "by Unix user {}, as {}",
            self.user,
            self.forcer
                .unwrap_or("its holder is gone or its lease ran out")
        ));
        after_change(
            &format!("{released}, but the audit log was not written"),
            store.audit(guard, &ev),
        );
        // Whoever takes the key next reads why it was taken away.
        let name = ctx.agent().ok().and_then(|a| a.name);
        self.bookkeeping(
            r,
            &released,
            EndHow::ForceReleased,
            Some(me.to_string()),
            name,
        );
        Ok(())
    }

    /// Tell the holder of a force-released checkout.
    fn tell_holder(&self, r: &Record, released: &str) {
        let me = self.me;
        let body = match self.note {
            Some(n) => format!("{me} force-released your checkout: {n}"),
            None => format!("{me} force-released your checkout"),
        };
        after_change(
            &format!("{released}, but its holder was not told"),
            self.scope
                .notify(
                    &r.agent.id,
                    Some(me),
                    crate::store::MessageKind::ForceReleased,
                    &r.key,
                    &body,
                )
                .map(drop),
        );
    }
}

/// Who may force what is another's (a live holder's checkout, another's freeze): a
/// person at a terminal, or a caller with the project's operator secret; named so in
/// the audit log.
pub fn forcer(ctx: &Ctx) -> Result<Option<&'static str>> {
    Ok(if std::io::stdin().is_terminal() {
        Some("a person at a terminal")
    } else if crate::secret::is_operator(ctx.config()?.operator_secret_sha256.as_deref()) {
        Some("the operator secret")
    } else {
        None
    })
}

/// Add a release's note to the key's history, written by `by`.
fn keep_note(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &crate::store::Guard,
    r: &crate::store::Record,
    by: &str,
    name: Option<String>,
    note: &Option<String>,
) -> Result<()> {
    let Some(text) = note else { return Ok(()) };
    let n = crate::store::Note {
        ts: ctx.now(),
        agent: by.to_string(),
        name,
        token: Some(r.token),
        text: text.clone(),
    };
    store.append_note(guard, &r.key, &n)
}

/// `leave KEY…` / `leave --all`: out of the queues of keys one waits for; a reservation
/// held for the caller passes to the next waiter that can take the key.
pub fn leave(ctx: &Ctx, keys: Vec<String>, all: bool) -> Result<Report> {
    let keys = crate::key::validate_all(keys)?;
    let me = ctx.agent_id()?;
    let results = match ctx.existing_store()? {
        None => keys
            .into_iter()
            .map(|key| (key, Outcome::NotQueued))
            .collect(),
        Some(store) => {
            // Found before taking the guard (a scan); each queue is re-read under it.
            let keys = if all {
                queue::queued_keys(&*store, &me)?
            } else {
                keys
            };
            store.transaction(|g| {
                let mut out = Vec::with_capacity(keys.len());
                for key in &keys {
                    let outcome = if queue::leave(ctx, &*store, g, key, &me, "left")? {
                        Outcome::LeftQueue
                    } else {
                        Outcome::NotQueued
                    };
                    out.push((key.clone(), outcome));
                }
                Ok(out)
            })?
        }
    };
    Ok(Report::Keys(KeysReport {
        command: KeysCommand::Leave,
        now: ctx.now(),
        all,
        results: results
            .into_iter()
            .map(|(key, outcome)| KeyResult {
                key,
                outcome,
                checkout: None,
                frozen: None,
                problem: None,
            })
            .collect(),
        note: None,
        worktrees: Vec::new(),
    }))
}

/// `release KEY…` / `release --all`.
pub fn execute(ctx: &Ctx, a: crate::cli::ReleaseArgs) -> Result<Report> {
    run(ctx, a.keys, a.all, a.force, a.done, a.note)
}

/// `leave KEY…` / `leave --all`.
pub fn execute_leave(ctx: &Ctx, a: crate::cli::LeaveArgs) -> Result<Report> {
    leave(ctx, a.keys, a.all)
}

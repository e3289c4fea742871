use std::time::Duration;

use super::checkout::check_text;
use crate::duration::to_chrono;
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::report::{FreezeReport, Report};
use crate::store::{AuditEvent, Event, Freeze, Guard, Store};

/// The key part of a pattern: a key, or a prefix followed by `*`.
fn validate_pattern(pattern: &str) -> Result<()> {
    match pattern.strip_suffix('*') {
        Some("") => Err(Error::Usage(
            "a freeze pattern needs a prefix before `*` (freezing every key is not supported)"
                .into(),
        )),
        Some(prefix) => crate::key::validate(prefix),
        None => crate::key::validate(pattern),
    }
}

pub fn freeze(ctx: &Ctx, pattern: &str, for_: Duration, reason: Option<String>) -> Result<Report> {
    validate_pattern(pattern)?;
    if let Some(r) = &reason {
        check_text("reason", r)?;
    }
    let agent = ctx.agent()?;
    // Bound to the caller's secret, as a checkout is: only it ends the freeze early as
    // its maker.
    let owner = crate::secret::caller()
        .as_deref()
        .map(crate::secret::Proof::of)
        .transpose()?
        .map(Box::new);
    let store = ctx.open_store()?;
    let f = Freeze {
        version: 1,
        pattern: pattern.to_string(),
        by: agent.id.clone(),
        name: agent.name.clone(),
        reason,
        since: ctx.now(),
        until: ctx.now() + to_chrono(for_),
        owner,
    };
    let forcer = forcer_unless_maker(ctx, &*store, pattern, &agent.id)?;
    // Named in the audit of a refusal: read before the guard (it reads /etc/passwd).
    let user = crate::identity::UnixUser::current().name;
    let covered: Vec<crate::engine::Checkout> = store
        .scan()?
        .into_iter()
        .filter_map(|slot| match slot {
            crate::store::Slot::Held(r) if f.covers(&r.key) => Some(r.id()),
            _ => None,
        })
        .collect();
    let guard = store.lock()?;
    // A freeze set again replaces the one on the same pattern: that ends it early, so
    // only those who may end it may replace it.
    let standing = store.freezes()?.into_iter().find(|s| s.pattern == pattern);
    if let Some(s) = standing
        && let May::Not(why) = may_unfreeze(ctx, &agent.id, &s, forcer)
    {
        refuse(ctx, &*store, &guard, &s, (&agent.id, &user), why, "freeze")?;
        store.commit(guard)?;
        return Ok(refused(ctx, "freeze", s, why));
    }
    store.write_freeze(&guard, &f)?;
    store.audit(&guard, &event(ctx, Event::Freeze, &f))?;
    // Tell the other agents whose checkouts it covers: their leases are no longer renewed.
    // The keys are found before the lock (a scan of every record), each judged again
    // under it; a key first checked out in between was taken before the freeze stood,
    // and its holder learns of it from `heartbeat`'s `frozen` list instead.
    for (key, slot) in covered {
        let crate::store::Slot::Held(r) = crate::engine::slots::read_at(&*store, &key, slot)?
        else {
            continue;
        };
        if r.held_by(&agent.id) {
            continue;
        }
        let body = format!(
            "{} froze `{}` until {}{}: your checkout of `{}` stays yours, but its lease is not renewed while it is frozen and ends at {} unless the freeze is lifted",
            agent.id,
            f.pattern,
            crate::clock::rfc3339(&f.until),
            f.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            r.key,
            crate::clock::rfc3339(&r.expires_at),
        );
        crate::warnings::after_change(
            &format!("`{}` was frozen, but its holder was not told", r.key),
            crate::engine::queue::notify(
                ctx,
                &*store,
                &guard,
                &r.agent.id,
                Some(&agent.id),
                crate::store::MessageKind::Frozen,
                &r.key,
                &body,
            )
            .map(drop),
        );
    }
    store.commit(guard)?;
    Ok(Report::Freeze(FreezeReport {
        command: "freeze",
        now: ctx.now(),
        pattern: pattern.to_string(),
        frozen: true,
        freeze: Some(f),
        covered_by: None,
        refused: None,
    }))
}

/// Who may end a freeze early: its maker (with the secret it was set with, if any), a
/// person at a terminal, or a caller with the operator secret (as for `release --force`).
/// A freeze that has run out ends nothing more: anyone may remove it.
enum May {
    Maker,
    /// Someone else, and as what (named in the audit).
    Forcer(&'static str),
    /// Refused, and why (`not_owner`, `no_secret`, `wrong_secret`).
    Not(&'static str),
}

fn may_unfreeze(ctx: &Ctx, me: &str, f: &Freeze, forcer: Option<&'static str>) -> May {
    let standing = crate::secret::standing_for(&f.by, f.owner.as_deref());
    if (f.by == me && !standing.refused()) || !f.active(&ctx.now()) {
        return May::Maker;
    }
    match forcer {
        Some(as_) => May::Forcer(as_),
        None if f.by == me => May::Not(standing.as_str()),
        None => May::Not("not_owner"),
    }
}

/// Who else may end a freeze on `pattern` (a person at a terminal, the operator), read
/// before the guard as for `release --force` (a terminal, config.yaml), and only when
/// the freeze there is not the caller's own.
fn forcer_unless_maker(
    ctx: &Ctx,
    store: &dyn Store,
    pattern: &str,
    me: &str,
) -> Result<Option<&'static str>> {
    let maker = store
        .freezes()?
        .iter()
        .any(|f| f.pattern == pattern && f.by == me);
    if maker {
        return Ok(None);
    }
    crate::commands::release::forcer(ctx)
}

/// `command` (`freeze` replacing it, `unfreeze`) may not end the freeze `f`: audited as
/// `refused`, with `by` the caller.
fn refuse(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    f: &Freeze,
    (me, user): (&str, &str),
    why: &str,
    command: &str,
) -> Result<()> {
    let mut ev = event(ctx, Event::Refused, f);
    ev.by = Some(me.to_string());
    ev.reason = Some(why.into());
    ev.detail = Some(if f.by == me {
        format!("{command} as the freeze's maker without its secret, by Unix user {user}")
    } else {
        format!(
            "{command} of a freeze set by {} by Unix user {user}, neither its maker nor a person at a terminal nor holding the operator secret",
            f.by
        )
    });
    store.audit(guard, &ev)
}

/// The report of a refused `freeze` or `unfreeze`: the freeze stands.
fn refused(ctx: &Ctx, command: &'static str, f: Freeze, why: &'static str) -> Report {
    Report::Freeze(FreezeReport {
        command,
        now: ctx.now(),
        pattern: f.pattern.clone(),
        frozen: true,
        freeze: Some(f),
        covered_by: None,
        refused: Some(why),
    })
}

pub fn unfreeze(ctx: &Ctx, pattern: &str) -> Result<Report> {
    validate_pattern(pattern)?;
    let agent = ctx.agent()?;
    let mut covered_by = None;
    let freeze = match ctx.existing_store()? {
        Some(store) => {
            let forcer = forcer_unless_maker(ctx, &*store, pattern, &agent.id)?;
            // Named in the audit: read before the guard (it reads /etc/passwd).
            let user = crate::identity::UnixUser::current().name;
            let guard = store.lock()?;
            let standing = store.freezes()?.into_iter().find(|f| f.pattern == pattern);
            let may = standing
                .as_ref()
                .map(|f| may_unfreeze(ctx, &agent.id, f, forcer));
            let freeze = match (standing, may) {
                (Some(f), Some(May::Not(why))) => {
                    refuse(
                        ctx,
                        &*store,
                        &guard,
                        &f,
                        (&agent.id, &user),
                        why,
                        "unfreeze",
                    )?;
                    store.commit(guard)?;
                    return Ok(refused(ctx, "unfreeze", f, why));
                }
                (Some(_), may) => {
                    let removed = store.remove_freeze(&guard, pattern)?;
                    if let Some(f) = &removed {
                        let mut ev = event(ctx, Event::Unfreeze, f);
                        ev.agent = agent.id.clone();
                        ev.name = agent.name.clone();
                        ev.by = Some(f.by.clone()).filter(|b| *b != agent.id);
                        if let Some(May::Forcer(as_)) = may {
                            ev.detail = Some(format!(
                                "until {}; ended early by Unix user {user}, as {as_}",
                                crate::clock::rfc3339(&f.until)
                            ));
                        }
                        store.audit(&guard, &ev)?;
                    }
                    removed
                }
                (None, _) => {
                    covered_by = store.frozen(pattern, &ctx.now())?;
                    None
                }
            };
            store.commit(guard)?;
            freeze
        }
        None => None,
    };
    Ok(Report::Freeze(FreezeReport {
        command: "unfreeze",
        now: ctx.now(),
        pattern: pattern.to_string(),
        frozen: false,
        freeze,
        covered_by,
        refused: None,
    }))
}

fn event(ctx: &Ctx, name: Event, f: &Freeze) -> AuditEvent {
    let mut ev = AuditEvent::new(ctx.now(), name, &f.pattern, &f.by);
    ev.name = f.name.clone();
    ev.reason = f.reason.clone();
    ev.detail = Some(format!("until {}", crate::clock::rfc3339(&f.until)));
    ev
}

/// `freeze KEY --for DUR`.
pub fn execute(ctx: &Ctx, a: crate::cli::FreezeArgs) -> Result<Report> {
    freeze(ctx, &a.key, a.for_, a.reason)
}

/// `unfreeze KEY`.
pub fn execute_unfreeze(ctx: &Ctx, a: crate::cli::UnfreezeArgs) -> Result<Report> {
    unfreeze(ctx, &a.key)
}

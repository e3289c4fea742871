use std::time::Duration;

use super::{Ctx, Judge, NOTES_SHOWN, ReapReason, auto_release};
use crate::duration::to_chrono;
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutReport, CheckoutView, Reaped, Report};
use crate::store::{FORMAT_VERSION, FileStore, Record, Slot};

pub fn run(
    ctx: &Ctx,
    key: &str,
    timeout: Option<Duration>,
    reason: Option<String>,
) -> Result<Report> {
    run_as(ctx, key, timeout, reason, None)
}

/// Check out KEY. `pid` names a process whose death ends this checkout at once (used by
/// `run`); without it the agent's registered process, if any, is recorded.
pub fn run_as(
    ctx: &Ctx,
    key: &str,
    timeout: Option<Duration>,
    reason: Option<String>,
    pid: Option<u32>,
) -> Result<Report> {
    crate::key::validate(key)?;
    let mut agent = ctx.agent()?;
    let lease = match timeout {
        Some(t) => t,
        None => ctx.config()?.lease,
    };
    if let Some(r) = &reason {
        check_text("reason", r)?;
    }
    let store = FileStore::open_or_create(&ctx.dir)?;
    let mut guard = store.lock()?;
    let now = ctx.now;
    if let Some(mut entry) = store.read_agent(&agent.id)? {
        if entry.ended_at.is_some() {
            // An agent that ended and is back (same id) is alive again; the process it
            // had is gone, so forget it until it registers a new one.
            entry.ended_at = None;
            entry.ended_reason = None;
            entry.pid = None;
            entry.pid_start = None;
            store.write_agent(&guard, &entry)?;
        }
        if entry.host == agent.host && entry.boot_id == agent.boot_id {
            agent.pid = entry.pid;
            agent.pid_start = entry.pid_start;
        }
    }
    if let Some(pid) = pid {
        agent.pid = Some(pid);
        agent.pid_start = crate::liveness::start_time(pid);
    }
    let expires_at = now + to_chrono(lease);
    let mut took_over = None;

    match store.read(key)? {
        Slot::Corrupt { path, problem } => {
            return Err(Error::Corrupt {
                key: key.to_string(),
                path,
                problem,
            });
        }
        Slot::Held(current) if current.held_by(&agent.id) && !current.expired_for_holder(&now) => {
            // The holder checking out again renews the same checkout (same token).
            let renewed = Record {
                renewed_at: now,
                expires_at,
                reason: reason.or(current.reason.clone()),
                agent: current.agent.refreshed(&agent),
                ..current
            };
            store.replace(&guard, &renewed)?;
            store.audit(&guard, &ctx.event("renew", &renewed))?;
            return Ok(Report::Checkout(CheckoutReport {
                command: "checkout",
                now,
                key: key.to_string(),
                outcome: Outcome::Renewed,
                checkout: CheckoutView::from(&renewed),
                took_over: None,
                queue_length: 0,
            }));
        }
        Slot::Held(current) => {
            // Our own lease ran out (never revived: a new token follows), or another
            // agent's lease is past its end plus the skew margin, or its holder is dead.
            let ended = if current.held_by(&agent.id) {
                Some((ReapReason::Timeout, None))
            } else {
                Judge::new(ctx, &store).reap_cause(&current)?
            };
            match ended {
                Some((reason, cause)) => {
                    auto_release(ctx, &store, &guard, &current, Some(&agent.id), reason)?;
                    let notes = store.last_notes(key, NOTES_SHOWN)?;
                    took_over = Some(Reaped::new(&current, reason, cause, notes));
                }
                None => {
                    let mut ev = ctx.event("deny", &current);
                    ev.agent = agent.id.clone();
                    ev.name = agent.name.clone();
                    ev.token = None;
                    ev.holder = Some(current.agent.id.clone());
                    store.audit(&guard, &ev)?;
                    return Ok(Report::Checkout(CheckoutReport {
                        command: "checkout",
                        now,
                        key: key.to_string(),
                        outcome: Outcome::Conflict,
                        checkout: CheckoutView::from(&current),
                        took_over: None,
                        queue_length: 0,
                    }));
                }
            }
        }
        Slot::Free => {}
    }

    let token = store.next_token(&mut guard)?;
    let record = Record {
        version: FORMAT_VERSION,
        key: key.to_string(),
        token,
        agent,
        acquired_at: now,
        renewed_at: now,
        expires_at,
        reason,
    };
    store.insert(&guard, &record)?;
    let mut ev = ctx.event("acquire", &record);
    ev.reason = record.reason.clone();
    store.audit(&guard, &ev)?;
    drop(guard);
    Ok(Report::Checkout(CheckoutReport {
        command: "checkout",
        now,
        key: key.to_string(),
        outcome: Outcome::Granted,
        checkout: CheckoutView::from(&record),
        took_over,
        queue_length: 0,
    }))
}

/// Free text stored in records and shown in tables: bounded, no control characters
/// except that newlines are not allowed either (they would break one-line outputs).
pub fn check_text(what: &str, s: &str) -> Result<()> {
    if s.len() > 4096 {
        return Err(Error::Usage(format!("{what} is longer than 4096 bytes")));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::Usage(format!(
            "{what} must be one line without control characters"
        )));
    }
    Ok(())
}

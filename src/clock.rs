//! "Now", overridable with `TASKLOCK_NOW` (RFC 3339) so tests and snapshots are deterministic.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

use crate::error::{Error, Result};

pub type Time = DateTime<Utc>;

/// How far the store's clock is ahead of ours (PostgreSQL: the server's), once known.
static OFFSET: std::sync::Mutex<Option<chrono::Duration>> = std::sync::Mutex::new(None);

/// How a store that will tell its clock (with its first exchange) is asked for it now,
/// when "now" is wanted before that exchange; taken by the first [`now`] after it is set.
static PENDING: std::sync::Mutex<Option<fn()>> = std::sync::Mutex::new(None);

/// Judge time by another clock from now on: `now()` becomes this machine's time plus
/// `offset` (a PostgreSQL store sets it from the server's clock, so every host sharing the
/// server judges leases by one clock). `TASKLOCK_NOW` still wins.
pub fn set_offset(offset: chrono::Duration) {
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = None;
    *OFFSET.lock().unwrap_or_else(|e| e.into_inner()) = Some(offset);
}

/// A store's clock will be told by its first exchange ([`set_offset`]); a [`now`] asked
/// before that calls `ask`, which tells it (or leaves this machine's time, when it cannot).
pub fn set_pending(ask: fn()) {
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some(ask);
}

/// The offset set by [`set_offset`], if any.
pub fn offset() -> Option<chrono::Duration> {
    *OFFSET.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn now() -> Result<Time> {
    // Asked even under `TASKLOCK_NOW`, so that the store's exchanges are the same in tests.
    let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(ask) = pending {
        ask();
    }
    match std::env::var("TASKLOCK_NOW") {
        Ok(s) if !s.is_empty() => DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| Error::Usage(format!("TASKLOCK_NOW={s:?} is not an RFC 3339 time: {e}"))),
        // Milliseconds are plenty for leases and keep stored times readable.
        _ => {
            let local = DateTime::<Utc>::from(std::time::SystemTime::now());
            Ok((local + offset().unwrap_or_default()).trunc_subsecs(3))
        }
    }
}

/// RFC 3339 UTC, whole seconds: what people read.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// "in 22m", "3m ago", "now".
pub fn relative(t: &Time, now: &Time) -> String {
    let secs = (*t - *now).num_seconds();
    let span = crate::duration::humanize(secs.unsigned_abs());
    if secs.abs() < 1 {
        "now".to_string()
    } else if secs > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// "2026-11-23T08:00:00Z (in 22m)".
pub fn with_relative(t: &Time, now: &Time) -> String {
    format!("{} ({})", rfc3339(t), relative(t, now))
}

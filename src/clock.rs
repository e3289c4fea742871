//! "Now", overridable with `TASKLOCK_NOW` (RFC 3339) so tests and snapshots are deterministic.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

use crate::error::{Error, Result};

pub type Time = DateTime<Utc>;

pub fn now() -> Result<Time> {
    match std::env::var("TASKLOCK_NOW") {
        Ok(s) if !s.is_empty() => DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| Error::Usage(format!("TASKLOCK_NOW={s:?} is not an RFC 3339 time: {e}"))),
        // Milliseconds are plenty for leases and keep stored times readable.
        _ => Ok(DateTime::<Utc>::from(std::time::SystemTime::now()).trunc_subsecs(3)),
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

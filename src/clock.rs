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

/// Reading a stored time, as `#[serde(deserialize_with = "crate::clock::stored")]`: the
/// form tasklock writes (`2026-12-07T15:09:52.528Z`: UTC, `T`, `Z`, up to nine digits of
/// fraction) is read digit by digit; anything else goes to chrono's RFC 3339 parser, as
/// without it. Chrono's general parser was a third of reading a record (`list`, the views
/// and the sweeps read thousands).
pub fn stored<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Time, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = Time;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an RFC 3339 date and time")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Time, E> {
            match canonical(s) {
                Some(t) => Ok(t),
                None => s
                    .parse::<DateTime<chrono::FixedOffset>>()
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(E::custom),
            }
        }
    }
    d.deserialize_str(Visitor)
}

/// `YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z`, or `None` for any other form (chrono's to judge).
fn canonical(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    let (head, frac) = (b.get(..19)?, b.get(19..b.len().checked_sub(1)?)?);
    if b.last() != Some(&b'Z')
        || [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')]
            .iter()
            .any(|&(i, c)| head[i] != c)
    {
        return None;
    }
    let num = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let nanos = match frac {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            num(digits)? * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let date = chrono::NaiveDate::from_ymd_opt(
        num(&head[0..4])? as i32,
        num(&head[5..7])?,
        num(&head[8..10])?,
    )?;
    let time = chrono::NaiveTime::from_hms_nano_opt(
        num(&head[11..13])?,
        num(&head[14..16])?,
        num(&head[17..19])?,
        nanos,
    )?;
    Some(date.and_time(time).and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrono_reads(s: &str) -> Option<Time> {
        s.parse::<DateTime<chrono::FixedOffset>>()
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// `s` as a JSON string read by [`stored`].
    fn read_stored(s: &str) -> Option<Time> {
        let json = serde_json::to_string(s).unwrap();
        stored(&mut serde_json::Deserializer::from_str(&json)).ok()
    }

    #[test]
    fn the_written_form_is_read_as_chrono_reads_it() {
        let start = DateTime::parse_from_rfc3339("1970-01-01T00:00:00Z").unwrap();
        // Every 7,777,777.123 s from 1970 to past 2400: leap years, month ends, fractions.
        for i in 0..1800i64 {
            let t = (start + chrono::Duration::milliseconds(i * 7_777_777_123)).with_timezone(&Utc);
            for f in [
                SecondsFormat::Secs,
                SecondsFormat::Millis,
                SecondsFormat::Micros,
                SecondsFormat::Nanos,
            ] {
                let s = t.to_rfc3339_opts(f, true);
                assert_eq!(canonical(&s), chrono_reads(&s), "{s}");
                assert!(canonical(&s).is_some(), "{s}");
            }
        }
    }

    #[test]
    fn other_forms_are_left_to_chrono_and_bad_ones_fail() {
        for s in [
            "2026-12-07T15:09:52.528+00:00",
            "2026-12-07T16:09:52+01:00",
            "2026-12-07 15:09:52Z",
            "2026-12-07t15:09:52z",
            "2026-12-07T15:09:52.1234567891Z",
            "2016-12-31T23:59:60Z",
            "+2026-12-07T15:09:52Z",
        ] {
            assert_eq!(canonical(s), None, "{s}");
            assert_eq!(read_stored(s), chrono_reads(s), "{s}");
        }
        for s in [
            "",
            "Z",
            "2026-02-30T00:00:00Z",
            "2026-12-07T24:00:00Z",
            "2026-12-07T15:09:52.Z",
            "2026-12-07T15:09:5xZ",
            "2026-12-07T15:09:52",
        ] {
            assert_eq!(canonical(s), None, "{s}");
            assert_eq!(read_stored(s), None, "{s}");
        }
    }
}

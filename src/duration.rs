//! Durations as people write them: `90s`, `30m`, `2h`, `1h30m`, `1d`, `500ms`.

use std::time::Duration;

/// Parse a duration. Every number needs a unit, and the total must be positive.
pub fn parse(input: &str) -> Result<Duration, String> {
    parse_with(input, false)
}

/// As [`parse`], where zero (`0`, `0s`, `0m`, …) is allowed too: for a setting where it
/// means "every time".
pub fn parse_or_zero(input: &str) -> Result<Duration, String> {
    if input.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_with(input, true)
}

fn parse_with(input: &str, allow_zero: bool) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; write it like 90s, 30m, 2h or 1h30m".into());
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(format!(
                "invalid duration {input:?}: expected a number at {:?}; write it like 90s, 30m, 2h or 1h30m",
                &s[start..]
            ));
        }
        let number: u128 = s[start..i]
            .parse()
            .map_err(|_| format!("invalid duration {input:?}: number too large"))?;
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit_ms: u128 = match &s[ustart..i] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(format!(
                    "invalid duration {input:?}: {number} needs a unit (ms, s, m, h or d), as in {number}m"
                ));
            }
            other => {
                return Err(format!(
                    "invalid duration {input:?}: unknown unit {other:?}; use ms, s, m, h or d"
                ));
            }
        };
        total = total
            .checked_add(number.saturating_mul(unit_ms))
            .ok_or_else(|| format!("invalid duration {input:?}: too large"))?;
    }
    if total == 0 && !allow_zero {
        return Err(format!(
            "invalid duration {input:?}: must be longer than zero"
        ));
    }
    // Ten years is far beyond any sensible lease, and keeps date arithmetic in range.
    if total > 10 * 366 * 86_400_000 {
        return Err(format!("invalid duration {input:?}: longer than ten years"));
    }
    Ok(Duration::from_millis(total as u64))
}

/// A compact human form: "45s", "22m", "1h30m", "2d3h".
pub fn humanize(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    }
}

/// How a configured duration is written back for people: "30m", "1h30m", "500ms".
pub fn format(d: Duration) -> String {
    if d.subsec_millis() != 0 && d.as_secs() == 0 {
        return format!("{}ms", d.as_millis());
    }
    humanize(d.as_secs())
}

pub fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::milliseconds(d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "",
            "10",
            "0s",
            "0m0s",
            "m",
            "1x",
            "-5m",
            "1.5h",
            "1h 30m",
            "99999999999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn humanizes() {
        assert_eq!(humanize(0), "0s");
        assert_eq!(humanize(59), "59s");
        assert_eq!(humanize(60 * 22 + 5), "22m");
        assert_eq!(humanize(5400), "1h30m");
        assert_eq!(humanize(7200), "2h");
        assert_eq!(humanize(86_400 * 2 + 3600 * 3), "2d3h");
    }
}

//! Output for a person at a terminal (`--format table`, the default there when no agent
//! runs the command): tables fitted to the terminal's width, times local and relative,
//! what every row shares said once above the table, one or two lines where a command
//! succeeded. A printer over the same reports as the markdown one; the reports it has
//! no table for are printed as their markdown, with times made local.

use std::fmt::Write;

use chrono::{DateTime, Datelike, FixedOffset, Utc};

use super::{Invocation, Screen, markdown};
use crate::clock::{Time, relative};
use crate::report::Report;

mod reports;

pub fn report(r: &Report, inv: &Invocation, screen: &Screen) -> String {
    let t = Printer {
        screen,
        now: r.now(),
    };
    let table = match r {
        Report::List(r) => reports::list(r, &t),
        Report::Status(r) => reports::status(r, &t),
        Report::Agents(r) => reports::agents(r, &t),
        Report::Checkout(r) => reports::checkout(r, inv, &t),
        Report::Keys(r) => reports::keys(r, &t),
        Report::Inbox(r) => reports::inbox(r, &t),
        Report::Backlog(r) => reports::backlog(r, &t),
        _ => None,
    };
    table.unwrap_or_else(|| t.localize(&markdown::report(r, inv)))
}

/// The screen and the report's time, which every time is told relative to.
pub(super) struct Printer<'a> {
    screen: &'a Screen,
    pub now: Time,
}

impl Printer<'_> {
    fn zone(&self) -> FixedOffset {
        FixedOffset::east_opt(self.screen.utc_offset)
            .unwrap_or_else(|| FixedOffset::east_opt(0).expect("UTC"))
    }

    /// "14:05" today, "Jan 3 14:05" this year, "2025-12-30 14:05" before: local time.
    pub fn local(&self, t: &Time) -> String {
        let (lt, ln) = (
            t.with_timezone(&self.zone()),
            self.now.with_timezone(&self.zone()),
        );
        let form = if lt.date_naive() == ln.date_naive() {
            "%H:%M"
        } else if lt.year() == ln.year() {
            "%b %-d %H:%M"
        } else {
            "%Y-%m-%d %H:%M"
        };
        lt.format(form).to_string()
    }

    /// "3m ago", "in 27m".
    pub fn ago(&self, t: &Time) -> String {
        relative(t, &self.now)
    }

    /// "14:30 (in 27m)".
    pub fn when(&self, t: &Time) -> String {
        format!("{} ({})", self.local(t), self.ago(t))
    }

    /// `text` with each RFC 3339 UTC time (as the markdown writes them) in local time.
    pub fn localize(&self, text: &str) -> String {
        const LEN: usize = "2026-01-01T00:00:00Z".len();
        let b = text.as_bytes();
        let (mut out, mut i, mut last) = (String::with_capacity(text.len()), 0, 0);
        while i + LEN <= b.len() {
            // Only ASCII matches, so both ends are on character boundaries.
            if is_stamp(&b[i..i + LEN])
                && let Ok(t) = DateTime::parse_from_rfc3339(&text[i..i + LEN])
            {
                out.push_str(&text[last..i]);
                out.push_str(&self.local(&t.with_timezone(&Utc)));
                i += LEN;
                last = i;
            } else {
                i += 1;
            }
        }
        out.push_str(&text[last..]);
        out
    }

    pub fn width(&self) -> usize {
        self.screen.width
    }
}

/// `2026-01-01T00:00:00Z`, by its shape.
fn is_stamp(w: &[u8]) -> bool {
    w.iter().enumerate().all(|(j, &c)| match j {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        19 => c == b'Z',
        _ => c.is_ascii_digit(),
    })
}

/// How a column gives way when the table is wider than the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// Never cut (keys, agents, times).
    Keep,
    /// Free text: the widest such column is cut first, ending in `…`.
    Cut,
}

/// Columns of text, aligned, fitted to a width.
pub(super) struct Table {
    heads: Vec<(&'static str, Fit)>,
    rows: Vec<Vec<String>>,
}

/// The gap between two columns.
const GAP: usize = 2;
/// A cut column keeps at least this many characters (or its heading's).
const MIN_CUT: usize = 8;

impl Table {
    pub fn new(heads: &[(&'static str, Fit)]) -> Table {
        Table {
            heads: heads.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// One row, a cell per column; control characters are shown as their code points and
    /// line breaks as spaces.
    pub fn row(&mut self, cells: Vec<String>) {
        let cells = cells
            .into_iter()
            .map(|c| markdown::visible(&c.replace(['\n', '\r'], " ")).into_owned())
            .collect();
        self.rows.push(cells);
    }

    /// The columns named that have one value on every row, taken out of the table and
    /// returned as "heading value", to be said once above it.
    pub fn said_once(&mut self, names: &[&str]) -> Vec<String> {
        let mut said = Vec::new();
        if self.rows.is_empty() {
            return said;
        }
        for name in names {
            let Some(i) = self.heads.iter().position(|(h, _)| h == name) else {
                continue;
            };
            let first = &self.rows[0][i];
            if first.is_empty() || self.rows.iter().any(|r| &r[i] != first) {
                continue;
            }
            said.push(format!("{} {first}", name.to_lowercase()));
            self.heads.remove(i);
            for r in &mut self.rows {
                r.remove(i);
            }
        }
        said
    }

    /// The table in `width` columns: empty columns left out, the widest cuttable column
    /// narrowed first.
    pub fn render(&self, width: usize) -> String {
        let keep: Vec<usize> = (0..self.heads.len())
            .filter(|&i| self.rows.iter().any(|r| !r[i].is_empty()))
            .collect();
        let len = |s: &str| s.chars().count();
        let mut w: Vec<usize> = keep
            .iter()
            .map(|&i| {
                let cells = self.rows.iter().map(|r| len(&r[i]));
                cells.chain([len(self.heads[i].0)]).max().unwrap_or(0)
            })
            .collect();
        let floor = |j: usize| len(self.heads[keep[j]].0).max(MIN_CUT).min(w[j]);
        let floors: Vec<usize> = (0..keep.len()).map(floor).collect();
        let total = |w: &[usize]| w.iter().sum::<usize>() + GAP * w.len().saturating_sub(1);
        while total(&w) > width {
            let widest = (0..keep.len())
                .filter(|&j| self.heads[keep[j]].1 == Fit::Cut && w[j] > floors[j])
                .max_by_key(|&j| (w[j], std::cmp::Reverse(j)));
            let Some(j) = widest else { break };
            w[j] -= total(&w).saturating_sub(width).min(w[j] - floors[j]).max(1);
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: Vec<String>| {
            let mut s = String::new();
            for (j, c) in cells.iter().enumerate() {
                let _ = write!(s, "{:<w$}", cut(c, w[j]), w = w[j]);
                s.push_str(&" ".repeat(GAP));
            }
            let _ = writeln!(out, "{}", s.trim_end());
        };
        line(
            &mut out,
            keep.iter()
                .map(|&i| self.heads[i].0.to_uppercase())
                .collect(),
        );
        for r in &self.rows {
            line(&mut out, keep.iter().map(|&i| r[i].clone()).collect());
        }
        out
    }
}

/// `s` in at most `w` characters, ending in `…` when cut.
fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
    t.push('…');
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_widest_free_text_is_cut_and_keys_never() {
        let mut t = Table::new(&[
            ("Key", Fit::Keep),
            ("Holder", Fit::Keep),
            ("Reason", Fit::Cut),
        ]);
        t.row(vec![
            "a-long-key-name".into(),
            "agent-1".into(),
            "x".repeat(80),
        ]);
        t.row(vec!["k".into(), "agent-1".into(), String::new()]);
        let said = t.said_once(&["Holder"]);
        assert_eq!(said, ["holder agent-1"]);
        let out = t.render(40);
        assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
        assert!(out.contains("a-long-key-name"), "{out}");
        assert!(out.contains('…'), "{out}");
    }

    #[test]
    fn times_in_text_become_local() {
        let screen = Screen {
            width: 80,
            utc_offset: 3600,
        };
        let p = Printer {
            screen: &screen,
            now: "2026-01-01T10:00:00Z".parse().unwrap(),
        };
        assert_eq!(
            p.localize("ends 2026-01-01T10:30:00Z (in 30m); é 2025-12-31T10:00:00Z"),
            "ends 11:30 (in 30m); é 2025-12-31 11:00"
        );
    }
}

//! The pieces every part of `tasklock top`'s frame draws with: other agents' text made
//! inert, text cut to a width, short durations, the lease bar, the styles, a holder's
//! label, and a section's frame.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders};

use crate::clock::Time;
use crate::engine::fleet::FleetCheckout;
use crate::liveness::State;

/// Other agents' text (keys, names, reasons, notes) drawn inert: control characters,
/// escape sequences and bidirectional overrides are shown as `\u{…}`, never obeyed.
pub fn inert(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || is_bidi_or_separator(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn is_bidi_or_separator(c: char) -> bool {
    matches!(c,
        '\u{200e}' | '\u{200f}' | '\u{061c}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{2028}' | '\u{2029}'
        | '\u{feff}')
}

/// The columns `s` takes on a terminal.
pub fn width(s: &str) -> usize {
    Span::raw(s).width()
}

/// The longest start of `s` at most `max` columns wide.
fn take_width(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = width(c.encode_utf8(&mut [0; 4]));
        if used + w > max {
            break;
        }
        used += w;
        out.push(c);
    }
    out
}

/// At most `max` columns of `s`, with `…` at the end when cut.
pub fn cut(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = take_width(s, max - 1);
    out.push('…');
    out
}

/// At most `max` columns of `s`, cut in the middle (`src/…/parser/**`): a key's or a
/// path's end says as much as its start, and a pattern's `**` is kept.
pub fn cut_middle(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    if max < 4 {
        return cut(s, max);
    }
    let tail_w = (max - 1) / 2;
    let head = take_width(s, max - 1 - tail_w);
    let rev: String = s.chars().rev().collect();
    let tail: String = take_width(&rev, tail_w).chars().rev().collect();
    format!("{head}…{tail}")
}

/// "42s", "5m", "3h", "2d": the coarse form a table cell has room for.
pub fn short(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=99 => format!("{s}s"),
        100..=5999 => format!("{}m", s / 60),
        6000..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A bar that runs down as the lease does: `width` cells, the part left filled.
pub fn lease_bar(c: &FleetCheckout, now: Time, width: usize) -> String {
    let total = (c.view.expires_at - c.view.renewed_at)
        .num_milliseconds()
        .max(1);
    let left = (c.view.expires_at - now).num_milliseconds().clamp(0, total);
    let filled = ((left * width as i64 + total - 1) / total) as usize;
    let mut bar = "█".repeat(filled.min(width));
    bar.push_str(&"·".repeat(width - filled.min(width)));
    bar
}

pub struct Styles {
    pub color: bool,
}

impl Styles {
    pub fn new(color: bool) -> Styles {
        Styles { color }
    }
    pub fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    pub fn state(&self, s: State) -> Style {
        match s {
            State::Alive => self.fg(Color::Green),
            State::Stalled => self.fg(Color::Yellow),
            State::Dead => self.fg(Color::Red).add_modifier(Modifier::BOLD),
        }
    }
    pub fn title(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    /// The focused section's title: reversed (no colour needed, so NO_COLOR keeps it),
    /// after a `▶`.
    pub fn focused(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED)
    }
    pub fn selected(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
}

pub fn state_word(s: State) -> &'static str {
    match s {
        State::Alive => "alive",
        State::Stalled => "stalled",
        State::Dead => "dead",
    }
}

/// What the next command to meet a checkout will do with it.
pub fn ending_word(r: crate::report::ReapReason) -> &'static str {
    match r {
        crate::report::ReapReason::Timeout => "ending: lease over",
        _ => "ending: holder dead",
    }
}

/// A checkout's holder as the CLI names it ("alice (researcher)"), and its client.
pub fn holder_label(c: &FleetCheckout) -> String {
    let who = inert(&c.view.agent.label());
    match c.holder_client {
        Some(client) => format!("{who} · {client}"),
        None => who,
    }
}

/// A section's frame: its title marked `▶` and reversed when it has the focus (the
/// border bold too), and below, when rows are cut, how many are above and below.
pub fn pane_block(
    title: String,
    focused: bool,
    hidden: (usize, usize),
    st: &Styles,
) -> Block<'static> {
    let b = Block::default().borders(Borders::ALL);
    let b = if focused {
        b.title(Span::styled(format!("▶{title}"), st.focused()))
            .border_style(st.title())
    } else {
        b.title(title)
    };
    let (above, below) = hidden;
    let more: Vec<String> = [
        (above > 0).then(|| format!("↑ {above} above")),
        (below > 0).then(|| format!("+{below} more ↓")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if more.is_empty() {
        b
    } else {
        b.title_bottom(Line::from(format!(" {} ", more.join(" · "))).right_aligned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_drawn_inert() {
        assert_eq!(inert("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(inert("x\u{202e}y\u{2028}z"), "x\\u{202e}y\\u{2028}z");
        assert_eq!(inert("plain ключ"), "plain ключ");
    }

    #[test]
    fn a_path_cut_keeps_its_end() {
        assert_eq!(cut_middle("src/parser/deep/module/**", 12), "src/pa…le/**");
        assert_eq!(cut_middle("short/**", 12), "short/**");
        assert_eq!(cut("fix login redirect", 10), "fix login…");
    }

    #[test]
    fn short_durations() {
        assert_eq!(short(chrono::Duration::seconds(42)), "42s");
        assert_eq!(short(chrono::Duration::seconds(600)), "10m");
        assert_eq!(short(chrono::Duration::seconds(-5)), "0s");
        assert_eq!(short(chrono::Duration::hours(5)), "5h");
    }
}

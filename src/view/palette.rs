//! One colour per agent, the same in `top`, on the page and in saved timelines: sixteen
//! colours of a qualitative palette, at least 30 apart (CIE76 ΔE in CIELAB) any two, given
//! out so that the agents in view never share one while there are no more than sixteen.
//!
//! The agents of the fleet are given colours first, sorted by id, each its hashed slot or
//! the next free one; agents seen only in the timeline's events get what is left. So an
//! agent's colour depends on the fleet alone, which both views read alike.

use std::collections::HashMap;

use crate::engine::fleet::Fleet;

/// The palette, as sRGB.
pub const PALETTE: [(u8, u8, u8); 16] = [
    (0xF6, 0xA6, 0x00),
    (0x00, 0x67, 0xA5),
    (0x2C, 0xA0, 0x2C),
    (0xBE, 0x00, 0x32),
    (0xF7, 0xB6, 0xD2),
    (0x65, 0x45, 0x22),
    (0x17, 0xBE, 0xCF),
    (0xC2, 0xB2, 0x80),
    (0xBC, 0xBD, 0x22),
    (0xF9, 0x93, 0x79),
    (0x94, 0x67, 0xBD),
    (0x7F, 0x7F, 0x7F),
    (0xB3, 0x44, 0x6C),
    (0xE2, 0x58, 0x22),
    (0x00, 0x88, 0x56),
    (0xAE, 0xC7, 0xE8),
];

/// The colour of each agent in view.
#[derive(Debug, Clone, Default)]
pub struct Colours {
    slot: HashMap<String, usize>,
}

impl Colours {
    /// The fleet's agents (those listed, holders and waiters), then `more`.
    pub fn new<'a>(fleet: Option<&'a Fleet>, more: impl IntoIterator<Item = &'a str>) -> Colours {
        let mut c = Colours::default();
        let mut taken = [false; PALETTE.len()];
        if let Some(f) = fleet {
            let mut ids: Vec<&str> = f.agents.iter().map(|a| a.row.id.as_str()).collect();
            ids.extend(f.checkouts.iter().map(|c| c.view.agent.id.as_str()));
            ids.extend(
                f.queues
                    .values()
                    .flat_map(|q| q.waiters.iter().map(String::as_str)),
            );
            c.give(ids, &mut taken);
        }
        c.give(more.into_iter().collect(), &mut taken);
        c
    }

    fn give(&mut self, mut ids: Vec<&str>, taken: &mut [bool; PALETTE.len()]) {
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            if self.slot.contains_key(id) {
                continue;
            }
            let first = hashed(id);
            let free = (0..PALETTE.len())
                .map(|i| (first + i) % PALETTE.len())
                .find(|s| !taken[*s]);
            let s = free.unwrap_or(first);
            taken[s] = true;
            self.slot.insert(id.to_string(), s);
        }
    }

    /// An agent's colour; one never given out gets its hashed slot.
    pub fn rgb(&self, id: &str) -> (u8, u8, u8) {
        PALETTE[self.slot.get(id).copied().unwrap_or_else(|| hashed(id))]
    }

    /// As `#rrggbb`, for the page and SVG.
    pub fn hex(&self, id: &str) -> String {
        let (r, g, b) = self.rgb(id);
        format!("#{r:02x}{g:02x}{b:02x}")
    }
}

fn hashed(id: &str) -> usize {
    use sha2::Digest;
    let h = sha2::Sha256::digest(id.as_bytes());
    usize::from(u16::from_be_bytes([h[0], h[1]])) % PALETTE.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CIELAB of an sRGB colour (D65).
    fn lab((r, g, b): (u8, u8, u8)) -> [f64; 3] {
        let lin = |c: u8| {
            let c = f64::from(c) / 255.0;
            if c <= 0.04045 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        let (r, g, b) = (lin(r), lin(g), lin(b));
        let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
        let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
        let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
        let f = |t: f64| {
            if t > 0.008856 {
                t.cbrt()
            } else {
                7.787 * t + 16.0 / 116.0
            }
        };
        [
            116.0 * f(y) - 16.0,
            500.0 * (f(x) - f(y)),
            200.0 * (f(y) - f(z)),
        ]
    }

    #[test]
    fn any_two_colours_stay_apart() {
        let mut closest = f64::MAX;
        for (i, a) in PALETTE.iter().enumerate() {
            for b in &PALETTE[i + 1..] {
                let (p, q) = (lab(*a), lab(*b));
                let d =
                    ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
                closest = closest.min(d);
            }
        }
        assert!(closest >= 12.0, "two colours are {closest:.1} apart");
    }

    #[test]
    fn sixteen_agents_never_share_a_colour_and_keep_theirs() {
        let ids: Vec<String> = (0..16).map(|i| format!("agent-{i}")).collect();
        let c = Colours::new(None, ids.iter().map(String::as_str));
        let mut seen: Vec<(u8, u8, u8)> = ids.iter().map(|i| c.rgb(i)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 16);
        let again = Colours::new(None, ids.iter().rev().map(String::as_str));
        assert!(ids.iter().all(|i| c.rgb(i) == again.rgb(i)));
    }
}

//! What the binary carries besides its code: the skill pack. Every channel that delivers
//! the binary (release archive, npm, cargo) so delivers the skills of the same version,
//! and `tasklock setup` installs them.

/// One skill: its directory name and its `SKILL.md`.
pub struct Skill {
    pub name: &'static str,
    pub text: &'static str,
}

/// The skills in `skills/`, one per directory (a test checks the list against it).
pub const SKILLS: &[Skill] = &[
    Skill {
        name: "checkout",
        text: include_str!("../skills/checkout/SKILL.md"),
    },
    Skill {
        name: "checkouts",
        text: include_str!("../skills/checkouts/SKILL.md"),
    },
    Skill {
        name: "heartbeat",
        text: include_str!("../skills/heartbeat/SKILL.md"),
    },
];

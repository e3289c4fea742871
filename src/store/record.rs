//! The lock record: one JSON file per held key.

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::identity::Agent;

/// The newest record format this build reads and writes. Version 2 is a record with
/// `paths`: older versions would drop the field on a renewal and leave the paths
/// unguarded, so they must refuse such a record (as of a newer format) instead.
/// Version 3 is the checkout of one slot of a key with slots (`slot`, `slots`), for the
/// same reason. A record with neither is still written as version 1, which every
/// version reads.
pub const FORMAT_VERSION: u32 = 3;

/// The format version a record is written with.
pub fn version_for(paths: &[String], slot: Option<u32>) -> u32 {
    if slot.is_some() {
        3
    } else if paths.is_empty() {
        1
    } else {
        2
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    pub version: u32,
    pub key: String,
    /// Fencing token: strictly increasing across every grant in this lock directory.
    pub token: u64,
    pub agent: Agent,
    #[serde(deserialize_with = "crate::clock::stored")]
    pub acquired_at: Time,
    #[serde(deserialize_with = "crate::clock::stored")]
    pub renewed_at: Time,
    #[serde(deserialize_with = "crate::clock::stored")]
    pub expires_at: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The holder's secret, as a salted hash: only a caller with the secret may act on
    /// the checkout. Absent: made without a secret (or by an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::secret::Proof>,
    /// The repository paths this checkout covers (patterns of `docs/paths.md`, relative
    /// to the worktree top, normalised); empty for a checkout of a key alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// For a key with slots: which of them this checkout holds (from 1). Each slot's
    /// checkout is a record of its own, with its own token and lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// For a key with slots: how many it has (the same in every slot's record; changed in
    /// all of them at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// The git worktree made for this checkout (`checkout --worktree`), once it is made:
    /// never before it is complete. Absent in records of older versions, which also drop
    /// it on a renewal; the worktree is then still found through git (a leftover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Worktree>,
}

/// A git worktree tied to a checkout: where it is, its branch, and the repository it
/// belongs to (the top of the main worktree, where git runs to remove it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Worktree {
    pub path: String,
    pub branch: String,
    pub repo: String,
}

impl Record {
    /// Has the lease run out, as the holder must see it (no grace).
    pub fn expired_for_holder(&self, now: &Time) -> bool {
        *now >= self.expires_at
    }

    /// May another agent break this lease now? Only a clear margin after expiry, so a
    /// small clock skew between machines never steals a live lease.
    pub fn breakable(&self, now: &Time) -> bool {
        *now >= self.expires_at + chrono::Duration::seconds(BREAK_GRACE_SECS)
    }

    pub fn held_by(&self, agent_id: &str) -> bool {
        self.agent.id == agent_id
    }

    /// Held by `agent_id` or, with `subagents`, by one of its subagents (`<agent_id>/…`).
    pub fn held_by_or_under(&self, agent_id: &str, subagents: bool) -> bool {
        self.held_by(agent_id)
            || (subagents && crate::identity::is_subagent_of(&self.agent.id, agent_id))
    }

    /// Which checkout this is: its key, and its slot of a key with slots.
    pub fn id(&self) -> (String, Option<u32>) {
        (self.key.clone(), self.slot)
    }
}

/// Seconds past a lease's end before another agent may take the key.
pub const BREAK_GRACE_SECS: i64 = 2;

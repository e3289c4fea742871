//! Freezes (`freezes/<encoded pattern>.json`): no checkout of a key, or of every key with a
//! prefix (`deploy://*`), until a time.

use serde::{Deserialize, Serialize};

use crate::clock::Time;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Freeze {
    pub version: u32,
    /// A key, or a prefix followed by `*`.
    pub pattern: String,
    pub by: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    pub since: Time,
    pub until: Time,
    /// The secret (`TASKLOCK_SECRET`) of whoever set it, as a salted proof: only a caller
    /// with that secret ends it early as its maker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// (Boxed: a freeze travels inside every checkout report.)
    pub owner: Option<Box<crate::secret::Proof>>,
}

/// Does the freeze pattern `pattern` (a key, or a prefix followed by `*`) cover `key_name`?
pub fn covers(pattern: &str, key_name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => key_name.starts_with(prefix),
        None => pattern == key_name,
    }
}

impl Freeze {
    pub fn covers(&self, key_name: &str) -> bool {
        covers(&self.pattern, key_name)
    }

    pub fn active(&self, now: &Time) -> bool {
        *now < self.until
    }

    /// The freeze as reports show it: without its owner's proof.
    pub fn public(&self) -> Freeze {
        Freeze {
            owner: None,
            ..self.clone()
        }
    }
}

//! The project's backlog: keys waiting to be claimed with `checkout --next`, in the order
//! they were added.
//!
//! A store keeps it as an index it can answer in constant time however long it is: the
//! keys ready to claim in order (never claimed since added, or given back), and the keys
//! claimed, each with its claimer and when to look at it again. The index may lag the
//! checkouts (a key claimed by a plain `checkout`, a lease that ran out, a dead
//! claimer): the engine re-reads every key it hands out and repairs the index as it
//! goes (see `engine::backlog`). One rule the stores keep themselves: when a key's
//! checkout record, or the record of one of its slots, is removed (released, reaped,
//! forced), a claimed key of the backlog becomes ready again, in its old place.

use serde::{Deserialize, Serialize};

use crate::clock::Time;

/// One key of the backlog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BacklogEntry {
    pub key: String,
    /// Its place in line: keys are claimed in the order of `seq`.
    pub seq: u64,
    /// Set while the key is claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<BacklogClaim>,
}

/// Who claimed a key of the backlog, and when its claim should be looked at again (the
/// lease end of the checkout as last seen: renewals only move it later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BacklogClaim {
    pub agent: String,
    pub recheck: Time,
}

/// What the backlog holds, in counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BacklogSummary {
    /// Keys ready to claim.
    pub ready: u64,
    /// Keys claimed.
    pub claimed: u64,
    /// No claim needs a look before this (a lower bound); `None` with nothing claimed.
    pub recheck: Option<Time>,
    /// Every agent holding a claim.
    pub holders: Vec<String>,
}

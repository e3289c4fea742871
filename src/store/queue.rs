//! Per-key FIFO queues (`queues/<encoded key>.json`) and per-agent inboxes
//! (`inbox/<encoded agent>/<id>.json`, moved to `read/` once shown).

use serde::{Deserialize, Serialize};

use crate::clock::Time;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Waiter {
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub since: Time,
    /// The blocked `checkout --wait` process, when there is one: if it dies, the
    /// waiter leaves the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<String>,
    /// The Unix user who queued (absent in queues of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::identity::UnixUser>,
    /// The paths the waiter asked for with the key: a release of overlapping paths
    /// elsewhere may free it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// A free key held back for the head of its queue until `until`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reservation {
    pub agent: String,
    pub since: Time,
    pub until: Time,
    /// The inbox message that told the agent (its delivery says whether it was pushed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A key's queue. Reserved waiters stand at its head, in the order of `reservations`: a
/// key has at most one reservation, a key with slots one per free slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "QueueFile", into = "QueueFile")]
pub struct Queue {
    pub version: u32,
    pub key: String,
    pub waiters: Vec<Waiter>,
    pub reservations: Vec<Reservation>,
    /// For a key with slots: how many it has, kept here while nobody holds one.
    pub slots: Option<u32>,
}

/// A queue as stored: the first reservation where every version reads it, the others
/// (a key with slots) beside it.
#[derive(Serialize, Deserialize)]
struct QueueFile {
    version: u32,
    key: String,
    waiters: Vec<Waiter>,
    #[serde(default)]
    reservation: Option<Reservation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    more_reservations: Vec<Reservation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slots: Option<u32>,
}

impl From<QueueFile> for Queue {
    fn from(f: QueueFile) -> Queue {
        Queue {
            version: f.version,
            key: f.key,
            waiters: f.waiters,
            reservations: f
                .reservation
                .into_iter()
                .chain(f.more_reservations)
                .collect(),
            slots: f.slots,
        }
    }
}

impl From<Queue> for QueueFile {
    fn from(q: Queue) -> QueueFile {
        let mut rs = q.reservations.into_iter();
        QueueFile {
            version: q.version,
            key: q.key,
            waiters: q.waiters,
            reservation: rs.next(),
            more_reservations: rs.collect(),
            slots: q.slots,
        }
    }
}

impl Queue {
    pub fn empty(key: &str) -> Queue {
        Queue {
            version: 1,
            key: key.to_string(),
            waiters: Vec::new(),
            reservations: Vec::new(),
            slots: None,
        }
    }

    /// Is there nothing to keep: nobody waits and nothing is reserved?
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.reservations.is_empty()
    }

    /// The reservation held for `agent`, if any.
    pub fn reserved_for(&self, agent: &str) -> Option<&Reservation> {
        self.reservations.iter().find(|r| r.agent == agent)
    }

    /// The first reservation (the only one of a key without slots).
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reservations.first()
    }

    pub fn position(&self, agent: &str) -> Option<usize> {
        self.waiters
            .iter()
            .position(|w| w.agent == agent)
            .map(|i| i + 1)
    }
}

/// One inbox message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Message {
    pub version: u32,
    pub id: String,
    /// The agent whose action caused it, when there is one.
    pub from: Option<String>,
    pub to: String,
    #[serde(rename = "type")]
    pub kind: MessageKind,
    pub key: String,
    pub ts: Time,
    pub body: String,
    /// The Unix user whose tasklock wrote it (absent in messages of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::identity::UnixUser>,
    /// The one attempt to push it into the agent's session, if one was made (kept beside
    /// the message by the store, filled in when read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

/// `delivery.via` of a message the session's monitor showed (`inbox --follow`).
pub const VIA_MONITOR: &str = "monitor";

/// How pushing a message into its agent's session went. Made at most once per message;
/// whatever the outcome, the message stays in the inbox until read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Delivery {
    pub at: Time,
    /// The session's socket took the whole message.
    pub delivered: bool,
    /// How: `claude-code` (the session's messaging socket), `codex` (Codex's queue) or
    /// `monitor` (printed by the session's `inbox --follow`).
    pub via: String,
    /// Why it was not delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an inbox message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// A freed key is held for you, the head of its queue, for the handoff grace.
    Reserved,
    /// You did not take a key reserved for you in time; it went to the next in line.
    ReservationLapsed,
    /// Another agent force-released your checkout.
    ForceReleased,
    /// Your lease ran out and the checkout was released.
    LeaseExpired,
    /// You were judged dead and your checkouts were released.
    AgentDeath,
    /// Your session ended and its checkouts were released.
    SessionEnd,
    /// Your subagent stopped and its checkouts were released.
    SubagentEnd,
    /// Automatic renewals stopped at `max_hold`.
    MaxHold,
    /// Another agent froze a key you hold: no renewals while it is frozen.
    Frozen,
    /// Your place in a key's queue closed a wait-for cycle when the agent you waited for
    /// was handed something: you left that queue.
    Deadlock,
    /// Another agent gave you its checkout (`tasklock give`).
    Given,
    /// A type written by a newer tasklock.
    #[serde(other)]
    Other,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Reserved => "reserved",
            MessageKind::ReservationLapsed => "reservation_lapsed",
            MessageKind::ForceReleased => "force_released",
            MessageKind::LeaseExpired => "lease_expired",
            MessageKind::AgentDeath => "agent_death",
            MessageKind::SessionEnd => "session_end",
            MessageKind::SubagentEnd => "subagent_end",
            MessageKind::MaxHold => "max_hold",
            MessageKind::Frozen => "frozen",
            MessageKind::Deadlock => "deadlock",
            MessageKind::Given => "given",
            MessageKind::Other => "other",
        }
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

//! Where checkouts live: the [`Store`] trait, and the stores that implement it. Stores
//! import only the basic layer (errors, keys, settings, clock, the OS); never the engine.
//!
//! The store speaks in keys, agents, messages and events, never in paths: the rules
//! (who may take a key, when a holder is dead, who is next in line) live in
//! [`crate::engine`] and work the same on every store.
//!
//! Reads need no scope and may be stale by the time they are used. Every change runs
//! inside a [`Guard`] (the store's transaction scope: the file store's exclusive
//! `flock`, a database transaction) and re-reads what it judged before acting. A scope
//! ends with [`Store::commit`]; dropping a guard without committing abandons what a
//! transactional store wrote in it (the file store's writes stand as they were made).

pub mod backlog;
pub mod file;
pub mod freeze;
pub mod pg;
pub mod queue;
pub mod record;
pub mod registry;

use std::any::Any;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::config::Config;
use crate::error::Result;
pub use backlog::{BacklogClaim, BacklogEntry, BacklogSummary};
pub use file::{
    FileStore, at, create_root, guard_deadline, guard_held, set_guard_deadline, sharing,
};
pub use freeze::Freeze;
pub use queue::{Delivery, Message, MessageKind, Queue, Reservation, VIA_MONITOR, Waiter};
pub use record::{FORMAT_VERSION, Record, Worktree, version_for};
pub use registry::{AgentEntry, EndHow, Ended, Note, Reach, Via};

/// A record bigger than this is damage, not a lock.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// What is stored for one key. Short-lived (one read, one decision), so the size of a
/// record inline does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Slot {
    Free,
    Held(Record),
    /// Something is where the key's record belongs and it is not a record; `path` says
    /// where, for a person to look.
    Corrupt {
        path: PathBuf,
        problem: String,
    },
}

impl Slot {
    /// The record, when the slot holds one.
    pub fn held(self) -> Option<Record> {
        match self {
            Slot::Held(r) => Some(r),
            _ => None,
        }
    }

    /// As [`Slot::held`], borrowed.
    pub fn as_held(&self) -> Option<&Record> {
        match self {
            Slot::Held(r) => Some(r),
            _ => None,
        }
    }
}

/// Proof that the caller is inside the store's transaction scope; every change takes
/// one. What it holds belongs to the store that made it.
pub struct Guard {
    inner: Box<dyn Any>,
}

impl Guard {
    pub fn new<T: Any>(inner: T) -> Guard {
        Guard {
            inner: Box::new(inner),
        }
    }

    /// The store's own part of the guard. A guard of another store is a bug.
    pub fn get<T: Any>(&self) -> &T {
        self.inner
            .downcast_ref()
            .expect("a guard is used only with the store that made it")
    }

    pub fn into_inner<T: Any>(self) -> T {
        *self
            .inner
            .downcast()
            .expect("a guard is used only with the store that made it")
    }
}

/// Waits for a change to any key's record or queue (a release, a handoff, a new
/// waiter), so blocked checkouts need not poll hard.
pub trait Changes {
    /// Return when something may have changed, or after `timeout` at the latest.
    fn wait(&mut self, timeout: Duration);
}

/// The audit log as it grows, for `audit --follow`.
pub trait AuditFollow {
    /// Events appended since the last call (everything so far on the first call),
    /// oldest first, waiting up to `timeout` for some when there are none yet.
    fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>>;
}

/// Something held for as long as it lives (a lock that ends with it).
pub type Held = Box<dyn Any>;

/// A key's history as its next holder is told it: how its last checkout ended, and its
/// last notes, oldest first.
pub type History = (Option<Ended>, Vec<Note>);

/// A place where checkouts, queues, inboxes, the agent registry, notes, freezes and the
/// audit log are kept. Object safe: commands work on `&dyn Store`.
pub trait Store {
    /// Where this store is, for messages ("the lock directory /repo/.locks").
    fn describe(&self) -> String;

    /// The file store, for the checks and commands that only it has.
    fn as_file(&self) -> Option<&FileStore> {
        None
    }

    /// Is the store shared with a group of Unix users?
    fn shared(&self) -> bool {
        false
    }

    /// Use settings already read (by the command) instead of reading them again.
    fn share_config(&self, cfg: &Config);

    /// The project's settings, read once per store.
    fn config(&self) -> Result<Config>;

    // ---- Reads: no scope needed ----

    /// One key's slot: the record of its checkout, for a key without slots.
    fn read(&self, key: &str) -> Result<Slot>;

    /// The checkouts of a key with slots, one record per slot held (`Record::slot`), in
    /// slot order, corrupt ones included; empty for a key without slots. Kept apart from
    /// [`Store::read`]'s record of the key.
    fn read_slots(&self, key: &str) -> Result<Vec<Slot>>;

    /// Every slot that is not free (corrupt ones included), in a stable order: the
    /// records of keys, then the records of slots.
    fn scan(&self) -> Result<Vec<Slot>>;

    /// The checkouts held by `agent` (records of keys and of slots) and, with
    /// `subagents`, by its subagents (`<agent>/…`) too, in [`Store::scan`]'s order.
    /// Damaged records are nobody's. The default reads every record; a store with an
    /// index of holders reads only these.
    fn held_by(&self, agent: &str, subagents: bool) -> Result<Vec<Record>> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(Slot::held)
            .filter(|r| r.held_by_or_under(agent, subagents))
            .collect())
    }

    /// The key and patterns of every checkout that covers paths, possibly with entries
    /// whose record has gone since (readers judge the record itself), never missing one.
    fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(|s| match s {
                Slot::Held(r) if !r.paths.is_empty() => Some((r.key, r.paths)),
                _ => None,
            })
            .collect())
    }

    /// The queue of a key; empty when there is none.
    fn read_queue(&self, key: &str) -> Result<Queue>;

    /// The slots and queues of `keys`, in their order, read inside the scope `g` in as few
    /// steps as the store can (one query on PostgreSQL): for `checkout --any`, which looks
    /// through a list for the first key it can take. What is read stays true until the
    /// scope's own writes.
    fn read_many(&self, g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>>;

    /// Every non-empty queue, by key.
    fn scan_queues(&self) -> Result<Vec<Queue>>;

    /// An agent's registry entry.
    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>>;

    /// Every registry entry, by id.
    fn scan_agents(&self) -> Result<Vec<AgentEntry>>;

    /// How the key's last checkout ended, if known.
    fn read_ended(&self, key: &str) -> Result<Option<Ended>>;

    /// The last `n` notes of a key, oldest first.
    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>>;

    /// A key's history as its next holder is told it: how its last checkout ended and
    /// its last `n` notes, oldest first (in one read where the store can).
    fn history(&self, key: &str, n: usize) -> Result<History> {
        Ok((self.read_ended(key)?, self.last_notes(key, n)?))
    }

    /// Every freeze on record (active or not), by pattern.
    fn freezes(&self) -> Result<Vec<Freeze>>;

    /// The active freeze covering a key, if any (the one lasting longest).
    fn frozen(&self, key: &str, now: &Time) -> Result<Option<Freeze>> {
        Ok(self
            .freezes()?
            .into_iter()
            .filter(|f| f.active(now) && f.covers(key))
            .max_by_key(|f| f.until))
    }

    /// An agent's unread messages, oldest first.
    fn unread(&self, agent: &str) -> Result<Vec<Message>>;

    /// Mark a message read; false when another reader got it first.
    fn mark_read(&self, agent: &str, id: &str) -> Result<bool>;

    /// A message, read or unread, with its delivery; `None` when there is no such message.
    fn message(&self, agent: &str, id: &str) -> Result<Option<Message>>;

    /// Every event of the audit log, oldest first, to `each`; lines that cannot be read
    /// as events are counted in the result.
    fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize>;

    /// Follow the audit log as it grows.
    fn follow_audit(&self) -> Result<Box<dyn AuditFollow + '_>>;

    /// Wait for changes to records and queues.
    fn changes(&self) -> Result<Box<dyn Changes + '_>>;

    /// Wait for changes to records and queues and to `agent`'s inbox (`inbox --follow`).
    /// A store whose change signal already covers every inbox needs nothing more.
    fn inbox_changes(&self, agent: &str) -> Result<Box<dyn Changes + '_>> {
        let _ = agent;
        self.changes()
    }

    /// The lock that makes one `heartbeat --watch` per agent: `None` when another
    /// process holds it.
    fn lock_watcher(&self, agent: &str) -> Result<Option<Held>>;

    // ---- The transaction scope ----

    /// Enter the scope, waiting for it (`wait`), or `None` at once when it is busy.
    fn begin(&self, wait: bool) -> Result<Option<Guard>>;

    /// Enter a scope that holds only the locks named in `locks` (keys, and `agent:ID` for
    /// an agent's registry entry), beside every other such scope: changes to other keys
    /// go on at the same time. A scope of `agent:ID` locks alone (a heartbeat's) also runs
    /// beside project scopes, which take [`Store::lock_agent`] for the entries they
    /// change. A change it does not hold the lock for (another key, any queue, paths, a
    /// freeze, a message) fails with [`crate::error::Error::Escalate`],
    /// and so does the commit of a scope where one was refused, so that nothing of it
    /// stands; [`crate::engine::transaction_scoped`] then runs the work again under the whole
    /// project's lock. A store without such locks enters the whole scope (the default).
    fn begin_scoped(&self, locks: &[String], wait: bool) -> Result<Option<Guard>> {
        let _ = locks;
        self.begin(wait)
    }

    /// Enter a scope for claiming from the backlog (`checkout --next`) beside changes of
    /// other keys: a scope of `locks` (as [`Store::begin_scoped`], the project's lock
    /// shared even for `agent:ID` locks alone) to which [`Store::backlog_take`] adds the
    /// keys it takes. `None` on a store where every change holds the whole project: the
    /// claim runs in [`Store::begin`]'s scope (the default).
    fn begin_claim(&self, locks: &[String]) -> Result<Option<Guard>> {
        let _ = locks;
        Ok(None)
    }

    /// The work in this scope judges every queue and holder together (the waits-for
    /// graph): a scope narrower than the whole project fails with
    /// [`crate::error::Error::Escalate`], as for a change it may not make, so that the
    /// work runs again under the project's lock. Nothing to do where every scope is the
    /// whole project (the default).
    fn whole_project(&self, g: &Guard) -> Result<()> {
        let _ = g;
        Ok(())
    }

    /// Make the scope's changes stand and leave it.
    fn commit(&self, g: Guard) -> Result<()>;

    /// Before a project scope reads an agent's registry entry to change it: wait for the
    /// entry's own lock. A scope of registry entries alone (`agent:ID` locks only: a
    /// heartbeat) runs beside project scopes on a store with such locks, so a project
    /// scope must hold this lock to change an entry. Nothing to do elsewhere (the
    /// default; a key scope holds its entries' locks from its start). Without `wait`,
    /// false when a beat holds it now.
    fn lock_agent(&self, g: &Guard, id: &str, wait: bool) -> Result<bool> {
        let _ = (g, id, wait);
        Ok(true)
    }

    // ---- Changes: inside the scope ----

    /// The next fencing token: bigger than every token handed out before.
    fn next_token(&self, g: &Guard) -> Result<u64>;

    /// Write `entry` if its agent has no registry entry: `None` when written, else the
    /// entry that stands, left as it is. The scope holds the entry's lock
    /// ([`Store::lock_agent`]). Without a round trip of its own where the store can
    /// (PostgreSQL reads the entry with the scope's BEGIN and sends the write with the
    /// COMMIT): what registering a new agent costs.
    fn register_new(&self, g: &Guard, entry: &AgentEntry) -> Result<Option<AgentEntry>> {
        match self.read_agent(&entry.id)? {
            Some(e) => Ok(Some(e)),
            None => self.write_agent(g, entry).map(|()| None),
        }
    }

    /// A grant of `key`: [`Store::next_token`] and [`Store::history`] (in one round trip
    /// where the store has them).
    fn grant_token(&self, g: &Guard, key: &str, n: usize) -> Result<(u64, History)> {
        Ok((self.next_token(g)?, self.history(key, n)?))
    }

    /// Publish a record for a key (or, with `record.slot`, one slot of it) that has
    /// none; fails if one appeared meanwhile (PostgreSQL sends a key's new record with
    /// its next round trip, usually the COMMIT's, which is then what fails).
    fn insert(&self, g: &Guard, record: &Record) -> Result<()>;

    /// Replace a key's record (or one slot's, by `record.slot`) whole.
    fn replace(&self, g: &Guard, record: &Record) -> Result<()>;

    /// Remove a key's record, or with `slot` the record of that slot of it (or the damage
    /// in its place); a claimed key of the backlog is ready again. `paths`: the paths the
    /// removed record covered (`None` when unknown: damage), for a store that indexes them.
    fn remove(
        &self,
        g: &Guard,
        key: &str,
        slot: Option<u32>,
        paths: Option<&[String]>,
    ) -> Result<()>;

    /// Append an event to the audit log.
    fn audit(&self, g: &Guard, event: &AuditEvent) -> Result<()>;

    /// Write a key's queue (an empty one removes it).
    fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()>;

    /// Deliver a message.
    fn send(&self, g: &Guard, msg: &Message) -> Result<()>;

    /// Record how pushing a message into its agent's session went (read with it).
    fn record_delivery(&self, g: &Guard, agent: &str, id: &str, d: &Delivery) -> Result<()>;

    fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()>;

    /// Forget an agent (absent already is fine).
    fn remove_agent(&self, g: &Guard, id: &str) -> Result<()>;

    /// Record how a key's checkout ended (replacing the previous fact).
    fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()>;

    fn append_note(&self, g: &Guard, key: &str, note: &Note) -> Result<()>;

    fn write_freeze(&self, g: &Guard, f: &Freeze) -> Result<()>;

    /// Remove a freeze; returns it if there was one.
    fn remove_freeze(&self, g: &Guard, pattern: &str) -> Result<Option<Freeze>>;

    /// Whether the project is due a sweep (a look at every other agent's checkouts by a
    /// heartbeat): true when no sweep is recorded `every` or less before `now` (nor one
    /// more than `every` after it: a clock that ran ahead does not stop sweeps). Then
    /// `now` is recorded as the last sweep, so that of beats racing for one turn, one
    /// gets it (on the lock directory, the guard serializes them; on PostgreSQL, one
    /// statement decides).
    fn sweep_turn(&self, g: &Guard, now: &Time, every: Duration) -> Result<bool>;

    /// Add keys at the end of the backlog, in order; a key already in it keeps its place.
    /// `keys` are each given once (as [`crate::key::validate_all`] leaves them). Returns
    /// how many were added.
    fn backlog_add(&self, g: &Guard, keys: &[String]) -> Result<usize>;

    /// Remove keys from the backlog; returns those that were in it.
    fn backlog_remove(&self, g: &Guard, keys: &[String]) -> Result<Vec<String>>;

    /// Up to `n` keys of the backlog ready to claim, after place `after`, in order.
    fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>>;

    /// In a scope of [`Store::begin_claim`]: the first key of the backlog ready to claim,
    /// after place `after`, whose lock no other scope holds; its lock is taken without
    /// waiting and added to the scope. Keys being changed in other scopes (another claim
    /// on them) are passed over. `None` when no ready key is left to try.
    fn backlog_take(&self, g: &Guard, after: Option<u64>) -> Result<Option<BacklogEntry>> {
        let _ = (g, after);
        Err(crate::error::Error::Store(
            "this store claims only under the project's lock (a bug in tasklock)".into(),
        ))
    }

    /// Every claimed key of the backlog, in order (reads the whole backlog).
    fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>>;

    /// Claim a key of the backlog for `claim.agent`, or move its claim; `None` gives it
    /// back in its old place. A key not in the backlog is left alone.
    fn backlog_mark(&self, g: &Guard, key: &str, claim: Option<&BacklogClaim>) -> Result<()>;

    /// Every claim was looked at: none needs a look before `recheck`.
    fn backlog_rechecked(&self, g: &Guard, recheck: Option<Time>) -> Result<()>;

    /// The backlog in counts; with `holders`, every agent holding a claim too (a file per
    /// claimer on the file store, where spawn per task makes a claimer per claim).
    fn backlog_summary(&self, holders: bool) -> Result<BacklogSummary>;
}

/// The rule of [`Store::sweep_turn`] for a store that reads the last sweep's time
/// itself: due when there is none, when it is `every` or more before `now`, or when it
/// is more than `every` after `now`.
pub fn sweep_due(last: Option<&Time>, now: &Time, every: Duration) -> bool {
    let every = crate::duration::to_chrono(every);
    last.is_none_or(|t| *now >= *t + every || *t > *now + every)
}

/// The lock of an agent's registry entry, for a scope of some locks
/// ([`Store::begin_scoped`]).
pub fn agent_lock(id: &str) -> String {
    format!("{AGENT_LOCK_PREFIX}{id}")
}

/// How the locks of registry entries begin.
pub const AGENT_LOCK_PREFIX: &str = "agent:";

impl dyn Store + '_ {
    /// Enter the transaction scope, waiting for it.
    pub fn lock(&self) -> Result<Guard> {
        Ok(self.begin(true)?.expect("waited for it"))
    }

    /// Enter the scope only if nobody else is in it: for work that can wait for another
    /// time (forgetting long-dead agents).
    pub fn try_lock(&self) -> Result<Option<Guard>> {
        self.begin(false)
    }

    /// Run `f` inside the scope: its changes are committed when it returns `Ok`, and
    /// abandoned (where the store can) when it returns an error.
    pub fn transaction<T>(&self, f: impl FnOnce(&Guard) -> Result<T>) -> Result<T> {
        let g = self.lock()?;
        let v = f(&g)?;
        self.commit(g)?;
        Ok(v)
    }
}

/// What an audit event records: each kind by the name the log keeps in `event`
/// (docs/file-format.md, "Audit log", lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Acquire,
    Deny,
    Renew,
    Release,
    ForceRelease,
    AutoRelease,
    Queue,
    Dequeue,
    Handoff,
    Lapse,
    Notify,
    Push,
    Deadlock,
    Adopt,
    Give,
    Freeze,
    Unfreeze,
    Refused,
    /// A key's number of slots changed (`detail`: `OLD → NEW`).
    Slots,
}

impl Event {
    pub const ALL: [Event; 19] = [
        Event::Acquire,
        Event::Deny,
        Event::Renew,
        Event::Release,
        Event::ForceRelease,
        Event::AutoRelease,
        Event::Queue,
        Event::Dequeue,
        Event::Handoff,
        Event::Lapse,
        Event::Notify,
        Event::Push,
        Event::Deadlock,
        Event::Adopt,
        Event::Give,
        Event::Freeze,
        Event::Unfreeze,
        Event::Refused,
        Event::Slots,
    ];

    /// The kind named `name` in the log, if this version knows it.
    pub fn parse(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// The name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Acquire => "acquire",
            Event::Deny => "deny",
            Event::Renew => "renew",
            Event::Release => "release",
            Event::ForceRelease => "force_release",
            Event::AutoRelease => "auto_release",
            Event::Queue => "queue",
            Event::Dequeue => "dequeue",
            Event::Handoff => "handoff",
            Event::Lapse => "lapse",
            Event::Notify => "notify",
            Event::Push => "push",
            Event::Deadlock => "deadlock",
            Event::Adopt => "adopt",
            Event::Give => "give",
            Event::Freeze => "freeze",
            Event::Unfreeze => "unfreeze",
            Event::Refused => "refused",
            Event::Slots => "slots",
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AuditEvent {
    /// An event with only the required fields; set the others as they apply.
    pub fn new(ts: Time, event: Event, key: &str, agent: &str) -> AuditEvent {
        AuditEvent {
            ts,
            event: event.as_str().to_string(),
            key: key.to_string(),
            agent: agent.to_string(),
            name: None,
            token: None,
            reason: None,
            by: None,
            holder: None,
            detail: None,
            paths: Vec::new(),
        }
    }

    /// Is this an event of kind `kind`?
    pub fn is(&self, kind: Event) -> bool {
        self.event == kind.as_str()
    }

    /// The event's kind; none for a name this version does not know (a newer
    /// version's line: the log keeps the name as text, so that such a line is still
    /// read and shown).
    pub fn kind(&self) -> Option<Event> {
        Event::parse(&self.event)
    }
}

/// One event of the audit log. `agent` is the agent the event is about: the one that
/// acquired, was denied, released, or whose checkout was force- or auto-released.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditEvent {
    #[serde(deserialize_with = "crate::clock::stored")]
    pub ts: Time,
    pub event: String,
    pub key: String,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who caused the event when it is not `agent` (force and auto releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// For a deny: who held the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The paths of the checkout the event is about (absent for a key alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

#[cfg(test)]
mod event_names {
    use super::Event;

    #[test]
    fn each_kind_has_its_serialized_name_and_its_row_in_the_file_format() {
        let doc = include_str!("../../docs/file-format.md");
        // The table of events: from its header to the first line that is not a row.
        let table = doc.split("| event | written when |").nth(1).unwrap();
        let table = table.split("\n\n").next().unwrap();
        for e in Event::ALL {
            assert_eq!(
                serde_json::to_value(e).unwrap(),
                serde_json::json!(e.as_str())
            );
            assert_eq!(
                serde_json::from_value::<Event>(serde_json::json!(e.as_str())).unwrap(),
                e
            );
            assert!(
                table.contains(&format!("\n| `{e}` |")),
                "docs/file-format.md has no row for the audit event `{e}`"
            );
        }
    }

    #[test]
    fn a_line_of_a_kind_this_version_does_not_know_is_read_and_kept() {
        for e in Event::ALL {
            assert_eq!(Event::parse(e.as_str()), Some(e));
        }
        let line = r#"{"ts":"2026-01-01T00:00:00Z","event":"teleport","key":"k","agent":"a"}"#;
        let read: super::AuditEvent = serde_json::from_str(line).unwrap();
        assert_eq!(read.kind(), None);
        assert_eq!(serde_json::to_string(&read).unwrap(), line);
    }
}

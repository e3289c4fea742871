//! The decision of a checkout, made from what was read of the key: [`decide`] is pure
//! (no store, no clock, no I/O). `take::attempt` reads the key's state under
//! the guard ([`KeyState`]), asks [`decide`], and carries the [`Decision`] out in one
//! place; `why` reads the same decision and puts it in words.

use std::path::PathBuf;

use super::slots::Holders;
use super::waits::Dropped;
use crate::error::Outcome;
use crate::report::{OverlapView, Reaped};
use crate::store::{Freeze, Queue, Record, Reservation};

/// What to do when the key is not ours to take now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Refuse (exit 2).
    No,
    /// Join the queue and return (exit 2 with the position).
    Queue,
    /// Join the queue as the blocked process `pid` (`--wait`).
    Wait(u32),
}

/// Who has the key, as read under the guard once the checkouts in the way that had
/// ended were ended ([`KeyState::took_over`]).
#[derive(Debug, Clone)]
pub enum Holding {
    /// Nobody holds it.
    Free,
    /// Its record (or a slot's) is damaged: nobody can take it until it is repaired.
    Corrupt { path: PathBuf, problem: String },
    /// The caller's own checkout, still standing (its lease not over, its process not
    /// gone).
    Mine(Record),
    /// Another agent's checkout, still standing.
    Other(Record),
    /// A key with slots: its holders and its count. `mine`: the caller's own slot, still
    /// standing (the others' that had ended are then left as they are: it renews).
    Slots {
        holders: Holders,
        mine: Option<Record>,
    },
}

/// What waiting for the key would do (read only for a refusal with `--queue` or
/// `--wait`).
#[derive(Debug, Clone, Default)]
pub struct WaitCheck {
    /// The wait would close this wait-for cycle (agent, key, agent, …, the caller).
    pub cycle: Option<Vec<String>>,
    /// With a cycle: the place the caller has in the queue goes too (it asked for the
    /// same paths then, or that wait closes a cycle itself).
    pub leave: bool,
    /// A cycle of other agents the wait leads into (it waits behind it).
    pub waits_behind: Vec<String>,
}

/// What is true of the key for the caller now.
#[derive(Debug, Clone)]
pub struct KeyState {
    pub key: String,
    /// The freeze that covers the key, with its record as read.
    pub frozen: Option<(Freeze, Option<Record>)>,
    pub holding: Holding,
    /// The caller's own standing checkout is bound to a secret it did not give.
    pub secret_refused: bool,
    /// The paths asked for that the caller's own checkout does not cover yet.
    pub added: Vec<String>,
    /// A checkout in the way that had ended and was ended for the caller.
    pub took_over: Option<Reaped>,
    /// Live checkouts and reservations of others whose paths meet the ones asked for.
    pub blockers: Vec<OverlapView>,
    /// The key's queue, settled.
    pub queue: Queue,
    /// Granting the key would close this wait-for cycle (read only for a grant).
    pub grant_cycle: Option<Vec<String>>,
    /// What waiting would do (read only for a refusal that would wait).
    pub wait: Option<WaitCheck>,
    /// The passive places in queues the grant or the wait drops: without them it closes
    /// no cycle ([`super::waits::breaking`]).
    pub dropped: Vec<Dropped>,
}

impl KeyState {
    /// A key nobody holds, nothing read yet.
    pub fn new(key: &str) -> KeyState {
        KeyState {
            key: key.to_string(),
            frozen: None,
            holding: Holding::Free,
            secret_refused: false,
            added: Vec::new(),
            took_over: None,
            blockers: Vec::new(),
            queue: Queue::empty(key),
            grant_cycle: None,
            wait: None,
            dropped: Vec::new(),
        }
    }

    /// The key's count of slots, for a key with slots.
    pub fn capacity(&self) -> Option<u32> {
        match &self.holding {
            Holding::Slots { holders, .. } => Some(holders.capacity),
            _ => None,
        }
    }
}

/// What keeps the caller from the key.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocked {
    /// Another agent's standing checkout of the key.
    Holder(Record),
    /// Paths asked for are held or reserved by others ([`KeyState::blockers`]); `own`:
    /// the caller holds the key and waits to add them.
    Paths { own: Option<Record> },
    /// The key is free but reserved for the head of its queue.
    Reserved(Reservation),
    /// Every slot is held, or the free ones are reserved for waiters ahead.
    Slots,
}

/// What a checkout does.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The key's record is damaged (an error, exit 1).
    Corrupt { path: PathBuf, problem: String },
    /// A freeze covers the key (its record as read, if any).
    Frozen(Freeze, Option<Record>),
    /// The caller's own checkout, bound to a secret it did not give (exit 4).
    NotYours(Record),
    /// The caller's own checkout goes on, renewed, with the paths not yet covered
    /// ([`KeyState::added`]) added.
    Renew(Record),
    /// The key (or a slot of it) is the caller's: a new checkout.
    Grant,
    /// Not the caller's now: refused (exit 2).
    Refuse(Blocked),
    /// Not the caller's now: it joins (or keeps its place in) the queue.
    Queue(Blocked),
    /// Waiting would close this wait-for cycle: refused (exit 5).
    WaitDeadlock(Blocked, Vec<String>),
    /// Taking it would close this wait-for cycle: refused (exit 5).
    Deadlock(Vec<String>),
}

impl Decision {
    /// The outcome a checkout reports for this decision (none for a damaged record: an
    /// error).
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            Decision::Corrupt { .. } => return None,
            Decision::Frozen(..) => Outcome::Frozen,
            Decision::NotYours(_) => Outcome::SecretRefused,
            Decision::Renew(_) => Outcome::AlreadyHeld,
            Decision::Grant => Outcome::Granted,
            Decision::Refuse(_) | Decision::Queue(_) => Outcome::Conflict,
            Decision::WaitDeadlock(..) | Decision::Deadlock(_) => Outcome::Deadlock,
        })
    }

    /// Is this a grant (or a renewal adding paths) whose wait-for cycle must be read
    /// before it stands?
    pub fn grants_paths_or_key(&self, s: &KeyState) -> bool {
        match self {
            Decision::Grant => true,
            Decision::Renew(_) => !s.added.is_empty(),
            _ => false,
        }
    }

    /// Is this a refusal that would wait, whose waits-for check must be read first?
    pub fn would_wait(&self, join: Join) -> bool {
        matches!(self, Decision::Refuse(_)) && join != Join::No
    }
}

/// What a checkout by `me` (joining the queue as `join` says) does, given `s`. A
/// [`KeyState::grant_cycle`] or [`KeyState::wait`] not read counts as no cycle and no
/// wait: read them when the decision asks ([`Decision::grants_paths_or_key`],
/// [`Decision::would_wait`]) and decide again.
pub fn decide(s: &KeyState, me: &str, join: Join) -> Decision {
    if let Some((f, holder)) = &s.frozen {
        return Decision::Frozen(f.clone(), holder.clone());
    }
    match &s.holding {
        Holding::Corrupt { path, problem } => Decision::Corrupt {
            path: path.clone(),
            problem: problem.clone(),
        },
        Holding::Mine(r) if s.secret_refused => Decision::NotYours(r.clone()),
        Holding::Mine(r) if !s.blockers.is_empty() => refusal(
            s,
            join,
            Blocked::Paths {
                own: Some(r.clone()),
            },
        ),
        Holding::Mine(r) => granted(s, Decision::Renew(r.clone())),
        Holding::Other(r) => refusal(s, join, Blocked::Holder(r.clone())),
        Holding::Slots { holders, mine } => decide_slots(s, holders, mine.as_ref(), me, join),
        Holding::Free if !s.blockers.is_empty() => refusal(s, join, Blocked::Paths { own: None }),
        Holding::Free => match s.queue.reservation() {
            Some(res) if res.agent != me => refusal(s, join, Blocked::Reserved(res.clone())),
            _ => granted(s, Decision::Grant),
        },
    }
}

/// A key with slots: the caller's own slot renewed, else a free slot granted unless the
/// waiters ahead have them all reserved.
fn decide_slots(
    s: &KeyState,
    h: &Holders,
    mine: Option<&Record>,
    me: &str,
    join: Join,
) -> Decision {
    if let Some(r) = mine {
        return if s.secret_refused {
            Decision::NotYours(r.clone())
        } else {
            Decision::Renew(r.clone())
        };
    }
    let q = &s.queue;
    let open = h.free() > q.reservations.len() || q.reserved_for(me).is_some();
    if !open || h.free() == 0 {
        return refusal(s, join, Blocked::Slots);
    }
    granted(s, Decision::Grant)
}

/// `grant` stands unless it would close a wait-for cycle.
fn granted(s: &KeyState, grant: Decision) -> Decision {
    match &s.grant_cycle {
        Some(cycle) if grant.grants_paths_or_key(s) => Decision::Deadlock(cycle.clone()),
        _ => grant,
    }
}

/// Kept out by `blocked`: refused, or waiting, unless the wait would close a cycle.
fn refusal(s: &KeyState, join: Join, blocked: Blocked) -> Decision {
    match (&s.wait, join) {
        (_, Join::No) | (None, _) => Decision::Refuse(blocked),
        (Some(w), _) => match &w.cycle {
            Some(cycle) => Decision::WaitDeadlock(blocked, cycle.clone()),
            None => Decision::Queue(blocked),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Waiter;

    fn record(key: &str, agent: &str) -> Record {
        let now = chrono::Utc::now();
        Record {
            version: 1,
            key: key.into(),
            token: 1,
            agent: serde_json::from_value(serde_json::json!({ "id": agent })).unwrap(),
            acquired_at: now,
            renewed_at: now,
            expires_at: now,
            reason: None,
            owner: None,
            paths: Vec::new(),
            slot: None,
            slots: None,
            worktree: None,
        }
    }

    fn reserved(s: &mut KeyState, agent: &str) {
        let now = chrono::Utc::now();
        let w = serde_json::json!({ "agent": agent, "since": now });
        s.queue
            .waiters
            .push(serde_json::from_value::<Waiter>(w).unwrap());
        s.queue.reservations.push(Reservation {
            agent: agent.into(),
            since: now,
            until: now,
            message: None,
        });
    }

    #[test]
    fn a_free_key_is_granted_unless_reserved_for_another() {
        let mut s = KeyState::new("k");
        assert_eq!(decide(&s, "me", Join::No), Decision::Grant);
        reserved(&mut s, "me");
        assert_eq!(decide(&s, "me", Join::No), Decision::Grant);
        let mut s = KeyState::new("k");
        reserved(&mut s, "other");
        assert!(matches!(
            decide(&s, "me", Join::No),
            Decision::Refuse(Blocked::Reserved(r)) if r.agent == "other"
        ));
    }

    #[test]
    fn a_grant_that_closes_a_cycle_is_a_deadlock() {
        let mut s = KeyState::new("k");
        let cycle: Vec<String> = vec!["me".into(), "j".into(), "a".into(), "k".into()];
        s.grant_cycle = Some(cycle.clone());
        assert_eq!(
            decide(&s, "me", Join::No),
            Decision::Deadlock(cycle.clone())
        );
        // Renewing without new paths makes nobody wait: no cycle is read for it.
        s.holding = Holding::Mine(record("k", "me"));
        assert!(matches!(decide(&s, "me", Join::No), Decision::Renew(_)));
        s.added = vec!["src/**".into()];
        assert_eq!(decide(&s, "me", Join::No), Decision::Deadlock(cycle));
    }

    #[test]
    fn a_held_key_is_refused_queued_or_a_deadlock_to_wait_for() {
        let mut s = KeyState::new("k");
        s.holding = Holding::Other(record("k", "a"));
        assert!(matches!(
            decide(&s, "me", Join::Queue),
            Decision::Refuse(Blocked::Holder(_))
        ));
        assert!(decide(&s, "me", Join::Queue).would_wait(Join::Queue));
        s.wait = Some(WaitCheck::default());
        assert!(matches!(decide(&s, "me", Join::Queue), Decision::Queue(_)));
        assert!(matches!(decide(&s, "me", Join::No), Decision::Refuse(_)));
        s.wait.as_mut().unwrap().cycle = Some(vec!["me".into()]);
        assert!(matches!(
            decide(&s, "me", Join::Wait(1)),
            Decision::WaitDeadlock(Blocked::Holder(_), _)
        ));
    }

    #[test]
    fn frozen_outranks_everything_and_a_secret_outranks_renewing() {
        let mut s = KeyState::new("k");
        s.holding = Holding::Mine(record("k", "me"));
        s.secret_refused = true;
        assert!(matches!(decide(&s, "me", Join::No), Decision::NotYours(_)));
        let now = chrono::Utc::now();
        s.frozen = Some((
            serde_json::from_value::<Freeze>(serde_json::json!({
                "version": 1, "pattern": "k", "by": "op", "since": now, "until": now
            }))
            .unwrap(),
            None,
        ));
        assert!(matches!(decide(&s, "me", Join::No), Decision::Frozen(..)));
    }

    #[test]
    fn slots_are_granted_while_one_is_free_and_unreserved() {
        let mut s = KeyState::new("k");
        let mut held = record("k", "a");
        held.slot = Some(1);
        let holders = Holders {
            records: vec![held.clone()],
            corrupt: None,
            capacity: 2,
            stored: Some(2),
        };
        s.holding = Holding::Slots {
            holders: holders.clone(),
            mine: None,
        };
        assert_eq!(decide(&s, "me", Join::No), Decision::Grant);
        reserved(&mut s, "b");
        assert_eq!(decide(&s, "me", Join::No), Decision::Refuse(Blocked::Slots));
        assert_eq!(decide(&s, "b", Join::No), Decision::Grant);
        s.holding = Holding::Slots {
            holders,
            mine: Some(held),
        };
        assert!(matches!(decide(&s, "a", Join::No), Decision::Renew(_)));
    }
}

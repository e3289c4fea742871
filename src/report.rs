//! What commands return. The JSON output is these types serialized; the markdown renderer
//! reads the same values, so both say the same facts.

use serde::Serialize;

use crate::clock::Time;
use crate::error::Outcome;
use crate::liveness::{Cause, Judgement, State};
use crate::store::{AgentEntry, AuditEvent, Freeze, Message, Note, Record, Reservation};

/// The public view of a holder.
/// Why a checkout was ended by someone other than its holder's own release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReapReason {
    Timeout,
    AgentDeath,
    SessionEnd,
    SubagentEnd,
}

impl ReapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReapReason::Timeout => "timeout",
            ReapReason::AgentDeath => "agent_death",
            ReapReason::SessionEnd => "session_end",
            ReapReason::SubagentEnd => "subagent_end",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentView {
    pub id: String,
    pub name: Option<String>,
    pub host: String,
    pub pid: Option<u32>,
    /// For a subagent: the session (agent) it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The Unix user the holder runs as (absent for records of older versions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::identity::UnixUser>,
}

/// The public view of a checkout.
#[derive(Debug, Clone, Serialize)]
pub struct CheckoutView {
    pub key: String,
    pub token: u64,
    pub agent: AgentView,
    pub acquired_at: Time,
    pub renewed_at: Time,
    pub expires_at: Time,
    pub reason: Option<String>,
    /// Bound to its holder's secret: only the holder's own session can act on it.
    pub proven: bool,
    /// The repository paths it covers (absent for a checkout of a key alone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// For a key with slots: the slot it holds (from 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// For a key with slots: how many it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// The git worktree made for it (`checkout --worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::store::Worktree>,
}

impl From<&Record> for CheckoutView {
    fn from(r: &Record) -> Self {
        CheckoutView::from(r.clone())
    }
}

/// The record's own strings move into the view: `list` of 10,000 records copies none.
impl From<Record> for CheckoutView {
    fn from(r: Record) -> Self {
        CheckoutView {
            key: r.key,
            token: r.token,
            agent: AgentView {
                id: r.agent.id,
                name: r.agent.name,
                host: r.agent.host,
                pid: r.agent.pid,
                parent: r.agent.parent,
                user: r.agent.user,
            },
            acquired_at: r.acquired_at,
            renewed_at: r.renewed_at,
            expires_at: r.expires_at,
            reason: r.reason,
            proven: r.owner.is_some(),
            paths: r.paths,
            slot: r.slot,
            slots: r.slots,
            worktree: r.worktree,
        }
    }
}

impl AgentView {
    /// As [`crate::identity::Agent::label`].
    pub fn label(&self) -> String {
        crate::identity::label(&self.id, self.name.as_deref(), self.user.as_ref())
    }
}

/// A checkout this command ended on its holder's behalf: lease out or holder dead.
#[derive(Debug, Clone, Serialize)]
pub struct Reaped {
    pub agent: AgentView,
    pub token: u64,
    pub expires_at: Time,
    /// `timeout`, `agent_death` or `session_end`.
    pub reason: ReapReason,
    /// With `agent_death`: `process_gone`, `pid_reused`, `silent` or `ended`.
    pub cause: Option<Cause>,
    /// The last notes left on the key, for whoever takes it next.
    pub notes: Vec<Note>,
}

impl Reaped {
    pub fn new(r: &Record, reason: ReapReason, cause: Option<Cause>, notes: Vec<Note>) -> Self {
        Reaped {
            agent: CheckoutView::from(r).agent,
            token: r.token,
            expires_at: r.expires_at,
            reason,
            cause,
            notes,
        }
    }
}

/// What the next holder of a key should know: who held it last, how that ended, and the
/// key's recent notes.
#[derive(Debug, Clone, Serialize)]
pub struct Previous {
    /// The last holder; `null` when unknown (only notes are known).
    pub agent: Option<AgentView>,
    pub token: Option<u64>,
    pub ended_at: Option<Time>,
    /// `released`, `force_released`, `timeout`, `agent_death` or `session_end`.
    pub ended: Option<crate::store::EndHow>,
    /// With `agent_death`: `process_gone`, `pid_reused`, `silent` or `ended`.
    pub cause: Option<String>,
    /// Who ended it, when not the holder itself.
    pub by: Option<String>,
    /// The `--note` of that release.
    pub note: Option<String>,
    /// The key's last notes, oldest first.
    pub notes: Vec<Note>,
}

#[derive(Debug, Serialize)]
pub struct CheckoutReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    /// `granted`, `renewed`, `conflict` or `deadlock`.
    pub outcome: Outcome,
    /// The caller's checkout when granted or renewed; the holder's on conflict (none when
    /// the key is free but reserved for the head of its queue).
    pub checkout: Option<CheckoutView>,
    /// A previous holder whose checkout this command ended (lease out, holder dead).
    pub took_over: Option<Reaped>,
    /// Agents waiting in the key's queue.
    pub queue_length: usize,
    /// The caller's place in the queue (1 = next), when it is queued.
    pub position: Option<usize>,
    /// Set when the key is free but held back for the head of its queue.
    pub reserved_for: Option<Reservation>,
    /// Queued (not waiting): the agent's session takes pushes, so it is told the moment
    /// the key is handed to it (docs/wake.md). Absent (false) otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub push_wake: bool,
    /// With `push_wake`: through which client (`claude-code`, `codex`), for the words.
    #[serde(skip)]
    pub push_via: Option<String>,
    /// On `deadlock`: the wait-for cycle, agent, key, agent, …, back to the caller.
    pub cycle: Vec<String>,
    /// On `conflict`, queued: a wait-for cycle among other agents that the caller's wait
    /// leads into (it waits behind it, and keeps its place), as agent, key, agent, …
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_behind: Vec<String>,
    /// On `frozen`: the freeze that refused the checkout.
    #[serde(serialize_with = "public_freeze")]
    pub frozen: Option<Freeze>,
    /// On `granted`: the key's last holder, how its checkout ended and its recent notes,
    /// when any of that is known.
    pub previous: Option<Box<Previous>>,
    /// On `conflict` over paths: the checkouts (or reservations) whose paths overlap the
    /// ones asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<OverlapView>,
    /// The paths asked for with the key (absent when none were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// For a key with slots: how many it has (absent for a key without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// On `conflict` over a key with slots: the holder of every slot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<CheckoutView>,
    /// On `granted`, `renewed` or queued: the passive places in queues (of agents that
    /// queued with `--queue`, not blocked in a `--wait`) this checkout dropped because
    /// with them it would have closed a wait-for cycle; each was told. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Dropped>,
    /// With `--worktree`, once granted: whether its worktree (in `checkout.worktree`) was
    /// made now or was there already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeMade>,
}

/// How `checkout --worktree` came by its worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorktreeMade {
    /// Made now, on a new branch or on an existing one checked out nowhere else.
    Created,
    /// It was there already, on its branch (a re-checkout, or a making cut short).
    Reused,
}

/// A place in a queue dropped so that a change closes no wait-for cycle: its agent and
/// key, and the cycle it would close with the change made, from and back to its agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub agent: String,
    pub key: String,
    pub cycle: Vec<String>,
}

/// Another agent's checkout (or a reservation for the head of a queue) whose paths
/// overlap the ones asked for.
#[derive(Debug, Clone, Serialize)]
pub struct OverlapView {
    /// The key of the checkout (or of the reserved queue) in the way.
    pub key: String,
    pub agent: AgentView,
    /// Its fencing token; absent for a reservation.
    pub token: Option<u64>,
    /// When its lease ends, or the reservation's grace.
    pub until: Time,
    /// Its pattern and ours that meet, and a path both cover.
    pub theirs: String,
    pub mine: String,
    pub witness: String,
    /// A reservation for the head of a queue, not a checkout.
    pub reserved: bool,
}

impl CheckoutReport {
    /// The command that asks for this checkout again (see [`crate::key::checkout_line`]).
    pub fn line(&self) -> crate::key::Line {
        crate::key::checkout_line(&self.key, &self.paths)
    }

    /// A report of `outcome` for `key`, with nothing else known yet.
    pub fn new(
        now: Time,
        key: &str,
        outcome: Outcome,
        checkout: Option<CheckoutView>,
    ) -> CheckoutReport {
        CheckoutReport {
            command: "checkout",
            now,
            key: key.to_string(),
            outcome,
            checkout,
            took_over: None,
            queue_length: 0,
            position: None,
            reserved_for: None,
            push_wake: false,
            push_via: None,
            cycle: Vec::new(),
            waits_behind: Vec::new(),
            frozen: None,
            previous: None,
            overlaps: Vec::new(),
            paths: Vec::new(),
            slots: None,
            holders: Vec::new(),
            dropped: Vec::new(),
            worktree: None,
        }
    }
}

/// `checkout --any` when no key of the list could be taken.
#[derive(Debug, Serialize)]
pub struct AnyReport {
    pub command: &'static str,
    pub now: Time,
    pub outcome: Outcome,
    pub refused: Vec<CheckoutReport>,
}

/// `checkout --next` that took nothing: the ready keys it could not take, and the
/// backlog as it stands.
#[derive(Debug, Serialize)]
pub struct NextReport {
    pub command: &'static str,
    pub now: Time,
    /// `conflict` (every key claimed or refused), `frozen` (every ready key frozen) or
    /// `backlog_empty` (nothing left in it).
    pub outcome: Outcome,
    /// Ready keys that could not be taken (frozen, reserved for a queue's head, damaged).
    pub refused: Vec<CheckoutReport>,
    pub ready: u64,
    pub claimed: u64,
    /// The agents holding claims.
    pub claimers: Vec<String>,
}

/// `backlog`, `backlog add`, `backlog remove`: what changed, and the backlog now.
#[derive(Debug, Serialize)]
pub struct BacklogReport {
    pub command: &'static str,
    pub now: Time,
    /// `show`, `add` or `remove`.
    pub action: &'static str,
    /// `add`: keys added (those already in the backlog keep their place and are not
    /// counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<usize>,
    /// `remove`: the keys removed (those not in the backlog are left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    pub ready: u64,
    pub claimed: u64,
    /// The first ready keys, in the order `checkout --next` takes them.
    pub next: Vec<BacklogKey>,
    /// `show`: the claimed keys, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<BacklogKey>>,
}

#[derive(Debug, Serialize)]
pub struct BacklogKey {
    pub key: String,
    /// Its place in line.
    pub seq: u64,
    /// Who claimed it (claims only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
}

/// `inbox`: unread messages, oldest first.
#[derive(Debug, Serialize)]
pub struct InboxReport {
    pub command: &'static str,
    pub now: Time,
    pub agent: String,
    pub messages: Vec<Message>,
    /// False with `--peek`: the messages stay unread.
    pub marked_read: bool,
}

#[derive(Debug, Serialize)]
pub struct KeyResult {
    pub key: String,
    pub outcome: Outcome,
    /// The checkout as it now stands (renew), as it was (release), or the other holder's.
    pub checkout: Option<CheckoutView>,
    /// On `frozen` (renew during a freeze): the freeze.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "public_freeze"
    )]
    pub frozen: Option<Freeze>,
    /// On `corrupt` (only with several keys; one key gives an error instead): what is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl KeyResult {
    /// A key's row: its outcome and the checkout it is about, if any.
    pub fn new(key: String, outcome: Outcome, checkout: Option<&crate::store::Record>) -> Self {
        KeyResult {
            key,
            outcome,
            checkout: checkout.map(CheckoutView::from),
            frozen: None,
            problem: None,
        }
    }
}

/// `release` and `renew`: one result per key.
#[derive(Debug, Serialize)]
pub struct KeysReport {
    pub command: KeysCommand,
    pub now: Time,
    pub all: bool,
    pub results: Vec<KeyResult>,
    pub note: Option<String>,
    /// `release`: the worktrees of the checkouts it ended, removed or kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worktrees: Vec<WorktreeEnd>,
}

/// What a worktree holds that removing it would lose, as a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorktreeHealth {
    /// Nothing: no change, every commit also on another branch or a remote.
    Clean,
    /// Changed or untracked files.
    Dirty,
    /// Commits on no other branch and no remote-tracking branch.
    NotElsewhere,
    /// The worktree is not there (its branch may be).
    Missing,
    /// Git could not tell (its repository gone, git failing).
    Unknown,
}

/// A worktree's state: its word, and both counts behind it.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeState {
    #[serde(rename = "state")]
    pub health: WorktreeHealth,
    pub changed_files: usize,
    pub unique_commits: usize,
}

impl WorktreeState {
    /// In words: `clean`, `dirty (2 changed files)`, `3 commits not on any other branch
    /// nor remote`, `missing`.
    pub fn words(&self) -> String {
        let files = |n: usize| format!("{n} changed file{}", if n == 1 { "" } else { "s" });
        let commits = |n: usize| {
            format!(
                "{n} commit{} not on any other branch nor remote",
                if n == 1 { "" } else { "s" }
            )
        };
        let mut words = match self.health {
            WorktreeHealth::Clean => "clean".to_string(),
            WorktreeHealth::Dirty => format!("dirty ({})", files(self.changed_files)),
            WorktreeHealth::NotElsewhere => commits(self.unique_commits),
            WorktreeHealth::Missing => "missing".to_string(),
            WorktreeHealth::Unknown => "unknown (git could not tell)".to_string(),
        };
        if self.health != WorktreeHealth::NotElsewhere && self.unique_commits > 0 {
            words.push_str(", ");
            words.push_str(&commits(self.unique_commits));
        }
        words
    }
}

/// What became of a worktree when its checkout ended (or on `worktrees --clean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorktreeOutcome {
    Removed,
    Kept,
    /// It was gone already; git forgot it.
    Missing,
}

/// One worktree's end: removed (and its branch deleted), or kept and why.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeEnd {
    pub key: String,
    pub worktree: crate::store::Worktree,
    pub outcome: WorktreeOutcome,
    pub state: WorktreeState,
    pub branch_deleted: bool,
    /// Why it was kept, or why its branch was.
    pub why: Option<String>,
}

/// One row of `tasklock worktrees`.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeRow {
    pub key: String,
    pub worktree: crate::store::Worktree,
    /// The checkout it belongs to; `None`: that checkout has ended.
    pub checkout: Option<CheckoutView>,
    pub state: WorktreeState,
}

/// `tasklock worktrees [--clean]`.
#[derive(Debug, Serialize)]
pub struct WorktreesReport {
    pub command: &'static str,
    pub now: Time,
    /// The repository whose worktrees git was asked for (absent outside one).
    pub repo: Option<String>,
    pub worktrees: Vec<WorktreeRow>,
    /// With `--clean`: what it did with each worktree whose checkout had ended.
    pub cleaned: Option<Vec<WorktreeEnd>>,
}

/// The commands that act on several keys at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeysCommand {
    Release,
    Renew,
    Leave,
}

impl KeysCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            KeysCommand::Release => "release",
            KeysCommand::Renew => "renew",
            KeysCommand::Leave => "leave",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    /// `held` or `free`.
    pub outcome: Outcome,
    /// The key's checkout; for a key with slots, the caller's slot if it holds one, else
    /// the lowest held.
    pub checkout: Option<CheckoutView>,
    /// Set when this command found the checkout over (lease out, holder dead) and ended it.
    pub released: Option<Reaped>,
    /// The key's last notes, oldest first; they survive release.
    pub notes: Vec<Note>,
    pub queue: QueueView,
    /// For a key with slots: how many it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// For a key with slots: the checkout of every slot held, in slot order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<CheckoutView>,
}

/// A key's queue as outputs show it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct QueueView {
    pub length: usize,
    /// Waiting agents, first in line first.
    pub waiters: Vec<String>,
    /// The Unix user each waiter queued as (same order as `waiters`; null for entries
    /// from older versions).
    pub waiter_users: Vec<Option<crate::identity::UnixUser>>,
    pub reserved_for: Option<Reservation>,
    /// A key with slots: the reservations of its other free slots, in line order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_reserved: Vec<Reservation>,
    /// A key with slots: how many it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
}

impl QueueView {
    pub fn from_queue(q: &crate::store::Queue) -> Self {
        QueueView {
            length: q.waiters.len(),
            waiters: q.waiters.iter().map(|w| w.agent.clone()).collect(),
            waiter_users: q.waiters.iter().map(|w| w.user.clone()).collect(),
            reserved_for: q.reservation().cloned(),
            also_reserved: q.reservations.iter().skip(1).cloned().collect(),
            slots: q.slots,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CorruptEntry {
    pub file: String,
    pub path: String,
    pub problem: String,
}

#[derive(Debug, Serialize)]
pub struct ListReport {
    pub command: &'static str,
    pub now: Time,
    /// Set with `--mine`: only this agent's checkouts are listed.
    pub mine: Option<String>,
    pub checkouts: Vec<CheckoutView>,
    pub corrupt: Vec<CorruptEntry>,
    /// Queues of keys, by key (held keys with waiters, and free keys reserved for a waiter).
    pub queues: std::collections::BTreeMap<String, QueueView>,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    pub token: u64,
    pub valid: bool,
    /// `valid`, `stale_token`, `not_holder`, `lease_lost` or `no_such_checkout`.
    pub outcome: Outcome,
    pub checkout: Option<CheckoutView>,
}

/// One row of `tasklock agents` (and the caller's own row in `heartbeat`).
#[derive(Debug, Clone, Serialize)]
pub struct AgentRow {
    pub id: String,
    pub name: Option<String>,
    /// For a subagent (`<session>/<subagent>`), the session it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub host: String,
    pub pid: Option<u32>,
    /// `alive`, `stalled` or `dead`.
    pub state: State,
    /// Why dead: `process_gone`, `pid_reused`, `silent` or `ended`.
    pub cause: Option<Cause>,
    /// False for a holder that never sent a heartbeat (judged by its leases alone).
    pub registered: bool,
    pub first_seen: Option<Time>,
    pub last_heartbeat: Option<Time>,
    pub heartbeats: u64,
    pub status: Option<String>,
    /// Keys it holds now.
    pub checkouts: Vec<String>,
    /// Keys it is queued for, or has reserved for it, as the next command to meet their
    /// queues would leave them: `agents` and the views say (left out elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<Vec<String>>,
}

impl AgentRow {
    pub fn new(e: &AgentEntry, j: Judgement, checkouts: Vec<String>) -> Self {
        AgentRow {
            id: e.id.clone(),
            name: e.name.clone(),
            parent: e.parent.clone(),
            host: e.host.clone(),
            pid: e.pid,
            state: j.state,
            cause: j.cause,
            registered: true,
            first_seen: Some(e.first_seen),
            last_heartbeat: e.last_heartbeat,
            heartbeats: e.heartbeats,
            status: e.status.clone(),
            checkouts,
            waiting_for: None,
        }
    }

    pub fn unregistered(r: &Record, checkouts: Vec<String>) -> Self {
        let a = &r.agent;
        let mut row = AgentRow::unbeaten(&a.id, a.name.as_ref(), a.parent.as_ref(), &a.host, a.pid);
        row.checkouts = checkouts;
        row
    }

    /// An agent that never sent a heartbeat, judged alive by what it holds or waits for.
    fn unbeaten(
        id: &str,
        name: Option<&String>,
        parent: Option<&String>,
        host: &str,
        pid: Option<u32>,
    ) -> Self {
        AgentRow {
            id: id.to_string(),
            name: name.cloned(),
            parent: parent.cloned(),
            host: host.to_string(),
            pid,
            state: State::Alive,
            cause: None,
            registered: false,
            first_seen: None,
            last_heartbeat: None,
            heartbeats: 0,
            status: None,
            checkouts: Vec::new(),
            waiting_for: None,
        }
    }

    /// The keys it holds, then those it waits for ("K1; waits for K2"), each list as
    /// `keys` writes it.
    pub fn holds_and_waits(&self, keys: impl Fn(&[String]) -> String) -> String {
        match self.waiting_for.as_deref().unwrap_or_default() {
            [] => keys(&self.checkouts),
            waits if self.checkouts.is_empty() => format!("waits for {}", keys(waits)),
            waits => format!("{}; waits for {}", keys(&self.checkouts), keys(waits)),
        }
    }

    /// An agent known only from its place in a queue (it never sent a heartbeat and
    /// holds nothing): alive while that place stands, as a queue judges its waiters.
    pub fn waiting(w: &crate::store::Waiter, waiting_for: Vec<String>) -> Self {
        let mut row = AgentRow::unbeaten(&w.agent, w.name.as_ref(), None, &w.host, w.pid);
        row.waiting_for = Some(waiting_for);
        row
    }
}

/// A checkout ended on the way by a command that met it (not the caller's own).
#[derive(Debug, Serialize)]
pub struct EndedCheckout {
    pub key: String,
    pub agent: String,
    pub token: u64,
    pub reason: ReapReason,
}

#[derive(Debug, Serialize)]
pub struct AgentsReport {
    pub command: &'static str,
    pub now: Time,
    pub agents: Vec<AgentRow>,
    /// Known agents left out of `agents` (dead for a while; `--all` shows them).
    pub hidden: usize,
    /// Registry entries of long-dead agents this command removed (`agent_retention`).
    pub pruned: usize,
    pub ended: Vec<EndedCheckout>,
}

#[derive(Debug, Serialize)]
pub struct HeartbeatReport {
    pub command: &'static str,
    pub now: Time,
    pub agent: AgentRow,
    /// Keys whose lease this beat extended (leases are renewed once past half-way).
    pub renewed: Vec<String>,
    /// Keys whose lease had already run out: released, never revived.
    pub lost: Vec<String>,
    /// Of `lost`, the keys that ended because the agent's registered process is gone
    /// (not by their lease): a watcher of that process counts them as released by it.
    #[serde(skip)]
    pub died: Vec<String>,
    /// Other agents' checkouts this beat ended because their holder is dead.
    pub ended: Vec<EndedCheckout>,
    /// Keys of this agent a freeze kept from being renewed.
    pub frozen: Vec<String>,
    /// Whether this beat looked at every other agent's checkouts (the project's sweep,
    /// at most once per `sweep_interval`); `ended` is empty when it did not.
    pub swept: bool,
}

#[derive(Debug, Serialize)]
pub struct NoteReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    /// `noted`, `no_such_checkout`, `not_holder` or `lease_lost`.
    pub outcome: Outcome,
    pub checkout: Option<CheckoutView>,
    pub note: Option<Note>,
}

/// `give KEY --to AGENT`.
#[derive(Debug, Serialize)]
pub struct GiveReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    /// The receiver named with `--to`.
    pub to: String,
    /// `given`, `no_such_checkout`, `not_holder`, `secret_refused`, `lease_lost`,
    /// `frozen`, `unknown_agent`, `agent_dead`, `receiver_holds` or `deadlock`.
    pub outcome: Outcome,
    /// `given`: the receiver's checkout; a refusal: the checkout as it stands.
    pub checkout: Option<CheckoutView>,
    /// `given`: the giver's token, which no longer stands.
    pub previous_token: Option<u64>,
    /// `deadlock`: the cycle the receiver's holding the key would close, from and back
    /// to the receiver.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<String>,
    /// `given`: the passive queue places dropped because the receiver's holding the key
    /// would have closed a cycle through each (their agents told), as a checkout's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Dropped>,
}

/// `heartbeat --watch` when it ends (or `--detach` when the watcher started).
#[derive(Debug, Serialize)]
pub struct WatchReport {
    pub command: &'static str,
    pub now: Time,
    pub agent: String,
    pub pid: u32,
    /// `process_exited` (checkouts released), `stopped` (by a signal) or `detached`.
    pub outcome: &'static str,
    pub beats: u64,
    pub released: Vec<String>,
    pub watcher_pid: Option<u32>,
}

/// `run` when CMD could not be run to the end under the lock.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    pub token: u64,
    /// The exit code of CMD (128 + signal number when a signal killed it).
    pub cmd_exit: Option<i32>,
    /// Set when the lease was lost while CMD ran (for example the machine slept).
    pub lease_lost: bool,
    pub released: bool,
    /// The agent held the key before `run` began: the command ran under that checkout,
    /// which stays held.
    pub kept: bool,
    pub exit_code: i32,
}

/// One file `init` looked at.
#[derive(Debug, Serialize)]
pub struct Change {
    pub path: String,
    /// `created`, `updated` or `unchanged` (with `--dry-run`: what would happen).
    pub action: String,
    pub what: String,
}

#[derive(Debug, Serialize)]
pub struct InitReport {
    pub command: &'static str,
    pub now: Time,
    pub dry_run: bool,
    pub project: String,
    pub changes: Vec<Change>,
    /// The agent clients set up, why each, and what each still needs.
    pub clients: Vec<ClientSetup>,
    /// How other MCP clients start `tasklock mcp`.
    pub mcp: McpSetup,
    /// A git repository without `--git-hook`: `init` says how to add the commit guard.
    pub git_hook_offered: bool,
}

/// An agent client `init` set the project up for.
#[derive(Debug, Serialize)]
pub struct ClientSetup {
    /// `claude`, `codex`, `gemini`, `opencode` or `cursor`.
    pub client: &'static str,
    /// Why: named with `--client`, its folder in the project, its command on PATH, or
    /// none found (Claude Code alone).
    pub why: String,
    /// What is left to do in the client itself.
    pub needs: &'static str,
}

/// The MCP server's setup for clients `init` does not configure itself.
#[derive(Debug, Serialize)]
pub struct McpSetup {
    /// The server's command line: `command` and `args`.
    pub command: String,
    pub args: Vec<String>,
    /// The one command that adds it to Claude Code.
    pub claude_code: String,
    /// The same for Codex's own (user-wide) configuration.
    pub codex: String,
    /// The `mcpServers` object most other clients (Cursor, Claude Desktop…) read.
    pub mcp_servers: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct FreezeReport {
    /// `freeze` or `unfreeze`.
    pub command: &'static str,
    pub now: Time,
    pub pattern: String,
    /// True after `freeze`; false after `unfreeze`.
    pub frozen: bool,
    /// The freeze set, or the one removed (none: there was nothing to unfreeze); on a
    /// refused `unfreeze`, the freeze that stands.
    #[serde(serialize_with = "public_freeze")]
    pub freeze: Option<Freeze>,
    /// On an `unfreeze` that found nothing: an active prefix freeze covering the key.
    #[serde(serialize_with = "public_freeze")]
    pub covered_by: Option<Freeze>,
    /// On a refused `unfreeze` (exit 4), why: `not_owner` (another agent set it),
    /// `no_secret` or `wrong_secret` (it was set with a secret the caller did not give).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<&'static str>,
}

/// A freeze as reports show it: never its owner's proof.
fn public_freeze<S: serde::Serializer>(f: &Option<Freeze>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&f.as_ref().map(Freeze::public), s)
}

#[derive(Debug, Serialize)]
pub struct WhyReport {
    pub command: &'static str,
    pub now: Time,
    pub key: String,
    /// The agent asking, when known: the answer is for it.
    pub agent: Option<String>,
    pub can_checkout: bool,
    pub state: WhyState,
    /// Plain-word explanations, most important first.
    pub reasons: Vec<String>,
    pub next: String,
    /// The paths asked about with `--path` (absent when none were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// When the key is reserved: how pushing the news into the head's session went
    /// (absent when no push was tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<crate::store::Delivery>,
    /// What `next` advises, for the markdown renderer to spell out with the caller's flags.
    #[serde(skip)]
    pub advice: WhyNext,
    /// What `checkout KEY` (with the same paths) would do now: its `outcome`, decided by
    /// the checkout's own code without acting (absent without an agent, or when the
    /// checkout would fail with an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<crate::error::Outcome>,
}

/// What `why` says of a key, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhyState {
    Free,
    /// The caller's.
    Yours,
    /// Another agent's (or every slot taken).
    Held,
    /// Its holder is dead or its lease ran out: the next checkout takes it over.
    Ended,
    /// Reserved for another agent, the head of its queue.
    Reserved,
    ReservedForYou,
    /// Paths asked about are held by others.
    PathsHeld,
    /// Taking it would close a wait-for cycle.
    Deadlock,
    /// Yours, bound to a secret the caller did not give.
    SecretRefused,
    Frozen,
    Corrupt,
}

impl WhyState {
    pub fn as_str(self) -> &'static str {
        match self {
            WhyState::Free => "free",
            WhyState::Yours => "yours",
            WhyState::Held => "held",
            WhyState::Ended => "ended",
            WhyState::Reserved => "reserved",
            WhyState::ReservedForYou => "reserved_for_you",
            WhyState::PathsHeld => "paths_held",
            WhyState::Deadlock => "deadlock",
            WhyState::SecretRefused => "secret_refused",
            WhyState::Frozen => "frozen",
            WhyState::Corrupt => "corrupt",
        }
    }
}

/// The advice of `why`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WhyNext {
    /// You hold it.
    KeepWorking,
    /// Free for you: check it out.
    Checkout,
    /// Free and reserved for you, the head of its queue: check it out now.
    CheckoutReserved,
    Frozen,
    Corrupt,
    /// A record of a newer format: upgrade tasklock.
    Upgrade,
    /// Held by `holder`; you are first in line and will get it when it is released.
    FirstInLine {
        holder: String,
    },
    /// You wait at `position` (2 or more) in its queue.
    InLine {
        position: usize,
    },
    /// Held or reserved for another: work on something else, or queue.
    #[default]
    Queue,
    /// Your checkout is bound to a secret you did not give.
    Secret,
    /// Taking it would close a wait-for cycle through your place in the queue of `queue`.
    Deadlock {
        queue: String,
    },
}

#[derive(Debug, Serialize)]
pub struct AuditReport {
    pub command: &'static str,
    pub now: Time,
    /// Events matching the filters (before `--limit`).
    pub matched: usize,
    /// Lines of the log that could not be read as events.
    pub unreadable_lines: usize,
    /// The events shown, oldest first.
    pub events: Vec<AuditEvent>,
}

/// One line of `doctor`'s checklist.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    /// `ok`, `warn` or `fail`.
    pub status: String,
    pub detail: String,
    pub fix: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub command: &'static str,
    pub now: Time,
    pub lock_dir: String,
    /// False when any check failed (exit 1); warnings alone keep it true.
    pub healthy: bool,
    pub checks: Vec<Check>,
}

/// Everything a command can return on success (including refusals with exit codes 2–4).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Report {
    Checkout(CheckoutReport),
    Keys(KeysReport),
    Status(StatusReport),
    List(ListReport),
    Verify(VerifyReport),
    Heartbeat(HeartbeatReport),
    Agents(AgentsReport),
    Note(NoteReport),
    Give(GiveReport),
    Watch(WatchReport),
    Run(RunReport),
    Any(AnyReport),
    Next(NextReport),
    Backlog(BacklogReport),
    Inbox(InboxReport),
    Init(InitReport),
    Freeze(FreezeReport),
    Why(WhyReport),
    Audit(AuditReport),
    Doctor(DoctorReport),
    Guard(GuardReport),
    Stage(StageReport),
    Setup(SetupReport),
    Worktrees(WorktreesReport),
}

/// `stage`: the files whose last recorded edit is the caller's (or its subagents') and
/// that differ from the index, staged with `git add` (listed only with `--dry-run`).
#[derive(Debug, Serialize)]
pub struct StageReport {
    pub command: &'static str,
    pub now: Time,
    pub agent: String,
    pub dry_run: bool,
    /// The top of the worktree; `files` are relative to it.
    pub root: String,
    /// Staged (with `--dry-run`: to be staged), by path.
    pub files: Vec<StageFile>,
    /// How many of `files` were staged: all of them, or 0 with `--dry-run`.
    pub staged: usize,
}

#[derive(Debug, Serialize)]
pub struct StageFile {
    pub file: String,
    /// How it differs from the index: `modified`, `added` (new to git) or `deleted`.
    pub change: &'static str,
    /// Who made the last edit: the caller, or one of its subagents.
    pub agent: String,
    pub edited_at: Time,
}

/// `setup`: the skills this binary carries, installed for Claude Code and Codex.
#[derive(Debug, Serialize)]
pub struct SetupReport {
    pub command: &'static str,
    pub now: Time,
    /// The version of tasklock whose skills these are.
    pub version: &'static str,
    pub dry_run: bool,
    /// `--uninstall`: the changes are `removed` or `kept`.
    pub uninstall: bool,
    /// The receipt listing what setup installed (read by `--uninstall`).
    pub receipt: Option<String>,
    /// One per skill file and link: `created`, `updated`, `unchanged` or `kept`; with
    /// `--uninstall`, one per path of the receipt: `removed` or `kept` (with `--dry-run`:
    /// what would happen).
    pub changes: Vec<Change>,
}

/// `guard-commit`: the staged files the commit may not include.
#[derive(Debug, Serialize)]
pub struct GuardReport {
    pub command: &'static str,
    pub now: Time,
    /// The committing agent, when it has an identity.
    pub agent: Option<String>,
    /// How many files the commit changes.
    pub staged: usize,
    /// The refused files (none: the commit may go ahead).
    pub files: Vec<GuardFile>,
    /// The command that unstages every refused file that is another agent's (`held` and
    /// `edited`), shell-quoted, to run at the top of the worktree; `None` when there is
    /// none.
    pub unstage: Option<String>,
    /// Without a committer identity (a person at the terminal): the staged files another
    /// live agent edited last. Listed, not refused: the person decides.
    pub edited_by_agents: Vec<GuardFile>,
}

/// Why a staged file refuses the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardVerdict {
    /// Another live agent's checkout covers it.
    Held,
    /// The committer edited it under a checkout it no longer holds.
    Lost,
    /// Another live agent made its last edit.
    Edited,
}

/// The last recorded edit of a staged file (`engine::edits`).
#[derive(Debug, Clone, Serialize)]
pub struct EditView {
    /// The agent that made it: a session, or `<session>/<subagent>`.
    pub agent: String,
    /// Its name in the agent registry, if it has one.
    pub name: Option<String>,
    /// `alive` or `stalled` (an agent judged dead, or whose session ended, does not count).
    pub state: crate::liveness::State,
    pub edited_at: Time,
}

#[derive(Debug, Serialize)]
pub struct GuardFile {
    pub file: String,
    pub verdict: GuardVerdict,
    /// `held`: the key of the other agent's checkout; `lost`: of the committer's lost one;
    /// `edited`: none.
    pub key: Option<String>,
    pub token: Option<u64>,
    /// `held`: the holder's pattern that covers the file.
    pub pattern: Option<String>,
    /// `held`: the holder's checkout.
    pub checkout: Option<CheckoutView>,
    /// `lost`: how that checkout ended, when known.
    pub ended: Option<crate::store::EndHow>,
    /// `edited`: who edited it last, and when.
    pub edit: Option<EditView>,
}

impl Report {
    /// When it was made: every time in it is told relative to this.
    pub fn now(&self) -> Time {
        match self {
            Report::Checkout(r) => r.now,
            Report::Keys(r) => r.now,
            Report::Status(r) => r.now,
            Report::List(r) => r.now,
            Report::Verify(r) => r.now,
            Report::Heartbeat(r) => r.now,
            Report::Agents(r) => r.now,
            Report::Note(r) => r.now,
            Report::Give(r) => r.now,
            Report::Watch(r) => r.now,
            Report::Run(r) => r.now,
            Report::Any(r) => r.now,
            Report::Next(r) => r.now,
            Report::Backlog(r) => r.now,
            Report::Inbox(r) => r.now,
            Report::Init(r) => r.now,
            Report::Freeze(r) => r.now,
            Report::Why(r) => r.now,
            Report::Audit(r) => r.now,
            Report::Doctor(r) => r.now,
            Report::Guard(r) => r.now,
            Report::Stage(r) => r.now,
            Report::Setup(r) => r.now,
            Report::Worktrees(r) => r.now,
        }
    }

    /// The process exit code; multi-key commands exit with the first failing key's code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Report::Checkout(r) => r.outcome.exit_code(),
            // `release --all` reports lost leases but has still released everything.
            Report::Keys(r) => r
                .results
                .iter()
                .filter(|k| {
                    !(r.all && r.command == KeysCommand::Release && k.outcome == Outcome::LeaseLost)
                })
                .map(|k| k.outcome.exit_code())
                .find(|&c| c != 0)
                .unwrap_or(0),
            Report::Status(r) => r.outcome.exit_code(),
            Report::List(_) => 0,
            Report::Verify(r) => r.outcome.exit_code(),
            Report::Heartbeat(_) | Report::Agents(_) => 0,
            Report::Note(r) => r.outcome.exit_code(),
            Report::Give(r) => r.outcome.exit_code(),
            Report::Watch(_) => 0,
            Report::Run(r) => r.exit_code,
            Report::Any(r) => r.outcome.exit_code(),
            Report::Next(r) => r.outcome.exit_code(),
            Report::Backlog(_) => 0,
            Report::Inbox(_)
            | Report::Init(_)
            | Report::Why(_)
            | Report::Setup(_)
            | Report::Worktrees(_)
            | Report::Stage(_) => 0,
            Report::Freeze(r) if r.refused.is_some() => crate::error::EXIT_NOT_HOLDER,
            Report::Freeze(r) if !r.frozen && r.freeze.is_none() => {
                crate::error::EXIT_NO_SUCH_CHECKOUT
            }
            Report::Freeze(_) | Report::Audit(_) => 0,
            Report::Doctor(r) => i32::from(!r.healthy),
            Report::Guard(r) => {
                if r.files
                    .iter()
                    .any(|f| matches!(f.verdict, GuardVerdict::Held | GuardVerdict::Edited))
                {
                    crate::error::EXIT_HELD
                } else if r.files.is_empty() {
                    0
                } else {
                    crate::error::EXIT_NOT_HOLDER
                }
            }
        }
    }

    /// The JSON object, written straight from the report (no intermediate tree).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            serde_json::json!({"error": {"kind": "internal", "message": e.to_string(), "hint": null, "exit_code": 1}})
                .to_string()
        })
    }
}

impl From<ReapReason> for crate::store::EndHow {
    fn from(r: ReapReason) -> Self {
        use crate::store::EndHow;
        match r {
            ReapReason::Timeout => EndHow::Timeout,
            ReapReason::AgentDeath => EndHow::AgentDeath,
            ReapReason::SessionEnd => EndHow::SessionEnd,
            ReapReason::SubagentEnd => EndHow::SubagentEnd,
        }
    }
}

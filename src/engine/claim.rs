//! Claim-next for `checkout --any`: find the first key of a list that can be taken
//! without a full checkout attempt on every key ahead of it.
//!
//! The old way ran [`attempt`] on each key in order: every refused key was read, judged,
//! its queue read and settled, and audited as a `deny` of its own, so a backlog drain
//! (many agents taking keys from one long list until none is free) did work that grew
//! with the square of the backlog. Here, inside the same scope:
//!
//! 1. The keys are read in growing chunks with one [`Store::read_many`] each (one query on
//!    PostgreSQL), until a key that may be taken turns up.
//! 2. A key is skipped without an attempt only when the attempt could only refuse it and
//!    change nothing but the audit log: it is held by another agent, its lease is not
//!    breakable, its holder is not dead (the same [`Judge`] rule as `attempt`), and it
//!    has no queue to settle. Every other key (free, corrupt, ours, reapable, queued) is a
//!    candidate and gets the full [`attempt`], which decides exactly as before (freezes,
//!    queue reservations, reaping).
//! 3. When no candidate is granted, the skipped keys get their [`attempt`] too (in list
//!    order), so the refusal lists every key exactly as before.
//!
//! The attempts run on a [`Claiming`] view of the store, which serves the reads already
//! made (records and queues read in bulk, registry entries, freezes) and keeps the
//! attempts' `deny` events: one `deny` is written per refused call instead of one per
//! key, and none when a key is granted.

use std::cell::RefCell;
use std::collections::HashMap;

use super::take::{Join, Request, attempt};
use super::{Ctx, Judge};
use crate::clock::Time;
use crate::error::{Outcome, Result};
use crate::report::CheckoutReport;
use crate::store::{
    AgentEntry, AuditEvent, AuditFollow, BacklogClaim, BacklogEntry, BacklogSummary, Changes,
    Delivery, Ended, Event, FileStore, Freeze, Guard, Held, History, Message, Note, Queue, Record,
    Slot, Store,
};

/// Keys read by the first [`Store::read_many`]; each later one reads four times as many,
/// up to [`LAST_CHUNK`]. An agent that shuffles its list finds a free key among the
/// first few; one that does not still costs one query per growing chunk.
const FIRST_CHUNK: usize = 16;
const LAST_CHUNK: usize = 4096;
/// Keys named in the `detail` of the one `deny` of a refused call.
const NAMED_IN_DENY: usize = 10;

/// What `checkout --any` came to.
#[allow(clippy::large_enum_variant)] // one per command, returned once
pub enum Claimed {
    Taken(CheckoutReport),
    /// Every key refused: one report per key, in list order.
    Refused(Vec<CheckoutReport>),
}

/// The first key of `keys` that `req` can take, under the scope `guard`; or every key's
/// refusal. Exactly the result of [`attempt`] on each key in order (a candidate's
/// refusal before a later grant is not audited).
pub fn claim_next(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    req: &Request,
    keys: &[String],
) -> Result<Claimed> {
    let view = Claiming::new(store);
    let me = req.agent.id.as_str();
    // Refusals by index, as they come: few unless nothing can be taken.
    let mut refusals: Vec<(usize, CheckoutReport)> = Vec::new();
    let mut skipped = Vec::new();
    let mut damaged: Vec<(usize, Slot)> = Vec::new();
    let mut judge: Option<Judge> = None;
    let mut pos = 0;
    let mut chunk = FIRST_CHUNK;
    while pos < keys.len() {
        let end = (pos + chunk).min(keys.len());
        let read = view.read_ahead(guard, &keys[pos..end])?;
        for (i, (slot, queue)) in (pos..end).zip(read) {
            if let Slot::Corrupt { path, problem } = &slot {
                // A damaged record is skipped, as `list` skips it, not an error for the
                // whole list.
                crate::warnings::warn(format!(
                    "`{}` was skipped: its record {} is damaged ({problem})",
                    keys[i],
                    path.display()
                ));
                damaged.push((i, slot.clone()));
                continue;
            }
            let candidate = match &slot {
                Slot::Held(r) if !r.held_by(me) && queue_is_empty(&queue) => {
                    // A judge lives across keys (registry entries and process checks
                    // read once); an attempt judges on its own, so one is made afresh
                    // after each.
                    let j = judge.get_or_insert_with(|| Judge::new(ctx, &view));
                    j.reap_cause(r)?.is_some()
                }
                _ => true,
            };
            if !candidate {
                skipped.push(i);
                continue;
            }
            judge = None;
            let r = attempt(ctx, &view, guard, req, &keys[i], Join::No)?;
            if r.outcome.exit_code() == 0 {
                return Ok(Claimed::Taken(r));
            }
            refusals.push((i, r));
        }
        pos = end;
        chunk = (chunk * 4).min(LAST_CHUNK);
    }
    drop(judge);
    // Nothing could be taken: the keys skipped get their attempt now, for their refusal.
    // They were judged in this scope and only this command writes in it, so each is
    // refused; should one be granted after all, it is the answer, as it would have been.
    for i in skipped {
        let r = attempt(ctx, &view, guard, req, &keys[i], Join::No)?;
        if r.outcome.exit_code() == 0 {
            return Ok(Claimed::Taken(r));
        }
        refusals.push((i, r));
    }
    // Every key damaged: nothing else to report but the damage, as for one key.
    if refusals.is_empty()
        && let Some((i, Slot::Corrupt { path, problem })) = damaged.first().cloned()
    {
        return Err(crate::error::Error::Corrupt {
            key: keys[i].clone(),
            path,
            problem,
        });
    }
    for (i, _) in damaged {
        refusals.push((
            i,
            CheckoutReport::new(ctx.now(), &keys[i], Outcome::Corrupt, None),
        ));
    }
    refusals.sort_by_key(|(i, _)| *i);
    let refused: Vec<CheckoutReport> = refusals.into_iter().map(|(_, r)| r).collect();
    let ev = one_deny(ctx, req, "checkout --any", &refused, view.denied.take());
    store.audit(guard, &ev)?;
    Ok(Claimed::Refused(refused))
}

fn queue_is_empty(q: &Queue) -> bool {
    q.is_empty()
}

/// The one `deny` of a refused `--any` (or `--next`, as `command` says): `key`, `holder` and `reason` are those of the
/// first key's refusal (as its own `deny` had them); `detail` says how many keys were
/// refused and why, naming the first few.
pub(super) fn one_deny(
    ctx: &Ctx,
    req: &Request,
    command: &str,
    refused: &[CheckoutReport],
    denied: Vec<AuditEvent>,
) -> AuditEvent {
    let first = &refused[0].key;
    let mut ev = denied
        .iter()
        .find(|e| e.key == *first)
        .cloned()
        .unwrap_or_else(|| ctx.agent_event(Event::Deny, first, &req.agent));
    let why = |r: &CheckoutReport| -> String {
        let own = denied.iter().find(|e| e.key == r.key);
        match r.outcome {
            Outcome::Frozen => "frozen".into(),
            Outcome::Conflict => match (&r.reserved_for, own.and_then(|e| e.holder.as_ref())) {
                (Some(res), _) if r.checkout.is_none() => format!("reserved for {}", res.agent),
                (_, Some(h)) => format!("held by {h}"),
                _ => "held".into(),
            },
            o => serde_json::to_value(o)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "refused".into()),
        }
    };
    let mut named: Vec<String> = refused
        .iter()
        .take(NAMED_IN_DENY)
        .map(|r| format!("{} ({})", r.key, why(r)))
        .collect();
    if refused.len() > NAMED_IN_DENY {
        named.push(format!("and {} more", refused.len() - NAMED_IN_DENY));
    }
    let frozen = refused
        .iter()
        .filter(|r| r.outcome == Outcome::Frozen)
        .count();
    let damaged = refused
        .iter()
        .filter(|r| r.outcome == Outcome::Corrupt)
        .count();
    ev.detail = Some(format!(
        "{command}: none of {} key{} could be taken ({} frozen, {} held or reserved{}): {}",
        refused.len(),
        if refused.len() == 1 { "" } else { "s" },
        frozen,
        refused.len() - frozen - damaged,
        match damaged {
            0 => String::new(),
            n => format!(", {n} damaged"),
        },
        named.join(", ")
    ));
    ev
}

/// The store as `checkout --any`'s attempts see it, inside one scope: what was read in
/// bulk (records, queues) or once (registry entries, freezes) is served again until this
/// view writes it, and `deny` events are kept (in [`Claiming::denied`]) instead of
/// written. Everything else goes to the store.
pub(super) struct Claiming<'s> {
    inner: &'s dyn Store,
    slots: RefCell<HashMap<String, Slot>>,
    queues: RefCell<HashMap<String, Queue>>,
    agents: RefCell<HashMap<String, Option<AgentEntry>>>,
    freezes: RefCell<Option<Vec<Freeze>>>,
    pub(super) denied: RefCell<Vec<AuditEvent>>,
}

impl<'s> Claiming<'s> {
    pub(super) fn new(inner: &'s dyn Store) -> Self {
        Claiming {
            inner,
            slots: Default::default(),
            queues: Default::default(),
            agents: Default::default(),
            freezes: Default::default(),
            denied: Default::default(),
        }
    }

    /// Read `keys` in bulk and keep what was read.
    pub(super) fn read_ahead(&self, g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        let read = self.inner.read_many(g, keys)?;
        let mut slots = self.slots.borrow_mut();
        let mut queues = self.queues.borrow_mut();
        for (k, (slot, queue)) in keys.iter().zip(&read) {
            slots.insert(k.clone(), slot.clone());
            queues.insert(k.clone(), queue.clone());
        }
        Ok(read)
    }

    fn forget_key(&self, key: &str) {
        self.slots.borrow_mut().remove(key);
    }
}

impl Store for Claiming<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn as_file(&self) -> Option<&FileStore> {
        self.inner.as_file()
    }
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    fn share_config(&self, cfg: &crate::config::Config) {
        self.inner.share_config(cfg)
    }
    fn config(&self) -> Result<crate::config::Config> {
        self.inner.config()
    }

    fn read(&self, key: &str) -> Result<Slot> {
        if let Some(s) = self.slots.borrow().get(key) {
            return Ok(s.clone());
        }
        self.inner.read(key)
    }
    fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        self.inner.read_slots(key)
    }
    fn read_many(&self, g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        self.read_ahead(g, keys)
    }
    fn scan(&self) -> Result<Vec<Slot>> {
        self.inner.scan()
    }
    fn held_by(&self, agent: &str, subagents: bool) -> Result<Vec<Record>> {
        self.inner.held_by(agent, subagents)
    }
    fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        self.inner.path_index()
    }
    fn read_queue(&self, key: &str) -> Result<Queue> {
        if let Some(q) = self.queues.borrow().get(key) {
            return Ok(q.clone());
        }
        self.inner.read_queue(key)
    }
    fn scan_queues(&self) -> Result<Vec<Queue>> {
        self.inner.scan_queues()
    }
    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        if let Some(e) = self.agents.borrow().get(id) {
            return Ok(e.clone());
        }
        let e = self.inner.read_agent(id)?;
        self.agents.borrow_mut().insert(id.to_string(), e.clone());
        Ok(e)
    }
    fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        self.inner.scan_agents()
    }
    fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        self.inner.read_ended(key)
    }
    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        self.inner.last_notes(key, n)
    }
    fn history(&self, key: &str, n: usize) -> Result<History> {
        self.inner.history(key, n)
    }
    fn freezes(&self) -> Result<Vec<Freeze>> {
        if let Some(f) = self.freezes.borrow().as_ref() {
            return Ok(f.clone());
        }
        let f = self.inner.freezes()?;
        *self.freezes.borrow_mut() = Some(f.clone());
        Ok(f)
    }
    fn frozen(&self, key: &str, now: &crate::clock::Time) -> Result<Option<Freeze>> {
        // Every store answers this from the list of freezes; read once here.
        Ok(self
            .freezes()?
            .into_iter()
            .filter(|f| f.active(now) && f.covers(key))
            .max_by_key(|f| f.until))
    }
    fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        self.inner.unread(agent)
    }
    fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        self.inner.mark_read(agent, id)
    }
    fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        self.inner.message(agent, id)
    }
    fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        self.inner.audit_events(each)
    }
    fn follow_audit(&self) -> Result<Box<dyn AuditFollow + '_>> {
        self.inner.follow_audit()
    }
    fn changes(&self) -> Result<Box<dyn Changes + '_>> {
        self.inner.changes()
    }
    fn inbox_changes(&self, agent: &str) -> Result<Box<dyn Changes + '_>> {
        self.inner.inbox_changes(agent)
    }
    fn lock_watcher(&self, agent: &str) -> Result<Option<Held>> {
        self.inner.lock_watcher(agent)
    }

    fn begin(&self, wait: bool) -> Result<Option<Guard>> {
        self.inner.begin(wait)
    }
    fn commit(&self, g: Guard) -> Result<()> {
        self.inner.commit(g)
    }

    fn next_token(&self, g: &Guard) -> Result<u64> {
        self.inner.next_token(g)
    }
    fn grant_token(&self, g: &Guard, key: &str, n: usize) -> Result<(u64, History)> {
        self.inner.grant_token(g, key, n)
    }
    fn insert(&self, g: &Guard, record: &Record) -> Result<()> {
        self.forget_key(&record.key);
        self.inner.insert(g, record)
    }
    fn replace(&self, g: &Guard, record: &Record) -> Result<()> {
        self.forget_key(&record.key);
        self.inner.replace(g, record)
    }
    fn remove(
        &self,
        g: &Guard,
        key: &str,
        slot: Option<u32>,
        paths: Option<&[String]>,
    ) -> Result<()> {
        self.forget_key(key);
        self.inner.remove(g, key, slot, paths)
    }
    fn audit(&self, g: &Guard, event: &AuditEvent) -> Result<()> {
        if event.is(Event::Deny) {
            self.denied.borrow_mut().push(event.clone());
            return Ok(());
        }
        self.inner.audit(g, event)
    }
    fn whole_project(&self, g: &Guard) -> Result<()> {
        self.inner.whole_project(g)
    }
    fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()> {
        self.queues.borrow_mut().remove(&q.key);
        self.inner.write_queue(g, q)
    }
    fn send(&self, g: &Guard, msg: &Message) -> Result<()> {
        self.inner.send(g, msg)
    }
    fn record_delivery(&self, g: &Guard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        self.inner.record_delivery(g, agent, id, d)
    }
    fn lock_agent(&self, g: &Guard, id: &str, wait: bool) -> Result<bool> {
        self.inner.lock_agent(g, id, wait)
    }
    fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()> {
        self.agents.borrow_mut().remove(&entry.id);
        self.inner.write_agent(g, entry)
    }
    fn register_new(&self, g: &Guard, entry: &AgentEntry) -> Result<Option<AgentEntry>> {
        self.agents.borrow_mut().remove(&entry.id);
        self.inner.register_new(g, entry)
    }
    fn remove_agent(&self, g: &Guard, id: &str) -> Result<()> {
        self.agents.borrow_mut().remove(id);
        self.inner.remove_agent(g, id)
    }
    fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()> {
        self.inner.write_ended(g, ended)
    }
    fn append_note(&self, g: &Guard, key: &str, note: &Note) -> Result<()> {
        self.inner.append_note(g, key, note)
    }
    fn write_freeze(&self, g: &Guard, f: &Freeze) -> Result<()> {
        *self.freezes.borrow_mut() = None;
        self.inner.write_freeze(g, f)
    }
    fn remove_freeze(&self, g: &Guard, pattern: &str) -> Result<Option<Freeze>> {
        *self.freezes.borrow_mut() = None;
        self.inner.remove_freeze(g, pattern)
    }
    fn sweep_turn(
        &self,
        g: &Guard,
        now: &crate::clock::Time,
        every: std::time::Duration,
    ) -> Result<bool> {
        self.inner.sweep_turn(g, now, every)
    }
    fn backlog_add(&self, g: &Guard, keys: &[String]) -> Result<usize> {
        self.inner.backlog_add(g, keys)
    }
    fn backlog_remove(&self, g: &Guard, keys: &[String]) -> Result<Vec<String>> {
        self.inner.backlog_remove(g, keys)
    }
    fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        self.inner.backlog_ready(after, n)
    }
    fn backlog_take(&self, g: &Guard, after: Option<u64>) -> Result<Option<BacklogEntry>> {
        self.inner.backlog_take(g, after)
    }
    fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        self.inner.backlog_claimed()
    }
    fn backlog_mark(&self, g: &Guard, key: &str, claim: Option<&BacklogClaim>) -> Result<()> {
        self.inner.backlog_mark(g, key, claim)
    }
    fn backlog_rechecked(&self, g: &Guard, recheck: Option<Time>) -> Result<()> {
        self.inner.backlog_rechecked(g, recheck)
    }
    fn backlog_summary(&self, holders: bool) -> Result<BacklogSummary> {
        self.inner.backlog_summary(holders)
    }
}

//! A store that keeps every change in memory and writes nothing: what `why` makes the
//! checkout's own decision ([`super::take::decided`]) on, so that `why KEY` answers with
//! the decision `checkout KEY` would make at that moment, and changes nothing. Reading
//! the key's state for a decision writes (it ends checkouts that have ended and settles
//! queues, telling the waiters it serves): here those changes stay in memory.
//!
//! Reads go to the real store and see the changes made so far (a take-over ends a
//! checkout, then the queue is settled against what is left); changes stay here and are
//! dropped with the store. No scope is entered: the answer is a read, true when it is
//! made, like every other read. Messages are not pushed into sessions.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Duration;

use crate::error::Result;
use crate::store::{
    AgentEntry, AuditEvent, AuditFollow, BacklogClaim, BacklogEntry, BacklogSummary, Changes,
    Delivery, Ended, FileStore, Freeze, Guard, Held, Message, Note, Queue, Record, Slot, Store,
};

thread_local! {
    /// This thread decides without acting: nothing it sends is pushed.
    static DRY: Cell<bool> = const { Cell::new(false) };
}

/// Is this thread deciding in a dry run (nothing to push)?
pub(crate) fn active() -> bool {
    DRY.with(Cell::get)
}

/// A record's place: its key and, for a key with slots, its slot.
type Place = (String, Option<u32>);

/// A dry run over `inner`.
pub struct DryRun<'a> {
    inner: &'a dyn Store,
    /// Records changed: `None` removed. By key and slot.
    records: RefCell<HashMap<Place, Option<Record>>>,
    queues: RefCell<HashMap<String, Queue>>,
    agents: RefCell<HashMap<String, Option<AgentEntry>>>,
    ended: RefCell<HashMap<String, Ended>>,
    freezes: RefCell<Option<Vec<Freeze>>>,
}

/// The dry guard: a scope of nothing.
struct NoScope;

impl<'a> DryRun<'a> {
    pub fn new(inner: &'a dyn Store) -> DryRun<'a> {
        DryRun {
            inner,
            records: RefCell::default(),
            queues: RefCell::default(),
            agents: RefCell::default(),
            ended: RefCell::default(),
            freezes: RefCell::default(),
        }
    }

    /// Run `f` on this store with a guard of its own, nothing pushed meanwhile.
    pub fn run<T>(&self, f: impl FnOnce(&dyn Store, &Guard) -> Result<T>) -> Result<T> {
        struct Reset(bool);
        impl Drop for Reset {
            fn drop(&mut self) {
                DRY.with(|d| d.set(self.0));
            }
        }
        let _reset = Reset(DRY.with(|d| d.replace(true)));
        f(self, &Guard::new(NoScope))
    }

    /// A slot as the changes so far leave it.
    fn overlaid(&self, slot: Slot) -> Option<Slot> {
        let Slot::Held(r) = &slot else {
            return Some(slot);
        };
        match self.records.borrow().get(&(r.key.clone(), r.slot)) {
            Some(changed) => changed.clone().map(Slot::Held),
            None => Some(slot),
        }
    }

    /// The records written here that the real store does not have (`seen`).
    fn added(&self, seen: &[Slot], keep: impl Fn(&Record) -> bool) -> Vec<Slot> {
        let present = |k: &Place| {
            seen.iter()
                .any(|s| s.as_held().is_some_and(|r| (&r.key, r.slot) == (&k.0, k.1)))
        };
        let mut out: Vec<Slot> = self
            .records
            .borrow()
            .iter()
            .filter(|(k, r)| !present(k) && r.as_ref().is_some_and(&keep))
            .filter_map(|(_, r)| r.clone().map(Slot::Held))
            .collect();
        out.sort_by(|a, b| {
            let (a, b) = (a.as_held().unwrap(), b.as_held().unwrap());
            (&a.key, a.slot).cmp(&(&b.key, b.slot))
        });
        out
    }
}

impl Store for DryRun<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn as_file(&self) -> Option<&FileStore> {
        None
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
        if let Some(r) = self.records.borrow().get(&(key.to_string(), None)) {
            return Ok(r.clone().map_or(Slot::Free, Slot::Held));
        }
        self.inner.read(key)
    }
    fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        let read = self.inner.read_slots(key)?;
        let mut out: Vec<Slot> = read
            .iter()
            .cloned()
            .filter_map(|s| self.overlaid(s))
            .collect();
        out.extend(self.added(&read, |r| r.key == key && r.slot.is_some()));
        out.sort_by_key(|s| s.as_held().and_then(|r| r.slot));
        Ok(out)
    }
    fn scan(&self) -> Result<Vec<Slot>> {
        let read = self.inner.scan()?;
        let mut out: Vec<Slot> = read
            .iter()
            .cloned()
            .filter_map(|s| self.overlaid(s))
            .collect();
        out.extend(self.added(&read, |_| true));
        Ok(out)
    }
    fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        // Entries whose record has gone here too are fine: readers judge the record.
        let mut out = self.inner.path_index()?;
        for r in self.records.borrow().values().flatten() {
            if !r.paths.is_empty() && !out.iter().any(|(k, p)| *k == r.key && *p == r.paths) {
                out.push((r.key.clone(), r.paths.clone()));
            }
        }
        Ok(out)
    }
    fn read_queue(&self, key: &str) -> Result<Queue> {
        if let Some(q) = self.queues.borrow().get(key) {
            return Ok(q.clone());
        }
        self.inner.read_queue(key)
    }
    fn read_many(&self, _g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        keys.iter()
            .map(|k| Ok((self.read(k)?, self.read_queue(k)?)))
            .collect()
    }
    fn scan_queues(&self) -> Result<Vec<Queue>> {
        let changed = self.queues.borrow();
        let mut out: Vec<Queue> = self
            .inner
            .scan_queues()?
            .into_iter()
            .filter(|q| !changed.contains_key(&q.key))
            .chain(changed.values().filter(|q| !q.is_empty()).cloned())
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        if let Some(e) = self.agents.borrow().get(id) {
            return Ok(e.clone());
        }
        self.inner.read_agent(id)
    }
    fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        let changed = self.agents.borrow();
        let mut out: Vec<AgentEntry> = self
            .inner
            .scan_agents()?
            .into_iter()
            .filter(|e| !changed.contains_key(&e.id))
            .chain(changed.values().flatten().cloned())
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
    fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        if let Some(e) = self.ended.borrow().get(key) {
            return Ok(Some(e.clone()));
        }
        self.inner.read_ended(key)
    }
    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        self.inner.last_notes(key, n)
    }
    fn freezes(&self) -> Result<Vec<Freeze>> {
        match self.freezes.borrow().as_ref() {
            Some(f) => Ok(f.clone()),
            None => self.inner.freezes(),
        }
    }
    fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        self.inner.unread(agent)
    }
    fn mark_read(&self, _agent: &str, _id: &str) -> Result<bool> {
        Ok(false)
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
    fn lock_watcher(&self, _agent: &str) -> Result<Option<Held>> {
        Ok(None)
    }

    fn begin(&self, _wait: bool) -> Result<Option<Guard>> {
        Ok(Some(Guard::new(NoScope)))
    }
    fn commit(&self, _g: Guard) -> Result<()> {
        Ok(())
    }

    fn next_token(&self, _g: &Guard) -> Result<u64> {
        // Never published: any number will do.
        Ok(0)
    }
    fn insert(&self, _g: &Guard, record: &Record) -> Result<()> {
        self.replace(_g, record)
    }
    fn replace(&self, _g: &Guard, record: &Record) -> Result<()> {
        self.records
            .borrow_mut()
            .insert((record.key.clone(), record.slot), Some(record.clone()));
        Ok(())
    }
    fn remove(
        &self,
        _g: &Guard,
        key: &str,
        slot: Option<u32>,
        _paths: Option<&[String]>,
    ) -> Result<()> {
        self.records
            .borrow_mut()
            .insert((key.to_string(), slot), None);
        Ok(())
    }
    fn audit(&self, _g: &Guard, _event: &AuditEvent) -> Result<()> {
        Ok(())
    }
    fn write_queue(&self, _g: &Guard, q: &Queue) -> Result<()> {
        let q = if q.is_empty() {
            Queue::empty(&q.key)
        } else {
            q.clone()
        };
        self.queues.borrow_mut().insert(q.key.clone(), q);
        Ok(())
    }
    fn send(&self, _g: &Guard, _msg: &Message) -> Result<()> {
        Ok(())
    }
    fn record_delivery(&self, _g: &Guard, _a: &str, _id: &str, _d: &Delivery) -> Result<()> {
        Ok(())
    }
    fn write_agent(&self, _g: &Guard, entry: &AgentEntry) -> Result<()> {
        self.agents
            .borrow_mut()
            .insert(entry.id.clone(), Some(entry.clone()));
        Ok(())
    }
    fn remove_agent(&self, _g: &Guard, id: &str) -> Result<()> {
        self.agents.borrow_mut().insert(id.to_string(), None);
        Ok(())
    }
    fn write_ended(&self, _g: &Guard, ended: &Ended) -> Result<()> {
        self.ended
            .borrow_mut()
            .insert(ended.key.clone(), ended.clone());
        Ok(())
    }
    fn append_note(&self, _g: &Guard, _key: &str, _note: &Note) -> Result<()> {
        Ok(())
    }
    fn write_freeze(&self, _g: &Guard, f: &Freeze) -> Result<()> {
        let mut all = self.freezes()?;
        all.retain(|x| x.pattern != f.pattern);
        all.push(f.clone());
        *self.freezes.borrow_mut() = Some(all);
        Ok(())
    }
    fn remove_freeze(&self, _g: &Guard, pattern: &str) -> Result<Option<Freeze>> {
        let mut all = self.freezes()?;
        let gone = all.iter().position(|f| f.pattern == pattern);
        let gone = gone.map(|i| all.remove(i));
        *self.freezes.borrow_mut() = Some(all);
        Ok(gone)
    }
    fn sweep_turn(&self, _g: &Guard, _now: &crate::clock::Time, _e: Duration) -> Result<bool> {
        Ok(false)
    }
    fn backlog_add(&self, _g: &Guard, _keys: &[String]) -> Result<usize> {
        Ok(0)
    }
    fn backlog_remove(&self, _g: &Guard, _keys: &[String]) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        self.inner.backlog_ready(after, n)
    }
    fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        self.inner.backlog_claimed()
    }
    fn backlog_mark(&self, _g: &Guard, _key: &str, _c: Option<&BacklogClaim>) -> Result<()> {
        Ok(())
    }
    fn backlog_rechecked(&self, _g: &Guard, _r: Option<crate::clock::Time>) -> Result<()> {
        Ok(())
    }
    fn backlog_summary(&self, holders: bool) -> Result<BacklogSummary> {
        self.inner.backlog_summary(holders)
    }
}

//! The [`Store`] trait, answered by the methods of [`PgStore`].

use super::*;
use crate::store::{BacklogClaim, BacklogEntry, BacklogSummary, History};

impl Store for PgStore {
    fn describe(&self) -> String {
        PgStore::describe(self)
    }
    fn share_config(&self, cfg: &Config) {
        PgStore::share_config(self, cfg)
    }
    fn config(&self) -> Result<Config> {
        PgStore::config(self)
    }
    fn read(&self, key: &str) -> Result<Slot> {
        PgStore::read(self, key)
    }
    fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        PgStore::read_slots(self, key)
    }
    fn scan(&self) -> Result<Vec<Slot>> {
        PgStore::scan(self)
    }
    fn read_queue(&self, key: &str) -> Result<Queue> {
        PgStore::read_queue(self, key)
    }
    fn read_many(&self, g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        PgStore::read_many(self, pg(g), keys)
    }
    fn scan_queues(&self) -> Result<Vec<Queue>> {
        PgStore::scan_queues(self)
    }
    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        PgStore::read_agent(self, id)
    }
    fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        PgStore::scan_agents(self)
    }
    fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        PgStore::read_ended(self, key)
    }
    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        PgStore::last_notes(self, key, n)
    }
    fn history(&self, key: &str, n: usize) -> Result<History> {
        PgStore::history(self, key, n)
    }
    fn freezes(&self) -> Result<Vec<Freeze>> {
        PgStore::freezes(self)
    }
    fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        PgStore::unread(self, agent)
    }
    fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        PgStore::mark_read(self, agent, id)
    }
    fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        PgStore::message(self, agent, id)
    }
    fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        PgStore::audit_events(self, each)
    }
    fn follow_audit(&self) -> Result<Box<dyn crate::store::AuditFollow + '_>> {
        Ok(Box::new(PgStore::follow_audit(self)?))
    }
    fn changes(&self) -> Result<Box<dyn crate::store::Changes + '_>> {
        Ok(Box::new(PgStore::changes(self)?))
    }
    fn lock_watcher(&self, agent: &str) -> Result<Option<Held>> {
        Ok(PgStore::lock_watcher(self, agent)?.map(|l| Box::new(l) as Held))
    }
    fn begin(&self, wait: bool) -> Result<Option<Guard>> {
        Ok(PgStore::begin(self, wait)?.map(Guard::new))
    }
    fn begin_scoped(&self, locks: &[String], wait: bool) -> Result<Option<Guard>> {
        Ok(PgStore::begin_scoped(self, locks, wait)?.map(Guard::new))
    }
    fn begin_claim(&self, locks: &[String]) -> Result<Option<Guard>> {
        Ok(PgStore::begin_claim(self, locks)?.map(Guard::new))
    }
    fn commit(&self, g: Guard) -> Result<()> {
        PgStore::commit(self, g.into_inner::<PgGuard>())
    }
    fn next_token(&self, g: &Guard) -> Result<u64> {
        // A scope that must run again draws no token it would waste.
        if pg(g).escalated.get() {
            return Err(crate::error::Error::Escalate);
        }
        PgStore::next_token(self, pg(g))
    }
    fn grant_token(&self, g: &Guard, key: &str, n: usize) -> Result<(u64, History)> {
        if pg(g).escalated.get() {
            return Err(crate::error::Error::Escalate);
        }
        PgStore::grant_token(self, key, n)
    }
    fn insert(&self, g: &Guard, record: &Record) -> Result<()> {
        self.allow(pg(g), Some(&record.key), record.paths.is_empty())?;
        PgStore::insert(self, pg(g), record)
    }
    fn replace(&self, g: &Guard, record: &Record) -> Result<()> {
        self.allow(pg(g), Some(&record.key), record.paths.is_empty())?;
        PgStore::replace(self, pg(g), record)
    }
    fn remove(
        &self,
        g: &Guard,
        key: &str,
        slot: Option<u32>,
        paths: Option<&[String]>,
    ) -> Result<()> {
        self.allow(pg(g), Some(key), paths.is_some_and(<[String]>::is_empty))?;
        PgStore::remove(self, pg(g), key, slot)
    }
    fn audit(&self, g: &Guard, event: &AuditEvent) -> Result<()> {
        PgStore::audit(self, pg(g), event)
    }
    fn whole_project(&self, g: &Guard) -> Result<()> {
        self.allow(pg(g), None, false)
    }
    fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()> {
        // Queues are judged together (handoffs, deadlocks): only under the project's lock.
        self.allow(pg(g), None, false)?;
        PgStore::write_queue(self, pg(g), q)
    }
    fn send(&self, g: &Guard, msg: &Message) -> Result<()> {
        self.allow(pg(g), None, false)?;
        PgStore::send(self, pg(g), msg)
    }
    fn record_delivery(&self, g: &Guard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        PgStore::record_delivery(self, pg(g), agent, id, d)
    }
    fn lock_agent(&self, g: &Guard, id: &str, wait: bool) -> Result<bool> {
        PgStore::lock_agent(self, pg(g), id, wait)
    }
    fn register_new(&self, g: &Guard, entry: &AgentEntry) -> Result<Option<AgentEntry>> {
        self.allow(pg(g), Some(&crate::store::agent_lock(&entry.id)), true)?;
        PgStore::register_new(self, pg(g), entry)
    }
    fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()> {
        self.allow(pg(g), Some(&crate::store::agent_lock(&entry.id)), true)?;
        PgStore::write_agent(self, pg(g), entry)
    }
    fn remove_agent(&self, g: &Guard, id: &str) -> Result<()> {
        self.allow(pg(g), None, false)?;
        PgStore::remove_agent(self, pg(g), id)
    }
    fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()> {
        self.allow(pg(g), Some(&ended.key), true)?;
        PgStore::write_ended(self, pg(g), ended)
    }
    fn append_note(&self, g: &Guard, key: &str, note: &Note) -> Result<()> {
        self.allow(pg(g), Some(key), true)?;
        PgStore::append_note(self, pg(g), key, note)
    }
    fn write_freeze(&self, g: &Guard, f: &Freeze) -> Result<()> {
        self.allow(pg(g), None, false)?;
        PgStore::write_freeze(self, pg(g), f)
    }
    fn backlog_add(&self, g: &Guard, keys: &[String]) -> Result<usize> {
        self.allow(pg(g), None, false)?;
        PgStore::backlog_add(self, pg(g), keys)
    }
    fn backlog_remove(&self, g: &Guard, keys: &[String]) -> Result<Vec<String>> {
        // One key's own row: allowed in that key's scope (`release --done`).
        match keys {
            [one] => self.allow(pg(g), Some(one), true)?,
            _ => self.allow(pg(g), None, false)?,
        }
        PgStore::backlog_remove(self, pg(g), keys)
    }
    fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        PgStore::backlog_ready(self, after, n)
    }
    fn backlog_take(&self, g: &Guard, after: Option<u64>) -> Result<Option<BacklogEntry>> {
        PgStore::backlog_take(self, pg(g), after)
    }
    fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        PgStore::backlog_claimed(self)
    }
    fn backlog_mark(&self, g: &Guard, key: &str, claim: Option<&BacklogClaim>) -> Result<()> {
        self.allow(pg(g), Some(key), true)?;
        PgStore::backlog_mark(self, pg(g), key, claim)
    }
    fn sweep_turn(&self, _g: &Guard, now: &Time, every: std::time::Duration) -> Result<bool> {
        PgStore::sweep_turn(self, now, every)
    }
    fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        PgStore::path_index(self)
    }
    fn held_by(&self, agent: &str, subagents: bool) -> Result<Vec<Record>> {
        PgStore::held_by(self, agent, subagents)
    }
    fn backlog_rechecked(&self, _g: &Guard, _recheck: Option<Time>) -> Result<()> {
        // The earliest recheck is read from the claims themselves.
        Ok(())
    }
    fn backlog_summary(&self, _holders: bool) -> Result<BacklogSummary> {
        // One statement either way: the claimers cost a probe each while few.
        PgStore::backlog_summary(self)
    }
    fn remove_freeze(&self, g: &Guard, pattern: &str) -> Result<Option<Freeze>> {
        self.allow(pg(g), None, false)?;
        PgStore::remove_freeze(self, pg(g), pattern)
    }
}

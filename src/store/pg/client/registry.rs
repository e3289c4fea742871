//! The agent registry (`agents`) and the lock of each agent's watcher.

use super::*;

impl PgStore {
    pub fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        let in_tx = self.conn.in_tx.get();
        if in_tx && let Some(e) = self.conn.cache.borrow().agents.get(id) {
            return Ok(e.clone());
        }
        let entry = self
            .one::<AgentEntry>(
                "read an agent",
                "SELECT data::text FROM {s}.agents WHERE id = $1",
                &[(&id, Type::TEXT)],
            )?
            .filter(|e| e.id == id);
        if in_tx {
            let mut cache = self.conn.cache.borrow_mut();
            cache.agents.insert(id.to_string(), entry.clone());
        }
        Ok(entry)
    }

    pub fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        let mut out: Vec<AgentEntry> =
            self.all("read the agents", "SELECT data::text FROM {s}.agents", &[])?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// One `heartbeat --watch` per agent: a session-scoped advisory lock, which ends
    /// with the watcher's connection (never a checkout's lock). `None`: another
    /// watcher has it.
    pub fn lock_watcher(&self, agent: &str) -> Result<Option<WatcherLock>> {
        let id = lock_id(&["watcher", &self.schema, agent]);
        let rows = self.rows(
            "lock the agent's watcher",
            "SELECT pg_try_advisory_lock($1)",
            &[(&id, Type::INT8)],
        )?;
        Ok(rows
            .first()
            .is_some_and(|r| r.get::<_, bool>(0))
            .then(|| WatcherLock {
                conn: self.conn.clone(),
                id,
            }))
    }

    pub fn write_agent(&self, _g: &PgGuard, entry: &AgentEntry) -> Result<()> {
        self.conn.cache.borrow_mut().agents.remove(&entry.id);
        let data = to_json(entry, "agent entry")?;
        self.exec(
            "write an agent entry",
            "INSERT INTO {s}.agents (id, data) VALUES ($1, $2::jsonb) \
             ON CONFLICT (id) DO UPDATE SET data = excluded.data RETURNING 1",
            &[(&entry.id, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn remove_agent(&self, _g: &PgGuard, id: &str) -> Result<()> {
        self.conn.cache.borrow_mut().agents.remove(id);
        self.exec(
            "remove an agent entry",
            "DELETE FROM {s}.agents WHERE id = $1 RETURNING 1",
            &[(&id, Type::TEXT)],
        )
        .map(|_| ())
    }
}

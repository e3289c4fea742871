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

    /// See [`crate::store::Store::sweep_turn`]: one statement takes the turn (or finds
    /// it taken), so racing beats never both get it.
    pub fn sweep_turn(&self, now: &Time, every: std::time::Duration) -> Result<bool> {
        let every = crate::duration::to_chrono(every);
        let micros = |t: Time| t.timestamp_micros();
        let (now, before, after) = (micros(*now), micros(*now - every), micros(*now + every));
        let won = self.exec(
            "take the sweep's turn",
            "INSERT INTO {s}.sweeps (one, at) VALUES (true, to_timestamp($1::bigint / 1000000.0)) \
             ON CONFLICT (one) DO UPDATE SET at = excluded.at \
             WHERE {s}.sweeps.at <= to_timestamp($2::bigint / 1000000.0) \
                OR {s}.sweeps.at > to_timestamp($3::bigint / 1000000.0) \
             RETURNING 1",
            &[
                (&now, Type::INT8),
                (&before, Type::INT8),
                (&after, Type::INT8),
            ],
        )?;
        Ok(won > 0)
    }

    /// One `heartbeat --watch` per agent: a session-scoped advisory lock, which ends
    /// with the watcher's connection (never a checkout's lock). `None`: another
    /// watcher has it.
    ///
    /// Taken on the session URL's connection when there is one. It is only taken in the
    /// server session the connection was given when it connected: a statement that runs
    /// in another went through a pooler in transaction mode, where the lock would stay
    /// with a pooled session after the watcher ends (and be "held" by whoever gets that
    /// session next), so the watcher is refused, naming the fix. (A pooler that happens
    /// to hand back the same session cannot be told from a direct connection.)
    pub fn lock_watcher(&self, agent: &str) -> Result<Option<WatcherLock>> {
        let id = lock_id(&["watcher", &self.schema, agent]);
        let conn = self.session_conn()?;
        let pid = conn.pid.get();
        let rows = conn.run("lock the agent's watcher", |c| {
            c.query_typed(
                "SELECT CASE WHEN pg_backend_pid() = $2 THEN pg_try_advisory_lock($1) END",
                &[(&id, Type::INT8), (&pid, Type::INT4)],
            )
        })?;
        match rows.first().and_then(|r| r.get::<_, Option<bool>>(0)) {
            None => Err(self.not_a_session(
                &conn,
                "`heartbeat --watch` holds the agent's watcher lock for as long as it runs",
            )),
            Some(false) => Ok(None),
            Some(true) => Ok(Some(WatcherLock { conn, id })),
        }
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

    /// See [`crate::store::Store::register_new`]: the entry is read, and when there is
    /// none (or one that does not decode, which counts as none, as [`Self::read_agent`]
    /// reads it) `entry` is written with the next statement on `agents`, or the COMMIT:
    /// nothing waits for its answer, since no one writes an entry without its lock, which
    /// this scope holds. It is kept for the transaction, as a read is.
    pub fn register_new(&self, _g: &PgGuard, entry: &AgentEntry) -> Result<Option<AgentEntry>> {
        if let Some(e) = self.read_agent(&entry.id)? {
            return Ok(Some(e));
        }
        let data = to_json(entry, "agent entry")?;
        self.conn.put_off(
            "agents",
            format!(
                "INSERT INTO {}.agents (id, data) VALUES ({}, {}::jsonb) \
             ON CONFLICT (id) DO UPDATE SET data = excluded.data",
                self.schema,
                super::literal(&entry.id),
                super::literal(&data),
            ),
        );
        let mut cache = self.conn.cache.borrow_mut();
        cache.agents.insert(entry.id.clone(), Some(entry.clone()));
        Ok(None)
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

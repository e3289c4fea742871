//! The audit log (`audit`): reading it, following it, and appending to it (written with the COMMIT).

use super::*;

/// [`PgStore::follow_audit`].
pub struct PgAuditFollow<'a> {
    store: &'a PgStore,
    after: i64,
    /// The connection that listens; `None`: none could (it polls).
    listening: Option<Rc<Conn>>,
}

impl PgAuditFollow<'_> {
    /// Events committed since the last call (all on the first), oldest first, waiting up
    /// to `timeout` for some when there are none yet.
    pub fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>> {
        let events = self.fetch()?;
        if !events.is_empty() {
            return Ok(events);
        }
        if self
            .store
            .wait_notification(self.listening.as_deref(), timeout)
        {
            return self.fetch();
        }
        Ok(Vec::new())
    }

    pub(super) fn fetch(&mut self) -> Result<Vec<AuditEvent>> {
        let rows = self.store.rows(
            "read the audit log",
            "SELECT id, data::text FROM {s}.audit WHERE id > $1 ORDER BY id",
            &[(&self.after, Type::INT8)],
        )?;
        if let Some(last) = rows.last() {
            self.after = last.get(0);
        }
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(1)).ok())
            .collect())
    }
}

impl crate::store::AuditFollow for PgAuditFollow<'_> {
    fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>> {
        PgAuditFollow::next(self, timeout)
    }
}

impl PgStore {
    /// Every event, oldest first; rows that do not decode are counted.
    pub fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        let mut bad = 0;
        let mut after = 0i64;
        // In pages, so a long log is never held whole.
        loop {
            let rows = self.rows(
                "read the audit log",
                "SELECT id, data::text FROM {s}.audit WHERE id > $1 ORDER BY id LIMIT 10000",
                &[(&after, Type::INT8)],
            )?;
            let Some(last) = rows.last() else {
                return Ok(bad);
            };
            after = last.get(0);
            for r in &rows {
                match serde_json::from_str(r.get::<_, &str>(1)) {
                    Ok(ev) => each(ev),
                    Err(_) => bad += 1,
                }
            }
        }
    }

    /// Follow the audit log: `LISTEN` first, so nothing committed after this call is
    /// missed.
    pub fn follow_audit(&self) -> Result<PgAuditFollow<'_>> {
        let listening = self.listen(&self.channel("audit"))?;
        Ok(PgAuditFollow {
            store: self,
            after: 0,
            listening,
        })
    }

    pub fn audit(&self, g: &PgGuard, ev: &AuditEvent) -> Result<()> {
        g.audit.borrow_mut().push(to_json(ev, "audit event")?);
        Ok(())
    }
}

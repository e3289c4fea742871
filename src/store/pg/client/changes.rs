//! Waiting for changes: LISTEN on the project's channel, NOTIFY at each COMMIT that changed something.

use super::*;

/// [`PgStore::changes`].
pub struct PgChanges<'a> {
    store: &'a PgStore,
    /// The connection that listens; `None`: none could (the waits poll).
    listening: Option<Rc<Conn>>,
}

impl PgChanges<'_> {
    /// Does it hear notifications (or only poll)?
    #[cfg(test)]
    pub(crate) fn listening(&self) -> bool {
        self.listening.is_some()
    }

    /// Return when a change was committed, or after `timeout` at the latest.
    pub fn wait(&mut self, timeout: Duration) {
        self.store
            .wait_notification(self.listening.as_deref(), timeout);
    }
}

impl crate::store::Changes for PgChanges<'_> {
    fn wait(&mut self, timeout: Duration) {
        PgChanges::wait(self, timeout)
    }
}

impl PgStore {
    /// Wait for changes to records and queues.
    pub fn changes(&self) -> Result<PgChanges<'_>> {
        let listening = self.listen(&self.channel("changes"))?;
        Ok(PgChanges {
            store: self,
            listening,
        })
    }

    /// `LISTEN` on the session connection ([`PgStore::session_conn`]), in the server
    /// session it was given when it connected; the connection, when it listens.
    ///
    /// Behind a pooler in transaction mode the statement may run in another server
    /// session, which goes back to the pool: notifications would reach no one (PgBouncer
    /// logs each one it drops) while the waiter never hears them. Then it does not listen
    /// and the waits poll, at their timeout (the same result, later).
    pub(super) fn listen(&self, channel: &str) -> Result<Option<Rc<Conn>>> {
        let conn = self.session_conn()?;
        let pid = conn.pid.get();
        let sql = format!(
            "DO $listen$ BEGIN IF pg_backend_pid() = {pid} THEN EXECUTE 'LISTEN \"{channel}\"'; \
             END IF; END $listen$; SELECT pg_backend_pid()"
        );
        let rows = conn.run("listen for changes", |c| c.simple_query(&sql))?;
        let same = rows.iter().any(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()) == Some(pid),
            _ => false,
        });
        Ok(same.then_some(conn))
    }

    /// Wait up to `timeout` for a notification on `conn` (`None`: nothing listens, so
    /// only the time passes); true when one came.
    pub(super) fn wait_notification(&self, conn: Option<&Conn>, timeout: Duration) -> bool {
        let Some(conn) = conn else {
            std::thread::sleep(timeout);
            return false;
        };
        let result = {
            let mut client = conn.client.borrow_mut();
            let got = client.wait_notification(timeout).map(|m| m.is_some());
            // Drain what else came, so the next wait waits.
            if got.is_ok() {
                let _ = client.drain_notifications();
            }
            got
        };
        match result {
            Ok(got) => got,
            Err(_) => {
                // The connection is gone: the next read says so. Do not spin meanwhile.
                std::thread::sleep(timeout.min(Duration::from_millis(100)));
                false
            }
        }
    }
}

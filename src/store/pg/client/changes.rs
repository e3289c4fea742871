//! Waiting for changes: LISTEN on the project's channel, NOTIFY at each COMMIT that changed something.

use super::*;

/// [`PgStore::changes`].
pub struct PgChanges<'a> {
    store: &'a PgStore,
}

impl PgChanges<'_> {
    /// Return when a change was committed, or after `timeout` at the latest.
    pub fn wait(&mut self, timeout: Duration) {
        self.store.wait_notification(timeout);
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
        self.listen(&self.channel("changes"))?;
        Ok(PgChanges { store: self })
    }

    pub(super) fn listen(&self, channel: &str) -> Result<()> {
        let sql = format!("LISTEN \"{channel}\"");
        self.conn
            .run("listen for changes", |c| c.batch_execute(&sql))
    }

    /// Wait up to `timeout` for a notification; true when one came.
    pub(super) fn wait_notification(&self, timeout: Duration) -> bool {
        let result = {
            let mut client = self.conn.client.borrow_mut();
            let mut n = client.notifications();
            let got = n.timeout_iter(timeout).next().map(|m| m.is_some());
            // Drain what else came, so the next wait waits.
            if got.is_ok() {
                while let Ok(Some(_)) = n.iter().next() {}
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

//! Waiting for changes to the file store's records and queues: the OS layer's watcher of
//! `keys/` and `queues/` (inotify on Linux, polling elsewhere).

use std::time::Duration;

use super::FileStore;
use crate::error::Result;
use crate::store::Changes;

pub(super) struct Watcher(crate::os::DirWatcher);

impl Watcher {
    pub(super) fn new(store: &FileStore) -> Result<Watcher> {
        Self::watching(store, None)
    }

    /// As [`Watcher::new`], and `agent`'s inbox directory: a message can be written with
    /// no record or queue changed (a freeze's, a lost lease's found by a beat).
    pub(super) fn with_inbox(store: &FileStore, agent: &str) -> Result<Watcher> {
        Self::watching(store, Some(agent))
    }

    fn watching(store: &FileStore, inbox: Option<&str>) -> Result<Watcher> {
        // Both directories must exist to be watched.
        store.sub(super::KEYS, true)?;
        store.sub(super::queue::QUEUES, true)?;
        store.sub(super::SLOTS, true)?;
        // A slot released while others stay held changes only its key's directory of
        // slots, which is not watched; a waiter for it is served through its queue.
        let mut dirs = vec![
            store.root().join(super::KEYS),
            store.root().join(super::queue::QUEUES),
            store.root().join(super::SLOTS),
        ];
        if let Some(agent) = inbox {
            let enc = crate::key::encode(agent);
            store.dir_at(&[super::queue::INBOX, &enc], true)?;
            dirs.push(store.root().join(super::queue::INBOX).join(enc));
        }
        Ok(Watcher(crate::os::DirWatcher::new(dirs)))
    }
}

impl Changes for Watcher {
    fn wait(&mut self, timeout: Duration) {
        self.0.wait(timeout);
    }
}

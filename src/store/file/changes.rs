//! Waiting for changes to the file store's records and queues: the OS layer's watcher of
//! `keys/` and `queues/` (inotify on Linux, polling elsewhere).

use std::time::Duration;

use super::FileStore;
use crate::error::Result;
use crate::store::Changes;

pub(super) struct Watcher(crate::os::DirWatcher);

impl Watcher {
    pub(super) fn new(store: &FileStore) -> Result<Watcher> {
        // Both directories must exist to be watched.
        store.sub(super::KEYS, true)?;
        store.sub(super::queue::QUEUES, true)?;
        store.sub(super::SLOTS, true)?;
        // A slot released while others stay held changes only its key's directory of
        // slots, which is not watched; a waiter for it is served through its queue.
        Ok(Watcher(crate::os::DirWatcher::new(vec![
            store.root().join(super::KEYS),
            store.root().join(super::queue::QUEUES),
            store.root().join(super::SLOTS),
        ])))
    }
}

impl Changes for Watcher {
    fn wait(&mut self, timeout: Duration) {
        self.0.wait(timeout);
    }
}

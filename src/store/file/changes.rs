//! Waiting for changes to the file store's records and queues: inotify on `keys/` and
//! `queues/`, with plain sleeping where inotify is not available.

use std::os::fd::AsRawFd;
use std::time::Duration;

use inotify::{Inotify, WatchMask};

use super::FileStore;
use crate::error::Result;
use crate::store::Changes;

pub(super) struct Watcher(Option<Inotify>);

impl Watcher {
    pub(super) fn new(store: &FileStore) -> Result<Watcher> {
        // Both directories must exist to be watched.
        store.sub(super::KEYS, true)?;
        store.sub(super::queue::QUEUES, true)?;
        let Ok(ino) = Inotify::init() else {
            return Ok(Watcher(None));
        };
        let mask = WatchMask::DELETE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::CLOSE_WRITE;
        let ok = ino
            .watches()
            .add(store.root().join(super::KEYS), mask)
            .is_ok()
            && ino
                .watches()
                .add(store.root().join(super::queue::QUEUES), mask)
                .is_ok();
        Ok(Watcher(ok.then_some(ino)))
    }
}

impl Changes for Watcher {
    fn wait(&mut self, timeout: Duration) {
        let Some(ino) = &self.0 else {
            std::thread::sleep(timeout);
            return;
        };
        let mut fds = libc::pollfd {
            fd: ino.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut fds, 1, ms) };
        if n > 0 {
            // Drain the events; which one woke us does not matter, the next attempt looks.
            let mut buf = [0u8; 4096];
            // SAFETY: reading into a buffer we own; the fd is non-blocking after poll.
            unsafe {
                libc::read(ino.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len());
            }
        }
    }
}

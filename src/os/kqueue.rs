//! macOS: waking on directory changes with kqueue. An `EVFILT_VNODE` filter with
//! `NOTE_WRITE` on a directory's descriptor fires when an entry of the directory is
//! created, renamed into place or removed, which is every change of the lock directory a
//! waiter cares about (records are replaced by rename). Where kqueue cannot be set up, the
//! portable layer's polling serves instead.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

pub(super) struct Watch {
    kq: OwnedFd,
    /// The watched directories, open for as long as they are watched.
    _dirs: Vec<OwnedFd>,
}

impl Watch {
    pub(super) fn new(dirs: &[PathBuf]) -> Option<Watch> {
        // SAFETY: kqueue has no preconditions; the descriptor is owned from here on.
        let kq = unsafe { libc::kqueue() };
        if kq < 0 {
            return None;
        }
        // SAFETY: kq is a new descriptor that nothing else owns.
        let kq = unsafe { OwnedFd::from_raw_fd(kq) };
        let mut open = Vec::new();
        for dir in dirs {
            let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
            // SAFETY: path is a valid C string; O_EVTONLY opens for events only.
            let fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_EVTONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return None;
            }
            // SAFETY: fd is a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: an all-zero kevent is valid; the fields that matter are set below.
            let mut change: libc::kevent = unsafe { std::mem::zeroed() };
            change.ident = fd.as_raw_fd() as libc::uintptr_t;
            change.filter = libc::EVFILT_VNODE;
            change.flags = libc::EV_ADD | libc::EV_CLEAR;
            change.fflags = libc::NOTE_WRITE | libc::NOTE_DELETE | libc::NOTE_RENAME;
            // SAFETY: one valid change, no events asked for.
            let r = unsafe {
                libc::kevent(
                    kq.as_raw_fd(),
                    &change,
                    1,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null(),
                )
            };
            if r < 0 {
                return None;
            }
            open.push(fd);
        }
        Some(Watch { kq, _dirs: open })
    }

    pub(super) fn wait(&mut self, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: an all-zero kevent is valid to be written into.
        let mut event: libc::kevent = unsafe { std::mem::zeroed() };
        // SAFETY: room for one event, a valid timeout; an interrupted or failed wait just
        // returns early, and the caller looks again.
        unsafe {
            libc::kevent(self.kq.as_raw_fd(), std::ptr::null(), 0, &mut event, 1, &ts);
        }
    }
}

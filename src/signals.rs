//! Minimal signal handling for the long-running commands (`heartbeat --watch`, `run`):
//! remember the last termination signal and forward it to a child process.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
    let child = FORWARD_TO.load(Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(child, sig);
        }
    }
}

/// Catch SIGINT, SIGTERM and SIGHUP instead of dying at once.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only touches atomics and calls kill.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Forward caught signals to this process from now on.
pub fn forward_to(pid: u32) {
    FORWARD_TO.store(pid as i32, Ordering::SeqCst);
}

/// The last signal caught, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

//! Minimal signal handling for the long-running commands (`heartbeat --watch`, `run`):
//! remember the last termination signal and forward it to a child process.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

static SKIP_SIGINT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
    let target = FORWARD_TO.load(Ordering::SeqCst);
    if target != 0 && !(sig == libc::SIGINT && SKIP_SIGINT.load(Ordering::SeqCst) != 0) {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(target, sig);
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

/// Forward caught signals from now on to `target` (a pid, or `-pgid` for a process
/// group). With `skip_sigint`, SIGINT is not forwarded: the terminal already sent it to
/// the child, which shares our foreground process group.
pub fn forward_to(target: i32, skip_sigint: bool) {
    SKIP_SIGINT.store(i32::from(skip_sigint), Ordering::SeqCst);
    FORWARD_TO.store(target, Ordering::SeqCst);
}

/// The last signal caught, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

//! Every Unix but Linux (macOS first): processes through the `sysinfo` crate, directory
//! changes by polling. Linux builds with the feature `portable-os` run it too when
//! `TASKLOCK_PORTABLE_OS=1`, so that the tests exercise it here.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sysinfo::{Pid, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, System};

use super::ProcInfo;

/// Start times are milliseconds since 1970 (whole seconds, as the systems give them), so
/// that they are never mistaken for Linux's clock ticks ([`super::same_start`]).
pub(super) fn process(pid: u32) -> Option<ProcInfo> {
    let pid = Pid::from_u32(pid);
    let mut sys = System::new();
    sys.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing(),
    );
    let p = sys.process(pid)?;
    let status = p.status();
    Some(ProcInfo {
        parent: p.parent().map(|p| p.as_u32()),
        name: Some(p.name().to_string_lossy().into_owned()).filter(|n| !n.is_empty()),
        start: Some(p.start_time().saturating_mul(1000)).filter(|s| *s > 0),
        zombie: matches!(status, ProcessStatus::Zombie | ProcessStatus::Dead),
        stopped: matches!(status, ProcessStatus::Stop),
    })
}

pub(super) fn exe(pid: u32) -> Option<PathBuf> {
    let pid = Pid::from_u32(pid);
    let mut sys = System::new();
    sys.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_exe(sysinfo::UpdateKind::Always),
    );
    let exe = sys.process(pid)?.exe()?;
    // Resolved as Linux's /proc/PID/exe is; gone when the file is.
    exe.canonicalize().ok()
}

pub(super) fn argv(pid: u32) -> Option<Vec<String>> {
    let pid = Pid::from_u32(pid);
    let mut sys = System::new();
    sys.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_cmd(sysinfo::UpdateKind::Always),
    );
    let args: Vec<String> = sys
        .process(pid)?
        .cmd()
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

pub(super) fn hostname() -> Option<String> {
    System::host_name().filter(|h| !h.is_empty())
}

/// The boot time: a process check is trusted only within the boot that recorded it.
pub(super) fn boot_id() -> Option<String> {
    match System::boot_time() {
        0 => None,
        t => Some(format!("boot-{t}")),
    }
}

pub(super) fn pid_namespace() -> Option<String> {
    None
}

/// Who listens on a TCP port is not known here: nothing is pushed over TCP.
pub(super) fn tcp_listener_uid(_port: u16) -> Option<u32> {
    None
}

pub(super) fn flock_holder(_dev: u64, _ino: u64) -> Option<u32> {
    None
}

/// Nothing kills a child when its parent dies here: `run` kills it itself on every way
/// out but SIGKILL.
///
/// # Safety
/// Async-signal-safe calls only (`pre_exec`).
pub(super) unsafe fn die_with_parent(parent: i32, _signal: i32) {
    // SAFETY: getppid and _exit are async-signal-safe.
    unsafe {
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
}

/// How often directories are looked at for changes.
const POLL: Duration = Duration::from_millis(50);

/// Polls the directories' change times and sizes: an entry created, replaced (records
/// are replaced by rename) or removed changes them.
pub(super) struct Watch {
    dirs: Vec<PathBuf>,
    seen: Vec<Option<(i64, i64, u64)>>,
}

fn stamp(dir: &PathBuf) -> Option<(i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some((m.mtime(), m.mtime_nsec(), m.size()))
}

impl Watch {
    pub(super) fn new(dirs: Vec<PathBuf>) -> Watch {
        let seen = dirs.iter().map(stamp).collect();
        Watch { dirs, seen }
    }

    pub(super) fn wait(&mut self, timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            let now: Vec<_> = self.dirs.iter().map(stamp).collect();
            if now != self.seen {
                self.seen = now;
                return;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(POLL));
        }
    }
}

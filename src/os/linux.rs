//! Linux: procfs, inotify and `prctl`.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use super::ProcInfo;

fn read_trimmed(path: &str) -> Option<String> {
    super::read_text(path)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// From `/proc/PID/stat`: the command name (field 2, as `/proc/PID/comm` has it), state,
/// parent and start time in clock ticks since boot (fields 3, 4 and 22). One read.
pub(super) fn process(pid: u32) -> Option<ProcInfo> {
    let stat = super::read_text(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces and parentheses; the fields after
    // it start after the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let state = fields.first().copied().unwrap_or_default();
    Some(ProcInfo {
        parent: fields.get(1).and_then(|f| f.parse().ok()),
        name: stat.get(open + 1..close).map(str::to_string),
        start: fields.get(19).and_then(|f| f.parse().ok()),
        zombie: matches!(state, "Z" | "X"),
        stopped: matches!(state, "T" | "t"),
    })
}

/// `/proc/PID/exe`; `None` when the program file was removed or replaced since it started
/// (the link then ends in ` (deleted)`).
pub(super) fn exe(pid: u32) -> Option<PathBuf> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    (!exe.to_string_lossy().ends_with(" (deleted)")).then_some(exe)
}

/// `/proc/PID/cmdline`: the arguments, each ended by a NUL.
pub(super) fn argv(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

pub(super) fn hostname() -> Option<String> {
    // One call: uname's node name is what /proc/sys/kernel/hostname shows (this UTS
    // namespace's). A name that is empty, not UTF-8 or would be trimmed is read from
    // procfs as before, so every name comes out as it did.
    // SAFETY: uname fills the zeroed struct, whose fields are NUL-terminated on success.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } == 0 {
        // SAFETY: nodename is NUL-terminated after a successful uname.
        let name = unsafe { std::ffi::CStr::from_ptr(u.nodename.as_ptr()) };
        if let Ok(n) = name.to_str()
            && !n.is_empty()
            && n.trim() == n
        {
            return Some(n.to_string());
        }
    }
    read_trimmed("/proc/sys/kernel/hostname")
}

pub(super) fn boot_id() -> Option<String> {
    read_trimmed("/proc/sys/kernel/random/boot_id")
}

/// `pid:[INODE]@START`: the namespace's inode and the start time of its pid 1.
///
/// The inode alone does not name a namespace over time: the kernel reuses the inode of a
/// namespace that is gone. Codex runs every command in a fresh sandbox with a pid
/// namespace of its own, and measured here each got the inode of the one before, so a
/// record written in one sandbox looked, to the next, as if from its own namespace, and
/// the (host) pid it names as gone. The start time of the namespace's first process tells
/// them apart. Just `pid:[INODE]` when `/proc/1/stat` cannot be read.
pub(super) fn pid_namespace() -> Option<String> {
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()?
        .to_string_lossy()
        .into_owned();
    Some(match process(1).and_then(|p| p.start) {
        Some(start) => format!("{ns}@{start}"),
        None => ns,
    })
}

/// The user id owning the TCP socket that listens on `port` of the loopback or every
/// address (IPv4 or IPv6), from `/proc/net/tcp` and `/proc/net/tcp6`.
pub(super) fn tcp_listener_uid(port: u16) -> Option<u32> {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            // "  0: 0100007F:1F90 00000000:0000 0A ... uid ..."; state 0A is LISTEN.
            text.lines().skip(1).find_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let local = *f.get(1)?;
                let (addr, _) = local.split_once(':')?;
                let loopback_or_any = matches!(
                    addr,
                    "0100007F"
                        | "00000000"
                        | "00000000000000000000000001000000"
                        | "00000000000000000000000000000000"
                );
                (f.get(3) == Some(&"0A") && local.ends_with(&want) && loopback_or_any)
                    .then(|| f.get(7)?.parse().ok())
                    .flatten()
            })
        })
}

/// From `/proc/locks`, matched by device and inode. Some file systems (overlayfs) show
/// another device there than `stat` does, so a lone holder of the inode is the fallback.
pub(super) fn flock_holder(dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    let ino = format!(":{ino}");
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->" after the
    // number.
    let holders: Vec<(bool, u32)> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&"FLOCK") {
                return None;
            }
            let file = *fields.get(5)?;
            let pid = fields.get(4)?.parse::<u32>().ok().filter(|p| *p > 0)?;
            if file == want {
                Some((true, pid))
            } else if file.ends_with(&ino) {
                Some((false, pid))
            } else {
                None
            }
        })
        .collect();
    match holders.iter().find(|h| h.0) {
        Some(h) => Some(h.1),
        None if holders.len() == 1 => Some(holders[0].1),
        None => None,
    }
}

/// # Safety
/// Async-signal-safe calls only (`pre_exec`).
pub(super) unsafe fn die_with_parent(parent: i32, signal: i32) {
    // SAFETY: prctl and getppid are async-signal-safe; no allocation happens here.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, signal);
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
}

/// inotify on the directories: entries created, replaced, removed or written.
pub(super) struct Watch(Option<inotify::Inotify>);

impl Watch {
    pub(super) fn new(dirs: Vec<PathBuf>) -> Watch {
        use inotify::{Inotify, WatchMask};
        let Ok(ino) = Inotify::init() else {
            return Watch(None);
        };
        let mask = WatchMask::DELETE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::CLOSE_WRITE;
        let ok = dirs.iter().all(|d| ino.watches().add(d, mask).is_ok());
        Watch(ok.then_some(ino))
    }

    pub(super) fn wait(&mut self, timeout: Duration) {
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

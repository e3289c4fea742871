//! The operating system, at the bottom of the layers: everything tasklock asks of it that
//! differs between platforms. It imports nothing from the rest of the crate.
//!
//! One implementation per platform:
//! - `linux.rs`: procfs, inotify, `prctl(PR_SET_PDEATHSIG)`: what Linux builds run;
//! - `portable.rs`: the `sysinfo` crate for processes, polling for directory changes: what
//!   macOS (and any other Unix) runs. Linux builds with the cargo feature `portable-os`
//!   carry it too, chosen at run time by `TASKLOCK_PORTABLE_OS=1`, so that the code macOS
//!   runs is exercised on Linux (tests/portable_os.rs).
//! - `kqueue.rs`: on macOS, directory changes wake a waiter through kqueue instead of the
//!   portable layer's polling (which remains the fallback).

use std::path::PathBuf;
use std::time::Duration;

// Native Windows is refused by build.rs, pointing to WSL.

#[cfg(target_vendor = "apple")]
mod kqueue;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(any(not(target_os = "linux"), feature = "portable-os"))]
mod portable;

/// What the process table says about one process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its parent, when known.
    pub parent: Option<u32>,
    /// Its command name (without the path), when known.
    pub name: Option<String>,
    /// When it started, in this implementation's unit ([`same_start`] compares two).
    pub start: Option<u64>,
    /// It has exited and waits to be collected by its parent.
    pub zombie: bool,
    /// It is stopped (SIGSTOP, a debugger).
    pub stopped: bool,
}

/// Does this process run the portable implementation?
#[cfg(all(target_os = "linux", feature = "portable-os"))]
fn portable() -> bool {
    static P: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *P.get_or_init(|| std::env::var_os("TASKLOCK_PORTABLE_OS").is_some_and(|v| v == "1"))
}

/// Call the implementation this process runs.
macro_rules! dispatch {
    ($f:ident ( $($arg:expr),* )) => {{
        #[cfg(all(target_os = "linux", not(feature = "portable-os")))]
        let r = linux::$f($($arg),*);
        #[cfg(all(target_os = "linux", feature = "portable-os"))]
        let r = if portable() { portable::$f($($arg),*) } else { linux::$f($($arg),*) };
        #[cfg(not(target_os = "linux"))]
        let r = portable::$f($($arg),*);
        r
    }};
}

/// One process, or `None` when there is no such process (or it cannot be read).
pub fn process(pid: u32) -> Option<ProcInfo> {
    dispatch!(process(pid))
}

/// The program file a process runs (its executable, symlinks resolved), when the system
/// says: for a process of this Unix user, as a rule.
pub fn exe(pid: u32) -> Option<PathBuf> {
    dispatch!(exe(pid))
}

/// The arguments a process was started with (its program first), when the system says:
/// for a process of this Unix user, as a rule.
pub fn argv(pid: u32) -> Option<Vec<String>> {
    dispatch!(argv(pid))
}

/// A process's start time ([`ProcInfo::start`]).
pub fn start_time(pid: u32) -> Option<u64> {
    process(pid).and_then(|p| p.start)
}

/// Start times at or above this are milliseconds since 1970 (the portable
/// implementation); below, clock ticks since boot (Linux). Ticks reach it after 300 years
/// of uptime at 100 Hz.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// Are two start times of one pid the same process's? `None` when they were taken by
/// different implementations and cannot be compared: then the pid proves nothing either
/// way, and the process counts as running.
pub fn same_start(recorded: u64, now: u64) -> Option<bool> {
    ((recorded >= EPOCH_MS_FLOOR) == (now >= EPOCH_MS_FLOOR)).then_some(recorded == now)
}

/// This host's name as the system gives it.
pub fn hostname() -> Option<String> {
    dispatch!(hostname())
}

/// An id of the current boot: a process check is trusted only within one boot.
pub fn boot_id() -> Option<String> {
    dispatch!(boot_id())
}

/// This process's pid namespace (Linux; `None` where there are none).
pub fn pid_namespace() -> Option<String> {
    dispatch!(pid_namespace())
}

/// The pid holding a `flock` on the file with this device and inode, when the system
/// says (Linux: `/proc/locks`).
pub fn flock_holder(dev: u64, ino: u64) -> Option<u32> {
    dispatch!(flock_holder(dev, ino))
}

/// The user id of whoever listens on TCP `port` of the loopback (or every address),
/// when the system says (Linux: `/proc/net/tcp`).
pub fn tcp_listener_uid(port: u16) -> Option<u32> {
    dispatch!(tcp_listener_uid(port))
}

/// In a child between fork and exec (`pre_exec`): have it sent `signal` when its parent,
/// `parent`, dies, even by SIGKILL, where the system can; exit at once if the parent is
/// already gone. SIGKILL for a child with nothing to tidy, SIGTERM for one that has (a
/// terminal to give back).
///
/// # Safety
/// Only async-signal-safe calls: for `pre_exec`.
pub unsafe fn die_with_parent(parent: i32, signal: i32) {
    // SAFETY: the caller is in pre_exec; the implementations only make async-signal-safe
    // calls.
    unsafe { dispatch!(die_with_parent(parent, signal)) }
}

/// What Rust's runtime sets up before `main` and tasklock relies on, for the binary that
/// starts without it (`src/main.rs`, glibc Linux): file descriptors 0, 1 and 2 open (on
/// `/dev/null` when one is closed, so no file tasklock opens becomes its standard output),
/// and SIGPIPE ignored (a closed pipe is an error to handle, not a kill). Done as std
/// does it.
///
/// # Safety
/// Call it once, first thing in `main`, before any other thread exists.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub unsafe fn start_process() {
    // SAFETY: plain system calls on the standard descriptors and the signal disposition,
    // before anything else runs (the caller's promise).
    unsafe {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        let polled = loop {
            if libc::poll(fds.as_mut_ptr(), 3, 0) != -1 {
                break true;
            }
            match *libc::__errno_location() {
                libc::EINTR => {}
                // Resource limits or a short allocation can keep poll from working: ask
                // each descriptor instead.
                libc::EINVAL | libc::EAGAIN | libc::ENOMEM => break false,
                _ => libc::abort(),
            }
        };
        for (fd, p) in (0..3).zip(fds) {
            let closed = if polled {
                p.revents & libc::POLLNVAL != 0
            } else {
                libc::fcntl(fd, libc::F_GETFD) == -1 && *libc::__errno_location() == libc::EBADF
            };
            if closed && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR, 0) == -1 {
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// `command` as an executable file in the first directory of `path` (a `PATH` value)
/// that has one.
pub fn on_path(path: &std::ffi::OsStr, command: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|d| d.join(command))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The whole of a small text file (a procfs file, `/etc/passwd`): open, read until the
/// end, close; `None` when it cannot be read or is not UTF-8, as
/// `std::fs::read_to_string(path).ok()`. That one first asks the file's size, which procfs
/// gives as 0, and then reads in small steps: six to eight calls for `/proc/1/stat` where
/// this takes four.
pub fn read_text(path: impl AsRef<std::path::Path>) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// The user id of the process at the other end of a connected Unix socket (the one that
/// bound and listens on it): what the kernel recorded, whatever name was connected to.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_uid(socket: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(socket)?.uid.as_raw())
}

/// The user id of the process at the other end of a connected Unix socket (the one that
/// bound and listens on it): what the kernel recorded, whatever name was connected to.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_uid(socket: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: the descriptor is open for the call; uid and gid are valid out pointers.
    if unsafe { libc::getpeereid(socket.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(uid)
}

/// Eight random hex digits.
pub fn random_hex() -> Option<String> {
    use std::io::Read;
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Wakes a waiter when entries of some directories are created, replaced or removed.
pub struct DirWatcher(Watch);

enum Watch {
    #[cfg(target_os = "linux")]
    Linux(linux::Watch),
    #[cfg(any(not(target_os = "linux"), feature = "portable-os"))]
    Portable(portable::Watch),
    #[cfg(target_vendor = "apple")]
    Kqueue(kqueue::Watch),
}

impl DirWatcher {
    /// Watch these directories (which exist). A system that cannot watch gives a
    /// watcher that only sleeps.
    pub fn new(dirs: Vec<PathBuf>) -> DirWatcher {
        #[cfg(all(target_os = "linux", feature = "portable-os"))]
        if portable() {
            return DirWatcher(Watch::Portable(portable::Watch::new(dirs)));
        }
        #[cfg(target_os = "linux")]
        return DirWatcher(Watch::Linux(linux::Watch::new(dirs)));
        #[cfg(target_vendor = "apple")]
        if let Some(w) = kqueue::Watch::new(&dirs) {
            return DirWatcher(Watch::Kqueue(w));
        }
        #[cfg(not(target_os = "linux"))]
        DirWatcher(Watch::Portable(portable::Watch::new(dirs)))
    }

    /// Sleep until something changed in the directories, or `timeout` passed.
    pub fn wait(&mut self, timeout: Duration) {
        match &mut self.0 {
            #[cfg(target_os = "linux")]
            Watch::Linux(w) => w.wait(timeout),
            #[cfg(any(not(target_os = "linux"), feature = "portable-os"))]
            Watch::Portable(w) => w.wait(timeout),
            #[cfg(target_vendor = "apple")]
            Watch::Kqueue(w) => w.wait(timeout),
        }
    }
}

/// Programs that may stand between Claude Code and the hook: shells, and wrappers that
/// run the hook as their child (`timeout 10 tasklock hook …`). Wrappers that exec the
/// hook (`nice`, `env`, `nohup`, `stdbuf`, `ionice`) are gone by then, but they are
/// listed too in case a shell forked for them.
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "busybox", "timeout", "time", "nice",
    "env", "nohup", "stdbuf", "ionice", "setsid", "chrt", "taskset", "flock", "setpriv",
];

/// The agent's process: the hook's parent, looking through shells and wrappers. For
/// Claude Code that is the `claude` process; for Codex the native `codex` binary (which
/// runs hooks as its children; the `node` launcher of the npm package is its parent and
/// exits with it).
pub fn client_pid() -> Option<u32> {
    // Recent Claude Code versions name their own pid for hooks.
    if let Some(pid) = std::env::var("CLAUDE_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .filter(|&p| p > 1 && start_time(p).is_some())
    {
        return Some(pid);
    }
    parent_chain_pid()
}

/// The first ancestor of this process that is not a shell or wrapper.
pub fn parent_chain_pid() -> Option<u32> {
    // SAFETY: getppid has no preconditions.
    let mut pid = unsafe { libc::getppid() } as u32;
    for _ in 0..8 {
        let info = process(pid)?;
        if !WRAPPERS.contains(&info.name.as_deref().unwrap_or_default()) {
            break;
        }
        pid = info.parent?;
    }
    (pid > 1).then_some(pid)
}

/// The width in columns of the terminal on stdout, when stdout is one.
pub fn terminal_width() -> Option<usize> {
    // SAFETY: winsize is plain data; TIOCGWINSZ only writes into it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// How many seconds local time (`TZ`, else the system's zone) is ahead of UTC at the
/// Unix time `secs`.
pub fn utc_offset(secs: i64) -> Option<i32> {
    let t = secs as libc::time_t;
    // SAFETY: tm is plain data; localtime_r writes into it and reads only `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    (!r.is_null()).then_some(tm.tm_gmtoff as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_of_two_implementations_are_never_judged_different() {
        assert_eq!(same_start(1234, 1234), Some(true));
        assert_eq!(same_start(1234, 1235), Some(false));
        assert_eq!(same_start(1_764_000_000_000, 1_764_000_000_000), Some(true));
        assert_eq!(same_start(1234, 1_764_000_000_000), None);
        assert_eq!(same_start(1_764_000_000_000, 1234), None);
    }

    #[test]
    fn this_process_is_seen_with_a_start_and_a_parent() {
        let me = process(std::process::id()).expect("this process");
        assert!(me.start.is_some());
        assert!(!me.zombie);
        assert!(me.parent.is_some_and(|p| p > 0));
        assert_eq!(start_time(std::process::id()), me.start);
    }

    #[test]
    fn this_process_runs_its_own_executable() {
        let exe = exe(std::process::id()).expect("this process's executable");
        assert_eq!(
            exe,
            std::env::current_exe().unwrap().canonicalize().unwrap()
        );
    }
}

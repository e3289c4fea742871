//! Crashes at every file change: strace kills the command (fault injection, SIGKILL) at
//! the n-th call of one of [`CHANGES`], on a copy of a lock directory. Linux only (the
//! tests that use it say so).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// Every system call with which the store changes a file or directory.
pub const CHANGES: [&str; 11] = [
    "write",
    "pwrite64",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
];

/// `strace` logging [`CHANGES`] to `log` (with `follow`, the command's children too),
/// killing the command at the `when`-th call of `call` when `kill` says so; the program
/// and its arguments follow.
pub fn strace(log: &Path, follow: bool, kill: Option<(&str, usize)>) -> Command {
    let mut c = Command::new("strace");
    if follow {
        c.arg("-f");
    }
    c.args(["-qq", "-o"]).arg(log);
    c.arg(format!("-etrace={}", CHANGES.join(",")));
    if let Some((call, when)) = kill {
        c.arg(format!("-einject={call}:signal=KILL:when={when}"));
    }
    c
}

/// How many times each call of [`CHANGES`] was made, as an strace log says (lines
/// `call(args) = result`, or with `-f` `PID call(args) = result`).
pub fn changes_made(log: &Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let call = match line.split_once(' ') {
            Some((pid, rest)) if pid.bytes().all(|b| b.is_ascii_digit()) => rest.trim_start(),
            _ => line,
        };
        // "<... call resumed>", the end of a call already counted, is not one.
        if let Some((name, _)) = call.split_once('(')
            && CHANGES.contains(&name)
        {
            *n.entry(name.to_string()).or_default() += 1;
        }
    }
    n
}

/// A copy of the directory `dir` (with its name) in a temp directory of its own.
pub fn copy_dir(dir: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(dir)
        .arg(to.path())
        .status()
        .unwrap();
    assert!(ok.success());
    to
}

/// The exit code of a command run under [`strace`]: -9 when it was killed.
pub fn exit_code(status: ExitStatus, what: &str) -> i32 {
    match status.signal() {
        Some(9) => -9,
        Some(s) => panic!("{what} ended by signal {s}"),
        None => status.code().unwrap(),
    }
}

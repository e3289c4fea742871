//! `tasklock demo`: tasklock at work without any agent. A fleet of simulated agents
//! ([`fleet`]) runs on a throwaway lock directory under the temporary directory, and the
//! live view shows it: `tasklock top` in this terminal, or with `--ui` the page of
//! `tasklock ui`, whose URL it prints. When the view ends (q), or the demo is asked to end
//! (Ctrl-C, SIGTERM, SIGHUP), the view, the simulation and every agent's process end, and
//! the directory is removed. Nothing else is read or written: the lock directory is given
//! to every command and to the view, and the environment that could point a command
//! elsewhere (a PostgreSQL URL, an agent's identity, a secret) is cleared first.
//!
//! A demo killed with SIGKILL can tidy nothing itself: its view and its agents' processes
//! are ended by the system (they are set to die with it), and the next demo removes the
//! directory, which names its demo's process ([`OWNER`]).

mod fleet;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cli::{DemoArgs, Global};
use crate::error::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};

/// The fleet's pace: a step of every agent this often.
const TICK: Duration = Duration::from_secs(1);
/// How long the view has to end after it was asked to, before it is killed.
const GRACE: Duration = Duration::from_secs(1);
/// The directories' names, under the temporary directory.
const PREFIX: &str = "tasklock-demo-";
/// In a demo's directory: the demo's process, as `PID START` (its start time, so that a
/// reused pid is not taken for it).
const OWNER: &str = "owner";

/// What could make a command of the demo act elsewhere than in its own lock directory,
/// or as someone else: cleared before anything runs.
const CLEARED: &[&str] = &[
    "TASKLOCK_URL",
    "TASKLOCK_SESSION_URL",
    "TASKLOCK_AGENT",
    "TASKLOCK_AGENT_NAME",
    "TASKLOCK_SECRET",
    "TASKLOCK_OPERATOR_SECRET",
    "TASKLOCK_NOW",
    "TASKLOCK_SHARED_DIRS",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_MESSAGING_SOCKET",
    "CLAUDE_PID",
    "CODEX_THREAD_ID",
    "GEMINI_SESSION_ID",
    "OPENCODE_SESSION_ID",
];

/// `tasklock demo [--ui]`; the exit code.
pub fn run(global: &Global, a: &DemoArgs) -> i32 {
    if global.dir.is_some() {
        eprintln!(
            "tasklock demo: the demo runs in a throwaway lock directory of its own; it takes no --dir"
        );
        return EXIT_USAGE;
    }
    let word = if a.ui { "ui" } else { "top" };
    let view = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(crate::dispatch::VIEW_BINARY),
        Err(e) => {
            eprintln!("tasklock demo: cannot find this binary's path: {e}");
            return EXIT_ERROR;
        }
    };
    if !view.is_file() {
        eprintln!("{}", cannot_start(&view, "not found"));
        return EXIT_ERROR;
    }
    if !a.ui && !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        eprintln!(
            "tasklock demo: the demo is shown by `tasklock top`, which draws on a terminal, and stdout is not one; `tasklock demo --ui` shows it in the browser"
        );
        return EXIT_USAGE;
    }
    // From here on a signal ends the demo the way `q` does: nothing is left behind.
    crate::signals::install();
    remove_left_over(&std::env::temp_dir());
    let root = match throwaway_dir() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tasklock demo: {e}");
            return EXIT_ERROR;
        }
    };
    let lock = root.join(".locks");
    // SAFETY: no other thread exists yet: the simulation's starts below, after this.
    unsafe {
        for name in CLEARED {
            std::env::remove_var(name);
        }
        std::env::set_var("TASKLOCK_DIR", &lock);
    }
    let result = demo(&lock, &view, word);
    let removed = std::fs::remove_dir_all(&root);
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tasklock demo: {e}");
            EXIT_ERROR
        }
    };
    if let Err(e) = removed {
        eprintln!(
            "tasklock demo: cannot remove its lock directory {}: {e}",
            root.display()
        );
        return EXIT_ERROR;
    }
    code
}

fn cannot_start(view: &Path, err: &str) -> String {
    format!(
        "tasklock demo: cannot start {} ({err}): {}",
        view.display(),
        crate::dispatch::VIEW_MISSING
    )
}

/// The fleet, at work on `lock` in a thread of its own, shown by `tasklock WORD` until
/// that ends; every agent's process ended after it. The view's exit code.
fn demo(lock: &Path, view: &Path, word: &str) -> Result<i32, String> {
    let mut sim = fleet::Fleet::new(lock.to_path_buf());
    if let Err(e) = sim.open() {
        sim.stop();
        return Err(e);
    }
    if word == "ui" {
        eprintln!(
            "tasklock demo: simulated agents at work in a throwaway lock directory; Ctrl-C ends the demo and removes it"
        );
    }
    let mut child = match start_view(lock, view, word) {
        Ok(c) => c,
        Err(e) => {
            sim.stop();
            return Err(cannot_start(view, &e.to_string()));
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut next = Instant::now() + TICK;
            while !stop.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    sim.tick();
                    next += TICK;
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            sim.stop();
        })
    };
    let code = wait_view(&mut child);
    stop.store(true, Ordering::SeqCst);
    if running.join().is_err() {
        return Err("the simulation stopped on an internal error".into());
    }
    Ok(code)
}

/// `tasklock WORD --dir LOCK` (the views' binary, seen as `tasklock WORD`) on this
/// terminal, in the demo's process group: `top` reads the terminal. It runs in the
/// throwaway directory and is given LOCK by its name there, so that the view names the
/// demo's lock directory, not the random temporary path it is at.
fn start_view(lock: &Path, view: &Path, word: &str) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let (Some(root), Some(name)) = (lock.parent(), lock.file_name()) else {
        return Err(std::io::Error::other("the lock directory has no parent"));
    };
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new(view);
    cmd.arg0("tasklock")
        .arg(word)
        .arg("--dir")
        .arg(name)
        .current_dir(root)
        .stdin(Stdio::inherit());
    // SAFETY: die_with_parent makes async-signal-safe calls only; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            // SIGTERM, not SIGKILL: `top` gives the terminal back as it ends.
            crate::os::die_with_parent(parent, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
}

/// Wait for the view to end. A signal to the demo is passed on as SIGTERM, and a view
/// still there [`GRACE`] later is killed. The view's exit code; 0 when it ended because
/// the demo was asked to end.
fn wait_view(child: &mut Child) -> i32 {
    let mut asked: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(_)) if asked.is_some() => return EXIT_OK,
            Ok(Some(status)) => return status.code().unwrap_or(EXIT_ERROR),
            Ok(None) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return EXIT_ERROR;
            }
        }
        match asked {
            None if crate::signals::received().is_some() => {
                // SAFETY: a plain kill(2) of our own child, not yet waited for.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                asked = Some(Instant::now());
            }
            Some(t) if t.elapsed() > GRACE => {
                let _ = child.kill();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A new directory under the temporary directory (`TMPDIR`), for this user only.
fn throwaway_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let tmp = std::env::temp_dir();
    let mut last = None;
    for _ in 0..8 {
        let Some(hex) = crate::os::random_hex() else {
            return Err("cannot read random bytes for the demo's directory name".into());
        };
        let root = tmp.join(format!("{PREFIX}{hex}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&root) {
            Ok(()) => {
                let me = std::process::id();
                let start = crate::os::start_time(me).unwrap_or(0);
                return match std::fs::write(root.join(OWNER), format!("{me} {start}\n")) {
                    Ok(()) => Ok(root),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&root);
                        Err(format!("cannot write in {}: {e}", root.display()))
                    }
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(format!(
                    "cannot create a directory in {}: {e}",
                    tmp.display()
                ));
            }
        }
    }
    Err(format!(
        "cannot create a directory in {}: {}",
        tmp.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Remove the directories under `tmp` of this user's demos that were killed before they
/// could (their process is gone). A directory whose owner cannot be read is left alone: it
/// may be a demo's that is starting now.
fn remove_left_over(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = e.path();
        let mine = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if mine && owner_gone(&dir) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Has the demo that made `dir` ended? False when that cannot be told.
fn owner_gone(dir: &Path) -> bool {
    let Some(text) = crate::os::read_text(dir.join(OWNER)) else {
        return false;
    };
    let mut words = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(pid)), Some(Ok(start))) = (words.next(), words.next()) else {
        return false;
    };
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    match crate::os::start_time(pid) {
        None => crate::os::process(pid).is_none(),
        // 0: the demo could not read its own start time, so only its pid says.
        Some(_) if start == 0 => false,
        Some(now) => crate::os::same_start(start, now) == Some(false),
    }
}

//! `tasklock demo`: a live fleet of simulated agents in a throwaway lock directory, shown
//! by `tasklock top` in a real terminal (tmux) or by `tasklock ui` (`--ui`). It shows
//! agents at work, a queue, a death and a freeze at once; it ends with `q` (or SIGTERM
//! with `--ui`) leaving no process and no directory behind; and it never touches the
//! user's own lock directory, whatever the environment points at.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Env;
use common::tmux::Tmux;

/// The processes whose environment carries `mark`: the demo and everything it started
/// (the view, the agents' processes), and nothing else.
fn marked(mark: &str) -> Vec<u32> {
    let needle = format!("TASKLOCK_DEMO_TEST={mark}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A mark for one test's processes.
fn mark(test: &str) -> String {
    format!("{}-{test}", std::process::id())
}

/// A user's own project, with a checkout in its lock directory: what the demo must
/// leave as it is. The audit log's events, to compare.
fn users_project() -> (Env, usize) {
    let env = Env::new();
    env.ok("me", &["checkout", "my-own-key"]);
    let events = env.run(None, &["audit", "--json"]).stdout.lines().count();
    (env, events)
}

fn untouched(env: &Env, events: usize) {
    let log = env.run(None, &["audit", "--json"]).stdout;
    assert_eq!(
        log.lines().count(),
        events,
        "the user's audit log grew:\n{log}"
    );
    let list = env.run(None, &["list", "--json"]).json();
    let keys: Vec<&str> = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["my-own-key"]);
}

#[test]
fn the_demo_shows_a_fleet_at_work_and_q_ends_it_leaving_nothing() {
    let (user, events) = users_project();
    let tmp = tempfile::tempdir().unwrap();
    let mark = mark("top");
    // Run from the user's project, with the environment of an agent's session that points
    // at the user's lock directory and a PostgreSQL server: the demo uses none of it.
    let script = format!(
        "cd '{project}'; export TMPDIR='{tmp}' TASKLOCK_DIR='{dir}' TASKLOCK_AGENT=me \
         TASKLOCK_URL='postgres://nowhere.invalid/db' CLAUDE_CODE_SESSION_ID=me; \
         unset TASKLOCK_NOW; \
         TASKLOCK_DEMO_TEST={mark} '{bin}' demo; echo EXITED $?; sleep 600",
        project = user.tmp.path().display(),
        tmp = tmp.path().display(),
        dir = user.dir().display(),
        bin = env!("CARGO_BIN_EXE_tasklock"),
    );
    let start = Instant::now();
    let t = Tmux::start(&script, 140, 45);
    // Several agents at work, a queue, a death (and its key handed to the queue's head),
    // a freeze.
    t.until("five agents", |s| {
        ["alice", "bob", "carol", "dave", "erin"]
            .iter()
            .all(|n| s.contains(n))
    });
    t.shows("waits for");
    t.shows("frozen: deploy://prod*");
    t.shows("dead: process_gone");
    // The events, as who did what: a death, and the key reserved for the queue's head.
    t.shows("died holding");
    t.shows(", next in its queue");
    eprintln!(
        "the demo showed agents, a queue, a freeze, a death and a handoff after {:?}",
        start.elapsed()
    );
    let ours = marked(&mark);
    assert!(
        ours.len() >= 6,
        "the demo, its view and at least four live agents: {ours:?}"
    );
    assert_eq!(entries(tmp.path()).len(), 1, "{:?}", entries(tmp.path()));

    t.keys(&["q"]);
    let s = t.shows("EXITED 0");
    assert!(
        !s.contains("Checkouts ("),
        "the terminal was not given back:\n{s}"
    );
    assert_eq!(marked(&mark), Vec::<u32>::new(), "processes left behind");
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "a directory left behind"
    );
    untouched(&user, events);
}

/// The demo as a child of the test, ended (SIGTERM) when the test fails half-way.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|s| s.is_none()) {
            // SAFETY: a plain kill(2) of our own child, not yet waited for.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let _ = self.0.wait();
        }
    }
}

/// `tasklock demo --ui` started from `cwd` with `tmp` as its temporary directory and its
/// processes marked `mark`, and the URL it printed.
fn start_ui(cwd: &Path, tmp: &Path, mark: &str, env: Option<&Env>) -> (Demo, String) {
    let mut cmd = common::base_cmd(common::T0);
    cmd.arg("demo")
        .arg("--ui")
        .current_dir(cwd)
        .env("TMPDIR", tmp)
        .env("TASKLOCK_DEMO_TEST", mark)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(env) = env {
        cmd.env("TASKLOCK_DIR", env.dir());
    }
    let mut child = Demo(cmd.spawn().unwrap());
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("tasklock ui: ")
        .unwrap_or_else(|| panic!("no URL: {line:?}"))
        .to_string();
    (child, url)
}

#[test]
fn the_demo_in_the_browser_prints_its_url_and_ends_on_sigterm() {
    let (user, events) = users_project();
    let tmp = tempfile::tempdir().unwrap();
    let mark = mark("ui");
    let (mut child, url) = start_ui(user.tmp.path(), tmp.path(), &mark, Some(&user));
    let url = url.as_str();
    let child = &mut child.0;
    // The page's own URL (its form is tests/ui.rs's business): loopback, with a token.
    let rest = url.strip_prefix("http://127.0.0.1:").expect(url);
    let (port, _) = rest.split_once('/').unwrap();
    assert!(url.contains("token="), "{url}");

    // Something answers there.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port.parse().unwrap())).unwrap();
    write!(
        conn,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");

    // The fleet is tasklock's own state, in the demo's lock directory.
    let demo_dir = tmp.path().join(&entries(tmp.path())[0]).join(".locks");
    let fleet = common::exec({
        let mut c = common::base_cmd(common::T0);
        c.env_remove("TASKLOCK_NOW")
            .arg("top")
            .arg("--once")
            .arg("--json")
            .arg("--dir")
            .arg(&demo_dir);
        c
    })
    .json();
    assert!(fleet["agents"].as_array().unwrap().len() >= 5, "{fleet}");
    assert!(!fleet["waits"].as_array().unwrap().is_empty(), "{fleet}");
    assert_eq!(fleet["freezes"][0]["pattern"], "deploy://prod*", "{fleet}");
    assert!(marked(&mark).len() >= 6, "{:?}", marked(&mark));

    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the demo did not end on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(40));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("Ctrl-C ends the demo"), "{err}");
    assert_eq!(marked(&mark), Vec::<u32>::new(), "processes left behind");
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "a directory left behind"
    );
    untouched(&user, events);
}

#[test]
fn the_demo_without_the_view_binary_says_so_and_leaves_nothing() {
    let td = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lone = td.path().join("tasklock");
    // A hard link needs no file open for writing (see tests/cli.rs); copy only if it cannot be.
    if std::fs::hard_link(env!("CARGO_BIN_EXE_tasklock"), &lone).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_tasklock"), &lone).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = (0..50)
        .find_map(|_| {
            match Command::new(&lone)
                .arg("demo")
                .env("TMPDIR", tmp.path())
                .stdin(Stdio::null())
                .output()
            {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(Duration::from_millis(20));
                    None
                }
                other => Some(other.unwrap()),
            }
        })
        .expect("the link stayed busy");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("tasklock demo: cannot start")
            && err.contains("tasklock-view")
            && err.contains("install.sh"),
        "{err}"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn bad_invocations_are_usage_errors_and_leave_nothing() {
    // A lock directory of the user's: the demo takes none.
    let env = Env::new();
    let r = env.run(None, &["demo"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(
        r.stderr.contains("throwaway lock directory"),
        "{}",
        r.text()
    );
    assert!(!env.dir().exists());
    // Not a terminal: said plainly, with the way to the browser.
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = common::base_cmd(common::T0);
    cmd.arg("demo").env("TMPDIR", tmp.path());
    let r = common::exec(cmd);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("demo --ui"), "{}", r.text());
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn ctrl_c_ends_the_demo_in_the_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let mark = mark("ctrl-c");
    // The browser the page is opened in: a stand-in that notes the URL.
    let bin = tempfile::tempdir().unwrap();
    let opened = bin.path().join("opened");
    let opener = bin.path().join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\necho \"$1\" > '{}'\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        // The shell outlives Ctrl-C (a trap, not an ignored signal: the demo gets the
        // default), as an interactive shell would.
        "trap 'echo interrupted' INT; \
         export TMPDIR='{tmp}' PATH='{bin}':\"$PATH\"; unset TASKLOCK_NOW TASKLOCK_DIR TASKLOCK_URL; \
         TASKLOCK_DEMO_TEST={mark} '{exe}' demo --ui; echo EXITED $?; sleep 600",
        tmp = tmp.path().display(),
        bin = bin.path().display(),
        exe = env!("CARGO_BIN_EXE_tasklock"),
    );
    let t = Tmux::start(&script, 140, 20);
    let s = t.shows("tasklock ui: http://127.0.0.1:");
    assert!(s.contains("Ctrl-C ends the demo"), "{s}");
    // The page is opened, as `tasklock ui` opens it.
    let start = Instant::now();
    while !std::fs::read_to_string(&opened).is_ok_and(|u| u.ends_with('\n')) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the page was not opened"
        );
        std::thread::sleep(Duration::from_millis(40));
    }
    let url = std::fs::read_to_string(&opened).unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url:?}");
    t.keys(&["C-c"]);
    t.shows("EXITED 0");
    assert_eq!(marked(&mark), Vec::<u32>::new(), "processes left behind");
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "a directory left behind"
    );
}

#[test]
fn a_demo_killed_with_sigkill_leaves_no_process_and_the_next_demo_removes_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // A directory of a demo that is still running (this test's process stands for it):
    // the next demo must leave it alone.
    let live = tmp.path().join("tasklock-demo-live");
    std::fs::create_dir(&live).unwrap();
    let me = std::process::id();
    let start = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start = start
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    std::fs::write(live.join("owner"), format!("{me} {start}\n")).unwrap();

    let first = mark("killed");
    let (mut demo, _) = start_ui(cwd.path(), tmp.path(), &first, None);
    let dirs = entries(tmp.path());
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    let killed = dirs
        .into_iter()
        .find(|d| d != "tasklock-demo-live")
        .unwrap();
    assert!(marked(&first).len() >= 6, "{:?}", marked(&first));
    demo.0.kill().unwrap();
    demo.0.wait().unwrap();
    // Its view and its agents' processes end with it.
    let t = Instant::now();
    while !marked(&first).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "processes outlived the killed demo: {:?}",
            marked(&first)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its directory stays, until the next demo.
    assert!(tmp.path().join(&killed).join(".locks").is_dir());

    let second = mark("after");
    let (demo, _) = start_ui(cwd.path(), tmp.path(), &second, None);
    let mut now = entries(tmp.path());
    now.sort();
    assert!(
        !now.contains(&killed),
        "the killed demo's directory is still there: {now:?}"
    );
    assert!(now.contains(&"tasklock-demo-live".to_string()), "{now:?}");
    assert_eq!(now.len(), 2, "{now:?}");
    drop(demo);
    assert_eq!(marked(&second), Vec::<u32>::new(), "processes left behind");
    assert_eq!(entries(tmp.path()), ["tasklock-demo-live"]);
}

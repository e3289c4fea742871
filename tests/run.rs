//! `run` and `heartbeat --watch` through the real binary, with real processes and real
//! signals. Both renew and poll on the real clock, so these tests run tasklock with
//! TASKLOCK_NOW removed, except where a snapshot needs the clock pinned. Nothing here
//! asserts on elapsed time: eventual conditions are polled with generous deadlines.

#[macro_use]
mod common;
use common::*;

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tasklock");
/// Deadline for anything that should happen "soon".
const LIMIT: Duration = Duration::from_secs(10);
/// Deadline for a process we expect to exit.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- helpers

/// tasklock as `agent` on the real clock, with `--dir` set and stdin null.
fn live(e: &Env, agent: &str) -> Command {
    let mut cmd = base_cmd(T0);
    cmd.env_remove("TASKLOCK_NOW")
        .arg("--dir")
        .arg(e.dir())
        .args(["--agent", agent]);
    cmd
}

/// tasklock as `agent` with the clock pinned to `e.now` (for snapshots).
fn pinned(e: &Env, agent: &str) -> Command {
    let mut cmd = base_cmd(&e.now);
    cmd.arg("--dir").arg(e.dir()).args(["--agent", agent]);
    cmd
}

fn pinned_run(e: &Env, agent: &str, args: &[&str]) -> Run {
    let mut cmd = pinned(e, agent);
    cmd.args(args);
    exec(cmd)
}

fn live_run(e: &Env, agent: &str, args: &[&str]) -> Run {
    let mut cmd = live(e, agent);
    cmd.args(args);
    exec(cmd)
}

fn live_ok(e: &Env, agent: &str, args: &[&str]) -> Run {
    let r = live_run(e, agent, args);
    assert_eq!(r.code, 0, "{args:?} failed: {}", r.text());
    r
}

/// A child process with its output collected in the background. Killed and reaped if a
/// test fails before it ends, so no test leaves processes behind.
struct Spawned {
    child: Option<Child>,
    out: Receiver<String>,
    err: Receiver<String>,
}

fn drain(mut r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

impl Spawned {
    fn start(mut cmd: Command) -> Spawned {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn");
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        Spawned {
            child: Some(child),
            out,
            err,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn exited(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_some()
    }

    /// Wait for it to exit (reaping it), then for its stdout and stderr to close.
    fn finish(mut self) -> (ExitStatus, Run) {
        let deadline = Instant::now() + EXIT_LIMIT;
        while !self.exited() {
            assert!(
                Instant::now() < deadline,
                "process {} did not exit within {EXIT_LIMIT:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.take().unwrap().wait().unwrap();
        let stdout = self
            .out
            .recv_timeout(LIMIT)
            .expect("stdout still open after exit: did a child of it live on?");
        let stderr = self
            .err
            .recv_timeout(LIMIT)
            .expect("stderr still open after exit: did a child of it live on?");
        let run = Run {
            code: status.code().unwrap_or(-1),
            stdout,
            stderr,
        };
        (status, run)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGKILLs a process that is not our child (a grandchild, a detached watcher) on drop,
/// if it is still there.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if alive(self.0) {
            signal(self.0, "KILL");
        }
    }
}

/// Send `sig` (a name such as TERM) to `pid`.
fn signal(pid: u32, sig: &str) {
    let st = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid} failed");
}

/// Does `pid` exist and is it not a zombie?
fn alive(pid: u32) -> bool {
    tasklock::os::process(pid).is_some_and(|p| !p.zombie)
}

/// Poll `f` until it holds, or fail after LIMIT.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pid written by `echo $$ > FILE`, once it is complete.
fn wait_pid_file(path: &Path) -> u32 {
    let mut pid = 0;
    eventually("the command wrote its pid", || {
        match fs::read_to_string(path) {
            Ok(s) if s.ends_with('\n') => {
                pid = s.trim().parse().unwrap();
                true
            }
            _ => false,
        }
    });
    pid
}

/// The keys of the records in `<dir>/keys/`, sorted, read straight from the files.
fn held_keys(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir.join("keys")) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = entries
        .filter_map(|e| fs::read_to_string(e.unwrap().path()).ok())
        .map(|s| {
            let v: Value = serde_json::from_str(&s).expect("record is JSON");
            v["key"].as_str().unwrap().to_string()
        })
        .collect();
    keys.sort();
    keys
}

/// Has the agent registry got an entry (the watcher's first beat)?
fn registered(dir: &Path) -> bool {
    fs::read_dir(dir.join("agents")).is_ok_and(|mut d| d.next().is_some())
}

/// Heartbeats recorded in the agent registry, summed over agents, read from the files.
fn beats(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir.join("agents")) else {
        return 0;
    };
    entries
        .filter_map(|e| fs::read_to_string(e.unwrap().path()).ok())
        .map(|s| {
            let v: Value = serde_json::from_str(&s).expect("agent entry is JSON");
            v["heartbeats"].as_u64().unwrap()
        })
        .sum()
}

/// `run` prints its own summary after CMD's stderr; with --json it is the last line.
fn summary(r: &Run) -> Value {
    let line = r
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_else(|| panic!("no summary on stderr: {}", r.text()));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {line}"))
}

/// (event, key, agent, reason) of every audit line.
fn events(dir: &Path) -> Vec<(String, String, String, Option<String>)> {
    audit(dir)
        .iter()
        .map(|v| {
            (
                v["event"].as_str().unwrap().to_string(),
                v["key"].as_str().unwrap().to_string(),
                v["agent"].as_str().unwrap().to_string(),
                v["reason"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn ev(
    event: &str,
    key: &str,
    agent: &str,
    reason: Option<&str>,
) -> (String, String, String, Option<String>) {
    (
        event.into(),
        key.into(),
        agent.into(),
        reason.map(str::to_string),
    )
}

/// KEY is free: no record, `status` says so, and the audit log ends with a release of it.
fn assert_released(e: &Env, key: &str) {
    assert_eq!(
        held_keys(&e.dir()),
        Vec::<String>::new(),
        "a record is left"
    );
    let j = live_run(e, "observer", &["status", key, "--json"]).json();
    assert_eq!(j["outcome"], "free", "{j}");
    assert_eq!(j["checkout"], Value::Null);
    let last = events(&e.dir()).pop().expect("audit log");
    assert_eq!(last, ev("release", key, "agent-a", None));
}

/// `sh -c SCRIPT tasklock DIR`: the script sees the binary as $0 and the lock dir as $1.
fn sh_with_tasklock(e: &Env, script: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        BIN.into(),
        e.dir().display().to_string(),
    ]
}

fn run_cmd(e: &Env, agent: &str, pre: &[&str], cmd: &[String]) -> Command {
    let mut c = live(e, agent);
    c.args(pre).arg("--").args(cmd);
    c
}

// ---------------------------------------------------------------- run: the basics

#[test]
fn run_passes_exit_code_and_stdout_through_and_releases_after_failure() {
    let e = Env::new();
    let r = live_run(
        &e,
        "agent-a",
        &[
            "run",
            "task-x",
            "--",
            "sh",
            "-c",
            "printf 'line 1\\n  line 2 \\n'; echo oops >&2; exit 7",
        ],
    );
    assert_eq!(r.code, 7, "{}", r.text());
    assert_eq!(r.stdout, "line 1\n  line 2 \n", "CMD's stdout, unchanged");
    assert!(r.stderr.starts_with("oops\n"), "{}", r.text());
    assert!(
        r.stderr
            .contains("the command exited with 7 under `task-x` (token 1); released."),
        "{}",
        r.text()
    );
    assert!(!r.stderr.contains("lost"), "{}", r.text());
    assert_released(&e, "task-x");
    assert_eq!(
        events(&e.dir()),
        [
            ev("acquire", "task-x", "agent-a", None),
            ev("release", "task-x", "agent-a", None)
        ]
    );
}

#[test]
fn run_holds_the_key_under_its_own_pid_while_cmd_runs() {
    let e = Env::new();

    // CMD asks `status` about the key: its stdout is run's stdout, unchanged.
    let cmd = sh_with_tasklock(
        &e,
        r#""$0" --dir "$1" --agent observer status task-x --json"#,
    );
    let run = Spawned::start(run_cmd(
        &e,
        "agent-a",
        &["--json", "run", "task-x", "--reason", "build"],
        &cmd,
    ));
    let run_pid = run.pid();
    let (status, r) = run.finish();
    assert_eq!(status.code(), Some(0), "{}", r.text());
    let j: Value = serde_json::from_str(&r.stdout).expect("CMD's output is run's stdout");
    assert_eq!(j["command"], "status");
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["checkout"]["key"], "task-x");
    assert_eq!(j["checkout"]["token"], 1);
    assert_eq!(j["checkout"]["reason"], "build");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-a");
    assert_eq!(j["checkout"]["agent"]["host"], host());
    assert_eq!(
        j["checkout"]["agent"]["pid"], run_pid,
        "run records its own pid"
    );
    let s = summary(&r);
    assert_eq!(s["command"], "run");
    assert_eq!(s["key"], "task-x");
    assert_eq!(s["token"], 1);
    assert_eq!(s["cmd_exit"], 0);
    assert_eq!(s["lease_lost"], false);
    assert_eq!(s["released"], true);
    assert_eq!(s["exit_code"], 0);
    assert_released(&e, "task-x");

    // Again with `list`: a new checkout, a new token, the new run's pid.
    let cmd = sh_with_tasklock(&e, r#""$0" --dir "$1" --agent observer list --json"#);
    let run = Spawned::start(run_cmd(&e, "agent-a", &["run", "task-x"], &cmd));
    let run_pid = run.pid();
    let (status, r) = run.finish();
    assert_eq!(status.code(), Some(0), "{}", r.text());
    let j: Value = serde_json::from_str(&r.stdout).expect("CMD's output is run's stdout");
    assert_eq!(j["command"], "list");
    let rows = j["checkouts"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{j}");
    assert_eq!(rows[0]["key"], "task-x");
    assert_eq!(rows[0]["token"], 2);
    assert_eq!(rows[0]["agent"]["id"], "agent-a");
    assert_eq!(rows[0]["agent"]["pid"], run_pid);
    assert!(
        r.stderr
            .contains("the command exited with 0 under `task-x` (token 2); released."),
        "{}",
        r.text()
    );
    assert_released(&e, "task-x");
}

/// As [`live`], on the test's store (PostgreSQL with `TASKLOCK_TEST_STORE=postgres`).
fn live_on_store(e: &Env, agent: &str, args: &[&str]) -> Run {
    let mut c = live(e, agent);
    use_store(&mut c, &e.dir());
    c.args(args);
    exec(c)
}

#[test]
fn run_on_a_key_the_agent_holds_runs_under_that_checkout_and_leaves_it_held() {
    let e = Env::new();
    let agent_process = sleeper();
    let pid = agent_process.pid();
    let r = live_on_store(&e, "agent-a", &["heartbeat", "--pid", &pid.to_string()]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = live_on_store(&e, "agent-a", &["checkout", "task-k", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let token = r.json()["checkout"]["token"].as_u64().unwrap();
    let held = |what: &str| {
        let j = live_on_store(&e, "observer", &["status", "task-k", "--json"]).json();
        assert_eq!(j["outcome"], "held", "{what}: {j}");
        assert_eq!(j["checkout"]["token"], token, "{what}: {j}");
        assert_eq!(j["checkout"]["agent"]["id"], "agent-a", "{what}: {j}");
        assert_eq!(
            j["checkout"]["agent"]["pid"], pid,
            "{what}: still bound to the agent's own process: {j}"
        );
    };

    // The command runs under the checkout the agent has, bound to its own process.
    let cmd = sh_with_tasklock(
        &e,
        r#""$0" --dir "$1" --agent observer status task-k --json"#,
    );
    let mut args = vec!["--json", "run", "task-k", "--"];
    args.extend(cmd.iter().map(String::as_str));
    let r = live_on_store(&e, "agent-a", &args);
    assert_eq!(r.code, 0, "{}", r.text());
    let inside: Value = serde_json::from_str(&r.stdout).expect("CMD's output is run's stdout");
    assert_eq!(inside["checkout"]["token"], token, "{inside}");
    assert_eq!(inside["checkout"]["agent"]["pid"], pid, "{inside}");
    let s = summary(&r);
    assert_eq!(s["token"], token, "{s}");
    assert_eq!(s["kept"], true, "{s}");
    assert_eq!(s["released"], false, "{s}");
    assert_eq!(s["lease_lost"], false, "{s}");
    assert_eq!(s["exit_code"], 0, "{s}");
    held("after a command that succeeded");

    // Whatever way the command ends, the checkout stays: a failure, a command that cannot
    // be started.
    let r = live_on_store(
        &e,
        "agent-a",
        &["--json", "run", "task-k", "--", "sh", "-c", "exit 3"],
    );
    assert_eq!(
        (r.code, &summary(&r)["kept"]),
        (3, &Value::Bool(true)),
        "{}",
        r.text()
    );
    held("after a command that failed");
    let r = live_on_store(&e, "agent-a", &["run", "task-k", "--", "/nonexistent/cmd"]);
    assert_eq!(r.code, 127, "{}", r.text());
    held("after a command that could not start");
    let r = live_on_store(
        &e,
        "agent-a",
        &["--json", "run", "task-k", "--wait", "5s", "--", "true"],
    );
    assert_eq!(
        (r.code, &summary(&r)["kept"]),
        (0, &Value::Bool(true)),
        "{}",
        r.text()
    );
    held("after run --wait");
    let releases = audit(&e.dir())
        .iter()
        .filter(|v| v["key"] == "task-k" && v["event"] == "release")
        .count();
    assert_eq!(releases, 0);

    // A key `run` takes itself is released when the command ends, as always.
    let r = live_on_store(&e, "agent-a", &["--json", "run", "task-o", "--", "true"]);
    let s = summary(&r);
    assert_eq!(
        (s["kept"].clone(), s["released"].clone()),
        (Value::Bool(false), Value::Bool(true))
    );
    let j = live_on_store(&e, "observer", &["status", "task-o", "--json"]).json();
    assert_eq!(j["outcome"], "free", "{j}");

    // In markdown, it says the checkout stays.
    e.ok("agent-b", &["checkout", "task-m"]);
    let r = e.run(None, &["--agent", "agent-b", "run", "task-m", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stderr.contains("stays checked out"), "{}", r.text());
    snap!(e, "run_kept_summary", r);
    drop(agent_process);
}

#[test]
fn run_releases_after_cmd_is_killed_by_a_signal() {
    for (sig, code) in [("TERM", 143), ("KILL", 137), ("INT", 130)] {
        let e = Env::new();
        let script = format!("kill -{sig} $$; sleep 5");
        let r = live_run(
            &e,
            "agent-a",
            &["--json", "run", "task-x", "--", "sh", "-c", &script],
        );
        assert_eq!(r.code, code, "SIG{sig}: {}", r.text());
        assert_eq!(r.stdout, "");
        let s = summary(&r);
        assert_eq!(s["cmd_exit"], code);
        assert_eq!(s["exit_code"], code);
        assert_eq!(s["released"], true);
        assert_eq!(s["lease_lost"], false);
        assert_released(&e, "task-x");
    }
}

#[test]
fn run_denied_when_held_by_another_agent_does_not_run_cmd() {
    let e = Env::new();
    e.ok("agent-b", &["checkout", "task-x", "--reason", "review"]);
    let marker = e.tmp.path().join("marker");
    let m = marker.display().to_string();

    // (Env::run would put `--agent` after CMD, where it belongs to CMD.)
    let r = pinned_run(
        &e,
        "agent-a",
        &["run", "task-x", "--", "sh", "-c", "touch \"$0\"", &m],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(!marker.exists(), "CMD ran although the key was denied");
    snap!(e, "run_denied", r);

    let r = pinned_run(
        &e,
        "agent-a",
        &["--json", "run", "task-x", "--", "touch", &m],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(!marker.exists(), "CMD ran although the key was denied");
    let j = r.json();
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["key"], "task-x");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    assert_eq!(j["checkout"]["token"], 1);
    assert_eq!(j["checkout"]["reason"], "review");

    assert_eq!(held_keys(&e.dir()), ["task-x"]);
    let evs = events(&e.dir());
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert_eq!(evs[0], ev("acquire", "task-x", "agent-b", Some("review")));
    for d in &evs[1..] {
        assert_eq!(d.0, "deny");
        assert_eq!(d.2, "agent-a");
    }

    // On the real clock too (the pinned lease above has long run out in real time).
    let e = Env::new();
    live_ok(&e, "agent-b", &["checkout", "task-x"]);
    let marker = e.tmp.path().join("marker");
    let m = marker.display().to_string();
    let r = live_run(&e, "agent-a", &["run", "task-x", "--", "touch", &m]);
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(!marker.exists(), "CMD ran although the key was denied");
    assert_eq!(held_keys(&e.dir()), ["task-x"]);
    let j = live_ok(&e, "agent-b", &["status", "task-x", "--json"]).json();
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    assert_eq!(j["checkout"]["token"], 1);
}

#[test]
fn run_command_not_found_is_127_and_not_executable_is_126_and_releases() {
    let e = Env::new();
    let r = live_run(
        &e,
        "agent-a",
        &[
            "--json",
            "run",
            "task-x",
            "--",
            "tasklock-test-no-such-command",
        ],
    );
    assert_eq!(r.code, 127, "{}", r.text());
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr
            .contains("cannot run tasklock-test-no-such-command"),
        "{}",
        r.text()
    );
    let s = summary(&r);
    assert_eq!(s["cmd_exit"], Value::Null);
    assert_eq!(s["exit_code"], 127);
    assert_eq!(s["released"], true);
    assert_eq!(s["lease_lost"], false);
    assert_released(&e, "task-x");

    let script = e.tmp.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let r = live_run(
        &e,
        "agent-a",
        &["run", "task-x", "--", &script.display().to_string()],
    );
    assert_eq!(r.code, 126, "{}", r.text());
    assert_released(&e, "task-x");

    // The markdown, with the clock pinned.
    let r = pinned_run(
        &e,
        "agent-a",
        &["run", "task-y", "--", "tasklock-test-no-such-command"],
    );
    assert_eq!(r.code, 127, "{}", r.text());
    snap!(e, "run_command_not_found", r);
    assert_eq!(held_keys(&e.dir()), Vec::<String>::new());
}

#[test]
fn run_usage_errors() {
    let e = Env::new();
    for args in [
        &["run", "task-x"][..],
        &["run", "task-x", "--"],
        &["run", "--", "true"],
    ] {
        let r = live_run(&e, "agent-a", args);
        assert_eq!(r.code, 64, "{args:?}: {}", r.text());
    }
    let r = live_run(&e, "agent-a", &["run", "a\nb", "--", "true"]);
    assert_eq!(r.code, 64, "{}", r.text());
    let r = live_run(
        &e,
        "agent-a",
        &["--json", "run", "task-x", "--timeout", "soon", "--", "true"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "usage");
    assert_eq!(held_keys(&e.dir()), Vec::<String>::new());
}

// ---------------------------------------------------------------- run: signals

#[test]
fn sigterm_to_run_is_forwarded_to_cmd_and_the_key_released() {
    let e = Env::new();
    let pidfile = e.tmp.path().join("cmd.pid");
    let cmd = vec![
        "sh".to_string(),
        "-c".into(),
        "echo $$ > \"$0\"; exec sleep 30".into(),
        pidfile.display().to_string(),
    ];
    let run = Spawned::start(run_cmd(&e, "agent-a", &["--json", "run", "task-x"], &cmd));
    let cmd_pid = wait_pid_file(&pidfile);
    let _cmd_guard = KillOnDrop(cmd_pid);
    assert!(alive(cmd_pid));
    assert_eq!(held_keys(&e.dir()), ["task-x"]);
    // run learns CMD's pid right after spawning it; give it a moment to get there.
    std::thread::sleep(Duration::from_millis(200));

    signal(run.pid(), "TERM");
    let (status, r) = run.finish();
    assert_eq!(status.code(), Some(143), "{}", r.text());
    assert!(!alive(cmd_pid), "CMD still runs after run exited");
    let s = summary(&r);
    assert_eq!(s["cmd_exit"], 143, "CMD was ended by the forwarded SIGTERM");
    assert_eq!(s["exit_code"], 143);
    assert_eq!(s["released"], true);
    assert_released(&e, "task-x");
    assert_eq!(
        events(&e.dir()),
        [
            ev("acquire", "task-x", "agent-a", None),
            ev("release", "task-x", "agent-a", None)
        ]
    );
}

#[test]
fn sigkill_of_run_takes_cmd_with_it_and_frees_the_key_at_once() {
    let e = Env::new();
    let pidfile = e.tmp.path().join("cmd.pid");
    let cmd = vec![
        "sh".to_string(),
        "-c".into(),
        "echo $$ > \"$0\"; exec sleep 30".into(),
        pidfile.display().to_string(),
    ];
    let run = Spawned::start(run_cmd(&e, "agent-a", &["run", "task-x"], &cmd));
    let run_pid = run.pid();
    let cmd_pid = wait_pid_file(&pidfile);
    let _cmd_guard = KillOnDrop(cmd_pid);
    assert!(alive(cmd_pid));

    signal(run_pid, "KILL");
    // finish() reaps run (a zombie would still look alive) and needs CMD, which shares
    // run's stdout and stderr, to be gone too.
    let (status, _) = run.finish();
    assert_eq!(status.signal(), Some(9));
    eventually("CMD is killed with run (parent-death signal)", || {
        !alive(cmd_pid)
    });

    // run's recorded pid is dead: another agent takes the key at once (30m lease left).
    let r = live_run(&e, "agent-b", &["--json", "checkout", "task-x"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    assert_eq!(j["checkout"]["token"], 2);
    assert_eq!(j["took_over"]["agent"]["id"], "agent-a");
    assert_eq!(j["took_over"]["agent"]["pid"], run_pid);
    assert_eq!(j["took_over"]["token"], 1);
    assert_eq!(j["took_over"]["reason"], "agent_death");
    assert_eq!(j["took_over"]["cause"], "process_gone");

    let log = audit(&e.dir());
    let reaped: Vec<&Value> = log
        .iter()
        .filter(|v| v["event"] == "auto_release")
        .collect();
    assert_eq!(reaped.len(), 1, "{log:?}");
    assert_eq!(reaped[0]["key"], "task-x");
    assert_eq!(reaped[0]["agent"], "agent-a");
    assert_eq!(reaped[0]["token"], 1);
    assert_eq!(reaped[0]["reason"], "agent_death");
    assert_eq!(reaped[0]["by"], "agent-b");
    assert_eq!(
        events(&e.dir()).last().unwrap(),
        &ev("acquire", "task-x", "agent-b", None)
    );
}

#[test]
fn sigstop_past_the_lease_then_sigcont_reports_the_lease_lost() {
    let e = Env::new();
    let started = e.tmp.path().join("started");
    let cmd = vec![
        "sh".to_string(),
        "-c".into(),
        "touch \"$0\"; exec sleep 6".into(),
        started.display().to_string(),
    ];
    let run = Spawned::start(run_cmd(
        &e,
        "agent-a",
        &["--json", "run", "task-x", "--timeout", "2s"],
        &cmd,
    ));
    let run_pid = run.pid();
    // CMD has started, so run's checkout is done and its guard released; the first
    // renewal is a third of the lease away.
    eventually("CMD started", || started.exists());
    signal(run_pid, "STOP");

    // Stopped, run cannot renew: once the lease plus the 2 s break grace has passed,
    // another agent takes the key. The stopped process is alive, so it is a timeout.
    std::thread::sleep(Duration::from_millis(3500));
    let deadline = Instant::now() + LIMIT;
    let taken = loop {
        let r = Spawned::start({
            let mut c = live(&e, "agent-b");
            c.args(["--json", "checkout", "task-x"]);
            c
        })
        .finish()
        .1;
        if r.code == 0 {
            break r.json();
        }
        assert_eq!(r.code, 2, "{}", r.text());
        assert!(Instant::now() < deadline, "agent-b never got the key");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(taken["outcome"], "granted");
    assert_eq!(taken["checkout"]["agent"]["id"], "agent-b");
    assert_eq!(taken["took_over"]["agent"]["id"], "agent-a");
    assert_eq!(taken["took_over"]["agent"]["pid"], run_pid);
    assert_eq!(taken["took_over"]["reason"], "timeout");
    let b_token = taken["checkout"]["token"].as_u64().unwrap();
    assert!(b_token > 1);

    signal(run_pid, "CONT");
    let (status, r) = run.finish();
    assert_eq!(
        status.code(),
        Some(4),
        "CMD exited 0 but the lease was lost: {}",
        r.text()
    );
    assert!(
        r.stderr.contains("LEASE LOST") || r.stderr.contains("was lost"),
        "{}",
        r.text()
    );
    let s = summary(&r);
    assert_eq!(s["cmd_exit"], 0);
    assert_eq!(s["lease_lost"], true);
    assert_eq!(s["released"], false);
    assert_eq!(s["exit_code"], 4);

    // run did not release agent-b's checkout on its way out.
    let j = live_ok(&e, "observer", &["status", "task-x", "--json"]).json();
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    assert_eq!(j["checkout"]["token"], b_token);
    assert!(
        !events(&e.dir())
            .iter()
            .any(|(event, _, agent, _)| event == "release" && agent == "agent-a"),
        "{:?}",
        audit(&e.dir())
    );
}

// ---------------------------------------------------------------- heartbeat --watch

/// A process to watch: `sleep 30`, killed on drop.
fn sleeper() -> Spawned {
    let mut c = Command::new("sleep");
    c.arg("30").stdin(Stdio::null());
    Spawned::start(c)
}

fn assert_reaped_for_death(e: &Env, keys: &[&str]) {
    let log = audit(&e.dir());
    let mut reaped: Vec<String> = log
        .iter()
        .filter(|v| v["event"] == "auto_release")
        .map(|v| {
            assert_eq!(v["agent"], "agent-a", "{v}");
            assert_eq!(v["reason"], "agent_death", "{v}");
            v["key"].as_str().unwrap().to_string()
        })
        .collect();
    reaped.sort();
    assert_eq!(reaped, keys, "{log:?}");
}

#[test]
fn watch_releases_the_agents_checkouts_when_the_process_exits() {
    let e = Env::new();
    live_ok(&e, "agent-a", &["checkout", "k1"]);
    live_ok(&e, "agent-a", &["checkout", "k2"]);
    live_ok(&e, "agent-b", &["checkout", "k3"]);
    let p = sleeper();
    let p_pid = p.pid();
    let watcher = Spawned::start({
        let mut c = live(&e, "agent-a");
        c.args(["--json", "heartbeat", "--watch", "--pid"])
            .arg(p_pid.to_string())
            .args(["--interval", "1s"]);
        c
    });
    eventually("the watcher's first beat", || registered(&e.dir()));
    assert_eq!(held_keys(&e.dir()), ["k1", "k2", "k3"]);

    // From here on only files are read: the watcher alone must end the checkouts.
    signal(p_pid, "KILL");
    p.finish();
    eventually("the watcher released agent-a's checkouts", || {
        held_keys(&e.dir()) == ["k3"]
    });
    let (status, r) = watcher.finish();
    assert_eq!(status.code(), Some(0), "{}", r.text());
    let j = r.json();
    assert_eq!(j["command"], "heartbeat");
    assert_eq!(j["outcome"], "process_exited");
    assert_eq!(j["agent"], "agent-a");
    assert_eq!(j["pid"], p_pid);
    assert!(j["beats"].as_u64().unwrap() >= 1, "{j}");
    let mut released: Vec<&str> = j["released"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    released.sort();
    assert_eq!(released, ["k1", "k2"]);
    assert_eq!(j["watcher_pid"], Value::Null);

    assert_reaped_for_death(&e, &["k1", "k2"]);
    let j = live_ok(&e, "observer", &["list", "--json"]).json();
    let rows = j["checkouts"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{j}");
    assert_eq!(rows[0]["key"], "k3");
    assert_eq!(rows[0]["agent"]["id"], "agent-b");
    let j = live_ok(&e, "observer", &["agents", "--json"]).json();
    let a = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "agent-a")
        .unwrap_or_else(|| panic!("agent-a not listed: {j}"));
    assert_eq!(a["state"], "dead", "{a}");
    assert_eq!(a["pid"], p_pid);
}

/// A beat that meets the watched process dead ends the agent's checkouts itself (the
/// process died as the watcher beat): the watcher reports them released all the same.
/// Made certain with a process that has exited but is not yet collected (a zombie): its
/// pid is still found, so the watcher starts, and its first beat judges it gone.
#[test]
fn watch_reports_the_checkouts_its_beat_ended_when_the_process_died_during_it() {
    let e = Env::new();
    live_ok(&e, "agent-a", &["checkout", "k1"]);
    live_ok(&e, "agent-a", &["checkout", "k2"]);
    live_ok(&e, "agent-b", &["checkout", "k3"]);
    let mut z = Command::new("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let z_pid = z.id();
    eventually("the process exited, not yet collected", || {
        tasklock::os::process(z_pid).is_some_and(|p| p.zombie)
    });
    let watcher = Spawned::start({
        let mut c = live(&e, "agent-a");
        c.args(["--json", "heartbeat", "--watch", "--pid"])
            .arg(z_pid.to_string())
            .args(["--interval", "1s"]);
        c
    });
    let (status, r) = watcher.finish();
    z.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "process_exited", "{j}");
    assert_eq!(j["beats"], 1, "{j}");
    let mut released: Vec<&str> = j["released"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    released.sort();
    assert_eq!(released, ["k1", "k2"], "{j}");
    assert_eq!(held_keys(&e.dir()), ["k3"]);
    assert_reaped_for_death(&e, &["k1", "k2"]);
}

#[test]
fn watch_detached_returns_at_once_and_releases_when_the_process_exits() {
    let e = Env::new();
    live_ok(&e, "agent-a", &["checkout", "k1"]);
    live_ok(&e, "agent-a", &["checkout", "k2"]);
    let p = sleeper();
    let p_pid = p.pid();
    let p_arg = p_pid.to_string();

    // Its output closes at once although the watcher lives on (exec() waits for EOF).
    let r = live_run(
        &e,
        "agent-a",
        &[
            "--json",
            "heartbeat",
            "--watch",
            "--detach",
            "--pid",
            &p_arg,
            "--interval",
            "1s",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["command"], "heartbeat");
    assert_eq!(j["outcome"], "detached");
    assert_eq!(j["agent"], "agent-a");
    assert_eq!(j["pid"], p_pid);
    assert_eq!(j["beats"], 0);
    assert_eq!(j["released"], serde_json::json!([]));
    let w = j["watcher_pid"].as_u64().expect("watcher_pid") as u32;
    let _w_guard = KillOnDrop(w);
    assert!(alive(w), "the detached watcher is not running");

    // Its first beat means it is watching (before it, pid P's death would go unseen).
    eventually("the watcher's first beat", || registered(&e.dir()));
    assert_eq!(held_keys(&e.dir()), ["k1", "k2"]);
    signal(p_pid, "KILL");
    p.finish();
    eventually("the detached watcher released the checkouts", || {
        held_keys(&e.dir()).is_empty()
    });
    eventually("the detached watcher exited", || !alive(w));
    assert_reaped_for_death(&e, &["k1", "k2"]);
}

#[test]
fn sigterm_stops_watch_and_keeps_the_checkouts() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    let p = sleeper();
    let p_pid = p.pid();
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&format!(r"\b{p_pid}\b"), "[PID]");

    for json in [false, true] {
        // Pinned clock and a long interval: exactly one beat before the signal.
        let before = beats(&e.dir());
        let watcher = Spawned::start({
            let mut c = pinned(&e, "agent-a");
            if json {
                c.arg("--json");
            }
            c.args(["heartbeat", "--watch", "--pid"])
                .arg(p_pid.to_string())
                .args(["--interval", "1h"]);
            c
        });
        eventually("the watcher's first beat", || beats(&e.dir()) > before);
        // The handler for SIGTERM is installed before the first beat.
        signal(watcher.pid(), "TERM");
        let (status, r) = watcher.finish();
        assert_eq!(status.code(), Some(0), "{}", r.text());
        if json {
            let j = r.json();
            assert_eq!(j["command"], "heartbeat");
            assert_eq!(j["outcome"], "stopped");
            assert_eq!(j["agent"], "agent-a");
            assert_eq!(j["pid"], p_pid);
            assert_eq!(j["beats"], 1);
            assert_eq!(j["released"], serde_json::json!([]));
            assert_eq!(j["watcher_pid"], Value::Null);
            assert_eq!(j["now"], T0);
        } else {
            assert!(r.stdout.contains("Stopped watching"), "{}", r.text());
            settings.bind(|| snap!(e, "watch_stopped", r));
        }
        assert!(alive(p_pid), "the watched process is left alone");
        assert_eq!(held_keys(&e.dir()), ["k1"], "checkouts kept");
    }
    let j = e.ok("agent-a", &["list", "--json"]).json();
    let rows = j["checkouts"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{j}");
    assert_eq!(rows[0]["key"], "k1");
    assert_eq!(rows[0]["agent"]["id"], "agent-a");
    assert!(
        !audit(&e.dir()).iter().any(|v| v["event"] != "acquire"),
        "nothing released: {:?}",
        audit(&e.dir())
    );
}

#[test]
fn watch_detached_markdown_snapshot() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    let p = sleeper();
    let p_pid = p.pid();
    let r = e.run(
        Some("agent-a"),
        &[
            "heartbeat",
            "--watch",
            "--detach",
            "--pid",
            &p_pid.to_string(),
            "--interval",
            "1s",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let w: u32 = r
        .stdout
        .split("(watcher pid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no watcher pid: {}", r.text()));
    let _w_guard = KillOnDrop(w);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&format!(r"\b{p_pid}\b"), "[PID]");
    settings.add_filter(&format!(r"\b{w}\b"), "[WATCHER_PID]");
    settings.bind(|| snap!(e, "watch_detached", r));

    // The watcher (which inherited the pinned clock) still does its job.
    eventually("the watcher's first beat", || registered(&e.dir()));
    signal(p_pid, "KILL");
    p.finish();
    eventually("the checkout is released", || {
        held_keys(&e.dir()).is_empty()
    });
    eventually("the detached watcher exited", || !alive(w));
}

#[test]
fn watch_without_pid_watches_the_claude_code_process() {
    // In Claude Code, `$PPID` cannot be pre-approved ("a variable in this command can't
    // be checked"), so `--watch` finds the process itself: CLAUDE_PID, which Claude Code
    // sets in every Bash call and hook.
    let e = Env::new();
    live_ok(&e, "agent-a", &["checkout", "k1"]);
    let p = sleeper();
    let p_pid = p.pid();
    let mut cmd = live(&e, "agent-a");
    cmd.env("CLAUDE_PID", p_pid.to_string()).args([
        "--json",
        "heartbeat",
        "--watch",
        "--detach",
        "--interval",
        "1s",
    ]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["pid"], p_pid, "watches CLAUDE_PID: {j}");
    let w = j["watcher_pid"].as_u64().expect("a watcher pid") as u32;
    let _w_guard = KillOnDrop(w);
    eventually("the watcher holds its lock", || {
        flocked(&e.dir().join("watchers/agent-a"))
    });
    // A second watcher for the same agent leaves the job to the first.
    let mut cmd = live(&e, "agent-a");
    cmd.env("CLAUDE_PID", p_pid.to_string()).args([
        "--json",
        "heartbeat",
        "--watch",
        "--interval",
        "1s",
    ]);
    let second = exec(cmd);
    assert_eq!(second.code, 0, "{}", second.text());
    assert_eq!(
        second.json()["outcome"],
        "already_watched",
        "{}",
        second.text()
    );
    let mut cmd = live(&e, "agent-a");
    cmd.env("CLAUDE_PID", p_pid.to_string())
        .args(["heartbeat", "--watch", "--interval", "1s"]);
    snap!(e, "watch_already_watched", exec(cmd));
    signal(p_pid, "KILL");
    p.finish();
    eventually("the checkout is released", || {
        held_keys(&e.dir()).is_empty()
    });
    eventually("the detached watcher exited", || !alive(w));
}

#[test]
fn watch_usage_errors() {
    let e = Env::new();
    let r = live_run(&e, "agent-a", &["heartbeat", "--interval", "1s"]);
    assert_eq!(r.code, 64, "--interval without --watch: {}", r.text());
    let r = live_run(&e, "agent-a", &["heartbeat", "--detach", "--pid", "1"]);
    assert_eq!(r.code, 64, "--detach without --watch: {}", r.text());

    // A process that existed and is gone (reaped), and a pid that never can exist.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().to_string();
    gone.wait().unwrap();
    for pid in [gone_pid.as_str(), "4000000000"] {
        for detach in [false, true] {
            let mut args = vec!["--json", "heartbeat", "--watch", "--pid", pid];
            if detach {
                args.push("--detach");
            }
            let r = live_run(&e, "agent-a", &args);
            assert_eq!(r.code, 64, "{args:?}: {}", r.text());
            let j = r.json();
            assert_eq!(j["error"]["kind"], "usage");
            let msg = j["error"]["message"].as_str().unwrap();
            assert!(msg.contains("no such process"), "{msg}");
            assert!(msg.contains(pid), "{msg}");
        }
    }
    assert!(!registered(&e.dir()), "a failed watch registered the agent");
}

#[test]
fn run_wait_queues_then_runs_once_the_key_is_handed_over() {
    let e = Env::new();
    live_ok(&e, "holder", &["checkout", "deploy"]);
    let marker = e.tmp.path().join("ran");
    let mut cmd = live(&e, "runner");
    cmd.args(["run", "deploy", "--wait", "30s", "--", "sh", "-c"])
        .arg(format!("echo ran > '{}'", marker.display()));
    let waiting = Spawned::start(cmd);
    eventually("the runner queued", || {
        let j = live_run(&e, "observer", &["status", "deploy", "--json"]).json();
        j["queue"]["waiters"] == serde_json::json!(["runner"])
    });
    assert!(
        !marker.exists(),
        "CMD must not run before the key is granted"
    );
    live_ok(&e, "holder", &["release", "deploy"]);
    let (status, out) = waiting.finish();
    assert_eq!(status.code(), Some(0), "{}", out.text());
    assert!(marker.exists(), "CMD ran once the key was handed over");
    assert!(held_keys(&e.dir()).is_empty(), "released after CMD");

    // A wait that runs out exits 2 without running CMD.
    live_ok(&e, "holder", &["checkout", "deploy"]);
    std::fs::remove_file(&marker).unwrap();
    let r = live_run(
        &e,
        "runner",
        &[
            "run",
            "deploy",
            "--wait",
            "1s",
            "--json",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(r.json()["command"], "run");
    assert!(!marker.exists());
}

#[test]
fn watch_and_run_summaries_in_markdown() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    e.ok("agent-a", &["checkout", "k2"]);
    let p = sleeper();
    let p_pid = p.pid();
    let watcher = Spawned::start({
        let mut c = pinned(&e, "agent-a");
        c.args(["heartbeat", "--watch", "--pid"])
            .arg(p_pid.to_string())
            .args(["--interval", "1s"]);
        c
    });
    eventually("the watcher's first beat", || registered(&e.dir()));
    signal(p_pid, "KILL");
    p.finish();
    let (status, r) = watcher.finish();
    assert_eq!(status.code(), Some(0), "{}", r.text());
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&format!(r"\b{p_pid}\b"), "[PID]");
    settings.bind(|| snap!(e, "watch_process_exited", r));

    // run's own summary goes to stderr, leaving stdout to CMD.
    let r = pinned_run(
        &e,
        "agent-a",
        &["run", "k3", "--", "sh", "-c", "echo out; exit 3"],
    );
    assert_eq!(r.code, 3);
    assert_eq!(r.stdout, "out\n");
    snap!(e, "run_summary", r);
}

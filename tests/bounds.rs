//! Waiting has bounds: a command never waits forever for a `.guard` held by a stopped
//! or hung process, and `heartbeat --watch` refuses an interval that would spin.

#[macro_use]
mod common;
use common::*;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `tasklock ARGS --dir DIR --agent a` with the guard timeout `timeout`.
fn cmd(e: &Env, timeout: &str, args: &[&str]) -> Command {
    let mut c = base_cmd(&e.now);
    c.env("TASKLOCK_GUARD_TIMEOUT", timeout)
        .arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", "a"]);
    c
}

fn guard(e: &Env) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(e.dir().join(".guard"))
        .expect("the store has a .guard")
}

#[test]
fn a_held_guard_is_waited_for_then_given_up_with_the_holder_named() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let held = guard(&e);
    held.lock().unwrap();
    let path = e.dir().join(".guard").display().to_string();
    let me = std::process::id();

    let start = Instant::now();
    let r = exec(cmd(&e, "3s", &["checkout", "task-2"]));
    let took = start.elapsed();
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    let waiting: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("tasklock: waiting for the lock on"))
        .collect();
    assert_eq!(waiting.len(), 1, "one notice line: {}", r.text());
    assert!(waiting[0].contains(&path), "{}", r.text());
    assert!(
        waiting[0].contains(&format!("held by pid {me} ")),
        "{}",
        r.text()
    );
    assert!(waiting[0].ends_with("giving up after 3s"), "{}", r.text());
    assert!(
        r.stderr
            .contains("gave up after 3s waiting for the lock on"),
        "{}",
        r.text()
    );
    assert!(
        !record_path(&e.dir(), "task-2").exists(),
        "nothing was written"
    );

    // JSON: the error object on stdout names the guard; the notice stays on stderr.
    let r = exec(cmd(&e, "2500ms", &["release", "task-1", "--json"]));
    assert_eq!(r.code, 1, "{}", r.text());
    let j = r.json();
    assert_eq!(j["error"]["kind"], "store", "{j}");
    assert_eq!(j["error"]["exit_code"], 1, "{j}");
    let msg = j["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&path) && msg.contains(&format!("pid {me}")),
        "{msg}"
    );
    assert!(r.stderr.contains("waiting for the lock"), "{}", r.text());
    assert!(e.run(Some("a"), &["status", "task-1", "--json"]).json()["outcome"] == "held");

    // Reads do not take the guard: they still answer at once.
    let start = Instant::now();
    let r = exec(cmd(&e, "3s", &["list"]));
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(start.elapsed() < Duration::from_secs(2));
    drop(held);
}

#[test]
fn a_waiting_command_goes_on_when_the_guard_is_let_go() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let held = guard(&e);
    held.lock().unwrap();
    let child = cmd(&e, "30s", &["checkout", "task-2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2600));
    held.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("waiting for the lock on"), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "granted");
    // The guard is free again: the next command does not wait.
    let start = Instant::now();
    let r = exec(cmd(&e, "3s", &["release", "task-2"]));
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(r.stderr, "", "no notice when nothing was waited for");
}

/// The case that was reported: another process stopped with SIGSTOP while holding the
/// guard (here util-linux `flock`, which holds it for a `sleep`).
#[test]
fn a_guard_held_by_a_stopped_process_names_it() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let guard_path = e.dir().join(".guard");
    let mut holder = Command::new("flock")
        .arg(&guard_path)
        .args(["sleep", "120"])
        .process_group(0)
        .spawn()
        .expect("util-linux flock on PATH");
    let pgid = holder.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !flocked(&e.dir().join(".guard")) {
        assert!(Instant::now() < deadline, "flock never took the guard");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling the process group we started.
    unsafe { libc::kill(-pgid, libc::SIGSTOP) };
    let r = exec(cmd(&e, "2s", &["release", "task-1"]));
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
        libc::kill(-pgid, libc::SIGCONT);
    }
    let _ = holder.wait();
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(
        r.stderr
            .contains(&format!("held by pid {pgid} (flock, stopped)")),
        "{}",
        r.text()
    );
    assert_eq!(
        e.run(Some("a"), &["status", "task-1", "--json"]).json()["outcome"],
        "held",
        "nothing was released"
    );
}

#[test]
fn a_bad_guard_timeout_is_a_usage_error() {
    let e = Env::new();
    let r = exec(cmd(&e, "soon", &["checkout", "task-1"]));
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("TASKLOCK_GUARD_TIMEOUT"), "{}", r.text());
    std::fs::write(e.dir().join("config.yaml"), "guard_timeout: never\n").unwrap();
    let r = e.run(Some("a"), &["checkout", "task-1"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("guard_timeout"), "{}", r.text());
}

#[test]
fn watch_interval_has_a_lower_bound() {
    let e = Env::new();
    for short in ["1ms", "999ms", "500ms"] {
        let r = e.run(
            Some("a"),
            &["heartbeat", "--watch", "--pid", "1", "--interval", short],
        );
        assert_eq!(r.code, 64, "{short}: {}", r.text());
        assert!(r.stderr.contains("at least 1s"), "{}", r.text());
        let r = e.run(
            Some("a"),
            &[
                "heartbeat",
                "--watch",
                "--pid",
                "1",
                "--interval",
                short,
                "--json",
            ],
        );
        assert_eq!(r.code, 64);
        assert_eq!(r.json()["error"]["kind"], "usage");
    }
    assert!(!e.dir().exists(), "nothing was started");
    // And the same bound for the default from config.yaml.
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), "heartbeat_interval: 100ms\n").unwrap();
    let r = e.run(Some("a"), &["heartbeat", "--watch", "--pid", "1"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("heartbeat_interval"), "{}", r.text());
}

#[test]
fn a_wait_for_a_held_guard_honours_the_waits_own_time_and_sigterm() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let held = guard(&e);
    held.lock().unwrap();

    // `--wait 2s` gives up after its 2 s, not after guard_timeout's 60 s: exit 2, the
    // answer of any wait that ran out.
    let start = Instant::now();
    let r = exec(cmd(
        &e,
        "60s",
        &["checkout", "task-2", "--wait", "2s", "--json"],
    ));
    let took = start.elapsed();
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let j = r.json();
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["key"], "task-2", "{j}");

    // SIGTERM ends a wait that is stuck behind the guard at once.
    let child = cmd(
        &e,
        "60s",
        &["checkout", "task-3", "--wait", "60s", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let start = Instant::now();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "conflict", "{j}");
    held.unlock().unwrap();

    // Nothing was taken meanwhile, and the guard works as before.
    let r = exec(cmd(&e, "3s", &["checkout", "task-2", "--json"]));
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn doctor_names_the_process_that_holds_the_guard() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let j = exec(cmd(&e, "3s", &["doctor", "--json"])).json();
    let names: Vec<&str> = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"guard"),
        "no guard check while it is free: {j}"
    );

    let held = guard(&e);
    held.lock().unwrap();
    let j = exec(cmd(&e, "3s", &["doctor", "--json"])).json();
    let check = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "guard")
        .unwrap_or_else(|| panic!("no guard check: {j}"))
        .clone();
    assert_eq!(check["status"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("held by pid {}", std::process::id())),
        "{detail}"
    );
    drop(held);
}

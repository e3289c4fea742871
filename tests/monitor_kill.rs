//! `inbox --follow` (the plugin's monitor) records a message as shown only once its line
//! is written out: killed at any point, even with its output blocked, it loses no
//! message; what it had not written is shown by the next monitor (and by the hooks).
//! At least once: a message may be shown twice, never not at all.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// More messages than a pipe's buffer (64 KiB) holds as lines.
const MESSAGES: usize = 600;

/// `tasklock --dir D --agent a1 inbox --follow --json` on the real clock (the messages
/// are hours old: no push is waited for), its output a pipe.
fn follower(e: &Env) -> Child {
    let mut cmd = base_cmd(&e.now);
    cmd.env_remove("TASKLOCK_NOW");
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["--agent", "a1", "inbox", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The id of a message line.
fn id_of(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    v["id"].as_str().unwrap().to_string()
}

/// a1's unread messages, with their deliveries, unmarked.
fn unread(e: &Env) -> Vec<Value> {
    let r = e.run(Some("a1"), &["inbox", "--peek", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    r.json()["messages"].as_array().unwrap().clone()
}

/// Wait until `child` blocks writing to its full pipe, as Linux tells (`wchan`); elsewhere,
/// or if it is never seen, go on (the test holds either way).
fn blocked_in_write(child: &Child) {
    let wchan = format!("/proc/{}/wchan", child.id());
    for _ in 0..400 {
        match std::fs::read_to_string(&wchan) {
            Ok(w) if w.contains("pipe_write") => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => return,
        }
    }
}

#[test]
fn a_monitor_killed_while_its_output_is_blocked_loses_no_message() {
    let mut e = Env::new();
    // a1's leases run out, and b1 meets them: one `lease_expired` message per key.
    for i in 0..MESSAGES {
        e.ok(
            "a1",
            &["checkout", &format!("key-{i:04}"), "--timeout", "1m"],
        );
    }
    e.at(T1H).ok("b1", &["list"]);
    let all: BTreeSet<String> = unread(&e)
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(all.len(), MESSAGES);

    // Lines read whole, from every monitor so far.
    let mut seen = BTreeSet::new();
    // Killed blocked on its full pipe (none read: N = 0), then after the test read N
    // lines, while it writes more.
    for n in [0, 1, 37, 150] {
        let mut child = follower(&e);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        if n == 0 {
            blocked_in_write(&child);
        }
        for _ in 0..n {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "the monitor ended");
            seen.insert(id_of(&line));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // What it wrote before it was killed is still in the pipe: read it out. A line
        // cut short by the kill is not read whole.
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        for line in rest.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            seen.insert(id_of(line));
        }
        // Every message not read whole is still to be shown: not recorded as delivered,
        // so the hooks and the next monitor show it.
        for m in unread(&e) {
            let id = m["id"].as_str().unwrap();
            if !seen.contains(id) {
                assert_ne!(
                    m["delivery"]["delivered"],
                    true,
                    "killed after {n} lines read, {} read in all: {m} is recorded as shown but never was",
                    seen.len()
                );
            }
        }
    }
    assert!(
        seen.len() < MESSAGES,
        "no monitor was killed with lines left"
    );

    // A new monitor shows every message not read yet.
    let mut child = follower(&e);
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    while seen.len() < MESSAGES {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                seen.insert(id_of(&line));
            }
            Err(_) => {
                let _ = child.kill();
                let missing: Vec<&String> = all.difference(&seen).collect();
                panic!("{} messages never shown: {missing:?}", missing.len());
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(seen, all);
}

//! Operations through the real binary: the audit log (every event type, filters,
//! rotation, `--follow`), freezes, `why` and `doctor`.
//!
//! The clock is pinned (`TASKLOCK_NOW`) everywhere except the `audit --follow` process,
//! which runs on the real clock. Nothing asserts on timing; waits have generous deadlines.

#[macro_use]
mod common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Exit codes (docs/exit-codes.md).
const HELD: i32 = 2;
const NO_SUCH: i32 = 3;
const NOT_HOLDER: i32 = 4;
const DEADLOCK: i32 = 5;
const USAGE: i32 = 64;

/// Generous: only a broken implementation comes near it.
const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Helpers

/// T0 plus `secs` seconds (within the first day).
fn at(secs: u32) -> String {
    format!(
        "2026-01-01T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Parse JSON lines, every one of them.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

/// `audit --json --limit 0` plus `extra` (run without an identity: `--agent` filters).
fn audit_cmd(e: &Env, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["audit", "--json"];
    if !extra.contains(&"--limit") {
        args.extend(["--limit", "0"]);
    }
    args.extend_from_slice(extra);
    let r = e.run(None, &args);
    assert_eq!(r.code, 0, "audit {extra:?}: {}", r.text());
    json_lines(&r.stdout)
}

/// The events appended since the last call.
fn new_events(e: &Env, seen: &mut usize) -> Vec<Value> {
    let all = audit_cmd(e, &[]);
    assert!(all.len() >= *seen, "the log shrank");
    let new = all[*seen..].to_vec();
    *seen = all.len();
    new
}

fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|v| v["event"].as_str().unwrap())
        .collect()
}

fn write_config(e: &Env, text: &str) {
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), text).unwrap();
}

fn plant_corrupt(e: &Env, key: &str) {
    std::fs::create_dir_all(e.dir().join("keys")).unwrap();
    std::fs::write(record_path(&e.dir(), key), b"garbage, not a record").unwrap();
}

fn why(e: &Env, agent: &str, key: &str) -> (Run, Value) {
    let md = e.run(Some(agent), &["why", key]);
    assert_eq!(md.code, 0, "why always exits 0: {}", md.text());
    let j = e.run(Some(agent), &["why", key, "--json"]);
    assert_eq!(j.code, 0, "{}", j.text());
    let j = j.json();
    assert_eq!(j["command"], "why");
    assert_eq!(j["key"], key);
    assert_eq!(j["agent"], agent);
    assert!(
        !j["reasons"].as_array().unwrap().is_empty(),
        "always some reason: {j}"
    );
    (md, j)
}

fn status_expires(e: &Env, key: &str) -> Value {
    let j = e.run(Some("observer"), &["status", key, "--json"]).json();
    j["checkout"]["expires_at"].clone()
}

// ---------------------------------------------------------------------------------------
// audit: every event type where it happens

#[test]
fn audit_records_every_event_type_where_it_happens() {
    let mut e = Env::new();
    e.as_operator();
    let mut seen = 0;

    // acquire, deny, renew, release
    e.ok(
        "a",
        &["checkout", "k1", "--timeout", "10m", "--reason", "fix"],
    );
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire"]);
    assert_eq!(ev[0]["key"], "k1");
    assert_eq!(ev[0]["agent"], "a");
    assert_eq!(ev[0]["token"], 1);
    assert_eq!(ev[0]["reason"], "fix");
    assert_eq!(ev[0]["ts"], T0);

    assert_eq!(e.run(Some("b"), &["checkout", "k1"]).code, HELD);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["deny"]);
    assert_eq!(ev[0]["agent"], "b");
    assert_eq!(ev[0]["holder"], "a");

    e.ok("a", &["renew", "k1"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["renew"]);
    assert_eq!((&ev[0]["agent"], &ev[0]["token"]), (&"a".into(), &1.into()));

    e.ok("a", &["release", "k1", "--note", "done"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["release"]);
    assert_eq!(ev[0]["agent"], "a");
    assert_eq!(ev[0]["reason"], "done", "the note is in the event");

    // force_release: about the holder, by the one who forced it; the holder is told.
    e.ok("a", &["checkout", "k2"]);
    e.ok("b", &["release", "k2", "--force", "--note", "stuck"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire", "force_release", "notify"]);
    assert_eq!(ev[1]["agent"], "a");
    assert_eq!(ev[1]["by"], "b");
    assert_eq!(ev[1]["reason"], "stuck");
    assert_eq!(ev[2]["agent"], "a", "the notice goes to the holder");
    assert_eq!(ev[2]["detail"], "force_released");

    // auto_release, timeout: a 1m lease taken over 5m later.
    e.ok("a", &["checkout", "k3", "--timeout", "1m"]);
    e.at(T5M);
    e.ok("b", &["checkout", "k3"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire", "auto_release", "notify", "acquire"]);
    assert_eq!(ev[1]["reason"], "timeout");
    assert_eq!(ev[1]["agent"], "a");
    assert_eq!(ev[1]["by"], "b");
    assert_eq!(ev[1]["ts"], T5M);
    assert_eq!(ev[2]["detail"], "lease_expired");
    assert_eq!(ev[3]["agent"], "b");

    // auto_release, agent_death: the registered process is killed.
    let mut p = AgentProcess::start();
    e.ok("d", &["heartbeat", "--pid", &p.pid()]);
    e.ok("d", &["checkout", "k4", "--timeout", "2h"]);
    p.kill();
    e.ok("b", &["checkout", "k4"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire", "auto_release", "notify", "acquire"]);
    assert_eq!(ev[1]["reason"], "agent_death");
    assert_eq!(ev[1]["agent"], "d");
    assert_eq!(ev[1]["by"], "b");
    assert_eq!(ev[2]["detail"], "agent_death");

    // auto_release, session_end: the Claude Code hook at the end of session s1.
    e.ok("s1", &["checkout", "k5"]);
    let mut hook = base_cmd(&e.now);
    use_store(&mut hook, &e.dir());
    hook.arg("--dir")
        .arg(e.dir())
        .args(["hook", "session-end"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = hook.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"session_id":"s1"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire", "auto_release"]);
    assert_eq!(ev[1]["reason"], "session_end");
    assert_eq!(ev[1]["agent"], "s1");
    assert!(ev[1].get("by").is_none(), "nobody else ended it: {}", ev[1]);

    // queue, then handoff (and its notice) when the holder releases.
    e.ok("a", &["checkout", "k6"]);
    assert_eq!(e.run(Some("b"), &["checkout", "k6", "--queue"]).code, HELD);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["acquire", "queue"]);
    assert_eq!(ev[1]["agent"], "b");
    assert_eq!(ev[1]["detail"], "position 1");
    e.ok("a", &["release", "k6"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["release", "handoff", "notify"]);
    assert_eq!(ev[1]["agent"], "b");
    assert_eq!(ev[1]["detail"], "reserved until 2026-01-01T00:07:00Z");
    assert_eq!(ev[2]["agent"], "b");
    assert_eq!(ev[2]["detail"], "reserved");

    // freeze and unfreeze
    e.ok(
        "ops",
        &["freeze", "k7", "--for", "1h", "--reason", "release day"],
    );
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["freeze"]);
    assert_eq!(ev[0]["agent"], "ops");
    assert_eq!(ev[0]["reason"], "release day");
    assert_eq!(ev[0]["detail"], "until 2026-01-01T01:05:00Z");
    assert_eq!(e.run(Some("a"), &["checkout", "k7"]).code, HELD);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["deny"]);
    assert_eq!(ev[0]["reason"], "frozen");
    e.ok("ops", &["unfreeze", "k7"]);
    let ev = new_events(&e, &mut seen);
    assert_eq!(names(&ev), ["unfreeze"]);
    assert_eq!(ev[0]["agent"], "ops");
    assert_eq!(ev[0]["key"], "k7");

    // deadlock: a holds x and waits for y in a passive place (`--queue`); b holds y and
    // asks to wait for x. The cycle is broken by dropping a's passive place, not by
    // refusing b (refusals, with blocked waits, are in tests/waits.rs).
    e.ok("a", &["checkout", "x"]);
    e.ok("b", &["checkout", "y"]);
    assert_eq!(e.run(Some("a"), &["checkout", "y", "--queue"]).code, HELD);
    assert_ne!(
        e.run(Some("b"), &["checkout", "x", "--queue"]).code,
        DEADLOCK
    );
    let ev = new_events(&e, &mut seen);
    assert_eq!(
        names(&ev),
        [
            "acquire", "acquire", "queue", "queue", "deadlock", "dequeue", "notify"
        ]
    );
    assert_eq!(ev[4]["agent"], "a");
    assert_eq!(ev[4]["reason"], "dropped");
    assert_eq!(ev[4]["holder"], "b");
    assert_eq!(ev[4]["detail"], "a → y → b → x → a");

    // The whole log: every type, and it matches the file line for line.
    let all = audit_cmd(&e, &[]);
    let mut types: Vec<&str> = names(&all);
    types.sort();
    types.dedup();
    assert_eq!(
        types,
        [
            "acquire",
            "auto_release",
            "deadlock",
            "deny",
            "dequeue",
            "force_release",
            "freeze",
            "handoff",
            "notify",
            "queue",
            "release",
            "renew",
            "unfreeze"
        ]
    );
    let mut reasons: Vec<&str> = all
        .iter()
        .filter(|v| v["event"] == "auto_release")
        .map(|v| v["reason"].as_str().unwrap())
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["agent_death", "session_end", "timeout"]);
    assert_eq!(all, audit(&e.dir()), "audit shows the file as it is");
}

// ---------------------------------------------------------------------------------------
// audit: filters and markdown

/// T0: a takes f1, b takes f2, c is denied f1. T0+20m: b forces f1 away from a, a takes
/// f3, c is denied f2.
fn filter_fixture() -> Env {
    let mut e = Env::new();
    e.as_operator();
    e.ok("a", &["checkout", "f1", "--timeout", "1h"]);
    e.ok("b", &["checkout", "f2", "--timeout", "1h"]);
    assert_eq!(e.run(Some("c"), &["checkout", "f1"]).code, HELD);
    e.at(&at(20 * 60));
    e.ok("b", &["release", "f1", "--force"]);
    e.ok("a", &["checkout", "f3"]);
    assert_eq!(e.run(Some("c"), &["checkout", "f2"]).code, HELD);
    e.at(&at(25 * 60));
    e
}

fn summary(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|v| {
            format!(
                "{} {} {}",
                v["event"].as_str().unwrap(),
                v["key"].as_str().unwrap(),
                v["agent"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn audit_filters_since_key_agent_and_limit() {
    let e = filter_fixture();
    let all = audit_cmd(&e, &[]);
    assert_eq!(
        summary(&all),
        [
            "acquire f1 a",
            "acquire f2 b",
            "deny f1 c",
            "force_release f1 a",
            "notify f1 a",
            "acquire f3 a",
            "deny f2 c",
        ]
    );

    // --since 10m at 00:25: only what happened at 00:20.
    let recent = audit_cmd(&e, &["--since", "10m"]);
    assert_eq!(recent, all[3..].to_vec());
    assert!(recent.iter().all(|v| v["ts"] == at(20 * 60)));
    assert_eq!(
        audit_cmd(&e, &["--since", "30m"]),
        all,
        "30m reaches back to T0"
    );
    assert_eq!(audit_cmd(&e, &["--since", "1m"]), Vec::<Value>::new());

    // --key
    let f1 = audit_cmd(&e, &["--key", "f1"]);
    assert_eq!(
        summary(&f1),
        [
            "acquire f1 a",
            "deny f1 c",
            "force_release f1 a",
            "notify f1 a"
        ]
    );
    assert!(audit_cmd(&e, &["--key", "nothing-here"]).is_empty());

    // --agent matches the agent, `by` (the forcer) and `holder` (of a deny).
    let b = audit_cmd(&e, &["--agent", "b"]);
    assert_eq!(
        summary(&b),
        [
            "acquire f2 b",
            "force_release f1 a",
            "notify f1 a",
            "deny f2 c"
        ]
    );
    assert_eq!(b[1]["by"], "b");
    assert_eq!(b[2]["by"], "b");
    assert_eq!(b[3]["holder"], "b");
    let c = audit_cmd(&e, &["--agent", "c"]);
    assert_eq!(summary(&c), ["deny f1 c", "deny f2 c"]);

    // Filters combine.
    assert_eq!(
        summary(&audit_cmd(&e, &["--agent", "b", "--key", "f1"])),
        ["force_release f1 a", "notify f1 a"]
    );
    assert_eq!(
        summary(&audit_cmd(&e, &["--agent", "b", "--since", "10m"])),
        ["force_release f1 a", "notify f1 a", "deny f2 c"]
    );

    // --limit N keeps the most recent N, in order; the default is 100.
    assert_eq!(audit_cmd(&e, &["--limit", "2"]), all[5..].to_vec());
    assert_eq!(audit_cmd(&e, &["--limit", "1"]), all[6..].to_vec());
    assert_eq!(audit_cmd(&e, &["--limit", "50"]), all);
    let r = e.run(None, &["audit", "--json"]);
    assert_eq!(json_lines(&r.stdout), all);
    assert_eq!(
        audit_cmd(&e, &["--key", "f1", "--limit", "1"]),
        f1[3..].to_vec(),
        "the limit applies after the filters"
    );

    // Bad filters are usage errors.
    assert_eq!(e.run(None, &["audit", "--since", "soon"]).code, USAGE);
    assert_eq!(e.run(None, &["audit", "--key", ""]).code, USAGE);
    assert_eq!(e.run(None, &["audit", "--limit", "-1"]).code, USAGE);
}

#[test]
fn audit_markdown() {
    let e = filter_fixture();
    let r = e.run(None, &["audit"]);
    assert_eq!(r.code, 0);
    snap!(e, "audit_table", r);
    let r = e.run(None, &["audit", "--limit", "2", "--agent", "b"]);
    assert_eq!(r.code, 0);
    snap!(e, "audit_table_limited", r);
    let r = e.run(None, &["audit", "--key", "nothing-here"]);
    assert_eq!(r.code, 0);
    snap!(e, "audit_no_matching_events", r);

    // No lock directory at all: nothing to show, not an error.
    let empty = Env::new();
    let r = empty.run(None, &["audit"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.stdout, "No matching audit events.\n");
    let r = empty.run(None, &["audit", "--json"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    assert!(!empty.dir().exists(), "audit never creates the directory");
}

// ---------------------------------------------------------------------------------------
// audit: rotation

const ROTATE_MAX: u64 = 2048;

#[test]
fn audit_rotation_keeps_bounded_files_and_reads_across_them() {
    if file_store_only("audit_rotation_keeps_bounded_files_and_reads_across_them") {
        return;
    }
    let mut e = Env::new();
    write_config(&e, "audit_max_size: 2KiB\naudit_keep: 2\n");
    // ~500-byte acquire lines: four to a 2KiB file; then 24 short release lines in one go.
    let reason = "r".repeat(400);
    let n = 24;
    for i in 0..n {
        e.at(&at(i));
        e.ok(
            "a",
            &["checkout", &format!("rot-{i:03}"), "--reason", &reason],
        );
    }
    e.at(&at(n + 60));
    let j = e.ok("a", &["release", "--all", "--json"]).json();
    assert_eq!(j["results"].as_array().unwrap().len(), n as usize);

    let dir = e.dir();
    let file = |s: &str| dir.join(format!("audit.jsonl{s}"));
    assert!(file(".1").is_file(), "rotated once at least");
    assert!(file(".2").is_file(), "two rotated files are kept");
    assert!(!file(".3").exists(), "older ones are deleted");
    let mut on_disk = Vec::new();
    for s in [".2", ".1", ""] {
        let text = std::fs::read_to_string(file(s)).unwrap();
        assert!(
            text.ends_with('\n'),
            "audit.jsonl{s} ends with a whole line"
        );
        let lines = json_lines(&text);
        assert!(!lines.is_empty(), "audit.jsonl{s} is empty");
        let longest = text.lines().map(|l| l.len() as u64 + 1).max().unwrap();
        let size = text.len() as u64;
        assert!(
            size <= ROTATE_MAX + longest,
            "audit.jsonl{s} is {size} bytes: over the 2KiB limit by more than a line"
        );
        on_disk.extend(lines);
    }
    // 24 acquires of ~500 bytes and 24 releases need far more than three 2KiB files.
    let total = 2 * n as usize;
    assert!(on_disk.len() < total, "the oldest events were rotated away");

    let shown = audit_cmd(&e, &[]);
    assert_eq!(
        shown, on_disk,
        "oldest file first, then newer ones, in order"
    );
    let ts: Vec<&str> = shown.iter().map(|v| v["ts"].as_str().unwrap()).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "timestamps go forward: {ts:?}"
    );
    let tokens: Vec<u64> = shown
        .iter()
        .filter(|v| v["event"] == "acquire")
        .map(|v| v["token"].as_u64().unwrap())
        .collect();
    assert!(
        !tokens.is_empty(),
        "some acquires are still in the kept files"
    );
    // Four acquires fit in a file: more than eight gone means at least two files were
    // deleted, so the log rotated at least four times.
    assert!(
        tokens[0] > 8,
        "the first acquires were rotated away: {tokens:?}"
    );
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens increase: {tokens:?}"
    );
    assert_eq!(shown.last().unwrap()["event"], "release");
    assert_eq!(
        audit_cmd(&e, &["--limit", "3"]),
        shown[shown.len() - 3..].to_vec()
    );
}

// ---------------------------------------------------------------------------------------
// audit --follow

/// The follower process; killed if the test fails before it is stopped.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    fn start(dir: &Path) -> Follower {
        let mut cmd = base_cmd(T0);
        use_store(&mut cmd, dir);
        cmd.env_remove("TASKLOCK_NOW")
            .arg("--dir")
            .arg(dir)
            .args(["audit", "--follow", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start audit --follow");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower { child, lines }
    }

    /// Collect lines until `done` says so or the deadline passes.
    fn read_until(&self, got: &mut Vec<Value>, done: impl Fn(&[Value]) -> bool) {
        let end = Instant::now() + DEADLINE;
        while !done(got) {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => got.push(
                    serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")),
                ),
                Err(_) => panic!("audit --follow printed only {:#?}", summary(got)),
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn audit_follow_streams_new_events_through_rotations() {
    if file_store_only("audit_follow_streams_new_events_through_rotations") {
        return;
    }
    let mut e = Env::new();
    write_config(&e, "audit_max_size: 1KiB\naudit_keep: 8\n");
    let reason = "f".repeat(100);
    e.ok("a", &["checkout", "before", "--reason", &reason]);

    let f = Follower::start(&e.dir());
    let mut got = Vec::new();
    f.read_until(&mut got, |g| !g.is_empty());
    assert_eq!(
        summary(&got),
        ["acquire before a"],
        "the existing log first"
    );

    // ~200-byte lines, written right away and faster than the follower polls: the log
    // rotates several times between two polls, and no event may be lost.
    let keys: Vec<String> = (0..15).map(|i| format!("live-{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        e.at(&at(i as u32 + 1));
        e.ok("a", &["checkout", k, "--reason", &reason]);
    }
    assert!(
        e.dir().join("audit.jsonl.2").is_file(),
        "the log rotated more than once"
    );
    // And one event for another agent after the rotation.
    assert_eq!(e.run(Some("b"), &["checkout", "live-0"]).code, HELD);

    f.read_until(&mut got, |g| g.len() >= 17);
    let mut expected = vec!["acquire before a".to_string()];
    expected.extend(keys.iter().map(|k| format!("acquire {k} a")));
    expected.push("deny live-0 b".into());
    assert_eq!(summary(&got), expected);
    assert_eq!(got, audit_cmd(&e, &[]), "the same events as the log");

    let mut f = f;
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(f.child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let end = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = f.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "audit --follow ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "SIGTERM ends --follow cleanly");
    let mut err = String::new();
    std::io::Read::read_to_string(f.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(err, "");
}

// ---------------------------------------------------------------------------------------
// freeze / unfreeze

#[test]
fn freeze_usage_errors() {
    let e = Env::new();
    for args in [
        &["freeze", "k"][..],
        &["freeze", "k", "--for", "0s"],
        &["freeze", "*", "--for", "1h"],
        &["freeze", "", "--for", "1h"],
        &["freeze", "tab\tkey", "--for", "1h"],
        &["freeze", "k", "--for", "1h", "--reason", "two\nlines"],
        &["unfreeze", "*"],
    ] {
        let r = e.run(Some("ops"), args);
        assert_eq!(r.code, USAGE, "{args:?}: {}", r.text());
    }
    let r = e.run(Some("ops"), &["freeze", "*", "--for", "1h", "--json"]);
    assert_eq!(r.code, USAGE);
    assert_eq!(r.json()["error"]["kind"], "usage");
    assert_eq!(
        e.run(None, &["freeze", "k", "--for", "1h"]).code,
        USAGE,
        "a freeze needs an identity"
    );
    assert!(!e.dir().join("freezes").exists(), "nothing was frozen");
}

#[test]
fn freeze_refuses_every_checkout_of_the_pattern() {
    let e = Env::new();
    let r = e.run(
        Some("ops"),
        &[
            "freeze",
            "deploy://*",
            "--for",
            "1h",
            "--reason",
            "release 1.2",
            "--name",
            "release-bot",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(e, "freeze", r);
    let j = e
        .run(
            Some("ops"),
            &["freeze", "deploy://*", "--for", "1h", "--json"],
        )
        .json();
    assert_eq!(j["command"], "freeze");
    assert_eq!(j["frozen"], true);
    assert_eq!(j["freeze"]["pattern"], "deploy://*");
    assert_eq!(j["freeze"]["until"], T1H);

    for agent in ["a", "ops"] {
        let r = e.run(Some(agent), &["checkout", "deploy://api", "--json"]);
        assert_eq!(r.code, HELD, "even the freezer is refused: {}", r.text());
        let j = r.json();
        assert_eq!(j["outcome"], "frozen");
        assert_eq!(j["frozen"]["by"], "ops");
        assert_eq!(
            j["frozen"]["reason"],
            serde_json::Value::Null,
            "re-freeze replaced it"
        );
        assert_eq!(j["frozen"]["until"], T1H);
        assert_eq!(j["checkout"], Value::Null);
    }
    // Set the reason again for the markdown.
    e.ok(
        "ops",
        &[
            "freeze",
            "deploy://*",
            "--for",
            "1h",
            "--reason",
            "release 1.2",
        ],
    );
    let r = e.run(Some("a"), &["checkout", "deploy://api"]);
    assert_eq!(r.code, HELD);
    assert!(r.stdout.contains("ops"), "says by whom: {}", r.stdout);
    assert!(r.stdout.contains("release 1.2"), "says why: {}", r.stdout);
    assert!(r.stdout.contains(T1H), "says until when: {}", r.stdout);
    snap!(e, "checkout_refused_by_freeze", r);
    let j = e
        .run(Some("a"), &["checkout", "deploy://web", "--json"])
        .json();
    assert_eq!(
        (&j["outcome"], &j["frozen"]["reason"]),
        (&"frozen".into(), &"release 1.2".into())
    );

    // Other keys are unaffected, and so is the bare prefix's sibling namespace.
    e.ok("a", &["checkout", "build://x"]);
    e.ok("a", &["checkout", "deploy-notes"]);
    // --queue, --any and --wait are refused too.
    assert_eq!(
        e.run(Some("a"), &["checkout", "deploy://api", "--queue"])
            .code,
        HELD
    );
    let r = e.run(
        Some("a"),
        &[
            "checkout",
            "--any",
            "deploy://api",
            "deploy://web",
            "--json",
        ],
    );
    assert_eq!(r.code, HELD, "{}", r.text());
    let r = e.run(
        Some("a"),
        &["checkout", "deploy://api", "--wait", "1s", "--json"],
    );
    assert_eq!(
        r.code,
        HELD,
        "--wait on a frozen key runs out: {}",
        r.text()
    );
    assert_eq!(r.json()["outcome"], "frozen");
    let j = e.run(None, &["list", "--json"]).json();
    let held: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["build://x", "deploy-notes"]);
}

#[test]
fn holder_keeps_a_frozen_key_but_cannot_extend_it() {
    let mut e = Env::new();
    e.ok("a", &["checkout", "k", "--timeout", "10m"]);
    e.ok("a", &["heartbeat"]);
    e.ok(
        "ops",
        &["freeze", "k", "--for", "1h", "--reason", "incident"],
    );
    let before = status_expires(&e, "k");
    assert_eq!(before, "2026-01-01T00:10:00Z");

    let r = e.run(Some("a"), &["renew", "k"]);
    assert_eq!(r.code, HELD, "{}", r.text());
    snap!(e, "renew_refused_by_freeze", r);
    let r = e.run(Some("a"), &["renew", "k", "--timeout", "2h", "--json"]);
    assert_eq!(r.code, HELD);
    let j = r.json();
    assert_eq!(j["results"][0]["outcome"], "frozen");
    assert_eq!(j["results"][0]["frozen"]["by"], "ops");
    assert_eq!(j["results"][0]["frozen"]["reason"], "incident");
    assert_eq!(j["results"][0]["checkout"]["expires_at"], before);
    assert_eq!(status_expires(&e, "k"), before, "the lease is unchanged");

    // The holder checking out again (a renew) is refused too, and keeps the key.
    let r = e.run(Some("a"), &["checkout", "k", "--json"]);
    assert_eq!(r.code, HELD);
    let j = r.json();
    assert_eq!(j["outcome"], "frozen");
    assert_eq!(j["checkout"]["agent"]["id"], "a", "the holder is shown");
    assert_eq!(status_expires(&e, "k"), before);

    // Past half the lease a heartbeat would renew it; not while frozen.
    e.at(&at(6 * 60));
    let j = e.ok("a", &["heartbeat", "--json"]).json();
    assert_eq!(j["renewed"], serde_json::json!([]), "{j}");
    assert_eq!(
        status_expires(&e, "k"),
        before,
        "heartbeat did not extend it"
    );
    let j = e.ok("a", &["verify", "k", "--token", "1", "--json"]).json();
    assert_eq!(j["valid"], true, "still the holder");

    // The lease runs out during the freeze: the holder loses it, nobody can take it.
    e.at(&at(11 * 60));
    assert_eq!(e.run(Some("a"), &["renew", "k"]).code, 4, "lease lost");
    let r = e.run(Some("b"), &["checkout", "k", "--json"]);
    assert_eq!(r.code, HELD);
    assert_eq!(r.json()["outcome"], "frozen");
}

#[test]
fn freeze_ends_by_itself_or_by_unfreeze() {
    let mut e = Env::new();
    e.ok("ops", &["freeze", "k", "--for", "30m"]);
    assert_eq!(e.run(Some("a"), &["checkout", "k"]).code, HELD);
    e.at(&at(30 * 60 - 1));
    assert_eq!(
        e.run(Some("a"), &["checkout", "k"]).code,
        HELD,
        "until is exclusive"
    );
    e.at(&at(30 * 60));
    let j = e.ok("a", &["checkout", "k", "--json"]).json();
    assert_eq!(j["outcome"], "granted", "the freeze ended by itself");
    e.ok("a", &["release", "k"]);

    // unfreeze ends it early.
    e.ok(
        "ops",
        &[
            "freeze",
            "deploy://*",
            "--for",
            "2h",
            "--reason",
            "release 1.2",
        ],
    );
    assert_eq!(e.run(Some("a"), &["checkout", "deploy://api"]).code, HELD);
    // Another agent may not end it (exit 4), only whoever set it.
    let r = e.run(Some("b"), &["unfreeze", "deploy://*"]);
    assert_eq!(r.code, NOT_HOLDER, "{}", r.text());
    snap!(e, "unfreeze_refused", r);
    assert_eq!(e.run(Some("a"), &["checkout", "deploy://api"]).code, HELD);
    let r = e.run(Some("ops"), &["unfreeze", "deploy://*"]);
    assert_eq!(r.code, 0, "its maker may unfreeze (audited): {}", r.text());
    snap!(e, "unfreeze", r);
    e.ok("a", &["checkout", "deploy://api"]);
    let ev = audit_cmd(&e, &["--key", "deploy://*"]);
    assert_eq!(names(&ev), ["freeze", "refused", "unfreeze"]);
    assert_eq!(
        (&ev[1]["by"], &ev[1]["reason"]),
        (&"b".into(), &"not_owner".into())
    );
    assert_eq!(ev[2]["agent"], "ops");
    assert_eq!(ev[2]["by"], Value::Null, "its own freeze");

    // Nothing to unfreeze: exit 3, markdown and JSON.
    let r = e.run(Some("b"), &["unfreeze", "deploy://*"]);
    assert_eq!(r.code, NO_SUCH, "{}", r.text());
    snap!(e, "unfreeze_nothing", r);
    let r = e.run(Some("b"), &["unfreeze", "never-frozen", "--json"]);
    assert_eq!(r.code, NO_SUCH);
    let j = r.json();
    assert_eq!((&j["frozen"], &j["freeze"]), (&false.into(), &Value::Null));
    assert_eq!(
        Env::new().run(Some("b"), &["unfreeze", "k"]).code,
        NO_SUCH,
        "no lock directory at all"
    );
}

// ---------------------------------------------------------------------------------------
// why: one test per state

fn check_why(j: &Value, can: bool, state: &str) {
    assert_eq!(j["can_checkout"], can, "{j}");
    assert_eq!(j["state"], state, "{j}");
}

#[test]
fn why_free() {
    let e = Env::new();
    let (md, j) = why(&e, "a", "task-1");
    check_why(&j, true, "free");
    snap!(e, "why_free", md);
    e.ok("a", &["checkout", "task-1"]);
    e.ok("a", &["release", "task-1"]);
    let (_, j) = why(&e, "a", "task-1");
    check_why(&j, true, "free");
    assert_eq!(e.run(Some("a"), &["why", ""]).code, USAGE);
}

#[test]
fn why_yours() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1", "--reason", "fix it"]);
    let (md, j) = why(&e, "a", "task-1");
    check_why(&j, true, "yours");
    snap!(e, "why_yours", md);
}

#[test]
fn why_held_by_an_alive_agent() {
    let e = Env::new();
    e.ok("b", &["heartbeat", "--name", "builder"]);
    e.ok(
        "b",
        &[
            "checkout",
            "task-1",
            "--timeout",
            "1h",
            "--reason",
            "fix login",
        ],
    );
    let (md, j) = why(&e, "a", "task-1");
    check_why(&j, false, "held");
    assert!(j["reasons"][0].as_str().unwrap().contains("alive"), "{j}");
    snap!(e, "why_held_alive", md);
}

#[test]
fn why_held_by_a_stalled_agent() {
    let mut e = Env::new();
    e.ok("b", &["heartbeat"]);
    e.ok("b", &["checkout", "task-1", "--timeout", "1h"]);
    e.at(&at(4 * 60));
    let (md, j) = why(&e, "a", "task-1");
    check_why(&j, false, "held");
    assert!(j["reasons"][0].as_str().unwrap().contains("stalled"), "{j}");
    snap!(e, "why_held_stalled", md);
}

#[test]
fn why_held_by_a_dead_agent() {
    let e = Env::new();
    let mut p = AgentProcess::start();
    e.ok("b", &["heartbeat", "--pid", &p.pid()]);
    e.ok("b", &["checkout", "task-1", "--timeout", "1h"]);
    let (_, j) = why(&e, "a", "task-1");
    check_why(&j, false, "held");
    p.kill();
    let (md, j) = why(&e, "a", "task-1");
    assert_eq!(j["can_checkout"], true, "{j}");
    assert!(
        j["reasons"][0]
            .as_str()
            .unwrap()
            .contains("process is gone"),
        "{j}"
    );
    snap!(e, "why_held_dead", md);
    // why only explains: the dead agent's record stays until a command acts on it.
    assert!(Stored::Record("task-1").exists(&e.dir()));
    let j = e.ok("a", &["checkout", "task-1", "--json"]).json();
    assert_eq!(j["took_over"]["agent"]["id"], "b");
}

#[test]
fn why_expired_lease() {
    let mut e = Env::new();
    e.ok("b", &["checkout", "task-1", "--timeout", "1m"]);
    e.at(T5M);
    let (md, j) = why(&e, "a", "task-1");
    assert_eq!(j["can_checkout"], true, "{j}");
    assert!(
        j["reasons"][0].as_str().unwrap().contains("lease ran out"),
        "{j}"
    );
    snap!(e, "why_expired", md);
    // The holder's own view: lost.
    let (md, j) = why(&e, "b", "task-1");
    assert_eq!(j["can_checkout"], true, "{j}");
    assert_ne!(j["state"], "yours", "{j}");
    snap!(e, "why_expired_for_the_holder", md);
}

#[test]
fn why_reserved_for_the_head_of_the_queue() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    assert_eq!(
        e.run(Some("b"), &["checkout", "task-1", "--queue"]).code,
        HELD
    );
    e.ok("a", &["release", "task-1"]);

    let (md, j) = why(&e, "c", "task-1");
    check_why(&j, false, "reserved");
    snap!(e, "why_reserved_outsider", md);

    let (md, j) = why(&e, "b", "task-1");
    assert_eq!(j["can_checkout"], true, "{j}");
    snap!(e, "why_reserved_head", md);
    // And the answers hold: c is refused, b gets it.
    assert_eq!(e.run(Some("c"), &["checkout", "task-1"]).code, HELD);
    e.ok("b", &["checkout", "task-1"]);
}

#[test]
fn why_frozen() {
    let e = Env::new();
    e.ok(
        "ops",
        &[
            "freeze",
            "deploy://*",
            "--for",
            "1h",
            "--reason",
            "release 1.2",
        ],
    );
    let (md, j) = why(&e, "a", "deploy://api");
    check_why(&j, false, "frozen");
    snap!(e, "why_frozen", md);
    let (_, j) = why(&e, "a", "build://x");
    check_why(&j, true, "free");
}

#[test]
fn why_corrupt_record() {
    if file_store_only("why_corrupt_record") {
        return;
    }
    let e = Env::new();
    plant_corrupt(&e, "task-1");
    let (md, j) = why(&e, "a", "task-1");
    check_why(&j, false, "corrupt");
    snap!(e, "why_corrupt", md);
}

// ---------------------------------------------------------------------------------------
// doctor

/// A HOME and a working directory inside the env's temp dir (so snapshots filter them).
struct Setup {
    home: PathBuf,
    cwd: PathBuf,
}

impl Setup {
    /// An empty HOME and a directory outside any git repository.
    fn bare(e: &Env) -> Setup {
        let s = Setup {
            home: e.tmp.path().join("home"),
            cwd: e.tmp.path().join("work"),
        };
        std::fs::create_dir_all(&s.home).unwrap();
        std::fs::create_dir_all(&s.cwd).unwrap();
        s
    }

    /// Skills installed in HOME; cwd a git repository after `tasklock init`.
    fn good(e: &Env) -> Setup {
        let mut s = Setup::bare(e);
        s.install_skills();
        s.cwd = git_repo(e);
        let r = s.run(
            e,
            Some("a"),
            &["init", "--client", "claude,codex,gemini,opencode"],
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.text());
        s
    }

    fn install_skills(&self) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            let dest = self.home.join(".claude/skills").join(entry.file_name());
            std::fs::create_dir_all(&dest).unwrap();
            std::fs::copy(entry.path().join("SKILL.md"), dest.join("SKILL.md")).unwrap();
        }
    }

    fn run(&self, e: &Env, agent: Option<&str>, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.current_dir(&self.cwd)
            .env("HOME", &self.home)
            .env_remove("TASKLOCK_FAKE_FSTYPE")
            .arg("--dir")
            .arg(e.dir())
            .args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        exec(cmd)
    }

    fn doctor(&self, e: &Env, agent: Option<&str>, envs: &[(&str, &str)]) -> (Run, Value) {
        let md = self.run(e, agent, &["doctor"], envs);
        let j = self.run(e, agent, &["doctor", "--json"], envs);
        assert_eq!(md.code, j.code, "{}\n{}", md.text(), j.text());
        let v = j.json();
        assert_eq!(v["command"], "doctor");
        assert_eq!(v["healthy"], md.code == 0, "{v}");
        for c in v["checks"].as_array().expect("checks") {
            assert!(
                ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()),
                "{c}"
            );
            assert!(c["name"].is_string() && c["detail"].is_string(), "{c}");
        }
        (md, v)
    }
}

fn git_repo(e: &Env) -> PathBuf {
    let p = e.tmp.path().join("project");
    std::fs::create_dir_all(&p).unwrap();
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&p)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        std::fs::create_dir(p.join(".git")).unwrap();
    }
    p
}

fn check<'a>(doctor: &'a Value, name: &str) -> &'a Value {
    doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {doctor}"))
}

fn status_of<'a>(doctor: &'a Value, name: &str) -> &'a str {
    check(doctor, name)["status"].as_str().unwrap()
}

fn detail_of<'a>(doctor: &'a Value, name: &str) -> &'a str {
    check(doctor, name)["detail"].as_str().unwrap()
}

macro_rules! snap_doctor {
    ($env:expr, $name:expr, $run:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(r"type 0x[0-9a-f]+", "type [FSTYPE]");
        settings.add_filter(r"\.doctor-\d+", ".doctor-[PID]");
        settings.bind(|| snap!($env, $name, $run));
    }};
}

#[test]
fn doctor_healthy() {
    if file_store_only("doctor_healthy") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    e.ok("a", &["checkout", "task-1"]);
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "{}", md.text());
    assert_eq!(j["healthy"], true);
    let names: Vec<&str> = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "lock directory",
            "writable",
            "sharing",
            "file system",
            "settings",
            "identity",
            "records",
            "clock",
            "temp files",
            "skills",
            "hooks",
            "gemini hooks",
            "permissions",
            "duplicates"
        ]
    );
    for c in j["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{c}");
        assert_eq!(c["fix"], Value::Null, "{c}");
    }
    assert_eq!(detail_of(&j, "records"), "1 checkout readable");
    assert_eq!(detail_of(&j, "identity"), "a (from --agent)");
    snap_doctor!(e, "doctor_healthy", md);

    // Before the lock directory exists: still healthy.
    let fresh = Env::new();
    let s = Setup::good(&fresh);
    std::fs::remove_dir_all(fresh.dir()).unwrap();
    let (md, j) = s.doctor(&fresh, Some("a"), &[]);
    assert_eq!(md.code, 0, "{}", md.text());
    assert!(detail_of(&j, "lock directory").contains("does not exist yet"));
    assert!(!fresh.dir().exists(), "doctor never creates the directory");
}

#[test]
fn doctor_corrupt_record_is_unhealthy() {
    if file_store_only("doctor_corrupt_record_is_unhealthy") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    e.ok("a", &["checkout", "task-1"]);
    plant_corrupt(&e, "task-2");
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 1, "{}", md.text());
    assert_eq!(j["healthy"], false);
    assert_eq!(status_of(&j, "records"), "fail");
    assert!(detail_of(&j, "records").contains("task-2"), "{j}");
    assert!(check(&j, "records")["fix"].is_string());
    snap_doctor!(e, "doctor_unhealthy", md);
}

#[test]
fn doctor_network_file_systems() {
    if file_store_only("doctor_network_file_systems") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    for (magic, name) in [("0x6969", "NFS"), ("0xFF534D42", "CIFS")] {
        let (md, j) = s.doctor(&e, Some("a"), &[("TASKLOCK_FAKE_FSTYPE", magic)]);
        assert_eq!(md.code, 0, "a warning only: {}", md.text());
        assert_eq!(status_of(&j, "file system"), "warn", "{magic}");
        assert!(detail_of(&j, "file system").contains(name), "{magic}: {j}");
    }
    let (_, j) = s.doctor(&e, Some("a"), &[("TASKLOCK_FAKE_FSTYPE", "0xEF53")]);
    assert_eq!(status_of(&j, "file system"), "ok");
    assert_eq!(detail_of(&j, "file system"), "local (type 0xef53)");
}

#[test]
fn doctor_clock_jumped_backwards() {
    if file_store_only("doctor_clock_jumped_backwards") {
        return;
    }
    let mut e = Env::new();
    let s = Setup::good(&e);
    e.at(T1H);
    e.ok("a", &["checkout", "task-1", "--timeout", "2h"]);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "clock"), "ok");
    e.at(T0);
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "{}", md.text());
    assert_eq!(status_of(&j, "clock"), "warn");
    assert!(detail_of(&j, "clock").contains(T1H), "{j}");
    assert!(detail_of(&j, "clock").contains("1h ahead"), "{j}");
}

#[test]
fn doctor_identity() {
    if file_store_only("doctor_identity") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "identity"), "ok");
    let (_, j) = s.doctor(&e, None, &[("TASKLOCK_AGENT", "from-env")]);
    assert_eq!(status_of(&j, "identity"), "ok");
    assert_eq!(detail_of(&j, "identity"), "from-env (from TASKLOCK_AGENT)");
    // No identity and stdin not a terminal (base_cmd sets it to null).
    let (md, j) = s.doctor(&e, None, &[]);
    assert_eq!(md.code, 0, "a warning only: {}", md.text());
    assert_eq!(status_of(&j, "identity"), "warn");
    assert!(
        detail_of(&j, "identity").contains("no agent identity"),
        "{j}"
    );
}

#[test]
fn doctor_leftover_temp_files() {
    if file_store_only("doctor_leftover_temp_files") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    e.ok("a", &["checkout", "task-1"]);
    std::fs::write(e.dir().join("tmp").join("12345.tmp"), b"half a record").unwrap();
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "a warning only: {}", md.text());
    assert_eq!(status_of(&j, "temp files"), "warn");
    assert!(detail_of(&j, "temp files").starts_with("1 "), "{j}");
    // The next mutation sweeps it.
    e.ok("a", &["release", "task-1"]);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "temp files"), "ok");
}

#[test]
fn doctor_non_writable_lock_dir() {
    if file_store_only("doctor_non_writable_lock_dir") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    let dir = e.dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root (CAP_DAC_OVERRIDE) writes through 0555: then there is nothing to check, and
    // this test asserts nothing about the writable check.
    let probe = dir.join("can-i-write");
    let we_can_write = std::fs::write(&probe, b"x").is_ok();
    let _ = std::fs::remove_file(&probe);
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    if !we_can_write {
        assert_eq!(md.code, 1, "{}", md.text());
        assert_eq!(status_of(&j, "writable"), "fail");
    }
}

#[test]
fn doctor_skills() {
    if file_store_only("doctor_skills") {
        return;
    }
    let e = Env::new();
    let mut s = Setup::good(&e);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "skills"), "ok");
    assert_eq!(
        detail_of(&j, "skills"),
        format!(
            "checkout, heartbeat, checkouts at version {}",
            env!("CARGO_PKG_VERSION")
        )
    );

    // One SKILL.md from another version.
    let md_path = s.home.join(".claude/skills/heartbeat/SKILL.md");
    let text = std::fs::read_to_string(&md_path).unwrap();
    let old = format!("version: \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&old), "the skill carries the crate version");
    std::fs::write(&md_path, text.replace(&old, "version: \"0.0.1\"")).unwrap();
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "a warning only: {}", md.text());
    assert_eq!(status_of(&j, "skills"), "warn");
    let d = detail_of(&j, "skills");
    assert!(d.contains("heartbeat") && d.contains("0.0.1"), "{d}");
    assert!(!d.contains("checkouts/SKILL.md"), "only the stale one: {d}");

    // No skills at all.
    s.home = e.tmp.path().join("empty-home");
    std::fs::create_dir_all(&s.home).unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "skills"), "warn");
    assert!(detail_of(&j, "skills").contains("not installed"), "{j}");
}

#[test]
fn doctor_hooks() {
    if file_store_only("doctor_hooks") {
        return;
    }
    let e = Env::new();
    let mut s = Setup::bare(&e);
    s.install_skills();
    s.cwd = git_repo(&e);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "hooks"), "warn");
    let d = detail_of(&j, "hooks");
    assert!(
        d.contains("session-start") && d.contains("session-end"),
        "{d}"
    );
    assert!(
        check(&j, "hooks")["fix"]
            .as_str()
            .unwrap()
            .contains("tasklock init")
    );

    let r = s.run(&e, Some("a"), &["init"], &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "hooks"), "ok", "{j}");

    // From a subdirectory of the repository too.
    s.cwd = s.cwd.join("src/deep");
    std::fs::create_dir_all(&s.cwd).unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "hooks"), "ok", "{j}");
}

/// Rewrite the project's `.claude/settings.json` with `edit`.
fn edit_settings(s: &Setup, edit: impl FnOnce(&mut Value)) {
    let path = s.cwd.join(".claude/settings.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn doctor_hooks_by_path_and_the_post_tool_use_matcher() {
    if file_store_only("doctor_hooks_by_path_and_the_post_tool_use_matcher") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    // tasklock by absolute path, quoted or not, counts.
    edit_settings(&s, |v| {
        v["hooks"]["SessionStart"][0]["hooks"][0]["command"] =
            "/usr/local/bin/tasklock hook session-start".into();
        v["hooks"]["PostToolUse"][0]["hooks"][0]["command"] =
            "\"$HOME/.local/bin/tasklock\" hook post-tool-use".into();
    });
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "hooks"), "ok", "{j}");

    // PostToolUse for Bash only: the session would stop beating during other tools.
    edit_settings(&s, |v| {
        v["hooks"]["PostToolUse"][0]["matcher"] = "Bash".into()
    });
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "a warning: {}", md.text());
    assert_eq!(status_of(&j, "hooks"), "warn", "{j}");
    let d = detail_of(&j, "hooks");
    assert!(d.contains("PostToolUse") && d.contains("`Bash`"), "{d}");
    assert!(
        check(&j, "hooks")["fix"]
            .as_str()
            .unwrap()
            .contains("\"matcher\" to \"*\""),
        "{j}"
    );
    // An empty matcher or none at all means every tool.
    for m in [Value::from(""), Value::Null] {
        edit_settings(&s, |v| {
            if m.is_null() {
                v["hooks"]["PostToolUse"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("matcher");
            } else {
                v["hooks"]["PostToolUse"][0]["matcher"] = m.clone();
            }
        });
        let (_, j) = s.doctor(&e, Some("a"), &[]);
        assert_eq!(status_of(&j, "hooks"), "ok", "{m}: {j}");
    }
}

#[test]
fn doctor_warns_about_rules_that_allow_tasklock_run() {
    if file_store_only("doctor_warns_about_rules_that_allow_tasklock_run") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "permissions"), "ok", "{j}");
    edit_settings(&s, |v| {
        v["permissions"]["allow"]
            .as_array_mut()
            .unwrap()
            .push("Bash(tasklock *)".into())
    });
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "{}", md.text());
    assert_eq!(status_of(&j, "permissions"), "warn");
    let d = detail_of(&j, "permissions");
    assert!(
        d.contains("Bash(tasklock *)") && d.contains("settings.json"),
        "{d}"
    );
    snap_doctor!(e, "doctor_permissions_warning", md);

    // In settings.local.json too, and for `run` alone.
    edit_settings(&s, |v| {
        v["permissions"]["allow"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r != "Bash(tasklock *)")
    });
    std::fs::write(
        s.cwd.join(".claude/settings.local.json"),
        r#"{"permissions": {"allow": ["Bash(tasklock run *)"]}}"#,
    )
    .unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "permissions"), "warn");
    let d = detail_of(&j, "permissions");
    assert!(
        d.contains("Bash(tasklock run *)") && d.contains("settings.local.json"),
        "{d}"
    );
}

#[test]
fn doctor_warns_about_skills_and_hooks_loaded_twice() {
    if file_store_only("doctor_warns_about_skills_and_hooks_loaded_twice") {
        return;
    }
    let e = Env::new();
    let s = Setup::good(&e);
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "duplicates"), "ok", "{j}");

    // The same skills in the project as well as in HOME.
    for name in ["checkout", "heartbeat"] {
        let dir = s.cwd.join(".claude/skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(
            s.home.join(".claude/skills").join(name).join("SKILL.md"),
            dir.join("SKILL.md"),
        )
        .unwrap();
    }
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(md.code, 0, "{}", md.text());
    assert_eq!(status_of(&j, "duplicates"), "warn");
    let d = detail_of(&j, "duplicates");
    assert!(
        d.contains("checkout, heartbeat") && d.contains("twice"),
        "{d}"
    );
    assert!(!d.contains("plugin"), "{d}");
    std::fs::remove_dir_all(s.cwd.join(".claude/skills")).unwrap();

    // The plugin enabled for the user while the project has init's hooks.
    let user_settings = s.home.join(".claude/settings.json");
    std::fs::write(
        &user_settings,
        r#"{"enabledPlugins": {"tasklock@tasklock": true, "other@x": true}}"#,
    )
    .unwrap();
    let (md, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "duplicates"), "warn", "{j}");
    let d = detail_of(&j, "duplicates");
    assert!(
        d.contains("tasklock@tasklock") && d.contains("each hook twice"),
        "{d}"
    );
    snap_doctor!(e, "doctor_plugin_and_init_hooks", md);

    // Disabled: fine. Installed (installed_plugins.json) and not disabled: not fine.
    std::fs::write(
        &user_settings,
        r#"{"enabledPlugins": {"tasklock@tasklock": false}}"#,
    )
    .unwrap();
    let plugins = s.home.join(".claude/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        plugins.join("installed_plugins.json"),
        r#"{"version": 2, "plugins": {"tasklock@mine": [{"scope": "user"}]}}"#,
    )
    .unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "duplicates"), "warn", "{j}");
    assert!(detail_of(&j, "duplicates").contains("tasklock@mine"));
    std::fs::write(
        &user_settings,
        r#"{"enabledPlugins": {"tasklock@tasklock": false, "tasklock@mine": false}}"#,
    )
    .unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "duplicates"), "ok", "{j}");

    // The plugin alone, in a project without init's hooks: fine too.
    std::fs::remove_file(&user_settings).unwrap();
    std::fs::remove_file(s.cwd.join(".claude/settings.json")).unwrap();
    let (_, j) = s.doctor(&e, Some("a"), &[]);
    assert_eq!(status_of(&j, "duplicates"), "ok", "{j}");
}

#[test]
fn waiting_on_a_frozen_key_does_not_flood_the_audit_log() {
    let e = Env::new();
    e.ok("ops", &["freeze", "k", "--for", "1h"]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tasklock"));
    use_store(&mut cmd, &e.dir());
    // The clock stays pinned inside the freeze; the wait itself runs on real time.
    cmd.env("TASKLOCK_NOW", &e.now)
        .arg("--dir")
        .arg(e.dir())
        .args(["checkout", "k", "--wait", "2s", "--agent", "a"])
        .stdin(std::process::Stdio::null());
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(HELD));
    let denies = audit(&e.dir())
        .iter()
        .filter(|v| v["event"] == "deny")
        .count();
    assert_eq!(
        denies, 0,
        "a blocked --wait polls; it is not refused each time"
    );
}

#[test]
fn unfreezing_a_key_covered_by_a_prefix_names_the_prefix() {
    let e = Env::new();
    e.ok(
        "ops",
        &["freeze", "deploy://*", "--for", "1h", "--reason", "release"],
    );
    let r = e.run(Some("ops"), &["unfreeze", "deploy://api"]);
    assert_eq!(r.code, 3);
    snap!(e, "unfreeze_covered_by_prefix", r);
    let j = e
        .run(Some("ops"), &["unfreeze", "deploy://api", "--json"])
        .json();
    assert_eq!(j["covered_by"]["pattern"], "deploy://*");
}

#[test]
fn heartbeat_says_which_keys_a_freeze_kept_from_renewing() {
    let mut e = Env::new();
    e.ok("a", &["checkout", "k", "--timeout", "10m"]);
    e.ok("ops", &["freeze", "k", "--for", "1h"]);
    e.at("2026-01-01T00:06:00Z");
    let r = e.ok("a", &["heartbeat"]);
    snap!(e, "heartbeat_frozen_keys", r);
    let j = e.ok("a", &["heartbeat", "--json"]).json();
    assert_eq!(j["frozen"], serde_json::json!(["k"]));
    assert_eq!(j["renewed"], serde_json::json!([]));
}

#[test]
fn lowering_audit_keep_removes_the_extra_rotated_files() {
    if file_store_only("lowering_audit_keep_removes_the_extra_rotated_files") {
        return;
    }
    let e = Env::new();
    write_config(&e, "audit_max_size: 1KiB\naudit_keep: 4\n");
    let reason = "r".repeat(150);
    for i in 0..40 {
        e.ok("a", &["checkout", &format!("k{i}"), "--reason", &reason]);
    }
    assert!(e.dir().join("audit.jsonl.4").is_file());
    write_config(&e, "audit_max_size: 1KiB\naudit_keep: 1\n");
    for i in 40..50 {
        e.ok("a", &["checkout", &format!("k{i}"), "--reason", &reason]);
    }
    assert!(e.dir().join("audit.jsonl.1").is_file());
    for i in 2..=4 {
        assert!(
            !e.dir().join(format!("audit.jsonl.{i}")).exists(),
            ".{i} kept"
        );
    }
}

#[test]
fn why_a_frozen_key_says_frozen_whatever_else_holds() {
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    e.ok("ops", &["freeze", "k", "--for", "1h"]);
    let (_, j) = why(&e, "b", "k");
    assert_eq!(j["state"], "frozen");
    assert_eq!(j["can_checkout"], false);
    let (_, j) = why(&e, "a", "k");
    assert_eq!(j["state"], "frozen", "even for the holder");
}

#[test]
fn a_line_torn_by_a_killed_writer_is_cut_off_by_the_next_append() {
    if file_store_only("a_line_torn_by_a_killed_writer_is_cut_off_by_the_next_append") {
        return;
    }
    // A write killed at a page boundary leaves part of a line; the next append (under the
    // guard) cuts it off instead of gluing its own line to it.
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    let audit = e.dir().join("audit.jsonl");
    let mut text = std::fs::read_to_string(&audit).unwrap();
    let whole = text.clone();
    text.push_str(r#"{"ts":"2026-01-01T00:00:00Z","event":"ren"#);
    std::fs::write(&audit, &text).unwrap();
    let notes = e.dir().join("notes");
    e.ok("agent-a", &["note", "k1", "first"]);
    let note_file = std::fs::read_dir(&notes)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut n = std::fs::read_to_string(&note_file).unwrap();
    n.push_str(r#"{"ts":"2026-01-01T00:0"#);
    std::fs::write(&note_file, &n).unwrap();

    e.ok("agent-a", &["note", "k1", "second"]);
    e.ok("agent-a", &["checkout", "k2"]);
    let after = std::fs::read_to_string(&audit).unwrap();
    assert!(after.starts_with(&whole), "complete lines are kept");
    for line in after.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|err| panic!("audit line {line:?} is not JSON ({err})"));
    }
    assert!(!after.contains("\"ren\""), "{after}");
    let notes: Vec<serde_json::Value> = std::fs::read_to_string(&note_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("note line is JSON"))
        .collect();
    let texts: Vec<_> = notes.iter().map(|v| v["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["first", "second"]);
}

/// A freeze belongs to whoever set it: another agent cannot end it (exit 4, audited as
/// `refused`), nor its maker without the secret it was set with; a person at a terminal
/// and the operator can, and the audit log says so.
#[test]
fn only_its_maker_a_person_or_the_operator_ends_a_freeze_early() {
    let mut e = Env::new();
    let with = |e: &Env, agent: &str, secret: Option<&str>, args: &[&str]| match secret {
        Some(s) => e.run_env(Some(agent), args, &[("TASKLOCK_SECRET", s)]),
        None => e.run(Some(agent), args),
    };
    let r = with(
        &e,
        "ops",
        Some("ops-secret"),
        &["freeze", "k", "--for", "1h"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        !r.stdout.contains("ops-secret") && !r.stdout.contains("owner"),
        "{}",
        r.stdout
    );
    for (agent, secret, why) in [
        ("kate", None, "not_owner"),
        ("kate", Some("ops-secret"), "not_owner"),
        ("ops", None, "no_secret"),
        ("ops", Some("guess"), "wrong_secret"),
    ] {
        let r = with(&e, agent, secret, &["unfreeze", "k", "--json"]);
        assert_eq!(r.code, NOT_HOLDER, "{agent} {secret:?}: {}", r.text());
        let j = r.json();
        assert_eq!(j["refused"], why, "{j}");
        assert_eq!(j["frozen"], true, "{j}");
        assert_eq!(j["freeze"]["by"], "ops", "{j}");
        assert_eq!(j["freeze"].get("owner"), None, "{j}");
        assert_eq!(e.run(Some("a"), &["checkout", "k"]).code, HELD, "it stands");
    }
    let refused: Vec<(Value, Value)> = audit_cmd(&e, &["--key", "k"])
        .into_iter()
        .filter(|v| v["event"] == "refused")
        .map(|v| (v["by"].clone(), v["reason"].clone()))
        .collect();
    assert_eq!(
        refused,
        [
            ("kate".into(), "not_owner".into()),
            ("kate".into(), "not_owner".into()),
            ("ops".into(), "no_secret".into()),
            ("ops".into(), "wrong_secret".into()),
        ]
    );
    assert_eq!(
        e.run(Some("kate"), &["unfreeze", "k"]).stdout,
        "Refused: `k` stays frozen: ops set it. Only whoever set a freeze (with its secret), a person at a terminal or a caller with the operator secret (TASKLOCK_OPERATOR_SECRET) may end it early or replace it.\n\nNext: wait for it to end by itself (2026-01-01T01:00:00Z).\n"
    );
    // Setting a freeze again replaces it: so that would end it early too.
    let r = e.run(Some("kate"), &["freeze", "k", "--for", "1s", "--json"]);
    assert_eq!(r.code, NOT_HOLDER, "{}", r.text());
    let j = r.json();
    assert_eq!(
        (&j["refused"], &j["freeze"]["by"]),
        (&"not_owner".into(), &"ops".into())
    );
    let until = j["freeze"]["until"].clone();
    let r = e.run(Some("a"), &["checkout", "k", "--json"]);
    assert_eq!(r.json()["frozen"]["until"], until, "ops's freeze stands");
    let r = with(
        &e,
        "ops",
        Some("ops-secret"),
        &["freeze", "k", "--for", "2h"],
    );
    assert_eq!(r.code, 0, "its maker may: {}", r.text());

    let r = with(&e, "ops", Some("ops-secret"), &["unfreeze", "k", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["refused"], Value::Null);
    e.ok("a", &["checkout", "k"]);

    // A person at a terminal may (util-linux `script` gives the command a terminal).
    e.ok("ops", &["freeze", "t", "--for", "1h"]);
    let mut script = Command::new("script");
    use_store(&mut script, &e.dir());
    let cmdline = format!(
        "{} --dir {} --agent person unfreeze t",
        env!("CARGO_BIN_EXE_tasklock"),
        e.dir().display()
    );
    let out = script
        .args(["-qec", &cmdline, "/dev/null"])
        .env("TASKLOCK_NOW", &e.now)
        .env_remove("TASKLOCK_SECRET")
        .env_remove("TASKLOCK_OPERATOR_SECRET")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ev = audit_cmd(&e, &["--key", "t"]);
    assert_eq!(names(&ev), ["freeze", "unfreeze"]);
    assert_eq!(
        (&ev[1]["agent"], &ev[1]["by"]),
        (&"person".into(), &"ops".into())
    );
    assert!(
        ev[1]["detail"]
            .as_str()
            .unwrap()
            .contains("as a person at a terminal"),
        "{}",
        ev[1]
    );

    // So may the operator, whatever secret the freeze was set with.
    let r = with(
        &e,
        "ops",
        Some("ops-secret"),
        &["freeze", "k2", "--for", "1h"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    e.as_operator();
    let r = e.run(Some("kate"), &["unfreeze", "k2"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let ev = audit_cmd(&e, &["--key", "k2"]);
    assert_eq!(names(&ev), ["freeze", "unfreeze"]);
    assert_eq!(
        (&ev[1]["agent"], &ev[1]["by"]),
        (&"kate".into(), &"ops".into())
    );
    assert!(
        ev[1]["detail"]
            .as_str()
            .unwrap()
            .contains("as the operator secret"),
        "{}",
        ev[1]
    );
}

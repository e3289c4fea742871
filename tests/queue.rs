//! Queues, handoff reservations, `--wait`, inbox messages, deadlock detection and
//! `checkout --any`, through the real binary.
//!
//! Most tests pin the clock (`TASKLOCK_NOW`). Tests with a blocked `checkout --wait`
//! process run every command on the real clock (a pinned holder would look long expired
//! to a waiter on the real clock) and only poll with generous deadlines: nothing here
//! asserts on timing.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const T30S: &str = "2026-01-01T00:00:30Z";
const T2M: &str = "2026-01-01T00:02:00Z";

/// Exit codes (docs/exit-codes.md).
const GRANTED: i32 = 0;
const HELD: i32 = 2;
const NOT_HOLDER: i32 = 4;
const DEADLOCK: i32 = 5;
const USAGE: i32 = 64;

/// Generous: only a broken implementation comes near it.
const DEADLINE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Helpers

fn checkout(e: &Env, agent: &str, key: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["checkout", key, "--json"];
    args.extend_from_slice(extra);
    let r = e.run(Some(agent), &args);
    (r.code, r.json())
}

fn queue_up(e: &Env, agent: &str, key: &str) -> Value {
    let (code, j) = checkout(e, agent, key, &["--queue"]);
    assert_eq!(code, HELD, "{agent} queueing for {key}: {j}");
    assert_eq!(j["outcome"], "conflict", "{j}");
    j
}

fn status(e: &Env, key: &str) -> Value {
    let r = e.run(Some("observer"), &["status", key, "--json"]);
    assert!(r.code == 0 || r.code == 3, "status {key}: {}", r.text());
    r.json()
}

fn waiters(status: &Value) -> Vec<String> {
    status["queue"]["waiters"]
        .as_array()
        .unwrap_or_else(|| panic!("no queue.waiters in {status}"))
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

fn release(e: &Env, agent: &str, key: &str) {
    let j = e.ok(agent, &["release", key, "--json"]).json();
    assert_eq!(j["results"][0]["outcome"], "released", "{j}");
}

fn inbox(e: &Env, agent: &str, peek: bool) -> Vec<Value> {
    let mut args = vec!["inbox", "--json"];
    if peek {
        args.push("--peek");
    }
    let j = e.ok(agent, &args).json();
    assert_eq!(j["command"], "inbox", "{j}");
    assert_eq!(j["agent"], agent, "{j}");
    assert_eq!(j["marked_read"], !peek, "{j}");
    let msgs = j["messages"].as_array().expect("messages array").clone();
    for m in &msgs {
        assert_message_shape(m, agent);
    }
    msgs
}

fn assert_message_shape(m: &Value, to: &str) {
    assert!(m["id"].as_str().is_some_and(|s| !s.is_empty()), "id in {m}");
    assert!(m["from"].is_null() || m["from"].is_string(), "from in {m}");
    assert_eq!(m["to"], to, "{m}");
    assert!(m["type"].is_string(), "type in {m}");
    assert!(m["key"].is_string(), "key in {m}");
    assert!(m["ts"].is_string(), "ts in {m}");
    assert!(
        m["body"].as_str().is_some_and(|s| !s.is_empty()),
        "body in {m}"
    );
}

/// (type, key) of each message, in order.
fn kinds(msgs: &[Value]) -> Vec<(String, String)> {
    msgs.iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn events<'a>(all: &'a [Value], event: &str) -> Vec<&'a Value> {
    all.iter().filter(|v| v["event"] == event).collect()
}

fn queue_files(dir: &Path) -> Vec<String> {
    if on_postgres() {
        return psql(dir, "SELECT key FROM queues")
            .lines()
            .map(str::to_string)
            .collect();
    }
    match std::fs::read_dir(dir.join("queues")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn write_config(e: &Env, text: &str) {
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), text).unwrap();
}

/// `tasklock ARGS --dir DIR --agent AGENT` on the real clock (TASKLOCK_NOW removed).
fn live_cmd(e: &Env, agent: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    use_store(&mut cmd, &e.dir());
    cmd.env_remove("TASKLOCK_NOW")
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_AGENT_NAME")
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent])
        .stdin(Stdio::null());
    cmd
}

fn live(e: &Env, agent: &str, args: &[&str]) -> Run {
    exec(live_cmd(e, agent, args))
}

fn live_ok(e: &Env, agent: &str, args: &[&str]) -> Value {
    let r = live(e, agent, args);
    assert_eq!(r.code, 0, "{args:?} as {agent}: {}", r.text());
    r.json()
}

fn live_waiters(e: &Env, key: &str) -> Vec<String> {
    waiters(&live(e, "observer", &["status", key, "--json"]).json())
}

/// Start a blocked `checkout KEY --wait DUR --json` on the real clock.
fn spawn_waiter(e: &Env, agent: &str, key: &str, dur: &str) -> Child {
    live_cmd(e, agent, &["checkout", key, "--wait", dur, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn waiter")
}

fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < end, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Wait for a child to exit (killing it and failing past the deadline).
fn finish(mut child: Child, what: &str) -> Run {
    let end = Instant::now() + DEADLINE;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().expect("exited normally"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// A stand-in for an agent's long-lived process.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("300").spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
    fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------
// 1. FIFO order and handoff reservations

#[test]
fn grants_follow_queue_order_and_the_queue_empties() {
    let e = Env::new();
    let (code, j) = checkout(&e, "holder", "task-1", &[]);
    assert_eq!((code, &j["outcome"]), (GRANTED, &json!("granted")));

    for (i, a) in ["agent-a", "agent-b", "agent-c"].iter().enumerate() {
        let j = queue_up(&e, a, "task-1");
        assert_eq!(j["position"], i + 1, "{j}");
        assert_eq!(j["queue_length"], i + 1, "{j}");
        assert_eq!(j["checkout"]["agent"]["id"], "holder", "{j}");
        assert!(j["reserved_for"].is_null(), "{j}");
    }
    // Queueing again keeps one's place.
    let j = queue_up(&e, "agent-a", "task-1");
    assert_eq!((&j["position"], &j["queue_length"]), (&json!(1), &json!(3)));
    // A plain checkout by a waiter is refused but shows its place.
    let (code, j) = checkout(&e, "agent-b", "task-1", &[]);
    assert_eq!((code, &j["position"]), (HELD, &json!(2)), "{j}");

    let s = status(&e, "task-1");
    assert_eq!(s["queue"]["length"], 3);
    assert_eq!(waiters(&s), ["agent-a", "agent-b", "agent-c"]);
    assert!(s["queue"]["reserved_for"].is_null());
    assert_eq!(
        queue_files(&e.dir()).len(),
        1,
        "one queue file while queued"
    );

    release(&e, "holder", "task-1");
    let order = ["agent-a", "agent-b", "agent-c"];
    for (i, head) in order.iter().enumerate() {
        let rest = &order[i + 1..];
        // Free, reserved for the head of the queue.
        let s = status(&e, "task-1");
        assert_eq!(s["outcome"], "free", "{s}");
        assert!(s["checkout"].is_null(), "{s}");
        assert_eq!(s["queue"]["reserved_for"]["agent"], *head, "{s}");
        assert_eq!(waiters(&s)[0], *head, "{s}");

        // An outsider is refused, naming the head.
        let (code, j) = checkout(&e, "outsider", "task-1", &[]);
        assert_eq!(code, HELD, "{j}");
        assert_eq!(j["outcome"], "conflict");
        assert_eq!(j["reserved_for"]["agent"], *head, "{j}");
        assert!(j["checkout"].is_null(), "{j}");
        assert!(j["position"].is_null(), "{j}");
        // So is every later waiter: only the head may take it.
        for later in rest {
            let (code, j) = checkout(&e, later, "task-1", &[]);
            assert_eq!(code, HELD, "{later}: {j}");
            assert_eq!(j["reserved_for"]["agent"], *head, "{j}");
            assert!(j["position"].as_u64().unwrap() >= 2, "{j}");
        }

        let (code, j) = checkout(&e, head, "task-1", &[]);
        assert_eq!(code, GRANTED, "{head}: {j}");
        assert_eq!(j["outcome"], "granted");
        assert_eq!(j["checkout"]["agent"]["id"], *head);
        assert_eq!(j["queue_length"], rest.len(), "{j}");
        let s = status(&e, "task-1");
        assert_eq!(s["checkout"]["agent"]["id"], *head);
        assert_eq!(waiters(&s), rest);
        assert!(s["queue"]["reserved_for"].is_null(), "{s}");
        release(&e, head, "task-1");
    }

    let s = status(&e, "task-1");
    assert_eq!(s["outcome"], "free");
    assert_eq!(s["queue"]["length"], 0, "{s}");
    assert!(waiters(&s).is_empty());
    assert!(s["queue"]["reserved_for"].is_null(), "{s}");
    assert!(
        queue_files(&e.dir()).is_empty(),
        "queues/ keeps {:?}",
        queue_files(&e.dir())
    );
    // A plain checkout after the queue emptied is granted at once.
    let (code, _) = checkout(&e, "outsider", "task-1", &[]);
    assert_eq!(code, GRANTED);

    let log = audit(&e.dir());
    let acquirers: Vec<_> = events(&log, "acquire")
        .iter()
        .map(|v| v["agent"].as_str().unwrap())
        .collect();
    assert_eq!(
        acquirers,
        ["holder", "agent-a", "agent-b", "agent-c", "outsider"]
    );
    let handoffs: Vec<_> = events(&log, "handoff")
        .iter()
        .map(|v| v["agent"].as_str().unwrap())
        .collect();
    assert_eq!(handoffs, order);
    assert_eq!(
        events(&log, "queue").len(),
        3,
        "re-queueing is not audited again"
    );
    let reserved_denials = events(&log, "deny")
        .into_iter()
        .filter(|v| v["detail"] == "reserved for the head of the queue")
        .count();
    assert_eq!(
        reserved_denials,
        3 + 2 + 1,
        "outsider thrice, later waiters 2+1"
    );
}

#[test]
fn queue_on_a_free_key_is_granted_at_once() {
    let e = Env::new();
    let (code, j) = checkout(&e, "agent-a", "task-1", &["--queue"]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["outcome"], "granted");
    assert!(j["position"].is_null());
    assert!(queue_files(&e.dir()).is_empty());
}

// ---------------------------------------------------------------------------------------
// 2. --wait

#[test]
fn wait_is_granted_when_the_holder_releases() {
    let e = Env::new();
    live_ok(&e, "holder", &["checkout", "task-1", "--json"]);
    let child = spawn_waiter(&e, "waiter", "task-1", "30s");
    poll_until("the waiter to join the queue", || {
        live_waiters(&e, "task-1") == ["waiter"]
    });
    let j = live_ok(&e, "holder", &["release", "task-1", "--json"]);
    assert_eq!(j["results"][0]["outcome"], "released");

    let r = finish(child, "checkout --wait");
    assert_eq!(r.code, GRANTED, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_eq!(j["checkout"]["agent"]["id"], "waiter", "{j}");
    assert_eq!(j["queue_length"], 0, "{j}");

    let s = live(&e, "observer", &["status", "task-1", "--json"]).json();
    assert_eq!(s["checkout"]["agent"]["id"], "waiter", "{s}");
    assert!(waiters(&s).is_empty(), "{s}");
    assert!(s["queue"]["reserved_for"].is_null(), "{s}");
    // The release reserved the key for it and said so, once; the waiter took the key,
    // so the message is done: read, not waiting in the inbox.
    let msgs = live_ok(&e, "waiter", &["inbox", "--json"]);
    assert_eq!(msgs["messages"], serde_json::json!([]), "{msgs}");
    let read: Vec<String> = if on_postgres() {
        psql(
            &e.dir(),
            "SELECT data::text FROM messages WHERE agent = 'waiter' AND read",
        )
        .lines()
        .map(str::to_string)
        .collect()
    } else {
        std::fs::read_dir(e.dir().join("inbox/waiter/read"))
            .unwrap()
            .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
            .collect()
    };
    assert_eq!(read.len(), 1, "{read:?}");
    assert!(read[0].contains("\"type\": \"reserved\""), "{read:?}");
}

#[test]
fn wait_that_runs_out_exits_2_and_leaves_the_queue() {
    let e = Env::new();
    live_ok(&e, "holder", &["checkout", "task-1", "--json"]);
    // Another waiter stays queued behind it, so the queue outlives the timeout.
    let q = live(&e, "patient", &["checkout", "task-1", "--queue", "--json"]);
    assert_eq!(q.code, HELD, "{}", q.text());
    let child = spawn_waiter(&e, "hasty", "task-1", "1s");
    let r = finish(child, "checkout --wait 1s");
    assert_eq!(r.code, HELD, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["checkout"]["agent"]["id"], "holder", "{j}");
    assert!(j["position"].is_null(), "no place any more: {j}");
    assert_eq!(j["queue_length"], 1, "{j}");

    assert_eq!(live_waiters(&e, "task-1"), ["patient"]);
    let log = audit(&e.dir());
    let dq = events(&log, "dequeue");
    assert_eq!(dq.len(), 1, "{dq:?}");
    assert_eq!(dq[0]["agent"], "hasty");
    assert_eq!(dq[0]["reason"], "wait ended");
}

#[test]
fn terminated_waiter_leaves_the_queue() {
    let e = Env::new();
    live_ok(&e, "holder", &["checkout", "task-1", "--json"]);
    let child = spawn_waiter(&e, "waiter", "task-1", "30s");
    poll_until("the waiter to join the queue", || {
        live_waiters(&e, "task-1") == ["waiter"]
    });
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let r = finish(child, "checkout --wait after SIGTERM");
    assert_eq!(r.code, HELD, "{}", r.text());
    assert_eq!(r.json()["outcome"], "conflict");
    assert!(live_waiters(&e, "task-1").is_empty());
}

#[test]
fn killed_waiter_is_dropped_when_the_key_frees() {
    let e = Env::new();
    live_ok(&e, "holder", &["checkout", "task-1", "--json"]);
    let mut child = spawn_waiter(&e, "doomed", "task-1", "30s");
    poll_until("the waiter to join the queue", || {
        live_waiters(&e, "task-1") == ["doomed"]
    });
    let q = live(&e, "next", &["checkout", "task-1", "--queue", "--json"]);
    assert_eq!(q.json()["position"], 2, "{}", q.text());
    // SIGKILL: no chance to leave the queue itself.
    child.kill().unwrap();
    child.wait().unwrap();

    live_ok(&e, "holder", &["release", "task-1", "--json"]);
    let s = live(&e, "observer", &["status", "task-1", "--json"]).json();
    assert_eq!(waiters(&s), ["next"], "{s}");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "next", "{s}");
    let log = audit(&e.dir());
    let gone: Vec<_> = events(&log, "dequeue")
        .into_iter()
        .filter(|v| v["reason"] == "gone")
        .collect();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0]["agent"], "doomed");
    let j = live_ok(&e, "next", &["checkout", "task-1", "--json"]);
    assert_eq!(j["outcome"], "granted");
}

// ---------------------------------------------------------------------------------------
// 3. Inbox

#[test]
fn inbox_one_reserved_message_per_handoff_peek_and_read() {
    let mut e = Env::new();
    for k in ["task-1", "task-2"] {
        checkout(&e, "holder", k, &[]);
        queue_up(&e, "agent-a", k);
    }
    assert!(inbox(&e, "agent-a", true).is_empty(), "nothing yet");

    release(&e, "holder", "task-1");
    // Others meeting the reservation do not make it send again.
    for _ in 0..2 {
        assert_eq!(checkout(&e, "outsider", "task-1", &[]).0, HELD);
        assert_eq!(
            checkout(&e, "outsider", "task-1", &["--queue"]).0,
            HELD,
            "an outsider may queue behind the reservation"
        );
        status(&e, "task-1");
    }
    let msgs = inbox(&e, "agent-a", true);
    assert_eq!(kinds(&msgs), pairs(&[("reserved", "task-1")]));
    assert!(msgs[0]["from"].is_null(), "{}", msgs[0]);
    assert_eq!(msgs[0]["ts"], T0);
    assert!(
        msgs[0]["body"]
            .as_str()
            .unwrap()
            .contains("tasklock checkout task-1")
    );

    e.at(T30S);
    release(&e, "holder", "task-2");
    let first = inbox(&e, "agent-a", true);
    assert_eq!(
        kinds(&first),
        pairs(&[("reserved", "task-1"), ("reserved", "task-2")])
    );
    // Peeking leaves them unread: the same messages again.
    let again = inbox(&e, "agent-a", true);
    assert_eq!(first, again);
    let ids: BTreeSet<_> = first.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "distinct ids");
    // Nobody else got anything.
    assert!(inbox(&e, "outsider", true).is_empty());
    assert!(inbox(&e, "holder", true).is_empty());

    let r = e.ok("agent-a", &["inbox"]);
    snap!(e, "inbox_messages", r);
    assert!(inbox(&e, "agent-a", false).is_empty(), "marked read");
    assert!(inbox(&e, "agent-a", true).is_empty());
    let r = e.ok("agent-a", &["inbox"]);
    assert_eq!(r.stdout, "No unread messages.\n");
    snap!(e, "inbox_empty", r);

    // Taking the reserved keys sends nothing more.
    for k in ["task-1", "task-2"] {
        assert_eq!(checkout(&e, "agent-a", k, &[]).0, GRANTED);
    }
    assert!(inbox(&e, "agent-a", true).is_empty());

    let log = audit(&e.dir());
    let notes: Vec<_> = events(&log, "notify")
        .iter()
        .map(|v| (v["agent"].clone(), v["detail"].clone(), v["key"].clone()))
        .collect();
    assert_eq!(
        notes,
        [
            (json!("agent-a"), json!("reserved"), json!("task-1")),
            (json!("agent-a"), json!("reserved"), json!("task-2")),
        ]
    );
}

/// Twelve handoffs made by one `release --all` (one process, one millisecond under a
/// fixed clock) are read in the order they were sent: ids sort as numbers, so the tenth
/// message no longer comes before the second.
#[test]
fn inbox_reads_one_commands_many_messages_in_the_order_sent() {
    let e = Env::new();
    let keys: Vec<String> = (1..=12).map(|i| format!("task-{i:02}")).collect();
    for k in &keys {
        checkout(&e, "holder", k, &[]);
        queue_up(&e, "agent-a", k);
    }
    let j = e.ok("holder", &["release", "--all", "--json"]).json();
    let released: Vec<&str> = j["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["key"].as_str().expect("key"))
        .collect();
    assert_eq!(released.len(), 12, "{j}");
    let read: Vec<(String, String)> = kinds(&inbox(&e, "agent-a", true));
    let sent: Vec<(String, String)> = released
        .iter()
        .map(|k| ("reserved".to_string(), k.to_string()))
        .collect();
    assert_eq!(read, sent);
}

#[test]
fn inbox_force_release_and_lease_expiry() {
    let mut e = Env::new();
    e.as_operator();
    checkout(&e, "holder", "task-1", &[]);
    let j = e
        .ok(
            "boss",
            &["release", "task-1", "--force", "--note", "stuck", "--json"],
        )
        .json();
    assert_eq!(j["results"][0]["outcome"], "force_released", "{j}");
    let msgs = inbox(&e, "holder", true);
    assert_eq!(kinds(&msgs), pairs(&[("force_released", "task-1")]));
    assert_eq!(msgs[0]["from"], "boss");
    assert!(msgs[0]["body"].as_str().unwrap().contains("stuck"));
    assert!(inbox(&e, "boss", true).is_empty());
    assert_eq!(inbox(&e, "holder", false).len(), 1);

    // A lease found expired by another agent.
    let (code, _) = checkout(&e, "holder", "task-2", &["--timeout", "1m"]);
    assert_eq!(code, GRANTED);
    // Its own lease running out, found by itself, sends it nothing.
    let (code, _) = checkout(&e, "holder", "task-3", &["--timeout", "1m"]);
    assert_eq!(code, GRANTED);
    e.at(T1H);
    let (code, j) = checkout(&e, "other", "task-2", &[]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["took_over"]["agent"]["id"], "holder", "{j}");
    assert_eq!(j["took_over"]["reason"], "timeout", "{j}");
    let r = e.run(Some("holder"), &["release", "task-3", "--json"]);
    assert_eq!(r.code, NOT_HOLDER, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "lease_lost");

    let msgs = inbox(&e, "holder", false);
    assert_eq!(kinds(&msgs), pairs(&[("lease_expired", "task-2")]));
    assert_eq!(msgs[0]["from"], "other");
    assert!(inbox(&e, "holder", true).is_empty());
}

// ---------------------------------------------------------------------------------------
// 4. Reservations lapse

#[test]
fn reservation_lapses_to_the_next_waiter() {
    let mut e = Env::new();
    write_config(&e, "handoff_grace: 1m\n");
    checkout(&e, "holder", "task-1", &[]);
    queue_up(&e, "agent-a", "task-1");
    queue_up(&e, "agent-b", "task-1");
    release(&e, "holder", "task-1");
    let s = status(&e, "task-1");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "agent-a", "{s}");
    assert_eq!(
        s["queue"]["reserved_for"]["until"], "2026-01-01T00:01:00Z",
        "the configured grace"
    );

    // Within the grace: still A's.
    e.at(T30S);
    let (code, j) = checkout(&e, "agent-b", "task-1", &[]);
    assert_eq!(code, HELD);
    assert_eq!(j["reserved_for"]["agent"], "agent-a", "{j}");

    // Past it: the next command to meet the key passes it on.
    e.at(T2M);
    let (code, j) = checkout(&e, "outsider", "task-1", &[]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["reserved_for"]["agent"], "agent-b", "{j}");
    assert_eq!(j["reserved_for"]["since"], T2M, "{j}");
    assert_eq!(j["reserved_for"]["until"], "2026-01-01T00:03:00Z", "{j}");

    let log = audit(&e.dir());
    let lapses = events(&log, "lapse");
    assert_eq!(lapses.len(), 1, "{lapses:?}");
    assert_eq!(lapses[0]["agent"], "agent-a");
    assert_eq!(lapses[0]["key"], "task-1");
    assert_eq!(lapses[0]["ts"], T2M);

    let a = inbox(&e, "agent-a", false);
    assert_eq!(
        kinds(&a),
        pairs(&[("reserved", "task-1"), ("reservation_lapsed", "task-1")])
    );
    let b = inbox(&e, "agent-b", false);
    assert_eq!(kinds(&b), pairs(&[("reserved", "task-1")]));
    assert_eq!(b[0]["ts"], T2M);

    let s = status(&e, "task-1");
    assert_eq!(waiters(&s), ["agent-b"], "A left the queue: {s}");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "agent-b");

    // A is refused while B's reservation stands, and is not queued again.
    let (code, j) = checkout(&e, "agent-a", "task-1", &[]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["reserved_for"]["agent"], "agent-b", "{j}");
    assert!(j["position"].is_null(), "{j}");
    let (code, j) = checkout(&e, "agent-b", "task-1", &[]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    assert!(inbox(&e, "agent-b", true).is_empty(), "no more messages");
    assert!(inbox(&e, "agent-a", true).is_empty(), "no more messages");
    assert_eq!(events(&audit(&e.dir()), "lapse").len(), 1);
}

/// `status` (and `list`) settle the queue they show: a lapsed reservation passes on.
#[test]
fn status_passes_a_lapsed_reservation_on() {
    let mut e = Env::new();
    write_config(&e, "handoff_grace: 1m\n");
    checkout(&e, "holder", "task-1", &[]);
    queue_up(&e, "agent-a", "task-1");
    queue_up(&e, "agent-b", "task-1");
    release(&e, "holder", "task-1");
    e.at(T2M);
    let s = status(&e, "task-1");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "agent-b", "{s}");
    assert_eq!(waiters(&s), ["agent-b"], "{s}");
    assert_eq!(events(&audit(&e.dir()), "lapse").len(), 1);
}

// ---------------------------------------------------------------------------------------
// 5. Dead waiters

#[test]
fn dead_waiters_are_dropped_when_the_key_frees() {
    let e = Env::new();
    let mut proc_a = Sleeper::start();
    e.ok("agent-a", &["heartbeat", "--pid", &proc_a.pid(), "--json"]);
    for k in ["task-1", "task-2"] {
        checkout(&e, "holder", k, &[]);
        queue_up(&e, "agent-a", k);
        queue_up(&e, "agent-b", k);
    }
    // While its process lives, A is the head and gets the handoff.
    release(&e, "holder", "task-1");
    let s = status(&e, "task-1");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "agent-a", "{s}");

    proc_a.kill();
    // A key freed after A died goes straight to B.
    release(&e, "holder", "task-2");
    let s = status(&e, "task-2");
    assert_eq!(waiters(&s), ["agent-b"], "{s}");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "agent-b", "{s}");
    // The key reserved for A while it lived passes to B at the next checkout.
    let (code, j) = checkout(&e, "outsider", "task-1", &[]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["reserved_for"]["agent"], "agent-b", "{j}");
    let s = status(&e, "task-1");
    assert_eq!(waiters(&s), ["agent-b"], "{s}");

    assert_eq!(
        kinds(&inbox(&e, "agent-b", true)),
        pairs(&[("reserved", "task-2"), ("reserved", "task-1")])
    );
    assert_eq!(
        kinds(&inbox(&e, "agent-a", true)),
        pairs(&[("reserved", "task-1")]),
        "only the handoff made while it lived"
    );
    let log = audit(&e.dir());
    let gone: Vec<_> = events(&log, "dequeue")
        .iter()
        .map(|v| (v["agent"].clone(), v["key"].clone(), v["reason"].clone()))
        .collect();
    assert_eq!(
        gone,
        [
            (json!("agent-a"), json!("task-2"), json!("gone")),
            (json!("agent-a"), json!("task-1"), json!("gone")),
        ]
    );
    for k in ["task-1", "task-2"] {
        assert_eq!(checkout(&e, "agent-b", k, &[]).0, GRANTED);
    }
}

// ---------------------------------------------------------------------------------------
// 6. Deadlock

/// B's wait closes B → x → A → y → B through A's passive place (`--queue`, no blocked
/// `--wait`): that place is dropped and A told; B waits (issue 46).
#[test]
fn two_agent_cycle_drops_the_passive_place() {
    let e = Env::new();
    checkout(&e, "agent-a", "x", &[]);
    checkout(&e, "agent-b", "y", &[]);
    let j = queue_up(&e, "agent-a", "y");
    assert_eq!(j["position"], 1);
    let j = queue_up(&e, "agent-b", "x");
    assert_eq!(j["position"], 1, "{j}");
    assert_eq!(
        j["dropped"],
        json!([{"agent": "agent-a", "key": "y", "cycle": ["agent-a", "y", "agent-b", "x", "agent-a"]}]),
        "{j}"
    );
    assert!(waiters(&status(&e, "y")).is_empty());
    let log = audit(&e.dir());
    let dl = events(&log, "deadlock");
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0]["agent"], "agent-a");
    assert_eq!(dl[0]["reason"], "dropped");
    assert_eq!(
        kinds(&inbox(&e, "agent-a", true)),
        pairs(&[("deadlock", "y")])
    );
}

/// As above, A blocked in a `--wait` for y: no passive place breaks the cycle, and B is
/// refused (exit 5), not queued; A's wait is untouched.
#[test]
fn two_agent_cycle_is_refused() {
    // `--wait` on the real clock: everything on the real clock.
    let e = Env::new();
    live_ok(&e, "agent-b", &["checkout", "y", "--json"]);
    live_ok(&e, "agent-a", &["checkout", "x", "--json"]);
    let mut a = spawn_waiter(&e, "agent-a", "y", "60s");
    poll_until("A to wait for y", || live_waiters(&e, "y") == ["agent-a"]);
    let r = live(&e, "agent-b", &["checkout", "x", "--queue", "--json"]);
    assert_eq!(r.code, DEADLOCK, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "deadlock", "{j}");
    assert_eq!(
        j["cycle"],
        json!(["agent-b", "x", "agent-a", "y", "agent-b"]),
        "{j}"
    );
    assert!(j["position"].is_null(), "not queued: {j}");
    assert!(live_waiters(&e, "x").is_empty());
    let log = audit(&e.dir());
    let last = events(&log, "deadlock")
        .last()
        .cloned()
        .expect("a deadlock event");
    assert_eq!(last["agent"], "agent-b");
    assert_eq!(last["key"], "x");
    assert_eq!(last["holder"], "agent-a");
    assert_eq!(last["detail"], "agent-b → x → agent-a → y → agent-b");
    let r = live(&e, "agent-b", &["checkout", "x", "--queue"]);
    assert_eq!(r.code, DEADLOCK);
    snap!(e, "deadlock_two_agents", r);
    assert_eq!(events(&audit(&e.dir()), "deadlock").len(), 2);
    // A's own wait is untouched.
    assert_eq!(live_waiters(&e, "y"), ["agent-a"]);
    let _ = a.kill();
    let _ = a.wait();
}

/// A three-agent cycle through passive places: only the first walked from C's request,
/// A's place in y, is dropped; B keeps its place (issue 46).
#[test]
fn three_agent_cycle_drops_one_passive_place() {
    let e = Env::new();
    checkout(&e, "agent-a", "x", &[]);
    checkout(&e, "agent-b", "y", &[]);
    checkout(&e, "agent-c", "z", &[]);
    queue_up(&e, "agent-a", "y");
    queue_up(&e, "agent-b", "z");
    let j = queue_up(&e, "agent-c", "x");
    assert_eq!(
        j["dropped"],
        json!([{
            "agent": "agent-a",
            "key": "y",
            "cycle": ["agent-a", "y", "agent-b", "z", "agent-c", "x", "agent-a"]
        }]),
        "{j}"
    );
    assert_eq!(waiters(&status(&e, "x")), ["agent-c"]);
    assert!(waiters(&status(&e, "y")).is_empty());
    assert_eq!(waiters(&status(&e, "z")), ["agent-b"]);
    assert_eq!(events(&audit(&e.dir()), "deadlock").len(), 1);
}

#[test]
fn waiting_without_a_cycle_is_not_refused() {
    let e = Env::new();
    checkout(&e, "agent-a", "x", &[]);
    checkout(&e, "agent-b", "y", &[]);
    assert_eq!(queue_up(&e, "agent-a", "y")["position"], 1);
    assert_eq!(queue_up(&e, "agent-c", "y")["position"], 2);
    // A chain, not a cycle: C (waiting for y) waits for x too.
    assert_eq!(queue_up(&e, "agent-c", "x")["position"], 1);
    assert!(events(&audit(&e.dir()), "deadlock").is_empty());
}

#[test]
fn wait_that_would_deadlock_returns_at_once() {
    // `--wait` on the real clock: everything on the real clock.
    let e = Env::new();
    live_ok(&e, "agent-a", &["checkout", "x", "--json"]);
    live_ok(&e, "agent-b", &["checkout", "y", "--json"]);
    // A's place blocked in a `--wait` too: no passive place breaks the cycle.
    let mut a = spawn_waiter(&e, "agent-a", "y", "60s");
    poll_until("A to wait for y", || live_waiters(&e, "y") == ["agent-a"]);
    let child = spawn_waiter(&e, "agent-b", "x", "30s");
    let r = finish(child, "deadlocking checkout --wait");
    let _ = a.kill();
    let _ = a.wait();
    assert_eq!(r.code, DEADLOCK, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "deadlock");
    assert_eq!(
        j["cycle"],
        json!(["agent-b", "x", "agent-a", "y", "agent-b"])
    );
    assert!(live_waiters(&e, "x").is_empty());
}

// ---------------------------------------------------------------------------------------
// 7. --any

#[test]
fn any_racers_get_distinct_keys() {
    const RACERS: usize = 8;
    const ROUNDS: usize = 30;
    let e = Env::new();
    for round in 0..ROUNDS {
        let keys: Vec<String> = (1..=RACERS).map(|i| format!("r{round}-k{i}")).collect();
        let gate = Arc::new(Barrier::new(RACERS));
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let agent = format!("racer-{i}");
                let mut cmd = base_cmd(&e.now);
                use_store(&mut cmd, &e.dir());
                cmd.arg("--dir")
                    .arg(e.dir())
                    .args(["--agent", &agent, "checkout", "--any", "--json"])
                    .args(&keys);
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || {
                    gate.wait();
                    (agent, exec(cmd))
                })
            })
            .collect();
        let results: Vec<(String, Run)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut got = BTreeSet::new();
        for (agent, r) in &results {
            assert_eq!(r.code, GRANTED, "round {round}, {agent}: {}", r.text());
            let j = r.json();
            assert_eq!(j["outcome"], "granted", "{j}");
            assert_eq!(j["checkout"]["agent"]["id"], agent.as_str(), "{j}");
            assert_eq!(j["key"], j["checkout"]["key"], "{j}");
            got.insert(j["key"].as_str().unwrap().to_string());
        }
        let want: BTreeSet<String> = keys.iter().cloned().collect();
        assert_eq!(got, want, "round {round}: every racer a different key");
        if round == 0 || round == ROUNDS - 1 {
            let mut args = vec!["checkout", "--any", "--json"];
            args.extend(keys.iter().map(String::as_str));
            let r = e.run(Some("ninth"), &args);
            assert_eq!(r.code, HELD, "{}", r.text());
            let j = r.json();
            assert_eq!(j["command"], "checkout");
            assert_eq!(j["outcome"], "conflict");
            let refused = j["refused"].as_array().expect("refused array");
            assert_eq!(refused.len(), RACERS);
            for (k, c) in keys.iter().zip(refused) {
                assert_eq!(c["key"], k.as_str(), "in the order asked: {c}");
                assert_eq!(c["outcome"], "conflict", "{c}");
                assert!(
                    c["checkout"]["agent"]["id"]
                        .as_str()
                        .unwrap()
                        .starts_with("racer-")
                );
            }
        }
    }
    let log = audit(&e.dir());
    assert_eq!(events(&log, "acquire").len(), RACERS * ROUNDS);
}

#[test]
fn any_takes_the_first_key_that_can_be_taken() {
    let e = Env::new();
    checkout(&e, "agent-a", "k1", &[]);
    // k2 is free but reserved for agent-b.
    checkout(&e, "agent-c", "k2", &[]);
    queue_up(&e, "agent-b", "k2");
    release(&e, "agent-c", "k2");
    let r = e.run(
        Some("agent-d"),
        &["checkout", "--any", "k1", "k2", "k3", "--json"],
    );
    assert_eq!(r.code, GRANTED, "{}", r.text());
    let j = r.json();
    assert_eq!(j["key"], "k3", "held and reserved keys are skipped: {j}");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-d");
    // The head of k2's queue gets k2 from its list.
    let r = e.run(
        Some("agent-b"),
        &["checkout", "--any", "k1", "k2", "--json"],
    );
    assert_eq!(r.code, GRANTED, "{}", r.text());
    assert_eq!(r.json()["key"], "k2");
}

/// `--any` looks ahead without a full attempt on every key, but decides as one would, in
/// list order: a key whose lease ran out comes before a later free key; a frozen key
/// and a key reserved for another agent are passed over. A grant audits no `deny` for the
/// keys passed over; a refusal audits one `deny` for the whole call.
#[test]
fn any_decides_in_list_order_and_audits_one_deny_per_refusal() {
    let mut e = Env::new();
    checkout(&e, "agent-a", "live", &["--timeout", "1h"]);
    checkout(&e, "agent-b", "lapsed", &["--timeout", "1m"]);
    checkout(&e, "agent-c", "reserved", &["--timeout", "1h"]);
    e.ok("ops", &["freeze", "cold", "--for", "1h"]);
    e.at(T2M);
    queue_up(&e, "agent-q", "reserved");
    release(&e, "agent-c", "reserved");
    e.at("2026-01-01T00:03:00Z");
    let before = audit(&e.dir()).len();

    let list = [
        "checkout", "--any", "live", "cold", "reserved", "lapsed", "free", "--json",
    ];
    let r = e.run(Some("agent-d"), &list);
    assert_eq!(r.code, GRANTED, "{}", r.text());
    let j = r.json();
    assert_eq!(
        j["key"], "lapsed",
        "the lapsed key comes before the free one: {j}"
    );
    assert_eq!(j["took_over"]["agent"]["id"], "agent-b", "{j}");
    assert_eq!(j["took_over"]["reason"], "timeout", "{j}");
    let log = audit(&e.dir());
    let new: Vec<&str> = log[before..]
        .iter()
        .map(|v| v["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        new,
        ["auto_release", "notify", "acquire"],
        "no deny on a grant: {new:?}"
    );

    // Then `free`; then nothing, refused key by key in list order, and audited once.
    let r = e.run(
        Some("agent-d"),
        &[
            "checkout", "--any", "live", "cold", "reserved", "free", "--json",
        ],
    );
    assert_eq!(r.code, GRANTED, "{}", r.text());
    assert_eq!(r.json()["key"], "free");
    let before = audit(&e.dir()).len();
    let r = e.run(Some("agent-e"), &list);
    assert_eq!(r.code, HELD, "{}", r.text());
    let j = r.json();
    let outcomes: Vec<(&str, &str)> = j["refused"]
        .as_array()
        .expect("refused array")
        .iter()
        .map(|c| (c["key"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("live", "conflict"),
            ("cold", "frozen"),
            ("reserved", "conflict"),
            ("lapsed", "conflict"),
            ("free", "conflict"),
        ]
    );
    assert_eq!(j["refused"][2]["reserved_for"]["agent"], "agent-q", "{j}");
    assert_eq!(j["refused"][3]["checkout"]["agent"]["id"], "agent-d", "{j}");
    let log = audit(&e.dir());
    let new = &log[before..];
    assert_eq!(new.len(), 1, "one event for the refused call: {new:?}");
    let d = &new[0];
    assert_eq!(d["event"], "deny");
    assert_eq!(d["agent"], "agent-e");
    assert_eq!(d["key"], "live", "the first key of the list: {d}");
    assert_eq!(d["holder"], "agent-a", "{d}");
    assert_eq!(
        d["detail"],
        "checkout --any: none of 5 keys could be taken (1 frozen, 4 held or reserved): \
         live (held by agent-a), cold (frozen), reserved (reserved for agent-q), \
         lapsed (held by agent-d), free (held by agent-d)",
        "{d}"
    );
    // The head of the queue still gets its reserved key from the same list.
    let r = e.run(Some("agent-q"), &list);
    assert_eq!(r.code, GRANTED, "{}", r.text());
    assert_eq!(r.json()["key"], "reserved");
}

// ---------------------------------------------------------------------------------------
// 8. Usage errors

#[test]
fn usage_errors_exit_64() {
    let e = Env::new();
    for args in [
        &["checkout", "a", "b", "--json"][..],
        &["checkout", "a", "--queue", "--wait", "--json"],
        &["checkout", "a", "--queue", "--wait", "5s", "--json"],
        &["checkout", "--any", "a", "b", "--queue", "--json"],
        &["checkout", "--any", "a", "b", "--wait", "5s", "--json"],
    ] {
        let r = e.run(Some("agent-a"), args);
        assert_eq!(r.code, USAGE, "{args:?}: {}", r.text());
        let j = r.json();
        assert_eq!(j["error"]["kind"], "usage", "{args:?}: {j}");
        assert_eq!(j["error"]["exit_code"], USAGE);
    }
    // Nothing was taken or queued.
    for k in ["a", "b"] {
        let s = status(&e, k);
        assert_eq!(s["outcome"], "free", "{s}");
        assert_eq!(s["queue"]["length"], 0, "{s}");
    }
}

// ---------------------------------------------------------------------------------------
// Markdown snapshots (pinned clock)

#[test]
fn snapshots_of_queue_markdown() {
    let mut e = Env::new();
    e.ok(
        "holder",
        &[
            "checkout",
            "task-1",
            "--reason",
            "fix login bug",
            "--name",
            "builder",
        ],
    );
    let r = e.run(Some("agent-a"), &["checkout", "task-1", "--queue"]);
    assert_eq!(r.code, HELD);
    snap!(e, "queued_conflict", r);
    queue_up(&e, "agent-b", "task-1");
    e.ok("agent-c", &["checkout", "task-2", "--timeout", "1h"]);
    e.ok("agent-d", &["checkout", "task-3"]);
    queue_up(&e, "agent-e", "task-3");
    queue_up(&e, "agent-f", "task-3");

    e.at(T30S);
    release(&e, "agent-d", "task-3");
    e.at("2026-01-01T00:01:00Z");
    let r = e.run(Some("outsider"), &["checkout", "task-3"]);
    assert_eq!(r.code, HELD);
    snap!(e, "reserved_refusal", r);

    let r = e.ok("observer", &["status", "task-1"]);
    snap!(e, "status_queue", r);
    let r = e.ok("observer", &["status", "task-3"]);
    snap!(e, "status_reserved", r);
    let r = e.ok("observer", &["list"]);
    snap!(e, "list_queue_and_reserved", r);
    let j = e.ok("observer", &["list", "--json"]).json();
    assert_eq!(j["checkouts"].as_array().unwrap().len(), 2, "{j}");
    assert_eq!(
        j["queues"]["task-1"]["waiters"],
        json!(["agent-a", "agent-b"])
    );
    assert_eq!(j["queues"]["task-3"]["reserved_for"]["agent"], "agent-e");
    assert!(j["queues"].get("task-2").is_none(), "{j}");

    let r = e.run(
        Some("outsider"),
        &["checkout", "--any", "task-1", "task-2", "task-3"],
    );
    assert_eq!(r.code, HELD);
    snap!(e, "any_all_held", r);
}

/// Send a signal (a name such as STOP) to a process.
fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// The agent `ghost` registered a `sleep` as its process, then blocked in
/// `checkout task-1 --wait`; `next` queued behind it.
fn ghost_waiting(e: &Env) -> (Child, Child) {
    let sleep = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    live_ok(
        e,
        "ghost",
        &["heartbeat", "--pid", &sleep.id().to_string(), "--json"],
    );
    live_ok(e, "holder", &["checkout", "task-1", "--json"]);
    let waiter = spawn_waiter(e, "ghost", "task-1", "30s");
    poll_until("ghost to join the queue", || {
        live_waiters(e, "task-1") == ["ghost"]
    });
    let r = live(e, "next", &["checkout", "task-1", "--queue", "--json"]);
    assert_eq!(r.code, HELD, "{}", r.text());
    (sleep, waiter)
}

fn assert_ghost_never_got_it(e: &Env, r: &Run) {
    assert_eq!(r.code, HELD, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "agent_gone", "{j}");
    assert_eq!(j["position"], Value::Null, "{j}");
    let s = live(e, "observer", &["status", "task-1", "--json"]).json();
    assert!(s["checkout"].is_null(), "{s}");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "next", "{s}");
    assert_eq!(waiters(&s), ["next"], "{s}");
    let log = audit(&e.dir());
    assert!(
        !log.iter()
            .any(|v| v["agent"] == "ghost" && (v["event"] == "acquire" || v["event"] == "handoff")),
        "ghost was never handed the key: {log:?}"
    );
    // `next` takes it.
    let j = live_ok(e, "next", &["checkout", "task-1", "--json"]);
    assert_eq!(j["outcome"], "granted");
}

#[test]
fn an_orphaned_wait_stops_when_its_agents_process_dies() {
    let e = Env::new();
    let (mut sleep, waiter) = ghost_waiting(&e);
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    live_ok(&e, "holder", &["release", "task-1", "--json"]);
    let r = finish(waiter, "the orphaned wait");
    assert_ghost_never_got_it(&e, &r);
}

/// The agent's process dies while its wait is inside an attempt, at whatever point: the
/// wait ends, never hands the key to the life that is over, and never makes the dead
/// agent look alive again (its process is kept on record, so every command judges it
/// dead). Each round stops the wait inside the guard at a point found by racing it,
/// kills the agent's process, and lets the wait go on.
#[test]
fn an_orphaned_wait_whose_agent_dies_inside_an_attempt_never_revives_it() {
    for round in 0..12 {
        let e = Env::new();
        let (mut sleep, waiter) = ghost_waiting(&e);
        let pid = waiter.id() as i32;
        let end = Instant::now() + DEADLINE;
        loop {
            // SAFETY: signals to the wait process this test started and still owns.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            if scope_held(&e.dir(), waiter.id()) {
                break;
            }
            unsafe { libc::kill(pid, libc::SIGCONT) };
            assert!(
                Instant::now() < end,
                "round {round}: never met the wait in the guard"
            );
            std::thread::sleep(Duration::from_micros(300));
        }
        sleep.kill().unwrap();
        sleep.wait().unwrap();
        unsafe { libc::kill(pid, libc::SIGCONT) };
        live_ok(&e, "holder", &["release", "task-1", "--json"]);
        let r = finish(waiter, "the orphaned wait");
        assert_ghost_never_got_it(&e, &r);
        let j = live(&e, "observer", &["agents", "--json"]).json();
        let ghost = j["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "ghost")
            .unwrap_or_else(|| panic!("round {round}: ghost not listed: {j}"));
        assert_eq!(ghost["state"], "dead", "round {round}: {ghost}");
    }
}

/// SIGSTOP a process at a moment it does not hold the lock directory's guard (a wait
/// takes it briefly on each attempt; stopped inside, it would block everyone).
fn stop_outside_the_guard(e: &Env, pid: u32) {
    for _ in 0..1000 {
        signal(pid, "STOP");
        if !scope_held(&e.dir(), pid) {
            return;
        }
        signal(pid, "CONT");
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    panic!("could not stop pid {pid} outside the guard");
}

#[test]
fn the_handoff_skips_a_waiter_whose_agent_is_dead_even_while_its_wait_runs() {
    let e = Env::new();
    let (mut sleep, waiter) = ghost_waiting(&e);
    // The wait process lives on (stopped, so it cannot notice anything itself)...
    stop_outside_the_guard(&e, waiter.id());
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    // ...yet the release passes ghost over and reserves the key for `next`.
    live_ok(&e, "holder", &["release", "task-1", "--json"]);
    let s = live(&e, "observer", &["status", "task-1", "--json"]).json();
    assert_eq!(s["queue"]["reserved_for"]["agent"], "next", "{s}");
    signal(waiter.id(), "CONT");
    let r = finish(waiter, "the orphaned wait");
    assert_ghost_never_got_it(&e, &r);
    // Its process is still gone: a new wait stops at once, with a clear word, even for a
    // free key (it would be reaped as dead at once).
    let md = live(&e, "ghost", &["checkout", "task-2", "--wait", "1s"]);
    assert_eq!(md.code, HELD, "{}", md.text());
    assert!(
        md.stdout
            .starts_with("Stopped waiting: your agent's process is gone, so `task-2` will not be handed to you; you are out of its queue."),
        "{}",
        md.stdout
    );
    snap!(e, "wait_stopped_agent_gone", md);
}

/// A wait belongs to the life of its agent's process: when that process is gone and a
/// later command of the agent's (an orchestrator retrying it) forgets it, the wait begun
/// before still ends, and never takes the key for the life that is over.
#[test]
fn a_wait_ends_with_its_agents_process_even_once_a_new_command_forgot_it() {
    let e = Env::new();
    let (mut sleep, waiter) = ghost_waiting(&e);
    stop_outside_the_guard(&e, waiter.id());
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    // The agent asks again: its dead process is forgotten, the agent alive again.
    live_ok(&e, "ghost", &["checkout", "elsewhere", "--json"]);
    live_ok(&e, "holder", &["release", "task-1", "--json"]);
    signal(waiter.id(), "CONT");
    let r = finish(waiter, "the wait of a life that is over");
    assert_eq!(r.code, HELD, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "agent_gone", "{j}");
    let s = live(&e, "observer", &["status", "task-1", "--json"]).json();
    assert!(s["checkout"].is_null(), "{s}");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "next", "{s}");
}

/// A damaged record (garbage, or one this user cannot read) in the list is skipped with
/// a warning, as `list` skips it, instead of failing the whole `--any`; only a list of
/// nothing but damaged keys is the error one damaged key is.
#[test]
fn any_skips_a_damaged_record_with_a_warning() {
    if file_store_only("any_skips_a_damaged_record_with_a_warning") {
        return;
    }
    let e = Env::new();
    checkout(&e, "agent-a", "k2", &[]);
    std::fs::write(record_path(&e.dir(), "k1"), b"{not json").unwrap();
    let r = e.run(
        Some("agent-b"),
        &["checkout", "--any", "k1", "k2", "k3", "--json"],
    );
    assert_eq!(r.code, GRANTED, "{}", r.text());
    let j = r.json();
    assert_eq!(j["key"], "k3", "{j}");
    let warned = j["warnings"].as_array().expect("a warnings array");
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().contains("`k1` was skipped")),
        "{j}"
    );

    // Nothing free: the damaged key is listed among the refusals.
    let r = e.run(Some("agent-b"), &["checkout", "--any", "k1", "k2"]);
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(
        r.stdout.contains("damaged record (skipped)"),
        "{}",
        r.text()
    );
    assert!(r.stderr.contains("`k1` was skipped"), "{}", r.text());
    snap!(e, "any_damaged", r);
    let r = e.run(
        Some("agent-b"),
        &["checkout", "--any", "k1", "k2", "--json"],
    );
    let j = r.json();
    let outcomes: Vec<&str> = j["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["corrupt", "conflict"]);

    // Only damaged keys: the error of one damaged key (exit 1).
    let r = e.run(Some("agent-b"), &["checkout", "--any", "k1"]);
    assert_eq!(r.code, 1, "{}", r.text());
}

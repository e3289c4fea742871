//! What only the PostgreSQL store has: agents on other hosts sharing one server, a
//! server that cannot be reached, a connection lost in the middle of a command.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A stand-in for an agent's long-lived process.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn agents_on_other_hosts_are_judged_by_heartbeats_only() {
    let mut e = Env::new();
    let p = Proc(Command::new("sleep").arg("300").spawn().unwrap());
    e.ok("remote", &["heartbeat", "--pid", &p.0.id().to_string()]);
    e.ok("remote", &["checkout", "task-1", "--timeout", "2h"]);
    // What an agent on another machine wrote: another host and boot, and a pid that
    // means nothing here (this one is about to be gone).
    for stored in [Stored::Agent("remote"), Stored::Record("task-1")] {
        stored.edit(&e.dir(), |v| {
            let slot = if v.get("agent").is_some() {
                &mut v["agent"]
            } else {
                v
            };
            slot["host"] = "build-box-2".into();
            slot["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
        });
    }
    drop(p);
    // Its pid is gone here, but that says nothing about another host: still held.
    assert_eq!(e.run(Some("local"), &["checkout", "task-1"]).code, 2);
    let j = e.run(None, &["agents", "--json"]).json();
    assert_eq!(j["agents"][0]["state"], "alive", "{j}");
    // Heartbeats stop: stalled after 3m (kept), dead after 10m (released).
    e.at("2026-01-01T00:04:00Z");
    assert_eq!(e.run(Some("local"), &["checkout", "task-1"]).code, 2);
    e.at("2026-01-01T00:11:00Z");
    let r = e.ok("local", &["checkout", "task-1", "--json"]).json();
    assert_eq!(r["took_over"]["agent"]["id"], "remote", "{r}");
    let events = audit(&e.dir());
    let auto: Vec<_> = events
        .iter()
        .filter(|v| v["event"] == "auto_release")
        .collect();
    assert_eq!(auto.len(), 1);
    assert_eq!(auto[0]["reason"], "agent_death");
}

/// Run `args` against the store at `url` (no per-test schema), timing it.
fn against(url: &str, args: &[&str]) -> (Run, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = base_cmd(T0);
    cmd.env("TASKLOCK_URL", url)
        .arg("--dir")
        .arg(tmp.path().join(".locks"))
        .args(["--agent", "a"])
        .args(args);
    let started = Instant::now();
    let r = exec(cmd);
    (r, started.elapsed())
}

#[test]
fn a_server_that_is_down_is_exit_1_naming_the_masked_url() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://tl:hunter2@127.0.0.1:{port}/db");
    let (r, took) = against(&url, &["checkout", "k"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(
        r.stderr
            .contains(&format!("postgres://tl:***@127.0.0.1:{port}/db")),
        "{}",
        r.text()
    );
    assert!(!r.text().contains("hunter2"), "{}", r.text());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The same in JSON, for programs.
    let (r, _) = against(&url, &["checkout", "k", "--json"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["error"]["kind"], "store", "{}", r.text());
}

#[test]
fn a_server_that_never_answers_gives_up_at_the_connect_timeout() {
    // Accepts TCP connections (the kernel does, into the backlog) and never answers,
    // like a stopped server.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let url = format!("postgres://tl:hunter2@127.0.0.1:{port}/db?connect_timeout=1");
    let (r, took) = against(&url, &["release", "k"]);
    drop(l);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("tl:***@127.0.0.1"), "{}", r.text());
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

#[test]
fn a_connection_killed_mid_command_leaves_nothing_half_written() {
    let e = Env::new();
    e.ok("a", &["checkout", "warm-up"]);
    // Hold the records table so the next checkout stops inside its transaction, after
    // taking its token and before its record is written.
    let mut blocker = Command::new("psql")
        .arg(std::env::var("TASKLOCK_TEST_PG_URL").unwrap())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .env("PGAPPNAME", format!("blocker/{}", std::process::id()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let schema = pg_schema(&e.dir());
    let stdin = blocker.stdin.as_mut().unwrap();
    writeln!(
        stdin,
        "BEGIN; LOCK TABLE {schema}.records IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(30);"
    )
    .unwrap();
    stdin.flush().unwrap();
    // Wait until the lock is held.
    let deadline = Instant::now() + Duration::from_secs(10);
    while psql(
        &e.dir(),
        "SELECT count(*) FROM pg_locks WHERE relation = 'records'::regclass AND mode = 'AccessExclusiveLock' AND granted",
    )
    .trim()
        != "1"
    {
        assert!(Instant::now() < deadline, "the blocker never locked records");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cmd = base_cmd(T0);
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["--agent", "b", "checkout", "task-1", "--reason", "doomed"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    // Once it waits on the table (inside its transaction), end its connection.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = psql(
            &e.dir(),
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'tasklock/{pid}' AND wait_event_type = 'Lock'"
            ),
        );
        if n.trim() == "1" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the checkout never waited on the table"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    psql(
        &e.dir(),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'blocker/{}'",
            std::process::id()
        ),
    );
    let _ = blocker.kill();
    let _ = blocker.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("lost the connection to PostgreSQL at"),
        "{stderr}"
    );
    // Nothing of it was kept: no record, no audit event, no registry entry.
    assert_eq!(
        psql(
            &e.dir(),
            "SELECT count(*) FROM records WHERE key = 'task-1'"
        )
        .trim(),
        "0"
    );
    assert_eq!(
        psql(&e.dir(), "SELECT count(*) FROM audit WHERE key = 'task-1'").trim(),
        "0"
    );
    assert_eq!(
        psql(&e.dir(), "SELECT count(*) FROM agents WHERE id = 'b'").trim(),
        "0"
    );
    // And the next command finds a working store, with a token past the lost one.
    let j = e.ok("c", &["checkout", "task-1", "--json"]).json();
    assert!(j["checkout"]["token"].as_u64().unwrap() >= 2, "{j}");
}

#[test]
fn every_command_of_a_project_shares_one_schema_and_one_token_sequence() {
    let e = Env::new();
    let mut last = 0;
    for i in 0..5 {
        let j = e.ok("a", &["checkout", &format!("k{i}"), "--json"]).json();
        let t = j["checkout"]["token"].as_u64().unwrap();
        assert!(t > last, "token {t} after {last}");
        last = t;
        e.ok("a", &["release", &format!("k{i}")]);
    }
    // Nothing went into the lock directory.
    assert!(!e.dir().join("keys").exists());
    assert_eq!(
        psql(&e.dir(), "SELECT max(version) FROM schema_version").trim(),
        "7"
    );
}

/// The reads of a scope's BEGIN are functions of the schema (version 5, `read_ahead`
/// replaced in 6), planned once per server session. A schema of version 4 (what the
/// build before left, with keys in its backlog) is upgraded by the first claim, which
/// then takes its key; the claims after it are three round trips again.
#[test]
fn a_claim_upgrades_a_version_4_schema_to_its_functions() {
    let e = Env::new();
    e.ok("observer", &["backlog", "add", "k1", "k2", "k3"]);
    let functions = "SELECT string_agg(proname, ',' ORDER BY proname) FROM pg_proc \
                     WHERE pronamespace = current_schema()::regnamespace";
    assert_eq!(
        psql(&e.dir(), functions).trim(),
        "read_ahead,take_ahead,take_next"
    );
    // Back to version 4: its tables, without the functions.
    psql(
        &e.dir(),
        "DROP FUNCTION take_ahead, read_ahead, take_next; \
         DELETE FROM schema_version WHERE version >= 5",
    );
    let pid = std::process::id().to_string();
    let j = e
        .ok("a", &["checkout", "--next", "--json", "--pid", &pid])
        .json();
    assert_eq!(j["key"], "k1", "{j}");
    assert_eq!(
        psql(&e.dir(), "SELECT max(version) FROM schema_version").trim(),
        "7"
    );
    assert_eq!(
        psql(&e.dir(), functions).trim(),
        "read_ahead,take_ahead,take_next"
    );
    let (sent, run) = messages_sent(&e, "b", &["checkout", "--next", "--json"]);
    assert_eq!(run.json()["key"], "k2", "{}", run.text());
    assert_eq!(sent, 3, "{}", run.text());
}

/// The plans of the statements `sql` runs, nested ones (inside the schema's functions)
/// included, as auto_explain gives them, in a session of its own: planned afresh, from the
/// tables as they are now.
fn plans(dir: &Path, sql: &str) -> String {
    let base = std::env::var("TASKLOCK_TEST_PG_URL").expect("TASKLOCK_TEST_PG_URL");
    let mut cmd = Command::new("psql");
    cmd.arg(&base).args(["-X", "-q", "-v", "ON_ERROR_STOP=1"]);
    for c in [
        "LOAD 'auto_explain'".to_string(),
        "SET auto_explain.log_min_duration = 0".to_string(),
        "SET auto_explain.log_nested_statements = on".to_string(),
        "SET auto_explain.log_level = notice".to_string(),
        "SET client_min_messages = notice".to_string(),
        format!("SET search_path TO {}", pg_schema(dir)),
        sql.to_string(),
    ] {
        cmd.args(["-c", &c]);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Version 6: `read_ahead` (and `take_ahead`, which calls it) finds each row it reads by
/// its table's key. Version 5 joined them, and a server session planned that once, while
/// the tables were small, as a scan of all of `records` and of `slot_records`: every
/// claim of a drain then read the record of every key held so far.
#[test]
fn the_reads_of_a_claim_find_their_rows_by_key_however_the_tables_grow() {
    let e = Env::new();
    e.ok("observer", &["backlog", "add", "k1", "k2"]);
    for i in 0..40 {
        e.ok("a", &["checkout", &format!("held-{i}")]);
    }
    e.ok("a", &["checkout", "slotted", "--slots", "2"]);
    e.ok("b", &["checkout", "queued-on"]);
    assert_eq!(
        e.run(Some("c"), &["checkout", "queued-on", "--queue"]).code,
        2
    );
    e.ok("a", &["release", "held-0"]);
    let seen = plans(
        &e.dir(),
        "SELECT count(*) FROM read_ahead(ARRAY['held-0', 'held-1', 'slotted', 'queued-on', 'k2'], 3); \
         SELECT count(*) FROM take_ahead('\\x00'::bytea, 3)",
    );
    assert!(
        seen.contains("Function Scan on unnest"),
        "read_ahead's own plan was not shown: {seen}"
    );
    for table in [
        "records",
        "slot_records",
        "queues",
        "ended",
        "notes",
        "backlog",
    ] {
        assert!(
            !seen.contains(&format!("Seq Scan on {table} ")),
            "a claim's reads scan the whole of {table}: {seen}"
        );
    }
    assert!(seen.contains("Index Scan using records_pkey"), "{seen}");
}

#[test]
fn doctor_reports_the_server_and_the_schema() {
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    let r = e.run(Some("a"), &["doctor", "--json"]);
    let j = r.json();
    let store = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "store")
        .unwrap_or_else(|| panic!("no store check: {}", r.text()))
        .clone();
    assert_eq!(store["status"], "ok", "{store}");
    let detail = store["detail"].as_str().unwrap();
    assert!(detail.starts_with("PostgreSQL "), "{detail}");
    assert!(
        detail.contains(&format!("schema {} at version 7", pg_schema(&e.dir()))),
        "{detail}"
    );
}

/// A wait for the project's lock stops, as on the lock directory, when the command's own
/// deadline passes (`checkout --wait DUR`) or a signal arrives (SIGTERM to a blocked
/// `checkout --wait`), instead of waiting out `guard_timeout`: `--wait` then ends as one
/// that ran out of time.
#[test]
fn a_wait_for_the_project_lock_stops_at_the_deadline_or_a_signal() {
    let e = Env::new();
    e.ok("a", &["list"]); // the schema
    let schema = pg_schema(&e.dir());
    // Another session holds the project's lock (the id tasklock derives from the schema).
    let id = lock_sql(&["project", &schema]);
    let (mut holder, _) = hold(&e, &format!("SELECT pg_advisory_xact_lock({id})"), &id);

    // The command's deadline: `--wait 1s` runs out waiting for the lock, a refusal like
    // any other that ran out of time (exit 2), not an error after `guard_timeout` (60s).
    let r = e.run(Some("b"), &["checkout", "k", "--wait", "1s", "--json"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["checkout"], serde_json::Value::Null, "never got in: {j}");

    // A signal.
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    let child = cmd
        .arg("--dir")
        .arg(e.dir())
        .args(["checkout", "k", "--wait", "10m", "--json", "--agent", "c"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while psql(
        &e.dir(),
        &format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tasklock/{pid}' AND wait_event_type = 'Lock'"),
    )
    .trim()
        != "1"
    {
        assert!(Instant::now() < deadline, "the checkout never waited for the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["checkout"], serde_json::Value::Null, "{j}");
    // End the holding session on the server (killing psql would leave it asleep).
    psql(
        &e.dir(),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = {id}"
        ),
    );
    holder.wait().unwrap();
    // Nothing was left behind: the key is free and the next command goes in at once.
    let s = e.ok("a", &["status", "k", "--json"]).json();
    assert_eq!(s["outcome"], "free", "{s}");
}

/// The audit table is bounded like the file store's log: about `(audit_keep + 1) ×
/// audit_max_size` bytes of events, the oldest dropped first, the newest always kept.
#[test]
fn the_audit_table_keeps_its_newest_events_within_the_configured_size() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(
        e.dir().join("config.yaml"),
        "audit_max_size: 4KiB\naudit_keep: 1\n",
    )
    .unwrap();
    // 150 checkouts and releases: 300 events, far more than 8 KiB of them.
    for i in 0..150 {
        let k = format!("k{i}");
        e.ok("a", &["checkout", &k]);
        e.ok("a", &["release", &k]);
    }
    let bytes: u64 = psql(&e.dir(), "SELECT sum(octet_length(data::text)) FROM audit")
        .trim()
        .parse()
        .unwrap();
    let rows: u64 = psql(&e.dir(), "SELECT count(*) FROM audit")
        .trim()
        .parse()
        .unwrap();
    // The bound, plus at most the events between two looks (64 of about 200 bytes).
    assert!(bytes <= 8 * 1024 + 64 * 300, "{bytes} bytes in {rows} rows");
    // Each commit carried the log's running size on, event by event.
    assert_eq!(
        psql(
            &e.dir(),
            "SELECT count(*) FILTER (WHERE total - prev <> octet_length(data::text)) \
             FROM (SELECT total, data, lag(total) OVER (ORDER BY id) AS prev FROM audit) t"
        )
        .trim(),
        "0"
    );
    assert!(rows < 300, "{rows} rows: nothing was dropped");
    // The newest are there, in order; the oldest are gone.
    let out = e.ok("a", &["audit", "--limit", "0", "--json"]).stdout;
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len() as u64, rows);
    let last = events.last().unwrap();
    assert_eq!(
        (last["event"].as_str(), last["key"].as_str()),
        (Some("release"), Some("k149"))
    );
    assert!(
        !events.iter().any(|ev| ev["key"] == "k0"),
        "the oldest were dropped"
    );
}

/// A change to one key holds that key's lock (and the project's, shared): a change to
/// another key goes on beside it, one to the same key waits, and a change that spans keys
/// (a freeze) waits for it to end.
#[test]
fn a_change_to_one_key_does_not_wait_for_another_key() {
    let e = Env::new();
    e.ok("a", &["list"]); // the schema
    // Another session is in the middle of a change to `slow`.
    let (mut holder, app) = hold_key(&e, "slow");
    // Waits for a lock give up after 3 s (else 60 s).
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), "guard_timeout: 3s\n").unwrap();
    let quick: [(&str, &str); 0] = [];
    // Other keys: checked out, renewed, released; the agent beats.
    for args in [
        &["checkout", "fast", "--json"][..],
        &["renew", "fast", "--json"],
        &["heartbeat", "--json"],
        &["release", "fast", "--json"],
    ] {
        let r = e.run_env(Some("b"), args, &quick);
        assert_eq!(r.code, 0, "{args:?} waited for another key: {}", r.text());
    }
    // The same key waits (here until its time runs out).
    let r = e.run_env(Some("c"), &["checkout", "slow", "--json"], &quick);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(
        r.stderr.contains("gave up") || r.stdout.contains("gave up"),
        "{}",
        r.text()
    );
    // A change across keys waits for every change in progress.
    let r = e.run_env(Some("c"), &["freeze", "other", "--for", "1m"], &quick);
    assert_eq!(r.code, 1, "{}", r.text());
    // The change to `slow` ends (its session is ended): the rest goes on.
    end_holder(&e, &mut holder, &app);
    e.ok("c", &["freeze", "other", "--for", "1m"]);
    e.ok("c", &["checkout", "slow"]);
}

/// A claim from the backlog takes its key under that key's lock, beside changes of other
/// keys: it passes over a key another change holds (taking the next in line), and waits
/// for a change across keys.
#[test]
fn a_claim_passes_over_a_key_being_changed() {
    let e = Env::new();
    e.ok("o", &["backlog", "add", "k1", "k2", "k3"]);
    let schema = pg_schema(&e.dir());
    e.configure("guard_timeout: 3s\n");
    let project = lock_sql(&["project", &schema]);
    // Another session is in the middle of a change to `k1`, the first in line.
    let (mut holder, app) = hold_key(&e, "k1");
    let j = e.ok("a", &["checkout", "--next", "--json"]).json();
    assert_eq!(j["key"], "k2", "{j}");
    end_holder(&e, &mut holder, &app);
    let j = e.ok("b", &["checkout", "--next", "--json"]).json();
    assert_eq!(j["key"], "k1", "back in its place: {j}");
    // A change across keys holds the project: claims wait for it (here until they give up).
    let (mut holder, app) = hold(
        &e,
        &format!("SELECT pg_advisory_xact_lock({project})"),
        &project,
    );
    let r = e.run(Some("c"), &["checkout", "--next", "--json"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.text().contains("gave up"), "{}", r.text());
    end_holder(&e, &mut holder, &app);
    let j = e.ok("c", &["checkout", "--next", "--json"]).json();
    assert_eq!(j["key"], "k3", "{j}");
}

/// A claim from an exhausted backlog is answered beside changes of other keys, so the
/// many agents polling an exhausted backlog do not queue behind one another for the
/// project's lock. It needs that lock only when a claim may have lapsed (a claimer is
/// dead: a sweep), and then waits for it.
#[test]
fn an_exhausted_backlog_is_answered_beside_changes_of_other_keys() {
    let e = Env::new();
    e.ok("o", &["backlog", "add", "k1", "k2"]);
    e.configure("guard_timeout: 3s\n");
    let p = Proc(Command::new("sleep").arg("300").spawn().unwrap());
    let pid = p.0.id().to_string();
    e.ok("a", &["checkout", "--next", "--pid", &pid]);
    e.ok("b", &["checkout", "--next"]);
    // Another session is in the middle of a change to another key.
    let (mut holder, app) = hold_key(&e, "other");
    let r = e.run(Some("c"), &["checkout", "--next", "--json"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let j = r.json();
    assert_eq!(j["claimers"], serde_json::json!(["a", "b"]), "{j}");
    assert_eq!(j["claimed"], 2, "{j}");
    // a's process is gone: its claim may have lapsed, which is looked at under the
    // project's lock, so the claim waits for the other change (here until it gives up).
    drop(p);
    let r = e.run(Some("c"), &["checkout", "--next", "--json"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.text().contains("gave up"), "{}", r.text());
    end_holder(&e, &mut holder, &app);
    let j = e.ok("c", &["checkout", "--next", "--json"]).json();
    assert_eq!(j["key"], "k1", "{j}");
    assert_eq!(j["took_over"]["reason"], "agent_death", "{j}");
}

/// A heartbeat changes its agent's registry entry under the entry's own lock alone: it
/// goes on while a change across keys holds the project, and waits only for its own
/// agent. A change across keys takes an entry's lock before it changes the entry:
/// forgetting a dead agent passes over one whose entry is locked (it is beating).
#[test]
fn a_beat_takes_its_agents_lock_and_not_the_projects() {
    let mut e = Env::new();
    e.ok("b", &["heartbeat"]); // the schema, and the project's first sweep
    let schema = pg_schema(&e.dir());
    e.configure("guard_timeout: 3s\n");
    let project = lock_sql(&["project", &schema]);
    let (mut holder, app) = hold(
        &e,
        &format!("SELECT pg_advisory_xact_lock({project})"),
        &project,
    );
    let j = e.ok("b", &["heartbeat", "--json"]).json();
    assert_eq!(j["swept"], false, "{j}");
    assert_eq!(j["agent"]["heartbeats"], 2, "{j}");
    let r = e.run(Some("c"), &["checkout", "k", "--json"]);
    assert_eq!(r.code, 1, "a checkout waits for the project: {}", r.text());
    end_holder(&e, &mut holder, &app);

    // Agent `gone` beat 25 hours ago: dead, and past agent_retention (24h).
    e.at("2025-12-30T23:00:00Z");
    e.ok("gone", &["heartbeat"]);
    e.at(T0);
    let gone = lock_sql(&["key", &schema, "agent:gone"]);
    let (mut holder, app) = hold(&e, &format!("SELECT pg_advisory_xact_lock({gone})"), &gone);
    e.ok("b", &["heartbeat"]);
    let r = e.run(Some("gone"), &["heartbeat", "--json"]);
    assert_eq!(
        r.code,
        1,
        "gone's own beat waits for its lock: {}",
        r.text()
    );
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(
        j["pruned"], 0,
        "an entry being changed is not forgotten: {j}"
    );
    end_holder(&e, &mut holder, &app);
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(j["pruned"], 1, "{j}");
}

/// A psql session in the middle of a change to `key`, as a command's is: it holds the
/// project's lock shared and the key's, until [`end_holder`].
fn hold_key(e: &Env, key: &str) -> (std::process::Child, String) {
    let schema = pg_schema(&e.dir());
    let project = lock_sql(&["project", &schema]);
    let id = lock_sql(&["key", &schema, key]);
    hold(
        e,
        &format!(
            "SELECT pg_advisory_xact_lock_shared({project}); SELECT pg_advisory_xact_lock({id})"
        ),
        &id,
    )
}

/// The advisory lock id tasklock derives from `parts` (`lock_id` in the store), as SQL.
pub(crate) fn lock_sql(parts: &[&str]) -> String {
    let mut bytes = String::from("'tasklock'::bytea");
    for p in parts {
        bytes.push_str(&format!(
            " || '\\x00'::bytea || convert_to('{}', 'UTF8')",
            p.replace('\'', "''")
        ));
    }
    format!("('x' || left(encode(sha256({bytes}), 'hex'), 16))::bit(64)::bigint")
}

/// End the session of a [`hold`], and wait for its psql.
pub(crate) fn end_holder(e: &Env, holder: &mut std::process::Child, app: &str) {
    psql(
        &e.dir(),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}'"
        ),
    );
    holder.wait().expect("the holder's psql");
}

/// Another session that runs `locks` in a transaction and then sleeps, holding them;
/// returns once it holds the lock `id`, with its application name (to end it).
pub(crate) fn hold(e: &Env, locks: &str, id: &str) -> (std::process::Child, String) {
    let app = format!("holder-{}", pg_schema(&e.dir()));
    let base = std::env::var("TASKLOCK_TEST_PG_URL").unwrap();
    let holder = Command::new("psql")
        .arg(&base)
        .env("PGAPPNAME", &app)
        .args(["-X", "-q", "-c"])
        .arg(format!("BEGIN; {locks}; SELECT pg_sleep(600);"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    let deadline = Instant::now() + Duration::from_secs(30);
    while psql(
        &e.dir(),
        &format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = {id}"),
    )
    .trim()
        != "1"
    {
        assert!(Instant::now() < deadline, "psql never took the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    (holder, app)
}

/// `tasklock mcp` runs every tool call on one connection (one server session for them
/// all, where a command would connect each time), and replaces it when it was closed
/// between calls.
#[cfg(feature = "mcp")]
#[test]
fn the_mcp_server_keeps_one_connection_and_replaces_a_closed_one() {
    use std::io::{BufRead, BufReader, Write};
    if pg_session_url().is_some() {
        // Through a pooler (the suite run behind PgBouncer): server sessions are the
        // pooler's to hand out, so there is no one session to look at.
        return;
    }
    let e = Env::new();
    e.ok("a", &["list"]); // the schema
    let mut server = Command::new(env!("CARGO_BIN_EXE_tasklock"))
        .arg("--dir")
        .arg(e.dir())
        .args(["--agent", "mcp-one", "mcp"])
        .env("TASKLOCK_URL", pg_url_for(&e.dir()).unwrap())
        .env_remove("TASKLOCK_SESSION_URL")
        .env_remove("TASKLOCK_NOW")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = server.id();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut id = 0;
    let mut request = |method: &str, params: serde_json::Value| -> serde_json::Value {
        id += 1;
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "the server ended");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    let init = request(
        "initialize",
        serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "tasklock", "{init}");
    let mut call = |tool: &str, args: serde_json::Value| {
        let r = request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        );
        assert_ne!(r["result"]["isError"], true, "{tool}: {r}");
        r
    };
    // The server sessions of this process, by their name.
    let sessions = || -> Vec<String> {
        psql(
            &e.dir(),
            &format!(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'tasklock/{pid}' ORDER BY pid"
            ),
        )
        .lines()
        .map(str::to_string)
        .collect()
    };
    call("checkout", serde_json::json!({"key": "k1"}));
    let first = sessions();
    assert_eq!(first.len(), 1, "{first:?}");
    for key in ["k2", "k3"] {
        call("checkout", serde_json::json!({"key": key}));
    }
    call("list", serde_json::json!({}));
    call("release", serde_json::json!({"keys": ["k1"]}));
    assert_eq!(sessions(), first, "every call on the first connection");
    // The session is ended from outside (a server restart, an idle timeout): after a
    // moment, the next call connects again and works.
    psql(
        &e.dir(),
        &format!("SELECT pg_terminate_backend({})", first[0]),
    );
    std::thread::sleep(Duration::from_millis(1200));
    let r = call("release", serde_json::json!({"keys": ["k2"]}));
    assert!(r.to_string().contains("k2"), "{r}");
    let second = sessions();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first);
    drop(stdin);
    let _ = server.wait();
    let list = e.run(Some("observer"), &["list", "--json"]).json();
    assert_eq!(
        list["checkouts"].as_array().unwrap().len(),
        0,
        "ended with its session: {list}"
    );
}

/// The messages a command sends the server, counted by strace (`sendto` calls, each the
/// start of a round trip; the connection's start-up is one).
fn messages_sent(e: &Env, agent: &str, args: &[&str]) -> (usize, Run) {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("sendto.log");
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-etrace=sendto", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_tasklock"))
        .env("TASKLOCK_NOW", &e.now)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_SECRET")
        .stdin(Stdio::null());
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent]);
    let run = exec(cmd);
    let sent = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("sendto("))
        .count();
    (sent, run)
}

/// A fleet that starts an agent per task pays for each round trip of a claim on the
/// server, the pooler and in the client (docs/performance.md). A new agent's claim of
/// the backlog's next key is three: the connection's start-up; BEGIN with the server's
/// clock and the schema's version, the locks, the agent's registry entry, the take of
/// the next ready key and the reads ahead of it after its lock (its record, queue and
/// slots, the freezes, a fencing token and its history); and COMMIT with the entry's and
/// the record's inserts, the backlog's mark and the audit before it. Nothing asks for
/// "now" before the BEGIN's answer brings the server's clock.
#[test]
fn a_new_agents_claim_from_the_backlog_is_three_round_trips() {
    let e = Env::new();
    e.ok("observer", &["backlog", "add", "k1", "k2", "k3"]);
    // The schema is made by the first command.
    e.ok("first", &["checkout", "--next"]);
    let pid = std::process::id().to_string();
    let (sent, run) = messages_sent(
        &e,
        "fresh",
        &["checkout", "--next", "--json", "--pid", &pid],
    );
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.json()["key"], "k2", "{}", run.text());
    assert_eq!(sent, 3, "{}", run.text());
    // Claimed once, with its mark, by the agent registered in the same transaction.
    let b = e.ok("observer", &["backlog", "--json"]).json();
    assert_eq!(b["claims"][1]["claimed_by"], "fresh", "{b}");
    let a = e.ok("observer", &["agents", "--json"]).json();
    let fresh = a["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "fresh")
        .unwrap_or_else(|| panic!("{a}"));
    assert_eq!(fresh["pid"], std::process::id(), "{a}");
    // An agent that claims again: the same three.
    let (sent, run) = messages_sent(&e, "first", &["checkout", "--next", "--json"]);
    assert_eq!(run.json()["key"], "k3", "{}", run.text());
    assert_eq!(sent, 3, "{}", run.text());
}

/// `checkout KEY` and `release KEY` are three round trips too: the key's record, queue,
/// slots, the freezes and (a key with no record) a token with its history are read in
/// BEGIN's round trip, after its locks; what a release writes (the record's removal,
/// the backlog's claim let go, how it ended) goes with the COMMIT.
#[test]
fn a_checkout_and_a_release_of_a_key_are_three_round_trips_each() {
    let e = Env::new();
    e.ok("observer", &["backlog", "add", "k1"]);
    e.ok("first", &["checkout", "warm-up"]);
    e.ok("first", &["checkout", "task-1"]);
    e.ok("first", &["note", "task-1", "read the spec first"]);
    e.ok("first", &["release", "task-1"]);
    let pid = std::process::id().to_string();
    let (sent, run) = messages_sent(
        &e,
        "fresh",
        &["checkout", "task-1", "--json", "--pid", &pid],
    );
    assert_eq!(run.code, 0, "{}", run.text());
    let j = run.json();
    assert_eq!(j["outcome"], "granted", "{j}");
    // The history read ahead with the token is the one shown.
    assert!(j.to_string().contains("read the spec first"), "{j}");
    assert_eq!(sent, 3, "{}", run.text());
    let (sent, run) = messages_sent(&e, "first", &["checkout", "k1", "--json"]);
    assert_eq!(run.json()["outcome"], "granted", "{}", run.text());
    assert_eq!(sent, 3, "{}", run.text());
    for (agent, key) in [("fresh", "task-1"), ("first", "k1")] {
        let (sent, run) = messages_sent(&e, agent, &["release", key, "--json"]);
        assert_eq!(run.code, 0, "{}", run.text());
        assert_eq!(
            run.json()["results"][0]["outcome"],
            "released",
            "{}",
            run.text()
        );
        assert_eq!(sent, 3, "{}", run.text());
    }
    // What the releases put off was kept: no record, the backlog's key ready again, how
    // each ended.
    let list = e.ok("observer", &["list", "--json"]).json();
    let held: Vec<&str> = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["warm-up"], "{list}");
    let b = e.ok("observer", &["backlog", "--json"]).json();
    assert_eq!(
        (b["ready"].as_u64(), b["claimed"].as_u64()),
        (Some(1), Some(0)),
        "{b}"
    );
    assert_eq!(
        psql(
            &e.dir(),
            "SELECT count(*) FROM ended WHERE key IN ('task-1', 'k1')"
        )
        .trim(),
        "2"
    );
}

/// Where a test's claimers go instead of the suite's store: a URL (a pooler's, with the
/// schema) and its session URL.
pub type Through<'a> = Option<(&'a str, &'a str)>;

/// A claimer killed (strace's fault injection, SIGKILL) right after its main thread's
/// `nth` message to the server was sent, before it read the answer, its messages logged
/// in full to `log`; `None`: a claimer left to finish. The connection's start-up is the
/// first message; only the main thread is traced (no `-f`), which sends them all.
fn claimer(
    e: &Env,
    through: Through,
    agent: &str,
    nth: Option<usize>,
    log: &Path,
) -> std::process::Child {
    let mut cmd = Command::new("strace");
    cmd.args(["-qq", "-s", "100000", "-etrace=sendto", "-o"])
        .arg(log);
    if let Some(n) = nth {
        cmd.arg(format!("-einject=sendto:signal=KILL:when={n}"));
    }
    cmd.arg(env!("CARGO_BIN_EXE_tasklock"))
        .env("TASKLOCK_NOW", &e.now)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    use_store(&mut cmd, &e.dir());
    if let Some((url, session)) = through {
        cmd.env("TASKLOCK_URL", url)
            .env("TASKLOCK_SESSION_URL", session);
    }
    let pid = std::process::id().to_string();
    cmd.arg("--dir").arg(e.dir()).args([
        "checkout", "--next", "--json", "--pid", &pid, "--agent", agent,
    ]);
    cmd.spawn().unwrap()
}

/// How many advisory locks of this project (its own, its keys', its agents') some
/// server session holds.
fn project_locks_held(e: &Env, keys: &[String], agents: &[String]) -> usize {
    let schema = pg_schema(&e.dir());
    let mut names: Vec<Vec<String>> = vec![vec!["project".into(), schema.clone()]];
    for k in keys {
        names.push(vec!["key".into(), schema.clone(), k.clone()]);
    }
    for a in agents {
        names.push(vec!["key".into(), schema.clone(), format!("agent:{a}")]);
    }
    // A lock's id: the first 8 bytes of the SHA-256 of `tasklock`, then each part of its
    // name after a zero byte (the store's `lock_id`).
    let ids: Vec<String> = names
        .iter()
        .map(|parts| {
            let bytes: Vec<String> = parts
                .iter()
                .map(|p| format!("'\\x00'::bytea || convert_to({}, 'UTF8')", sql_text(p)))
                .collect();
            format!(
                "('x' || encode(substring(sha256(convert_to('tasklock', 'UTF8') || {}) \
                 FROM 1 FOR 8), 'hex'))::bit(64)::bigint",
                bytes.join(" || ")
            )
        })
        .collect();
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
         AND ((classid::bigint << 32) | objid::bigint) IN ({})",
        ids.join(", ")
    );
    psql(&e.dir(), &sql).trim().parse().unwrap()
}

/// Claimers killed between sending their claim and reading its answer (and others
/// killed after sending their COMMIT) race claimers left to finish, over one backlog:
/// every key ends held once or free, the backlog's claims are the records' holders, no
/// advisory lock of the project outlives its claimer, and every key left ready is
/// claimed by the next claimers. The claim of a key is one message (BEGIN, its locks,
/// the take and the reads ahead), so a kill there leaves a transaction the server rolls
/// back when the connection ends, with its locks.
#[test]
fn claimers_killed_before_reading_their_claims_answer_leave_every_key_held_once_or_free() {
    killed_claimers_race(&Env::new(), None);
}

/// See [`claimers_killed_before_reading_their_claims_answer_leave_every_key_held_once_or_free`]:
/// the race, its claimers going `through` another URL when given.
pub fn killed_claimers_race(e: &Env, through: Through) {
    let keys: Vec<String> = (1..=16).map(|i| format!("k{i:02}")).collect();
    let mut add = vec!["backlog", "add"];
    add.extend(keys.iter().map(String::as_str));
    e.ok("observer", &add);
    // The schema exists before the race (a first command makes it).
    e.ok("observer", &["list"]);
    let t = tempfile::tempdir().unwrap();
    // Message 1 is the connection's start-up, 2 the claim (with the clock's read), 3 the
    // COMMIT.
    let plan: Vec<(String, Option<usize>)> = (0..18)
        .map(|i| {
            let nth = match i % 3 {
                0 => Some(2),
                1 => None,
                _ => Some(3),
            };
            (format!("racer-{i}"), nth)
        })
        .collect();
    let children: Vec<_> = plan
        .iter()
        .map(|(agent, nth)| {
            let log = t.path().join(agent);
            (claimer(e, through, agent, *nth, &log), log)
        })
        .collect();
    let mut granted = std::collections::BTreeMap::new();
    for ((agent, nth), (child, log)) in plan.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let Some(n) = nth else {
            assert_eq!(out.status.code(), Some(0), "{agent}: {stderr}");
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(j["outcome"], "granted", "{agent}: {j}");
            granted.insert(j["key"].as_str().unwrap().to_string(), agent.clone());
            continue;
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(9), "{agent}: {stderr}");
        if *n == 2 {
            // Killed with the claim sent: BEGIN, the locks, the take and the reads.
            let sent = std::fs::read_to_string(&log).unwrap();
            let last = sent.lines().rfind(|l| l.contains("sendto(")).unwrap();
            assert!(
                last.contains("BEGIN") && last.contains("take_ahead"),
                "{agent}: killed at {last}"
            );
        }
    }
    // Every key held once or free: the records (one per key), the backlog's claims
    // and what the finished claimers were told agree.
    let list = e.ok("observer", &["list", "--json"]).json();
    let mut held = std::collections::BTreeMap::new();
    for c in list["checkouts"].as_array().unwrap() {
        let key = c["key"].as_str().unwrap().to_string();
        let agent = c["agent"]["id"].as_str().unwrap().to_string();
        assert!(
            held.insert(key, agent).is_none(),
            "a key held twice: {list}"
        );
    }
    for (key, agent) in &granted {
        assert_eq!(held.get(key), Some(agent), "{key}: {list}");
    }
    let b = e.ok("observer", &["backlog", "--json"]).json();
    let claims: std::collections::BTreeMap<String, String> = b["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let key = c["key"].as_str().unwrap().to_string();
            (key, c["claimed_by"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(claims, held, "{b}");
    let ready = b["ready"].as_u64().unwrap() as usize;
    assert_eq!(ready + held.len(), keys.len(), "{b}");
    // No lock of the project is left once the server has ended the killed sessions'
    // transactions (it finds their connections closed).
    let agents: Vec<String> = plan.iter().map(|(a, _)| a.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = project_locks_held(e, &keys, &agents);
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} advisory locks still held");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The keys left ready are each claimed, once, by the next claimers.
    let mut next = std::collections::BTreeSet::new();
    for i in 0..ready {
        let j = e
            .ok(&format!("next-{i}"), &["checkout", "--next", "--json"])
            .json();
        assert_eq!(j["outcome"], "granted", "{j}");
        let key = j["key"].as_str().unwrap().to_string();
        assert!(!held.contains_key(&key) && next.insert(key), "{j}");
    }
    let b = e.ok("observer", &["backlog", "--json"]).json();
    assert_eq!(b["ready"], 0, "{b}");
}

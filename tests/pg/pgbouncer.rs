//! Behind PgBouncer in transaction mode (docs/postgres.md, "Behind a connection pooler"):
//! `TASKLOCK_TEST_PGBOUNCER_URL` names one in front of `TASKLOCK_TEST_PG_URL`'s server
//! (`.ci/run` starts one). Commands go through it as `TASKLOCK_URL`, with the server
//! itself as `TASKLOCK_SESSION_URL` unless a test says otherwise. Without it these tests
//! say so and pass, except under CI, which must run them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::pg_only::{end_holder, hold, lock_sql};

fn pooler() -> Option<String> {
    match std::env::var("TASKLOCK_TEST_PGBOUNCER_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "TASKLOCK_TEST_PGBOUNCER_URL is not set: .ci/run starts PgBouncer for these tests"
            );
            eprintln!("TASKLOCK_TEST_PGBOUNCER_URL is not set: tests behind PgBouncer skipped");
            None
        }
    }
}

/// The server itself (the session URL): the suites' own session URL when they run
/// through a pooler, else their URL.
fn direct() -> String {
    pg_session_url()
        .or_else(|| std::env::var("TASKLOCK_TEST_PG_URL").ok())
        .expect("TASKLOCK_TEST_PG_URL")
}

/// `tasklock ARGS --agent AGENT` on `e`'s schema through the pooler, with the server as
/// its session URL when `session`.
fn cmd(e: &Env, pooler: &str, session: bool, agent: &str, args: &[&str]) -> Command {
    let mut cmd = base_cmd(&e.now);
    let sep = if pooler.contains('?') { '&' } else { '?' };
    cmd.env(
        "TASKLOCK_URL",
        format!("{pooler}{sep}schema={}", pg_schema(&e.dir())),
    );
    if session {
        cmd.env("TASKLOCK_SESSION_URL", direct());
    }
    cmd.arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent]);
    cmd
}

fn run(e: &Env, pooler: &str, agent: &str, args: &[&str]) -> Run {
    exec(cmd(e, pooler, true, agent, args))
}

fn ok(e: &Env, pooler: &str, agent: &str, args: &[&str]) -> Run {
    let r = run(e, pooler, agent, args);
    assert_eq!(r.code, 0, "{args:?} as {agent}: {}", r.text());
    r
}

/// A refusal (exit 2 and up), not an error (1).
fn refused(e: &Env, pooler: &str, agent: &str, args: &[&str]) -> Run {
    let r = run(e, pooler, agent, args);
    assert!(r.code >= 2, "{args:?} as {agent}: {}", r.text());
    r
}

/// Every kind of command runs through the pooler: nothing they send depends on a session
/// (no `search_path` startup option, no named prepared statement, every change in one
/// transaction). What is written is what the server has.
#[test]
fn the_commands_run_through_pgbouncer_in_transaction_mode() {
    let Some(p) = pooler() else { return };
    let e = Env::new();
    let p = p.as_str();
    let got = ok(
        &e,
        p,
        "a",
        &["checkout", "k", "--reason", "fixing", "--json"],
    )
    .json();
    let token = got["checkout"]["token"]
        .as_u64()
        .expect("a token")
        .to_string();
    refused(&e, p, "b", &["checkout", "k"]);
    ok(&e, p, "a", &["status", "k"]);
    ok(&e, p, "a", &["list"]);
    ok(&e, p, "a", &["renew", "k"]);
    ok(&e, p, "a", &["note", "k", "half done"]);
    ok(&e, p, "a", &["verify", "k", "--token", &token]);
    ok(&e, p, "a", &["heartbeat"]);
    ok(&e, p, "b", &["why", "k"]);
    ok(&e, p, "a", &["freeze", "deploy", "--for", "1m"]);
    refused(&e, p, "b", &["checkout", "deploy"]);
    ok(&e, p, "a", &["unfreeze", "deploy"]);
    let any = ok(&e, p, "b", &["checkout", "--any", "k", "k2", "--json"]).json();
    assert_eq!(any["key"], "k2", "{any}");
    // Joining the queue and giving up on it.
    refused(&e, p, "c", &["checkout", "k", "--wait", "1s"]);
    ok(&e, p, "a", &["release", "k"]);
    ok(&e, p, "b", &["release", "k2"]);
    // The backlog: added, claimed in order, given back and finished.
    ok(&e, p, "a", &["backlog", "add", "t1", "t2"]);
    let next = ok(&e, p, "b", &["checkout", "--next", "--json"]).json();
    assert_eq!(next["key"], "t1", "{next}");
    ok(&e, p, "b", &["release", "t1", "--done"]);
    let next = ok(&e, p, "c", &["checkout", "--next", "--json"]).json();
    assert_eq!(next["key"], "t2", "{next}");
    ok(&e, p, "c", &["release", "t2", "--done"]);
    assert_eq!(run(&e, p, "c", &["checkout", "--next"]).code, 3);
    ok(&e, p, "a", &["agents"]);
    let log = ok(&e, p, "a", &["audit", "--json"]);
    assert!(log.stdout.contains("\"release\""), "{}", log.text());
    // As the server sees it.
    assert_eq!(psql(&e.dir(), "SELECT count(*) FROM records").trim(), "0");
    assert_eq!(
        psql(&e.dir(), "SELECT count(*) FROM ended WHERE key = 'k'").trim(),
        "1"
    );
}

/// A wait for the project's lock that is stopped (the command's deadline, a signal)
/// cancels its statement by `pg_cancel_backend`: the protocol's cancel request, as the
/// `postgres` crate sends it, made PgBouncer 1.18 exit ("bad client state").
#[test]
fn a_stopped_wait_for_the_project_lock_leaves_pgbouncer_running() {
    let Some(p) = pooler() else { return };
    let e = Env::new();
    ok(&e, &p, "a", &["list"]); // the schema
    let schema = pg_schema(&e.dir());
    let id = lock_sql(&["project", &schema]);
    let (mut holder, app) = hold(&e, &format!("SELECT pg_advisory_xact_lock({id})"), &id);

    // The deadline, with no session URL: the cancel goes through the pooler too.
    let r = exec(cmd(
        &e,
        &p,
        false,
        "b",
        &["checkout", "k", "--wait", "1s", "--json"],
    ));
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(
        r.json()["checkout"],
        serde_json::Value::Null,
        "{}",
        r.text()
    );

    // A signal.
    let mut c = cmd(
        &e,
        &p,
        true,
        "c",
        &["checkout", "k", "--wait", "10m", "--json"],
    );
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while psql(
        &e.dir(),
        // Behind a pooler every command's sessions are named `tasklock`: found by the tag
        // its wait for a lock carries.
        &format!("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '/* tasklock-wait-{pid}-%' AND application_name = 'tasklock' AND wait_event_type = 'Lock'"),
    )
    .trim()
        != "1"
    {
        assert!(Instant::now() < deadline, "the checkout never waited for the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    end_holder(&e, &mut holder, &app);
    // The pooler is still there, and nothing was left behind.
    let s = ok(&e, &p, "a", &["status", "k", "--json"]).json();
    assert_eq!(s["outcome"], "free", "{s}");
}

/// `heartbeat --watch` holds its agent's watcher lock in a session of the session URL:
/// a second watcher leaves the job to the first, and the lock ends with the first
/// watcher's process (which a lock left in a pooled server session would not).
#[test]
fn a_watcher_through_pgbouncer_holds_its_agent_until_it_dies() {
    let Some(p) = pooler() else { return };
    let e = Env::new();
    let agent = AgentProcess::start();
    let watch = |json: bool| {
        let mut args = vec!["heartbeat", "--watch", "--interval", "1s", "--pid"];
        let pid = agent.pid();
        args.push(&pid);
        if json {
            args.push("--json");
        }
        let mut c = cmd(&e, &p, true, "w", &args);
        c.env_remove("TASKLOCK_NOW");
        c
    };
    let mut first = watch(false)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !Stored::Agent("w").exists(&e.dir()) {
        assert!(Instant::now() < deadline, "the watcher never beat");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A second watcher ends at once (one that ran beside the first would not).
    let mut second = watch(true)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while second.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = second.kill();
            panic!("a second watcher of the agent ran beside the first");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = second.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("\"already_watched\""), "{out:?}");

    // The first watcher dies without letting go: its session ends, and so does the lock.
    first.kill().unwrap();
    first.wait().unwrap();
    let id = lock_sql(&["watcher", &pg_schema(&e.dir()), "w"]);
    let held = || {
        psql(
            &e.dir(),
            &format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = {id}"),
        )
        .trim()
            != "0"
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while held() {
        assert!(
            Instant::now() < deadline,
            "the dead watcher's lock is still held by a server session"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut next = loop {
        let mut c = watch(true);
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let mut child = child;
        match child.try_wait().unwrap() {
            // Still watching: it has the lock.
            None => break child,
            Some(_) => {
                let out = child.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                assert!(text.contains("already_watched"), "{text}");
                assert!(
                    Instant::now() < deadline,
                    "the dead watcher's lock was kept"
                );
            }
        }
    };
    let _ = next.kill();
    let _ = next.wait();
}

/// Claimers killed between sending their claim and reading its answer, through the
/// pooler: PgBouncer ends the server session's transaction when its client is gone (it
/// does not hand the session on with the claim's locks), so every key ends held once or
/// free and no lock is left (`pg_only::killed_claimers_race`).
#[test]
fn claimers_killed_mid_claim_through_pgbouncer_leave_every_key_held_once_or_free() {
    let Some(pooler) = pooler() else {
        return;
    };
    let e = Env::new();
    let sep = if pooler.contains('?') { '&' } else { '?' };
    let url = format!("{pooler}{sep}schema={}", pg_schema(&e.dir()));
    crate::pg_only::killed_claimers_race(&e, Some((&url, &direct())));
}

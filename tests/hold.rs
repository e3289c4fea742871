//! How long an agent keeps a key: a live process is never dead by silence, automatic
//! renewals stop at `max_hold`, and a holder's re-checkout extends without a new token.
//! All through the real binary with the clock pinned.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;

/// `2026-01-01T00:00:00Z` plus `mins` minutes (under 24h).
fn at(mins: u32) -> String {
    format!("2026-01-01T{:02}:{:02}:00Z", mins / 60, mins % 60)
}

fn agent_row(e: &Env, id: &str) -> Value {
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no agent {id} in {j}"))
        .clone()
}

fn status(e: &Env, key: &str) -> Value {
    e.run(Some("observer"), &["status", key, "--json"]).json()
}

fn expires(e: &Env, key: &str) -> Value {
    status(e, key)["checkout"]["expires_at"].clone()
}

fn events(e: &Env, event: &str) -> Vec<Value> {
    audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == event)
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------- liveness

#[test]
fn a_silent_agent_whose_process_runs_is_stalled_never_dead() {
    let mut e = Env::new();
    let a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);

    // An hour of silence, far past dead_after (10m), lease still running.
    e.at(T1H);
    let r = e.run(Some("agent-b"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-a");
    assert_eq!(j["took_over"], Value::Null);

    let row = agent_row(&e, "agent-a");
    assert_eq!(row["state"], "stalled", "{row}");
    assert_eq!(row["cause"], Value::Null, "{row}");
    assert_eq!(row["pid"].to_string(), a.pid(), "{row}");
    assert_eq!(strings(&row["checkouts"]), ["task-1"]);
    assert!(events(&e, "auto_release").is_empty());
}

#[test]
fn a_silent_agent_without_a_process_to_check_dies_of_silence() {
    let mut e = Env::new();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);

    e.at(T1H);
    let r = e.run(Some("agent-b"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["took_over"]["agent"]["id"], "agent-a");
    assert_eq!(j["took_over"]["reason"], "agent_death");
    assert_eq!(j["took_over"]["cause"], "silent");
    assert_eq!(j["previous"]["cause"], "silent");

    let auto = events(&e, "auto_release");
    assert_eq!(auto.len(), 1, "{auto:?}");
    assert_eq!(auto[0]["agent"], "agent-a");
    assert_eq!(auto[0]["reason"], "agent_death");
    assert_eq!(auto[0]["by"], "agent-b");
    let row = agent_row(&e, "agent-a");
    assert_eq!(row["state"], "dead", "{row}");
    assert_eq!(row["cause"], "silent", "{row}");
}

#[test]
fn a_stalled_agent_whose_process_is_killed_loses_its_key_at_once() {
    let mut e = Env::new();
    let mut a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);
    e.at(T1H);
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 2);

    a.kill();
    // Same clock: only the death of the process changed.
    let r = e.run(Some("agent-b"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["took_over"]["reason"], "agent_death");
    assert_eq!(j["took_over"]["cause"], "process_gone");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    let row = agent_row(&e, "agent-a");
    assert_eq!(row["state"], "dead", "{row}");
    assert_eq!(row["cause"], "process_gone", "{row}");
}

#[test]
fn a_run_process_alive_keeps_its_key_through_silence() {
    // The record's own pid (as `run` records it) counts like a registered one: here the
    // agent registered no pid, but the record names a live process.
    let mut e = Env::new();
    let a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);
    let path = record_path(&e.dir(), "task-1");
    let mut rec: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let start = tasklock::os::start_time(a.pid().parse().unwrap()).expect("its start time");
    rec["agent"]["pid"] = a.pid().parse::<u64>().unwrap().into();
    rec["agent"]["pid_start"] = start.into();
    std::fs::write(&path, serde_json::to_string_pretty(&rec).unwrap()).unwrap();

    e.at(T1H);
    let r = e.run(Some("agent-b"), &["checkout", "task-1"]);
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(status(&e, "task-1")["checkout"]["agent"]["id"], "agent-a");
}

// ---------------------------------------------------------------- max_hold

fn max_hold_env() -> Env {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), "max_hold: 1h\n").unwrap();
    e
}

fn inbox_types(e: &Env, agent: &str) -> Vec<(String, String)> {
    e.ok(agent, &["inbox", "--peek", "--json"]).json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn beats_renew_up_to_max_hold_then_the_lease_runs_out() {
    let mut e = max_hold_env();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "30m"]);

    // +20m: 10m left of 30m, so renewed by its length, to +50m (under the cap).
    e.at(&at(20));
    let j = e.ok("agent-a", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), ["task-1"]);
    assert_eq!(expires(&e, "task-1"), at(50));
    assert!(inbox_types(&e, "agent-a").is_empty());

    // +40m: due again; +70m would pass acquired_at + max_hold, so capped at +60m, and the
    // holder is told, once.
    e.at(&at(40));
    let j = e.ok("agent-a", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), ["task-1"]);
    let c = &status(&e, "task-1")["checkout"];
    assert_eq!(c["expires_at"], at(60));
    assert_eq!(c["renewed_at"], at(40));
    assert_eq!(c["acquired_at"], at(0));
    assert_eq!(c["token"], 1);
    assert_eq!(
        inbox_types(&e, "agent-a"),
        [("max_hold".to_string(), "task-1".to_string())]
    );
    let msg = &e.ok("agent-a", &["inbox", "--peek", "--json"]).json()["messages"][0];
    let body = msg["body"].as_str().unwrap();
    assert!(body.contains("max_hold (1h)"), "{body}");
    assert!(body.contains(&at(60)), "{body}");
    assert!(body.contains("tasklock renew task-1"), "{body}");
    assert_eq!(msg["from"], Value::Null);
    let notify = events(&e, "notify");
    assert_eq!(notify.len(), 1, "{notify:?}");
    assert_eq!(notify[0]["agent"], "agent-a");
    assert_eq!(notify[0]["key"], "task-1");
    assert_eq!(notify[0]["detail"], "max_hold");
    let renews = events(&e, "renew");
    assert_eq!(renews.len(), 2, "{renews:?}");

    // +55m: due, but at the cap: not renewed, no second message.
    e.at(&at(55));
    let j = e.ok("agent-a", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), Vec::<String>::new());
    assert_eq!(strings(&j["agent"]["checkouts"]), ["task-1"]);
    assert_eq!(expires(&e, "task-1"), at(60));
    assert_eq!(inbox_types(&e, "agent-a").len(), 1);
    assert_eq!(events(&e, "renew").len(), 2);
    assert_eq!(events(&e, "notify").len(), 1);

    // Still the holder's until the lease runs out.
    e.at(&at(59));
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 2);

    // +61m: the lease ran out; another agent takes the key over as usual.
    e.at(&at(61));
    let r = e.run(Some("agent-b"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["took_over"]["agent"]["id"], "agent-a");
    assert_eq!(j["took_over"]["reason"], "timeout");
    assert_eq!(j["took_over"]["expires_at"], at(60));
    assert_eq!(j["checkout"]["token"], 2);
}

#[test]
fn an_explicit_renew_is_not_capped_by_max_hold() {
    let mut e = max_hold_env();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "30m"]);
    e.at(&at(20));
    e.ok("agent-a", &["heartbeat"]);
    e.at(&at(40));
    e.ok("agent-a", &["heartbeat"]);
    assert_eq!(expires(&e, "task-1"), at(60));

    // The holder, told by its inbox, renews by hand: past acquired_at + max_hold.
    e.at(&at(50));
    let j = e.ok("agent-a", &["renew", "task-1", "--json"]).json();
    assert_eq!(j["results"][0]["outcome"], "renewed");
    // Extended by its own length (60m - 40m), from now.
    assert_eq!(j["results"][0]["checkout"]["expires_at"], at(70));
    let j = e
        .ok("agent-a", &["renew", "task-1", "--timeout", "2h", "--json"])
        .json();
    assert_eq!(j["results"][0]["checkout"]["expires_at"], at(170));
    assert_eq!(expires(&e, "task-1"), at(170));

    // Later beats still make no automatic renewal past the cap.
    e.at(&at(150));
    let j = e.ok("agent-a", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), Vec::<String>::new());
    assert_eq!(expires(&e, "task-1"), at(170));
}

#[test]
fn a_beat_renews_its_subagents_leases_but_a_subagents_beat_renews_only_its_own() {
    let mut e = Env::new();
    e.ok("s", &["checkout", "own", "--timeout", "30m"]);
    e.ok("s/sub1", &["checkout", "sub1-task", "--timeout", "30m"]);
    e.ok("s/sub2", &["checkout", "sub2-task", "--timeout", "30m"]);
    // Not a subagent of `s`: only the prefix matches.
    e.ok("sx/sub", &["checkout", "other", "--timeout", "30m"]);

    // +20m: every lease is due. The subagent's beat renews its own alone.
    e.at(&at(20));
    let j = e.ok("s/sub1", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), ["sub1-task"]);
    assert_eq!(expires(&e, "sub1-task"), at(50));
    assert_eq!(
        expires(&e, "own"),
        at(30),
        "the session's is not the subagent's"
    );
    assert_eq!(expires(&e, "sub2-task"), at(30), "nor its sibling's");

    // The session's beat renews its own and its subagents'; they stay theirs.
    e.at(&at(21));
    let j = e.ok("s", &["heartbeat", "--json"]).json();
    let mut renewed = strings(&j["renewed"]);
    renewed.sort();
    assert_eq!(renewed, ["own", "sub2-task"], "sub1-task is not due yet");
    assert_eq!(
        strings(&j["agent"]["checkouts"]),
        ["own"],
        "a subagent's checkout is not the session's"
    );
    assert_eq!(expires(&e, "own"), at(51));
    assert_eq!(expires(&e, "sub2-task"), at(51));
    assert_eq!(status(&e, "sub2-task")["checkout"]["agent"]["id"], "s/sub2");
    assert_eq!(
        expires(&e, "other"),
        at(30),
        "sx/sub is not a subagent of s"
    );

    // +36m: the subagent's lease is due (14m of 30m left), the session's not yet.
    e.at(&at(36));
    let j = e.ok("s", &["heartbeat", "--json"]).json();
    assert_eq!(strings(&j["renewed"]), ["sub1-task"]);
    assert_eq!(expires(&e, "sub1-task"), at(66));
    assert_eq!(expires(&e, "own"), at(51));
    let renews = events(&e, "renew");
    let sub1: Vec<_> = renews.iter().filter(|v| v["key"] == "sub1-task").collect();
    assert_eq!(sub1.len(), 2);
    assert!(
        sub1.iter().all(|v| v["agent"] == "s/sub1"),
        "audited as the holder's renewal: {sub1:?}"
    );
}

// ---------------------------------------------------------------- re-checkout by the holder

#[test]
fn a_holders_re_checkout_is_already_held_with_the_same_token() {
    let mut e = Env::new();
    let j = e
        .ok(
            "agent-a",
            &[
                "checkout",
                "task-1",
                "--timeout",
                "2h",
                "--reason",
                "first",
                "--json",
            ],
        )
        .json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["checkout"]["token"], 1);

    // Without --timeout: extended by its own length (2h) from now, not the 30m default.
    e.at(T5M);
    let r = e.run(Some("agent-a"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["command"], "checkout");
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["token"], 1);
    assert_eq!(j["checkout"]["acquired_at"], at(0));
    assert_eq!(j["checkout"]["renewed_at"], at(5));
    assert_eq!(j["checkout"]["expires_at"], at(125));
    assert_eq!(j["checkout"]["reason"], "first", "kept without --reason");
    assert_eq!(j["took_over"], Value::Null);
    assert_eq!(j["previous"], Value::Null);

    // With --timeout: the lease ends DUR from now when that is later...
    e.at(T1H);
    let j = e
        .ok(
            "agent-a",
            &["checkout", "task-1", "--timeout", "3h", "--json"],
        )
        .json();
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["token"], 1);
    assert_eq!(j["checkout"]["expires_at"], at(240));
    // ... and a shorter one never shortens it (`renew --timeout` can).
    let j = e
        .ok(
            "agent-a",
            &["checkout", "task-1", "--timeout", "10m", "--json"],
        )
        .json();
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["expires_at"], at(240));
    assert_eq!(expires(&e, "task-1"), at(240));

    // The markdown says it was no new checkout.
    e.at(&at(65));
    let r = e.run(Some("agent-a"), &["checkout", "task-1"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let first = r.stdout.lines().next().unwrap();
    assert_eq!(
        first,
        "Already yours: you have held `task-1` since 2026-01-01T00:00:00Z (1h5m ago) under \
         token 1; this was not a new checkout. Lease extended to 2026-01-01T04:05:00Z (in 3h)."
    );

    // Audited as renewals of the one checkout; no new token was handed out.
    let kinds: Vec<String> = audit(&e.dir())
        .iter()
        .map(|v| v["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["acquire", "renew", "renew", "renew", "renew"]);
    let j = e.ok("agent-b", &["checkout", "task-2", "--json"]).json();
    assert_eq!(j["checkout"]["token"], 2);
}

#[test]
fn a_re_checkout_without_timeout_never_shortens_the_lease() {
    // The clock stepped back between two checkouts by the holder: now plus the lease's
    // length ends before the lease does, and the later end is kept.
    let mut e = Env::new();
    e.at(&at(30));
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "1h"]);
    e.at(&at(10));
    let j = e.ok("agent-a", &["checkout", "task-1", "--json"]).json();
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["expires_at"], at(90));
    assert_eq!(expires(&e, "task-1"), at(90));
}

#[test]
fn a_holder_whose_lease_ran_out_gets_a_new_checkout_not_already_held() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "5m"]);
    e.at(&at(6));
    let j = e.ok("agent-a", &["checkout", "task-1", "--json"]).json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["checkout"]["token"], 2, "a lost lease is never revived");
    assert_eq!(j["took_over"]["reason"], "timeout");
}

// ---------------------------------------------------------------- detached watcher

#[test]
fn a_detached_watcher_whose_process_died_before_it_started_releases_at_once() {
    // `heartbeat --watch --detach` checks the pid, beats, and starts the watcher as
    // `heartbeat --watch --after-beat`; the process can die in between.
    let e = Env::new();
    let mut a = AgentProcess::start();
    let pid = a.pid();
    e.ok("agent-a", &["heartbeat", "--pid", &pid]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);
    e.ok("agent-a", &["checkout", "task-2", "--timeout", "2h"]);
    e.ok("agent-b", &["checkout", "task-3", "--timeout", "2h"]);
    a.kill();

    let r = e.run(
        Some("agent-a"),
        &[
            "heartbeat",
            "--watch",
            "--pid",
            &pid,
            "--interval",
            "1s",
            "--after-beat",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "process_exited");
    assert_eq!(j["beats"], 0);
    assert_eq!(strings(&j["released"]), ["task-1", "task-2"]);
    assert_eq!(status(&e, "task-1")["outcome"], "free");
    assert_eq!(status(&e, "task-3")["checkout"]["agent"]["id"], "agent-b");
    let auto = events(&e, "auto_release");
    assert_eq!(auto.len(), 2, "{auto:?}");
    assert!(
        auto.iter().all(|v| v["reason"] == "agent_death"
            && v["agent"] == "agent-a"
            && v.get("by").is_none())
    );
    let reg: Value =
        serde_json::from_str(&std::fs::read_to_string(e.dir().join("agents/agent-a")).unwrap())
            .unwrap();
    assert_eq!(reg["ended_reason"], "process_gone");

    // Asked for by hand, a pid that is no process is still a usage error.
    let r = e.run(
        Some("agent-a"),
        &["heartbeat", "--watch", "--pid", &pid, "--interval", "1s"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
}

//! Death detection, heartbeats, agents and notes through the real binary.

#[macro_use]
mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

fn holder(e: &Env, key: &str) -> Value {
    e.run(Some("observer"), &["status", key, "--json"]).json()["checkout"]["agent"]["id"].clone()
}

fn auto_releases(e: &Env) -> Vec<Value> {
    audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == "auto_release")
        .collect()
}

macro_rules! snap_pid {
    ($env:expr, $name:expr, $run:expr, $pid:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(&format!(r"\bpid {}\b", $pid), "pid [PID]");
        settings.bind(|| snap!($env, $name, $run));
    }};
}

#[test]
fn killed_agent_process_frees_its_checkouts_at_once() {
    let e = Env::new();
    let mut a = AgentProcess::start();
    let r = e.ok(
        "agent-a",
        &[
            "heartbeat",
            "--pid",
            &a.pid(),
            "--status",
            "refactoring",
            "--name",
            "builder",
        ],
    );
    snap_pid!(e, "heartbeat_first", r, a.pid());
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);
    e.ok("agent-a", &["checkout", "task-2", "--timeout", "2h"]);
    e.ok("agent-a", &["note", "task-1", "parser done; lexer next"]);
    assert_eq!(
        e.run(Some("agent-b"), &["checkout", "task-1"]).code,
        2,
        "alive: held"
    );
    let j = e.run(None, &["status", "task-1", "--json"]).json();
    assert_eq!(
        j["checkout"]["agent"]["pid"].as_u64().unwrap().to_string(),
        a.pid(),
        "record carries the agent pid"
    );

    a.kill();
    // Same clock: no lease has run out; only the death frees the key.
    let r = e.run(Some("agent-b"), &["checkout", "task-1"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(e, "checkout_took_over_dead_agent", r);
    let j = e
        .run(Some("agent-b"), &["status", "task-1", "--json"])
        .json();
    assert_eq!(j["checkout"]["agent"]["id"], "agent-b");
    let auto = auto_releases(&e);
    assert_eq!(auto.len(), 1);
    assert_eq!(auto[0]["reason"], "agent_death");
    assert_eq!(auto[0]["agent"], "agent-a");
    // The other checkout is reaped by whichever command meets it: here `list`.
    let j = e.run(None, &["list", "--json"]).json();
    let keys: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["task-1"]);
    assert_eq!(auto_releases(&e).len(), 2);
}

#[test]
fn reused_pid_counts_as_dead() {
    let e = Env::new();
    let a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    e.ok("agent-a", &["checkout", "task-1"]);
    // Same pid, still running, but the recorded start time is another process's.
    for stored in [Stored::Agent("agent-a"), Stored::Record("task-1")] {
        stored.edit(&e.dir(), |v| {
            let slot = if v.get("agent").is_some() {
                &mut v["agent"]
            } else {
                v
            };
            let start = slot["pid_start"].as_u64().expect("start time recorded");
            slot["pid_start"] = (start + 1).into();
        });
    }
    let j = e.run(None, &["agents", "--json"]).json();
    let row = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "agent-a")
        .unwrap()
        .clone();
    assert_eq!(row["state"], "dead");
    assert_eq!(row["cause"], "pid_reused");
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 0);
    assert_eq!(auto_releases(&e)[0]["reason"], "agent_death");
}

#[test]
fn live_process_on_another_boot_is_not_judged_by_pid() {
    let e = Env::new();
    let a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    e.ok("agent-a", &["checkout", "task-1"]);
    drop(a);
    // Pretend the record came from another boot: the process check must not apply.
    for stored in [Stored::Agent("agent-a"), Stored::Record("task-1")] {
        stored.edit(&e.dir(), |v| {
            fn another_boot(v: &mut Value) -> usize {
                match v {
                    Value::Object(m) => m
                        .iter_mut()
                        .map(|(k, v)| {
                            if k == "boot_id" && v.is_string() {
                                *v = "another-boot".into();
                                1
                            } else {
                                another_boot(v)
                            }
                        })
                        .sum(),
                    _ => 0,
                }
            }
            assert_eq!(another_boot(v), 1, "one boot id in {v}");
        });
    }
    assert_eq!(
        e.run(Some("agent-b"), &["checkout", "task-1"]).code,
        2,
        "judged by heartbeats and lease only"
    );
}

#[test]
fn heartbeat_silence_stalls_then_kills() {
    let mut e = Env::new();
    e.ok("agent-a", &["heartbeat", "--name", "quiet"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "2h"]);
    e.at("2026-01-01T00:04:00Z");
    let r = e.run(None, &["agents"]);
    snap!(e, "agents_stalled", r);
    assert_eq!(
        e.run(None, &["agents", "--json"]).json()["agents"][0]["state"],
        "stalled"
    );
    assert_eq!(
        e.run(Some("agent-b"), &["checkout", "task-1"]).code,
        2,
        "stalled keeps its checkout"
    );
    e.at("2026-01-01T00:10:00Z");
    let r = e.run(None, &["agents"]);
    assert_eq!(r.code, 0);
    snap!(e, "agents_dead_released", r);
    let j = e.run(None, &["agents", "--json"]).json();
    assert_eq!(j["agents"][0]["state"], "dead");
    assert_eq!(j["agents"][0]["cause"], "silent");
    assert_eq!(j["agents"][0]["checkouts"], serde_json::json!([]));
    let auto = auto_releases(&e);
    assert_eq!(auto.len(), 1);
    assert_eq!(auto[0]["reason"], "agent_death");
    // The silent agent's renew afterwards fails: the checkout is gone, never revived.
    assert_eq!(e.run(Some("agent-a"), &["renew", "task-1"]).code, 3);
    e.ok("agent-b", &["checkout", "task-1"]);
    assert_eq!(e.run(Some("agent-a"), &["renew", "task-1"]).code, 4);
}

#[test]
fn beating_agent_keeps_its_checkout_past_the_original_lease() {
    let mut e = Env::new();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "10m"]);
    for minute in [2, 4, 6, 8, 10, 12, 14, 16, 18, 20] {
        e.at(&format!("2026-01-01T00:{minute:02}:00Z"));
        let j = e.ok("agent-a", &["heartbeat", "--json"]).json();
        assert_eq!(j["lost"], serde_json::json!([]), "minute {minute}");
        assert_eq!(j["agent"]["checkouts"], serde_json::json!(["task-1"]));
        assert_eq!(
            e.run(Some("agent-b"), &["checkout", "task-1"]).code,
            2,
            "minute {minute}"
        );
    }
    let j = e.run(None, &["status", "task-1", "--json"]).json();
    assert_eq!(j["checkout"]["token"], 1, "one checkout throughout");
    assert!(j["checkout"]["expires_at"].as_str().unwrap() > "2026-01-01T00:20:00Z");
    // Renewal happens once past half-way, not on every beat.
    let renews = audit(&e.dir())
        .iter()
        .filter(|v| v["event"] == "renew")
        .count();
    assert!((3..=6).contains(&renews), "{renews} renews");
}

#[test]
fn heartbeat_never_revives_a_lost_lease() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "10m"]);
    e.at("2026-01-01T00:11:00Z");
    let r = e.ok("agent-a", &["heartbeat"]);
    snap!(e, "heartbeat_lease_lost", r);
    let j = e.run(None, &["status", "task-1", "--json"]).json();
    assert_eq!(j["outcome"], "free");
    assert_eq!(e.run(Some("agent-a"), &["renew", "task-1"]).code, 3);
}

#[test]
fn heartbeat_of_anyone_releases_dead_agents_checkouts() {
    let mut e = Env::new();
    let mut a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    e.ok("agent-a", &["checkout", "task-1"]);
    a.kill();
    // The first beat once sweep_interval (10 s) has passed since agent-a's first beat.
    e.at("2026-01-01T00:00:10Z");
    let r = e.ok("agent-b", &["heartbeat"]);
    snap!(e, "heartbeat_ended_a_dead_agents_checkout", r);
    assert_eq!(holder(&e, "task-1"), Value::Null);
    e.ok(
        "agent-a",
        &["heartbeat", "--pid", &std::process::id().to_string()],
    );
    e.ok("agent-a", &["checkout", "task-1"]);
    let mut a = AgentProcess::start();
    e.ok("agent-a", &["heartbeat", "--pid", &a.pid()]);
    a.kill();
    e.at("2026-01-01T00:00:20Z");
    let j = e.ok("agent-b", &["heartbeat", "--json"]).json();
    assert_eq!(j["ended"][0]["key"], "task-1");
    assert_eq!(j["ended"][0]["agent"], "agent-a");
    assert_eq!(j["ended"][0]["reason"], "agent_death");
    assert_eq!(holder(&e, "task-1"), Value::Null);
}

/// Between two sweeps a beat reads only its agent's checkouts: a dead holder's checkout
/// waits for the first beat `sweep_interval` after the last sweep.
#[test]
fn a_dead_holder_waits_for_the_next_sweep() {
    let mut e = Env::new();
    let mut a = AgentProcess::start();
    let first = e
        .ok("agent-a", &["heartbeat", "--pid", &a.pid(), "--json"])
        .json();
    assert_eq!(
        first["swept"], true,
        "the project's first beat sweeps: {first}"
    );
    e.ok("agent-a", &["checkout", "task-1"]);
    a.kill();
    // 9 s later (the default interval is 10 s): agent-b's beat leaves task-1 alone.
    e.at("2026-01-01T00:00:09Z");
    let j = e.ok("agent-b", &["heartbeat", "--json"]).json();
    assert_eq!(j["swept"], false, "{j}");
    assert_eq!(j["ended"], serde_json::json!([]), "{j}");
    assert!(auto_releases(&e).is_empty());
    // The first beat 10 s after the last sweep sweeps and ends it.
    e.at("2026-01-01T00:00:10Z");
    let j = e.ok("agent-b", &["heartbeat", "--json"]).json();
    assert_eq!(j["swept"], true, "{j}");
    assert_eq!(j["ended"][0]["key"], "task-1", "{j}");
    assert_eq!(j["ended"][0]["reason"], "agent_death");
    assert_eq!(auto_releases(&e).len(), 1);
    // Within the interval of that sweep, no other beat sweeps.
    e.at("2026-01-01T00:00:19Z");
    let j = e.ok("agent-c", &["heartbeat", "--json"]).json();
    assert_eq!(j["swept"], false, "{j}");
}

/// A beat that does not sweep still renews its agent's leases and its subagents', and
/// reports what the agent holds; it does not end others' lapsed checkouts.
#[test]
fn a_beat_without_a_sweep_renews_its_own_and_its_subagents() {
    let mut e = Env::new();
    e.configure("sweep_interval: 1h\n");
    assert_eq!(
        e.ok("agent-b", &["heartbeat", "--json"]).json()["swept"],
        true
    );
    e.ok("agent-b", &["checkout", "task-2", "--timeout", "10m"]);
    e.ok(
        "agent-b/helper",
        &["checkout", "task-3", "--timeout", "10m"],
    );
    e.ok("agent-b2", &["checkout", "task-5", "--timeout", "10m"]);
    e.ok("agent-c", &["checkout", "task-4", "--timeout", "1m"]);
    e.at("2026-01-01T00:06:00Z");
    let j = e.ok("agent-b", &["heartbeat", "--json"]).json();
    assert_eq!(j["swept"], false, "{j}");
    assert_eq!(j["renewed"], serde_json::json!(["task-2", "task-3"]), "{j}");
    assert_eq!(
        j["agent"]["checkouts"],
        serde_json::json!(["task-2"]),
        "{j}"
    );
    // agent-c's lease ran out 5 minutes ago: left to the next sweep, or to whoever meets it.
    assert_eq!(j["ended"], serde_json::json!([]), "{j}");
    assert_eq!(holder(&e, "task-4"), Value::Null);
    let j = e
        .run(Some("observer"), &["status", "task-5", "--json"])
        .json();
    assert_eq!(
        j["checkout"]["expires_at"], "2026-01-01T00:10:00Z",
        "not agent-b's: {j}"
    );
}

/// `sweep_interval: 0s`: every beat sweeps. A sweep recorded far ahead of a beat's clock
/// (a clock that ran ahead) does not hold sweeps back.
#[test]
fn sweeps_on_every_beat_and_past_a_clock_that_ran_ahead() {
    let e = Env::new();
    e.configure("sweep_interval: 0s\n");
    for _ in 0..2 {
        assert_eq!(
            e.ok("agent-a", &["heartbeat", "--json"]).json()["swept"],
            true
        );
    }
    let mut e = Env::new();
    e.at("2026-01-01T01:00:00Z");
    assert_eq!(
        e.ok("agent-a", &["heartbeat", "--json"]).json()["swept"],
        true
    );
    e.at(T0);
    assert_eq!(
        e.ok("agent-b", &["heartbeat", "--json"]).json()["swept"],
        true
    );
    assert_eq!(
        e.ok("agent-b", &["heartbeat", "--json"]).json()["swept"],
        false
    );
}

#[test]
fn stalled_agent_state_and_agent_that_never_beat() {
    let e = Env::new();
    e.ok("agent-c", &["checkout", "task-9", "--name", "lease-only"]);
    let j = e.run(None, &["agents", "--json"]).json();
    let row = &j["agents"][0];
    assert_eq!(row["id"], "agent-c");
    assert_eq!(row["registered"], false);
    assert_eq!(row["state"], "alive");
    assert_eq!(row["checkouts"], serde_json::json!(["task-9"]));
    let r = e.run(None, &["agents"]);
    snap!(e, "agents_unregistered_holder", r);
    let empty = Env::new();
    let r = empty.run(None, &["agents"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, "No known agents.\n");
}

#[test]
fn notes_are_for_the_holder_and_survive_release() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "task-1", "--name", "researcher"]);
    let r = e.run(
        Some("agent-a"),
        &["note", "task-1", "found the bug in parse_header"],
    );
    assert_eq!(r.code, 0);
    snap!(e, "note_added", r);
    let j = e
        .ok(
            "agent-a",
            &["note", "task-1", "fix drafted, tests pending", "--json"],
        )
        .json();
    assert_eq!(j["outcome"], "noted");
    assert_eq!(j["note"]["token"], 1);
    assert_eq!(j["note"]["text"], "fix drafted, tests pending");
    let r = e.run(Some("agent-b"), &["note", "task-1", "sneaky"]);
    assert_eq!(r.code, 4);
    snap!(e, "note_not_holder", r);
    assert_eq!(e.run(Some("agent-b"), &["note", "free-key", "x"]).code, 3);
    assert_eq!(e.run(Some("agent-a"), &["note", "task-1", ""]).code, 64);
    e.at(T5M);
    e.ok(
        "agent-a",
        &["release", "task-1", "--note", "handing off: only docs left"],
    );
    let r = e.run(None, &["status", "task-1"]);
    snap!(e, "status_free_with_notes", r);
    let j = e.run(None, &["status", "task-1", "--json"]).json();
    let texts: Vec<&str> = j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "found the bug in parse_header",
            "fix drafted, tests pending",
            "handing off: only docs left"
        ]
    );
    e.ok("agent-b", &["checkout", "task-1"]);
    e.ok("agent-b", &["note", "task-1", "picked up"]);
    let r = e.run(None, &["status", "task-1"]);
    snap!(e, "status_held_with_notes", r);
    let j = e.run(None, &["status", "task-1", "--json"]).json();
    assert_eq!(j["notes"].as_array().unwrap().len(), 3, "the last three");
    assert_eq!(j["notes"][2]["agent"], "agent-b");
    // A note after the lease ran out is refused and the lease is not revived.
    e.at(T1H);
    assert_eq!(e.run(Some("agent-b"), &["note", "task-1", "late"]).code, 4);
}

#[test]
fn heartbeat_bad_input() {
    let e = Env::new();
    assert_eq!(
        e.run(Some("a"), &["heartbeat", "--pid", "4000000"]).code,
        64
    );
    assert_eq!(e.run(Some("a"), &["heartbeat", "--pid", "nope"]).code, 64);
    assert_eq!(
        e.run(Some("a"), &["heartbeat", "--status", "two\nlines"])
            .code,
        64
    );
    assert_eq!(e.run(None, &["heartbeat"]).code, 64, "needs an identity");
    assert_eq!(
        e.run(Some("a"), &["heartbeat", "--interval", "5s"]).code,
        64,
        "--interval needs --watch"
    );
}

#[test]
fn ended_agent_that_comes_back_is_alive_again() {
    let e = Env::new();
    let mut a = AgentProcess::start();
    let mut w = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    use_store(&mut w, &e.dir());
    let mut w = w
        .env_remove("TASKLOCK_NOW")
        .args(["--agent", "agent-a", "--dir"])
        .arg(e.dir())
        .args([
            "heartbeat",
            "--watch",
            "--interval",
            "1s",
            "--pid",
            &a.pid(),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the watcher's first beat to register the agent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !Stored::Agent("agent-a").exists(&e.dir()) {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    a.kill();
    assert!(w.wait().unwrap().success());
    let j = e.run(None, &["agents", "--json"]).json();
    assert_eq!(j["agents"][0]["cause"], "ended");
    // The same id checks out again: its new checkout must not count as dead.
    e.ok("agent-a", &["checkout", "task-1"]);
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 2);
}

#[test]
fn renewing_counts_as_a_sign_of_life() {
    let mut e = Env::new();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "1h"]);
    // No heartbeat for 15m, but a renew at 8m: not silent for the dead threshold.
    e.at("2026-01-01T00:08:00Z");
    e.ok("agent-a", &["renew", "task-1", "--timeout", "1h"]);
    e.at("2026-01-01T00:15:00Z");
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 2);
    // Silent past dead_after since that renew: dead.
    e.at("2026-01-01T00:19:00Z");
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-1"]).code, 0);
}

#[test]
fn agents_agrees_with_reaping_about_an_agent_that_renews() {
    let mut e = Env::new();
    e.ok("agent-a", &["heartbeat"]);
    e.ok("agent-a", &["checkout", "task-1", "--timeout", "1h"]);
    e.at("2026-01-01T00:08:00Z");
    e.ok("agent-a", &["renew", "task-1", "--timeout", "1h"]);
    e.at("2026-01-01T00:15:00Z");
    let j = e.run(None, &["agents", "--json"]).json();
    assert_eq!(
        j["agents"][0]["state"], "stalled",
        "renewed 7m ago: stalled, not dead"
    );
    assert_eq!(j["agents"][0]["checkouts"], serde_json::json!(["task-1"]));
}

/// Spawn per task: new agents, all at once, each taking one key of the backlog as its
/// first command and registering its own process with it (`checkout --next --pid`, one
/// process). No key or token is handed out twice, every agent is registered with its
/// process, and a process that dies frees its agent's key at once.
#[test]
fn new_agents_register_their_process_with_their_claim() {
    const AGENTS: usize = 12;
    let e = Env::new();
    let keys: Vec<String> = (0..AGENTS + 3).map(|i| format!("job-{i:02}")).collect();
    let file = e.tmp.path().join("backlog.txt");
    std::fs::write(&file, keys.join("\n")).unwrap();
    e.ok(
        "lead",
        &["backlog", "add", "--file", file.to_str().unwrap()],
    );
    let mut procs: Vec<AgentProcess> = (0..AGENTS).map(|_| AgentProcess::start()).collect();
    let children: Vec<std::process::Child> = procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut cmd = base_cmd(&e.now);
            use_store(&mut cmd, &e.dir());
            cmd.arg("--dir")
                .arg(e.dir())
                .args(["checkout", "--next", "--json", "--pid", &p.pid()])
                .args(["--agent", &format!("spawned-{i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let mut taken = std::collections::BTreeMap::new();
    let mut tokens = std::collections::BTreeSet::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "spawned-{i}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["outcome"], "granted", "{j}");
        let c = &j["checkout"];
        assert_eq!(c["agent"]["id"], format!("spawned-{i}"));
        assert_eq!(c["agent"]["pid"].to_string(), procs[i].pid(), "{j}");
        let key = c["key"].as_str().unwrap().to_string();
        assert!(taken.insert(key.clone(), i).is_none(), "{key} twice");
        assert!(
            tokens.insert(c["token"].as_u64().unwrap()),
            "token twice: {j}"
        );
    }
    assert_eq!(taken.len(), AGENTS);

    let agents = e.run(None, &["agents", "--all", "--json"]).json();
    for (i, p) in procs.iter().enumerate() {
        let id = format!("spawned-{i}");
        let a = agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not listed: {agents}"));
        assert_eq!(a["pid"].to_string(), p.pid(), "{a}");
        assert_eq!(a["state"], "alive", "{a}");
        assert_eq!(a["registered"], true, "{a}");
        let held = vec![Value::from(
            taken.iter().find(|(_, n)| **n == i).unwrap().0.as_str(),
        )];
        assert_eq!(a["checkouts"], Value::Array(held), "{a}");
    }

    // Half of the processes die: their agents' keys are free at once (the same clock,
    // no lease over), the others' still held.
    for p in procs.iter_mut().step_by(2) {
        p.kill();
    }
    let j = e.run(None, &["list", "--json"]).json();
    let mut held: Vec<String> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect();
    held.sort();
    let alive: Vec<String> = taken
        .iter()
        .filter(|(_, i)| *i % 2 == 1)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(held, alive);
    let mut dead: Vec<String> = auto_releases(&e)
        .iter()
        .filter(|v| v["reason"] == "agent_death")
        .map(|v| v["agent"].as_str().unwrap().to_string())
        .collect();
    dead.sort();
    let mut expected: Vec<String> = (0..AGENTS)
        .step_by(2)
        .map(|i| format!("spawned-{i}"))
        .collect();
    expected.sort();
    assert_eq!(dead, expected);
}

/// A claim that registers the agent's process is a beat: it binds an agent not yet bound
/// to the caller's secret, and an agent bound to a secret registers nothing, and takes
/// nothing, without it.
#[test]
fn a_claim_that_registers_binds_the_agent_to_its_secret() {
    let e = Env::new();
    let p = AgentProcess::start();
    let q = AgentProcess::start();
    let with = |secret: &str, args: &[&str]| {
        e.run_env(Some("spawned"), args, &[("TASKLOCK_SECRET", secret)])
    };
    let r = with(
        "first",
        &["checkout", "task-1", "--pid", &p.pid(), "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        e.run(Some("spawned"), &["heartbeat"]).code,
        4,
        "bound by its claim: a beat needs the secret"
    );
    let r = with(
        "other",
        &["checkout", "task-2", "--pid", &q.pid(), "--json"],
    );
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "secret_refused", "{}", r.text());
    let r = with(
        "other",
        &["checkout", "--next", "--pid", &q.pid(), "--json"],
    );
    assert_eq!(r.code, 4, "{}", r.text());
    let refused: Vec<Value> = audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == "refused" && v["agent"] == "spawned")
        .collect();
    assert_eq!(
        refused.len(),
        3,
        "the beat's and each claim's, once: {refused:?}"
    );
    for r in &refused[1..] {
        assert_eq!(r["reason"], "wrong_secret");
        assert_eq!(r["detail"], "checkout as the agent without its secret");
    }
    let agents = e.run(None, &["agents", "--json"]).json();
    let a = &agents["agents"][0];
    assert_eq!(a["id"], "spawned");
    assert_eq!(
        a["pid"].to_string(),
        p.pid(),
        "the refused claim registered nothing"
    );
    assert_eq!(
        e.run(None, &["status", "task-2", "--json"]).json()["checkout"],
        Value::Null,
        "and took nothing"
    );
    let r = with(
        "first",
        &["checkout", "task-2", "--pid", &q.pid(), "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["checkout"]["agent"]["pid"].to_string(), q.pid());

    let r = e.run(
        Some("spawned-2"),
        &["checkout", "task-3", "--pid", "4000000000"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(
        r.text().contains("--pid 4000000000: no such process"),
        "{}",
        r.text()
    );
    let r = e.run(
        Some("spawned-2"),
        &["checkout", "task-3", "--pid", "1", "--wait"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
}

/// `tasklock ARGS` as `agent`, in `e`'s store, started in the background.
fn spawn_as(e: &Env, agent: &str, args: &[&str]) -> std::process::Child {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["--agent", agent])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().unwrap()
}

/// Wait until `path` exists (a command under `run` says it started).
fn wait_for_file(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An orchestrator retries a `run` whose process was killed: the retry takes a grant of
/// its own (a new token), holds it for the whole command though a sweep runs meanwhile,
/// and releases it at the end. The dead run's checkout is ended, not renewed.
#[test]
fn a_run_retried_after_a_killed_one_takes_a_grant_of_its_own() {
    for slots in [&[][..], &["--slots", "3"][..]] {
        let e = Env::new();
        let first = e.tmp.path().join("first");
        let first_path = first.display().to_string();
        let mut args = vec!["run", "build"];
        args.extend_from_slice(slots);
        args.extend_from_slice(&["--", "sh", "-c", "touch \"$0\"; exec sleep 30", &first_path]);
        let mut killed = spawn_as(&e, "R", &args);
        wait_for_file(&first);
        killed.kill().unwrap(); // SIGKILL
        killed.wait().unwrap();

        let (started, go) = (e.tmp.path().join("started"), e.tmp.path().join("go"));
        let (started_path, go_path) = (started.display().to_string(), go.display().to_string());
        let mut args = vec!["--json", "run", "build"];
        args.extend_from_slice(slots);
        args.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "touch \"$0\"; while [ ! -e \"$1\" ]; do sleep 0.05; done",
            &started_path,
            &go_path,
        ]);
        let retry = spawn_as(&e, "R", &args);
        wait_for_file(&started);
        // Sweeps while the command runs, many at once, do not end the retry's checkout.
        let sweeps: Vec<_> = (0..8)
            .map(|i| {
                let who = format!("observer-{i}");
                match i % 2 {
                    0 => spawn_as(&e, &who, &["list"]),
                    _ => spawn_as(&e, &who, &["heartbeat"]),
                }
            })
            .collect();
        for s in sweeps {
            let out = s.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let j = e.run(Some("observer"), &["list", "--json"]).json();
        let held: Vec<(Value, Value)> = j["checkouts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["agent"]["id"].clone(), c["token"].clone()))
            .collect();
        assert_eq!(held, [("R".into(), 2.into())], "{slots:?}: {j}");
        std::fs::write(&go, "").unwrap();
        let out = retry.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{slots:?}: {stderr}");
        let report: Value = serde_json::from_str(stderr.trim()).expect("run's report");
        assert_eq!(report["token"], 2, "{slots:?}: a new grant: {report}");
        assert_eq!(report["kept"], false, "{report}");
        assert_eq!(report["lease_lost"], false, "{report}");
        assert_eq!(report["released"], true, "{report}");

        let ended: Vec<(Value, Value, Value)> = auto_releases(&e)
            .iter()
            .map(|v| (v["agent"].clone(), v["token"].clone(), v["reason"].clone()))
            .collect();
        assert_eq!(
            ended,
            [("R".into(), 1.into(), "agent_death".into())],
            "{slots:?}: only the killed run's checkout ended for its death"
        );
        let j = e.run(None, &["list", "--json"]).json();
        assert_eq!(j["checkouts"], Value::Array(vec![]), "{slots:?}: released");
    }
}

/// A checkout bound to a dead process is dead for its own agent id too: `checkout`
/// ends it and grants anew (a new token, not bound to the dead process), `renew` and
/// `heartbeat` end it and report it lost; nothing revives it.
#[test]
fn a_checkout_whose_process_is_gone_is_not_revived_by_its_own_agent() {
    let e = Env::new();
    let mut a = AgentProcess::start();
    e.ok("R", &["checkout", "k1", "--pid", &a.pid()]);
    e.ok("R", &["checkout", "k2"]);
    e.ok("R", &["checkout", "k3"]);
    e.ok("R", &["checkout", "k4"]);
    e.ok("R", &["checkout", "k5"]);
    e.ok("R", &["checkout", "s", "--slots", "2"]);
    let j = e.run(None, &["status", "k2", "--json"]).json();
    assert_eq!(j["checkout"]["agent"]["pid"].to_string(), a.pid());
    let token =
        |key: &str| e.run(None, &["status", key, "--json"]).json()["checkout"]["token"].clone();
    let (k1_token, k5_token, s_token) = (token("k1"), token("k5"), token("s"));
    a.kill();

    let r = e.run(Some("R"), &["checkout", "k1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert!(
        j["checkout"]["token"].as_u64() > k1_token.as_u64(),
        "a new token: {j}"
    );
    assert_eq!(j["checkout"]["agent"]["pid"], Value::Null, "{j}");
    assert_eq!(j["took_over"]["token"], k1_token, "{j}");
    let k1_new = j["checkout"]["token"].clone();
    assert_eq!(j["took_over"]["reason"], "agent_death", "{j}");

    let r = e.run(Some("R"), &["checkout", "s", "--slots", "2", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_ne!(j["checkout"]["token"], s_token, "a new token: {j}");
    let s_new = j["checkout"]["token"].clone();

    let r = e.run(Some("R"), &["checkout", "--any", "k5", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_ne!(j["checkout"]["token"], k5_token, "a new token: {j}");
    let k5_new = j["checkout"]["token"].clone();

    let r = e.run(Some("R"), &["renew", "k2", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "lease_lost");
    assert_eq!(
        e.run(None, &["status", "k2", "--json"]).json()["outcome"],
        "free"
    );

    let r = e.run(Some("R"), &["release", "k4", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "lease_lost");

    let j = e.ok("R", &["heartbeat", "--json"]).json();
    assert_eq!(j["lost"], serde_json::json!(["k3"]), "{j}");

    let ended: Vec<(Value, Value)> = auto_releases(&e)
        .iter()
        .map(|v| (v["key"].clone(), v["reason"].clone()))
        .collect();
    let death = Value::from("agent_death");
    assert_eq!(
        ended,
        [
            ("k1".into(), death.clone()),
            ("s".into(), death.clone()),
            ("k5".into(), death.clone()),
            ("k2".into(), death.clone()),
            ("k4".into(), death.clone()),
            ("k3".into(), death)
        ]
    );
    // The new checkouts live on through a sweep.
    let j = e.run(Some("observer"), &["list", "--json"]).json();
    let held: Vec<(Value, Value)> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["key"].clone(), c["token"].clone()))
        .collect();
    assert_eq!(
        held,
        [
            ("k1".into(), k1_new),
            ("k5".into(), k5_new),
            ("s".into(), s_new)
        ]
    );
}

/// `R` holds `k` bound to a process of its own, which is then killed: its token.
fn own_checkout_of_a_killed_process(e: &Env) -> u64 {
    let mut a = AgentProcess::start();
    e.ok("R", &["checkout", "k", "--pid", &a.pid()]);
    let token = e.run(None, &["status", "k", "--json"]).json()["checkout"]["token"]
        .as_u64()
        .unwrap();
    a.kill();
    token
}

/// The keys ended (audited `auto_release`) and why.
fn ended(e: &Env) -> Vec<(Value, Value)> {
    auto_releases(e)
        .iter()
        .map(|v| (v["key"].clone(), v["reason"].clone()))
        .collect()
}

/// `verify` of one's own checkout whose process is gone: it has ended (as `agent_death`),
/// so the token is no longer valid: `lease_lost`, exit 4, as `renew` says.
#[test]
fn verify_of_ones_own_checkout_whose_process_is_gone_is_lease_lost() {
    let e = Env::new();
    let token = own_checkout_of_a_killed_process(&e).to_string();
    let r = e.run(Some("R"), &["verify", "k", "--token", &token, "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "lease_lost", "{j}");
    assert_eq!(j["valid"], false, "{j}");
    assert_eq!(ended(&e), [("k".into(), "agent_death".into())]);
    let r = e.run(Some("R"), &["verify", "k", "--token", &token]);
    assert_eq!(
        r.code,
        3,
        "ended, so nothing is left to verify: {}",
        r.text()
    );
}

/// `note` under one's own checkout whose process is gone: refused (`lease_lost`, exit 4),
/// the checkout ended as `agent_death`, nothing noted.
#[test]
fn note_under_ones_own_checkout_whose_process_is_gone_is_refused() {
    let e = Env::new();
    own_checkout_of_a_killed_process(&e);
    let r = e.run(Some("R"), &["note", "k", "half done", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["outcome"], "lease_lost");
    assert_eq!(ended(&e), [("k".into(), "agent_death".into())]);
    let j = e.run(None, &["status", "k", "--json"]).json();
    assert_eq!(j["outcome"], "free", "{j}");
    assert_eq!(j["notes"], serde_json::json!([]), "nothing noted: {j}");
}

/// `give` of one's own checkout whose process is gone: there is nothing left to hand
/// over (`lease_lost`, exit 4); the receiver gets nothing.
#[test]
fn give_of_ones_own_checkout_whose_process_is_gone_is_refused() {
    let e = Env::new();
    e.ok("B", &["heartbeat"]);
    own_checkout_of_a_killed_process(&e);
    let r = e.run(Some("R"), &["give", "k", "--to", "B", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["outcome"], "lease_lost");
    assert_eq!(ended(&e), [("k".into(), "agent_death".into())]);
    let j = e.run(None, &["status", "k", "--json"]).json();
    assert_eq!(j["outcome"], "free", "{j}");
}

/// `why` of one's own checkout whose process is gone says it has ended and can be
/// checked out (without ending it: a read); the checkout that follows is a new grant.
#[test]
fn why_of_ones_own_checkout_whose_process_is_gone_says_it_has_ended() {
    let e = Env::new();
    let token = own_checkout_of_a_killed_process(&e);
    let r = e.run(Some("R"), &["why", "k"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stdout
            .contains("but its process is gone; the checkout has ended"),
        "{}",
        r.stdout
    );
    let j = e.run(Some("R"), &["why", "k", "--json"]).json();
    assert_eq!(j["can_checkout"], true, "{j}");
    assert_eq!(j["state"], "ended", "{j}");
    assert!(ended(&e).is_empty(), "why writes nothing");
    let j = e.run(Some("R"), &["checkout", "k", "--json"]).json();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert!(j["checkout"]["token"].as_u64().unwrap() > token, "{j}");
    assert_eq!(ended(&e), [("k".into(), "agent_death".into())]);
}

//! Queues and path checkouts together, through the real binary: a holder that adds
//! paths queues for them and is seen by deadlock detection; a reservation is made only
//! for a waiter whose paths are free; a dead agent's reservation refuses nobody; leaving
//! a queue; and a race of many agents mixing all of these while some are killed.

#[macro_use]
mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn run(env: &Env, top: &Path, agent: &str, args: &[&str]) -> Run {
    env.run_in(top, Some(agent), args)
}

fn json_run(env: &Env, top: &Path, agent: &str, args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let r = run(env, top, agent, &a);
    (r.code, r.json())
}

fn ok(env: &Env, top: &Path, agent: &str, args: &[&str]) -> Value {
    let (code, j) = json_run(env, top, agent, args);
    assert_eq!(code, 0, "{args:?} as {agent}: {j}");
    j
}

/// `tasklock ARGS --agent AGENT` from `top`, on the real clock.
fn live_cmd(env: &Env, top: &Path, agent: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    use_store(&mut cmd, &env.dir());
    cmd.env_remove("TASKLOCK_NOW")
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_AGENT_NAME")
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_URL")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env_remove("TASKLOCK_SECRET")
        .current_dir(top)
        .arg("--dir")
        .arg(env.dir())
        .args(args)
        .args(["--agent", agent])
        .stdin(Stdio::null());
    use_store(&mut cmd, &env.dir());
    cmd
}

fn live(env: &Env, top: &Path, agent: &str, args: &[&str]) -> Run {
    exec(live_cmd(env, top, agent, args))
}

fn live_json(env: &Env, top: &Path, agent: &str, args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let r = live(env, top, agent, &a);
    (r.code, r.json())
}

/// The unread messages of `agent` (left unread), as `(type, key, body)`.
fn inbox(env: &Env, top: &Path, agent: &str) -> Vec<(String, String, String)> {
    let j = ok(env, top, agent, &["inbox", "--peek"]);
    j["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["key"].as_str().unwrap().to_string(),
                m["body"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn reserved_keys(env: &Env, top: &Path, agent: &str) -> Vec<String> {
    inbox(env, top, agent)
        .into_iter()
        .filter(|(t, _, _)| t == "reserved")
        .map(|(_, k, _)| k)
        .collect()
}

/// A key's queue as `status` shows it: the waiters in order and whom it is reserved for.
fn queue_of(env: &Env, top: &Path, key: &str) -> (Vec<String>, Option<String>) {
    let j = ok(env, top, "observer", &["status", key]);
    let q = &j["queue"];
    let waiters = q["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    (
        waiters,
        q["reserved_for"]["agent"].as_str().map(String::from),
    )
}

fn poll_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < end, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Defect: a holder adding paths held by another agent was refused without a place in
/// any queue, so `--queue` did nothing and two such holders waited on each other
/// unseen until their `--wait` ran out.
#[test]
fn a_holder_adding_paths_queues_for_them_and_a_cycle_through_them_is_broken() {
    let (env, top) = git_env();
    ok(&env, &top, "Q", &["checkout", "q1", "--path", "src/a"]);
    ok(&env, &top, "R", &["checkout", "q2", "--path", "src/b"]);

    let (code, j) = json_run(
        &env,
        &top,
        "Q",
        &["checkout", "q1", "--path", "src/b", "--queue"],
    );
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["position"], 1, "the holder is queued for its paths: {j}");
    assert_eq!(j["checkout"]["agent"]["id"], "Q", "{j}");
    assert_eq!(j["checkout"]["paths"], json!(["src/a"]), "unchanged: {j}");
    assert_eq!(j["overlaps"][0]["agent"]["id"], "R", "{j}");

    let (code, j) = json_run(
        &env,
        &top,
        "R",
        &["checkout", "q2", "--path", "src/a", "--queue"],
    );
    // The cycle R's wait closes goes through Q's passive place (`--queue`): that place
    // is dropped and Q told, and R waits (issue 46).
    assert_eq!(code, 2, "{j}");
    assert_eq!(
        j["dropped"],
        json!([{"agent": "Q", "key": "q1", "cycle": ["Q", "q1", "R", "q2", "Q"]}]),
        "{j}"
    );
    assert_eq!(queue_of(&env, &top, "q2").0, ["R"]);
    assert_eq!(queue_of(&env, &top, "q1").0, Vec::<String>::new());
    assert!(
        inbox(&env, &top, "Q")
            .iter()
            .any(|(t, k, _)| t == "deadlock" && k == "q1")
    );
    // Q asking again drops R's passive place in turn.
    let (code, j) = json_run(
        &env,
        &top,
        "Q",
        &["checkout", "q1", "--path", "src/b", "--queue"],
    );
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["dropped"][0]["agent"], "R", "{j}");
    assert_eq!(queue_of(&env, &top, "q2").0, Vec::<String>::new());

    // R gives up `src/b`: Q is told, and the path is held for Q until it adds it.
    ok(&env, &top, "R", &["release", "q2"]);
    let msgs = inbox(&env, &top, "Q");
    let (_, key, body) = msgs
        .iter()
        .find(|(t, _, _)| t == "reserved")
        .unwrap_or_else(|| panic!("Q was not told: {msgs:?}"));
    assert_eq!(key, "q1");
    assert!(
        body.contains("tasklock checkout q1 --path src/b"),
        "the message gives the command: {body}"
    );
    let (code, j) = json_run(&env, &top, "S", &["checkout", "s", "--path", "src/b"]);
    assert_eq!(code, 2, "src/b is held for Q: {j}");
    assert_eq!(j["overlaps"][0]["agent"]["id"], "Q", "{j}");
    assert_eq!(j["overlaps"][0]["reserved"], true, "{j}");

    let j = ok(&env, &top, "Q", &["checkout", "q1", "--path", "src/b"]);
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["paths"], json!(["src/a", "src/b"]));
    assert_eq!(queue_of(&env, &top, "q1"), (vec![], None));
    assert!(reserved_keys(&env, &top, "Q").is_empty(), "acted on: read");
}

/// The same cycle with two blocked `--wait`s: the second is told `deadlock` at once
/// instead of both running out their time; the first is granted when the path frees.
#[test]
fn waits_that_would_close_a_cycle_through_added_paths_end_at_once() {
    let (env, top) = git_env();
    live_json(&env, &top, "Q", &["checkout", "q1", "--path", "src/a"]);
    live_json(&env, &top, "R", &["checkout", "q2", "--path", "src/b"]);
    let q = live_cmd(
        &env,
        &top,
        "Q",
        &[
            "checkout", "q1", "--path", "src/b", "--wait", "60s", "--json",
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    poll_until("Q to queue", Duration::from_secs(20), || {
        queue_of(&env, &top, "q1").0 == ["Q"]
    });
    let started = Instant::now();
    let (code, j) = live_json(
        &env,
        &top,
        "R",
        &["checkout", "q2", "--path", "src/a", "--wait", "60s"],
    );
    assert_eq!(code, 5, "{j}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "told at once, not after its wait"
    );
    live_json(&env, &top, "R", &["release", "q2"]);
    let out = q.wait_with_output().unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{j}");
    assert_eq!(j["outcome"], "already_held", "{j}");
    assert_eq!(j["checkout"]["paths"], json!(["src/a", "src/b"]), "{j}");
}

/// Defect: the queue reserved a free key for its head while the head's paths were
/// still held, so the head was told to run a command that could only fail, everyone
/// else was refused the key, and two heads wanting one path were both reserved.
#[test]
fn a_reservation_waits_until_the_waiters_paths_are_free() {
    let (env, top) = git_env();
    ok(&env, &top, "Y", &["checkout", "k0", "--path", "src/a"]);
    let (code, j) = json_run(
        &env,
        &top,
        "X",
        &["checkout", "k1", "--path", "src/a", "--queue"],
    );
    assert_eq!((code, &j["position"]), (2, &json!(1)), "{j}");
    let (code, j) = json_run(
        &env,
        &top,
        "V",
        &["checkout", "k2", "--path", "src/a/x", "--queue"],
    );
    assert_eq!((code, &j["position"]), (2, &json!(1)), "{j}");
    // Anything that settles k1's queue (status does) leaves it unreserved.
    assert_eq!(queue_of(&env, &top, "k1"), (vec!["X".to_string()], None));
    assert!(reserved_keys(&env, &top, "X").is_empty());
    // So k1 is not held back from others while X cannot take it.
    ok(&env, &top, "Z", &["checkout", "k1"]);
    // A waiter behind a blocked one is served first, and the blocked one keeps its place.
    let (code, j) = json_run(&env, &top, "W", &["checkout", "k1", "--queue"]);
    assert_eq!((code, &j["position"]), (2, &json!(2)), "{j}");
    ok(&env, &top, "Z", &["release", "k1"]);
    assert_eq!(
        queue_of(&env, &top, "k1"),
        (
            vec!["W".to_string(), "X".to_string()],
            Some("W".to_string())
        )
    );
    assert_eq!(reserved_keys(&env, &top, "W"), ["k1"]);
    let (code, j) = json_run(&env, &top, "Z", &["checkout", "k1"]);
    assert_eq!(code, 2, "reserved for W: {j}");
    ok(&env, &top, "W", &["checkout", "k1"]);
    ok(&env, &top, "W", &["release", "k1"]);
    assert_eq!(queue_of(&env, &top, "k1"), (vec!["X".to_string()], None));

    // Y releases src/a: exactly one of the two heads that want it is served.
    ok(&env, &top, "Y", &["release", "k0"]);
    let x = reserved_keys(&env, &top, "X");
    let v = reserved_keys(&env, &top, "V");
    assert_eq!(
        (x.len(), v.len()),
        (1, 0),
        "one reservation, for the first served: X {x:?}, V {v:?}"
    );
    let j = ok(&env, &top, "X", &["checkout", "k1", "--path", "src/a"]);
    assert_eq!(j["outcome"], "granted");
    ok(&env, &top, "X", &["release", "k1"]);
    assert_eq!(reserved_keys(&env, &top, "V"), ["k2"]);
    let j = ok(&env, &top, "V", &["checkout", "k2", "--path", "src/a/x"]);
    assert_eq!(j["outcome"], "granted");
}

/// Defect: a reservation of an agent whose process was gone kept refusing overlapping
/// paths to everyone for the whole handoff grace.
#[test]
fn a_dead_agents_reservation_refuses_nobody() {
    let (env, top) = git_env();
    let mut x = AgentProcess::start();
    live_json(&env, &top, "X", &["heartbeat", "--pid", &x.pid()]);
    live_json(&env, &top, "Y", &["checkout", "k1", "--path", "src/a"]);
    let (code, j) = live_json(
        &env,
        &top,
        "X",
        &["checkout", "k2", "--path", "src/a", "--queue"],
    );
    assert_eq!(code, 2, "{j}");
    live_json(&env, &top, "Y", &["release", "k1"]);
    assert_eq!(queue_of(&env, &top, "k2").1.as_deref(), Some("X"));
    let (code, j) = live_json(&env, &top, "Z", &["checkout", "k3", "--path", "src/a"]);
    assert_eq!(code, 2, "held for X while it lives: {j}");
    assert_eq!(j["overlaps"][0]["reserved"], true, "{j}");

    x.kill();
    let (code, j) = live_json(&env, &top, "Z", &["checkout", "k3", "--path", "src/a"]);
    assert_eq!(code, 0, "a dead agent holds no reservation: {j}");
    assert_eq!(queue_of(&env, &top, "k2"), (vec![], None));
    let gone = audit(&env.dir())
        .into_iter()
        .any(|e| e["event"] == "dequeue" && e["agent"] == "X" && e["reason"] == "gone");
    assert!(gone, "X's leaving is audited");
}

/// The watcher of an agent's process takes it out of every queue when the process dies,
/// so its reservation passes on to the next waiter without anyone meeting it.
#[test]
fn a_watched_agent_that_dies_leaves_its_queues_at_once() {
    let (env, top) = git_env();
    let x = AgentProcess::start();
    let (code, j) = live_json(
        &env,
        &top,
        "X",
        &["heartbeat", "--watch", "--pid", &x.pid(), "--detach"],
    );
    assert_eq!(code, 0, "{j}");
    live_json(&env, &top, "Y", &["checkout", "k1", "--path", "src/a"]);
    live_json(&env, &top, "Y", &["checkout", "k4"]);
    for (who, args) in [
        ("X", &["checkout", "k2", "--path", "src/a", "--queue"][..]),
        ("X", &["checkout", "k4", "--queue"]),
        ("U", &["checkout", "k2", "--path", "src/a", "--queue"]),
    ] {
        let (code, j) = live_json(&env, &top, who, args);
        assert_eq!(code, 2, "{who} {args:?}: {j}");
    }
    live_json(&env, &top, "Y", &["release", "k1"]);
    assert_eq!(queue_of(&env, &top, "k2").1.as_deref(), Some("X"));
    assert!(reserved_keys(&env, &top, "U").is_empty());
    drop(x);
    // No other command meets k2: the watcher alone must pass the reservation on.
    let x_left = || {
        audit(&env.dir())
            .into_iter()
            .filter(|e| e["event"] == "dequeue" && e["agent"] == "X")
            .collect::<Vec<_>>()
    };
    poll_until("the watcher to end X", Duration::from_secs(20), || {
        x_left().len() == 2
    });
    assert!(
        x_left().iter().all(|e| e["reason"] == "agent ended"),
        "audited as the agent's end: {:?}",
        x_left()
    );
    assert_eq!(reserved_keys(&env, &top, "U"), ["k2"]);
    assert_eq!(queue_of(&env, &top, "k4").0, Vec::<String>::new());
}

#[test]
fn leaving_a_queue_by_leave_or_by_release_passes_a_reservation_on() {
    let (env, top) = git_env();
    ok(&env, &top, "A", &["checkout", "k"]);
    for w in ["B", "C", "D"] {
        let (code, _) = json_run(&env, &top, w, &["checkout", "k", "--queue"]);
        assert_eq!(code, 2);
    }
    // `release` of a key another agent holds changes nothing, not even one's place.
    let (code, j) = json_run(&env, &top, "B", &["release", "k"]);
    assert_eq!(code, 4, "{j}");
    assert_eq!(j["results"][0]["outcome"], "not_holder", "{j}");
    assert_eq!(queue_of(&env, &top, "k").0, ["B", "C", "D"]);
    let j = ok(&env, &top, "B", &["leave", "k"]);
    assert_eq!(j["results"][0]["outcome"], "left_queue", "{j}");
    let r = run(&env, &top, "C", &["leave", "k"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "left", r);
    let r = run(&env, &top, "C", &["leave", "k"]);
    assert_eq!(r.code, 3, "not queued any more: {}", r.text());
    snap!(env, "not_queued", r);
    assert_eq!(queue_of(&env, &top, "k").0, ["D"]);

    // A reservation held by the one who leaves passes to the next in line: by `release`
    // of the free key reserved for one, or by `leave`.
    for w in ["E", "G"] {
        let (code, _) = json_run(&env, &top, w, &["checkout", "k", "--queue"]);
        assert_eq!(code, 2);
    }
    ok(&env, &top, "A", &["release", "k"]);
    assert_eq!(queue_of(&env, &top, "k").1.as_deref(), Some("D"));
    let (code, j) = json_run(&env, &top, "D", &["release", "k"]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["results"][0]["outcome"], "left_queue", "{j}");
    assert_eq!(queue_of(&env, &top, "k").1.as_deref(), Some("E"));
    let j = ok(&env, &top, "E", &["leave", "--all"]);
    assert_eq!(j["command"], "leave");
    assert_eq!(j["results"][0]["key"], "k");
    assert_eq!(j["results"][0]["outcome"], "left_queue");
    assert_eq!(
        queue_of(&env, &top, "k"),
        (vec!["G".to_string()], Some("G".to_string()))
    );
    assert_eq!(reserved_keys(&env, &top, "G"), ["k"]);
    // `release --all` leaves queues too, of keys others hold included.
    ok(&env, &top, "G", &["checkout", "k"]);
    ok(&env, &top, "F", &["checkout", "other"]);
    let (code, _) = json_run(&env, &top, "F", &["checkout", "k", "--queue"]);
    assert_eq!(code, 2);
    let j = ok(&env, &top, "F", &["release", "--all"]);
    let outcomes: Vec<(&str, &str)> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes, [("other", "released"), ("k", "left_queue")]);
    let left: Vec<Value> = audit(&env.dir())
        .into_iter()
        .filter(|e| e["event"] == "dequeue" && e["reason"] == "left")
        .map(|e| e["agent"].clone())
        .collect();
    assert_eq!(
        left,
        [json!("B"), json!("C"), json!("D"), json!("E"), json!("F")]
    );
}

/// What one racing agent saw of one `--wait`.
struct Waited {
    limit: Duration,
    took: Duration,
    code: i32,
}

/// 8 agents work 6 files through path checkouts, added paths, queues and blocked waits,
/// while agents are killed (their registered process, `kill -9`) and replaced. Checked:
/// every `--wait` ends within its limit or with `deadlock`, and cycles do occur and are
/// told; from the audit log, no reservation is made while a path its waiter wants is
/// held by an agent that was never killed, no two such agents ever held one file, and
/// no agent is refused because of an agent killed before its command began.
#[test]
fn a_swarm_mixing_paths_queues_and_deaths_never_hangs_or_is_blocked_by_the_dead() {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    std::fs::write(env.dir().join("config.yaml"), "handoff_grace: 3s\n").unwrap();
    let files: Vec<String> = (0..6).map(|i| format!("src/f{i}")).collect();
    let run_for = Duration::from_secs(if on_postgres() { 16 } else { 20 });
    let wait_limit = Duration::from_secs(3);
    let end = Instant::now() + run_for;
    let kills: std::sync::Mutex<Vec<(String, chrono::DateTime<chrono::Utc>)>> = Default::default();
    let procs: std::sync::Mutex<HashMap<String, AgentProcess>> = Default::default();
    let waits: std::sync::Mutex<Vec<Waited>> = Default::default();
    let killed_flags: std::sync::Mutex<BTreeSet<String>> = Default::default();

    std::thread::scope(|s| {
        for a in 0..8usize {
            let (env, top, files, procs, waits, killed_flags) =
                (&env, &top, &files, &procs, &waits, &killed_flags);
            s.spawn(move || {
                let mut rng = a as u64 * 7919 + 17;
                let mut next = move |n: usize| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % n as u64) as usize
                };
                let mut life = 0;
                while Instant::now() < end {
                    life += 1;
                    let me = format!("a{a}.{life}");
                    let p = AgentProcess::start();
                    let pid = p.pid();
                    procs.lock().unwrap().insert(me.clone(), p);
                    live(env, top, &me, &["heartbeat", "--pid", &pid]);
                    let mut round = 0;
                    while Instant::now() < end && !killed_flags.lock().unwrap().contains(&me) {
                        round += 1;
                        let key = format!("t-{me}-{round}");
                        let first = &files[next(files.len())];
                        let second = &files[next(files.len())];
                        let limit = format!("{}s", wait_limit.as_secs());
                        let timed = |args: &[&str]| {
                            let started = Instant::now();
                            let r = live(env, top, &me, args);
                            waits.lock().unwrap().push(Waited {
                                limit: wait_limit,
                                took: started.elapsed(),
                                code: r.code,
                            });
                            r
                        };
                        let r = if next(3) == 0 {
                            // Queue, then take what the inbox hands over.
                            let r = live(
                                env,
                                top,
                                &me,
                                &["checkout", &key, "--path", first, "--queue"],
                            );
                            if r.code == 2 {
                                std::thread::sleep(Duration::from_millis(200));
                                let r = live(env, top, &me, &["inbox", "--json"]);
                                let reserved = r.code == 0
                                    && r.json()["messages"].as_array().is_some_and(|m| {
                                        m.iter().any(|m| {
                                            m["type"] == "reserved" && m["key"] == key.as_str()
                                        })
                                    });
                                if reserved {
                                    live(env, top, &me, &["checkout", &key, "--path", first])
                                } else {
                                    live(env, top, &me, &["leave", &key]);
                                    continue;
                                }
                            } else {
                                r
                            }
                        } else {
                            timed(&["checkout", &key, "--path", first, "--wait", &limit])
                        };
                        if r.code != 0 {
                            continue;
                        }
                        // Add a second path while holding the first: cycles form here.
                        if first != second {
                            timed(&["checkout", &key, "--path", second, "--wait", &limit]);
                        }
                        std::thread::sleep(Duration::from_millis(next(50) as u64));
                        live(env, top, &me, &["release", &key]);
                    }
                }
            });
        }
        // The killer: every 700 ms, kill -9 one agent's registered process.
        s.spawn(|| {
            let mut n = 0usize;
            while Instant::now() + Duration::from_secs(2) < end {
                std::thread::sleep(Duration::from_millis(700));
                n += 1;
                let victim = {
                    let procs = procs.lock().unwrap();
                    let mut names: Vec<&String> = procs.keys().collect();
                    names.sort();
                    let flags = killed_flags.lock().unwrap();
                    names.retain(|k| !flags.contains(*k));
                    if names.is_empty() {
                        continue;
                    }
                    names[(n * 5) % names.len()].clone()
                };
                if let Some(p) = procs.lock().unwrap().get_mut(&victim) {
                    p.kill();
                }
                kills
                    .lock()
                    .unwrap()
                    .push((victim.clone(), std::time::SystemTime::now().into()));
                killed_flags.lock().unwrap().insert(victim);
            }
        });
    });

    let waits = waits.into_inner().unwrap();
    let kills = kills.into_inner().unwrap();
    assert!(kills.len() >= 5, "the killer ran: {}", kills.len());
    let slack = Duration::from_secs(if on_postgres() { 6 } else { 4 });
    for w in &waits {
        assert!(
            w.took <= w.limit + slack,
            "a --wait of {:?} took {:?} (exit {})",
            w.limit,
            w.took,
            w.code
        );
        assert!([0, 2, 5].contains(&w.code), "a --wait exited {}", w.code);
    }
    let deadlocks = waits.iter().filter(|w| w.code == 5).count();
    assert!(
        deadlocks > 0,
        "the swarm formed cycles and was told: {} waits",
        waits.len()
    );

    // Replay the audit log.
    let killed: HashMap<&str, chrono::DateTime<chrono::Utc>> =
        kills.iter().map(|(a, t)| (a.as_str(), *t)).collect();
    let mut held: HashMap<String, (String, Vec<String>)> = HashMap::new();
    let ts =
        |e: &Value| -> chrono::DateTime<chrono::Utc> { e["ts"].as_str().unwrap().parse().unwrap() };
    let paths = |e: &Value| -> Vec<String> {
        e["paths"]
            .as_array()
            .map(|a| a.iter().map(|p| p.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let (mut handoffs, mut grants) = (0, 0);
    for e in audit(&env.dir()) {
        let key = e["key"].as_str().unwrap_or_default().to_string();
        let agent = e["agent"].as_str().unwrap_or_default().to_string();
        let never_killed = |a: &str| !killed.contains_key(a);
        match e["event"].as_str().unwrap() {
            "acquire" | "renew" => {
                grants += 1;
                let mine = paths(&e);
                for (k, (holder, theirs)) in &held {
                    if *k != key && *holder != agent && never_killed(holder) && never_killed(&agent)
                    {
                        assert!(
                            !theirs.iter().any(|p| mine.contains(p)),
                            "{agent} took {mine:?} with {key} while {holder} held {theirs:?} with {k}: {e}"
                        );
                    }
                }
                held.insert(key, (agent, mine));
            }
            "release" | "auto_release" | "force_release" => {
                held.remove(&key);
            }
            "handoff" => {
                handoffs += 1;
                let wanted = paths(&e);
                for (k, (holder, theirs)) in &held {
                    if *holder != agent && never_killed(holder) {
                        assert!(
                            !theirs.iter().any(|p| wanted.contains(p)),
                            "{key} was reserved for {agent} (wanting {wanted:?}) while {holder} held {theirs:?} with {k}: {e}"
                        );
                    }
                }
            }
            "deny" => {
                if let Some(h) = e["holder"].as_str()
                    && let Some(t) = killed.get(h)
                {
                    assert!(
                        ts(&e) <= *t + chrono::Duration::milliseconds(100),
                        "{agent} was refused because of {h}, killed at {t}: {e}"
                    );
                }
            }
            _ => {}
        }
    }
    eprintln!(
        "swarm: {} waits ({deadlocks} deadlocks), {grants} grants, {handoffs} handoffs, {} kills",
        waits.len(),
        kills.len()
    );
    assert!(grants > 20, "the swarm made progress: {grants} grants");
    assert!(handoffs > 0, "queues handed keys on: {handoffs}");
}

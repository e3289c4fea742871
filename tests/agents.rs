//! `tasklock agents`: what it lists by default and with `--all`, in which order, and how
//! it forgets agents dead for longer than `agent_retention`.

#[macro_use]
mod common;
use common::*;

use serde_json::Value;

/// `TASKLOCK_NOW` for T0 plus `mins` minutes.
fn at(mins: i64) -> String {
    let t0 = chrono::DateTime::parse_from_rfc3339(T0).unwrap();
    (t0 + chrono::Duration::minutes(mins))
        .to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn ids(j: &Value) -> Vec<String> {
    j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect()
}

/// Each agent listed, with what it waits for.
fn waits(j: &Value) -> Vec<(String, Value)> {
    j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["waiting_for"].clone(),
            )
        })
        .collect()
}

fn beat(e: &mut Env, agent: &str, mins: i64) {
    e.at(&at(mins));
    e.ok(agent, &["heartbeat"]);
}

/// The ids in the registry, sorted (file names on the lock directory: the ids here need no
/// encoding).
fn registry(e: &Env) -> Vec<String> {
    if on_postgres() {
        return psql(&e.dir(), "SELECT id FROM agents ORDER BY id")
            .lines()
            .map(str::to_string)
            .collect();
    }
    let mut names: Vec<String> = std::fs::read_dir(e.dir().join("agents"))
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn default_lists_live_and_recently_dead_agents_sorted_by_state_then_last_beat() {
    let mut e = Env::new();
    beat(&mut e, "ancient", 0);
    // Twelve agents that beat once around 2h and then went silent: dead by 2h30m.
    for i in 1..=12 {
        beat(&mut e, &format!("d{i:02}"), 120 + i);
    }
    beat(&mut e, "stalled", 145);
    beat(&mut e, "alive-a", 148);
    beat(&mut e, "alive-b", 149);
    // A holder that never beat: judged by its lease, alive, never beat.
    e.at(&at(149));
    e.ok("holder", &["checkout", "task-1", "--timeout", "1h"]);

    e.at(&at(150));
    let md = e.run(None, &["agents"]);
    assert_eq!(md.code, 0, "{}", md.text());
    snap!(e, "agents_default_view", md);
    let j = e.run(None, &["agents", "--json"]);
    assert_eq!(j.code, 0, "{}", j.text());
    let j = j.json();
    let mut expected = vec!["alive-b", "alive-a", "holder", "stalled"];
    let recent: Vec<String> = (3..=12).rev().map(|i| format!("d{i:02}")).collect();
    expected.extend(recent.iter().map(String::as_str));
    assert_eq!(ids(&j), expected);
    assert_eq!(
        j["hidden"], 3,
        "d01, d02 (over the 10 shown) and ancient (over 1h)"
    );
    assert_eq!(j["pruned"], 0);
    let states: Vec<&str> = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["state"].as_str().unwrap())
        .collect();
    assert_eq!(&states[..4], ["alive", "alive", "alive", "stalled"]);
    assert!(states[4..].iter().all(|s| *s == "dead"), "{states:?}");

    // --all: every agent, in the same order, nothing hidden.
    let all = e.run(None, &["agents", "--all", "--json"]);
    assert_eq!(all.code, 0, "{}", all.text());
    let all = all.json();
    assert_eq!(all["hidden"], 0);
    let mut every = expected.clone();
    every.extend(["d02", "d01", "ancient"]);
    assert_eq!(ids(&all), every);
    let md = e.run(None, &["agents", "--all"]);
    assert!(!md.stdout.contains("not shown"), "{}", md.text());
    assert!(md.stdout.contains("| ancient |"), "{}", md.text());
}

#[test]
fn only_old_dead_agents_says_so_instead_of_no_known_agents() {
    let mut e = Env::new();
    beat(&mut e, "old", 0);
    e.at(&at(120));
    let r = e.run(None, &["agents"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(e, "agents_only_hidden", r);
    let j = e.run(None, &["agents", "--json"]).json();
    assert_eq!(j["agents"], serde_json::json!([]));
    assert_eq!(j["hidden"], 1);
}

#[test]
fn agents_dead_past_the_retention_are_forgotten_unless_they_wait_or_hold() {
    let mut e = Env::new();
    beat(&mut e, "gone", 0);
    beat(&mut e, "waiter", 0);
    beat(&mut e, "recent", 60 * 20);
    // 25h later: "alive" holds task-1 and "waiter", silent since T0, is in its queue.
    beat(&mut e, "alive", 60 * 25);
    e.ok("alive", &["checkout", "task-1"]);
    let q = e.run(Some("waiter"), &["checkout", "task-1", "--queue"]);
    assert_eq!(q.code, 2, "{}", q.text());
    assert_eq!(registry(&e), ["alive", "gone", "recent", "waiter"]);

    // A retention longer than the silence: nothing is forgotten.
    e.configure("agent_retention: 2d\n");
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(j["pruned"], 0);
    assert_eq!(registry(&e), ["alive", "gone", "recent", "waiter"]);

    // The default 24h: "gone" is forgotten; the waiter is kept (a waiter without an
    // entry would count as alive), and so is "recent" (5h of silence).
    std::fs::remove_file(e.dir().join("config.yaml")).unwrap();
    let r = e.run(None, &["agents", "--all"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(e, "agents_pruned", r);
    assert_eq!(registry(&e), ["alive", "recent", "waiter"]);
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(j["pruned"], 0, "already forgotten");
    assert_eq!(ids(&j), ["alive", "recent", "waiter"]);

    // Once the waiter has had its turn and left the queue, it goes too.
    e.ok("alive", &["release", "task-1"]);
    e.ok("waiter", &["checkout", "task-1"]);
    e.ok("waiter", &["release", "task-1"]);
    e.at(&at(60 * 25 + 10));
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(ids(&j), ["alive", "recent"], "{j}");
    assert_eq!(j["pruned"], 1, "{j}");
    assert_eq!(registry(&e), ["alive", "recent"]);
    let audit_events: Vec<String> = audit(&e.dir())
        .iter()
        .map(|v| v["event"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !audit_events.iter().any(|ev| ev.contains("prune")),
        "forgetting an agent is not an audited event: {audit_events:?}"
    );
}

/// Forgetting agents is opportunistic: a listing never waits for a busy guard. (On
/// PostgreSQL, where the guard is an advisory lock, `pg_only` holds it from psql.)
#[test]
fn a_busy_guard_delays_forgetting_but_not_the_listing() {
    if file_store_only("a_busy_guard_delays_forgetting_but_not_the_listing") {
        return;
    }
    let mut e = Env::new();
    beat(&mut e, "gone", 0);
    e.at(&at(60 * 25));
    let guard = std::fs::File::open(e.dir().join(".guard")).unwrap();
    guard.lock().unwrap();
    let start = std::time::Instant::now();
    let r = e.run(None, &["agents", "--all", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(r.stderr, "", "no waiting notice");
    let j = r.json();
    assert_eq!(j["pruned"], 0);
    assert_eq!(ids(&j), ["gone"]);
    assert_eq!(registry(&e), ["gone"]);
    // Unlock, not only drop: a child being forked by another test thread may hold a copy
    // of the descriptor, and with it the lock, until it execs.
    guard.unlock().unwrap();
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    assert_eq!(j["pruned"], 1);
    assert!(registry(&e).is_empty());
}

/// Issue 48: an agent that only waits (it never sent a heartbeat and holds nothing) was
/// in no list, not even `agents --all`. It is listed, alive while its place stands, with
/// the keys it waits for; the views say the same.
#[test]
fn an_agent_that_only_waits_is_listed_with_what_it_waits_for() {
    let mut e = Env::new();
    e.at(&at(0));
    e.ok("alice", &["checkout", "k"]);
    let r = e.run(Some("bob"), &["checkout", "k", "--queue"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let j = e.ok("x", &["agents", "--json"]).json();
    assert_eq!(ids(&j), ["alice", "bob"], "{j}");
    let bob = &j["agents"][1];
    assert_eq!(bob["state"], "alive", "{j}");
    assert_eq!(bob["registered"], false, "{j}");
    assert_eq!(bob["waiting_for"], serde_json::json!(["k"]), "{j}");
    assert_eq!(j["agents"][0]["waiting_for"], serde_json::json!([]), "{j}");
    let r = e.run(Some("x"), &["agents"]);
    snap!(e, "waiting_only_agent", r);
    let fleet = e.run(None, &["top", "--once", "--json"]).json();
    let shown = waits(&fleet);
    assert_eq!(
        shown,
        [
            ("alice".to_string(), serde_json::json!([])),
            ("bob".to_string(), serde_json::json!(["k"]))
        ],
        "{fleet}"
    );
}

/// Issue 48: a reservation lapsed only when some command touched the store, so the views
/// still said bob's turn after his grace had ended. They show the queue as the next
/// command would leave it (carol's turn), and looking writes nothing.
#[test]
fn a_lapsed_reservation_is_shown_passed_on_and_looking_writes_nothing() {
    let mut e = Env::new();
    e.at(&at(0));
    e.ok("alice", &["checkout", "k"]);
    for w in ["bob", "carol"] {
        assert_eq!(e.run(Some(w), &["checkout", "k", "--queue"]).code, 2);
    }
    e.ok("alice", &["release", "k"]);
    let fleet = e.run(None, &["top", "--once", "--json"]).json();
    assert_eq!(
        fleet["queues"]["k"]["reserved_for"]["agent"], "bob",
        "{fleet}"
    );

    // Past bob's grace, with no command in between.
    e.at(&at(30));
    let before = stored(&e.dir());
    let fleet = e.run(None, &["top", "--once", "--json"]).json();
    assert_eq!(stored(&e.dir()), before, "looking wrote to the store");
    let k = &fleet["queues"]["k"];
    assert_eq!(k["reserved_for"]["agent"], "carol", "{fleet}");
    assert_eq!(k["waiters"], serde_json::json!(["carol"]), "{fleet}");
    let waiting: Vec<&str> = fleet["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["waiting_for"] == serde_json::json!(["k"]))
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(waiting, ["carol"], "{fleet}");
    // `agents` says the same.
    let j = e.ok("x", &["agents", "--json"]).json();
    let waits = waits(&j);
    assert!(
        waits.contains(&("carol".to_string(), serde_json::json!(["k"])))
            && !waits.iter().any(|(id, _)| id == "bob"),
        "{j}"
    );
}

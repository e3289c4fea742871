//! Keys with slots (`checkout KEY --slots N`, `slots:` in config.yaml): up to N agents
//! hold the key at once, each slot a checkout of its own; FIFO queueing over the slots,
//! death release, changing N, deadlock detection that counts slots, `run`, and a race of
//! 32 processes over 3 slots checked by the times the holders themselves wrote.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const GRANTED: i32 = 0;
const HELD: i32 = 2;
const NOT_HOLDER: i32 = 4;
const USAGE: i32 = 64;

fn checkout(e: &Env, agent: &str, key: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["checkout", key, "--json"];
    args.extend_from_slice(extra);
    let r = e.run(Some(agent), &args);
    (r.code, r.json())
}

fn granted(e: &Env, agent: &str, key: &str, extra: &[&str]) -> Value {
    let (code, j) = checkout(e, agent, key, extra);
    assert_eq!(code, GRANTED, "{agent} checking out {key}: {j}");
    assert_eq!(j["outcome"], "granted", "{j}");
    j["checkout"].clone()
}

fn status(e: &Env, key: &str) -> Value {
    let r = e.run(Some("observer"), &["status", key, "--json"]);
    assert!(r.code == 0 || r.code == 3, "status {key}: {}", r.text());
    r.json()
}

fn holders(e: &Env, key: &str) -> Vec<(u64, String)> {
    status(e, key)["holders"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| {
                    (
                        h["slot"].as_u64().expect("a slot"),
                        h["agent"]["id"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn events<'a>(log: &'a [Value], name: &str) -> Vec<&'a Value> {
    log.iter().filter(|e| e["event"] == name).collect()
}

#[test]
fn up_to_n_agents_hold_a_key_each_in_a_slot_of_its_own() {
    let e = Env::new();
    let mut tokens = Vec::new();
    for (i, a) in ["a", "b", "c"].iter().enumerate() {
        let c = granted(&e, a, "build", &["--slots", "3"]);
        assert_eq!(c["slot"], i as u64 + 1, "{c}");
        assert_eq!(c["slots"], 3, "{c}");
        tokens.push(c["token"].as_u64().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // The fourth is refused (nothing queued), and told who holds the slots.
    let (code, j) = checkout(&e, "d", "build", &[]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["slots"], 3);
    let ids: Vec<&str> = j["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["agent"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(j["position"].is_null(), "{j}");
    let deny = audit(&e.dir());
    let deny = events(&deny, "deny");
    assert_eq!(deny.last().unwrap()["detail"], "all 3 slots are taken");
    snap!(
        e,
        "conflict_all_slots_taken",
        e.run(Some("d"), &["checkout", "build"])
    );
    snap!(e, "list_with_slots", e.run(Some("observer"), &["list"]));
    snap!(
        e,
        "status_with_slots",
        e.run(Some("observer"), &["status", "build"])
    );
    snap!(
        e,
        "why_all_slots_taken",
        e.run(Some("d"), &["why", "build"])
    );
    let list = e.run(Some("observer"), &["list", "--json"]).json();
    let rows: Vec<(String, u64, u64)> = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["agent"]["id"].as_str().unwrap().to_string(),
                c["slot"].as_u64().unwrap(),
                c["slots"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("a".into(), 1, 3), ("b".into(), 2, 3), ("c".into(), 3, 3)]
    );
}

#[test]
fn a_slot_holder_renews_verifies_notes_and_releases_only_its_own_slot() {
    let e = Env::new();
    let a = granted(&e, "a", "build", &["--slots", "2"]);
    let b = granted(&e, "b", "build", &[]);
    assert_eq!(
        b["slot"], 2,
        "a plain checkout takes the count the key keeps: {b}"
    );
    // Checking out again keeps the slot and the token.
    let (code, j) = checkout(&e, "b", "build", &[]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["outcome"], "already_held", "{j}");
    assert_eq!(j["checkout"]["token"], b["token"]);
    assert_eq!(j["checkout"]["slot"], 2);
    e.ok("b", &["renew", "build"]);
    let tb = b["token"].to_string();
    let ta = a["token"].to_string();
    e.ok("b", &["verify", "build", "--token", &tb]);
    // A's token is not B's: B's verify names its own slot.
    let r = e.run(Some("b"), &["verify", "build", "--token", &ta, "--json"]);
    assert_ne!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["outcome"], "stale_token", "{}", r.text());
    e.ok("a", &["note", "build", "half done"]);
    // Someone who holds no slot is not a holder.
    let r = e.run(Some("c"), &["release", "build", "--json"]);
    assert_eq!(r.code, NOT_HOLDER, "{}", r.text());
    e.ok("a", &["release", "build"]);
    assert_eq!(holders(&e, "build"), [(2, "b".to_string())]);
    // The free slot is the lowest number again.
    let c = granted(&e, "c", "build", &[]);
    assert_eq!(c["slot"], 1, "{c}");
    let log = audit(&e.dir());
    let acquires = events(&log, "acquire");
    assert_eq!(acquires[0]["detail"], "slot 1 of 2");
    assert_eq!(acquires[1]["detail"], "slot 2 of 2");
}

#[test]
fn waiters_are_served_in_fifo_order_one_per_free_slot() {
    let e = Env::new();
    for a in ["a", "b", "c"] {
        granted(&e, a, "build", &["--slots", "3"]);
    }
    for (i, a) in ["d", "e", "f"].iter().enumerate() {
        let (code, j) = checkout(&e, a, "build", &["--queue"]);
        assert_eq!(code, HELD, "{j}");
        assert_eq!(j["position"], i as u64 + 1, "{j}");
    }
    e.ok("a", &["release", "build"]);
    e.ok("b", &["release", "build"]);
    snap!(
        e,
        "list_free_slots_reserved",
        e.run(Some("observer"), &["list"])
    );
    // Two slots free: the first two in line each have one reserved, the third waits.
    let s = status(&e, "build");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "d", "{s}");
    assert_eq!(s["queue"]["also_reserved"][0]["agent"], "e", "{s}");
    assert_eq!(s["queue"]["also_reserved"].as_array().unwrap().len(), 1);
    // The third in line cannot jump ahead, nor can a newcomer.
    let (code, _) = checkout(&e, "f", "build", &[]);
    assert_eq!(code, HELD);
    let r = e.run(Some("g"), &["checkout", "build"]);
    assert_eq!(r.code, HELD);
    snap!(e, "conflict_free_slots_reserved", r);
    for a in ["d", "e"] {
        let inbox = e.run(Some(a), &["inbox", "--json"]).json();
        let m = &inbox["messages"][0];
        assert_eq!(m["type"], "reserved", "{inbox}");
        assert!(
            m["body"]
                .as_str()
                .unwrap()
                .contains("a slot of the key is free")
        );
    }
    // Served in either order, each into a slot of its own.
    let e_slot = granted(&e, "e", "build", &[])["slot"].clone();
    let d_slot = granted(&e, "d", "build", &[])["slot"].clone();
    let mut got = BTreeSet::new();
    got.insert(d_slot.as_u64().unwrap());
    got.insert(e_slot.as_u64().unwrap());
    assert_eq!(got, BTreeSet::from([1, 2]));
    let s = status(&e, "build");
    assert_eq!(s["queue"]["waiters"], json!(["f"]), "{s}");
    e.ok("c", &["release", "build"]);
    assert_eq!(granted(&e, "f", "build", &[])["slot"], 3);
}

#[test]
fn a_dead_holder_loses_its_slot_to_the_next_in_line() {
    let e = Env::new();
    let mut p = AgentProcess::start();
    e.ok("a", &["heartbeat", "--pid", &p.pid()]);
    granted(&e, "a", "build", &["--slots", "2"]);
    granted(&e, "b", "build", &[]);
    let (code, _) = checkout(&e, "c", "build", &["--queue"]);
    assert_eq!(code, HELD);
    p.kill();
    // The next in line takes the dead agent's slot; the live one keeps its own.
    let (code, j) = checkout(&e, "c", "build", &[]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["checkout"]["slot"], 1, "{j}");
    assert_eq!(j["took_over"]["agent"]["id"], "a", "{j}");
    assert_eq!(j["took_over"]["reason"], "agent_death", "{j}");
    assert_eq!(
        holders(&e, "build"),
        [(1, "c".to_string()), (2, "b".to_string())]
    );
    // A dead agent holds nothing: a scan (list) ends a dead slot holder too.
    let mut q = AgentProcess::start();
    e.ok("b", &["heartbeat", "--pid", &q.pid()]);
    q.kill();
    e.run(Some("observer"), &["list"]);
    assert_eq!(holders(&e, "build"), [(1, "c".to_string())]);
}

#[test]
fn a_slot_whose_lease_ran_out_is_taken_over() {
    let mut e = Env::new();
    granted(&e, "a", "build", &["--slots", "2", "--timeout", "1m"]);
    granted(&e, "b", "build", &["--timeout", "1h"]);
    e.at(T5M);
    let (code, j) = checkout(&e, "c", "build", &[]);
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["took_over"]["agent"]["id"], "a");
    assert_eq!(j["took_over"]["reason"], "timeout");
    // The holder whose lease ran out learns it lost the slot.
    let r = e.run(Some("a"), &["verify", "build", "--token", "1", "--json"]);
    assert_ne!(r.code, 0, "{}", r.text());
}

#[test]
fn changing_the_count_while_held_applies_from_then_on() {
    let e = Env::new();
    for a in ["a", "b", "c"] {
        granted(&e, a, "build", &["--slots", "3"]);
    }
    // Down to 2: nobody loses a slot, but nobody new gets one until fewer than 2 hold.
    let (code, j) = checkout(&e, "d", "build", &["--slots", "2", "--queue"]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["slots"], 2, "{j}");
    let s = status(&e, "build");
    assert_eq!(s["slots"], 2, "{s}");
    assert!(
        s["holders"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["slots"] == 2),
        "every slot's record keeps the new count: {s}"
    );
    let log = audit(&e.dir());
    assert_eq!(events(&log, "slots").last().unwrap()["detail"], "3 → 2");
    e.ok("a", &["release", "build"]);
    let s = status(&e, "build");
    assert!(s["queue"]["reserved_for"].is_null(), "2 held of 2: {s}");
    e.ok("b", &["release", "build"]);
    let s = status(&e, "build");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "d", "{s}");
    assert_eq!(granted(&e, "d", "build", &[])["slots"], 2);

    // Up to 4, with two waiting: both are served at once.
    let (code, _) = checkout(&e, "e", "build", &["--queue"]);
    assert_eq!(code, HELD);
    let (code, _) = checkout(&e, "f", "build", &["--queue"]);
    assert_eq!(code, HELD);
    let (code, j) = checkout(&e, "g", "build", &["--slots", "4", "--queue"]);
    assert_eq!(code, HELD, "{j}");
    let s = status(&e, "build");
    assert_eq!(s["queue"]["reserved_for"]["agent"], "e", "{s}");
    assert_eq!(s["queue"]["also_reserved"][0]["agent"], "f", "{s}");
    assert_eq!(s["queue"]["waiters"], json!(["e", "f", "g"]));
    granted(&e, "e", "build", &[]);
    granted(&e, "f", "build", &[]);
    assert_eq!(holders(&e, "build").len(), 4);
    // The count is forgotten when nobody holds or waits: the key is a plain key again.
    for a in ["c", "d", "e", "f"] {
        e.ok(a, &["release", "build"]);
    }
    e.ok("g", &["leave", "build"]);
    let c = granted(&e, "h", "build", &[]);
    assert!(c["slot"].is_null(), "{c}");
    let (code, _) = checkout(&e, "i", "build", &[]);
    assert_eq!(code, HELD);
}

#[test]
fn config_gives_keys_their_slots() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(
        e.dir().join("config.yaml"),
        "slots:\n  - key: cargo-build\n    slots: 2\n  - key: \"test-db-*\"\n    slots: 3\n",
    )
    .unwrap();
    granted(&e, "a", "cargo-build", &[]);
    granted(&e, "b", "cargo-build", &[]);
    assert_eq!(checkout(&e, "c", "cargo-build", &[]).0, HELD);
    for a in ["a", "b", "c"] {
        assert_eq!(granted(&e, a, "test-db-eu", &[])["slots"], 3);
    }
    // --slots wins over the config.
    let r = e.run(Some("d"), &["checkout", "cargo-build", "--slots", "3"]);
    assert_eq!(r.code, GRANTED, "{}", r.text());
    snap!(e, "granted_a_slot", r);
    let h = holders(&e, "cargo-build");
    assert_eq!(h.last().unwrap(), &(3, "d".to_string()), "{h:?}");
    // A bad entry is a config error, named.
    std::fs::write(
        e.dir().join("config.yaml"),
        "slots:\n  - key: x\n    slots: 0\n",
    )
    .unwrap();
    let r = e.run(Some("a"), &["checkout", "x"]);
    assert_ne!(r.code, 0);
    assert!(r.text().contains("slots"), "{}", r.text());
}

/// Every checkout of the key, from `list`: never more than its slots.
fn listed(e: &Env, key: &str) -> usize {
    let list = e.run(Some("observer"), &["list", "--json"]).json();
    list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["key"] == key)
        .count()
}

#[test]
fn a_key_with_slots_takes_no_path_and_never_gets_a_holder_more() {
    let e = Env::new();
    granted(&e, "a", "build", &["--slots", "2"]);
    granted(&e, "b", "build", &[]);
    // Full: a checkout with a path is refused as the README says, not a third holder.
    let r = e.run(Some("c"), &["checkout", "build", "--path", "src/x"]);
    assert_eq!(r.code, USAGE, "{}", r.text());
    assert!(
        r.stderr.contains("a key with slots takes no --path"),
        "{}",
        r.text()
    );
    let j = e
        .run(
            Some("c"),
            &["checkout", "build", "--path", "src/x", "--json"],
        )
        .json();
    assert_eq!(j["error"]["kind"], "usage", "{j}");
    assert_eq!(j["error"]["exit_code"], USAGE, "{j}");
    for extra in [&["--queue"][..], &["--wait", "1s"]] {
        let mut args = vec!["checkout", "build", "--path", "src/x"];
        args.extend_from_slice(extra);
        let r = e.run(Some("c"), &args);
        assert_eq!(r.code, USAGE, "{extra:?}: {}", r.text());
    }
    assert_eq!(listed(&e, "build"), 2);
    assert!(
        status(&e, "build")["queue"]["waiters"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    // With a slot free, and by a holder of a slot, it is refused all the same.
    e.ok("b", &["release", "build"]);
    for agent in ["c", "a"] {
        let r = e.run(Some(agent), &["checkout", "build", "--path", "src/x"]);
        assert_eq!(r.code, USAGE, "{agent}: {}", r.text());
    }
    assert_eq!(holders(&e, "build"), [(1, "a".to_string())]);
    // A key that config.yaml gives slots takes none either, even while nobody holds it;
    // checkouts of paths alone are never given slots by a pattern that matches their key.
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(
        e.dir().join("config.yaml"),
        "slots:\n  - key: test-db\n    slots: 2\n  - key: \"*\"\n    slots: 3\n",
    )
    .unwrap();
    let r = e.run(Some("c"), &["checkout", "test-db", "--path", "db/**"]);
    assert_eq!(r.code, USAGE, "{}", r.text());
    let c = e.ok("c", &["checkout", "--path", "db/**", "--json"]).json();
    assert_eq!(c["outcome"], "granted", "{c}");
    assert!(c["checkout"]["slot"].is_null(), "{c}");
    assert_eq!(listed(&e, "test-db"), 0);
}

#[test]
fn a_plain_checkout_keeps_the_count_the_key_has() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(
        e.dir().join("config.yaml"),
        "slots:\n  - key: build\n    slots: 2\n",
    )
    .unwrap();
    granted(&e, "a", "build", &["--slots", "4"]);
    granted(&e, "b", "build", &[]);
    granted(&e, "c", "build", &[]);
    // Past config.yaml's 2: the key has 4, so a plain checkout takes the fourth.
    let d = granted(&e, "d", "build", &[]);
    assert_eq!(
        (d["slot"].as_u64(), d["slots"].as_u64()),
        (Some(4), Some(4))
    );
    // Full, the next one is refused, saying 4; a holder checking out again renews.
    let (code, j) = checkout(&e, "e", "build", &["--queue"]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["slots"], 4, "{j}");
    let (code, j) = checkout(&e, "a", "build", &[]);
    assert_eq!(
        (code, &j["outcome"]),
        (GRANTED, &json!("already_held")),
        "{j}"
    );
    assert_eq!(j["checkout"]["slots"], 4, "{j}");
    // The waiter's plain checkout once a slot frees keeps 4 too.
    e.ok("b", &["release", "build"]);
    assert_eq!(granted(&e, "e", "build", &[])["slots"], 4);
    let s = status(&e, "build");
    assert_eq!(s["slots"], 4, "{s}");
    assert_eq!(holders(&e, "build").len(), 4);
    let log = audit(&e.dir());
    assert!(
        events(&log, "slots").is_empty(),
        "{:?}",
        events(&log, "slots")
    );
    // Once nobody holds or waits, config.yaml's count applies again.
    for a in ["a", "c", "d", "e"] {
        e.ok(a, &["release", "build"]);
    }
    assert_eq!(granted(&e, "f", "build", &[])["slots"], 2);
}

#[test]
fn bad_slot_counts_are_usage_errors() {
    let e = Env::new();
    for bad in ["0", "-1", "x", "1001"] {
        let r = e.run(Some("a"), &["checkout", "k", "--slots", bad]);
        assert_eq!(r.code, USAGE, "--slots {bad}: {}", r.text());
    }
    let r = e.run(
        Some("a"),
        &["checkout", "k", "--slots", "2", "--path", "src/**"],
    );
    assert_eq!(r.code, USAGE, "{}", r.text());
    let r = e.run(Some("a"), &["checkout", "k", "j", "--any", "--slots", "2"]);
    assert_eq!(r.code, USAGE, "{}", r.text());
}

#[test]
fn deadlock_detection_counts_slots() {
    let e = Env::new();
    // a and b hold the two slots of `build`; c holds x.
    granted(&e, "a", "build", &["--slots", "2"]);
    granted(&e, "b", "build", &[]);
    granted(&e, "c", "x", &[]);
    // a waits for x.
    assert_eq!(checkout(&e, "a", "x", &["--queue"]).0, HELD);
    // c waiting for a slot is no deadlock: b is free to let its slot go.
    let (code, j) = checkout(&e, "c", "build", &["--queue"]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["outcome"], "conflict");
    // But once b waits for x too, every slot's holder waits on c: a cycle, broken by
    // dropping c's passive place (`--queue`) in the queue of `build` (issue 46).
    let (code, j) = checkout(&e, "b", "x", &["--queue"]);
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["position"], 2, "{j}");
    let dropped = j["dropped"].as_array().expect("a place dropped");
    assert_eq!(dropped.len(), 1, "{j}");
    assert_eq!(dropped[0]["agent"], "c", "{j}");
    assert_eq!(dropped[0]["key"], "build", "{j}");
    let cycle: Vec<&str> = dropped[0]["cycle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&cycle[..2], ["c", "build"], "{j}");
    assert!(cycle.contains(&"b"), "through b's wait: {j}");
}

#[test]
fn slot_holder_waiting_on_a_plain_key_closes_a_cycle_only_through_every_slot() {
    let e = Env::new();
    // One slot of two held, by a: c waits for nothing (a slot is free).
    granted(&e, "a", "build", &["--slots", "2"]);
    granted(&e, "c", "x", &[]);
    assert_eq!(checkout(&e, "a", "x", &["--queue"]).0, HELD);
    let (code, j) = checkout(&e, "c", "build", &[]);
    assert_eq!(code, GRANTED, "a free slot: {j}");
    e.ok("c", &["release", "build"]);
    // With the only other slot held by c itself, c waiting... holds it; a second
    // agent d holding the last slot and waiting for x makes c's wait a deadlock.
    granted(&e, "d", "build", &[]);
    assert_eq!(checkout(&e, "d", "x", &["--queue"]).0, HELD);
    // A cycle through every slot's holder's wait, broken by dropping one of those
    // passive places (issue 46): c waits.
    let (code, j) = checkout(&e, "c", "build", &["--queue"]);
    assert_eq!(code, HELD, "{j}");
    let dropped = j["dropped"].as_array().expect("a place dropped");
    assert_eq!(dropped.len(), 1, "{j}");
    assert_eq!(dropped[0]["key"], "x", "{j}");
    assert_eq!(
        dropped[0]["cycle"].as_array().unwrap().last().unwrap(),
        &dropped[0]["agent"],
        "{j}"
    );
}

/// `run --slots N` on the real clock.
fn run_cmd(e: &Env, agent: &str, extra: &[&str], script: &str) -> std::process::Command {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.env_remove("TASKLOCK_NOW")
        .arg("--dir")
        .arg(e.dir())
        .args(["run", "build", "--slots", "3"])
        .args(extra)
        .args(["--agent", agent, "--", "sh", "-c", script]);
    cmd
}

#[test]
fn run_takes_a_slot_and_frees_it_when_the_command_ends() {
    let e = Env::new();
    let out = e.tmp.path().join("out");
    let script = format!(
        "{} --dir {} status build --json > {}",
        env!("CARGO_BIN_EXE_tasklock"),
        e.dir().display(),
        out.display()
    );
    let r = exec(run_cmd(&e, "a", &[], &script));
    assert_eq!(r.code, 0, "{}", r.text());
    let inside: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(inside["holders"][0]["agent"]["id"], "a", "{inside}");
    assert_eq!(inside["holders"][0]["slot"], 1, "{inside}");
    assert!(
        holders(&e, "build").is_empty(),
        "released after the command"
    );
}

/// One racer: `rounds` times, `run build --slots 3 --wait` a command that logs when it
/// enters and leaves (nanoseconds since the epoch, from the shell's own clock).
fn racer(e: &Env, agent: &str, rounds: usize, log: &std::path::Path) -> Child {
    let tl = env!("CARGO_BIN_EXE_tasklock");
    let store = pg_url_for(&e.dir())
        .map(|u| format!("TASKLOCK_URL='{u}' "))
        .unwrap_or_default()
        + &pg_session_url()
            .map(|u| format!("TASKLOCK_SESSION_URL='{u}' "))
            .unwrap_or_default();
    let script = format!(
        r#"i=0
while [ $i -lt {rounds} ]; do
  {store}{tl} --dir '{dir}' run build --slots 3 --wait 120s --agent {agent} -- sh -c '
    echo "enter $(date +%s%N) {agent}" >> "{log}"
    sleep 0.0$(( $$ % 5 + 1 ))
    echo "leave $(date +%s%N) {agent}" >> "{log}"' || exit 1
  i=$((i+1))
done"#,
        dir = e.dir().display(),
        log = log.display(),
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script])
        .env_remove("TASKLOCK_NOW")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

#[test]
fn thirty_two_processes_race_for_three_slots_and_never_more_than_three_are_inside() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    let log = e.tmp.path().join("inside.log");
    const RACERS: usize = 32;
    const ROUNDS: usize = 4;
    let children: Vec<(String, Child)> = (0..RACERS)
        .map(|i| {
            let a = format!("racer-{i:02}");
            let c = racer(&e, &a, ROUNDS, &log);
            (a, c)
        })
        .collect();
    wait_all_ok(children, Duration::from_secs(300));
    // Replay the holders' own log: at no moment more than 3 inside.
    let events = inside_log(&log);
    assert_eq!(
        events.len(),
        RACERS * ROUNDS * 2,
        "every round entered and left"
    );
    let mut inside = BTreeSet::new();
    let mut most = 0;
    for (t, enter, who) in &events {
        if *enter {
            assert!(inside.insert(who.clone()), "{who} entered twice at {t}");
        } else {
            assert!(inside.remove(who), "{who} left without entering at {t}");
        }
        assert!(
            inside.len() <= 3,
            "{} inside at {t}: {inside:?}",
            inside.len()
        );
        most = most.max(inside.len());
    }
    // Overlap depends on the machine's load (the commands are short); more than one
    // inside at once shows the slots are used side by side at all.
    assert!(most >= 2, "never more than {most} inside at once");
    // No slot lost: every one is free again, and the audit shows each slot's grants
    // and releases alternating.
    assert!(holders(&e, "build").is_empty());
    let log = audit(&e.dir());
    let mut held: std::collections::HashMap<u64, bool> = Default::default();
    let mut by_token: std::collections::HashMap<u64, u64> = Default::default();
    for ev in &log {
        match ev["event"].as_str().unwrap() {
            "acquire" => {
                let d = ev["detail"].as_str().unwrap();
                let slot: u64 = d
                    .strip_prefix("slot ")
                    .and_then(|s| s.split(' ').next())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(slot <= 3, "{ev}");
                assert!(
                    !held.get(&slot).copied().unwrap_or(false),
                    "slot {slot} granted twice: {ev}"
                );
                held.insert(slot, true);
                by_token.insert(ev["token"].as_u64().unwrap(), slot);
            }
            "release" | "auto_release" => {
                let slot = by_token[&ev["token"].as_u64().unwrap()];
                held.insert(slot, false);
            }
            _ => {}
        }
    }
    assert_eq!(by_token.len(), RACERS * ROUNDS, "one grant per round");
    assert!(held.values().all(|h| !h), "every slot released: {held:?}");
    // And the key still has all three: three agents get one each, a fourth none.
    let mut got = BTreeSet::new();
    for a in ["after-1", "after-2", "after-3"] {
        let c = granted(&e, a, "build", &["--slots", "3"]);
        got.insert(c["slot"].as_u64().unwrap());
    }
    assert_eq!(got, BTreeSet::from([1, 2, 3]));
    assert_eq!(checkout(&e, "after-4", "build", &[]).0, HELD);
}

#[test]
fn heartbeats_renew_each_holder_s_own_slot() {
    let mut e = Env::new();
    granted(&e, "a", "build", &["--slots", "2", "--timeout", "3m"]);
    granted(&e, "b", "build", &["--timeout", "3m"]);
    let before = status(&e, "build")["holders"].clone();
    e.at("2026-01-01T00:02:00Z");
    e.ok("b", &["heartbeat"]);
    let after = status(&e, "build")["holders"].clone();
    assert_eq!(
        after[0]["expires_at"], before[0]["expires_at"],
        "a's slot untouched"
    );
    assert_ne!(
        after[1]["expires_at"], before[1]["expires_at"],
        "b's slot renewed"
    );
    assert_eq!(
        after[1]["token"], before[1]["token"],
        "renewal keeps the token"
    );
    assert_eq!(after[1]["slot"], 2);
}

#[test]
fn checkout_any_takes_a_free_slot_and_skips_a_full_key() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(
        e.dir().join("config.yaml"),
        "slots:\n  - key: build\n    slots: 2\n",
    )
    .unwrap();
    let r = e
        .ok("a", &["checkout", "--any", "build", "other", "--json"])
        .json();
    assert_eq!(r["key"], "build", "{r}");
    assert_eq!(r["checkout"]["slot"], 1, "{r}");
    let r = e
        .ok("b", &["checkout", "--any", "build", "other", "--json"])
        .json();
    assert_eq!(r["checkout"]["slot"], 2, "{r}");
    let r = e
        .ok("c", &["checkout", "--any", "build", "other", "--json"])
        .json();
    assert_eq!(r["key"], "other", "a full key is passed over: {r}");
}

//! The project's backlog (`backlog add|remove|show`, `checkout --next`, `release --done`):
//! keys claimed in order, racers never sharing a key, keys given back in their place,
//! the index repaired when it lags the checkouts (a plain checkout, a lease run out, a
//! dead claimer), frozen keys passed over, and the output.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

const GRANTED: i32 = 0;
const HELD: i32 = 2;
const EMPTY: i32 = 3;
const USAGE: i32 = 64;

/// `checkout --next` as `agent`: its exit code and JSON.
fn next(e: &Env, agent: &str) -> (i32, Value) {
    let r = e.run(Some(agent), &["checkout", "--next", "--json"]);
    (r.code, r.json())
}

/// The key `agent` claims next (the claim must be granted).
fn claims(e: &Env, agent: &str) -> String {
    let (code, j) = next(e, agent);
    assert_eq!(code, GRANTED, "{agent}: {j}");
    assert_eq!(j["outcome"], "granted", "{j}");
    j["key"].as_str().unwrap().to_string()
}

fn show(e: &Env) -> Value {
    e.ok("observer", &["backlog", "--json"]).json()
}

/// The keys of a `next` (or `claims`) array, in order.
fn keys_of(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect()
}

/// The claims of a `backlog` show, as (key, agent), in order.
fn claimed_by(show: &Value) -> Vec<(&str, &str)> {
    show["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap(),
                c["claimed_by"].as_str().unwrap(),
            )
        })
        .collect()
}

fn add(e: &Env, keys: &[&str]) -> Value {
    let mut args = vec!["backlog", "add", "--json"];
    args.extend_from_slice(keys);
    e.ok("observer", &args).json()
}

#[test]
fn keys_are_claimed_in_order_and_each_once() {
    let e = Env::new();
    let j = add(&e, &["t1", "t2", "t3"]);
    assert_eq!(j["action"], "add");
    assert_eq!(j["added"], 3);
    assert_eq!(j["ready"], 3);
    // Adding again keeps each key's place; only the new one goes at the end.
    let j = add(&e, &["t2", "t4"]);
    assert_eq!(j["added"], 1);
    let order = keys_of(&j["next"]);
    assert_eq!(order, ["t1", "t2", "t3", "t4"]);
    assert_eq!(claims(&e, "a"), "t1");
    assert_eq!(claims(&e, "b"), "t2");
    assert_eq!(claims(&e, "a"), "t3");
    let s = show(&e);
    assert_eq!(
        (s["ready"].as_u64(), s["claimed"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(claimed_by(&s), [("t1", "a"), ("t2", "b"), ("t3", "a")]);
    // Each claim is a checkout like any other.
    let st = e.ok("observer", &["status", "t2", "--json"]).json();
    assert_eq!(st["checkout"]["agent"]["id"], "b", "{st}");
}

/// Keys and agent ids with quotes, dollar signs and braces are claimed and marked as
/// given: PostgreSQL writes a claim's mark with the COMMIT, as literals in the SQL
/// text, where these would end a badly quoted one early.
#[test]
fn keys_and_agents_with_quotes_and_dollars_are_claimed_as_given() {
    let e = Env::new();
    let keys = ["k$tl", "it's", "$tl$;DROP$tl$", "{s}.x", "a\\b", "k$tl1$"];
    add(&e, &keys);
    let agents = ["o'neil", "$tl$", "x$tl", "{s}", "c\\d", "$tl1$y"];
    for (agent, key) in agents.iter().zip(keys) {
        assert_eq!(claims(&e, agent), key, "{agent}");
    }
    let s = show(&e);
    assert_eq!(s["ready"], 0, "{s}");
    let want: Vec<(&str, &str)> = keys.iter().copied().zip(agents).collect();
    assert_eq!(claimed_by(&s), want);
    // A claim released goes back as the key it was.
    e.ok("$tl$", &["release", "it's"]);
    let s = show(&e);
    assert_eq!(keys_of(&s["next"]), ["it's"], "{s}");
}

#[test]
fn a_released_key_goes_back_in_its_place_and_done_takes_it_out() {
    let e = Env::new();
    add(&e, &["t1", "t2", "t3"]);
    assert_eq!(claims(&e, "a"), "t1");
    assert_eq!(claims(&e, "b"), "t2");
    // Given back (not finished): first in line again, before t3.
    e.ok("a", &["release", "t1"]);
    assert_eq!(claims(&e, "c"), "t1");
    // Finished: out of the backlog for good.
    e.ok("b", &["release", "t2", "--done"]);
    e.ok("c", &["release", "t1", "--done"]);
    let s = show(&e);
    assert_eq!(
        (s["ready"].as_u64(), s["claimed"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(s["next"][0]["key"], "t3");
    assert_eq!(claims(&e, "a"), "t3");
    // Every key claimed: exit 2, naming the claimers.
    let (code, j) = next(&e, "b");
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["claimed"], 1);
    assert_eq!(j["claimers"], serde_json::json!(["a"]));
    e.ok("a", &["release", "t3", "--done"]);
    // Nothing left at all: exit 3.
    let (code, j) = next(&e, "b");
    assert_eq!(code, EMPTY, "{j}");
    assert_eq!(j["outcome"], "backlog_empty");
    assert_eq!(
        (j["ready"].as_u64(), j["claimed"].as_u64()),
        (Some(0), Some(0))
    );
    // The audit log has the claims as acquires, and no deny for an empty backlog.
    if !on_postgres() {
        let log = audit(&e.dir());
        let acquired = log.iter().filter(|v| v["event"] == "acquire").count();
        assert_eq!(acquired, 4, "{log:?}");
    }
}

#[test]
fn a_key_taken_by_a_plain_checkout_is_passed_over_then_offered_again() {
    let e = Env::new();
    add(&e, &["t1", "t2"]);
    e.ok("z", &["checkout", "t1"]);
    assert_eq!(claims(&e, "a"), "t2");
    // The backlog learned who holds t1.
    let s = show(&e);
    assert_eq!(s["claims"][0]["key"], "t1");
    assert_eq!(s["claims"][0]["claimed_by"], "z");
    // Once released it is ready again.
    e.ok("z", &["release", "t1"]);
    assert_eq!(claims(&e, "b"), "t1");
    // A key removed while claimed stays checked out; releasing it does not bring it back.
    let j = e
        .ok("observer", &["backlog", "remove", "t1", "nope", "--json"])
        .json();
    assert_eq!(j["removed"], serde_json::json!(["t1"]));
    e.ok("b", &["status", "t1"]);
    e.ok("b", &["release", "t1"]);
    let s = show(&e);
    assert_eq!(
        (s["ready"].as_u64(), s["claimed"].as_u64()),
        (Some(0), Some(1))
    );
}

#[test]
fn a_claim_whose_lease_ran_out_is_claimed_again() {
    let mut e = Env::new();
    add(&e, &["t1", "t2"]);
    let r = e.ok("a", &["checkout", "--next", "--timeout", "1m", "--json"]);
    assert_eq!(r.json()["key"], "t1");
    assert_eq!(claims(&e, "b"), "t2");
    let (code, _) = next(&e, "c");
    assert_eq!(code, HELD);
    // Past a's lease: the next claim finds it lapsed and takes it over.
    e.at("2026-01-01T00:05:00Z");
    let (code, j) = next(&e, "c");
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["key"], "t1");
    assert_eq!(j["took_over"]["agent"]["id"], "a", "{j}");
    assert_eq!(j["took_over"]["reason"], "timeout", "{j}");
    let s = show(&e);
    let by: BTreeSet<(String, String)> = s["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap().to_string(),
                c["claimed_by"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        by,
        BTreeSet::from([("t1".into(), "c".into()), ("t2".into(), "b".into())])
    );
}

/// Spawn per task leaves a claimer per claim. A refused claim names each claimer once,
/// in byte order, however many there are: on PostgreSQL the summary finds the first 64 by
/// index probes and reads the claims in one pass past that, so the names are checked on
/// both sides of the boundary. The text names ten and counts the rest.
#[test]
fn every_claimer_is_named_once_however_many_there_are() {
    let e = Env::new();
    let keys: Vec<String> = (0..64).map(|i| format!("t-{i:02}")).collect();
    add(&e, &keys.iter().map(String::as_str).collect::<Vec<_>>());
    // One claimer with two claims, so claims and claimers differ.
    claims(&e, "spawned-00");
    claims(&e, "spawned-00");
    for i in 1..63 {
        claims(&e, &format!("spawned-{i:02}"));
    }
    for claimers in 63..=65 {
        if claimers > 63 {
            let key = format!("t-{claimers:02}");
            add(&e, &[&key]);
            claims(&e, &format!("spawned-{:02}", claimers - 1));
        }
        let (code, j) = next(&e, "late");
        assert_eq!(code, HELD, "{j}");
        assert_eq!(
            (&j["ready"], &j["claimed"]),
            (&0.into(), &(claimers + 1).into()),
            "{j}"
        );
        let named: Vec<&str> = j["claimers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let want: Vec<String> = (0..claimers).map(|i| format!("spawned-{i:02}")).collect();
        assert_eq!(named, want, "{claimers} claimers, each once, in order: {j}");
    }
    // The text names the first ten and counts the rest.
    snap!(
        e,
        "next_many_claimers",
        e.run(Some("late"), &["checkout", "--next"])
    );
}

#[test]
fn a_dead_claimers_key_is_claimed_again() {
    let e = Env::new();
    add(&e, &["t1", "t2"]);
    let mut p = AgentProcess::start();
    e.ok("a", &["heartbeat", "--pid", &p.pid()]);
    assert_eq!(claims(&e, "a"), "t1");
    assert_eq!(claims(&e, "b"), "t2");
    p.kill();
    let (code, j) = next(&e, "c");
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["key"], "t1");
    assert_eq!(j["took_over"]["reason"], "agent_death", "{j}");
}

#[test]
fn frozen_keys_keep_their_place_and_are_passed_over() {
    let e = Env::new();
    add(&e, &["t1", "t2"]);
    e.ok("op", &["freeze", "t1", "--for", "1h"]);
    assert_eq!(claims(&e, "a"), "t2");
    let (code, j) = next(&e, "b");
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["outcome"], "conflict", "{j}");
    assert_eq!(j["refused"][0]["key"], "t1");
    assert_eq!(j["refused"][0]["outcome"], "frozen");
    snap!(e, "next_refused", e.run(Some("b"), &["checkout", "--next"]));
    e.ok("a", &["release", "t2", "--done"]);
    // Only frozen keys left: exit 2, frozen.
    let (code, j) = next(&e, "b");
    assert_eq!(code, HELD, "{j}");
    assert_eq!(j["outcome"], "frozen", "{j}");
    snap!(e, "next_frozen", e.run(Some("b"), &["checkout", "--next"]));
    e.ok("op", &["unfreeze", "t1"]);
    assert_eq!(claims(&e, "b"), "t1");
}

#[test]
fn keys_come_from_a_file_or_standard_input() {
    let e = Env::new();
    let list = e.tmp.path().join("keys.txt");
    std::fs::write(&list, "# the sprint\nt1\n\n  t2  \nt1\n").unwrap();
    let j = e
        .ok(
            "observer",
            &["backlog", "add", "--file", list.to_str().unwrap(), "--json"],
        )
        .json();
    assert_eq!(j["added"], 2);
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["backlog", "add", "t0", "--file", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"t3\nt4\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["added"], 3);
    let order = keys_of(&j["next"]);
    assert_eq!(order, ["t1", "t2", "t0", "t3", "t4"]);
    // A bad key names its line, and nothing is added.
    std::fs::write(&list, "t9\nbad\tkey\n").unwrap();
    let r = e.run(
        Some("observer"),
        &["backlog", "add", "--file", list.to_str().unwrap()],
    );
    assert_eq!(r.code, USAGE, "{}", r.text());
    assert!(r.stderr.contains("line 2"), "{}", r.stderr);
    assert_eq!(show(&e)["ready"], 5);
    // Usage errors.
    for args in [
        &["backlog", "add"][..],
        &["backlog", "remove"],
        &["checkout", "--next", "t1"],
        &["checkout", "--next", "--any"],
        &["release", "t1", "--done", "--force"],
    ] {
        let r = e.run(Some("a"), args);
        assert_eq!(r.code, USAGE, "{args:?}: {}", r.text());
    }
}

#[test]
fn output_for_agents() {
    let e = Env::new();
    snap!(e, "show_empty", e.run(Some("a"), &["backlog"]));
    snap!(e, "next_empty", e.run(Some("a"), &["checkout", "--next"]));
    snap!(
        e,
        "add",
        e.run(Some("a"), &["backlog", "add", "t1", "t2", "t3"])
    );
    e.ok("a", &["checkout", "--next"]);
    e.ok("b", &["checkout", "--next"]);
    snap!(e, "show", e.run(Some("a"), &["backlog"]));
    snap!(
        e,
        "remove",
        e.run(Some("a"), &["backlog", "remove", "t3", "t9"])
    );
    snap!(
        e,
        "next_all_claimed",
        e.run(Some("c"), &["checkout", "--next"])
    );
}

/// Many processes claim from one backlog at once: every key is handed out exactly once,
/// tokens are never reused, and claims end when the backlog has nothing ready.
#[test]
fn racing_claimers_never_share_a_key() {
    const KEYS: usize = 120;
    const CLAIMERS: usize = 12;
    let e = Env::new();
    let list = e.tmp.path().join("keys.txt");
    let keys: Vec<String> = (0..KEYS).map(|i| format!("task-{i:03}")).collect();
    std::fs::write(&list, keys.join("\n")).unwrap();
    e.ok(
        "observer",
        &["backlog", "add", "--file", list.to_str().unwrap()],
    );
    let out_dir = e.tmp.path().join("claims");
    std::fs::create_dir(&out_dir).unwrap();
    let tl = env!("CARGO_BIN_EXE_tasklock");
    let store = pg_url_for(&e.dir())
        .map(|u| format!("TASKLOCK_URL='{u}' "))
        .unwrap_or_default();
    let mut children = Vec::new();
    for c in 0..CLAIMERS {
        // Each claimer claims until told nothing is ready (exit 2), logging each claim.
        let script = format!(
            r#"while :; do
  out=$({store}{tl} --dir '{dir}' --agent claimer-{c} checkout --next --json)
  rc=$?
  [ $rc -eq 0 ] || break
  printf '%s\n' "$out" >> '{out}/{c}'
done
[ $rc -eq 2 ] || {{ echo "exit $rc: $out" >&2; exit 1; }}"#,
            dir = e.dir().display(),
            out = out_dir.display(),
        );
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script])
            .env("TASKLOCK_NOW", &e.now)
            .env_remove("TASKLOCK_AGENT")
            .env_remove("TASKLOCK_DIR")
            .env_remove("TASKLOCK_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        children.push((format!("claimer-{c}"), cmd.spawn().unwrap()));
    }
    wait_all_ok(children, Duration::from_secs(240));
    let mut seen_keys = BTreeSet::new();
    let mut seen_tokens = BTreeSet::new();
    let mut per_claimer = Vec::new();
    for c in 0..CLAIMERS {
        let text = std::fs::read_to_string(out_dir.join(c.to_string())).unwrap_or_default();
        let mut n = 0;
        for line in text.lines() {
            let j: Value = serde_json::from_str(line).unwrap();
            assert_eq!(j["outcome"], "granted", "{j}");
            assert_eq!(j["checkout"]["agent"]["id"], format!("claimer-{c}"));
            let key = j["key"].as_str().unwrap().to_string();
            assert!(seen_keys.insert(key.clone()), "{key} handed out twice");
            let token = j["checkout"]["token"].as_u64().unwrap();
            assert!(seen_tokens.insert(token), "token {token} handed out twice");
            n += 1;
        }
        per_claimer.push(n);
    }
    assert_eq!(seen_keys.len(), KEYS, "claims per claimer: {per_claimer:?}");
    let s = show(&e);
    assert_eq!(
        (s["ready"].as_u64(), s["claimed"].as_u64()),
        (Some(0), Some(KEYS as u64))
    );
}

/// A key with slots in the backlog: when its claimer lets go of its slot while another
/// agent holds one, the key is given back at once (a slot is free), not kept claimed by
/// the agent that let go until its lease would have ended.
#[test]
fn a_released_slot_gives_its_key_back() {
    let e = Env::new();
    e.configure("slots:\n  - key: build\n    slots: 2\n");
    add(&e, &["build"]);
    assert_eq!(claims(&e, "a"), "build");
    e.ok("b", &["checkout", "build"]);
    e.ok("a", &["release", "build"]);
    let s = show(&e);
    assert_eq!(
        (s["ready"].as_u64(), s["claimed"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    // The free slot is claimed at once.
    let (code, j) = next(&e, "c");
    assert_eq!(code, GRANTED, "{j}");
    assert_eq!(j["key"], "build");
    let s = show(&e);
    assert_eq!(s["claims"][0]["claimed_by"], "c", "{s}");
    // Done: the backlog is empty, though b still holds its slot.
    e.ok("c", &["release", "build", "--done"]);
    e.ok("b", &["release", "build"]);
    let (code, j) = next(&e, "d");
    assert_eq!(code, EMPTY, "{j}");
}

/// `backlog add --file` of an endless input (`/dev/zero`, `yes |`) stops at its bound
/// with a usage error instead of reading until memory runs out.
#[test]
fn an_endless_file_of_keys_is_refused_at_its_bound() {
    let e = Env::new();
    let tl = env!("CARGO_BIN_EXE_tasklock");
    let store = pg_url_for(&e.dir())
        .map(|u| format!("TASKLOCK_URL='{u}' "))
        .unwrap_or_default();
    let dir = e.dir().display().to_string();
    for (what, script) in [
        (
            "/dev/zero",
            format!("{store}{tl} --dir '{dir}' --agent o backlog add --file /dev/zero --json"),
        ),
        (
            "yes |",
            format!("yes | {store}{tl} --dir '{dir}' --agent o backlog add --file - --json"),
        ),
    ] {
        // Under 4 GiB of address space, so that a command reading without bound fails
        // quickly instead of taking the machine's memory.
        let script = format!("ulimit -v 4194304 && {script}");
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("TASKLOCK_NOW", &e.now)
            .env_remove("TASKLOCK_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: still reading after 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(USAGE), "{what}: {out:?}");
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["error"]["kind"], "usage", "{what}: {j}");
        let m = j["error"]["message"].as_str().unwrap();
        assert!(m.contains("more than 16 MiB"), "{what}: {m}");
    }
    // Nothing was added.
    let (code, j) = next(&e, "a");
    assert_eq!(code, EMPTY, "{j}");
}

/// Spawn per task on the lock directory: each claim by a new agent writes one small file
/// of its own (`backlog/claimers/`), so `state.json` does not grow with the number of
/// agents that ever claimed; the claimers are still all named when nothing is ready, and
/// a backlog whose `state.json` keeps them (an older version's) moves them out at the
/// next claim.
#[test]
fn claimers_are_kept_one_file_each() {
    if file_store_only("claimers_are_kept_one_file_each") {
        return;
    }
    let e = Env::new();
    let keys: Vec<String> = (0..12).map(|i| format!("t-{i:02}")).collect();
    add(&e, &keys.iter().map(String::as_str).collect::<Vec<_>>());
    let state = e.dir().join("backlog/state.json");
    let size = || std::fs::metadata(&state).unwrap().len();
    claims(&e, "spawned-0");
    let first = size();
    for i in 1..10 {
        claims(&e, &format!("spawned-{i}"));
    }
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(size() <= first + 2 && !text.contains("spawned"), "{text}");
    let claimers = e.dir().join("backlog/claimers");
    assert_eq!(std::fs::read_dir(&claimers).unwrap().count(), 10);
    e.ok("spawned-3", &["release", "t-03"]);
    assert_eq!(std::fs::read_dir(&claimers).unwrap().count(), 9);

    // An older version's state.json, with the claimers in it: moved out by the next claim.
    let mut s: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    s["holders"] = serde_json::json!({"old-claimer": 1});
    std::fs::write(&state, s.to_string()).unwrap();
    claims(&e, "spawned-10");
    claims(&e, "spawned-11");
    let s: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert!(s.get("holders").is_none(), "{s}");
    assert_eq!(std::fs::read_dir(&claimers).unwrap().count(), 12);

    // Nothing ready: every claimer is named.
    claims(&e, "spawned-12");
    let (code, j) = next(&e, "late");
    assert_eq!(code, HELD, "{j}");
    let mut named: Vec<String> = j["claimers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    named.sort();
    let mut want: Vec<String> = (0..13)
        .filter(|i| *i != 3)
        .map(|i| format!("spawned-{i}"))
        .chain(["old-claimer".to_string()])
        .collect();
    want.sort();
    assert_eq!(named, want);
}

/// `state.json` is replaced without waiting for the disk, so a power loss soon after a
/// change can leave it empty or cut short. Such a file is counted again from the other
/// files: the backlog shows the same counts, hands out the next key in order and every
/// key once, and a lapsed claim is found at once (the recount makes its recheck due).
#[test]
fn an_emptied_state_is_counted_again_from_the_other_files() {
    if file_store_only("an_emptied_state_is_counted_again_from_the_other_files") {
        return;
    }
    let mut e = Env::new();
    add(&e, &["t1", "t2", "t3", "t4", "t5"]);
    let r = e.ok("a", &["checkout", "--next", "--timeout", "1m", "--json"]);
    assert_eq!(r.json()["key"], "t1");
    assert_eq!(claims(&e, "b"), "t2");
    // t2 given back: it waits in returned/, first in line again.
    e.ok("b", &["release", "t2"]);
    let before = show(&e);
    let state = e.dir().join("backlog/state.json");
    for damage in ["", "{\"head\":1,\"ta"] {
        std::fs::write(&state, damage).unwrap();
        let now = show(&e);
        assert_eq!(
            (&now["ready"], &now["claimed"], &now["next"]),
            (&before["ready"], &before["claimed"], &before["next"]),
            "after writing {damage:?}: {now}"
        );
    }
    assert_eq!(
        (before["ready"].as_u64(), before["claimed"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(claims(&e, "c"), "t2");
    assert_eq!(claims(&e, "c"), "t3");
    // The claim rewrote the state whole.
    let s: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(
        (s["ready"].as_u64(), s["tail"].as_u64()),
        (Some(2), Some(5)),
        "{s}"
    );

    // Damaged again, with claims out, and t1's short lease over: the recount's recheck
    // finds that claim once nothing else is ready.
    std::fs::write(&state, "").unwrap();
    assert_eq!(claims(&e, "d"), "t4");
    assert_eq!(claims(&e, "d"), "t5");
    e.now = "2026-01-01T00:10:00Z".into();
    std::fs::write(&state, "").unwrap();
    let (code, j) = next(&e, "late");
    assert_eq!((code, j["key"].as_str()), (GRANTED, Some("t1")), "{j}");
    let (code, j) = next(&e, "later");
    assert_eq!(code, HELD, "every key is claimed once: {j}");
}

/// `backlog add` and `backlog remove` of 10,000 keys under the usual limit of 1024 open
/// files: a command keeps no descriptor per key it removes.
#[test]
fn ten_thousand_keys_are_added_and_removed_at_the_default_open_file_limit() {
    let e = Env::new();
    let keys: Vec<String> = (1..=10_000).map(|i| format!("key-{i:05}")).collect();
    let file = e.tmp.path().join("keys.txt");
    std::fs::write(&file, keys.join("\n")).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.arg("--dir").arg(e.dir()).args(args);
        let r = exec_with_open_files(cmd, 1024);
        assert_eq!(r.code, 0, "{args:.3?}…: {}", r.text());
        r.json()
    };
    let added = run(&["backlog", "add", "--json", "--file", file.to_str().unwrap()]);
    assert_eq!(added["added"], 10_000, "{added}");
    let shown = show(&e);
    assert_eq!(shown["ready"], 10_000, "{shown}");
    assert_eq!(keys_of(&shown["next"])[0], "key-00001");

    // All but the last, and one that is not in it.
    let mut args = vec!["backlog", "remove", "--json", "--"];
    args.extend(keys[..9_999].iter().map(String::as_str));
    args.push("not-in-it");
    let removed = run(&args);
    assert_eq!(removed["removed"].as_array().unwrap().len(), 9_999);
    assert_eq!(removed["removed"][0], "key-00001");
    let shown = show(&e);
    assert_eq!(shown["ready"], 1, "{shown}");
    assert_eq!(keys_of(&shown["next"]), ["key-10000"]);
    assert_eq!(claims(&e, "a1"), "key-10000");
}

/// `backlog remove --file` reads keys as `add --file` does (one a line, `#` and blank
/// lines skipped); with neither keys nor a file it is a usage error.
#[test]
fn remove_reads_its_keys_from_a_file_as_add_does() {
    let e = Env::new();
    e.ok("ops", &["backlog", "add", "a", "b", "c"]);
    let file = e.tmp.path().join("done.txt");
    std::fs::write(&file, "# finished\na\n\nc\n").unwrap();
    let r = e.ok(
        "ops",
        &[
            "backlog",
            "remove",
            "--json",
            "--file",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        r.json()["removed"],
        serde_json::json!(["a", "c"]),
        "{}",
        r.text()
    );
    assert_eq!(keys_of(&show(&e)["next"]), ["b"]);
    assert_eq!(e.run(Some("ops"), &["backlog", "remove"]).code, 64);

    // Many keys: ten are named, the rest counted (the JSON above names every key).
    let many: Vec<String> = (1..=12).map(|i| format!("k{i:02}")).collect();
    let mut add = vec!["backlog", "add"];
    add.extend(many.iter().map(String::as_str));
    e.ok("ops", &add);
    std::fs::write(&file, many.join("\n")).unwrap();
    snap!(
        e,
        "remove_many",
        e.run(
            Some("ops"),
            &["backlog", "remove", "--file", file.to_str().unwrap()]
        )
    );
}

/// A bulk add writes a file per chunk of keys, not one per key: 20,000 keys are a few
/// index shards and queue chunks under `backlog/` (the layout before them had two files
/// a key), and the keys are still claimed in order, removed, and counted.
#[test]
fn a_bulk_add_writes_files_per_chunk_not_per_key() {
    if file_store_only("a_bulk_add_writes_files_per_chunk_not_per_key") {
        return;
    }
    let e = Env::new();
    let keys: Vec<String> = (1..=20_000).map(|i| format!("job-{i}")).collect();
    let file = e.tmp.path().join("keys.txt");
    std::fs::write(&file, keys.join("\n")).unwrap();
    let r = e.ok(
        "ops",
        &["backlog", "add", "--json", "--file", file.to_str().unwrap()],
    );
    assert_eq!(r.json()["added"], 20_000, "{}", r.text());
    let backlog = e.dir().join("backlog");
    let written = files(&backlog).len();
    assert!(
        written * 10 < keys.len(),
        "{written} files under backlog/ for {} keys",
        keys.len()
    );
    // Added again (with one new key): the members keep their places.
    std::fs::write(&file, format!("{}\njob-new", keys[..100].join("\n"))).unwrap();
    let r = e.ok(
        "ops",
        &["backlog", "add", "--json", "--file", file.to_str().unwrap()],
    );
    assert_eq!(r.json()["added"], 1, "{}", r.text());
    assert_eq!(claims(&e, "a"), "job-1");
    assert_eq!(claims(&e, "a"), "job-2");
    e.ok("ops", &["backlog", "remove", "job-3", "job-5", "job-2"]);
    assert_eq!(claims(&e, "b"), "job-4");
    e.ok("a", &["release", "job-1"]);
    let shown = show(&e);
    assert_eq!(
        (shown["ready"].as_u64(), shown["claimed"].as_u64()),
        (Some(19_997), Some(1)),
        "{shown}"
    );
    assert_eq!(keys_of(&shown["next"])[..3], ["job-1", "job-6", "job-7"]);
    assert_eq!(claimed_by(&shown), [("job-4", "b")]);
    assert!(files(&backlog).len() <= written + 4);
}

/// A backlog in the layout before `backlog/index/` is moved into it by the first
/// command that reads it (`backlog`, which reads without the guard, takes it to move
/// it): the same counts, order and claims, the old files gone; a journal an older version
/// left half made (a key added) is made first.
#[test]
fn a_backlog_of_a_file_per_key_is_moved_on_first_use() {
    if file_store_only("a_backlog_of_a_file_per_key_is_moved_on_first_use") {
        return;
    }
    let e = Env::new();
    e.ok("b", &["checkout", "t2", "--timeout", "2h"]);
    old_backlog_layout(
        &e.dir(),
        &["t1", "t2", "t3", "t4", "t5"],
        &[("t2", "b")],
        &["t4"],
    );
    let journal = e.dir().join("tmp").join("backlog.journal");
    std::fs::write(
        &journal,
        r#"{"steps":[{"part":"members","name":"t6","data":"{\"key\":\"t6\",\"seq\":5}"},{"part":"pending","name":"5","data":"t6"},{"part":"state","name":"state.json","data":"{\"head\":0,\"tail\":6,\"ready\":5,\"claimed\":1,\"recheck\":\"2026-01-01T01:00:00Z\",\"holders\":{\"b\":1}}"}]}"#,
    )
    .unwrap();
    let shown = show(&e);
    let b = e.dir().join("backlog");
    for gone in ["members", "pending", "members.moved"] {
        assert!(!b.join(gone).exists(), "{gone} is left: {shown}");
    }
    assert!(!journal.exists());
    assert_eq!(
        (shown["ready"].as_u64(), shown["claimed"].as_u64()),
        (Some(5), Some(1)),
        "{shown}"
    );
    assert_eq!(keys_of(&shown["next"]), ["t1", "t3", "t4", "t5", "t6"]);
    assert_eq!(claimed_by(&shown), [("t2", "b")]);
    for k in ["t1", "t3", "t4", "t5", "t6"] {
        assert_eq!(claims(&e, "a"), k);
    }
    let (code, j) = next(&e, "a");
    assert_eq!(code, HELD, "{j}");
    // The old claim is a claim: released, t2 is ready again.
    e.ok("b", &["release", "t2"]);
    assert_eq!(claims(&e, "c"), "t2");
    e.ok("ops", &["backlog", "remove", "t1", "t2"]);
    let shown = show(&e);
    assert_eq!(
        (shown["ready"].as_u64(), shown["claimed"].as_u64()),
        (Some(0), Some(4)),
        "{shown}"
    );
}

/// The index shards of the lock directory's backlog: each file's inode (a shard is
/// replaced whole when written), and the entries they hold in all.
fn index_shards(e: &Env) -> (BTreeMap<String, u64>, usize) {
    use std::os::unix::fs::MetadataExt;
    let mut inodes = BTreeMap::new();
    let mut entries = 0;
    for f in std::fs::read_dir(e.dir().join("backlog/index")).unwrap() {
        let f = f.unwrap();
        let shard: BTreeMap<String, u64> =
            serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
        entries += shard.len();
        let name = f.file_name().into_string().unwrap();
        inodes.insert(name, f.metadata().unwrap().ino());
    }
    (inodes, entries)
}

/// The counts and the next keys of `backlog --json`.
fn counts_and_next(e: &Env) -> (u64, u64, Vec<String>) {
    let s = show(e);
    let next = keys_of(&s["next"]).into_iter().map(String::from).collect();
    (
        s["ready"].as_u64().unwrap(),
        s["claimed"].as_u64().unwrap(),
        next,
    )
}

/// A drain's `release --done` writes no index shard of the lock directory: it removes
/// the claim, and the key's index entry, left behind, makes no member. Done keys
/// (claimed at the head, past a frozen key, after being given back) are not in the
/// backlog: `remove` finds none of them, `add` adds them again at the end, and the counts
/// and the next keys say so; an add that rewrites the shards drops those left entries
/// while keeping the claimed and given-back keys' ones.
#[test]
fn done_keys_leave_no_member_behind_and_come_back_when_added_again() {
    let e = Env::new();
    let keys: Vec<String> = (1..=20).map(|i| format!("k{i:02}")).collect();
    add(&e, &keys.iter().map(String::as_str).collect::<Vec<_>>());
    let file_store = !on_postgres();
    let before = file_store.then(|| index_shards(&e));
    for k in &keys[..8] {
        assert_eq!(&claims(&e, "a"), k);
        e.ok("a", &["release", k, "--done"]);
    }
    // Claimed out of order (k09 frozen at the head), then done.
    e.ok("op", &["freeze", "k09", "--for", "1h"]);
    assert_eq!(claims(&e, "a"), "k10");
    e.ok("a", &["release", "k10", "--done"]);
    // Given back, claimed again from `returned/`, then done.
    assert_eq!(claims(&e, "b"), "k11");
    e.ok("b", &["release", "k11"]);
    assert_eq!(claims(&e, "c"), "k11");
    e.ok("c", &["release", "k11", "--done"]);
    if let Some((inodes, entries)) = &before {
        let (now, left) = index_shards(&e);
        assert_eq!(&now, inodes, "the drain rewrote index shards");
        assert_eq!(
            (*entries, left),
            (20, 20),
            "the done keys' entries are left"
        );
    }
    e.ok("op", &["unfreeze", "k09"]);
    let mut ready: Vec<String> = ["k09", "k12", "k13", "k14", "k15", "k16", "k17"]
        .into_iter()
        .chain(["k18", "k19", "k20"])
        .map(String::from)
        .collect();
    assert_eq!(counts_and_next(&e), (10, 0, ready.clone()));

    let r = add(&e, &["k01", "k10", "k11", "k12"]);
    assert_eq!(r["added"], 3, "k12 is a member, the others were done: {r}");
    let r = e.ok(
        "o",
        &["backlog", "remove", "--json", "k02", "k03", "k10", "k13"],
    );
    assert_eq!(
        r.json()["removed"],
        serde_json::json!(["k10", "k13"]),
        "{}",
        r.text()
    );
    let r = e.ok("o", &["backlog", "remove", "--json", "k04", "k05"]);
    assert_eq!(r.json()["removed"], serde_json::json!([]), "{}", r.text());
    ready.retain(|k| k != "k13");
    ready.extend(["k01".to_string()]);
    assert_eq!(counts_and_next(&e), (11, 0, ready.clone()));

    // A claim (below the head) and a key given back, kept through a bulk add that
    // writes every shard.
    assert_eq!(claims(&e, "d"), "k09");
    assert_eq!(claims(&e, "d"), "k12");
    e.ok("d", &["release", "k12"]);
    let more: Vec<String> = (0..10_000).map(|i| format!("more-{i}")).collect();
    let file = e.tmp.path().join("more.txt");
    std::fs::write(&file, more.join("\n")).unwrap();
    let r = e.ok(
        "o",
        &["backlog", "add", "--json", "--file", file.to_str().unwrap()],
    );
    assert_eq!(r.json()["added"], 10_000, "{}", r.text());
    let (ready_n, claimed_n, next) = counts_and_next(&e);
    assert_eq!((ready_n, claimed_n), (10_010, 1));
    assert_eq!(next[..3], ["k12", "k14", "k15"]);
    if file_store {
        let (inodes, entries) = index_shards(&e);
        assert_eq!(inodes.len(), 1024, "the add wrote every shard");
        assert_eq!(entries, 10_011, "no entry but the members' is left");
    }
    e.ok("d", &["release", "k09"]);
    for k in ["k09", "k12", "k14"] {
        assert_eq!(claims(&e, "x"), k);
    }
    assert_eq!(next[7..], ["k20", "k01", "k11"]);
}

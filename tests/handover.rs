//! The next holder of a key is told who held it last, how that ended, and its notes:
//! after a normal release, a force release, a checkout ended by another command, and a
//! queue handoff.

#[macro_use]
mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

fn note_texts(prev: &Value) -> Vec<String> {
    prev["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_fresh_key_has_no_previous() {
    let e = Env::new();
    let j = e.ok("a", &["checkout", "k", "--json"]).json();
    assert_eq!(j["previous"], Value::Null);
}

#[test]
fn a_normal_release_with_a_note_reaches_the_next_holder() {
    let mut e = Env::new();
    e.ok("a", &["checkout", "k", "--name", "researcher"]);
    e.ok("a", &["note", "k", "parser fixed; lexer next"]);
    e.at(T5M);
    e.ok("a", &["release", "k", "--note", "done in PR #51"]);
    e.at("2026-01-01T00:10:00Z");
    let j = e.ok("b", &["checkout", "k", "--json"]).json();
    let p = &j["previous"];
    assert_eq!(p["agent"]["id"], "a");
    assert_eq!(p["agent"]["name"], "researcher");
    assert_eq!(p["token"], 1);
    assert_eq!(p["ended"], "released");
    assert_eq!(p["ended_at"], T5M);
    assert_eq!(p["by"], Value::Null);
    assert_eq!(p["cause"], Value::Null);
    assert_eq!(p["note"], "done in PR #51");
    assert_eq!(
        note_texts(p),
        ["parser fixed; lexer next", "done in PR #51"],
        "the release note joined the key's history"
    );
    assert_eq!(j["took_over"], Value::Null);

    // Markdown says the same.
    e.ok("b", &["release", "k"]);
    let r = e.run(Some("c"), &["checkout", "k"]);
    assert_eq!(r.code, 0);
    assert!(
        r.stdout
            .contains("- Previous holder: b (token 2), released it 2026-01-01T00:10:00Z (now)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("done in PR #51"),
        "notes survive a release without one"
    );
    snap!(e, "checkout_after_normal_release", r);
}

#[test]
fn a_force_release_reaches_the_next_holder_with_its_note() {
    let mut e = Env::new();
    e.as_operator();
    e.ok("a", &["checkout", "k"]);
    e.ok(
        "ops",
        &["release", "k", "--force", "--note", "-stuck for an hour"],
    );
    let j = e.ok("b", &["checkout", "k", "--json"]).json();
    let p = &j["previous"];
    assert_eq!(p["agent"]["id"], "a");
    assert_eq!(p["ended"], "force_released");
    assert_eq!(p["by"], "ops");
    assert_eq!(p["note"], "-stuck for an hour");
    assert_eq!(note_texts(p), ["-stuck for an hour"]);
    assert_eq!(p["notes"][0]["agent"], "ops");
}

#[test]
fn a_checkout_ended_by_a_third_agents_list_still_reaches_the_next_holder() {
    let mut e = Env::new();
    e.ok("a", &["checkout", "k", "--timeout", "1m"]);
    e.ok("a", &["note", "k", "half done"]);
    e.at(T5M);
    // A third agent's list ends the checkout whose lease ran out.
    let l = e.ok("c", &["list", "--json"]).json();
    assert_eq!(l["checkouts"], serde_json::json!([]));
    e.at("2026-01-01T00:06:00Z");
    let r = e.run(Some("b"), &["checkout", "k"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(e, "checkout_after_reap_by_list", r);
    e.ok("b", &["release", "k"]);
    // The fact is about b now; check the one b saw through JSON on a second key.
    e.ok("a", &["checkout", "k2", "--timeout", "1m"]);
    e.at("2026-01-01T00:08:00Z");
    e.ok("c", &["list"]);
    let j = e.ok("b", &["checkout", "k2", "--json"]).json();
    let p = &j["previous"];
    assert_eq!(p["agent"]["id"], "a");
    assert_eq!(p["ended"], "timeout");
    assert_eq!(p["by"], "c");
    assert_eq!(p["ended_at"], "2026-01-01T00:08:00Z");
    assert_eq!(j["took_over"], Value::Null, "b took over nothing itself");
}

#[test]
fn a_dead_agents_checkout_ended_by_a_heartbeat_reaches_the_next_holder() {
    let mut e = Env::new();
    let mut sleep = Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = sleep.id().to_string();
    e.ok("a", &["heartbeat", "--pid", &pid]);
    e.ok("a", &["checkout", "k"]);
    e.ok("a", &["note", "k", "migrations 1-3 applied"]);
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    // A third agent's heartbeat, the first after the sweep interval, meets the dead
    // holder's checkout and ends it.
    e.at("2026-01-01T00:00:10Z");
    let h = e.ok("c", &["heartbeat", "--json"]).json();
    assert_eq!(h["ended"][0]["key"], "k");
    let j = e.ok("b", &["checkout", "k", "--json"]).json();
    let p = &j["previous"];
    assert_eq!(p["agent"]["id"], "a");
    assert_eq!(p["ended"], "agent_death");
    assert_eq!(p["cause"], "process_gone");
    assert_eq!(p["by"], "c");
    assert_eq!(note_texts(p), ["migrations 1-3 applied"]);
    e.ok("b", &["release", "k"]);
}

#[test]
fn the_head_of_a_queue_sees_the_handover_and_its_reserved_message_is_done() {
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    assert_eq!(e.run(Some("b"), &["checkout", "k", "--queue"]).code, 2);
    e.ok("a", &["release", "k", "--note", "ready for review"]);
    let inbox = e.ok("b", &["inbox", "--peek", "--json"]).json();
    assert_eq!(inbox["messages"][0]["type"], "reserved");
    let j = e.ok("b", &["checkout", "k", "--json"]).json();
    assert_eq!(j["outcome"], "granted");
    let p = &j["previous"];
    assert_eq!(p["agent"]["id"], "a");
    assert_eq!(p["ended"], "released");
    assert_eq!(note_texts(p), ["ready for review"]);
    // The `reserved` message did its job: it is read now.
    let inbox = e.ok("b", &["inbox", "--peek", "--json"]).json();
    assert_eq!(inbox["messages"], serde_json::json!([]), "{inbox}");
    let read = std::fs::read_dir(e.dir().join("inbox").join("b").join("read"))
        .unwrap()
        .count();
    assert_eq!(read, 1);
}

#[test]
fn a_reserved_message_for_another_key_stays_unread() {
    let e = Env::new();
    e.ok("a", &["checkout", "k1"]);
    e.ok("a", &["checkout", "k2"]);
    assert_eq!(e.run(Some("b"), &["checkout", "k1", "--queue"]).code, 2);
    assert_eq!(e.run(Some("b"), &["checkout", "k2", "--queue"]).code, 2);
    e.ok("a", &["release", "k1", "k2"]);
    e.ok("b", &["checkout", "k1"]);
    let inbox = e.ok("b", &["inbox", "--peek", "--json"]).json();
    let msgs = inbox["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{inbox}");
    assert_eq!(msgs[0]["key"], "k2");
}

//! The command line through the real binary: outputs (insta snapshots with the clock
//! pinned), JSON parsed, exit codes, bad input and bad data.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

// ---------------------------------------------------------------- checkout

#[test]
fn checkout_grant_conflict_and_renew_by_holder() {
    let e = Env::new();
    let r = e.run(
        Some("agent-a"),
        &[
            "checkout",
            "task-x",
            "--reason",
            "fix login bug",
            "--name",
            "researcher",
        ],
    );
    assert_eq!(r.code, 0);
    snap!(e, "checkout_granted", r);

    let r = e.run(
        Some("agent-b"),
        &["checkout", "task-x", "--name", "reviewer"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    snap!(e, "checkout_conflict", r);

    let mut e = e;
    e.at(T5M);
    let r = e.run(Some("agent-a"), &["checkout", "task-x", "--timeout", "1h"]);
    assert_eq!(r.code, 0);
    snap!(e, "checkout_renewed_by_holder", r);
    let j = e
        .run(Some("agent-a"), &["status", "task-x", "--json"])
        .json();
    assert_eq!(j["checkout"]["token"], 1, "re-checkout keeps the token");
    assert_eq!(j["checkout"]["expires_at"], "2026-01-01T01:05:00Z");
    assert_eq!(j["checkout"]["reason"], "fix login bug", "reason kept");
    assert_eq!(j["checkout"]["agent"]["name"], "researcher", "name kept");

    let events: Vec<String> = audit(&e.dir())
        .iter()
        .map(|v| v["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["acquire", "deny", "renew"]);
}

#[test]
fn checkout_json_is_parsed() {
    let e = Env::new();
    let j = e
        .ok(
            "agent-a",
            &[
                "checkout",
                "github://acme/app/issues/42",
                "--json",
                "--timeout",
                "45m",
            ],
        )
        .json();
    assert_eq!(j["command"], "checkout");
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["key"], "github://acme/app/issues/42");
    assert_eq!(j["checkout"]["token"], 1);
    assert_eq!(j["checkout"]["agent"]["id"], "agent-a");
    assert_eq!(j["checkout"]["agent"]["host"], host());
    assert_eq!(j["checkout"]["acquired_at"], T0);
    assert_eq!(j["checkout"]["expires_at"], "2026-01-01T00:45:00Z");
    assert_eq!(j["took_over"], Value::Null);
    assert_eq!(j["queue_length"], 0);

    let r = e.run(
        Some("agent-b"),
        &["--json", "checkout", "github://acme/app/issues/42"],
    );
    assert_eq!(r.code, 2);
    let j = r.json();
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["checkout"]["agent"]["id"], "agent-a");
    assert_eq!(j["checkout"]["token"], 1);
}

#[test]
fn tokens_increase_across_grants_and_keys() {
    let e = Env::new();
    let mut last = 0;
    for (agent, key) in [("a", "k1"), ("b", "k2"), ("a", "k3")] {
        let t = e.ok(agent, &["checkout", key, "--json"]).json()["checkout"]["token"]
            .as_u64()
            .unwrap();
        assert!(t > last);
        last = t;
    }
    e.ok("a", &["release", "k1"]);
    let t = e.ok("b", &["checkout", "k1", "--json"]).json()["checkout"]["token"]
        .as_u64()
        .unwrap();
    assert_eq!(t, last + 1, "a re-grant after release gets a new token");
}

#[test]
fn expired_lease_is_taken_over_and_audited() {
    let mut e = Env::new();
    e.ok(
        "agent-a",
        &[
            "checkout",
            "task-x",
            "--timeout",
            "10m",
            "--name",
            "slowpoke",
        ],
    );
    // Just past the end, within the skew margin: still protected from others.
    e.at("2026-01-01T00:10:01Z");
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-x"]).code, 2);
    e.at(T1H);
    let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
    assert_eq!(r.code, 0);
    snap!(e, "checkout_took_over_expired", r);
    let j = e
        .run(Some("agent-b"), &["status", "task-x", "--json"])
        .json();
    assert_eq!(j["checkout"]["token"], 2);
    let a = audit(&e.dir());
    let auto: Vec<&Value> = a.iter().filter(|v| v["event"] == "auto_release").collect();
    assert_eq!(auto.len(), 1);
    assert_eq!(auto[0]["agent"], "agent-a");
    assert_eq!(auto[0]["reason"], "timeout");
    assert_eq!(auto[0]["token"], 1);
    assert_eq!(auto[0]["by"], "agent-b");
}

#[test]
fn holder_whose_lease_ran_out_gets_a_new_token_not_a_revival() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "task-x", "--timeout", "10m"]);
    e.at(T1H);
    let j = e.ok("agent-a", &["checkout", "task-x", "--json"]).json();
    assert_eq!(j["outcome"], "granted");
    assert_eq!(j["checkout"]["token"], 2);
    assert_eq!(j["took_over"]["token"], 1);
}

// ---------------------------------------------------------------- release

#[test]
fn release_outcomes() {
    let mut e = Env::new();
    e.as_operator();
    e.ok("agent-a", &["checkout", "task-x", "--reason", "fix"]);
    let r = e.run(Some("agent-b"), &["release", "task-x"]);
    assert_eq!(r.code, 4);
    snap!(e, "release_not_holder", r);

    let r = e.run(
        Some("agent-a"),
        &["release", "task-x", "--note", "done, PR #51"],
    );
    assert_eq!(r.code, 0);
    snap!(e, "release_released", r);

    let r = e.run(Some("agent-a"), &["release", "task-x"]);
    assert_eq!(r.code, 3);
    snap!(e, "release_no_such_checkout", r);

    e.ok("agent-a", &["checkout", "task-y"]);
    let r = e.run(
        Some("agent-b"),
        &["release", "task-y", "--force", "--note", "agent-a crashed"],
    );
    assert_eq!(r.code, 0);
    snap!(e, "release_force", r);
    let a = audit(&e.dir());
    let last = a.iter().rfind(|v| v["event"] == "force_release").unwrap();
    assert_eq!(last["agent"], "agent-a");
    assert_eq!(last["by"], "agent-b");
    assert_eq!(last["reason"], "agent-a crashed");
    // The holder is told through its inbox.
    let inbox = e.ok("agent-a", &["inbox", "--json"]).json();
    assert_eq!(inbox["messages"].as_array().unwrap().len(), 1);
    assert_eq!(inbox["messages"][0]["type"], "force_released");
    assert_eq!(inbox["messages"][0]["from"], "agent-b");
    assert_eq!(inbox["messages"][0]["key"], "task-y");
    assert!(
        inbox["messages"][0]["body"]
            .as_str()
            .unwrap()
            .contains("agent-a crashed")
    );

    e.ok("agent-a", &["checkout", "task-z", "--timeout", "10m"]);
    e.at(T1H);
    let r = e.run(Some("agent-a"), &["release", "task-z"]);
    assert_eq!(r.code, 4);
    snap!(e, "release_lease_lost", r);
    assert_eq!(
        e.run(Some("agent-a"), &["list", "--json"]).json()["checkouts"],
        serde_json::json!([])
    );
}

#[test]
fn release_multiple_keys_exits_with_first_failure() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    e.ok("agent-b", &["checkout", "k2"]);
    let r = e.run(Some("agent-a"), &["release", "k1", "nobody-holds", "k2"]);
    assert_eq!(r.code, 3, "{}", r.text());
    snap!(e, "release_multiple", r);
    let j = e.run(Some("agent-a"), &["list", "--json"]).json();
    let keys: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["k2"], "k1 released, k2 untouched");
}

#[test]
fn release_all_releases_only_mine_and_reports_lost_leases() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    e.ok("agent-a", &["checkout", "k2", "--timeout", "10m"]);
    e.ok("agent-b", &["checkout", "k3"]);
    e.at("2026-01-01T00:20:00Z");
    let r = e.run(Some("agent-a"), &["release", "--all"]);
    assert_eq!(r.code, 0, "release --all reports a lost lease but succeeds");
    snap!(e, "release_all", r);
    let j = e
        .run(Some("agent-a"), &["release", "--all", "--json"])
        .json();
    assert_eq!(j["results"], serde_json::json!([]));
    let r = e.run(Some("agent-a"), &["release", "--all"]);
    snap!(e, "release_all_nothing_held", r);
    let j = e.run(Some("x"), &["list", "--json"]).json();
    assert_eq!(j["checkouts"].as_array().unwrap().len(), 1);
    assert_eq!(j["checkouts"][0]["key"], "k3");
}

// ---------------------------------------------------------------- renew

#[test]
fn renew_outcomes() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "k1", "--timeout", "10m"]);
    e.ok("agent-a", &["checkout", "k2", "--timeout", "10m"]);
    e.at(T5M);
    let r = e.run(Some("agent-a"), &["renew", "k1", "--timeout", "1h"]);
    assert_eq!(r.code, 0);
    snap!(e, "renew_renewed", r);
    let j = e.run(Some("agent-a"), &["renew", "k1", "--json"]).json();
    assert_eq!(j["results"][0]["outcome"], "renewed");
    assert_eq!(
        j["results"][0]["checkout"]["expires_at"], "2026-01-01T01:05:00Z",
        "without --timeout, the lease keeps its own length (1h from the last renewal), not the 30m default"
    );
    assert_eq!(j["results"][0]["checkout"]["token"], 1);

    assert_eq!(e.run(Some("agent-b"), &["renew", "k1"]).code, 4);
    assert_eq!(e.run(Some("agent-b"), &["renew", "nope"]).code, 3);

    e.at("2026-01-01T00:10:00Z");
    let r = e.run(Some("agent-a"), &["renew", "k2"]);
    assert_eq!(r.code, 4, "renew at the very end of the lease is too late");
    snap!(e, "renew_lease_lost", r);
    assert_eq!(
        e.run(Some("agent-a"), &["renew", "k2"]).code,
        3,
        "and it stays lost"
    );
}

#[test]
fn renew_never_shortens_a_lease_unless_told_to() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "long", "--timeout", "2h"]);
    e.ok("agent-a", &["checkout", "short", "--timeout", "10m"]);
    e.at(T5M);
    let j = e
        .run(Some("agent-a"), &["renew", "long", "short", "--json"])
        .json();
    assert_eq!(
        j["results"][0]["checkout"]["expires_at"], "2026-01-01T02:05:00Z",
        "a 2h lease renewed without --timeout gets another 2h, not the 30m default"
    );
    assert_eq!(
        j["results"][1]["checkout"]["expires_at"], "2026-01-01T00:15:00Z",
        "a 10m lease gets another 10m"
    );
    let j = e.run(Some("agent-a"), &["renew", "--all", "--json"]).json();
    assert_eq!(
        j["results"][0]["checkout"]["expires_at"],
        "2026-01-01T02:05:00Z"
    );
    // --timeout sets the end exactly, even earlier than before.
    let j = e
        .run(
            Some("agent-a"),
            &["renew", "long", "--timeout", "10m", "--json"],
        )
        .json();
    assert_eq!(
        j["results"][0]["checkout"]["expires_at"],
        "2026-01-01T00:15:00Z"
    );
    // ...and from then on the lease is 10m long.
    e.at("2026-01-01T00:10:00Z");
    let j = e.run(Some("agent-a"), &["renew", "long", "--json"]).json();
    assert_eq!(
        j["results"][0]["checkout"]["expires_at"],
        "2026-01-01T00:20:00Z"
    );
}

#[test]
fn renew_all_exits_4_when_a_lease_was_lost() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "k1", "--timeout", "1h"]);
    e.ok("agent-a", &["checkout", "k2", "--timeout", "10m"]);
    e.at("2026-01-01T00:20:00Z");
    let r = e.run(Some("agent-a"), &["renew", "--all"]);
    assert_eq!(r.code, 4);
    snap!(e, "renew_all_with_loss", r);
    let j = e.run(Some("agent-a"), &["renew", "--all", "--json"]).json();
    assert_eq!(j["all"], true);
    assert_eq!(j["results"].as_array().unwrap().len(), 1);
    assert_eq!(j["results"][0]["key"], "k1");
}

// ---------------------------------------------------------------- status, list, verify

#[test]
fn status_outputs() {
    let mut e = Env::new();
    let r = e.run(None, &["status", "task-x"]);
    assert_eq!(r.code, 0);
    snap!(e, "status_free", r);
    e.ok(
        "agent-a",
        &[
            "checkout",
            "task-x",
            "--reason",
            "review PR 7",
            "--name",
            "reviewer",
            "--timeout",
            "10m",
        ],
    );
    e.at(T5M);
    let r = e.run(None, &["status", "task-x"]);
    assert_eq!(r.code, 0);
    snap!(e, "status_held", r);
    let j = e.run(None, &["status", "task-x", "--json"]).json();
    assert_eq!(j["outcome"], "held");
    assert_eq!(j["checkout"]["agent"]["name"], "reviewer");
    e.at(T1H);
    let r = e.run(None, &["status", "task-x"]);
    snap!(e, "status_free_after_expiry", r);
    let j = e.run(None, &["status", "task-x", "--json"]).json();
    assert_eq!(j["outcome"], "free");
    assert_eq!(j["expired"], Value::Null, "reaped by the previous status");
    let a = audit(&e.dir());
    assert_eq!(a.iter().filter(|v| v["event"] == "auto_release").count(), 1);
}

#[test]
fn list_outputs() {
    let mut e = Env::new();
    let r = e.run(None, &["list"]);
    assert_eq!(r.code, 0, "list with nothing held exits 0");
    assert_eq!(r.stdout, "No active checkouts.\n");
    e.ok(
        "agent-a",
        &[
            "checkout",
            "task-b",
            "--reason",
            "pipe | in reason",
            "--name",
            "researcher",
        ],
    );
    e.ok("agent-b", &["checkout", "github://acme/app/issues/42"]);
    e.ok(
        "agent-a",
        &["checkout", "deploy://api-prod", "--timeout", "2h"],
    );
    e.at(T5M);
    let r = e.run(None, &["list"]);
    snap!(e, "list_three", r);
    let r = e.run(Some("agent-a"), &["list", "--mine"]);
    snap!(e, "list_mine", r);
    let j = e.run(Some("agent-a"), &["list", "--mine", "--json"]).json();
    assert_eq!(j["mine"], "agent-a");
    let keys: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["deploy://api-prod", "task-b"]);
    assert_eq!(
        e.run(Some("agent-c"), &["list", "--mine"]).stdout,
        "No active checkouts held by agent-c.\n"
    );
    assert_eq!(
        e.run(None, &["list", "--mine"]).code,
        64,
        "--mine needs an identity"
    );
}

#[test]
fn list_without_lock_directory_creates_nothing() {
    let e = Env::new();
    assert_eq!(
        e.run(None, &["list", "--json"]).json()["checkouts"],
        serde_json::json!([])
    );
    assert!(!e.dir().exists());
}

#[test]
fn verify_outcomes() {
    let mut e = Env::new();
    e.ok("agent-a", &["checkout", "deploy://api", "--timeout", "10m"]);
    let r = e.run(Some("agent-a"), &["verify", "deploy://api", "--token", "1"]);
    assert_eq!(r.code, 0);
    snap!(e, "verify_valid", r);
    let r = e.run(Some("agent-a"), &["verify", "deploy://api", "--token", "7"]);
    assert_eq!(r.code, 4);
    snap!(e, "verify_stale_token", r);
    let r = e.run(Some("agent-b"), &["verify", "deploy://api", "--token", "1"]);
    assert_eq!(r.code, 4);
    snap!(e, "verify_not_holder", r);
    let j = e
        .run(
            Some("agent-b"),
            &["verify", "deploy://api", "--token", "1", "--json"],
        )
        .json();
    assert_eq!(j["valid"], false);
    assert_eq!(j["outcome"], "not_holder");
    let r = e.run(Some("agent-a"), &["verify", "free-key", "--token", "1"]);
    assert_eq!(r.code, 3);
    snap!(e, "verify_no_such_checkout", r);
    e.at("2026-01-01T00:10:00Z");
    let r = e.run(Some("agent-a"), &["verify", "deploy://api", "--token", "1"]);
    assert_eq!(r.code, 4);
    snap!(e, "verify_lease_lost", r);
    let j = e
        .run(
            Some("agent-a"),
            &["verify", "deploy://api", "--token", "1", "--json"],
        )
        .json();
    assert_eq!(j["outcome"], "no_such_checkout");
}

// ---------------------------------------------------------------- bad input

#[test]
fn usage_errors_exit_64_never_2() {
    let e = Env::new();
    let long = "k".repeat(513);
    let cases: &[(&str, &[&str])] = &[
        ("empty key", &["checkout", ""]),
        ("newline in key", &["checkout", "a\nb"]),
        ("tab in key", &["checkout", "a\tb"]),
        ("long key", &["checkout", &long]),
        ("no unit", &["checkout", "k", "--timeout", "10"]),
        ("zero", &["checkout", "k", "--timeout", "0s"]),
        ("bad unit", &["checkout", "k", "--timeout", "5y"]),
        ("unknown flag", &["checkout", "k", "--frobnicate"]),
        ("unknown command", &["frob"]),
        ("missing key", &["checkout"]),
        ("release nothing", &["release"]),
        ("release keys and all", &["release", "k", "--all"]),
        ("verify without token", &["verify", "k"]),
        ("token not a number", &["verify", "k", "--token", "x"]),
        ("bad format", &["list", "--format", "xml"]),
        (
            "reason with newline",
            &["checkout", "k", "--reason", "a\nb"],
        ),
        ("no command", &[]),
    ];
    for (what, args) in cases {
        let r = e.run(Some("agent-a"), args);
        assert_eq!(r.code, 64, "{what}: {}", r.text());
        assert!(!r.stderr.is_empty(), "{what}: says what is wrong");
        assert!(!r.stderr.contains("panicked"), "{what}");
    }
    assert!(!record_path(&e.dir(), "k").exists());
    let r = e.run(Some("agent-a"), &["checkout", "a\nb"]);
    snap!(e, "usage_bad_key", r);
    let r = e.run(Some("agent-a"), &["checkout", "k", "--timeout", "10"]);
    snap!(e, "usage_bad_duration", r);
    let r = e.run(Some("agent-a"), &["checkout", "", "--json"]);
    assert_eq!(r.code, 64);
    let j = r.json();
    assert_eq!(j["error"]["kind"], "usage");
    assert_eq!(j["error"]["exit_code"], 64);
    let r = e.run(Some("agent-a"), &["checkout", "k", "--bogus", "--json"]);
    assert_eq!(r.code, 64);
    assert_eq!(r.json()["error"]["kind"], "usage");
}

#[test]
fn help_and_version_exit_0() {
    let e = Env::new();
    let r = e.run(None, &["--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("checkout"));
    // --agent's help names every identity source, in the order they are tried.
    let sources = [
        "TASKLOCK_AGENT",
        "CLAUDE_CODE_SESSION_ID",
        "CODEX_THREAD_ID",
        "GEMINI_SESSION_ID",
        "OPENCODE_SESSION_ID",
    ];
    let at: Vec<usize> = sources
        .iter()
        .map(|s| {
            r.stdout
                .find(s)
                .unwrap_or_else(|| panic!("{s} not in --help"))
        })
        .collect();
    assert!(at.is_sorted(), "{}", r.stdout);
    let r = e.run(None, &["--version"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("tasklock "));
}

#[test]
fn no_identity_without_a_terminal_is_a_usage_error() {
    let e = Env::new();
    let r = e.run(None, &["checkout", "task-x"]);
    assert_eq!(r.code, 64);
    snap!(e, "usage_no_identity", r);
    assert!(!record_path(&e.dir(), "task-x").exists());
}

#[test]
fn identity_order_flag_env_claude_session_codex_thread() {
    let e = Env::new();
    let who = |envs: &[(&str, &str)], flag: Option<&str>| {
        let mut cmd = base_cmd(T0);
        cmd.arg("--dir")
            .arg(e.dir())
            .args(["checkout", "k", "--json"]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        if let Some(f) = flag {
            cmd.args(["--agent", f]);
        }
        let r = exec(cmd);
        assert_eq!(r.code, 0, "{}", r.text());
        let id = r.json()["checkout"]["agent"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut rel = base_cmd(T0);
        rel.arg("--dir")
            .arg(e.dir())
            .args(["release", "k", "--agent", &id]);
        assert_eq!(exec(rel).code, 0);
        id
    };
    let all = [
        ("TASKLOCK_AGENT", "env-agent"),
        ("CLAUDE_CODE_SESSION_ID", "session-1"),
        ("CODEX_THREAD_ID", "codex-thread-1"),
        ("TASKLOCK_AGENT_NAME", "named"),
    ];
    assert_eq!(who(&all, Some("flag-agent")), "flag-agent");
    assert_eq!(who(&all, None), "env-agent");
    assert_eq!(who(&all[1..], None), "session-1");
    // Codex sets CODEX_THREAD_ID in every command it runs: after Claude Code's session.
    assert_eq!(who(&all[2..], None), "codex-thread-1");
}

#[test]
fn tricky_keys_are_distinct_and_stay_inside_the_directory() {
    let e = Env::new();
    let keys = [
        "a/b",
        "a_b",
        "a%2Fb",
        "../x",
        "..",
        ".",
        "/etc/passwd",
        "ünïcödé",
        "github://acme/app/issues/42",
        "A",
        "a",
        "#44",
        "issue:create/workspace-1",
        "a b",
        "~",
        &"x".repeat(512),
        &"é".repeat(256),
    ];
    for (i, k) in keys.iter().enumerate() {
        let r = e.run(Some(&format!("agent-{i}")), &["checkout", k, "--json"]);
        assert_eq!(r.code, 0, "{k:?}: {}", r.text());
    }
    let j = e.run(None, &["list", "--json"]).json();
    let listed: Vec<(String, String)> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap().into(),
                c["agent"]["id"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(listed.len(), keys.len(), "every key distinct");
    for (i, k) in keys.iter().enumerate() {
        assert!(
            listed.contains(&(k.to_string(), format!("agent-{i}"))),
            "{k:?} held by agent-{i}"
        );
    }
    // Nothing was written outside keys/.
    let mut outside = Vec::new();
    for entry in std::fs::read_dir(e.tmp.path()).unwrap() {
        outside.push(entry.unwrap().file_name().into_string().unwrap());
    }
    assert_eq!(outside, [".locks"]);
    let names: Vec<String> = std::fs::read_dir(e.dir().join("keys"))
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), keys.len());
    assert!(names.iter().all(|n| !n.starts_with('.') && n.len() <= 200));
}

// ---------------------------------------------------------------- bad data

fn plant(e: &Env, key_file: &str, content: &[u8]) -> PathBuf {
    let keys = e.dir().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let p = keys.join(key_file);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn bad_records_are_never_free_and_can_be_force_released() {
    let good = {
        let e = Env::new();
        e.ok("agent-a", &["checkout", "task-x"]);
        std::fs::read(record_path(&e.dir(), "task-x")).unwrap()
    };
    let newer = String::from_utf8(good.clone())
        .unwrap()
        .replace("\"version\": 1", "\"version\": 9");
    let other_key = String::from_utf8(good.clone())
        .unwrap()
        .replace("\"key\": \"task-x\"", "\"key\": \"task-y\"");
    let huge = {
        let mut v = b"{\"version\": 1, \"pad\": \"".to_vec();
        v.extend(std::iter::repeat_n(b'x', 1 << 20));
        v.extend(b"\"}");
        v
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "empty"),
        (
            "garbage",
            b"\x00\xffnot json at all".to_vec(),
            "not a valid record",
        ),
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            "not a valid record",
        ),
        ("huge", huge, "1 MiB"),
        (
            "newer version",
            newer.into_bytes(),
            "newer than this tasklock",
        ),
        ("wrong key", other_key.into_bytes(), "task-y"),
        (
            "no version",
            b"{\"key\": \"task-x\"}".to_vec(),
            "format version",
        ),
    ];
    for (what, bytes, problem) in cases {
        let e = Env::new();
        let path = plant(&e, "task-x", &bytes);
        let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
        assert_eq!(r.code, 1, "{what}: {}", r.text());
        assert!(
            r.stderr.contains(&path.display().to_string()),
            "{what}: names the file: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains(problem),
            "{what}: says {problem:?}: {}",
            r.stderr
        );
        if what == "newer version" {
            // Not damage: the fix is a newer tasklock, never removing the record.
            assert!(
                r.stderr.contains("Next: upgrade tasklock") && !r.stderr.contains("--force"),
                "{what}: says to upgrade: {}",
                r.stderr
            );
        } else {
            assert!(
                r.stderr.contains("tasklock release task-x --force"),
                "{what}: says how to fix"
            );
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{what}: left untouched"
        );
        assert_eq!(
            e.run(Some("agent-b"), &["status", "task-x"]).code,
            1,
            "{what}"
        );
        assert_eq!(
            e.run(Some("agent-b"), &["renew", "task-x"]).code,
            1,
            "{what}"
        );
        assert_eq!(
            e.run(Some("agent-b"), &["verify", "task-x", "--token", "1"])
                .code,
            1,
            "{what}"
        );
        assert_eq!(
            e.run(Some("agent-b"), &["release", "task-x"]).code,
            1,
            "{what}"
        );
        let l = e.run(None, &["list", "--json"]);
        assert_eq!(l.code, 0, "{what}: list still works");
        let j = l.json();
        assert_eq!(j["corrupt"].as_array().unwrap().len(), 1, "{what}");
        assert!(
            j["corrupt"][0]["problem"]
                .as_str()
                .unwrap()
                .contains(problem),
            "{what}"
        );
        assert!(path.exists());
        let r = e.run(Some("agent-b"), &["release", "task-x", "--force"]);
        assert_eq!(r.code, 0, "{what}: {}", r.text());
        assert!(!path.exists());
        let last = audit(&e.dir()).pop().unwrap();
        assert_eq!(last["event"], "force_release", "{what}");
        assert!(
            last["detail"].as_str().unwrap().contains("corrupt"),
            "{what}"
        );
        assert_eq!(
            e.run(Some("agent-b"), &["checkout", "task-x"]).code,
            0,
            "{what}"
        );
    }
}

#[test]
fn corrupt_record_outputs() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "task-ok", "--reason", "fine"]);
    plant(&e, "task-x", b"{\"version\": 1, \"key\": ");
    let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
    snap!(e, "checkout_corrupt_record", r);
    let r = e.run(None, &["list"]);
    assert_eq!(r.code, 0);
    snap!(e, "list_with_corrupt_record", r);
    let r = e.run(Some("agent-b"), &["release", "task-x", "--force"]);
    snap!(e, "release_force_corrupt", r);
}

#[test]
fn planted_symlinks_are_never_followed_or_written_through() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "warmup"]);
    e.ok("agent-a", &["release", "warmup"]);
    let victim = e.tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    // A symlink where a record would go.
    std::os::unix::fs::symlink(&victim, record_path(&e.dir(), "task-x")).unwrap();
    let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    let r = e.run(Some("agent-b"), &["release", "task-x", "--force"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(victim.exists(), "removing the link leaves its target alone");
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-x"]).code, 0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // A symlink where the temp file of this process would go is swept, not written through.
    for pid in 0..4 {
        let _ = std::os::unix::fs::symlink(&victim, e.dir().join("tmp").join(format!("{pid}.tmp")));
    }
    assert_eq!(e.run(Some("agent-b"), &["checkout", "task-y"]).code, 0);
    assert_eq!(std::fs::read_dir(e.dir().join("tmp")).unwrap().count(), 0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // A symlinked audit log is refused rather than appended through; the release it
    // follows stands, with a warning (docs/exit-codes.md, "Changes that stand").
    std::fs::remove_file(e.dir().join("audit.jsonl")).unwrap();
    std::os::unix::fs::symlink(&victim, e.dir().join("audit.jsonl")).unwrap();
    let r = e.run(Some("agent-b"), &["release", "task-y"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stderr.contains(
            "tasklock: warning: `task-y` was released, but the audit log was not written"
        ),
        "{}",
        r.text()
    );
    assert!(!record_path(&e.dir(), "task-y").exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn planted_fifo_does_not_hang() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "warmup"]);
    let p = record_path(&e.dir(), "task-x");
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: valid path string.
    assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o644) }, 0);
    let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a regular file"), "{}", r.stderr);
}

unsafe extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

#[test]
fn leftover_temp_files_are_swept() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "warmup"]);
    for i in 0..5 {
        std::fs::write(
            e.dir().join("tmp").join(format!("{}.tmp", 90000 + i)),
            "{\"half",
        )
        .unwrap();
    }
    e.ok("agent-a", &["release", "warmup"]);
    assert_eq!(std::fs::read_dir(e.dir().join("tmp")).unwrap().count(), 0);
}

#[test]
fn damaged_token_counter_never_reissues_a_held_token() {
    let e = Env::new();
    for k in ["k1", "k2", "k3"] {
        e.ok("agent-a", &["checkout", k]);
    }
    std::fs::write(e.dir().join(".guard"), "garbage").unwrap();
    let t = e.ok("agent-b", &["checkout", "k4", "--json"]).json()["checkout"]["token"]
        .as_u64()
        .unwrap();
    assert_eq!(t, 4);
}

// ---------------------------------------------------------------- config and discovery

#[test]
fn config_sets_the_default_lease_and_errors_name_the_line() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join("config.yaml"), "# team settings\nlease: 2h\n").unwrap();
    let j = e.ok("agent-a", &["checkout", "k", "--json"]).json();
    assert_eq!(j["checkout"]["expires_at"], "2026-01-01T02:00:00Z");
    std::fs::write(e.dir().join("config.yaml"), "lease: 2h\nleese: 3h\n").unwrap();
    let r = e.run(Some("agent-a"), &["checkout", "k2"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("config.yaml") && r.stderr.contains("line 2"),
        "{}",
        r.stderr
    );
    snap!(e, "config_error", r);
    std::fs::write(e.dir().join("config.yaml"), "lease: forever\n").unwrap();
    let r = e.run(Some("agent-a"), &["checkout", "k2", "--timeout", "5m"]);
    assert_eq!(r.code, 0, "an explicit --timeout does not need the config");
}

#[test]
fn lock_directory_is_created_with_gitignore() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k"]);
    assert_eq!(
        std::fs::read_to_string(e.dir().join(".gitignore")).unwrap(),
        "*\n"
    );
}

fn run_in(cwd: &Path, args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    cmd.current_dir(cwd).args(args);
    exec(cmd)
}

#[test]
fn discovery_order_dir_env_nearest_main_worktree_then_none() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // A stray .locks above the temp dir would rightly win discovery; say so plainly.
    if let Some(stray) = root.ancestors().skip(1).find(|d| d.join(".locks").is_dir()) {
        panic!(
            "remove {}/.locks: it is above the test's temp dir and wins discovery",
            stray.display()
        );
    }
    // Main worktree with a nested project dir, and a linked worktree elsewhere.
    let main = root.join("repo");
    std::fs::create_dir_all(main.join(".git/worktrees/wt1")).unwrap();
    std::fs::create_dir_all(main.join("src/deep")).unwrap();
    let wt = root.join("wt1");
    std::fs::create_dir_all(wt.join("sub")).unwrap();
    std::fs::write(
        wt.join(".git"),
        format!("gitdir: {}\n", main.join(".git/worktrees/wt1").display()),
    )
    .unwrap();
    std::fs::write(main.join(".git/worktrees/wt1/commondir"), "../..\n").unwrap();

    // From a linked worktree: the main worktree's .locks.
    assert_eq!(
        run_in(&wt.join("sub"), &["checkout", "k1", "--agent", "a"]).code,
        0
    );
    assert!(main.join(".locks/keys/k1").exists());
    // From deep in the main worktree: the same directory.
    let r = run_in(&main.join("src/deep"), &["checkout", "k1", "--agent", "b"]);
    assert_eq!(r.code, 2, "{}", r.text());
    // A nearer .locks wins.
    std::fs::create_dir_all(main.join("src/.locks")).unwrap();
    assert_eq!(
        run_in(&main.join("src/deep"), &["checkout", "k1", "--agent", "b"]).code,
        0
    );
    assert!(main.join("src/.locks/keys/k1").exists());
    // TASKLOCK_DIR beats discovery, and --dir beats TASKLOCK_DIR.
    let mut cmd = base_cmd(T0);
    cmd.current_dir(main.join("src/deep"))
        .env("TASKLOCK_DIR", root.join("envdir"))
        .args(["checkout", "k1", "--agent", "c"]);
    assert_eq!(exec(cmd).code, 0);
    assert!(root.join("envdir/keys/k1").exists());
    let mut cmd = base_cmd(T0);
    cmd.current_dir(main.join("src/deep"))
        .env("TASKLOCK_DIR", root.join("envdir"))
        .args(["checkout", "k1", "--agent", "c", "--dir"])
        .arg(root.join("flagdir"));
    assert_eq!(exec(cmd).code, 0);
    assert!(root.join("flagdir/keys/k1").exists());
    // Outside any repository and without .locks: no lock directory, exit 64, nothing
    // created (tests/discovery.rs has the rest).
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let r = run_in(&plain, &["checkout", "k1", "--agent", "d"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(!plain.join(".locks").exists());
}

#[test]
fn empty_gitignore_left_by_a_crash_is_repaired() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    std::fs::write(e.dir().join(".gitignore"), "").unwrap();
    e.ok("agent-a", &["checkout", "k"]);
    assert_eq!(
        std::fs::read_to_string(e.dir().join(".gitignore")).unwrap(),
        "*\n"
    );
    std::fs::write(e.dir().join(".gitignore"), "keys/\n").unwrap();
    e.ok("agent-a", &["release", "k"]);
    assert_eq!(
        std::fs::read_to_string(e.dir().join(".gitignore")).unwrap(),
        "keys/\n",
        "a user's own file is kept"
    );
}

#[test]
fn symlinked_store_directories_are_refused_not_followed() {
    for sub in ["tmp", "keys"] {
        let e = Env::new();
        e.ok("agent-a", &["checkout", "warmup"]);
        let victim = e.tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("precious.txt"), "keep me").unwrap();
        let real = e.dir().join(sub);
        std::fs::rename(&real, e.tmp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&victim, &real).unwrap();
        for args in [
            &["release", "warmup"][..],
            &["renew", "warmup"],
            &["checkout", "k2"],
            &["release", "--all"],
        ] {
            let r = e.run(Some("agent-a"), args);
            assert_eq!(r.code, 1, "{sub} {args:?}: {}", r.text());
            assert!(r.stderr.contains("not a directory"), "{}", r.stderr);
        }
        assert_eq!(
            std::fs::read_to_string(victim.join("precious.txt")).unwrap(),
            "keep me",
            "{sub}"
        );
    }
}

#[test]
fn several_keys_with_one_corrupt_report_every_key() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    e.ok("agent-a", &["checkout", "k3"]);
    plant(&e, "k2", b"garbage");
    let r = e.run(Some("agent-a"), &["release", "k1", "k2", "k3", "--json"]);
    assert_eq!(r.code, 1);
    let j = r.json();
    let outcomes: Vec<&str> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["released", "corrupt", "released"]);
    assert!(
        j["results"][1]["problem"]
            .as_str()
            .unwrap()
            .contains("not a valid record")
    );
    assert_eq!(
        e.run(None, &["list", "--json"]).json()["checkouts"],
        serde_json::json!([])
    );
    let r = e.run(Some("agent-a"), &["renew", "k1", "k2"]);
    assert_eq!(r.code, 3, "first failing key: k1 is no longer held");
    assert!(
        r.stdout.contains("tasklock release --force k2"),
        "{}",
        r.stdout
    );
}

#[test]
fn repeated_keys_count_once() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "k1"]);
    let j = e.ok("agent-a", &["release", "k1", "k1", "--json"]).json();
    assert_eq!(j["results"].as_array().unwrap().len(), 1);
}

#[test]
fn text_values_may_start_with_a_hyphen() {
    let e = Env::new();
    let j = e
        .ok("agent-a", &["checkout", "k", "--reason", "-fix", "--json"])
        .json();
    assert_eq!(j["checkout"]["reason"], "-fix");
    let j = e
        .ok("agent-a", &["note", "k", "- [x] done", "--json"])
        .json();
    assert_eq!(j["note"]["text"], "- [x] done");
    let j = e
        .ok("agent-a", &["heartbeat", "--status", "-x", "--json"])
        .json();
    assert_eq!(j["agent"]["status"], "-x");
    let j = e
        .ok("agent-a", &["release", "k", "--note", "-x", "--json"])
        .json();
    assert_eq!(j["note"], "-x");
    let j = e
        .ok(
            "agent-a",
            &["freeze", "k", "--for", "1m", "--reason", "--hold", "--json"],
        )
        .json();
    assert_eq!(j["freeze"]["reason"], "--hold");
    let j = e.ok("agent-a", &["status", "k", "--json"]).json();
    let texts: Vec<&str> = j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["- [x] done", "-x"]);
}

#[test]
fn wait_may_stand_before_the_key() {
    let e = Env::new();
    // The key is free: --wait returns at once, and `task-1` is the key, not a duration.
    let j = e
        .ok("agent-a", &["checkout", "--wait", "task-1", "--json"])
        .json();
    assert_eq!(j["key"], "task-1");
    assert_eq!(j["outcome"], "granted");
    // A duration after --wait is still a duration.
    let j = e
        .ok("agent-a", &["checkout", "--wait", "5m", "task-2", "--json"])
        .json();
    assert_eq!(j["key"], "task-2");
    // Held by someone else: a 1s wait that runs out (exit 2) proves DUR was taken as one.
    let r = e.run(
        Some("agent-b"),
        &["checkout", "--wait", "1s", "task-2", "--json"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(r.json()["key"], "task-2");
    // A number with a bad unit is a bad duration, not a key.
    let r = e.run(
        Some("agent-a"),
        &["checkout", "--wait", "5x", "task-3", "--json"],
    );
    assert_eq!(r.code, 64);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid duration \"5x\""),
        "{}",
        r.stdout
    );
    // A duration and no key: the key is missing.
    let r = e.run(Some("agent-a"), &["checkout", "--wait", "5m", "--json"]);
    assert_eq!(r.code, 64);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("<KEY>")
    );
    // run too: `run --wait KEY -- CMD`.
    let r = e.run(
        None,
        &[
            "--agent", "agent-a", "run", "--wait", "task-4", "--", "true",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stderr.contains("`task-4`"), "{}", r.stderr);
}

#[test]
fn json_usage_errors_name_the_missing_argument() {
    let e = Env::new();
    let cases: &[(&[&str], &str)] = &[
        (&["checkout", "--json"], "<KEY>"),
        (&["release", "--json"], "<KEY>"),
        (&["renew", "--json"], "<KEY>"),
        (&["note", "k", "--json"], "<TEXT>"),
        (&["status", "--json"], "<KEY>"),
        (&["verify", "k", "--json"], "--token"),
    ];
    for (args, name) in cases {
        let r = e.run(Some("agent-a"), args);
        assert_eq!(r.code, 64, "{args:?}");
        let j = r.json();
        assert_eq!(j["error"]["kind"], "usage");
        let msg = j["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("the following required arguments were not provided: ")
                && msg.contains(name),
            "{args:?}: {msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg:?}");
    }
}

#[test]
fn hook_without_an_event_exits_0_with_a_note() {
    let e = Env::new();
    let r = e.run(Some("agent-a"), &["hook"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stdout.is_empty());
    assert!(r.stderr.contains("no event given"), "{}", r.stderr);
    let r = e.run(Some("agent-a"), &["hook", "--bogus"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stderr.starts_with("tasklock hook: "), "{}", r.stderr);
    // Help is still help.
    let r = e.run(None, &["hook", "--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("EVENT"), "{}", r.stdout);
}

#[test]
fn keys_in_table_code_spans_keep_their_backslashes() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", r"a\b"]);
    e.ok("agent-a", &["checkout", "p|q"]);
    e.ok("agent-a", &["checkout", "t`ick"]);
    let r = e.run(None, &["list"]);
    assert_eq!(r.code, 0);
    // Backslashes are literal in a code span: shown once, not doubled.
    assert!(r.stdout.contains(r"| `a\b` |"), "{}", r.stdout);
    assert!(!r.stdout.contains(r"a\\b"), "{}", r.stdout);
    // The cell separator is escaped; a backtick gets a longer fence.
    assert!(r.stdout.contains(r"| `p\|q` |"), "{}", r.stdout);
    assert!(r.stdout.contains("| `` t`ick `` |"), "{}", r.stdout);
    snap!(e, "list_keys_with_backslash_pipe_backtick", r);
}

#[test]
fn a_record_of_a_newer_format_says_upgrade_not_force() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "ok"]);
    plant(
        &e,
        "task-new",
        br#"{"version": 4, "key": "task-new", "token": 9, "holder": {"id": "future"}}"#,
    );
    let r = e.run(Some("agent-b"), &["checkout", "task-new"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("Next: upgrade tasklock"), "{}", r.stderr);
    assert!(!r.stderr.contains("--force"), "{}", r.stderr);
    let j = e
        .run(Some("agent-b"), &["checkout", "task-new", "--json"])
        .json();
    assert!(
        j["error"]["hint"]
            .as_str()
            .unwrap()
            .starts_with("upgrade tasklock")
    );
    let r = e.run(None, &["list"]);
    assert!(
        r.stdout.contains("newer format: upgrade tasklock"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("--force"), "{}", r.stdout);
    snap!(e, "list_with_newer_format_record", r);
    let r = e.run(Some("agent-a"), &["release", "ok", "task-new"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("Fix: upgrade tasklock"), "{}", r.stdout);
    assert!(!r.stdout.contains("--force"), "{}", r.stdout);
    let j = e
        .run(Some("agent-b"), &["why", "task-new", "--json"])
        .json();
    assert_eq!(j["state"], "corrupt");
    assert!(j["next"].as_str().unwrap().starts_with("upgrade tasklock"));
    // A damaged record still gets the --force advice.
    plant(&e, "task-bad", b"garbage");
    let r = e.run(Some("agent-b"), &["checkout", "task-bad"]);
    assert!(r.stderr.contains("--force"), "{}", r.stderr);
}

/// The first inline code span in `text` that starts with `tasklock ` after `marker`.
fn suggested(text: &str, marker: &str) -> String {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in {text}"))..];
    let start = after.find("`tasklock ").expect("a suggested command") + 1;
    let len = after[start..].find('`').unwrap();
    after[start..start + len].to_string()
}

/// Run a suggested command line through a shell, with this build as `tasklock`.
fn run_suggested(line: &str, env: &[(&str, &str)]) -> Run {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tasklock"));
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", line])
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.parent().unwrap().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("TASKLOCK_NOW", T0)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    exec(cmd)
}

#[test]
fn next_hints_carry_the_callers_dir_and_agent_and_run_verbatim() {
    let e = Env::new();
    let dir = e.tmp.path().join("my locks");
    let dir_s = dir.to_str().unwrap();
    let mut cmd = base_cmd(T0);
    cmd.args(["checkout", "demo task", "--agent", "demo", "--dir", dir_s]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    let release = suggested(&r.stdout, "do the work, then");
    assert_eq!(
        release,
        format!("tasklock release 'demo task' --dir '{dir_s}' --agent demo")
    );
    let verify = suggested(&r.stdout, "irreversible step");
    assert!(verify.contains("--token 1 --dir"), "{verify}");
    // Without a terminal and without TASKLOCK_AGENT, the hints still work as printed.
    let v = run_suggested(&verify, &[]);
    assert_eq!(v.code, 0, "{}", v.text());
    let rel = run_suggested(&release, &[]);
    assert_eq!(rel.code, 0, "{}", rel.text());
    assert!(
        rel.stdout.starts_with("Released `demo task`."),
        "{}",
        rel.stdout
    );

    // An identity from the environment is not repeated: the same environment works.
    let mut cmd = base_cmd(T0);
    cmd.env("TASKLOCK_AGENT", "env-agent")
        .env("TASKLOCK_DIR", dir_s)
        .args(["checkout", "k"]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        suggested(&r.stdout, "do the work, then"),
        "tasklock release k"
    );

    // A conflict's queue hint carries them too.
    let r = e.run(Some("b"), &["checkout", "x"]);
    assert_eq!(r.code, 0);
    let r = e.run(Some("c"), &["checkout", "x"]);
    assert_eq!(r.code, 2);
    let q = suggested(&r.stdout, "Next:");
    assert!(q.ends_with("--agent c"), "{q}");
    let j = run_suggested(&q, &[]);
    assert_eq!(j.code, 2, "queued: {}", j.text());
    assert!(
        j.stdout.contains("Your place in the queue: 1"),
        "{}",
        j.stdout
    );
}

#[test]
fn error_hints_carry_the_flags_too() {
    let e = Env::new();
    e.ok("agent-a", &["checkout", "warmup"]);
    plant(&e, "task-x", b"garbage");
    let r = e.run(Some("agent-b"), &["checkout", "task-x"]);
    assert_eq!(r.code, 1);
    let fix = suggested(&r.stderr, "Next:");
    assert!(
        fix.ends_with(
            "--force --dir [TMP]/.locks --agent agent-b"
                .replace("[TMP]", &e.tmp.path().display().to_string())
                .as_str()
        ),
        "{fix}"
    );
    let j = e
        .run(Some("agent-b"), &["checkout", "task-x", "--json"])
        .json();
    assert!(
        j["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("--agent agent-b")
    );
    let f = run_suggested(&fix, &[]);
    assert_eq!(f.code, 0, "{}", f.text());
    assert!(!record_path(&e.dir(), "task-x").exists());
}

#[test]
fn run_conflict_points_to_run_wait_with_the_same_command() {
    let e = Env::new();
    e.ok("agent-b", &["checkout", "deploy"]);
    let r = e.run(
        None,
        &[
            "--agent",
            "agent-a",
            "run",
            "deploy",
            "--",
            "echo",
            "-n",
            "it's done",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    let hint = suggested(&r.stdout, "Next:");
    let dir = e.dir().display().to_string();
    assert_eq!(
        hint,
        format!(
            "tasklock run deploy --wait --dir {dir} --agent agent-a -- echo -n 'it'\\''s done'"
        )
    );
    assert!(!r.stdout.contains("--queue"), "{}", r.stdout);
    // It runs as printed: blocked until agent-b releases, then runs the command.
    e.ok("agent-b", &["release", "deploy"]);
    let out = run_suggested(&hint, &[]);
    assert_eq!(out.code, 0, "{}", out.text());
    assert_eq!(out.stdout, "it's done");
}

#[test]
fn why_tells_a_waiter_where_it_stands_instead_of_queueing_again() {
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    assert_eq!(e.run(Some("b"), &["checkout", "k", "--queue"]).code, 2);
    assert_eq!(e.run(Some("c"), &["checkout", "k", "--queue"]).code, 2);

    let r = e.run(Some("b"), &["why", "k"]);
    assert_eq!(r.code, 0);
    assert!(!r.stdout.contains("--queue"), "{}", r.stdout);
    assert!(
        r.stdout.contains("You are first in its queue"),
        "{}",
        r.stdout
    );
    snap!(e, "why_first_in_line", r);
    let j = e.run(Some("b"), &["why", "k", "--json"]).json();
    assert_eq!(j["state"], "held");
    assert_eq!(j["can_checkout"], false);
    assert!(
        j["next"]
            .as_str()
            .unwrap()
            .starts_with("you are first in line: when a releases it")
    );

    let j = e.run(Some("c"), &["why", "k", "--json"]).json();
    assert!(
        j["next"]
            .as_str()
            .unwrap()
            .starts_with("you are number 2 in its queue"),
        "{j}"
    );
    assert!(!j["next"].as_str().unwrap().contains("--queue"));
    // Someone not in the queue is still told how to join it.
    let j = e.run(Some("d"), &["why", "k", "--json"]).json();
    assert!(
        j["next"]
            .as_str()
            .unwrap()
            .contains("tasklock checkout k --queue")
    );

    // Released: reserved for b, who is told to take it now.
    e.ok("a", &["release", "k"]);
    let r = e.run(Some("b"), &["why", "k"]);
    assert!(
        r.stdout.contains(
            "Next: it is reserved for you: check it out now with `tasklock checkout k --dir"
        ),
        "{}",
        r.stdout
    );
    let j = e.run(Some("b"), &["why", "k", "--json"]).json();
    assert_eq!(j["state"], "reserved_for_you");
    assert_eq!(j["can_checkout"], true);
    let j = e.run(Some("c"), &["why", "k", "--json"]).json();
    assert_eq!(j["state"], "reserved");
    assert!(
        j["next"]
            .as_str()
            .unwrap()
            .starts_with("you are number 2 in its queue"),
        "{j}"
    );
}

/// `tasklock mcp` runs the server binary beside it; without one it says what is missing.
#[test]
fn mcp_without_its_server_binary_says_so() {
    let td = tempfile::tempdir().unwrap();
    let lone = td.path().join("tasklock");
    // A hard link needs no file open for writing, which a test running in parallel could
    // inherit through fork and make the exec fail with ETXTBSY; copy only if it cannot be.
    if std::fs::hard_link(env!("CARGO_BIN_EXE_tasklock"), &lone).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_tasklock"), &lone).unwrap();
    }
    let out = (0..50)
        .find_map(|_| {
            match std::process::Command::new(&lone)
                .arg("mcp")
                .stdin(std::process::Stdio::null())
                .output()
            {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    None
                }
                other => Some(other.unwrap()),
            }
        })
        .expect("the copy stayed busy");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tasklock-mcp") && err.contains("install.sh"),
        "{err}"
    );
}

/// A lock directory large enough to be read by several threads (past 512 records): every
/// record is read once, checkouts come out in key order, and damaged records are
/// reported, in the order of their file names, whichever thread read them.
#[test]
fn list_of_many_records_reads_each_once_in_order() {
    if file_store_only("list_of_many_records_reads_each_once_in_order") {
        return;
    }
    let e = Env::new();
    let keys: Vec<String> = (0..700).map(|i| format!("k{i:04}")).collect();
    for chunk in keys.chunks(4) {
        let children: Vec<_> = chunk
            .iter()
            .map(|k| {
                let mut cmd = base_cmd(&e.now);
                use_store(&mut cmd, &e.dir());
                cmd.args(["--dir"])
                    .arg(e.dir())
                    .args(["--agent", "a", "checkout", k])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
    }
    for k in ["k0100", "k0600"] {
        std::fs::write(record_path(&e.dir(), k), "").unwrap();
    }
    let j = e.run(None, &["list", "--json"]).json();
    let listed: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = keys.iter().map(String::as_str).collect();
    want.retain(|k| *k != "k0100" && *k != "k0600");
    assert_eq!(listed, want);
    let corrupt: Vec<&str> = j["corrupt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["file"].as_str().unwrap())
        .collect();
    assert_eq!(corrupt, ["k0100", "k0600"], "{}", j["corrupt"]);
}

//! Path checkouts through the real binary: `checkout --path`, conflicts over
//! overlapping paths, all-or-nothing grants, refusals of paths outside the repository,
//! queues and handoff, takeover of dead or expired holders, and many processes racing
//! for overlapping patterns.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Barrier};

use common::*;
use serde_json::Value;

/// A lock directory in a fresh git repository; commands run from the repository's top.
fn repo() -> (Env, PathBuf) {
    git_env()
}

fn run(env: &Env, top: &std::path::Path, agent: &str, args: &[&str]) -> Run {
    env.run_in(top, Some(agent), args)
}

fn json_run(env: &Env, top: &std::path::Path, agent: &str, args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let r = run(env, top, agent, &a);
    (r.code, r.json())
}

#[test]
fn overlapping_paths_conflict_and_name_the_holder() {
    let (env, top) = repo();
    let r = run(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a/**", "--reason", "parser"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "granted", r);

    let r = run(&env, &top, "bob", &["checkout", "--path", "src/a/x.rs"]);
    assert_eq!(r.code, 2, "{}", r.text());
    snap!(env, "conflict", r);

    let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "src/*/x.rs"]);
    assert_eq!(code, 2);
    assert_eq!(j["outcome"], "conflict");
    assert_eq!(j["key"], "path:src/*/x.rs");
    assert_eq!(j["paths"], serde_json::json!(["src/*/x.rs"]));
    let o = &j["overlaps"][0];
    assert_eq!(o["key"], "path:src/a/**");
    assert_eq!(o["agent"]["id"], "alice");
    assert_eq!(o["theirs"], "src/a/**");
    assert_eq!(o["mine"], "src/*/x.rs");
    assert_eq!(o["witness"], "src/a/x.rs");
    assert_eq!(o["reserved"], false);
    assert_eq!(o["token"], 1);

    // Disjoint paths, and the same agent's own paths, do not conflict.
    let r = run(&env, &top, "bob", &["checkout", "T-1", "--path", "src/b"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = run(
        &env,
        &top,
        "alice",
        &["checkout", "T-2", "--path", "src/a/x.rs"],
    );
    assert_eq!(r.code, 0, "own paths never conflict: {}", r.text());
    // Globs that share no file: `*.md` and `*.rs`; a tree meets both.
    let r = run(&env, &top, "carol", &["checkout", "--path", "docs/**/*.md"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = run(&env, &top, "dave", &["checkout", "--path", "docs/*.rs"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let (code, j) = json_run(&env, &top, "erin", &["checkout", "--path", "docs"]);
    assert_eq!(code, 2, "{j}");
    let mut in_way: Vec<&str> = j["overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["agent"]["id"].as_str().unwrap())
        .collect();
    in_way.sort();
    assert_eq!(in_way, ["carol", "dave"], "{j}");

    snap!(env, "list", run(&env, &top, "alice", &["list"]));
    snap!(env, "status", run(&env, &top, "alice", &["status", "T-1"]));
    let (code, j) = json_run(&env, &top, "alice", &["list"]);
    assert_eq!(code, 0);
    let held: Vec<(String, Value)> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["key"].as_str().unwrap().to_string(), c["paths"].clone()))
        .collect();
    assert!(held.contains(&("T-1".into(), serde_json::json!(["src/b"]))));
    assert!(held.contains(&(
        "path:docs/**/*.md".into(),
        serde_json::json!(["docs/**/*.md"])
    )));

    // The audit log names the paths of each grant and the overlap of each refusal.
    let events = audit(&env.dir());
    let acquire = events
        .iter()
        .find(|e| e["event"] == "acquire" && e["key"] == "T-1")
        .expect("acquire of T-1");
    assert_eq!(acquire["paths"], serde_json::json!(["src/b"]));
    let deny = events
        .iter()
        .find(|e| e["event"] == "deny" && e["key"] == "path:src/a/x.rs")
        .expect("deny over paths");
    assert_eq!(deny["holder"], "alice");
    assert!(
        deny["detail"].as_str().unwrap().contains("src/a/**"),
        "{deny}"
    );
}

#[test]
fn paths_are_taken_all_or_nothing() {
    let (env, top) = repo();
    run(&env, &top, "alice", &["checkout", "--path", "src/a/deep"]);
    let r = run(
        &env,
        &top,
        "bob",
        &["checkout", "T-9", "--path", "src/c", "--path", "src/a"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    // Neither the key nor the free path was taken.
    let (_, j) = json_run(&env, &top, "carol", &["checkout", "T-9", "--path", "src/c"]);
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_eq!(j["checkout"]["paths"], serde_json::json!(["src/c"]));
}

#[test]
fn the_holder_adds_paths_to_its_checkout_or_keeps_it_unchanged() {
    let (env, top) = repo();
    let (_, j) = json_run(&env, &top, "alice", &["checkout", "K", "--path", "src/x"]);
    let token = j["checkout"]["token"].as_u64().unwrap();
    let (code, j) = json_run(&env, &top, "alice", &["checkout", "K", "--path", "src/y"]);
    assert_eq!(code, 0);
    assert_eq!(j["outcome"], "already_held");
    assert_eq!(j["checkout"]["token"].as_u64(), Some(token));
    assert_eq!(
        j["checkout"]["paths"],
        serde_json::json!(["src/x", "src/y"])
    );

    run(&env, &top, "bob", &["checkout", "--path", "src/b"]);
    let r = run(&env, &top, "alice", &["checkout", "K", "--path", "src/b/z"]);
    assert_eq!(r.code, 2, "{}", r.text());
    snap!(env, "add_conflict", r);
    let (_, j) = json_run(&env, &top, "alice", &["status", "K"]);
    assert_eq!(
        j["checkout"]["paths"],
        serde_json::json!(["src/x", "src/y"]),
        "a refused addition leaves the checkout as it was: {j}"
    );
}

#[test]
fn paths_outside_the_repository_are_refused() {
    let (env, top) = repo();
    std::os::unix::fs::symlink("/etc", top.join("etc-link")).unwrap();
    for bad in ["../x", "/etc/passwd", "etc-link/passwd", "src/[a", "."] {
        let r = run(&env, &top, "alice", &["checkout", "--path", bad]);
        assert_eq!(r.code, 64, "{bad}: {}", r.text());
        assert!(r.stderr.contains("error:"), "{bad}: {}", r.text());
    }
    let r = run(&env, &top, "alice", &["checkout", "--path", "../x"]);
    snap!(env, "outside", r);
    // A key that only a checkout of paths has, without the paths.
    let r = run(&env, &top, "alice", &["checkout", "path:src/a"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("--path"), "{}", r.text());
    // Nothing was written for any of them.
    let (_, j) = json_run(&env, &top, "alice", &["list"]);
    assert_eq!(j["checkouts"], serde_json::json!([]));
}

#[test]
fn paths_are_judged_from_the_callers_directory() {
    let (env, top) = repo();
    let (_, j) = json_run(
        &env,
        &top.join("src"),
        "alice",
        &["checkout", "--path", "a"],
    );
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_eq!(j["checkout"]["paths"], serde_json::json!(["src/a"]));
    let abs = top.join("src/a/x.rs").display().to_string();
    let (code, j) = json_run(
        &env,
        &top.join("src/b"),
        "bob",
        &["checkout", "--path", &abs],
    );
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["paths"], serde_json::json!(["src/a/x.rs"]));
}

#[test]
fn a_queued_path_checkout_is_handed_on_when_the_overlap_is_released() {
    let (env, top) = repo();
    run(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    let r = run(
        &env,
        &top,
        "bob",
        &["checkout", "B-1", "--path", "src/a/x.rs", "--queue"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    snap!(env, "queued", r);
    let r = run(&env, &top, "alice", &["release", "path:src/a"]);
    assert_eq!(r.code, 0, "{}", r.text());

    // Bob is told, with the command that takes the key and its paths.
    let (_, inbox) = json_run(&env, &top, "bob", &["inbox", "--peek"]);
    let msg = &inbox["messages"][0];
    assert_eq!(msg["type"], "reserved", "{inbox}");
    assert_eq!(msg["key"], "B-1");
    assert!(
        msg["body"]
            .as_str()
            .unwrap()
            .contains("tasklock checkout B-1 --path src/a/x.rs"),
        "{msg}"
    );
    // Until Bob comes, overlapping paths are held for him.
    let (code, j) = json_run(&env, &top, "carol", &["checkout", "--path", "src/**"]);
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["overlaps"][0]["reserved"], true);
    assert_eq!(j["overlaps"][0]["agent"]["id"], "bob");
    let (code, j) = json_run(
        &env,
        &top,
        "bob",
        &["checkout", "B-1", "--path", "src/a/x.rs"],
    );
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["outcome"], "granted");
}

#[test]
fn an_expired_holder_of_overlapping_paths_is_taken_over() {
    let (mut env, top) = repo();
    run(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a", "--timeout", "1m"],
    );
    env.at(T5M);
    let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "src/a/x.rs"]);
    assert_eq!(code, 0, "{j}");
    let events = audit(&env.dir());
    let ended = events
        .iter()
        .find(|e| e["event"] == "auto_release")
        .expect("alice's checkout ended");
    assert_eq!(ended["key"], "path:src/a");
    assert_eq!(ended["reason"], "timeout");
    assert_eq!(ended["by"], "bob");
    // Alice is told her paths are gone.
    let (_, inbox) = json_run(&env, &top, "alice", &["inbox"]);
    assert_eq!(inbox["messages"][0]["type"], "lease_expired", "{inbox}");
}

#[test]
fn a_fencing_token_guards_a_path_checkout() {
    let (env, top) = repo();
    let (_, j) = json_run(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    let token = j["checkout"]["token"].as_u64().unwrap().to_string();
    let r = run(
        &env,
        &top,
        "alice",
        &["verify", "path:src/a", "--token", &token],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    run(&env, &top, "alice", &["release", "path:src/a"]);
    let r = run(
        &env,
        &top,
        "alice",
        &["verify", "path:src/a", "--token", &token],
    );
    assert_ne!(r.code, 0, "{}", r.text());
}

/// Many processes race for patterns that all cover `src/a/x.rs`: exactly one wins each
/// round, and the others are refused naming the winner.
#[test]
fn racing_overlapping_patterns_have_one_winner() {
    const PATTERNS: [&str; 12] = [
        "src/**",
        "src/a",
        "src/a/x.rs",
        "**/x.rs",
        "src/*/x.rs",
        "src/a/*.rs",
        "**",
        "src/?/x.rs",
        "src/[a-c]/*",
        "*/a/",
        "src/a/x.*",
        "**/a/**",
    ];
    const ROUNDS: usize = 15;
    let (env, top) = repo();
    let env = Arc::new(env);
    for round in 0..ROUNDS {
        let gate = Arc::new(Barrier::new(PATTERNS.len()));
        let handles: Vec<_> = PATTERNS
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let gate = gate.clone();
                let env = env.clone();
                let top = top.clone();
                let p = p.to_string();
                std::thread::spawn(move || {
                    let mut cmd = base_cmd(&env.now);
                    use_store(&mut cmd, &env.dir());
                    cmd.current_dir(&top)
                        .arg("--dir")
                        .arg(env.dir())
                        .args(["checkout", "--path", &p, "--json", "--agent"])
                        .arg(format!("r{round}-{i}"))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped());
                    gate.wait();
                    let out = cmd.output().unwrap();
                    (
                        out.status.code().unwrap(),
                        String::from_utf8(out.stdout).unwrap(),
                    )
                })
            })
            .collect();
        let outs: Vec<(i32, String)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<usize> = (0..outs.len()).filter(|&i| outs[i].0 == 0).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outs:?}");
        let winner = format!("r{round}-{}", winners[0]);
        for (i, (code, out)) in outs.iter().enumerate() {
            if i != winners[0] {
                assert_eq!(*code, 2, "round {round}, pattern {}: {out}", PATTERNS[i]);
                let j: Value = serde_json::from_str(out).unwrap();
                assert_eq!(j["overlaps"][0]["agent"]["id"], winner.as_str(), "{j}");
            }
        }
        let won: Value = serde_json::from_str(&outs[winners[0]].1).unwrap();
        let key = won["key"].as_str().unwrap();
        let r = env.run_in(&top, Some(&winner), &["release", key]);
        assert_eq!(r.code, 0, "{}", r.text());
    }
}

/// The file store's `paths.json` is an index: deleting or damaging it never hides a
/// checkout, and the next checkout writes it again.
#[test]
fn the_path_index_never_hides_a_checkout() {
    if file_store_only("the_path_index_never_hides_a_checkout") {
        return;
    }
    let (env, top) = repo();
    run(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    let index = env.dir().join("paths.json");
    let listed: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    assert_eq!(
        listed["entries"]["path:src/a"],
        serde_json::json!(["src/a"])
    );
    for damage in [None, Some("{not json"), Some("[]")] {
        match damage {
            None => std::fs::remove_file(&index).unwrap(),
            Some(text) => std::fs::write(&index, text).unwrap(),
        }
        let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "src/a/x"]);
        assert_eq!(code, 2, "{damage:?}: {j}");
        assert_eq!(j["overlaps"][0]["agent"]["id"], "alice");
    }
    // The next checkout writes the index again, from the records.
    run(&env, &top, "carol", &["checkout", "--path", "docs"]);
    let listed: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    assert_eq!(
        listed["entries"]["path:src/a"],
        serde_json::json!(["src/a"])
    );
    assert_eq!(listed["entries"]["path:docs"], serde_json::json!(["docs"]));
    // A release takes the entry out.
    run(&env, &top, "carol", &["release", "path:docs"]);
    let listed: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    assert!(listed["entries"].get("path:docs").is_none(), "{listed}");
}

#[test]
fn why_explains_which_checkouts_are_in_the_way_of_paths() {
    let (env, top) = repo();
    run(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a", "--reason", "parser"],
    );
    let r = run(&env, &top, "bob", &["why", "--path", "src/*/x.rs"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "why_paths", r);
    let (_, j) = json_run(&env, &top, "bob", &["why", "B-1", "--path", "src/a/x.rs"]);
    assert_eq!(j["state"], "paths_held", "{j}");
    assert_eq!(j["can_checkout"], false);
    assert_eq!(j["paths"], serde_json::json!(["src/a/x.rs"]));
    assert!(
        j["next"]
            .as_str()
            .unwrap()
            .contains("checkout B-1 --path src/a/x.rs --queue"),
        "{j}"
    );
    let (_, j) = json_run(&env, &top, "bob", &["why", "--path", "src/b"]);
    assert_eq!(j["state"], "free", "{j}");
    assert_eq!(j["can_checkout"], true);
    // The holder's own key says what it covers.
    let (_, j) = json_run(&env, &top, "bob", &["why", "path:src/a"]);
    assert!(
        j["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("`src/a`")),
        "{j}"
    );
}

#[test]
fn a_blocked_wait_for_paths_is_granted_when_the_overlap_is_released() {
    let (env, top) = repo();
    run(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &env.dir());
    let waiter = cmd
        .current_dir(&top)
        .arg("--dir")
        .arg(env.dir())
        .args(["checkout", "--path", "src/a/x", "--wait", "30s", "--json"])
        .args(["--agent", "bob"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Bob is in his key's queue before Alice releases.
    let queued = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        let (_, j) = json_run(&env, &top, "carol", &["list"]);
        j["queues"]["path:src/a/x"]["length"] == 1
    });
    assert!(queued, "bob never queued");
    run(&env, &top, "alice", &["release", "path:src/a"]);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "granted", "{j}");
    assert_eq!(j["checkout"]["paths"], serde_json::json!(["src/a/x"]));
}

/// Two agents each holding paths the other queues for: the cycle the second wait would
/// close goes through alice's passive place (`--queue`, no blocked `--wait`), which is
/// dropped and told; bob waits (issue 46). Nobody waits forever. Through blocked
/// `--wait`s the second is refused with exit 5 (tests/waits.rs).
#[test]
fn a_wait_for_cycle_through_paths_is_broken() {
    let (env, top) = repo();
    run(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    run(&env, &top, "bob", &["checkout", "--path", "src/b"]);
    let (code, j) = json_run(
        &env,
        &top,
        "alice",
        &["checkout", "A-2", "--path", "src/b/x", "--queue"],
    );
    assert_eq!(code, 2);
    assert_eq!(j["position"], 1, "{j}");
    let (code, j) = json_run(
        &env,
        &top,
        "bob",
        &["checkout", "B-2", "--path", "src/a/y", "--queue"],
    );
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["position"], 1, "{j}");
    assert_eq!(
        j["dropped"],
        serde_json::json!([{
            "agent": "alice",
            "key": "A-2",
            "cycle": ["alice", "A-2", "bob", "B-2", "alice"]
        }]),
        "{j}"
    );
    let (_, q) = json_run(&env, &top, "observer", &["status", "A-2"]);
    assert!(
        q["queue"]["waiters"]
            .as_array()
            .is_none_or(|w| w.is_empty()),
        "{q}"
    );
}

/// Where git says the repository ignores case (`core.ignorecase`, as on macOS), patterns
/// that differ only in case name the same files: they conflict, and are stored and shown
/// in lower case. Where it does not, they are different files.
#[test]
fn patterns_differing_only_in_case_conflict_where_the_repository_ignores_case() {
    let (env, top) = repo();
    let (code, j) = json_run(&env, &top, "alice", &["checkout", "--path", "src/Foo.rs"]);
    assert_eq!(code, 0, "{j}");
    let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "src/foo.RS"]);
    assert_eq!(code, 0, "a case-sensitive repository: two files: {j}");

    let (env, top) = repo();
    let ok = std::process::Command::new("git")
        .args(["config", "core.ignorecase", "true"])
        .current_dir(&top)
        .status()
        .unwrap();
    assert!(ok.success());
    let (code, j) = json_run(&env, &top, "alice", &["checkout", "--path", "src/Foo.rs"]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(
        j["checkout"]["paths"],
        serde_json::json!(["src/foo.rs"]),
        "{j}"
    );
    let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "SRC/foo.RS"]);
    assert_eq!(code, 2, "the same key, `path:src/foo.rs`: {j}");
    assert_eq!(j["checkout"]["agent"]["id"], "alice", "{j}");
    let (code, j) = json_run(
        &env,
        &top,
        "bob",
        &["checkout", "B-1", "--path", "SRC/foo.RS"],
    );
    assert_eq!(code, 2, "{j}");
    assert_eq!(j["overlaps"][0]["agent"]["id"], "alice", "{j}");
    assert_eq!(j["overlaps"][0]["witness"], "src/foo.rs", "{j}");
    let (code, j) = json_run(&env, &top, "bob", &["checkout", "--path", "Src/*.Rs"]);
    assert_eq!(code, 2, "globs fold too: {j}");
}

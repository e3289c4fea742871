//! The merge queue recipe (README, "A merge queue"): every agent merges its branch with
//! `tasklock run merge-queue --wait … -- ./merge.sh`. Eight agents, real processes and a
//! real git remote: they merge one at a time, in the order they queued; one killed in the
//! middle of its merge, and one killed while waiting in line, hold up no one.

#[macro_use]
mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The merge each agent runs under the lock: rebase its branch on the remote's main and
/// push it there. Without the queue, concurrent pushes are rejected (not fast-forward).
/// It logs its start and end with nanosecond times; a `SLOW` file makes it hang before
/// pushing (the agent that is killed mid-merge).
const MERGE: &str = r#"#!/bin/sh
set -eu
log=$1; who=$2
echo "start $who $(date +%s%N)" >>"$log"
if [ -e SLOW ]; then while :; do sleep 1; done; fi
git fetch -q origin
git rebase -q origin/main
git push -q origin HEAD:main
echo "end $who $(date +%s%N)" >>"$log"
"#;

/// `tasklock ARGS --agent AGENT` on the real clock (the runs below judge leases by it).
fn tl(e: &Env, agent: &str, args: &[&str]) -> Run {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.env_remove("TASKLOCK_NOW")
        .arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{args:?}: {}", r.text());
    r
}

struct Agent {
    name: String,
    child: Child,
}

#[test]
fn eight_agents_merge_one_at_a_time_in_queue_order_and_a_killed_one_blocks_no_one() {
    let e = Env::new();
    let root = e.tmp.path();
    let origin = root.join("origin.git");
    git(
        root,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            origin.to_str().unwrap(),
        ],
    );
    let seed = root.join("seed");
    git(root, &["clone", "-q", origin.to_str().unwrap(), "seed"]);
    std::fs::write(seed.join("README"), "base\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-q", "-m", "base"]);
    git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    let script = root.join("merge.sh");
    std::fs::write(&script, MERGE).unwrap();
    let log = root.join("merges.log");

    // Eight agents, each with a branch of one commit of its own file.
    let names: Vec<String> = (1..=8).map(|i| format!("agent-{i}")).collect();
    let killed = "agent-4";
    let mut clones = Vec::new();
    for name in &names {
        let clone = root.join(name);
        git(root, &["clone", "-q", origin.to_str().unwrap(), name]);
        git(&clone, &["checkout", "-q", "-b", name]);
        std::fs::write(clone.join(format!("{name}.txt")), format!("{name}\n")).unwrap();
        git(&clone, &["add", "."]);
        git(&clone, &["commit", "-q", "-m", name]);
        if name == killed {
            std::fs::write(clone.join("SLOW"), "").unwrap();
        }
        clones.push(clone);
    }

    // A holder keeps the queue closed until everyone is in line, so that the order in
    // line is the order of joining.
    tl(&e, "gate", &["checkout", "merge-queue"]);
    let mut agents = Vec::new();
    for (name, clone) in names.iter().zip(clones) {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.env_remove("TASKLOCK_NOW")
            .current_dir(&clone)
            .arg("--dir")
            .arg(e.dir())
            .args([
                "run",
                "--wait",
                "5m",
                "merge-queue",
                "--agent",
                name,
                "--",
                "sh",
            ])
            .arg(&script)
            .arg(&log)
            .arg(name)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        // In line before the next one starts.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let q = tl(&e, "gate", &["status", "merge-queue", "--json"]).json();
            if q["queue"]["waiters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w == name.as_str())
            {
                break;
            }
            assert!(Instant::now() < deadline, "{name} never queued: {q}");
            std::thread::sleep(Duration::from_millis(20));
        }
        agents.push(Agent {
            name: name.clone(),
            child,
        });
    }
    let q = tl(&e, "gate", &["status", "merge-queue", "--json"]).json();
    assert_eq!(q["queue"]["waiters"], serde_json::json!(names), "{q}");
    // Another agent dies while waiting in line: it loses its place.
    let gone = "agent-6";
    let waiting = agents.iter_mut().find(|a| a.name == gone).unwrap();
    waiting.child.kill().unwrap();
    waiting.child.wait().unwrap();
    tl(&e, "gate", &["release", "merge-queue"]);

    // The killed agent: kill -9 its `tasklock run` once its merge has started.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(&format!("start {killed} "))
    {
        assert!(
            Instant::now() < deadline,
            "{killed} never started its merge"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let victim = agents.iter_mut().find(|a| a.name == killed).unwrap();
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();

    for a in &mut agents {
        if a.name == killed || a.name == gone {
            continue;
        }
        let out = wait_for(&mut a.child, Duration::from_secs(180));
        assert!(out.0.success(), "{} failed: {}", a.name, out.1);
    }

    // One at a time: each merge ended before the next started, in queue order.
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<(String, String, u128)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[1].to_string(), f[2].parse().unwrap())
        })
        .collect();
    let starts: Vec<&str> = events
        .iter()
        .filter(|e| e.0 == "start")
        .map(|e| e.1.as_str())
        .collect();
    let in_line: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != gone)
        .collect();
    assert_eq!(starts, in_line, "{text}");
    let mut inside: Option<&str> = None;
    let mut last_end = 0u128;
    for (what, who, t) in &events {
        match what.as_str() {
            "start" => {
                assert!(
                    inside.is_none() || inside == Some(killed),
                    "{who} started while {inside:?} was merging:\n{text}"
                );
                assert!(
                    *t >= last_end,
                    "{who} started before the last merge ended:\n{text}"
                );
                inside = Some(who);
            }
            "end" => {
                assert_eq!(inside, Some(who.as_str()), "{text}");
                inside = None;
                last_end = *t;
            }
            _ => unreachable!(),
        }
    }
    assert!(!text.contains(&format!("end {killed} ")), "{text}");

    // Every branch but the killed one is on main, in queue order.
    let main_log = git(&root.join("seed"), &["fetch", "-q", "origin"]);
    assert!(main_log.is_empty());
    let subjects = git(
        &root.join("seed"),
        &["log", "--format=%s", "--reverse", "origin/main"],
    );
    let merged: Vec<&str> = subjects.lines().skip(1).collect();
    let expected: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != killed && *n != gone)
        .collect();
    assert_eq!(merged, expected, "{subjects}");
    // Nothing is left held or queued.
    let q = tl(&e, "gate", &["status", "merge-queue", "--json"]).json();
    assert_eq!(q["outcome"], "free", "{q}");
    assert_eq!(q["queue"]["length"], 0, "{q}");
}

/// Wait for a child with a time limit; its status and stderr.
fn wait_for(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a merge did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

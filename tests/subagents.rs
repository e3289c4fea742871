//! Subagents are agents of their own (`<session>/<agent_id>`, with `parent`): registered,
//! shown, ended and given their identity by the Claude Code hooks. Through the real
//! binary with the clock pinned.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

/// `tasklock --dir DIR hook EVENT` with `input` on stdin and no Claude Code environment.
fn hook(e: &Env, event: &str, input: &Value) -> Run {
    let mut cmd = base_cmd(&e.now);
    for k in [
        "CLAUDE_PID",
        "CLAUDE_ENV_FILE",
        "CLAUDE_PROJECT_DIR",
        "TASKLOCK_AGENT",
    ] {
        cmd.env_remove(k);
    }
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir").arg(e.dir()).args(["hook", event]);
    Run::with_stdin(&mut cmd, &input.to_string())
}

/// The project directory the hooks are told about (named `proj`, for stable names).
fn project(e: &Env) -> PathBuf {
    let p = e.tmp.path().join("proj");
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Claude Code's input for a subagent's hook.
fn sub_input(e: &Env, session: &str, agent_id: &str) -> Value {
    json!({
        "session_id": session,
        "agent_id": agent_id,
        "agent_type": "Explore",
        "cwd": project(e),
    })
}

/// A hook that must succeed quietly or with one JSON object.
fn hook_ok(e: &Env, event: &str, input: &Value) -> Run {
    let r = hook(e, event, input);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.stderr, "", "{}", r.text());
    r
}

/// The registry's entry of `id`, as the store keeps it.
fn entry(dir: &Path, id: &str) -> Value {
    Stored::Agent(id).read(dir)
}

/// The record of `key`, as the store keeps it.
fn record(dir: &Path, key: &str) -> Value {
    Stored::Record(key).read(dir)
}

fn held_by(e: &Env, key: &str) -> Value {
    e.run(Some("observer"), &["status", key, "--json"]).json()["checkout"]["agent"]["id"].clone()
}

fn auto_releases(e: &Env) -> Vec<Value> {
    audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == "auto_release")
        .collect()
}

#[test]
fn subagent_start_registers_an_agent_of_its_own_under_its_session() {
    let e = Env::new();
    let r = hook_ok(&e, "subagent-start", &sub_input(&e, "s1", "a1"));
    let out: Value = serde_json::from_str(&r.stdout).expect(&r.stdout);
    assert_eq!(out["hookSpecificOutput"]["hookEventName"], "SubagentStart");
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains("you are agent `s1/a1`"), "{context}");
    assert!(context.contains("subagent of session `s1`"), "{context}");

    let reg = entry(&e.dir(), "s1/a1");
    assert_eq!(reg["id"], "s1/a1");
    assert_eq!(reg["parent"], "s1");
    assert_eq!(reg["name"], "Explore subagent of claude in proj #s1");
    assert_eq!(reg["status"], "subagent started");
    assert_eq!(reg["heartbeats"], 1);
    // Watched through the process it runs in: the hook's parent (here, this test).
    assert_eq!(reg["pid"], std::process::id());
    assert!(
        !Stored::Agent("s1").exists(&e.dir()),
        "the session is not registered by its subagent"
    );
}

#[test]
fn a_subagents_checkout_records_its_session_and_shows_it() {
    let mut e = Env::new();
    e.ok("s1", &["checkout", "session-task", "--reason", "the plan"]);
    hook_ok(&e, "subagent-start", &sub_input(&e, "s1", "a1"));
    let r = e.run(
        Some("s1/a1"),
        &["checkout", "explore-task", "--reason", "survey", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted");
    let agent = &j["checkout"]["agent"];
    assert_eq!(agent["id"], "s1/a1");
    assert_eq!(agent["parent"], "s1");
    assert_eq!(agent["name"], "Explore subagent of claude in proj #s1");

    // The record carries it; the session's own record has no parent at all.
    let rec = record(&e.dir(), "explore-task");
    assert_eq!(rec["agent"]["parent"], "s1", "{rec}");
    let own = record(&e.dir(), "session-task");
    assert!(own["agent"].get("parent").is_none(), "{own}");

    // JSON views: `parent` where set, left out otherwise.
    let j = e.run(None, &["list", "--json"]).json();
    let checkouts = j["checkouts"].as_array().unwrap();
    assert_eq!(checkouts.len(), 2);
    assert_eq!(checkouts[0]["key"], "explore-task");
    assert_eq!(checkouts[0]["agent"]["parent"], "s1");
    assert_eq!(checkouts[1]["key"], "session-task");
    assert!(checkouts[1]["agent"].get("parent").is_none(), "{j}");
    let j = e.run(None, &["status", "explore-task", "--json"]).json();
    assert_eq!(j["checkout"]["agent"]["parent"], "s1");
    // The rows of `agents`, and `heartbeat`'s own row, carry it too.
    let j = e.run(None, &["agents", "--json"]).json();
    let row = |id: &str| {
        j["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no row {id}: {j}"))
            .clone()
    };
    assert_eq!(row("s1/a1")["parent"], "s1", "{j}");
    assert!(row("s1").get("parent").is_none(), "{j}");
    let j = e.run(Some("s1/a1"), &["heartbeat", "--json"]).json();
    assert_eq!(j["agent"]["parent"], "s1", "{j}");

    // The session does not own its subagent's task: refused, naming the subagent.
    let r = e.run(Some("s1"), &["checkout", "explore-task", "--json"]);
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(r.json()["checkout"]["agent"]["parent"], "s1");

    // Markdown: the list's Holder cell and the details of status and a refusal.
    e.at(T5M);
    let r = e.run(Some("observer"), &["list"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stdout.contains(
            "| `explore-task` | s1/a1 (Explore subagent of claude in proj #s1), subagent of session `s1` (unproven) |"
        ),
        "{}",
        r.text()
    );
    snap!(e, "list_subagent_holder", r);
    for args in [
        &["status", "explore-task"][..],
        &["checkout", "explore-task"][..],
    ] {
        let r = e.run(Some("observer"), args);
        assert!(
            r.stdout.contains("\n- Subagent of session: `s1`\n"),
            "{args:?}: {}",
            r.text()
        );
    }
    let r = e.run(Some("observer"), &["status", "session-task"]);
    assert!(!r.stdout.contains("Subagent of session"), "{}", r.text());
}

#[test]
fn subagent_stop_ends_its_checkouts_and_leaves_the_sessions_alone() {
    let e = Env::new();
    e.ok("s1", &["checkout", "session-task"]);
    hook_ok(&e, "subagent-start", &sub_input(&e, "s1", "a1"));
    hook_ok(&e, "subagent-start", &sub_input(&e, "s1", "a2"));
    e.ok("s1/a1", &["checkout", "a1-task"]);
    e.ok("s1/a1", &["note", "a1-task", "half surveyed"]);
    e.ok("s1/a2", &["checkout", "a2-task"]);

    let r = hook_ok(&e, "subagent-stop", &sub_input(&e, "s1", "a1"));
    assert_eq!(r.stdout, "", "subagent-stop says nothing");

    assert_eq!(held_by(&e, "a1-task"), Value::Null, "released");
    assert_eq!(
        held_by(&e, "session-task"),
        "s1",
        "the session keeps its own"
    );
    assert_eq!(
        held_by(&e, "a2-task"),
        "s1/a2",
        "and its other subagent too"
    );
    let auto = auto_releases(&e);
    assert_eq!(auto.len(), 1, "{auto:?}");
    assert_eq!(auto[0]["key"], "a1-task");
    assert_eq!(auto[0]["agent"], "s1/a1");
    assert_eq!(auto[0]["reason"], "subagent_end");
    assert!(auto[0].get("by").is_none(), "{}", auto[0]);

    let reg = entry(&e.dir(), "s1/a1");
    assert_eq!(reg["ended_reason"], "subagent_end");
    assert_eq!(reg["ended_at"], T0);
    assert_eq!(entry(&e.dir(), "s1/a2")["ended_at"], Value::Null);
    let j = e.run(None, &["agents", "--all", "--json"]).json();
    let row = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "s1/a1")
        .unwrap()
        .clone();
    assert_eq!(row["state"], "dead");
    assert_eq!(row["cause"], "ended");

    // The next holder is told how it ended, and whose subagent held it.
    let j = e.ok("other", &["checkout", "a1-task", "--json"]).json();
    let prev = &j["previous"];
    assert_eq!(prev["ended"], "subagent_end", "{prev}");
    assert_eq!(prev["agent"]["id"], "s1/a1");
    assert_eq!(prev["agent"]["parent"], "s1");
    assert_eq!(prev["notes"][0]["text"], "half surveyed");
}

#[test]
fn session_end_ends_the_sessions_checkouts_and_its_subagents() {
    let e = Env::new();
    e.ok("s1", &["heartbeat"]);
    e.ok("s1", &["checkout", "session-task"]);
    hook_ok(&e, "subagent-start", &sub_input(&e, "s1", "a1"));
    e.ok("s1/a1", &["checkout", "a1-task"]);
    // Another session, and one whose id only starts the same way, are left alone.
    e.ok("s2", &["checkout", "s2-task"]);
    e.ok("s10", &["checkout", "s10-task"]);

    let r = hook_ok(
        &e,
        "session-end",
        &json!({"session_id": "s1", "cwd": project(&e)}),
    );
    assert_eq!(r.stdout, "");

    assert_eq!(held_by(&e, "session-task"), Value::Null);
    assert_eq!(held_by(&e, "a1-task"), Value::Null);
    assert_eq!(held_by(&e, "s2-task"), "s2");
    assert_eq!(held_by(&e, "s10-task"), "s10");
    let mut ended: Vec<(String, String)> = auto_releases(&e)
        .iter()
        .map(|v| {
            assert_eq!(v["reason"], "session_end", "{v}");
            (
                v["key"].as_str().unwrap().to_string(),
                v["agent"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    ended.sort();
    assert_eq!(
        ended,
        [
            ("a1-task".to_string(), "s1/a1".to_string()),
            ("session-task".to_string(), "s1".to_string())
        ]
    );
    assert_eq!(entry(&e.dir(), "s1")["ended_reason"], "session_end");
    assert_eq!(entry(&e.dir(), "s1/a1")["ended_reason"], "session_end");
}

#[test]
fn pre_tool_use_gives_a_subagents_tasklock_commands_its_identity() {
    let e = Env::new();
    let input = json!({
        "session_id": "s1",
        "agent_id": "a1",
        "tool_name": "Bash",
        "tool_input": {"command": "tasklock checkout k && git push"},
    });
    let r = hook_ok(&e, "pre-tool-use", &input);
    assert_eq!(
        r.stdout,
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"updatedInput\":{\"command\":\"tasklock checkout --agent s1/a1 k && git push\"}}}\n"
    );
    assert!(
        !e.dir().exists(),
        "rewriting a command needs no lock directory"
    );

    // The session's own calls are left as they are: no output at all.
    let mut own = input.clone();
    own.as_object_mut().unwrap().remove("agent_id");
    assert_eq!(hook_ok(&e, "pre-tool-use", &own).stdout, "");
    // Nor are other tools, or commands without tasklock.
    let mut other_tool = input.clone();
    other_tool["tool_name"] = json!("Read");
    assert_eq!(hook_ok(&e, "pre-tool-use", &other_tool).stdout, "");
    let mut no_tasklock = input.clone();
    no_tasklock["tool_input"]["command"] = json!("git status");
    assert_eq!(hook_ok(&e, "pre-tool-use", &no_tasklock).stdout, "");

    // Other fields of the tool input are kept.
    let mut more = input;
    more["tool_input"]["description"] = json!("take k");
    let out: Value = serde_json::from_str(&hook_ok(&e, "pre-tool-use", &more).stdout).unwrap();
    assert_eq!(
        out["hookSpecificOutput"]["updatedInput"],
        json!({"command": "tasklock checkout --agent s1/a1 k && git push", "description": "take k"})
    );
}

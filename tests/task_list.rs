//! Claims on Claude Code's task list through the real binary: `tasklock hook pre-tool-use`
//! fed the `TaskUpdate` payloads Claude Code 2.1.330 sends (docs/e2e.md), and
//! `tasklock hook task-completed` its `TaskCompleted` payload. A teammate in a pane of its
//! own is a `claude` process started with `--agent-name NAME --team-name TEAM`; here a
//! shell whose arguments say the same stands for it (its `CLAUDE_PID`).

#[macro_use]
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::{Value, json};

const TEAM: &str = "team-x";

/// A Claude Code session: its id, the process standing for its `claude` (a teammate's
/// arguments name it and its team), and the secret its SessionStart hook gave it.
struct Session {
    id: String,
    proc_: Child,
    secret: String,
}

impl Session {
    fn pid(&self) -> u32 {
        self.proc_.id()
    }

    /// `kill -9` of its `claude` process, reaped.
    fn kill(&mut self) {
        self.proc_.kill().unwrap();
        self.proc_.wait().unwrap();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.proc_.kill();
        let _ = self.proc_.wait();
    }
}

/// The project the hooks run in, and Claude Code's home (`~/.claude/teams/…`).
fn project(e: &Env) -> PathBuf {
    let p = e.tmp.path().join("proj");
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn home(e: &Env) -> PathBuf {
    let h = e.tmp.path().join("home");
    std::fs::create_dir_all(&h).unwrap();
    h
}

/// `tasklock hook EVENT` as the hooks of session `s` run it, not yet given its input.
fn hook_cmd(e: &Env, s: &Session, event: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    for k in [
        "CLAUDE_ENV_FILE",
        "CLAUDE_PROJECT_DIR",
        "CLAUDE_CODE_TASK_LIST_ID",
        "CLAUDE_CONFIG_DIR",
    ] {
        cmd.env_remove(k);
    }
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["hook", event])
        .current_dir(project(e))
        .env("HOME", home(e))
        .env("CLAUDE_PID", s.pid().to_string())
        .env("TASKLOCK_SECRET", &s.secret);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Start a session: a teammate `name` of `TEAM` (`None`: a session of its own, as the lead
/// is), registered by its SessionStart hook.
fn start(e: &Env, id: &str, name: Option<&str>) -> Session {
    // `read` is a builtin: the shell itself waits (on its stdin, kept open here), so
    // killing it leaves no child behind.
    let mut argv = vec!["-c".to_string(), "read _".into(), "claude".into()];
    if let Some(n) = name {
        for a in [
            "--agent-id",
            &format!("{n}@{TEAM}"),
            "--agent-name",
            n,
            "--team-name",
            TEAM,
        ] {
            argv.push(a.to_string());
        }
    }
    let proc_ = Command::new("sh")
        .args(&argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = Session {
        id: id.to_string(),
        proc_,
        secret: String::new(),
    };
    let env_file = e.tmp.path().join(format!("env-{id}"));
    let mut cmd = hook_cmd(e, &s, "session-start", &[]);
    cmd.env_remove("TASKLOCK_SECRET")
        .env("CLAUDE_ENV_FILE", &env_file);
    let input = json!({"session_id": id, "cwd": project(e), "hook_event_name": "SessionStart", "source": "startup"});
    let r = Run::with_stdin(&mut cmd, &input.to_string());
    assert_eq!(r.code, 0, "{}", r.text());
    let exported = std::fs::read_to_string(&env_file).unwrap();
    s.secret = exported
        .lines()
        .find_map(|l| l.strip_prefix("export TASKLOCK_SECRET="))
        .expect("SessionStart exports the session's secret")
        .to_string();
    s
}

/// Claude Code's PreToolUse input for a `TaskUpdate` of session `s`.
fn task_update(e: &Env, s: &Session, input: Value) -> Value {
    json!({
        "session_id": s.id,
        "transcript_path": format!("/home/u/.claude/projects/proj/{}.jsonl", s.id),
        "cwd": project(e),
        "permission_mode": "default",
        "agent_type": "general-purpose",
        "hook_event_name": "PreToolUse",
        "tool_name": "TaskUpdate",
        "tool_input": input,
        "tool_use_id": "toolu_1",
    })
}

fn claim_input(task: &str, owner: &str) -> Value {
    json!({"taskId": task, "owner": owner, "status": "in_progress"})
}

fn update(e: &Env, s: &Session, input: Value) -> Run {
    update_with(e, s, task_update(e, s, input), &[])
}

fn update_with(e: &Env, s: &Session, payload: Value, env: &[(&str, &str)]) -> Run {
    let mut cmd = hook_cmd(e, s, "pre-tool-use", env);
    let r = Run::with_stdin(&mut cmd, &payload.to_string());
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.stderr, "", "{}", r.text());
    r
}

/// The update went through: the hook said nothing.
fn allowed(r: &Run) {
    assert_eq!(r.stdout, "", "expected the update to pass\n{}", r.text());
}

/// The update was denied: Claude Code's deny, naming the holder.
fn denied(r: &Run) -> Value {
    let v = r.json();
    let out = &v["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse", "{v}");
    assert_eq!(out["permissionDecision"], "deny", "{v}");
    v
}

fn holder(e: &Env, key: &str) -> Value {
    e.run(Some("observer"), &["status", key, "--json"]).json()["checkout"]["agent"]["id"].clone()
}

/// The `TaskCompleted` input Claude Code gives a teammate's hook.
fn completed(e: &Env, s: &Session, task: &str, teammate: &str) -> Run {
    let payload = json!({
        "session_id": s.id,
        "cwd": project(e),
        "agent_type": "general-purpose",
        "hook_event_name": "TaskCompleted",
        "task_id": task,
        "task_subject": "fix the parser",
        "task_description": "e2e task",
        "teammate_name": teammate,
        "team_name": TEAM,
    });
    let mut cmd = hook_cmd(e, s, "task-completed", &[]);
    let r = Run::with_stdin(&mut cmd, &payload.to_string());
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.stderr, "", "{}", r.text());
    r
}

/// Write `~/.claude/teams/TEAM/config.json` as Claude Code does for a team `lead` leads.
fn team_config(e: &Env, lead: &Session) {
    let dir = home(e).join(".claude/teams").join(TEAM);
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({
        "name": TEAM,
        "leadAgentId": format!("team-lead@{TEAM}"),
        "leadSessionId": lead.id,
        "members": [
            {"agentId": format!("team-lead@{TEAM}"), "name": "team-lead", "agentType": "team-lead"},
            {"agentId": format!("mate0@{TEAM}"), "name": "mate0", "backendType": "tmux"},
        ],
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

#[test]
fn teammates_racing_for_one_task_get_it_once() {
    let e = Env::new();
    let mates: Vec<Session> = (0..8)
        .map(|i| start(&e, &format!("s-mate{i}"), Some(&format!("mate{i}"))))
        .collect();
    for task in ["1", "2", "3"] {
        // Every hook started and waiting for its input, then all given it at once.
        let mut children: Vec<Child> = mates
            .iter()
            .map(|s| {
                let mut cmd = hook_cmd(&e, s, "pre-tool-use", &[]);
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        for (i, c) in children.iter_mut().enumerate() {
            let input = task_update(&e, &mates[i], claim_input(task, &format!("mate{i}")));
            c.stdin
                .take()
                .unwrap()
                .write_all(input.to_string().as_bytes())
                .unwrap();
        }
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let winners: Vec<usize> = (0..outs.len())
            .filter(|&i| outs[i].stdout.is_empty())
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "exactly one claim of task {task} passes: {outs:?}"
        );
        let w = winners[0];
        let key = format!("task:{TEAM}/{task}");
        assert_eq!(holder(&e, &key), mates[w].id.as_str());
        for (i, out) in outs.iter().enumerate().filter(|(i, _)| *i != w) {
            assert!(out.status.success(), "{out:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                v["hookSpecificOutput"]["permissionDecision"], "deny",
                "mate{i}: {v}"
            );
            let reason = v["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap();
            assert!(
                reason.contains(&format!("mate{w} in team {TEAM}")),
                "the refusal names the winner: {reason}"
            );
            assert_eq!(v["tasklock"]["key"], key.as_str());
            assert_eq!(v["tasklock"]["holder"]["agent"], mates[w].id.as_str());
        }
    }
}

#[test]
fn the_holder_passes_and_completing_the_task_releases_it_done() {
    let e = Env::new();
    let (a, b) = (
        start(&e, "s-a", Some("mate0")),
        start(&e, "s-b", Some("mate1")),
    );
    let key = format!("task:{TEAM}/1");
    allowed(&update(&e, &a, claim_input("1", "mate0")));
    // Its own updates pass: the claim again, the status alone, a new subject.
    allowed(&update(&e, &a, claim_input("1", "mate0")));
    allowed(&update(
        &e,
        &a,
        json!({"taskId": "1", "status": "in_progress"}),
    ));
    allowed(&update(
        &e,
        &b,
        json!({"taskId": "1", "subject": "fix the parser first"}),
    ));
    let refused = denied(&update(
        &e,
        &b,
        json!({"taskId": "1", "status": "in_progress"}),
    ));
    insta::assert_snapshot!(
        "task_claim_denied",
        serde_json::to_string_pretty(&refused).unwrap()
    );
    // Another's completion or drop does not end the holder's checkout.
    allowed(&update(&e, &b, json!({"taskId": "1", "owner": ""})));
    assert_eq!(holder(&e, &key), "s-a");

    allowed(&update(
        &e,
        &a,
        json!({"taskId": "1", "status": "completed"}),
    ));
    let st = e.run(Some("observer"), &["status", &key, "--json"]).json();
    assert_eq!(st["outcome"], "free", "{st}");
    let release = audit(&e.dir())
        .into_iter()
        .find(|v| v["event"] == "release" && v["key"] == key.as_str())
        .expect("the completion released the key");
    assert_eq!(release["agent"], "s-a");
    assert_eq!(
        release["reason"],
        "task #1 completed in Claude Code's task list"
    );
    // TaskCompleted follows: nothing left to release, nothing said.
    assert_eq!(completed(&e, &a, "1", "mate0").stdout, "");

    // TaskCompleted alone ends the claim too.
    allowed(&update(&e, &b, claim_input("2", "mate1")));
    assert_eq!(holder(&e, &format!("task:{TEAM}/2")), "s-b");
    completed(&e, &b, "2", "mate1");
    let st = e
        .run(
            Some("observer"),
            &["status", &format!("task:{TEAM}/2"), "--json"],
        )
        .json();
    assert_eq!(st["outcome"], "free", "{st}");

    // Giving a task up (no owner) releases it, and the next claim is granted.
    allowed(&update(&e, &a, claim_input("3", "mate0")));
    allowed(&update(
        &e,
        &a,
        json!({"taskId": "3", "owner": "", "status": "pending"}),
    ));
    allowed(&update(&e, &b, claim_input("3", "mate1")));
    assert_eq!(holder(&e, &format!("task:{TEAM}/3")), "s-b");
}

#[test]
fn a_dead_teammates_task_is_free_again() {
    let e = Env::new();
    let (mut a, b) = (
        start(&e, "s-a", Some("mate0")),
        start(&e, "s-b", Some("mate1")),
    );
    let key = format!("task:{TEAM}/1");
    allowed(&update(&e, &a, claim_input("1", "mate0")));
    denied(&update(&e, &b, claim_input("1", "mate1")));
    a.kill();
    allowed(&update(&e, &b, claim_input("1", "mate1")));
    assert_eq!(holder(&e, &key), "s-b");
    let acquire = audit(&e.dir())
        .into_iter()
        .rfind(|v| v["event"] == "acquire" && v["key"] == key.as_str())
        .unwrap();
    assert_eq!(acquire["agent"], "s-b", "{acquire}");
}

#[test]
fn the_lead_assigns_without_claiming_and_lists_are_told_apart() {
    let e = Env::new();
    let lead = start(&e, "s-lead", None);
    let mate = start(&e, "s-mate0", Some("mate0"));
    team_config(&e, &lead);
    // The lead naming a teammate as the owner assigns the task: nothing is checked out,
    // and the teammate claims it when it starts.
    allowed(&update(&e, &lead, claim_input("1", "mate0")));
    let key = format!("task:{TEAM}/1");
    let st = e.run(Some("observer"), &["status", &key, "--json"]).json();
    assert_eq!(st["outcome"], "free", "{st}");
    allowed(&update(
        &e,
        &mate,
        json!({"taskId": "1", "status": "in_progress"}),
    ));
    assert_eq!(holder(&e, &key), "s-mate0");
    // The lead taking a task itself claims it, on its team's list.
    allowed(&update(&e, &lead, claim_input("2", "team-lead")));
    assert_eq!(holder(&e, &format!("task:{TEAM}/2")), "s-lead");

    // Teammates inside the lead's process (its session, an agent_id each) are agents of
    // their own on the same list.
    let inproc = |agent_id: &str| {
        let mut p = task_update(&e, &lead, claim_input("3", agent_id));
        p["agent_id"] = json!(agent_id);
        p["agent_type"] = json!(agent_id);
        p
    };
    allowed(&update_with(&e, &lead, inproc("amate2-1"), &[]));
    let v = denied(&update_with(&e, &lead, inproc("amate3-2"), &[]));
    assert_eq!(v["tasklock"]["holder"]["agent"], "s-lead/amate2-1", "{v}");
    assert_eq!(v["tasklock"]["key"], format!("task:{TEAM}/3"));

    // A session of its own works on its own list (its session id); CLAUDE_CODE_TASK_LIST_ID
    // names a list shared across sessions.
    let solo = start(&e, "s-solo", None);
    allowed(&update(
        &e,
        &solo,
        json!({"taskId": "1", "status": "in_progress"}),
    ));
    assert_eq!(holder(&e, "task:s-solo/1"), "s-solo");
    let shared = [("CLAUDE_CODE_TASK_LIST_ID", "our list")];
    let p = task_update(&e, &solo, claim_input("1", "x"));
    allowed(&update_with(&e, &solo, p, &shared));
    let p = task_update(&e, &mate, claim_input("1", "mate0"));
    denied(&update_with(&e, &mate, p, &shared));
    assert_eq!(holder(&e, "task:our-list/1"), "s-solo");
}

/// Without a lock directory (tasklock not set up here) nothing is checked.
#[test]
fn no_lock_directory_no_claims() {
    let e = Env::new();
    let s = start(&e, "s-a", Some("mate0"));
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = base_cmd(&e.now);
    cmd.args(["hook", "pre-tool-use"])
        .current_dir(elsewhere.path())
        .env("HOME", home(&e))
        .env("CLAUDE_PID", s.pid().to_string());
    let mut payload = task_update(&e, &s, claim_input("1", "mate0"));
    payload["cwd"] = json!(elsewhere.path());
    let r = Run::with_stdin(&mut cmd, &payload.to_string());
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.text());
}

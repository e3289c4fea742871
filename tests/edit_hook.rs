//! The edit hook through the real binary: `tasklock hook pre-tool-use` fed Claude Code's
//! PreToolUse JSON for Edit, Write, MultiEdit and NotebookEdit. Another live agent's
//! path checkout denies the edit with a reason for the model; the agent's own checkout
//! allows it and stamps it; an unclaimed file follows `enforce:` and `auto_checkout:`;
//! sessions and their subagents are different agents; dead and expired holders, files
//! outside the repository and links are judged as the paths they lead to.

#[macro_use]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use serde_json::{Value, json};

/// A lock directory in a fresh git repository with `src/a` and `src/b`.
fn repo() -> (Env, PathBuf) {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    (env, top)
}

fn ok(env: &Env, top: &Path, agent: &str, args: &[&str]) {
    let r = env.run_in(top, Some(agent), args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.text());
}

/// Run the hook as Claude Code would: JSON on stdin, from the session's directory,
/// the lock directory found from there (no `--dir`).
fn hook(env: &Env, cwd: &Path, payload: &Value) -> Run {
    hook_event(env, cwd, "pre-tool-use", payload)
}

fn hook_event(env: &Env, cwd: &Path, event: &str, payload: &Value) -> Run {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &env.dir());
    cmd.args(["hook", event]).current_dir(cwd);
    Run::with_stdin(&mut cmd, &payload.to_string())
}

fn edit(session: &str, cwd: &Path, tool: &str, file: &Path) -> Value {
    let field = if tool == "NotebookEdit" {
        "notebook_path"
    } else {
        "file_path"
    };
    json!({
        "session_id": session,
        "cwd": cwd,
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": { field: file, "old_string": "a", "new_string": "b" },
    })
}

fn sub_edit(session: &str, sub: &str, cwd: &Path, file: &Path) -> Value {
    let mut v = edit(session, cwd, "Edit", file);
    v["agent_id"] = json!(sub);
    v["agent_type"] = json!("general-purpose");
    v
}

/// The hook's decision: `Some(reason)` when denied, `None` when allowed (exit 0 always).
fn denied(r: &Run) -> Option<String> {
    assert_eq!(r.code, 0, "a hook always exits 0: {}", r.text());
    if r.stdout.trim().is_empty() {
        return None;
    }
    let v: Value = r.json();
    let out = &v["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse", "{v}");
    match out["permissionDecision"].as_str() {
        Some("deny") => Some(
            out["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .to_string(),
        ),
        None => None,
        Some(other) => panic!("unexpected decision {other}: {v}"),
    }
}

fn stamps(top: &Path, agent: &str) -> Vec<Value> {
    let dir = top.join(".git/tasklock/stamps");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    // One file per agent, named by its id encoded (plain for these ids); "" reads all.
    let mut out = Vec::new();
    for e in entries {
        let path = e.unwrap().path();
        if !agent.is_empty() && path.file_name().unwrap() != format!("{agent}.jsonl").as_str() {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

fn set_config(env: &Env, text: &str) {
    std::fs::write(env.dir().join("config.yaml"), text).unwrap();
}

#[test]
fn another_agents_checkout_denies_the_edit_with_a_reason() {
    let (env, top) = repo();
    ok(
        &env,
        &top,
        "alice",
        &[
            "checkout",
            "--path",
            "src/a/**",
            "--reason",
            "parser rewrite",
        ],
    );
    for tool in ["Edit", "Write", "MultiEdit", "NotebookEdit"] {
        let r = hook(
            &env,
            &top,
            &edit("bob", &top, tool, &top.join("src/a/x.rs")),
        );
        let reason = denied(&r).unwrap_or_else(|| panic!("{tool} was allowed: {}", r.text()));
        for part in [
            "`src/a/x.rs`",
            "`alice`",
            "`path:src/a/**`",
            "pattern `src/a/**`",
            "parser rewrite",
            "work on other files",
            "tasklock checkout --path src/a/x.rs --queue",
            "Never retry",
        ] {
            assert!(reason.contains(part), "{tool}: {part:?} not in {reason}");
        }
        // The same facts for programs, beside Claude Code's fields.
        assert_eq!(
            r.json()["tasklock"],
            json!({
                "file": "src/a/x.rs",
                "holders": [{
                    "agent": "alice",
                    "name": null,
                    "key": "path:src/a/**",
                    "token": 1,
                    "pattern": "src/a/**",
                    "until": "2026-01-01T00:30:00Z",
                    "reserved": false,
                }],
            }),
            "{tool}"
        );
        if tool == "Edit" {
            snap!(env, "deny", r);
        }
    }
    // Nothing was stamped for bob, nothing changed in the store.
    assert!(stamps(&top, "bob").is_empty());
    let list = env.run_in(&top, Some("bob"), &["list", "--json"]).json();
    assert_eq!(list["checkouts"].as_array().unwrap().len(), 1, "{list}");
    // A file next to the checkout is not covered.
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Write", &top.join("src/b/y.rs")),
    );
    assert_eq!(denied(&r), None);
    assert_eq!(r.stdout, "", "{}", r.text());
}

#[test]
fn the_agents_own_checkout_allows_the_edit_and_stamps_it() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "T-1", "--path", "src/a"]);
    // A relative cwd inside the repository, the file named absolutely.
    let r = hook(
        &env,
        &top.join("src"),
        &edit(
            "alice",
            &top.join("src"),
            "Edit",
            &top.join("src/a/deep/x.rs"),
        ),
    );
    assert_eq!(denied(&r), None);
    assert_eq!(r.stdout, "", "allowed without output: {}", r.text());
    assert_eq!(r.stderr, "", "{}", r.text());
    let s = stamps(&top, "alice");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["file"], "src/a/deep/x.rs");
    assert_eq!(s[0]["key"], "T-1");
    assert_eq!(s[0]["token"], 1);
    assert_eq!(s[0]["at"], "2026-01-01T00:00:00Z");
}

#[test]
fn unclaimed_files_follow_the_settings() {
    let (env, top) = repo();
    let file = top.join("src/b/y.rs");
    // Default: allowed, nothing written.
    let r = hook(&env, &top, &edit("bob", &top, "Write", &file));
    assert_eq!(denied(&r), None);
    assert_eq!(r.stdout, "");
    assert!(stamps(&top, "bob").is_empty());

    // auto_checkout: the file is checked out for the agent, and stamped.
    set_config(&env, "auto_checkout: true\n");
    let r = hook(&env, &top, &edit("bob", &top, "Write", &file));
    assert_eq!(denied(&r), None, "{}", r.text());
    let ctx = r.json()["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ctx.contains("`path:src/b/y.rs`"), "{ctx}");
    let status = env
        .run_in(&top, Some("bob"), &["status", "path:src/b/y.rs", "--json"])
        .json();
    assert_eq!(status["checkout"]["agent"]["id"], "bob", "{status}");
    assert_eq!(status["checkout"]["paths"], json!(["src/b/y.rs"]));
    let token = status["checkout"]["token"].clone();
    let s = stamps(&top, "bob");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["key"], "path:src/b/y.rs");
    assert_eq!(s[0]["token"], token);
    // The next edit is inside bob's own checkout: no second checkout, one more stamp.
    let r = hook(&env, &top, &edit("bob", &top, "Edit", &file));
    assert_eq!(r.stdout, "", "{}", r.text());
    assert_eq!(stamps(&top, "bob").len(), 2);
    // Carol's auto checkout of the same file is refused, so her edit is denied.
    let r = hook(&env, &top, &edit("carol", &top, "Edit", &file));
    let reason = denied(&r).expect("denied");
    assert!(reason.contains("`bob`"), "{reason}");
    // An agent whose auto checkout is refused with enforce: warn is warned, not denied.
    set_config(&env, "auto_checkout: true\nenforce: warn\n");
    let r = hook(&env, &top, &edit("carol", &top, "Edit", &file));
    assert_eq!(denied(&r), None);
    let v = r.json();
    assert!(
        v["systemMessage"].as_str().unwrap().contains("`bob`"),
        "{v}"
    );
    assert_eq!(
        v["systemMessage"], v["hookSpecificOutput"]["additionalContext"],
        "{v}"
    );
}

#[test]
fn a_refused_auto_checkout_names_who_is_in_the_way() {
    let (env, top) = repo();
    // Bob's tree is handed to carol, next in line: held back for her, held by nobody.
    ok(&env, &top, "bob", &["checkout", "--path", "src/b"]);
    let r = env.run_in(
        &top,
        Some("carol"),
        &["checkout", "--path", "src/b", "--queue"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    ok(&env, &top, "bob", &["release", "path:src/b"]);
    set_config(&env, "auto_checkout: true\n");
    let r = hook(
        &env,
        &top,
        &edit("dave", &top, "Edit", &top.join("src/b/y.rs")),
    );
    let reason = denied(&r).expect("denied");
    assert!(
        reason.contains("`carol` is next in line for `path:src/b`"),
        "{reason}"
    );
    let data = &r.json()["tasklock"];
    assert_eq!(data["file"], "src/b/y.rs", "{data}");
    let holder = &data["holders"][0];
    assert_eq!(data["holders"].as_array().unwrap().len(), 1, "{data}");
    assert_eq!(holder["agent"], "carol", "{data}");
    assert_eq!(holder["key"], "path:src/b", "{data}");
    assert_eq!(holder["pattern"], "src/b", "{data}");
    assert_eq!(
        holder["token"],
        Value::Null,
        "a reservation has no token: {data}"
    );
    assert_eq!(holder["reserved"], true, "{data}");
    assert!(holder["until"].is_string(), "{data}");
}

#[test]
fn enforce_warn_and_off_let_covered_edits_through() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    let file = top.join("src/a/x.rs");
    set_config(&env, "enforce: warn\n");
    let r = hook(&env, &top, &edit("bob", &top, "Edit", &file));
    assert_eq!(denied(&r), None);
    let v = r.json();
    let warning = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(warning.starts_with("tasklock warning: `src/a/x.rs`"), "{v}");
    assert!(warning.contains("`alice`"), "{v}");
    assert_eq!(v["systemMessage"], warning);
    let holders = &v["tasklock"]["holders"];
    assert_eq!(v["tasklock"]["file"], "src/a/x.rs", "{v}");
    assert_eq!(holders.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(holders[0]["agent"], "alice", "{v}");
    assert_eq!(holders[0]["key"], "path:src/a", "{v}");
    assert_eq!(holders[0]["pattern"], "src/a", "{v}");
    set_config(&env, "enforce: off\n");
    let r = hook(&env, &top, &edit("bob", &top, "Edit", &file));
    assert_eq!(r.stdout, "", "{}", r.text());
    // Off is about other agents' files: the holder's own edits are still stamped.
    let r = hook(&env, &top, &edit("alice", &top, "Edit", &file));
    assert_eq!(r.stdout, "", "{}", r.text());
    assert_eq!(stamps(&top, "alice").len(), 1);
    assert!(stamps(&top, "bob").is_empty());
}

#[test]
fn a_session_and_its_subagents_are_different_agents() {
    let (env, top) = repo();
    let file = top.join("src/a/x.rs");
    ok(&env, &top, "S1", &["checkout", "--path", "src/a"]);
    // The session edits its own file; its subagent may not.
    assert_eq!(
        denied(&hook(&env, &top, &edit("S1", &top, "Edit", &file))),
        None
    );
    let reason = denied(&hook(&env, &top, &sub_edit("S1", "sub-1", &top, &file)))
        .expect("the subagent is denied its session's file");
    assert!(reason.contains("`S1`"), "{reason}");
    // The other way round: a subagent's checkout is not its session's, nor a sibling's.
    ok(&env, &top, "S1/sub-2", &["checkout", "--path", "src/b"]);
    let b = top.join("src/b/y.rs");
    assert_eq!(
        denied(&hook(&env, &top, &sub_edit("S1", "sub-2", &top, &b))),
        None
    );
    let reason = denied(&hook(&env, &top, &edit("S1", &top, "Edit", &b))).expect("denied");
    assert!(reason.contains("`S1/sub-2`"), "{reason}");
    assert!(denied(&hook(&env, &top, &sub_edit("S1", "sub-3", &top, &b))).is_some());
    // Stamps go to the agent that edited.
    let all = stamps(&top, "");
    assert_eq!(all.len(), 2, "{all:?}");
    let dir = top.join(".git/tasklock/stamps");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2);
}

#[test]
fn dead_and_expired_holders_do_not_block() {
    let (mut env, top) = repo();
    // Alice beats once and goes silent with a long lease; Dave's lease just runs out.
    ok(&env, &top, "alice", &["heartbeat"]);
    ok(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a", "--timeout", "2h"],
    );
    ok(
        &env,
        &top,
        "dave",
        &["checkout", "--path", "src/b", "--timeout", "1m"],
    );
    assert!(
        denied(&hook(
            &env,
            &top,
            &edit("bob", &top, "Edit", &top.join("src/a/x.rs"))
        ))
        .is_some()
    );
    assert!(
        denied(&hook(
            &env,
            &top,
            &edit("bob", &top, "Edit", &top.join("src/b/x.rs"))
        ))
        .is_some()
    );
    env.at("2026-01-01T00:20:00Z");
    for f in ["src/a/x.rs", "src/b/x.rs"] {
        let r = hook(&env, &top, &edit("bob", &top, "Edit", &top.join(f)));
        assert_eq!(r.stdout, "", "{f}: {}", r.text());
    }
    // Read only: the checkouts are left for the next checkout (or list) to end.
    assert!(
        audit(&env.dir())
            .iter()
            .all(|e| e["event"] != "auto_release"),
        "the hook ended a checkout"
    );
}

#[test]
fn files_outside_the_repository_are_not_judged() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "**"]);
    let outside = tempfile::tempdir().unwrap();
    for file in [outside.path().join("x.rs"), top.join("../elsewhere.rs")] {
        let r = hook(&env, &top, &edit("bob", &top, "Write", &file));
        assert_eq!(r.stdout, "", "{}: {}", file.display(), r.text());
        assert_eq!(r.stderr, "", "{}", r.text());
    }
    // Inside, everything is alice's.
    assert!(
        denied(&hook(
            &env,
            &top,
            &edit("bob", &top, "Write", &top.join("README"))
        ))
        .is_some()
    );
}

#[test]
fn a_link_into_a_covered_directory_is_the_file_it_leads_to() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    std::os::unix::fs::symlink(top.join("src/a"), top.join("shortcut")).unwrap();
    std::os::unix::fs::symlink("a/x.rs", top.join("src/alias.rs")).unwrap();
    for via in ["shortcut/x.rs", "src/alias.rs"] {
        let reason = denied(&hook(
            &env,
            &top,
            &edit("bob", &top, "Edit", &top.join(via)),
        ))
        .unwrap_or_else(|| panic!("{via} was allowed"));
        assert!(reason.contains("`src/a/x.rs`"), "{reason}");
    }
}

#[test]
fn errors_go_to_stderr_and_the_edit_is_allowed() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    set_config(&env, "enforce: sometimes\n");
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Edit", &top.join("src/a/x.rs")),
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, "", "{}", r.text());
    assert!(r.stderr.contains("enforce"), "{}", r.text());
    // Other tools are not judged as edits; Bash calls are left alone.
    set_config(&env, "");
    let mut read = edit("bob", &top, "Read", &top.join("src/a/x.rs"));
    read["tool_name"] = json!("Read");
    assert_eq!(hook(&env, &top, &read).stdout, "");
}

#[test]
fn without_a_lock_directory_edits_pass_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env {
        tmp,
        now: T0.into(),
        operator: false,
    };
    let dir = env.tmp.path().join("plain");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = base_cmd(T0);
    cmd.args(["hook", "pre-tool-use"])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let payload = edit("bob", &dir, "Write", &dir.join("x"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert!(!dir.join(".locks").exists());
}

#[test]
fn init_wires_the_edit_matcher_beside_bash() {
    let (env, top) = repo();
    // A project set up before the edit hook: the Bash matcher only.
    std::fs::create_dir_all(top.join(".claude")).unwrap();
    let old = json!({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "tasklock hook pre-tool-use", "timeout": 10}]}
    ]}});
    std::fs::write(top.join(".claude/settings.json"), old.to_string()).unwrap();
    ok(&env, &top, "me", &["init"]);
    let read = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(top.join(".claude/settings.json")).unwrap())
            .unwrap()
    };
    let pre = read()["hooks"]["PreToolUse"].clone();
    let matchers: Vec<&str> = pre
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["matcher"].as_str().unwrap())
        .collect();
    // And the task list's claims beside them.
    assert_eq!(
        matchers,
        ["Bash", "Edit|Write|MultiEdit|NotebookEdit", "TaskUpdate"],
        "{pre}"
    );
    assert_eq!(
        pre[1]["hooks"][0]["command"], "tasklock hook pre-tool-use",
        "{pre}"
    );
    // Again: nothing added twice.
    let r = env.run_in(&top, Some("me"), &["init", "--json"]);
    let changes = r.json()["changes"].clone();
    let settings = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().ends_with("settings.json"))
        .unwrap();
    assert_eq!(settings["action"], "unchanged", "{changes}");
    assert_eq!(read()["hooks"]["PreToolUse"], pre);
}

/// In a repository that ignores case, an edit of another agent's file under another
/// case is denied too: the hook folds case as checkouts do.
#[test]
fn the_edit_hook_folds_case_where_the_repository_ignores_case() {
    let (env, top) = repo();
    let status = std::process::Command::new("git")
        .args(["config", "core.ignorecase", "true"])
        .current_dir(&top)
        .status()
        .unwrap();
    assert!(status.success());
    ok(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a/Parser.rs"],
    );
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Edit", &top.join("SRC/A/parser.RS")),
    );
    let reason = denied(&r).unwrap_or_else(|| panic!("not denied: {}", r.text()));
    assert!(reason.contains("alice"), "{reason}");
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["tasklock"]["file"], "src/a/parser.rs", "{j}");
    assert_eq!(j["tasklock"]["holders"][0]["agent"], "alice", "{j}");
    // Alice's own edit under any case is hers.
    let r = hook(
        &env,
        &top,
        &edit("alice", &top, "Edit", &top.join("src/A/PARSER.rs")),
    );
    assert_eq!(denied(&r), None, "{}", r.text());
}

// ---------------------------------------------------------------------------------------
// Codex: apply_patch

/// Codex's PreToolUse input for an `apply_patch` call: the patch text in
/// `tool_input.command`, its paths relative to the session's directory.
fn patch(session: &str, cwd: &Path, patch: &str) -> Value {
    json!({
        "session_id": session,
        "turn_id": "turn-1",
        "transcript_path": "/home/u/.codex/sessions/2026/01/01/rollout-2026-01-01T00-00-00-x.jsonl",
        "cwd": cwd,
        "hook_event_name": "PreToolUse",
        "model": "gpt-5.5",
        "permission_mode": "bypassPermissions",
        "tool_name": "apply_patch",
        "tool_input": { "command": patch },
        "tool_use_id": "call_0",
    })
}

#[test]
fn a_codex_patch_touching_another_agents_checkout_is_denied() {
    let (env, top) = repo();
    ok(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a.rs", "--reason", "lexer fix"],
    );
    ok(&env, &top, "bob", &["checkout", "B-1", "--path", "src/b"]);
    // One file of bob's own and one of alice's: the whole patch is refused, and nothing
    // is stamped (the patch is not applied).
    let text = "*** Begin Patch\n*** Add File: src/b/new.rs\n+pub fn f() {}\n*** Update File: src/a.rs\n@@\n-old\n+new\n*** End Patch\n";
    let r = hook(&env, &top, &patch("bob", &top, text));
    let reason = denied(&r).unwrap_or_else(|| panic!("allowed: {}", r.text()));
    for part in [
        "`src/a.rs`",
        "`alice`",
        "`path:src/a.rs`",
        "lexer fix",
        "tasklock checkout --path src/a.rs --queue",
    ] {
        assert!(reason.contains(part), "{part:?} not in {reason}");
    }
    assert!(!reason.contains("src/b/new.rs"), "{reason}");
    // Codex drops (and then allows) hook output with keys it does not know: the deny
    // carries Claude Code's fields only.
    let v = r.json();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["hookSpecificOutput"],
        "{v}"
    );
    assert_eq!(
        v["hookSpecificOutput"].as_object().unwrap().len(),
        3,
        "hookEventName, permissionDecision, permissionDecisionReason: {v}"
    );
    snap!(env, "patch_deny", r);
    assert!(stamps(&top, "bob").is_empty());

    // Every kind of line names a file: a delete, and a move into the checkout.
    for text in [
        "*** Begin Patch\n*** Delete File: src/a.rs\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: src/b/x.rs\n*** Move to: src/a.rs\n@@\n-a\n+b\n*** End Patch\n",
    ] {
        let r = hook(&env, &top, &patch("bob", &top, text));
        let reason = denied(&r).unwrap_or_else(|| panic!("allowed: {text}\n{}", r.text()));
        assert!(reason.contains("`alice`"), "{reason}");
    }
    // Paths are relative to the session's directory.
    let r = hook(
        &env,
        &top.join("src"),
        &patch(
            "bob",
            &top.join("src"),
            "*** Begin Patch\n*** Update File: a.rs\n*** End Patch\n",
        ),
    );
    assert!(denied(&r).is_some(), "{}", r.text());
    // Alice's own patch of her file is allowed, and stamped.
    let r = hook(
        &env,
        &top,
        &patch(
            "alice",
            &top,
            "*** Begin Patch\n*** Update File: src/a.rs\n*** End Patch\n",
        ),
    );
    assert_eq!(r.stdout, "", "{}", r.text());
    let s = stamps(&top, "alice");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["file"], "src/a.rs");
    assert_eq!(s[0]["key"], "path:src/a.rs");
}

#[test]
fn a_codex_patch_inside_the_agents_own_checkout_is_allowed_and_stamped() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/a.rs"]);
    ok(&env, &top, "bob", &["checkout", "B-1", "--path", "src/b"]);
    // Two files of bob's checkout (one moved in from an unclaimed file) and one file nobody
    // holds: allowed without a word; bob's two are stamped.
    let text = "*** Begin Patch\n*** Add File: src/b/new.rs\n+x\n*** Update File: src/c.rs\n*** Move to: src/b/moved.rs\n@@\n-a\n+b\n*** End Patch\n";
    let r = hook(&env, &top, &patch("bob", &top, text));
    assert_eq!(denied(&r), None);
    assert_eq!(r.stdout, "", "{}", r.text());
    assert_eq!(r.stderr, "", "{}", r.text());
    let files: Vec<Value> = stamps(&top, "bob")
        .iter()
        .map(|s| {
            assert_eq!(s["key"], "B-1", "{s}");
            s["file"].clone()
        })
        .collect();
    assert_eq!(files, [json!("src/b/new.rs"), json!("src/b/moved.rs")]);

    // enforce: warn lets a patch of alice's file through with the warning for the model
    // (no keys Codex does not know), and stamps nothing for it.
    set_config(&env, "enforce: warn\n");
    let text = "*** Begin Patch\n*** Update File: src/a.rs\n*** End Patch\n";
    let r = hook(&env, &top, &patch("bob", &top, text));
    assert_eq!(denied(&r), None);
    let v = r.json();
    assert!(v.get("tasklock").is_none(), "{v}");
    let ctx = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(
        ctx.contains("`alice`") && ctx.contains("enforce: warn"),
        "{ctx}"
    );
    assert_eq!(stamps(&top, "bob").len(), 2);
}

#[test]
fn a_malformed_codex_patch_is_left_to_codex() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/**"]);
    for input in [
        json!({ "command": "this is not a patch" }),
        json!({ "command": "*** Begin Patch\n*** Update File:\n*** End Patch" }),
        json!({ "command": 42 }),
        json!({}),
        json!(null),
    ] {
        let mut payload = patch("bob", &top, "");
        payload["tool_input"] = input.clone();
        let r = hook(&env, &top, &payload);
        assert_eq!(r.code, 0, "{input}: {}", r.text());
        assert_eq!(r.stdout, "", "{input}: {}", r.text());
        assert_eq!(r.stderr, "", "{input}: {}", r.text());
    }
    // A path outside the repository is not judged; one inside still is.
    let text = "*** Begin Patch\n*** Add File: /etc/x\n*** Update File: ../../outside\n*** Update File: src/z.rs\n*** End Patch\n";
    let r = hook(&env, &top, &patch("bob", &top, text));
    let reason = denied(&r).expect("src/z.rs is alice's");
    assert!(reason.contains("`src/z.rs`"), "{reason}");
}

/// The file an edit really changes is judged, however its path is written: through a
/// link from outside the repository, `..` back into it from next to it, `..` after a
/// link inside it, and from a session whose directory is itself reached through a link
/// (as `/tmp -> /private/tmp` on macOS).
#[test]
fn paths_through_links_and_dotdot_are_the_file_they_change() {
    let (env, top) = repo();
    std::fs::write(top.join("src/held.txt"), "x\n").unwrap();
    ok(&env, &top, "alice", &["checkout", "--path", "src/held.txt"]);
    let elsewhere = tempfile::tempdir().unwrap();
    let out = elsewhere.path();
    std::os::unix::fs::symlink(top.join("src"), out.join("alias")).unwrap();
    std::os::unix::fs::symlink(&top, out.join("repo")).unwrap();
    std::fs::create_dir_all(top.join("src/a/deep")).unwrap();
    std::os::unix::fs::symlink(top.join("src/a/deep"), top.join("d")).unwrap();
    let name = top.file_name().unwrap().to_str().unwrap();
    for file in [
        out.join("alias/held.txt"),
        out.join("repo/src/held.txt"),
        // `d` is `src/a/deep`: up twice is `src`.
        top.join("d/../../held.txt"),
        top.join(format!("../{name}/src/held.txt")),
    ] {
        let r = hook(&env, &top, &edit("bob", &top, "Write", &file));
        let reason =
            denied(&r).unwrap_or_else(|| panic!("{} was allowed: {}", file.display(), r.text()));
        assert!(reason.contains("`src/held.txt`"), "{reason}");
    }
    // The session itself works through the link.
    let cwd = out.join("repo");
    let r = hook(
        &env,
        &cwd,
        &edit("bob", &cwd, "Write", &cwd.join("src/held.txt")),
    );
    assert!(denied(&r).is_some(), "{}", r.text());
    // A Codex patch of `../<repo>/src/held.txt`, relative to the session's directory.
    for (cwd, file) in [
        (top.clone(), format!("../{name}/src/held.txt")),
        (top.join("src/a"), "../../d/../../held.txt".to_string()),
    ] {
        let text = format!("*** Begin Patch\n*** Update File: {file}\n@@\n-x\n+y\n*** End Patch\n");
        let r = hook(&env, &cwd, &patch("bob", &cwd, &text));
        assert!(denied(&r).is_some(), "{file}: {}", r.text());
    }
    // Outside the repository, even through `..`, is still not judged.
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Write", &top.join("d/../../../../x.txt")),
    );
    assert_eq!(r.stdout, "", "{}", r.text());
}

/// A file name with a tab, a newline or a direction-changing character is a file like
/// any other: covered by a checkout, an edit of it is refused.
#[test]
fn odd_file_names_are_judged() {
    let (env, top) = repo();
    ok(&env, &top, "alice", &["checkout", "--path", "src/a"]);
    for name in [
        "tab\there.rs",
        "new\nline.rs",
        "\u{202e}sr.exe",
        "bell\u{7}.rs",
    ] {
        let file = top.join("src/a").join(name);
        let r = hook(&env, &top, &edit("bob", &top, "Write", &file));
        let reason = denied(&r).unwrap_or_else(|| panic!("{name:?} was allowed: {}", r.text()));
        assert_eq!(r.stderr, "", "{}", r.text());
        // Shown with its hidden characters as code points, quoted for the shell so
        // that they are still there.
        assert!(
            !reason.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{reason:?}"
        );
        assert!(reason.contains("--path $'src/a/"), "{reason}");
    }
}

fn shell(session: &str, cwd: &Path, command: &str) -> Value {
    let mut v = patch(session, cwd, "");
    v["tool_name"] = json!("Bash");
    v["tool_input"] = json!({ "command": command });
    v
}

/// Codex applies a patch the model runs as a shell command (`apply_patch <<'PATCH'`, the
/// argument form, `applypatch`, after `cd DIR &&`) and reports it as `Bash`: the gate
/// judges it as the tool, and records an allowed one at once (no PostToolUse follows).
/// Other commands pass with no output; a patch whose text is not in the command is
/// refused while paths are checked out.
#[test]
fn a_codex_shell_patch_is_judged_as_the_tool() {
    let (env, top) = repo();
    ok(
        &env,
        &top,
        "alice",
        &["checkout", "--path", "src/a.rs", "--reason", "lexer fix"],
    );
    let body =
        |f: &str| format!("*** Begin Patch\n*** Update File: {f}\n@@\n-x\n+y\n*** End Patch");
    for (cwd, command) in [
        (
            top.clone(),
            format!("apply_patch <<'PATCH'\n{}\nPATCH\n", body("src/a.rs")),
        ),
        (
            top.clone(),
            format!("cd src && apply_patch <<'EOF'\n{}\nEOF", body("a.rs")),
        ),
        (top.clone(), format!("applypatch '{}'", body("src/a.rs"))),
        (
            top.join("src/b"),
            format!("cd .. && apply_patch \"{}\"", body("a.rs")),
        ),
        (
            top.clone(),
            format!(
                "echo go; cat <<'P' | apply_patch\n{}\nP\n",
                body("src/a.rs")
            ),
        ),
    ] {
        let r = hook(&env, &cwd, &shell("bob", &cwd, &command));
        let reason = denied(&r).unwrap_or_else(|| panic!("allowed: {command}\n{}", r.text()));
        assert!(
            reason.contains("`src/a.rs`") && reason.contains("`alice`"),
            "{reason}"
        );
        // Codex's answer: the decision only.
        assert_eq!(r.json().as_object().unwrap().len(), 1, "{}", r.stdout);
    }
    assert!(records(&top).is_empty(), "a refused patch is not recorded");
    // One of bob's own files: allowed, and recorded as bob's edit at once.
    let r = hook(
        &env,
        &top,
        &shell(
            "bob",
            &top,
            &format!("cd src && apply_patch <<'PATCH'\n{}\nPATCH", body("b/x.rs")),
        ),
    );
    assert_eq!(r.stdout, "", "{}", r.text());
    let recs = records(&top);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        (&recs[0]["file"], &recs[0]["agent"]),
        (&json!("src/b/x.rs"), &json!("bob"))
    );
    // Ordinary commands are not edits: no output, nothing recorded.
    for command in [
        "ls -la",
        "grep -rn apply_patch src",
        "cargo test",
        "echo '*** Update File: src/a.rs'",
    ] {
        let r = hook(&env, &top, &shell("bob", &top, command));
        assert_eq!(r.stdout, "", "{command}: {}", r.text());
    }
    // Text that names the program and carries patch headers without running it is judged
    // (a false alarm is cheaper than a miss), but it is no edit to record.
    let notes = "cat > notes.md <<'EOF'\nrun apply_patch with:\n*** Update File: src/b/y.rs\nEOF\n";
    let r = hook(&env, &top, &shell("bob", &top, notes));
    assert_eq!(r.stdout, "", "{}", r.text());
    let notes = notes.replace("src/b/y.rs", "src/a.rs");
    assert!(denied(&hook(&env, &top, &shell("bob", &top, &notes))).is_some());
    assert_eq!(records(&top).len(), 1);
    // A patch read from elsewhere: which files it changes cannot be told.
    for command in [
        "apply_patch < /tmp/p.diff",
        "cd \"$D\" && apply_patch <<'P'\n*** Begin Patch\n*** Update File: x\n*** End Patch\nP",
    ] {
        let r = hook(&env, &top, &shell("bob", &top, command));
        let reason = denied(&r).unwrap_or_else(|| panic!("allowed: {command}\n{}", r.text()));
        assert!(reason.contains("cannot tell which files"), "{reason}");
    }
    // … which matters only while paths are checked out.
    ok(&env, &top, "alice", &["release", "--all"]);
    let r = hook(&env, &top, &shell("bob", &top, "apply_patch < /tmp/p.diff"));
    assert_eq!(r.stdout, "", "{}", r.text());
}

fn records(top: &Path) -> Vec<Value> {
    let Ok(it) = std::fs::read_dir(top.join(".git/tasklock/edits")) else {
        return Vec::new();
    };
    it.flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect()
}

/// An absolute path into another worktree of the same repository is that worktree's file
/// (all worktrees share one layout, and one lock directory): judged by its path there.
#[test]
fn a_file_of_another_worktree_is_judged_by_its_path_there() {
    let (env, top) = repo();
    std::fs::write(top.join("src/held.txt"), "x\n").unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&top)
            .output()
            .unwrap();
        assert!(ok.status.success(), "{args:?}: {ok:?}");
    };
    git(&["add", "src/held.txt"]);
    git(&["commit", "-q", "-m", "held"]);
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path().join("wt2");
    git(&["worktree", "add", "-q", "--detach", other.to_str().unwrap()]);
    ok(&env, &top, "alice", &["checkout", "--path", "src/held.txt"]);
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Write", &other.join("src/held.txt")),
    );
    let reason = denied(&r).unwrap_or_else(|| panic!("allowed: {}", r.text()));
    assert!(reason.contains("`src/held.txt`"), "{reason}");
    // Another repository is not ours to judge.
    let stranger = tempfile::tempdir().unwrap();
    std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(stranger.path())
        .status()
        .unwrap();
    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Write", &stranger.path().join("src/held.txt")),
    );
    assert_eq!(r.stdout, "", "{}", r.text());
}

/// Claude Code and Codex apply a name's `..` to its text before the kernel resolves the
/// links along it (Claude Code `path.normalize`s `file_path`, Codex makes a patch's names
/// absolute and normalised), so `l/../src/a.rs` with `l -> a/b` is `src/a.rs` to them
/// while the kernel would take it to `a/src/a.rs`. The gate judges both forms: every form
/// of a file another agent holds is refused, an unclaimed one is still allowed, and the
/// edit is recorded as the file the client writes.
#[test]
fn every_form_a_client_may_reach_a_file_in_is_judged() {
    let (env, top) = repo();
    let names = dotdot_layout(&top);
    ok(&env, &top, "alice", &["checkout", "--path", "src/a.rs"]);
    for name in &names {
        // Claude Code: an absolute `file_path`, or a relative one it resolves itself.
        for file in [top.join(name), PathBuf::from(name)] {
            let r = hook(&env, &top, &edit("bob", &top, "Edit", &file));
            let reason = denied(&r)
                .unwrap_or_else(|| panic!("{} was allowed: {}", file.display(), r.text()));
            assert!(reason.contains("`src/a.rs`"), "{reason}");
        }
        // Codex: the apply_patch tool, and a patch applied through the shell.
        let text = format!("*** Begin Patch\n*** Update File: {name}\n@@\n-a\n+b\n*** End Patch\n");
        let r = hook(&env, &top, &patch("bob", &top, &text));
        assert!(denied(&r).is_some(), "patch of {name}: {}", r.text());
        let r = hook(
            &env,
            &top,
            &shell(
                "bob",
                &top,
                &format!("apply_patch <<'PATCH'\n{text}PATCH\n"),
            ),
        );
        assert!(denied(&r).is_some(), "shell patch of {name}: {}", r.text());
    }
    // `cd l/.. &&` is the repository's top to Codex.
    let text = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** End Patch\n";
    let r = hook(
        &env,
        &top,
        &shell(
            "bob",
            &top,
            &format!("cd l/.. && apply_patch <<'PATCH'\n{text}PATCH\n"),
        ),
    );
    assert!(denied(&r).is_some(), "cd l/..: {}", r.text());

    // An unclaimed file through the same forms is allowed.
    for name in &names {
        let free = name.replace("a.rs", "free.rs");
        let r = hook(&env, &top, &edit("bob", &top, "Edit", &top.join(&free)));
        assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{free}: {}", r.text());
        let text = format!("*** Begin Patch\n*** Add File: {free}\n+x\n*** End Patch\n");
        let r = hook(&env, &top, &patch("bob", &top, &text));
        assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{free}: {}", r.text());
    }

    // The edit is recorded as the file Claude Code wrote: `src/c.rs`, not `a/src/c.rs`.
    let mut done = edit("bob", &top, "Write", &top.join("l/../src/c.rs"));
    done["hook_event_name"] = json!("PostToolUse");
    let r = hook_event(&env, &top, "post-tool-use", &done);
    assert_eq!(r.code, 0, "{}", r.text());
    let files: Vec<Value> = records(&top).iter().map(|e| e["file"].clone()).collect();
    assert_eq!(files, [json!("src/c.rs")]);
}

/// The agent's own checkout is judged as its own commands judge it: silence (no beat, no
/// renewal for longer than `dead_after`) lets others take it, but its agent still holds it
/// and asking answers the silence, so its edit is stamped; a checkout whose process is gone
/// has ended, so an edit under it is not.
#[test]
fn an_edit_under_ones_own_silent_checkout_is_stamped_but_not_under_a_dead_ones() {
    let (mut env, top) = repo();
    let mut process = AgentProcess::start();
    ok(&env, &top, "alice", &["heartbeat"]);
    ok(
        &env,
        &top,
        "alice",
        &["checkout", "T-1", "--path", "src/a", "--timeout", "2h"],
    );
    ok(
        &env,
        &top,
        "bob",
        &[
            "checkout",
            "T-2",
            "--path",
            "src/b",
            "--pid",
            &process.pid(),
            "--timeout",
            "2h",
        ],
    );
    process.kill();
    env.at("2026-01-01T00:30:00Z");
    let r = hook(
        &env,
        &top,
        &edit("alice", &top, "Edit", &top.join("src/a/x.rs")),
    );
    assert_eq!(denied(&r), None, "{}", r.text());
    let s = stamps(&top, "alice");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["key"], "T-1");
    assert_eq!(s[0]["token"], 1);

    let r = hook(
        &env,
        &top,
        &edit("bob", &top, "Edit", &top.join("src/b/y.rs")),
    );
    assert_eq!(denied(&r), None, "{}", r.text());
    assert!(stamps(&top, "bob").is_empty());
}

//! Gemini CLI's side of tasklock through the real binary, without Gemini CLI (that is
//! tests/e2e_gemini.rs): `tasklock init` merging its hooks into `.gemini/settings.json`,
//! `tasklock hook EVENT` fed the JSON Gemini CLI gives its hooks (BeforeTool for
//! `write_file`/`replace` and `run_shell_command`, AfterTool), and `GEMINI_SESSION_ID`
//! as an identity.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

const TEMPLATE: &str = include_str!("../templates/gemini-settings.json");

fn git_repo(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(path)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .status()
        .unwrap();
    assert!(ok.success());
    path.to_path_buf()
}

fn init(cwd: &Path, args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    cmd.env_remove("GEMINI_SESSION_ID")
        .current_dir(cwd)
        .arg("init")
        .args(args)
        .args(["--client", "claude,gemini"]);
    exec(cmd)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The action `init --json` reports for `path`.
fn action(report: &Value, path: &Path) -> String {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path.display().to_string())
        .unwrap_or_else(|| panic!("no change for {}: {report}", path.display()))["action"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn init_merges_gemini_hooks_into_existing_settings_once() {
    let e = Env::new();
    let repo = git_repo(&e.tmp.path().join("repo"));
    let path = repo.join(".gemini/settings.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Someone's settings: a model, and a hook of their own on the shell.
    let theirs = json!({
        "model": { "name": "gemini-2.5-pro" },
        "hooks": {
            "BeforeTool": [
                { "matcher": "run_shell_command", "hooks": [{ "type": "command", "command": "./audit.sh" }] }
            ]
        },
        "ui": { "theme": "GitHub" }
    });
    std::fs::write(&path, format!("{theirs:#}\n")).unwrap();

    let r = init(&repo, &["--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(action(&r.json(), &path), "updated");
    let text = read(&path);
    insta::assert_snapshot!("gemini_settings_merged", text);
    let merged: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(merged["model"], theirs["model"]);
    assert_eq!(merged["ui"], theirs["ui"]);
    assert_eq!(
        merged["hooks"]["BeforeTool"][0], theirs["hooks"]["BeforeTool"][0],
        "their hook stays, first"
    );
    let template: Value = serde_json::from_str(TEMPLATE).unwrap();
    for (event, groups) in template["hooks"].as_object().unwrap() {
        assert!(
            merged["hooks"][event]
                .as_array()
                .unwrap()
                .contains(&groups[0]),
            "{event} wired"
        );
    }

    // Again: nothing to add, the file byte for byte as it was.
    let r = init(&repo, &["--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(action(&r.json(), &path), "unchanged");
    assert_eq!(read(&path), text);

    // A project with no settings gets the template.
    let fresh = git_repo(&e.tmp.path().join("fresh"));
    let r = init(&fresh, &["--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        action(&r.json(), &fresh.join(".gemini/settings.json")),
        "created"
    );
    let written: Value = serde_json::from_str(&read(&fresh.join(".gemini/settings.json"))).unwrap();
    assert_eq!(written, template);

    // doctor sees the hooks; a settings file without them is reported.
    let doctor = |cwd: &Path| {
        let mut cmd = base_cmd(T0);
        cmd.env_remove("GEMINI_SESSION_ID")
            .env("HOME", cwd.join("no-home"))
            .current_dir(cwd)
            .args(["doctor", "--json", "--agent", "a"]);
        let r = exec(cmd);
        let j = r.json();
        j["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "gemini hooks")
            .cloned()
            .unwrap_or_else(|| panic!("no gemini hooks check: {j}"))
    };
    assert_eq!(doctor(&fresh)["status"], "ok");
    // With the extension installed too, every hook would run twice.
    let ext = e.tmp.path().join("home/.gemini/extensions/tasklock/hooks");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(ext.join("hooks.json"), TEMPLATE).unwrap();
    let mut cmd = base_cmd(T0);
    cmd.env_remove("GEMINI_SESSION_ID")
        .env("HOME", e.tmp.path().join("home"))
        .current_dir(&fresh)
        .args(["doctor", "--json", "--agent", "a"]);
    let j = exec(cmd).json();
    let twice = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gemini hooks")
        .cloned()
        .unwrap();
    assert_eq!(twice["status"], "warn", "{twice}");
    assert!(
        twice["detail"]
            .as_str()
            .unwrap()
            .contains("Gemini CLI runs each hook twice"),
        "{twice}"
    );
    std::fs::write(fresh.join(".gemini/settings.json"), "{\"hooks\": {}}\n").unwrap();
    let check = doctor(&fresh);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("SessionStart (session-start)"),
        "{check}"
    );
}

#[test]
fn init_refuses_gemini_settings_it_cannot_merge_and_changes_nothing() {
    let e = Env::new();
    let repo = git_repo(&e.tmp.path().join("bad"));
    let path = repo.join(".gemini/settings.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    for bad in ["{ \"hooks\": ,", "[1]", "{\"hooks\": {\"BeforeTool\": {}}}"] {
        std::fs::write(&path, bad).unwrap();
        let r = init(&repo, &[]);
        assert_eq!(r.code, 1, "{bad}: {}", r.text());
        assert!(
            r.stderr.contains(&path.display().to_string()),
            "{}",
            r.text()
        );
        assert_eq!(read(&path), bad);
        assert!(
            !repo.join(".claude").exists() && !repo.join(".locks").exists(),
            "nothing else was written"
        );
    }
}

/// `tasklock hook EVENT` with `payload` on stdin, from `cwd`, in the Env's lock directory.
fn hook(env: &Env, cwd: &Path, event: &str, payload: &Value, vars: &[(&str, &str)]) -> Run {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &env.dir());
    cmd.env_remove("GEMINI_SESSION_ID")
        .envs(vars.iter().copied())
        .args(["hook", event])
        .current_dir(cwd);
    Run::with_stdin(&mut cmd, &payload.to_string())
}

/// The JSON Gemini CLI gives a tool hook.
fn tool(session: &str, cwd: &Path, event: &str, name: &str, input: Value) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/home/u/.gemini/tmp/p/chats/session-x.jsonl",
        "cwd": cwd,
        "hook_event_name": event,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "tool_name": name,
        "tool_input": input,
    })
}

fn edits(top: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(top.join(".git/tasklock/edits")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()?;
            Some((v["file"].as_str()?.into(), v["agent"].as_str()?.into()))
        })
        .collect()
}

#[test]
fn gemini_tool_hooks_gate_edits_record_them_and_name_the_shells_session() {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    let r = env.run_in(
        &top,
        Some("gem-a"),
        &["checkout", "--path", "src/a/**", "--reason", "A works"],
    );
    assert_eq!(r.code, 0, "{}", r.text());

    // write_file and replace into A's checkout: denied, with the reason for the model.
    for (name, input) in [
        (
            "write_file",
            json!({"file_path": "src/a/x.rs", "content": "x"}),
        ),
        (
            "replace",
            json!({"file_path": top.join("src/a/y.rs"), "instruction": "i", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let r = hook(
            &env,
            &top,
            "pre-tool-use",
            &tool("gem-b", &top, "BeforeTool", name, input),
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.text());
        let v = r.json();
        assert_eq!(v["decision"], "deny", "{name}: {v}");
        let reason = v["reason"].as_str().unwrap();
        assert!(
            reason.contains("is checked out by another agent")
                && reason.contains("`gem-a`")
                && reason.contains("A works"),
            "{name}: {reason}"
        );
        assert_eq!(
            v.as_object().unwrap().len(),
            2,
            "only decision and reason: {v}"
        );
    }
    // Its own file is allowed, silently.
    let own = tool(
        "gem-b",
        &top,
        "BeforeTool",
        "write_file",
        json!({"file_path": "src/b/x.rs", "content": "x"}),
    );
    let r = hook(&env, &top, "pre-tool-use", &own, &[]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.text());

    // AfterTool records an edit that happened, not one that failed.
    let mut failed = tool(
        "gem-b",
        &top,
        "AfterTool",
        "replace",
        json!({"file_path": "src/b/f.rs"}),
    );
    failed["tool_response"] = json!({"llmContent": "no match", "error": {"message": "0 occurrences", "type": "edit_no_occurrence_found"}});
    let r = hook(&env, &top, "post-tool-use", &failed, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    let mut done = own.clone();
    done["hook_event_name"] = json!("AfterTool");
    done["tool_response"] = json!({"llmContent": "ok", "returnDisplay": "ok"});
    let r = hook(&env, &top, "post-tool-use", &done, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        edits(&top),
        [("src/b/x.rs".to_string(), "gem-b".to_string())]
    );

    // The shell: every `tasklock` command of the call gets the session's identity, in the
    // `tool_input` Gemini CLI merges into the call; other commands are left alone.
    let shell = |command: &str| {
        tool(
            "gem-b",
            &top,
            "BeforeTool",
            "run_shell_command",
            json!({"command": command, "description": "d"}),
        )
    };
    let r = hook(
        &env,
        &top,
        "pre-tool-use",
        &shell("cd src && tasklock checkout k1 && echo tasklock list"),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"hookSpecificOutput": {"tool_input": {"command": "cd src && tasklock checkout --agent gem-b k1 && echo tasklock list"}}})
    );
    let r = hook(&env, &top, "pre-tool-use", &shell("ls -la"), &[]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.text());
}

#[test]
fn a_gemini_session_registers_under_its_id_and_gemini_session_id_is_an_identity() {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    let start = json!({
        "session_id": "5e55-1011-aaaa",
        "transcript_path": "/home/u/.gemini/tmp/p/chats/session-x.jsonl",
        "cwd": top,
        "hook_event_name": "SessionStart",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "source": "startup",
    });
    let r = hook(
        &env,
        &top,
        "session-start",
        &start,
        &[("GEMINI_SESSION_ID", "5e55-1011-aaaa")],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let context = r.json()["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        context.contains("this session is agent `5e55-1011-aaaa`"),
        "{context}"
    );
    let entry: Value =
        serde_json::from_str(&read(&env.dir().join("agents/5e55-1011-aaaa"))).unwrap();
    let dir_name = top.file_name().unwrap().to_string_lossy();
    assert_eq!(entry["name"], format!("gemini in {dir_name} #5e55-101"));

    // A command with only GEMINI_SESSION_ID (as a script a hook runs has) acts as it.
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &env.dir());
    cmd.env("GEMINI_SESSION_ID", "5e55-1011-aaaa")
        .current_dir(&top)
        .args(["checkout", "gem-task", "--json"]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["checkout"]["agent"]["id"], "5e55-1011-aaaa");
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &env.dir());
    cmd.env("GEMINI_SESSION_ID", "5e55-1011-aaaa")
        .current_dir(&top)
        .args(["doctor", "--json"]);
    let j = exec(cmd).json();
    let identity = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "identity")
        .unwrap()
        .clone();
    assert_eq!(
        identity["detail"], "5e55-1011-aaaa (from GEMINI_SESSION_ID)",
        "{identity}"
    );
    // The session's end releases what it holds.
    let mut end = start.clone();
    end["hook_event_name"] = json!("SessionEnd");
    end["reason"] = json!("exit");
    let r = hook(
        &env,
        &top,
        "session-end",
        &end,
        &[("GEMINI_SESSION_ID", "5e55-1011-aaaa")],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let released = audit(&env.dir())
        .into_iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "gem-task")
        .expect("released");
    assert_eq!(released["reason"], "session_end");
}

/// Gemini CLI's `write_file` and `replace` resolve a name with `path.resolve` (its `..`
/// applied to the text), drop a leading `@` when no such file exists and decode `%XX`, before
/// the kernel resolves the links along it: every such form of a file another agent
/// holds is refused, an unclaimed one is allowed, and the edit is recorded as the file
/// Gemini CLI wrote.
#[test]
fn gemini_edits_are_judged_in_every_form_gemini_reaches_the_file_in() {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    let mut names = dotdot_layout(&top);
    names.extend(["src/%61.rs".to_string(), "@src/a.rs".to_string()]);
    let r = env.run_in(&top, Some("gem-a"), &["checkout", "--path", "src/a.rs"]);
    assert_eq!(r.code, 0, "{}", r.text());
    for name in &names {
        for (name_of_tool, input) in [
            ("write_file", json!({"file_path": name, "content": "x"})),
            (
                "replace",
                json!({"file_path": name, "instruction": "i", "old_string": "a", "new_string": "b"}),
            ),
        ] {
            let payload = tool("gem-b", &top, "BeforeTool", name_of_tool, input);
            let r = hook(&env, &top, "pre-tool-use", &payload, &[]);
            assert_eq!(r.code, 0, "{}", r.text());
            let v = r.json();
            assert_eq!(v["decision"], "deny", "{name_of_tool} {name}: {v}");
            assert!(v["reason"].as_str().unwrap().contains("`src/a.rs`"), "{v}");
        }
    }
    for name in &names {
        let free = name.replace("a.rs", "free.rs").replace("%61", "free");
        let payload = tool(
            "gem-b",
            &top,
            "BeforeTool",
            "write_file",
            json!({"file_path": free, "content": "x"}),
        );
        let r = hook(&env, &top, "pre-tool-use", &payload, &[]);
        assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{free}: {}", r.text());
    }
    // `replace` finds a relative name that does not exist by its last segments: `a.rs`
    // is `src/a.rs` to it. Another unclaimed file found so is allowed.
    std::fs::write(top.join("src/b.rs"), "b\n").unwrap();
    for (name, held) in [("a.rs", true), ("src/a.rs", true), ("b.rs", false)] {
        let payload = tool(
            "gem-b",
            &top,
            "BeforeTool",
            "replace",
            json!({"file_path": name, "instruction": "i", "old_string": "a", "new_string": "b"}),
        );
        let r = hook(&env, &top, "pre-tool-use", &payload, &[]);
        assert_eq!(r.code, 0, "{}", r.text());
        if held {
            assert_eq!(r.json()["decision"], "deny", "{name}: {}", r.text());
        } else {
            assert_eq!(r.stdout, "", "{name}: {}", r.text());
        }
    }
    // Recorded as the file written: `src/c.rs`, not `a/src/c.rs`.
    let mut done = tool(
        "gem-b",
        &top,
        "AfterTool",
        "write_file",
        json!({"file_path": "l/../src/c.rs", "content": "x"}),
    );
    done["tool_response"] = json!({"llmContent": "ok", "returnDisplay": "ok"});
    let r = hook(&env, &top, "post-tool-use", &done, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(edits(&top), [("src/c.rs".to_string(), "gem-b".to_string())]);
}

/// Run `command` as Gemini CLI's shell tool would: `bash -c`, from `cwd`, with the
/// environment of the commands (no secret, no identity of its own).
fn gemini_shell_run(env: &Env, cwd: &Path, command: &str) -> Run {
    let mut cmd = Command::new("bash");
    for (k, v) in base_cmd(&env.now).get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    use_store(&mut cmd, &env.dir());
    let bin = Path::new(env!("CARGO_BIN_EXE_tasklock")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    cmd.env("PATH", path)
        .env_remove("GEMINI_SESSION_ID")
        .env("GEMINI_CLI", "1")
        .args(["-c", command])
        .current_dir(cwd)
        .stdin(Stdio::null());
    exec(cmd)
}

/// A Gemini CLI session's own checkouts, made by `tasklock` commands its model runs in
/// the shell, are bound to the session's secret: the BeforeTool hook has each of them
/// read it from the file the session-start hook kept (`TASKLOCK_SECRET_FILE`; never the
/// secret itself in the command line, and no `$(…)`, which Gemini CLI refuses). Another agent naming the session cannot release them (exit 4); the
/// session can; its end removes the file.
#[test]
fn a_gemini_sessions_own_checkouts_are_bound_to_its_secret() {
    let (env, top) = git_env();
    std::fs::create_dir_all(env.dir()).unwrap();
    let session = "5e55-b0bd";
    let gemini = [("GEMINI_SESSION_ID", session)];
    let start = json!({
        "session_id": session,
        "transcript_path": "/home/u/.gemini/tmp/p/chats/session-x.jsonl",
        "cwd": top,
        "hook_event_name": "SessionStart",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "source": "startup",
    });
    // A directory left open to others is closed before the secret goes in.
    let sessions = top.join(".git/tasklock/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let r = hook(&env, &top, "session-start", &start, &gemini);
    assert_eq!(r.code, 0, "{}", r.text());

    // The model's shell command, as the BeforeTool hook hands it back to Gemini CLI.
    let shell = |command: &str| -> String {
        let payload = tool(
            session,
            &top,
            "BeforeTool",
            "run_shell_command",
            json!({"command": command, "description": "d"}),
        );
        let r = hook(&env, &top, "pre-tool-use", &payload, &gemini);
        assert_eq!(r.code, 0, "{}", r.text());
        let v = r.json();
        v["hookSpecificOutput"]["tool_input"]["command"]
            .as_str()
            .unwrap_or_else(|| panic!("not rewritten: {v}"))
            .to_string()
    };
    let checkout = shell("cd src && tasklock checkout gem-k --json");
    assert!(
        checkout.contains(&format!("--agent {session}")),
        "{checkout}"
    );
    // Gemini CLI's shell tool refuses command substitution ("Command injection detected").
    assert!(
        !["$(", "`", "<(", ">("].iter().any(|s| checkout.contains(s)),
        "{checkout}"
    );
    let r = gemini_shell_run(&env, &top, &checkout);
    assert_eq!(r.code, 0, "{}", r.text());
    let made = r.json();
    assert_eq!(made["checkout"]["agent"]["id"], session, "{made}");
    assert_eq!(made["checkout"]["proven"], true, "{made}");
    // Kept for the user alone, and never in the command line itself.
    let kept = top.join(".git/tasklock/sessions").join(session);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&kept), 0o600);
        assert_eq!(mode(kept.parent().unwrap()), 0o700);
    }
    let secret = read(&kept);
    assert!(!checkout.contains(&secret), "{checkout}");

    // Another agent that only names the session is refused.
    let r = env.run_in(&top, Some(session), &["release", "gem-k"]);
    assert_eq!(r.code, 4, "{}", r.text());
    // The session itself releases it.
    let r = gemini_shell_run(&env, &top, &shell("tasklock release gem-k"));
    assert_eq!(r.code, 0, "{}", r.text());

    let mut end = start.clone();
    end["hook_event_name"] = json!("SessionEnd");
    end["reason"] = json!("exit");
    let r = hook(&env, &top, "session-end", &end, &gemini);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!kept.exists(), "the secret outlived the session");
}

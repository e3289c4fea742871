//! End to end with the real OpenCode CLI: a project set up by `tasklock init` (which
//! writes the plugin into `.opencode/plugin/`), OpenCode sessions against a loopback stub
//! of an OpenAI-compatible API whose "model" runs `tasklock` commands and edits files,
//! and the effects of the plugin checked in the lock directory.
//!
//! The first run installs the CLI from npm into target/e2e/opencode (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::opencode::{
    OPENCODE_FINAL_TEXT, OpenCodeScript, OpenCodeStub, Step, config_json, free_port, opencode_cmd,
    post, run_cmd, session_id, write_config,
};
use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, git_project, run_ok, tasklock_init};

/// A git repository set up by `tasklock init`, with the stub as OpenCode's provider, and
/// a HOME for OpenCode.
fn project_with(stub: &OpenCodeStub) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    assert!(
        project.join(".opencode/plugin/tasklock.js").is_file(),
        "tasklock init wrote no OpenCode plugin"
    );
    write_config(&project, stub);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    (tmp, project, home)
}

/// OpenCode makes its database (one per HOME) when it first starts; two first starts at
/// once race in its migrations and one fails ("CREATE TABLE `workspace`"). For tests that
/// start two sessions at once: made first, outside the project.
fn make_database(home: &Path) {
    let mut warm = opencode_cmd(home, home);
    warm.args(["session", "list"]);
    run_ok(warm, "opencode session list", COMMAND_TIMEOUT);
}

fn audit_text(project: &Path) -> String {
    e2e::audit(&project.join(".locks"))
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The registry entry of agent `id` (file names are encoded: read them all).
fn agent_entry(project: &Path, id: &str) -> Value {
    let dir = project.join(".locks/agents");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {} ({e})", dir.display()))
        .flatten()
        .filter_map(|e| {
            serde_json::from_str::<Value>(&std::fs::read_to_string(e.path()).ok()?).ok()
        })
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no registry entry for {id}\n{}", audit_text(project)))
}

fn tasklock_json(project: &Path, args: &[&str]) -> Value {
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(args)
        .args(["--json", "--dir"])
        .arg(project.join(".locks"))
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env_remove("OPENCODE_SESSION_ID");
    let out = e2e::run(cmd, "tasklock", COMMAND_TIMEOUT);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("tasklock {args:?} --json is not JSON ({e}): {}", out.text()))
}

fn tasklock_ok(project: &Path, args: &[&str]) {
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(args)
        .arg("--dir")
        .arg(project.join(".locks"))
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env_remove("OPENCODE_SESSION_ID");
    run_ok(cmd, &format!("tasklock {args:?}"), COMMAND_TIMEOUT);
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    started.elapsed()
}

#[test]
fn two_opencode_sessions_race_for_one_task_and_release_it_when_they_end() {
    let started = Instant::now();
    eprintln!("e2e: opencode at {}", e2e::opencode::opencode().display());
    // Both check out one task; neither goes on before both have tried.
    let stub = OpenCodeStub::start(OpenCodeScript {
        steps: vec![
            "tasklock checkout race-task; echo \"exit=$?\"".into(),
            "tasklock list".into(),
        ],
        hold_after: Some(0),
        sessions: 2,
        ..OpenCodeScript::default()
    });
    let (_tmp, project, home) = project_with(&stub);
    make_database(&home);
    // The skills where `tasklock setup` puts them for Claude Code, which OpenCode lists.
    let mut setup = Command::new(e2e::tasklock_bin());
    setup.args(["setup", "--no-agents"]).env("HOME", &home);
    run_ok(setup, "tasklock setup", COMMAND_TIMEOUT);
    let a = Running::spawn(
        run_cmd(&home, &project, "Take the task."),
        "opencode run (a)",
    );
    let b = Running::spawn(
        run_cmd(&home, &project, "Take the task."),
        "opencode run (b)",
    );
    let (pid_a, pid_b) = (a.pid(), b.pid());
    let out_a = a.wait(SESSION_TIMEOUT);
    let out_b = b.wait(SESSION_TIMEOUT);
    let context = || {
        format!(
            "--- a\n{}\n--- b\n{}\n--- stub\n{}\n--- audit\n{}",
            out_a.text(),
            out_b.text(),
            stub.log(),
            audit_text(&project)
        )
    };
    assert!(
        out_a.status.success() && out_b.status.success(),
        "{}",
        context()
    );
    for out in [&out_a, &out_b] {
        assert!(out.stdout.contains(OPENCODE_FINAL_TEXT), "{}", context());
    }
    let sa = session_id(&out_a.stdout).expect("run --format json names its session");
    let sb = session_id(&out_b.stdout).expect("run --format json names its session");
    assert_ne!(sa, sb);

    let results = stub.outputs_of("call_0");
    let result = |s: &str| {
        results
            .get(s)
            .cloned()
            .unwrap_or_else(|| panic!("no checkout output from {s}\n{}", context()))
    };
    let won = |r: &str| r.contains("exit=0") && r.contains("Checked out `race-task`");
    let (winner, loser, lost, winner_pid, loser_pid) = match (won(&result(&sa)), won(&result(&sb)))
    {
        (true, false) => (&sa, &sb, result(&sb), pid_a, pid_b),
        (false, true) => (&sb, &sa, result(&sa), pid_b, pid_a),
        _ => panic!("exactly one session must win\n{}", context()),
    };
    assert!(
        lost.contains("exit=2") && lost.contains(winner.as_str()),
        "the loser is told which session holds the task: {lost}\n{}",
        context()
    );
    let audit = e2e::audit(&project.join(".locks"));
    let find = |event: &str| {
        audit
            .iter()
            .find(|e| e["event"] == event && e["key"] == "race-task")
            .cloned()
            .unwrap_or_else(|| panic!("no {event} of race-task\n{}", context()))
    };
    assert_eq!(find("acquire")["agent"], winner.as_str());
    assert_eq!(find("deny")["agent"], loser.as_str());
    assert_eq!(find("deny")["holder"], winner.as_str());

    // Each session registered under its id, watching its opencode process, with its
    // own secret; the session's identity reached the model's system prompt.
    for (session, pid) in [(winner, winner_pid), (loser, loser_pid)] {
        let entry = agent_entry(&project, session);
        assert_eq!(
            entry["pid"], pid,
            "the opencode process is watched: {entry}"
        );
        assert_eq!(
            entry["name"],
            format!("opencode in project #{}", &session[..8]),
            "{entry}"
        );
        assert!(entry["owner"].is_object(), "bound to a secret: {entry}");
        assert!(entry["heartbeats"].as_u64().unwrap_or(0) >= 3, "{entry}");
        let system = stub.system_of(session).unwrap_or_default();
        assert!(
            system.contains(&format!("this session is agent `{session}`")),
            "the plugin's context is not in the system prompt: {system}"
        );
        // AGENTS.md (from init) and the skills are found.
        assert!(
            system.contains("## Coordinating with other agents (tasklock)"),
            "AGENTS.md is not in the system prompt: {system}"
        );
        assert!(
            system.contains("<name>checkout</name>"),
            "the checkout skill is not offered: {system}"
        );
    }
    // The winner's list shows it proven (its commands carry its secret).
    let listed = stub.outputs_of("call_1");
    assert!(
        listed
            .get(winner.as_str())
            .is_some_and(|l| l.contains("`race-task`")),
        "{}",
        context()
    );
    // OpenCode's exit released the task.
    let release = find("auto_release");
    assert_eq!(release["agent"], winner.as_str(), "{}", context());
    assert_eq!(release["reason"], "session_end", "{}", context());
    assert_eq!(
        tasklock_json(&project, &["status", "race-task"])["outcome"],
        "free"
    );
    eprintln!("e2e: race took {:?}", started.elapsed());
}

/// An edit inside another session's path checkout is refused, also through a link's `..`
/// (`l/../src/a.rs`, relative and absolute); then that session is killed, and its
/// checkout is released by the watcher.
#[test]
fn an_edit_inside_another_sessions_path_checkout_is_refused_and_kill_releases_it() {
    let stub_a = OpenCodeStub::start(OpenCodeScript {
        steps: vec!["tasklock checkout --path src/a.rs --reason 'A edits a.rs'".into()],
        hold_after: Some(0),
        sessions: 2,
        ..OpenCodeScript::default()
    });
    let (_tmp, project, home) = project_with(&stub_a);
    make_database(&home);
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/a.rs"), "a-old\n").unwrap();
    std::fs::write(project.join("src/b.rs"), "b-old\n").unwrap();
    let a = Running::spawn(run_cmd(&home, &project, "Edit a.rs."), "opencode run (a)");
    assert!(
        stub_a.wait_outputs("call_0", 1, SESSION_TIMEOUT),
        "A did not check out\n{}",
        stub_a.log()
    );
    let (session_a, checkout) = stub_a.outputs_of("call_0").into_iter().next().unwrap();
    assert!(checkout.contains("Checked out"), "{checkout}");

    // B (its own config: another stub) edits A's file, then writes its own.
    let a_rs = project.join("src/a.rs").display().to_string();
    let b_rs = project.join("src/b.rs").display().to_string();
    std::fs::create_dir_all(project.join("a/b")).unwrap();
    std::os::unix::fs::symlink("a/b", project.join("l")).unwrap();
    let up_a = project.join("l/../src/a.rs").display().to_string();
    let stub_b = OpenCodeStub::start(OpenCodeScript {
        steps: vec![
            Step::Tool(
                "edit".into(),
                json!({"filePath": a_rs, "oldString": "a-old", "newString": "a-from-b"}),
            ),
            Step::Tool(
                "write".into(),
                json!({"filePath": b_rs, "content": "b-new\n"}),
            ),
            // A's file through a link's `..` (`l -> a/b`), relative and absolute. OpenCode
            // `path.join`s the relative name to the project (`src/a.rs`) but takes the
            // absolute one as given, as the kernel does (`a/src/a.rs`, which `write`
            // would make): the gate judges both readings.
            Step::Tool(
                "edit".into(),
                json!({"filePath": "l/../src/a.rs", "oldString": "a-old", "newString": "a-from-link"}),
            ),
            Step::Tool(
                "write".into(),
                json!({"filePath": up_a, "content": "a-from-up\n"}),
            ),
        ],
        // Alive until its edits are looked at (a session's end forgets them).
        hold_after: Some(3),
        sessions: 2,
        ..OpenCodeScript::default()
    });
    // OPENCODE_CONFIG_CONTENT outranks the project's opencode.json.
    let mut cmd = run_cmd(&home, &project, "Edit both files.");
    cmd.env("OPENCODE_CONFIG_CONTENT", config_json(&stub_b).to_string());
    let b = Running::spawn(cmd, "opencode run (b)");
    let b_done = stub_b.wait_outputs("call_3", 1, SESSION_TIMEOUT);
    let edits = edit_records(&project);
    stub_b.release();
    let out_b = b.wait(SESSION_TIMEOUT);

    // A is killed: no hook runs; the watcher its session start began sees the process go.
    let pid_a = a.pid();
    let status = tasklock_json(&project, &["list"]);
    assert!(status.to_string().contains(&session_a), "{status}");
    assert_eq!(agent_entry(&project, &session_a)["pid"], pid_a);
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid_a as i32, libc::SIGKILL) }, 0);
    let took = wait_for("A's checkout released", Duration::from_secs(15), || {
        e2e::audit(&project.join(".locks"))
            .iter()
            .any(|e| e["event"] == "auto_release" && e["agent"] == session_a.as_str())
    });
    eprintln!("e2e: released {took:?} after the kill");
    stub_a.release();
    let out_a = a.wait(SESSION_TIMEOUT);
    let context = || {
        format!(
            "--- a\n{}\n--- b\n{}\n--- stub a\n{}\n--- stub b\n{}\n--- audit\n{}",
            out_a.text(),
            out_b.text(),
            stub_a.log(),
            stub_b.log(),
            audit_text(&project)
        )
    };
    let released = e2e::audit(&project.join(".locks"))
        .into_iter()
        .find(|e| e["event"] == "auto_release" && e["agent"] == session_a.as_str())
        .unwrap();
    assert_eq!(released["reason"], "agent_death", "{}", context());
    assert!(b_done && out_b.status.success(), "{}", context());
    let denied = stub_b
        .outputs_of("call_0")
        .into_values()
        .next()
        .unwrap_or_default();
    for part in [
        "tasklock: `src/a.rs` is checked out by another agent",
        &format!("`{session_a}`"),
        "A edits a.rs",
        "tasklock checkout --path src/a.rs --queue",
    ] {
        assert!(
            denied.contains(part),
            "{part:?} not in B's output: {denied}\n{}",
            context()
        );
    }
    // Through the link's `..`: refused the same way.
    for call in ["call_2", "call_3"] {
        let out = stub_b.outputs_of(call).into_values().next();
        let out = out.unwrap_or_else(|| panic!("no output of B's {call}\n{}", context()));
        for part in [
            "tasklock: `src/a.rs` is checked out by another agent",
            &format!("`{session_a}`"),
        ] {
            assert!(
                out.contains(part),
                "{call}: {part:?} not in B's output: {out}\n{}",
                context()
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(project.join("src/a.rs")).unwrap(),
        "a-old\n",
        "{}",
        context()
    );
    assert!(!project.join("a/src").exists(), "{}", context());
    assert_eq!(
        std::fs::read_to_string(project.join("src/b.rs")).unwrap(),
        "b-new\n"
    );
    let session_b = session_id(&out_b.stdout).expect("B's session");
    assert!(
        edits
            .iter()
            .any(|(f, by)| f == "src/b.rs" && by == &session_b),
        "B's write is not recorded as its edit: {edits:?}\n{}",
        context()
    );
    assert!(!edits.iter().any(|(f, _)| f == "src/a.rs"), "{edits:?}");
}

/// `(file, agent)` of every edit record of the project's worktree.
fn edit_records(project: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(project.join(".git/tasklock/edits")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()?;
            Some((
                v["file"].as_str()?.to_string(),
                v["agent"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// An `opencode serve` session that queued for a key and went idle takes a turn when the
/// key is handed to it: the plugin recorded the server, the release pushed the news
/// through `prompt_async`, and the model checks the key out with nobody typing.
#[test]
fn an_idle_opencode_server_session_is_woken_when_its_turn_comes() {
    let stub = OpenCodeStub::start(OpenCodeScript {
        steps: vec!["tasklock checkout wake-key --queue; echo \"exit=$?\"".into()],
        wake: Some("tasklock checkout wake-key".into()),
        ..OpenCodeScript::default()
    });
    let (_tmp, project, home) = project_with(&stub);
    tasklock_ok(&project, &["checkout", "wake-key", "--agent", "holder"]);

    let port = free_port();
    let mut cmd = opencode_cmd(&home, &project);
    cmd.args(["serve", "--port", &port.to_string()]);
    let server = Running::spawn(cmd, "opencode serve");
    let dir = project.display().to_string();
    let q = format!("directory={dir}");
    // Seen in /proc/net/tcp, not by connecting.
    wait_for("the server listens", SESSION_TIMEOUT, || {
        tasklock::os::tcp_listener_uid(port).is_some()
    });
    // Requests made while the server still sets the project up can go unanswered
    // (1.18.33, on a loaded machine: for up to 30 s): ask again.
    let mut tries = 0;
    let (status, body) = loop {
        tries += 1;
        match post(
            port,
            &format!("/session?{q}"),
            &json!({}),
            Duration::from_secs(5),
        ) {
            Ok(r) => break r,
            Err(e) if tries < 12 => eprintln!("e2e: POST /session: {e}; again"),
            Err(e) => panic!("POST /session: {e}"),
        }
    };
    assert!(status / 100 == 2, "POST /session: {status} {body}");
    let session = body
        .split("\"id\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no session id in {body}"))
        .to_string();
    let (status, body) = post(
        port,
        &format!("/session/{session}/prompt_async?{q}"),
        &json!({"parts": [{"type": "text", "text": "Queue for the key."}]}),
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(status / 100 == 2, "prompt_async: {status} {body}");
    assert!(
        stub.wait_outputs("call_0", 1, SESSION_TIMEOUT),
        "the session did not queue\n{}",
        stub.log()
    );
    let queued = stub
        .outputs_of("call_0")
        .remove(&session)
        .unwrap_or_default();
    assert!(queued.contains("exit=2"), "{queued}\n{}", stub.log());
    let entry = agent_entry(&project, &session);
    assert_eq!(entry["reach"]["via"], "opencode", "{entry}");
    assert_eq!(
        entry["reach"]["url"],
        format!("http://127.0.0.1:{port}"),
        "{entry}"
    );
    // Idle: the turn ended with the final answer.
    wait_for("the session is idle", SESSION_TIMEOUT, || {
        stub.log()
            .lines()
            .filter(|l| l.ends_with(&format!("[{session}] final")))
            .count()
            >= 1
    });
    std::thread::sleep(Duration::from_millis(500));

    tasklock_ok(&project, &["release", "wake-key", "--agent", "holder"]);
    let woke = stub.wait_outputs("call_wake", 1, SESSION_TIMEOUT);
    let context = || {
        format!(
            "--- stub\n{}\n--- audit\n{}",
            stub.log(),
            audit_text(&project)
        )
    };
    assert!(woke, "the idle session took no turn\n{}", context());
    let taken = stub
        .outputs_of("call_wake")
        .remove(&session)
        .unwrap_or_default();
    assert!(
        taken.contains("Checked out `wake-key`"),
        "{taken}\n{}",
        context()
    );
    let status = tasklock_json(&project, &["status", "wake-key"]);
    assert_eq!(
        status["checkout"]["agent"]["id"],
        session.as_str(),
        "{status}"
    );
    let audit = e2e::audit(&project.join(".locks"));
    assert!(
        audit.iter().any(|e| e["event"] == "push"
            && e["agent"] == session.as_str()
            && e["detail"]
                .as_str()
                .is_some_and(|d| d.contains("delivered"))),
        "{}",
        context()
    );
    drop(server);
}

//! End to end with the real Codex CLI: a project set up by `tasklock init`, `codex exec`
//! sessions against a loopback stub of the OpenAI Responses API whose "model" runs
//! `tasklock` commands, and the effects of Codex's hooks checked in the lock directory.
//!
//! The first run installs the CLI from npm into target/e2e/codex (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use e2e::codex::{
    CODEX_FINAL_TEXT, CodexScript, CodexStub, codex_cmd, codex_home, custom_call, native_codex_pid,
    offer_apply_patch, thread_id,
};
use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, git_project, run_ok, tasklock_init};

/// A temporary directory with a git repository set up by `tasklock init`.
fn initialised_project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    assert!(
        project.join(".codex/hooks.json").is_file(),
        "tasklock init wrote no .codex/hooks.json"
    );
    (tmp, project)
}

fn audit_text(project: &Path) -> String {
    e2e::audit(&project.join(".locks"))
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

fn agent_entry(project: &Path, id: &str) -> Value {
    let path = project.join(".locks/agents").join(id);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no registry entry {} ({e})", path.display()));
    serde_json::from_str(&text).expect("the registry entry is JSON")
}

fn status_json(project: &Path, key: &str) -> Value {
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(["status", key, "--json", "--dir"])
        .arg(project.join(".locks"))
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    let out = run_ok(cmd, "tasklock status", COMMAND_TIMEOUT);
    serde_json::from_str(&out.stdout).expect("status --json is JSON")
}

/// One Codex session started in its own home, with the pid of its native `codex` process.
struct Started {
    running: Running,
    native: u32,
    native_start: Option<u64>,
}

fn start_session(parent: &Path, name: &str, project: &Path, stub: &CodexStub) -> Started {
    let home = parent.join(name);
    std::fs::create_dir_all(&home).unwrap();
    codex_home(&home, project, stub);
    let running = Running::spawn(
        codex_cmd(&home, project, "Check out the task with tasklock."),
        &format!("codex exec ({name})"),
    );
    let native = native_codex_pid(running.pid(), Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the npm launcher started no native `codex` process"));
    let native_start = e2e::start_time(native);
    Started {
        running,
        native,
        native_start,
    }
}

#[test]
fn two_codex_sessions_race_for_one_task_and_release_it_when_they_end() {
    let started = Instant::now();
    let codex = e2e::codex::codex();
    eprintln!(
        "e2e: codex at {} ({:?})",
        codex.display(),
        started.elapsed()
    );
    let (tmp, project) = initialised_project();
    // Both sessions try the same task; neither goes on before both have tried, so the
    // winner still holds it when the other asks.
    let stub = CodexStub::start(CodexScript {
        commands: vec!["tasklock checkout race-task".into(), "tasklock list".into()],
        hold_after: Some(0),
        sessions: 2,
        pause: Duration::ZERO,
        ..CodexScript::default()
    });
    let a = start_session(tmp.path(), "home-a", &project, &stub);
    let b = start_session(tmp.path(), "home-b", &project, &stub);
    let (a_native, a_start) = (a.native, a.native_start);
    let (b_native, b_start) = (b.native, b.native_start);
    let out_a = a.running.wait(SESSION_TIMEOUT);
    let out_b = b.running.wait(SESSION_TIMEOUT);
    let context = || {
        format!(
            "--- session a\n{}\n--- session b\n{}\n--- stub\n{}\n--- audit\n{}",
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
        assert!(
            out.stdout.contains(CODEX_FINAL_TEXT),
            "a session did not end with the stub's final answer\n{}",
            context()
        );
    }
    let thread_a = thread_id(&out_a.stdout).expect("codex exec --json names its thread");
    let thread_b = thread_id(&out_b.stdout).expect("codex exec --json names its thread");
    assert_ne!(thread_a, thread_b, "{}", context());

    // Exactly one won; the other got exit 2 naming the winner's thread.
    let results = stub.outputs_of("call_0");
    let result = |t: &str| {
        results
            .get(t)
            .unwrap_or_else(|| panic!("no output of the checkout from {t}\n{}", context()))
            .clone()
    };
    let (ra, rb) = (result(&thread_a), result(&thread_b));
    let won =
        |r: &str| r.contains("Process exited with code 0") && r.contains("Checked out `race-task`");
    let lost = |r: &str| r.contains("Process exited with code 2");
    let (winner, loser, lost_text, winner_pid, winner_start, loser_pid) = match (won(&ra), won(&rb))
    {
        (true, false) => (&thread_a, &thread_b, &rb, a_native, a_start, b_native),
        (false, true) => (&thread_b, &thread_a, &ra, b_native, b_start, a_native),
        _ => panic!("exactly one session must win\n{}", context()),
    };
    assert!(
        lost(lost_text) && lost_text.contains(winner.as_str()),
        "the loser is told which thread holds the task: {lost_text}\n{}",
        context()
    );

    // The identity is the Codex thread id (CODEX_THREAD_ID), in the audit log too.
    let audit = e2e::audit(&project.join(".locks"));
    let acquire = audit
        .iter()
        .find(|e| e["event"] == "acquire" && e["key"] == "race-task")
        .unwrap_or_else(|| panic!("no acquire of race-task\n{}", context()));
    assert_eq!(acquire["agent"], winner.as_str(), "{}", context());
    let deny = audit
        .iter()
        .find(|e| e["event"] == "deny" && e["key"] == "race-task")
        .unwrap_or_else(|| panic!("no deny of race-task\n{}", context()));
    assert_eq!(deny["agent"], loser.as_str(), "{}", context());
    assert_eq!(deny["holder"], winner.as_str(), "{}", context());

    // SessionStart registered each session under its thread id, watching its native
    // codex process, named after the project; its context reached the model.
    for (thread, pid) in [(winner, winner_pid), (loser, loser_pid)] {
        let entry = agent_entry(&project, thread);
        assert_eq!(entry["id"], thread.as_str(), "{entry}");
        assert_eq!(entry["pid"], pid, "the codex process is watched: {entry}");
        let name = entry["name"].as_str().unwrap_or_default();
        assert_eq!(
            name,
            format!("codex in project #{}", &thread[..8]),
            "{entry}"
        );
        assert!(
            entry["heartbeats"].as_u64().unwrap_or(0) >= 3,
            "SessionStart, UserPromptSubmit and PostToolUse beat: {entry}"
        );
        assert!(
            stub.any_body_contains(&format!("this session is agent `{thread}`")),
            "SessionStart's context did not reach the model\n{}",
            context()
        );
    }
    assert_eq!(
        agent_entry(&project, winner)["pid_start"],
        winner_start.expect("read the start time of the codex process"),
    );

    // The session's end released the task.
    let release = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "race-task")
        .unwrap_or_else(|| panic!("race-task was never released\n{}", context()));
    assert_eq!(release["agent"], winner.as_str(), "{}", context());
    assert_eq!(release["reason"], "session_end", "{}", context());
    assert_eq!(status_json(&project, "race-task")["outcome"], "free");
    eprintln!("e2e: total {:?}", started.elapsed());
}

#[test]
fn killing_codex_releases_its_task_through_the_watcher() {
    let (tmp, project) = initialised_project();
    // The model checks the task out, lists the checkouts a few times, then thinks until
    // the test kills Codex.
    const LISTS: usize = 4;
    let mut commands = vec!["tasklock checkout kill-task".to_string()];
    commands.extend((0..LISTS).map(|_| "tasklock list".to_string()));
    let stub = CodexStub::start(CodexScript {
        commands,
        hold_after: Some(LISTS),
        sessions: usize::MAX,
        pause: Duration::from_millis(300),
        ..CodexScript::default()
    });
    let s = start_session(tmp.path(), "home", &project, &stub);
    assert!(
        stub.wait_outputs(format!("call_{LISTS}"), 1, SESSION_TIMEOUT),
        "the commands never ran\n{}",
        stub.log()
    );
    // Each command runs in a sandbox with a pid namespace of its own, which the kernel
    // often gives the inode of the one before: a later command must not take the
    // checkout's (host) pid for one of its own namespace, gone. (Before pid_ns named
    // the namespace's pid 1 too, one list in two or three found the task free.)
    for i in 1..=LISTS {
        let listed = stub
            .outputs_of(format!("call_{i}"))
            .into_values()
            .next()
            .unwrap();
        assert!(
            listed.contains("1 active checkout") && listed.contains("`kill-task`"),
            "the task is still held in command {i}: {listed}\n{}",
            audit_text(&project)
        );
    }
    let thread = stub
        .outputs_of("call_0")
        .into_keys()
        .next()
        .expect("one session");
    let status = status_json(&project, "kill-task");
    assert_eq!(status["outcome"], "held", "{status}");
    assert_eq!(
        status["checkout"]["agent"]["id"],
        thread.as_str(),
        "held by the Codex thread: {status}"
    );
    assert_eq!(status["checkout"]["agent"]["pid"], s.native, "{status}");
    let entry = agent_entry(&project, &thread);
    assert_eq!(entry["pid"], s.native, "{entry}");

    // SIGKILL: no hook runs; the watcher started by SessionStart sees the process go.
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(s.native as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let released = loop {
        let audit = e2e::audit(&project.join(".locks"));
        if let Some(e) = audit
            .iter()
            .find(|e| e["event"] == "auto_release" && e["key"] == "kill-task")
        {
            break e.clone();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "kill-task was not released within 15 s of killing codex\n{}",
            audit_text(&project)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("e2e: released {:?} after the kill", killed.elapsed());
    assert_eq!(released["agent"], thread.as_str(), "{released}");
    assert_eq!(released["reason"], "agent_death", "{released}");
    // The watcher marks the entry ended in the change that releases the key, after the
    // event is appended (or later, when another command's read reaped the key first).
    let entry = loop {
        let entry = agent_entry(&project, &thread);
        if !entry["ended_reason"].is_null() || killed.elapsed() > Duration::from_secs(15) {
            break entry;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(entry["ended_reason"], "process_gone", "{entry}");
    assert_eq!(status_json(&project, "kill-task")["outcome"], "free");
    stub.release();
    let out = s.running.wait(SESSION_TIMEOUT);
    assert!(
        !out.status.success(),
        "the launcher reports its codex was killed\n{}",
        out.text()
    );
}

/// `tasklock list --json` in the project's lock directory, as a bystander.
fn list_json(project: &Path) -> Value {
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(["list", "--json", "--dir"])
        .arg(project.join(".locks"))
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    let out = run_ok(cmd, "tasklock list", COMMAND_TIMEOUT);
    serde_json::from_str(&out.stdout).expect("list --json is JSON")
}

/// The function Codex offers for each tool of the `tasklock` MCP server, as it named them
/// in its requests: a `namespace` tool `mcp__tasklock` holding functions named after the
/// server's tools. The stub calls them with `namespace` and `name` (`mcp__tasklock/checkout`
/// in a script); a flat `mcp__tasklock__checkout` is refused by Codex ("unsupported call").
fn tasklock_namespace(tools: &Value) -> Option<Vec<String>> {
    let ns = tools
        .as_array()?
        .iter()
        .find(|t| t["type"] == "namespace" && t["name"] == "mcp__tasklock")?;
    let mut names: Vec<String> = ns["tools"]
        .as_array()?
        .iter()
        .filter(|t| t["type"] == "function")
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    Some(names)
}

/// Two Codex sessions in a project set up by `tasklock init` (its `.codex/config.toml`
/// names the server and approves its tools, which `codex exec` needs): both check out one
/// task through the `checkout` tool, one wins, the other's model gets the conflict in
/// markdown naming the winner; the lock directory says so while they run; each session's
/// end closes its server, which releases what its agent holds (`session_end`).
#[test]
fn codex_sessions_use_the_mcp_tools_init_registered() {
    let (tmp, project) = initialised_project();
    let config = std::fs::read_to_string(project.join(".codex/config.toml")).unwrap();
    assert!(config.contains("[mcp_servers.tasklock]"), "{config}");
    // Both sessions check out one task through the MCP tool, then list through it; the
    // stub holds both after the checkout until the test has looked at the lock directory.
    let stub = CodexStub::start(CodexScript {
        commands: vec![
            e2e::Script::tool_call(
                "mcp__tasklock/checkout",
                serde_json::json!({"key": "mcp-race", "reason": "via MCP"}),
            ),
            e2e::Script::tool_call("mcp__tasklock/list", serde_json::json!({})),
        ],
        hold_after: Some(0),
        sessions: usize::MAX,
        pause: Duration::ZERO,
        ..CodexScript::default()
    });
    let a = start_session(tmp.path(), "home-a", &project, &stub);
    let b = start_session(tmp.path(), "home-b", &project, &stub);
    let (a_native, b_native) = (a.native, b.native);
    let context = || {
        format!(
            "--- stub\n{}\n--- outputs\n{:#?}\n--- audit\n{}",
            stub.log(),
            stub.state.0.lock().unwrap().outputs,
            audit_text(&project)
        )
    };
    assert!(
        stub.wait_outputs("call_0", 2, SESSION_TIMEOUT),
        "both sessions' checkouts never came back\n{}",
        context()
    );

    // Codex offered every tasklock tool, under the names recorded above.
    let tools = stub.tools();
    assert_eq!(tools.len(), 2, "{}", context());
    for (session, offered) in &tools {
        assert_eq!(
            tasklock_namespace(offered),
            Some(
                [
                    "agents", "checkout", "give", "inbox", "list", "note", "release", "renew",
                    "status", "verify", "why"
                ]
                .map(String::from)
                .to_vec()
            ),
            "the tasklock tools offered to {session}: {offered}"
        );
    }

    // Exactly one checkout was granted; the other came back as a conflict naming it.
    let results = stub.outputs_of("call_0");
    let granted: Vec<(&String, &String)> = results
        .iter()
        .filter(|(_, r)| r.contains("Checked out `mcp-race`"))
        .collect();
    assert_eq!(granted.len(), 1, "one winner\n{}", context());
    let (winner_thread, won) = granted[0];
    let (loser_thread, lost) = results
        .iter()
        .find(|(t, _)| *t != winner_thread)
        .expect("two sessions");
    // The lock directory, while both sessions still run: held by the winner's thread
    // (Codex gives MCP servers no thread id, but the server runs under the Codex process
    // the thread's hooks registered, and acts for that session), on the winner's Codex.
    let list = list_json(&project);
    let rows = list["checkouts"].as_array().expect("checkouts");
    assert_eq!(rows.len(), 1, "{list}");
    let row = &rows[0];
    assert_eq!(row["key"], "mcp-race", "{list}");
    assert_eq!(row["reason"], "via MCP", "{list}");
    assert_eq!(row["proven"], true, "bound to the server's secret: {list}");
    let holder = row["agent"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        &holder, winner_thread,
        "the MCP tools and the hooks are one agent, the thread: {list}"
    );
    // The winner's Codex process: its SessionStart hook registered the thread with it.
    let winner_native = agent_entry(&project, winner_thread)["pid"].clone();
    assert!(
        winner_native == a_native || winner_native == b_native,
        "{winner_native}"
    );
    assert_eq!(
        row["agent"]["pid"], winner_native,
        "the server registered its client, the winner's codex process: {list}"
    );
    // What came back to the model is the CLI's markdown, not its JSON.
    assert!(
        won.contains("\nChecked out `mcp-race` (token 1); lease ends ")
            && won.contains(&format!("- Holder: {holder} ")),
        "{won}"
    );
    assert!(
        lost.contains(&format!("\nConflict: `mcp-race` is held by {holder} ")),
        "the loser ({loser_thread}) is told who holds it: {lost}\n{}",
        context()
    );
    for r in [won, lost] {
        assert!(!r.contains(r#""outcome""#), "markdown, not JSON: {r}");
    }
    stub.release();

    let out_a = a.running.wait(SESSION_TIMEOUT);
    let out_b = b.running.wait(SESSION_TIMEOUT);
    for out in [&out_a, &out_b] {
        assert!(
            out.status.success() && out.stdout.contains(CODEX_FINAL_TEXT),
            "{}\n{}",
            out.text(),
            context()
        );
    }
    // The winner's list through the tool showed its checkout.
    let listed = stub.outputs_of("call_1");
    assert!(
        listed[winner_thread].contains("\n1 active checkout.")
            && listed[winner_thread].contains(&format!("| `mcp-race` | {holder} ")),
        "{:?}\n{}",
        listed,
        context()
    );

    // The session's end ended its server's agent and released the task.
    let audit = e2e::audit(&project.join(".locks"));
    let release = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "mcp-race")
        .unwrap_or_else(|| panic!("mcp-race was never released\n{}", context()));
    assert_eq!(release["agent"], holder.as_str(), "{}", context());
    assert_eq!(release["reason"], "session_end", "{}", context());
    assert_eq!(status_json(&project, "mcp-race")["outcome"], "free");
    assert_eq!(list_json(&project)["checkouts"], serde_json::json!([]));
    // Each server started as an agent of its own (the thread's hooks had not run yet) and
    // became the thread at its first tool call; the agent it made up was ended then.
    let made_up: Vec<Value> = std::fs::read_dir(project.join(".locks/agents"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|id| id.starts_with("mcp-"))
        .map(|id| agent_entry(&project, &id))
        .collect();
    for e in &made_up {
        assert!(!e["ended_at"].is_null(), "{e}\n{}", context());
    }
}

/// Push wake into Codex (docs/wake.md): an interactive Codex session queues for a key held
/// by another agent and goes idle; when the holder releases, tasklock runs `codex queue`
/// for the session's thread, the idle TUI starts a turn with the notification (no
/// keystroke), and in it the session checks the key out.
#[test]
fn an_idle_codex_session_is_queued_its_turn_and_takes_the_key() {
    const MARKER: &str = "[tasklock] A notification from tasklock";
    let (tmp, project) = initialised_project();
    let stub = CodexStub::start(CodexScript {
        commands: vec!["tasklock checkout deploy-api --queue".into()],
        wake: Some((MARKER.into(), "tasklock checkout deploy-api".into())),
        ..CodexScript::default()
    });
    let locks = project.join(".locks");
    let tasklock = |agent: &str, args: &[&str]| {
        let mut cmd = Command::new(e2e::tasklock_bin());
        cmd.args(args)
            .args(["--agent", agent, "--dir"])
            .arg(&locks)
            .env_remove("TASKLOCK_AGENT")
            .env_remove("CLAUDE_CODE_SESSION_ID")
            .env_remove("CODEX_THREAD_ID");
        run_ok(cmd, "tasklock", COMMAND_TIMEOUT)
    };
    tasklock("holder", &["checkout", "deploy-api"]);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    codex_home(&home, &project, &stub);
    let started = Instant::now();
    let tui = e2e::codex_tui::CodexTui::start(&home, &project, "Queue for the deploy-api key.");
    if !stub.wait_outputs("call_0", 1, SESSION_TIMEOUT) {
        tui.fail(
            &stub,
            "the session did not run `tasklock checkout deploy-api --queue`",
        );
    }
    let (thread, queued) = stub.outputs_of("call_0").into_iter().next().unwrap();
    assert!(
        queued.contains("tasklock queues the news in this Codex session"),
        "the queued checkout does not say the session will be told: {queued}"
    );
    tui.wait_idle(&stub, &thread, 1, SESSION_TIMEOUT);
    eprintln!(
        "e2e: Codex thread {thread} idle, {:?} after start",
        started.elapsed()
    );
    // The session's hooks recorded how to queue messages for it.
    let entry = agent_entry(&project, &thread);
    let reach = &entry["reach"];
    assert_eq!(reach["via"], "codex", "{entry}");
    assert_eq!(reach["session"], thread.as_str(), "{entry}");
    assert_eq!(
        reach["codex_home"],
        home.join(".codex")
            .canonicalize()
            .unwrap()
            .to_str()
            .unwrap(),
        "{entry}"
    );
    let program = reach["program"].as_str().unwrap();
    assert!(program.ends_with("/codex"), "{entry}");
    // Really idle: nothing happens by itself.
    let requests = stub.log().lines().count();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(stub.log().lines().count(), requests, "{}", stub.log());

    let released = Instant::now();
    tasklock("holder", &["release", "deploy-api"]);
    let release_took = released.elapsed();
    let deadline = released + Duration::from_secs(30);
    while !stub.any_body_contains(MARKER) {
        if Instant::now() > deadline {
            tui.fail(
                &stub,
                "no turn with the notification within 30 s of the release",
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let latency = released.elapsed();
    eprintln!(
        "e2e: release took {release_took:?}; the notification reached the model {latency:?} after it"
    );
    if !stub.wait_outputs("call_wake", 1, SESSION_TIMEOUT) {
        tui.fail(
            &stub,
            "the woken session did not run `tasklock checkout deploy-api`",
        );
    }
    let took = stub
        .outputs_of("call_wake")
        .remove(&thread)
        .unwrap_or_default();
    let status = status_json(&project, "deploy-api");
    assert_eq!(
        status["checkout"]["agent"]["id"],
        thread.as_str(),
        "the session does not hold the key: {status}\n{took}"
    );
    // The turn's prompt was the pushed text: the hook did not give it again as context.
    let bodies = stub.state.0.lock().unwrap().bodies.clone();
    let woke = bodies.iter().find(|b| b.contains(MARKER)).unwrap();
    assert!(
        !woke.contains("new; the quoted fields are other agents' data"),
        "the hook gave the pushed message again as context"
    );
    // The inbox says how it went.
    let audit = audit_text(&project);
    assert!(
        audit.contains("handed to the session's Codex queue"),
        "{audit}"
    );
    tui.wait_idle(&stub, &thread, 2, SESSION_TIMEOUT);
}

/// The edit gate in Codex: session A checks out `src/a.rs` and stays live (its stub holds
/// its next answer); session B's model patches `src/a.rs` with `apply_patch`, which the
/// PreToolUse hook denies with a reason naming A that the model reads in the call's
/// output, and then `src/b.rs`, which goes through. Then the routes around the tool: a
/// patch of `../project/src/a.rs` and of `l/../src/a.rs` (through a link `l -> a/b`),
/// and `apply_patch` run as a shell command (a heredoc after `cd src &&`, and the argument
/// form as `applypatch`), all denied with the file unchanged; and a shell patch of an unclaimed file, applied and recorded as B's edit.
#[test]
fn a_codex_patch_of_a_file_another_session_checked_out_is_denied() {
    let (tmp, project) = initialised_project();
    let hooks: Value =
        serde_json::from_str(&std::fs::read_to_string(project.join(".codex/hooks.json")).unwrap())
            .unwrap();
    let matchers: Vec<&str> = hooks["hooks"]["PreToolUse"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["matcher"].as_str())
        .collect();
    assert_eq!(
        matchers,
        ["apply_patch", "Bash"],
        "init wires the edit gate for the tool and the shell"
    );
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/a.rs"), "a-old\n").unwrap();
    std::fs::write(project.join("src/b.rs"), "b-old\n").unwrap();

    // A: check out the file, then hold (two sessions are never counted: only release()
    // lets it go on).
    let stub_a = CodexStub::start(CodexScript {
        commands: vec!["tasklock checkout --path src/a.rs --reason 'A edits a.rs'".into()],
        hold_after: Some(0),
        sessions: 2,
        ..CodexScript::default()
    });
    let home_a = tmp.path().join("home-a");
    std::fs::create_dir_all(&home_a).unwrap();
    codex_home(&home_a, &project, &stub_a);
    let a = Running::spawn(codex_cmd(&home_a, &project, "Edit a.rs."), "codex exec (a)");
    assert!(
        stub_a.wait_outputs("call_0", 1, SESSION_TIMEOUT),
        "session A did not run its checkout\n{}",
        stub_a.log()
    );
    let checkout = stub_a.outputs_of("call_0").into_values().next().unwrap();
    assert!(
        checkout.contains("Process exited with code 0"),
        "A's checkout: {checkout}"
    );
    let (thread_a, _) = stub_a.outputs_of("call_0").into_iter().next().unwrap();

    // B: patch A's file, then its own.
    let patch_a =
        "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a-old\n+a-from-b\n*** End Patch\n";
    let patch_b = "*** Begin Patch\n*** Update File: src/b.rs\n@@\n-b-old\n+b-new\n*** End Patch\n";
    // Around the tool: the same file through `..`, and apply_patch as a shell command.
    let patch_up = "*** Begin Patch\n*** Update File: ../project/src/a.rs\n@@\n-a-old\n+a-from-up\n*** End Patch\n";
    let shell_a = "cd src && apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: a.rs\n@@\n-a-old\n+a-from-shell\n*** End Patch\nPATCH\n";
    let shell_arg_a = "applypatch '*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a-old\n+a-from-arg\n*** End Patch\n'";
    let shell_c = "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: src/c.rs\n@@\n-c-old\n+c-new\n*** End Patch\nPATCH\n";
    let shell_workdir_a = "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: a.rs\n@@\n-a-old\n+a-from-workdir\n*** End Patch\nPATCH\n";
    std::fs::write(project.join("src/c.rs"), "c-old\n").unwrap();
    // Through a link's `..` (`l -> a/b`): Codex joins the name to the project and applies
    // the `..` to the text (`src/a.rs`), where the kernel would reach `a/src/a.rs`.
    std::fs::create_dir_all(project.join("a/b")).unwrap();
    std::os::unix::fs::symlink("a/b", project.join("l")).unwrap();
    let patch_link = "*** Begin Patch\n*** Update File: l/../src/a.rs\n@@\n-a-old\n+a-from-link\n*** End Patch\n";
    let stub_b = CodexStub::start(CodexScript {
        commands: vec![
            custom_call("apply_patch", patch_a),
            custom_call("apply_patch", patch_b),
            custom_call("apply_patch", patch_up),
            shell_a.into(),
            shell_arg_a.into(),
            shell_c.into(),
            // The shell's own working directory for the command.
            e2e::Script::tool_call(
                "exec_command",
                serde_json::json!({ "cmd": shell_workdir_a, "workdir": "src" }),
            ),
            custom_call("apply_patch", patch_link),
        ],
        // Live until its edits are looked at (a session's end forgets them).
        hold_after: Some(7),
        sessions: 2,
        ..CodexScript::default()
    });
    let home_b = tmp.path().join("home-b");
    std::fs::create_dir_all(&home_b).unwrap();
    codex_home(&home_b, &project, &stub_b);
    offer_apply_patch(&home_b);
    let b = Running::spawn(
        codex_cmd(&home_b, &project, "Edit both files."),
        "codex exec (b)",
    );
    let b_done = stub_b.wait_outputs("call_7", 1, SESSION_TIMEOUT);
    let edits = edit_records(&project);
    stub_b.release();
    let out_b = b.wait(SESSION_TIMEOUT);
    stub_a.release();
    let out_a = a.wait(SESSION_TIMEOUT);
    let context = || {
        format!(
            "--- session a\n{}\n--- session b\n{}\n--- stub a\n{}\n--- stub b\n{}\n--- audit\n{}",
            out_a.text(),
            out_b.text(),
            stub_a.log(),
            stub_b.log(),
            audit_text(&project)
        )
    };
    assert!(
        b_done && out_a.status.success() && out_b.status.success(),
        "{}",
        context()
    );
    assert_eq!(thread_id(&out_a.stdout).as_deref(), Some(thread_a.as_str()));
    let tools = stub_b.tools();
    let offered = tools.values().next().and_then(Value::as_array).cloned();
    assert!(
        offered
            .iter()
            .flatten()
            .any(|t| t["name"] == "apply_patch" && t["type"] == "custom"),
        "Codex offered no freeform apply_patch: {tools:?}"
    );

    // The denial reached the model as the call's output, naming A; the file is as it was.
    let denied = stub_b.outputs_of("call_0").into_values().next();
    let denied = denied.unwrap_or_else(|| panic!("no output of B's first patch\n{}", context()));
    for part in [
        "blocked by PreToolUse hook",
        "tasklock: `src/a.rs` is checked out by another agent",
        &format!("`{thread_a}`"),
        "A edits a.rs",
        "tasklock checkout --path src/a.rs --queue",
    ] {
        assert!(
            denied.contains(part),
            "{part:?} not in B's output: {denied}\n{}",
            context()
        );
    }
    assert_eq!(
        std::fs::read_to_string(project.join("src/a.rs")).unwrap(),
        "a-old\n"
    );
    // The second patch went through.
    let applied = stub_b.outputs_of("call_1").into_values().next();
    let applied = applied.unwrap_or_else(|| panic!("no output of B's second patch\n{}", context()));
    assert!(
        applied.contains("Success") && !applied.contains("blocked"),
        "{applied}\n{}",
        context()
    );
    assert_eq!(
        std::fs::read_to_string(project.join("src/b.rs")).unwrap(),
        "b-new\n"
    );

    // The routes around the tool are denied the same way; the file is as it was.
    for call in ["call_2", "call_3", "call_4", "call_6", "call_7"] {
        let out = stub_b.outputs_of(call).into_values().next();
        let out = out.unwrap_or_else(|| panic!("no output of B's {call}\n{}", context()));
        for part in [
            "tasklock: `src/a.rs` is checked out by another agent",
            &format!("`{thread_a}`"),
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
    // A shell patch of an unclaimed file is applied, and recorded as B's edit (for the
    // commit guard and `tasklock stage`) while B lives, as a tool patch is.
    let (thread_b, applied) = stub_b.outputs_of("call_5").into_iter().next().unwrap();
    assert!(!applied.contains("blocked"), "{applied}\n{}", context());
    assert_eq!(
        std::fs::read_to_string(project.join("src/c.rs")).unwrap(),
        "c-new\n",
        "{}",
        context()
    );
    for (file, by) in [("src/b.rs", &thread_b), ("src/c.rs", &thread_b)] {
        assert!(
            edits.iter().any(|(f, a)| f == file && a == by),
            "{file} not recorded as {by}'s edit: {edits:?}\n{}",
            context()
        );
    }
    assert!(
        !edits.iter().any(|(f, _)| f == "src/a.rs"),
        "a denied edit is recorded: {edits:?}"
    );
}

/// `(file, agent)` of every edit record of the project's worktree.
fn edit_records(project: &Path) -> Vec<(String, String)> {
    let dir = project.join(".git/tasklock/edits");
    let Ok(entries) = std::fs::read_dir(&dir) else {
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

/// `tasklock ARGS --json` as an orchestrator outside any session, with its secret; the
/// exit code and stdout.
fn orchestrator(project: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(e2e::tasklock_bin())
        .args(args)
        .args(["--agent", "orchestrator-1", "--json", "--dir"])
        .arg(project.join(".locks"))
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env("TASKLOCK_SECRET", "orchestrator-secret")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn an_orchestrator_gives_its_claim_to_a_codex_thread_once_it_is_known() {
    let (tmp, project) = initialised_project();
    // Claimed before the session starts, as the orchestrator itself.
    let (code, out) = orchestrator(&project, &["checkout", "issue-42", "--timeout", "2m"]);
    assert_eq!(code, 0, "{out}");
    // The session runs one command, then waits (held by the stub) until released.
    let stub = CodexStub::start(CodexScript {
        commands: vec![
            "echo started".into(),
            "tasklock status issue-42".into(),
            "tasklock release issue-42 --done".into(),
        ],
        hold_after: Some(0),
        sessions: 2,
        pause: Duration::ZERO,
        ..CodexScript::default()
    });
    let s = start_session(tmp.path(), "home", &project, &stub);
    assert!(
        stub.wait_outputs("call_0", 1, SESSION_TIMEOUT),
        "the session ran no command\n{}",
        stub.log()
    );
    // The thread is known now (the stub sees it as the session's cache key; an
    // orchestrator reads it from the `thread.started` event): give it the claim.
    let thread = stub
        .outputs_of("call_0")
        .into_keys()
        .next()
        .expect("one session");
    let (code, out) = orchestrator(&project, &["give", "issue-42", "--to", &thread]);
    stub.release();
    let run = s.running.wait(SESSION_TIMEOUT);
    let context = format!(
        "--- give\n{out}\n--- session\n{}\n--- stub\n{}\n--- audit\n{}",
        run.text(),
        stub.log(),
        audit_text(&project)
    );
    assert_eq!(code, 0, "{context}");
    let given: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(given["outcome"], "given", "{context}");
    assert_eq!(
        given["checkout"]["agent"]["id"],
        thread.as_str(),
        "{context}"
    );
    assert_eq!(
        thread_id(&run.stdout).as_deref(),
        Some(thread.as_str()),
        "{context}"
    );
    // The thread learns it holds the key: its inbox message reaches the model (through
    // its hooks, and Codex's queue), `status` names it; it releases it as its holder.
    assert!(
        stub.any_body_contains("orchestrator-1 gave you its checkout"),
        "the given message did not reach the model\n{context}"
    );
    let status = stub
        .outputs_of("call_1")
        .remove(&thread)
        .unwrap_or_default();
    assert!(
        status.contains(&format!("- Holder: {thread}")),
        "{status}\n{context}"
    );
    let release = stub
        .outputs_of("call_2")
        .remove(&thread)
        .unwrap_or_default();
    assert!(
        release.contains("Process exited with code 0") && release.contains("Released"),
        "{release}\n{context}"
    );
    let audit = e2e::audit(&project.join(".locks"));
    let by = |event: &str| {
        audit
            .iter()
            .find(|e| e["event"] == event && e["key"] == "issue-42")
            .unwrap_or_else(|| panic!("no {event} of issue-42\n{context}"))
            .clone()
    };
    assert_eq!(by("give")["holder"], thread.as_str(), "{context}");
    assert_eq!(by("release")["agent"], thread.as_str(), "{context}");
}

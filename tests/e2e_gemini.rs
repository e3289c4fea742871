//! End to end with the real Gemini CLI: a project set up by `tasklock init`, headless
//! `gemini -p` sessions against a loopback stub of the Gemini API whose "model" runs
//! `tasklock` commands and writes files, and the effects of Gemini CLI's hooks checked in
//! the lock directory.
//!
//! The first run installs the CLI from npm into target/e2e/gemini (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::gemini::{
    GEMINI_FINAL_TEXT, GeminiScript, GeminiStub, gemini_cmd, gemini_home, inner_gemini_pid,
    response, session_id,
};
use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, git_project, run_ok, tasklock_init};

/// A temporary directory with a git repository set up by `tasklock init`.
fn initialised_project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    assert!(
        project.join(".gemini/settings.json").is_file(),
        "tasklock init wrote no .gemini/settings.json"
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
        .env_remove("CODEX_THREAD_ID")
        .env_remove("GEMINI_SESSION_ID");
    let out = run_ok(cmd, "tasklock status", COMMAND_TIMEOUT);
    serde_json::from_str(&out.stdout).expect("status --json is JSON")
}

/// One Gemini CLI session in its own home, with the pid of the process that runs it.
struct Started {
    running: Running,
    inner: u32,
    inner_start: Option<u64>,
}

fn start_session(
    parent: &Path,
    name: &str,
    project: &Path,
    stub: &GeminiStub,
    prompt: &str,
) -> Started {
    let home = parent.join(name);
    gemini_home(&home);
    let running = Running::spawn(
        gemini_cmd(&home, project, stub, prompt),
        &format!("gemini -p ({name})"),
    );
    let inner = inner_gemini_pid(running.pid(), Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the launcher started no Gemini CLI process"));
    Started {
        running,
        inner,
        inner_start: e2e::start_time(inner),
    }
}

/// The text of a step's result as Gemini CLI sent it back (`output`, or `error`).
fn result_text(raw: &str) -> String {
    let v: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    v["output"]
        .as_str()
        .or_else(|| v["error"].as_str())
        .map_or_else(|| raw.to_string(), str::to_string)
}

#[test]
fn two_gemini_sessions_race_for_one_task_and_release_it_when_they_end() {
    let started = Instant::now();
    let gemini = e2e::gemini::gemini();
    eprintln!(
        "e2e: gemini at {} ({:?})",
        gemini.display(),
        started.elapsed()
    );
    let (tmp, project) = initialised_project();
    // Both sessions try the same task; neither goes on before both have tried, so the
    // winner still holds it when the other asks.
    let stub = GeminiStub::start(GeminiScript {
        steps: vec![
            GeminiScript::shell("tasklock checkout race-task"),
            GeminiScript::shell("tasklock list"),
        ],
        hold_after: Some(0),
        sessions: 2,
        wait_for_go: false,
    });
    let prompt = "Check out the task with tasklock.";
    let a = start_session(tmp.path(), "home-a", &project, &stub, prompt);
    let b = start_session(tmp.path(), "home-b", &project, &stub, prompt);
    let (a_inner, a_start) = (a.inner, a.inner_start);
    let (b_inner, b_start) = (b.inner, b.inner_start);
    let out_a = a.running.wait(SESSION_TIMEOUT);
    let out_b = b.running.wait(SESSION_TIMEOUT);
    eprintln!(
        "e2e: sessions took {:?} and {:?}",
        out_a.elapsed, out_b.elapsed
    );
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
        assert_eq!(
            response(&out.stdout).as_deref(),
            Some(GEMINI_FINAL_TEXT),
            "a session did not end with the stub's final answer\n{}",
            context()
        );
    }
    let id_a = session_id(&out_a.stdout).expect("gemini -o json names its session");
    let id_b = session_id(&out_b.stdout).expect("gemini -o json names its session");
    assert_ne!(id_a, id_b, "{}", context());

    // Exactly one won; the other got exit 2 naming the winner's session. The stub knows
    // the sessions by the agent id SessionStart's context gave the model: the session id.
    let results = stub.outputs_of(0);
    let result = |s: &str| {
        result_text(
            results
                .get(s)
                .unwrap_or_else(|| panic!("no result of the checkout from {s}\n{}", context())),
        )
    };
    let (ra, rb) = (result(&id_a), result(&id_b));
    let won = |r: &str| !r.contains("Exit Code") && r.contains("Checked out `race-task`");
    let (winner, loser, lost_text, winner_pid, winner_start, loser_pid) = match (won(&ra), won(&rb))
    {
        (true, false) => (&id_a, &id_b, &rb, a_inner, a_start, b_inner),
        (false, true) => (&id_b, &id_a, &ra, b_inner, b_start, a_inner),
        _ => panic!("exactly one session must win\n{}", context()),
    };
    assert!(
        lost_text.contains("Exit Code: 2") && lost_text.contains(winner.as_str()),
        "the loser is told which session holds the task: {lost_text}\n{}",
        context()
    );

    // The winner's checkout is bound to its session's secret (read by the command from the
    // file the session-start hook kept): `tasklock list` does not call it unproven.
    let listed = stub.outputs_of(1);
    let listed = result_text(
        listed
            .get(winner.as_str())
            .unwrap_or_else(|| panic!("no list from the winner\n{}", context())),
    );
    assert!(
        listed.contains("race-task") && !listed.contains("(unproven)"),
        "{listed}\n{}",
        context()
    );

    // The identity is the Gemini session id (given to the commands by the BeforeTool
    // hook), in the audit log too.
    let audit = e2e::audit(&project.join(".locks"));
    let find = |event: &str| {
        audit
            .iter()
            .find(|e| e["event"] == event && e["key"] == "race-task")
            .unwrap_or_else(|| panic!("no {event} of race-task\n{}", context()))
    };
    assert_eq!(find("acquire")["agent"], winner.as_str(), "{}", context());
    let deny = find("deny");
    assert_eq!(deny["agent"], loser.as_str(), "{}", context());
    assert_eq!(deny["holder"], winner.as_str(), "{}", context());

    // SessionStart registered each session under its id, watching its Gemini CLI process,
    // named after the project; BeforeAgent, AfterTool and AfterAgent beat.
    for (id, pid) in [(winner, winner_pid), (loser, loser_pid)] {
        let entry = agent_entry(&project, id);
        assert_eq!(entry["id"], id.as_str(), "{entry}");
        assert_eq!(entry["pid"], pid, "the gemini process is watched: {entry}");
        assert_eq!(
            entry["name"],
            format!("gemini in project #{}", &id[..8]),
            "{entry}"
        );
        assert!(
            entry["heartbeats"].as_u64().unwrap_or(0) >= 4,
            "SessionStart, BeforeAgent, AfterTool and AfterAgent beat: {entry}"
        );
        assert_eq!(entry["ended_reason"], "session_end", "{entry}");
    }
    if let Some(start) = winner_start {
        assert_eq!(agent_entry(&project, winner)["pid_start"], start);
    }

    // The session's end (SessionEnd) released the task.
    let release = find("auto_release");
    assert_eq!(release["agent"], winner.as_str(), "{}", context());
    assert_eq!(release["reason"], "session_end", "{}", context());
    assert_eq!(status_json(&project, "race-task")["outcome"], "free");
    eprintln!("e2e: total {:?}", started.elapsed());
}

#[test]
fn killing_gemini_releases_its_task_through_the_watcher() {
    let (tmp, project) = initialised_project();
    // The model checks the task out, then thinks until the test kills Gemini CLI.
    let stub = GeminiStub::start(GeminiScript {
        steps: vec![GeminiScript::shell("tasklock checkout kill-task")],
        hold_after: Some(0),
        sessions: usize::MAX,
        wait_for_go: false,
    });
    let s = start_session(tmp.path(), "home", &project, &stub, "Check out the task.");
    assert!(
        stub.wait_outputs(0, 1, SESSION_TIMEOUT),
        "the checkout never ran\n{}",
        stub.log()
    );
    let (id, out) = stub.outputs_of(0).into_iter().next().expect("one session");
    assert!(
        result_text(&out).contains("Checked out `kill-task`"),
        "{out}\n{}",
        audit_text(&project)
    );
    let status = status_json(&project, "kill-task");
    assert_eq!(status["outcome"], "held", "{status}");
    assert_eq!(status["checkout"]["agent"]["id"], id.as_str(), "{status}");
    assert_eq!(status["checkout"]["agent"]["pid"], s.inner, "{status}");

    // SIGKILL: no hook runs; the watcher started by SessionStart sees the process go.
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(s.inner as i32, libc::SIGKILL) }, 0);
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
            "kill-task was not released within 15 s of killing gemini\n{}",
            audit_text(&project)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("e2e: released {:?} after the kill", killed.elapsed());
    assert_eq!(released["agent"], id.as_str(), "{released}");
    assert_eq!(released["reason"], "agent_death", "{released}");
    // The watcher writes the audit line and the registry entry one after the other.
    while agent_entry(&project, &id)["ended_reason"].is_null()
        && killed.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(agent_entry(&project, &id)["ended_reason"], "process_gone");
    assert_eq!(status_json(&project, "kill-task")["outcome"], "free");
    stub.release();
    let out = s.running.wait(SESSION_TIMEOUT);
    assert!(
        !out.status.success(),
        "the launcher reports its Gemini CLI was killed\n{}",
        out.text()
    );
}

/// Session A checks out `src/a.rs` and stays live; session B's model writes `src/a.rs`
/// (denied by the BeforeTool hook, the reason naming A reaching the model as the tool's
/// error, the file unchanged), and the same file through a link's `..` (`l -> a/b`):
/// `write_file` of `l/../src/a.rs` and `replace` of its absolute form, blocked the same
/// way; then edits `src/b.rs` with `replace` and writes `src/c.rs`,
/// which go through and are recorded as B's edits (for the commit guard and `stage`).
#[test]
fn a_gemini_session_cannot_write_a_file_another_session_checked_out() {
    let (tmp, project) = initialised_project();
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/a.rs"), "a-old\n").unwrap();
    std::fs::write(project.join("src/b.rs"), "b-old\n").unwrap();
    std::fs::create_dir_all(project.join("a/b")).unwrap();
    std::os::unix::fs::symlink("a/b", project.join("l")).unwrap();
    let up_a = project.join("l/../src/a.rs").display().to_string();

    let stub_a = GeminiStub::start(GeminiScript {
        steps: vec![GeminiScript::shell(
            "tasklock checkout --path src/a.rs --reason 'A edits a.rs'",
        )],
        hold_after: Some(0),
        sessions: 2,
        wait_for_go: false,
    });
    let stub_b = GeminiStub::start(GeminiScript {
        steps: vec![
            (
                "write_file".into(),
                json!({"file_path": "src/a.rs", "content": "a-from-b\n"}),
            ),
            // The same file through `..` after a link (`l -> a/b`): Gemini CLI applies
            // the `..` to the text (`src/a.rs`), the kernel would not (`a/src/a.rs`).
            (
                "write_file".into(),
                json!({"file_path": "l/../src/a.rs", "content": "a-from-link\n"}),
            ),
            (
                "replace".into(),
                json!({"file_path": up_a, "instruction": "Update a.", "old_string": "a-old", "new_string": "a-from-up"}),
            ),
            (
                "replace".into(),
                json!({"file_path": "src/b.rs", "instruction": "Update b.", "old_string": "b-old", "new_string": "b-new"}),
            ),
            (
                "write_file".into(),
                json!({"file_path": "src/c.rs", "content": "c-new\n"}),
            ),
            // `tasklock stage` as this session: its own edits, not A's file.
            GeminiScript::shell("tasklock stage && git diff --cached --name-only"),
        ],
        // Live until its edits are looked at (a session's end forgets them).
        hold_after: Some(5),
        sessions: 2,
        // B starts up beside A, and writes only once A holds the file.
        wait_for_go: true,
    });
    let a = start_session(tmp.path(), "home-a", &project, &stub_a, "Edit a.rs.");
    let b = start_session(tmp.path(), "home-b", &project, &stub_b, "Edit the files.");
    assert!(
        stub_a.wait_outputs(0, 1, SESSION_TIMEOUT),
        "session A did not run its checkout\n{}",
        stub_a.log()
    );
    let (id_a, checkout) = stub_a.outputs_of(0).into_iter().next().unwrap();
    assert!(
        result_text(&checkout).contains("Checked out"),
        "A's checkout: {checkout}"
    );
    stub_b.go();
    let b_done = stub_b.wait_outputs(5, 1, SESSION_TIMEOUT);
    let edits = edit_records(&project);
    stub_b.release();
    let out_b = b.running.wait(SESSION_TIMEOUT);
    stub_a.release();
    let out_a = a.running.wait(SESSION_TIMEOUT);
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
    assert_eq!(session_id(&out_a.stdout).as_deref(), Some(id_a.as_str()));

    // The denial reached the model as the call's result, naming A; the file is as it was.
    let denied = stub_b.outputs_of(0).into_values().next();
    let denied = denied.unwrap_or_else(|| panic!("no result of B's write\n{}", context()));
    for part in [
        "Tool execution blocked",
        "tasklock: `src/a.rs` is checked out by another agent",
        &format!("`{id_a}`"),
        "A edits a.rs",
        "tasklock checkout --path src/a.rs --queue",
    ] {
        assert!(
            denied.contains(part),
            "{part:?} not in B's result: {denied}\n{}",
            context()
        );
    }
    // Through the link's `..`, relative and absolute: blocked the same way, the file as
    // it was (and nothing written where the kernel would take the name).
    for step in [1, 2] {
        let out = stub_b.outputs_of(step).into_values().next();
        let out = out.unwrap_or_else(|| panic!("no result of B's step {step}\n{}", context()));
        for part in [
            "Tool execution blocked",
            "tasklock: `src/a.rs` is checked out by another agent",
            &format!("`{id_a}`"),
        ] {
            assert!(
                out.contains(part),
                "step {step}: {part:?} not in B's result: {out}\n{}",
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
    // The other edits went through and were recorded as B's while B lived.
    let (id_b, _) = stub_b.outputs_of(3).into_iter().next().unwrap();
    for (file, text) in [("src/b.rs", "b-new\n"), ("src/c.rs", "c-new\n")] {
        assert_eq!(
            std::fs::read_to_string(project.join(file)).unwrap(),
            text,
            "{}",
            context()
        );
        assert!(
            edits.iter().any(|(f, a)| f == file && a == &id_b),
            "{file} not recorded as {id_b}'s edit: {edits:?}\n{}",
            context()
        );
    }
    assert!(
        !edits.iter().any(|(f, _)| f == "src/a.rs"),
        "a denied edit is recorded: {edits:?}"
    );
    let staged = result_text(&stub_b.outputs_of(5).remove(&id_b).unwrap_or_default());
    let names: Vec<&str> = staged
        .lines()
        .filter(|l| l.starts_with("src/"))
        .map(str::trim)
        .collect();
    assert_eq!(names, ["src/b.rs", "src/c.rs"], "{staged}\n{}", context());
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

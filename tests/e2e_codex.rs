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
    CODEX_FINAL_TEXT, CodexScript, CodexStub, codex_cmd, codex_home, native_codex_pid, thread_id,
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
    });
    let s = start_session(tmp.path(), "home", &project, &stub);
    assert!(
        stub.wait_outputs(&format!("call_{LISTS}"), 1, SESSION_TIMEOUT),
        "the commands never ran\n{}",
        stub.log()
    );
    // Each command runs in a sandbox with a pid namespace of its own, which the kernel
    // often gives the inode of the one before: a later command must not take the
    // checkout's (host) pid for one of its own namespace, gone. (Before pid_ns named
    // the namespace's pid 1 too, one list in two or three found the task free.)
    for i in 1..=LISTS {
        let listed = stub
            .outputs_of(&format!("call_{i}"))
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
    assert_eq!(
        agent_entry(&project, &thread)["ended_reason"],
        "process_gone"
    );
    assert_eq!(status_json(&project, "kill-task")["outcome"], "free");
    stub.release();
    let out = s.running.wait(SESSION_TIMEOUT);
    assert!(
        !out.status.success(),
        "the launcher reports its codex was killed\n{}",
        out.text()
    );
}

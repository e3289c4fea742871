//! The Claude Code plugin's monitor (`monitors/monitors.json`: `tasklock inbox --follow`)
//! wakes an idle interactive session where the messaging socket cannot: here the
//! releasing tasklock runs under another host name (a UTS namespace of its own, as on
//! another machine sharing the store), so its push is refused as "another host". And a
//! session both paths reach is told once. The session runs in tmux against the loopback
//! stub (see `tests/e2e/interactive.rs`), with the repository's plugin (`--plugin-dir`).
//!
//! The first run installs the CLI from npm into target/e2e/node (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::interactive::InteractiveSession;
use e2e::{Script, Stub, result_text};

const TIMEOUT: Duration = Duration::from_secs(60);
/// The start of every message tasklock pushes or its monitor prints (src/clients/wake.rs).
const TOLD: &str = "[tasklock] A notification from tasklock";

/// `tasklock --dir PROJECT/.locks ARGS --agent AGENT` under `prefix` (e.g. `unshare`),
/// which must succeed.
fn tasklock_via(prefix: &[&str], project: &Path, agent: &str, args: &[&str]) -> String {
    let (program, before): (PathBuf, Vec<String>) = match prefix.split_first() {
        Some((p, rest)) => (
            PathBuf::from(p),
            rest.iter()
                .map(|s| s.to_string())
                .chain([e2e::tasklock_bin().to_string_lossy().into_owned()])
                .collect(),
        ),
        None => (e2e::tasklock_bin(), Vec::new()),
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(before)
        .arg("--dir")
        .arg(project.join(".locks"))
        .args(args)
        .args(["--agent", agent])
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_URL")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CLAUDE_CODE_MESSAGING_SOCKET");
    e2e::run_ok(cmd, &format!("tasklock {args:?}"), e2e::COMMAND_TIMEOUT).stdout
}

fn tasklock(project: &Path, agent: &str, args: &[&str]) -> String {
    tasklock_via(&[], project, agent, args)
}

/// Run tasklock as if on another machine sharing the store: a UTS namespace of its own
/// with another host name.
const OTHER_HOST: &[&str] = &[
    "unshare",
    "--uts",
    "sh",
    "-c",
    "hostname e2e-other-host && exec \"$0\" \"$@\"",
];

/// A git project (no `tasklock init`: the plugin brings the hooks) whose lock directory
/// has `key` held by another agent, and a session with the repository's plugin that
/// queued for it and went idle. Returns the session and its project.
fn queued_session(tmp: &Path, stub: &Stub, key: &str) -> (InteractiveSession, PathBuf) {
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = e2e::git_project(tmp);
    tasklock(&project, "holder", &["checkout", key]);
    e2e::claude();
    let plugin = e2e::repo_root().join("plugins/claude");
    let session = InteractiveSession::start(
        &home,
        &project,
        stub,
        &[
            "--allowedTools",
            "Bash",
            "--plugin-dir",
            plugin.to_str().unwrap(),
        ],
    );
    session.type_prompt(&format!("Take the {key} task; queue for it if it is busy."));
    session.wait_idle(TIMEOUT);
    let queued = stub
        .result("main-0")
        .unwrap_or_else(|| session.fail("the session did not run the queueing checkout"));
    assert!(
        result_text(&queued).contains("Your place in the queue: 1"),
        "the session did not queue: {queued}"
    );
    // The monitor runs: the session's own `tasklock inbox --follow`.
    let deadline = Instant::now() + TIMEOUT;
    while follower_of(session.pid()).is_none() {
        if Instant::now() > deadline {
            session.fail("no `tasklock inbox --follow` runs under the session");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (session, project)
}

/// The session's monitor process, `tasklock … inbox --follow`, if it runs.
fn follower_of(session: u32) -> Option<u32> {
    e2e::interactive::descendants(session)
        .into_iter()
        .map(|(pid, _)| pid)
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains("tasklock") && c.contains("inbox --follow") && !c.contains("/bin/sh")
            })
        })
}

/// How many times the model was told of `key` in the request that carried the most: a
/// message is in every later request of the conversation, once if it was delivered once.
fn times_told(stub: &Stub, first: usize, key: &str) -> usize {
    let bodies = stub.state.lock().unwrap().bodies[first..].to_vec();
    bodies
        .iter()
        .map(|b| {
            let req: serde_json::Value = serde_json::from_str(b).unwrap();
            let text = req["messages"].to_string();
            text.match_indices(TOLD)
                .filter(|(i, _)| text[*i..].contains(key))
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn assert_holds(project: &Path, sid: &str, key: &str) {
    let status: serde_json::Value =
        serde_json::from_str(&tasklock(project, sid, &["status", key, "--json"])).unwrap();
    assert_eq!(status["checkout"]["agent"]["id"], sid, "{status}");
}

/// The key is released from "another host": the socket push is refused there, and the
/// idle session is woken by its monitor's line, takes the key, and the monitor ends
/// with the session.
#[test]
fn an_idle_session_is_woken_by_its_monitor_where_the_socket_cannot_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let stub = Stub::script(Script {
        main: vec!["tasklock checkout e2e-far --queue".into()],
        on_text: vec![(TOLD.into(), "tasklock checkout e2e-far".into())],
        ..Script::default()
    });
    let (session, project) = queued_session(tmp.path(), &stub, "e2e-far");
    let sid = session.session_id().to_string();
    let first = stub.requests();
    let released = Instant::now();
    tasklock_via(OTHER_HOST, &project, "holder", &["release", "e2e-far"]);
    let Some(seen) = stub.wait_for_request_from(first, "Monitor event", TIMEOUT) else {
        session.fail("no request to the model carried the monitor's line");
    };
    eprintln!(
        "e2e: release on another host to the idle session's next model request: {:?}",
        seen.saturating_duration_since(released)
    );
    let Some(took) = stub.wait_for_result("text-0", TIMEOUT) else {
        session.fail("the woken session did not run `tasklock checkout e2e-far`");
    };
    assert!(took["is_error"] != true, "{took}\n{}", session.screen());
    assert_holds(&project, &sid, "e2e-far");
    session.wait_idle(TIMEOUT);
    assert_eq!(times_told(&stub, first, "e2e-far"), 1, "{}", stub.log());
    let audit = tasklock(&project, &sid, &["audit", "--key", "e2e-far"]);
    assert!(
        audit.contains("reserved: shown by the session's monitor"),
        "{audit}"
    );
    assert!(!audit.contains("delivered to the session"), "{audit}");

    // The session's process is killed (no hook runs): its monitor ends by itself.
    let monitor = follower_of(session.pid()).expect("the monitor runs");
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(session.pid() as i32, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{monitor}")).exists()
        && !std::fs::read_to_string(format!("/proc/{monitor}/stat"))
            .is_ok_and(|s| s.contains(") Z "))
    {
        assert!(
            Instant::now() < deadline,
            "the monitor (pid {monitor}) outlived its session by 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The same host: the socket and the monitor both reach the session; it is told once.
#[test]
fn a_session_both_paths_reach_is_told_once() {
    let tmp = tempfile::tempdir().unwrap();
    let stub = Stub::script(Script {
        main: vec!["tasklock checkout e2e-near --queue".into()],
        on_text: vec![(TOLD.into(), "tasklock checkout e2e-near".into())],
        ..Script::default()
    });
    let (session, project) = queued_session(tmp.path(), &stub, "e2e-near");
    let sid = session.session_id().to_string();
    let first = stub.requests();
    tasklock(&project, "holder", &["release", "e2e-near"]);
    if stub.wait_for_request_from(first, TOLD, TIMEOUT).is_none() {
        session.fail("the idle session was not told");
    }
    if stub.wait_for_result("text-0", TIMEOUT).is_none() {
        session.fail("the woken session did not take its key");
    }
    session.wait_idle(TIMEOUT);
    // Long enough for a second delivery to start a turn of its own.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(times_told(&stub, first, "e2e-near"), 1, "{}", stub.log());
    assert!(stub.result("text-1").is_none(), "{}", stub.log());
    assert_holds(&project, &sid, "e2e-near");
    let audit = tasklock(&project, &sid, &["audit", "--key", "e2e-near"]);
    let told: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("| push |") && !l.contains("not delivered"))
        .collect();
    assert_eq!(told.len(), 1, "{audit}");
    eprintln!("e2e: told by {}", told[0]);
}

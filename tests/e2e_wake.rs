//! An idle interactive Claude Code session takes a turn when a line is written to its
//! messaging socket, with no keystroke: what tasklock relies on to wake a session waiting
//! for a lock. The session runs in tmux (see `tests/e2e/interactive.rs`) against the
//! loopback stub; the "model" runs one Bash command for the typed prompt and another when
//! the socket's message reaches it.
//!
//! The first run installs the CLI from npm into target/e2e/node (see docs/e2e.md).

mod e2e;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2e::interactive::InteractiveSession;
use e2e::{Script, Stub, result_text, uuid};

/// Generous: a loaded 2-core machine starts the TUI and runs a turn in a few seconds.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A home and an (untrusted by default, here trusted) project directory.
fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    (tmp, home, project)
}

/// A session that ran one typed turn (`echo first-turn`) and is idle.
fn idle_session(
    stub: &Stub,
    home: &std::path::Path,
    project: &std::path::Path,
) -> InteractiveSession {
    e2e::claude();
    let started = Instant::now();
    let session = InteractiveSession::start(home, project, stub, &["--allowedTools", "Bash"]);
    session.type_prompt("Run the first turn.");
    session.wait_idle(TIMEOUT);
    let first = stub.result("main-0").unwrap_or_else(|| {
        session.fail("the typed turn did not run `echo first-turn`");
    });
    assert!(
        result_text(&first).contains("first-turn"),
        "the first turn's command did not run: {first}"
    );
    eprintln!(
        "e2e: session {} (pid {}) idle after its typed turn, {:?} after start",
        session.session_id(),
        session.pid(),
        started.elapsed()
    );
    session
}

#[test]
fn an_idle_session_takes_a_turn_when_its_socket_is_written() {
    let (_tmp, home, project) = dirs();
    let marker = format!("WAKE-TEST-{}", uuid());
    let stub = Stub::script(Script {
        main: vec!["echo first-turn".into()],
        on_text: vec![(marker.clone(), "echo woke".into())],
        ..Script::default()
    });
    let session = idle_session(&stub, &home, &project);
    let before = stub.requests();
    // Really idle: nothing happens by itself.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        stub.requests(),
        before,
        "the idle session asked the model by itself:\n{}",
        stub.log()
    );

    let written = session.write_to_socket(
        &format!("{marker}: the lock you wait for is yours"),
        session.session_id(),
    );
    let Some(seen) = stub.wait_for_request(&marker, TIMEOUT) else {
        session.fail("no request to the model carried the message written to the socket");
    };
    eprintln!(
        "e2e: the stub saw the woken turn {:?} after the socket write",
        seen.saturating_duration_since(written)
    );
    let Some(result) = stub.wait_for_result("text-0", TIMEOUT) else {
        session.fail("the woken turn did not run `echo woke`");
    };
    assert!(
        result["is_error"] != true && result_text(&result).contains("woke"),
        "`echo woke` did not succeed in the woken turn: {result}\n{}",
        session.screen()
    );
    session.wait_idle(TIMEOUT);
}

#[test]
fn a_line_for_another_session_id_starts_no_turn() {
    let (_tmp, home, project) = dirs();
    let wrong = format!("WRONG-ID-{}", uuid());
    let right = format!("RIGHT-ID-{}", uuid());
    let stub = Stub::script(Script {
        main: vec!["echo first-turn".into()],
        on_text: vec![
            (wrong.clone(), "echo wrong".into()),
            (right.clone(), "echo right".into()),
        ],
        ..Script::default()
    });
    let session = idle_session(&stub, &home, &project);
    let before = stub.requests();

    session.write_to_socket(&format!("{wrong}: for someone else"), &uuid());
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        stub.requests(),
        before,
        "a line with another session's id started a turn:\n{}\n--- screen\n{}",
        stub.log(),
        session.screen()
    );
    assert!(stub.wait_for_request(&wrong, Duration::ZERO).is_none());

    // The socket works: the same line with the session's own id is delivered.
    session.write_to_socket(&format!("{right}: for you"), session.session_id());
    if stub.wait_for_request(&right, TIMEOUT).is_none() {
        session.fail("the line with the session's own id started no turn either");
    }
    if stub.wait_for_result("text-1", TIMEOUT).is_none() {
        session.fail("the turn for the session's own id did not run `echo right`");
    }
    assert!(
        stub.result("text-0").is_none(),
        "the line for another session ran its step after all"
    );
    session.wait_idle(TIMEOUT);
}

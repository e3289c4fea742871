//! End to end with the real Claude Code CLI: a project set up by `tasklock init`, one
//! headless session against a loopback stub of the Anthropic API whose "model" runs
//! `tasklock checkout e2e-task`, and the hooks' effects checked in the lock directory.
//!
//! The first run installs the CLI from npm into target/e2e/node (see docs/e2e.md).

mod e2e;

use std::time::Instant;

use e2e::{Stub, assert_session_lifecycle, git_project, run_session, tasklock_init};

#[test]
fn claude_session_registers_checks_out_beats_and_releases() {
    let started = Instant::now();
    let claude = e2e::claude();
    eprintln!(
        "e2e: claude at {} ({:?})",
        claude.display(),
        started.elapsed()
    );

    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    assert!(
        project.join(".claude/settings.json").is_file(),
        "tasklock init wrote no .claude/settings.json"
    );

    let stub = Stub::start("tasklock checkout e2e-task");
    let session = run_session(
        &home,
        &project,
        &stub,
        "Check out the task e2e-task with tasklock, then stop.",
    );
    eprintln!(
        "e2e: session {} took {:?}; stub saw:\n{}\nclaude stderr:\n{}",
        session.id,
        session.out.elapsed,
        stub.log(),
        session.out.stderr
    );
    assert_session_lifecycle(&session, &project, &stub);
    eprintln!("e2e: total {:?}", started.elapsed());
}

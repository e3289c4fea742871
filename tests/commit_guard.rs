//! The git pre-commit guard through real `git commit`s: a repository with two worktrees,
//! the hook installed by `tasklock init --git-hook`, agents named by `TASKLOCK_AGENT` as
//! their shells would have it.

#[macro_use]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The directory of the tasklock under test, first in PATH, so the hook finds it.
fn path_with_tasklock() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_tasklock"));
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A repository at the temp dir (with the lock directory at its top), one commit, and a
/// second worktree beside it: (env, main worktree, second worktree).
fn repo() -> (Env, PathBuf, PathBuf) {
    let env = Env::new();
    let main = env.tmp.path().join("repo");
    std::fs::create_dir_all(main.join("src/a")).unwrap();
    std::fs::create_dir_all(main.join("src/b")).unwrap();
    git(&main, &["init", "-q", "-b", "main"]);
    std::fs::write(main.join("src/a/x.rs"), "a\n").unwrap();
    std::fs::write(main.join("src/b/y.rs"), "b\n").unwrap();
    std::fs::write(main.join(".gitignore"), ".locks/\n").unwrap();
    git(&main, &["add", "-A"]);
    git(&main, &["commit", "-q", "-m", "start"]);
    let second = env.tmp.path().join("second");
    git(&main, &["worktree", "add", "-q", second.to_str().unwrap()]);
    (env, main, second)
}

fn locks(main: &Path) -> PathBuf {
    main.join(".locks")
}

/// `tasklock ARGS` in `cwd` as `agent`, the lock directory found from there.
fn tl(env: &Env, cwd: &Path, agent: &str, args: &[&str]) -> Run {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &locks_of(env, cwd));
    cmd.current_dir(cwd).env("TASKLOCK_AGENT", agent).args(args);
    exec(cmd)
}

/// The lock directory every worktree shares: at the main worktree's top.
fn locks_of(env: &Env, _cwd: &Path) -> PathBuf {
    locks(&env.tmp.path().join("repo"))
}

/// `git commit` as `agent`: the hook runs the guard with the agent's identity.
fn commit(env: &Env, cwd: &Path, agent: &str, msg: &str) -> Run {
    commit_as(env, cwd, Some(agent), msg)
}

/// `git commit` as `agent`, or with no agent identity at all.
fn commit_as(env: &Env, cwd: &Path, agent: Option<&str>, msg: &str) -> Run {
    let mut cmd = Command::new("git");
    use_store(&mut cmd, &locks_of(env, cwd));
    match agent {
        Some(a) => cmd.env("TASKLOCK_AGENT", a),
        None => cmd.env_remove("TASKLOCK_AGENT"),
    };
    cmd.args(["commit", "-q", "-m", msg])
        .current_dir(cwd)
        .env("PATH", path_with_tasklock())
        .env("TASKLOCK_NOW", &env.now)
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .stdin(Stdio::null());
    exec(cmd)
}

fn head(dir: &Path) -> String {
    String::from_utf8(git(dir, &["rev-parse", "HEAD"]).stdout).unwrap()
}

/// Claude Code's edit hook for `session`, which stamps edits inside its own checkouts.
fn edit_hook(env: &Env, cwd: &Path, session: &str, file: &Path) {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &locks_of(env, cwd));
    let mut child = cmd
        .args(["hook", "pre-tool-use"])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let payload = json!({
        "session_id": session, "cwd": cwd, "hook_event_name": "PreToolUse",
        "tool_name": "Edit", "tool_input": {"file_path": file, "old_string": "a", "new_string": "b"}
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "an edit in one's own checkout passes silently: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn commits_of_files_another_agent_holds_are_refused_in_any_worktree() {
    let (env, main, second) = repo();
    let r = tl(&env, &main, "alice", &["init", "--git-hook"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = tl(&env, &main, "alice", &["checkout", "--path", "src/a/**"]);
    assert_eq!(r.code, 0, "{}", r.text());

    // Bob, in the other worktree, stages a file of Alice's tree: refused, naming her.
    std::fs::write(second.join("src/a/x.rs"), "bob was here\n").unwrap();
    std::fs::write(second.join("src/b/y.rs"), "bob's own\n").unwrap();
    git(&second, &["add", "src/a/x.rs", "src/b/y.rs"]);
    let before = head(&second);
    let r = commit(&env, &second, "bob", "bob");
    assert_ne!(r.code, 0, "{}", r.text());
    assert!(r.text().contains("held by alice"), "{}", r.text());
    assert_eq!(head(&second), before, "nothing was committed");
    let guard = tl(&env, &second, "bob", &["guard-commit"]);
    assert_eq!(guard.code, 2, "{}", guard.text());
    snap!(env, "held", guard);
    let j = tl(&env, &second, "bob", &["guard-commit", "--json"]).json();
    assert_eq!(j["staged"], 2);
    assert_eq!(j["files"][0]["file"], "src/a/x.rs");
    assert_eq!(j["files"][0]["verdict"], "held");
    assert_eq!(j["files"][0]["key"], "path:src/a/**");
    assert_eq!(j["files"][0]["pattern"], "src/a/**");
    assert_eq!(j["files"][0]["checkout"]["agent"]["id"], "alice");
    assert_eq!(j["files"].as_array().unwrap().len(), 1, "{j}");

    // Without Alice's file, Bob's commit goes through.
    git(&second, &["restore", "--staged", "src/a/x.rs"]);
    let r = commit(&env, &second, "bob", "bob's own");
    assert_eq!(r.code, 0, "{}", r.text());
    assert_ne!(head(&second), before);

    // Alice commits her own files.
    std::fs::write(main.join("src/a/x.rs"), "alice\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);
    let pass = tl(&env, &main, "alice", &["guard-commit"]);
    assert_eq!(pass.code, 0, "{}", pass.text());
    snap!(env, "allowed", pass);
    let r = commit(&env, &main, "alice", "alice");
    assert_eq!(r.code, 0, "{}", r.text());

    // Once her checkout is released, anyone may commit those files.
    let r = tl(&env, &main, "alice", &["release", "path:src/a/**"]);
    assert_eq!(r.code, 0, "{}", r.text());
    git(&second, &["add", "src/a/x.rs"]);
    let r = commit(&env, &second, "bob", "bob, later");
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn a_commit_of_edits_made_under_a_lost_checkout_is_refused() {
    let (mut env, main, _second) = repo();
    tl(&env, &main, "alice", &["init", "--git-hook"]);
    let r = tl(
        &env,
        &main,
        "alice",
        &["checkout", "--path", "src/a", "--timeout", "1m"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    // Her session's edit hook stamps the edit with the checkout's token.
    edit_hook(&env, &main, "alice", &main.join("src/a/x.rs"));
    std::fs::write(main.join("src/a/x.rs"), "alice, slowly\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);

    // Her lease ran out before she committed: the commit is refused.
    env.at(T5M);
    let before = head(&main);
    let r = commit(&env, &main, "alice", "late");
    assert_ne!(r.code, 0, "{}", r.text());
    assert_eq!(head(&main), before);
    let guard = tl(&env, &main, "alice", &["guard-commit"]);
    assert_eq!(guard.code, 4, "{}", guard.text());
    snap!(env, "lost", guard);
    let j = tl(&env, &main, "alice", &["guard-commit", "--json"]).json();
    assert_eq!(j["files"][0]["verdict"], "lost", "{j}");
    assert_eq!(j["files"][0]["key"], "path:src/a");
    assert_eq!(j["files"][0]["token"], 1);

    // Another agent took the paths over meanwhile: now the file is theirs (exit 2).
    let r = tl(&env, &main, "carol", &["checkout", "--path", "src/a"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = tl(&env, &main, "alice", &["guard-commit", "--json"]).json();
    assert_eq!(j["files"][0]["verdict"], "held", "{j}");
    assert_eq!(j["files"][0]["checkout"]["agent"]["id"], "carol");

    // Checked out again under a new token (after carol is done), the edit is hers again.
    tl(&env, &main, "carol", &["release", "path:src/a"]);
    tl(&env, &main, "alice", &["checkout", "--path", "src/a"]);
    edit_hook(&env, &main, "alice", &main.join("src/a/x.rs"));
    let r = commit(&env, &main, "alice", "redone");
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn without_a_lock_directory_commits_pass() {
    let (env, main, _second) = repo();
    // The hook, installed without ever taking a checkout: init made the lock directory,
    // so remove it to see a repository that has none.
    tl(&env, &main, "alice", &["init", "--git-hook"]);
    std::fs::remove_dir_all(locks(&main)).unwrap();
    std::fs::write(main.join("src/a/x.rs"), "free\n").unwrap();
    git(&main, &["add", "-A"]);
    let r = commit(&env, &main, "alice", "free");
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn the_guard_runs_before_an_existing_hook_and_with_husky() {
    // An existing pre-commit hook (the pre-commit framework installs one like it).
    let (env, main, _second) = repo();
    let hooks = main.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let theirs = "#!/bin/sh\necho ran >> \"$(git rev-parse --show-toplevel)/../their-hook-ran\"\n";
    std::fs::write(hooks.join("pre-commit"), theirs).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        hooks.join("pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let r = tl(
        &env,
        &main,
        "alice",
        &["init", "--git-hook", "--dry-run", "--client", "claude"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "init_git_hook_dry_run", r);
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
        theirs,
        "a dry run changes nothing"
    );
    let r = tl(&env, &main, "alice", &["init", "--git-hook", "--json"]);
    let j = r.json();
    let row = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().ends_with("hooks/pre-commit"))
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(row["action"], "updated", "{j}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit.before-tasklock")).unwrap(),
        theirs
    );
    // Again: nothing changes.
    let j = tl(&env, &main, "alice", &["init", "--git-hook", "--json"]).json();
    let row = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().ends_with("hooks/pre-commit"))
        .unwrap();
    assert_eq!(row["action"], "unchanged", "{j}");

    // A commit runs both: the guard refuses Bob's file of Alice's, and their hook still
    // runs for the commit that passes.
    tl(&env, &main, "alice", &["checkout", "--path", "src/a"]);
    std::fs::write(main.join("src/a/x.rs"), "bob\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);
    let r = commit(&env, &main, "bob", "bob");
    assert_ne!(r.code, 0, "{}", r.text());
    let marker = env.tmp.path().join("their-hook-ran");
    assert!(!marker.exists(), "the guard refused first");
    git(&main, &["restore", "--staged", "src/a/x.rs"]);
    std::fs::write(main.join("src/b/y.rs"), "bob's\n").unwrap();
    git(&main, &["add", "src/b/y.rs"]);
    let r = commit(&env, &main, "bob", "bob's");
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(marker.exists(), "their hook ran after the guard");

    // husky: core.hooksPath is .husky/_, the project's hook is .husky/pre-commit.
    let (env, main, _second) = repo();
    std::fs::create_dir_all(main.join(".husky/_")).unwrap();
    std::fs::write(main.join(".husky/pre-commit"), "npm test\n").unwrap();
    git(&main, &["config", "core.hooksPath", ".husky/_"]);
    let j = tl(&env, &main, "alice", &["init", "--git-hook", "--json"]).json();
    let row = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().ends_with(".husky/pre-commit"))
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(row["action"], "updated", "{j}");
    let text = std::fs::read_to_string(main.join(".husky/pre-commit")).unwrap();
    assert!(text.starts_with("npm test\n"), "{text}");
    assert!(text.contains("tasklock guard-commit"), "{text}");
    assert!(!main.join(".git/hooks/pre-commit").exists());
    let j = tl(&env, &main, "alice", &["init", "--git-hook", "--json"]).json();
    assert!(
        j["changes"].as_array().unwrap().iter().any(|c| c["path"]
            .as_str()
            .unwrap()
            .ends_with(".husky/pre-commit")
            && c["action"] == "unchanged"),
        "{j}"
    );
    // The husky line runs the guard when sh runs the file, as husky does.
    tl(&env, &main, "alice", &["checkout", "--path", "src/a"]);
    std::fs::write(main.join("src/a/x.rs"), "bob\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);
    // `npm test` may not exist here: run only our line.
    let ours: String = text
        .lines()
        .filter(|l| l.contains("tasklock"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(main.join(".husky/only-ours"), format!("{ours}\n")).unwrap();
    let r = exec({
        let mut c = Command::new("sh");
        use_store(&mut c, &locks_of(&env, &main));
        c.args(["-e", ".husky/only-ours"])
            .current_dir(&main)
            .env("PATH", path_with_tasklock())
            .env("TASKLOCK_AGENT", "bob")
            .env("TASKLOCK_NOW", &env.now);
        c
    });
    assert_ne!(r.code, 0, "{}", r.text());
    assert!(r.text().contains("held by alice"), "{}", r.text());
}

#[test]
fn init_offers_the_guard_in_a_git_repository() {
    let (env, main, _second) = repo();
    let r = tl(&env, &main, "alice", &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stdout.contains("init --git-hook"), "{}", r.text());
    let j: Value = tl(&env, &main, "alice", &["init", "--json"]).json();
    assert_eq!(j["git_hook_offered"], true);
    assert!(!main.join(".git/hooks/pre-commit").exists());
}

#[test]
fn a_rename_out_of_another_agents_tree_and_a_person_without_an_agent_id_are_refused() {
    let (env, main, second) = repo();
    tl(&env, &main, "alice", &["init", "--git-hook"]);
    tl(&env, &main, "alice", &["checkout", "--path", "src/a"]);
    // Moving Alice's file out of her tree changes her tree: the old name counts.
    git(&second, &["mv", "src/a/x.rs", "src/b/moved.rs"]);
    let j = tl(&env, &second, "bob", &["guard-commit", "--json"]).json();
    assert_eq!(j["staged"], 2, "{j}");
    assert_eq!(j["files"][0]["file"], "src/a/x.rs", "{j}");
    assert_eq!(j["files"][0]["verdict"], "held");
    let r = commit(&env, &second, "bob", "move");
    assert_ne!(r.code, 0, "{}", r.text());

    // A person with no agent identity (git runs hooks without a terminal) is refused too.
    git(&second, &["reset", "-q", "--hard"]);
    std::fs::write(second.join("src/a/x.rs"), "a person\n").unwrap();
    git(&second, &["add", "src/a/x.rs"]);
    let r = commit_as(&env, &second, None, "person");
    assert_ne!(r.code, 0, "{}", r.text());
    assert!(r.text().contains("held by alice"), "{}", r.text());
}

/// In a repository that ignores case, a staged file is judged however its name is cased.
#[test]
fn the_guard_folds_case_where_the_repository_ignores_case() {
    let (env, main, _) = repo();
    git(&main, &["config", "core.ignorecase", "true"]);
    let r = tl(&env, &main, "alice", &["init", "--git-hook"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = tl(&env, &main, "alice", &["checkout", "--path", "SRC/A/X.RS"]);
    assert_eq!(r.code, 0, "{}", r.text());
    std::fs::write(main.join("src/a/x.rs"), "bob was here\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);
    let guard = tl(&env, &main, "bob", &["guard-commit", "--json"]);
    assert_eq!(guard.code, 2, "{}", guard.text());
    assert!(guard.stdout.contains("alice"), "{}", guard.text());
}

/// Edits stamped under one's own checkout whose process is gone: the checkout has ended
/// (the guard ends it, as `agent_death`, as every command ends its caller's such
/// checkout), so the commit is refused as made under a lost checkout (exit 4).
#[test]
fn a_commit_of_edits_under_ones_own_checkout_whose_process_is_gone_is_refused() {
    let (env, main, _second) = repo();
    tl(&env, &main, "alice", &["init", "--git-hook"]);
    let mut process = AgentProcess::start();
    let r = tl(
        &env,
        &main,
        "alice",
        &["checkout", "--path", "src/a", "--pid", &process.pid()],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    edit_hook(&env, &main, "alice", &main.join("src/a/x.rs"));
    std::fs::write(main.join("src/a/x.rs"), "alice, then killed\n").unwrap();
    git(&main, &["add", "src/a/x.rs"]);
    process.kill();

    let before = head(&main);
    let r = commit(&env, &main, "alice", "after the kill");
    assert_ne!(r.code, 0, "{}", r.text());
    assert_eq!(head(&main), before);
    let r = tl(&env, &main, "alice", &["guard-commit", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    let j = r.json();
    assert_eq!(j["files"][0]["verdict"], "lost", "{j}");
    assert_eq!(j["files"][0]["key"], "path:src/a", "{j}");
    assert_eq!(j["files"][0]["ended"], "agent_death", "{j}");
    let ended: Vec<Value> = audit(&locks(&main))
        .into_iter()
        .filter(|v| v["event"] == "auto_release")
        .map(|v| v["reason"].clone())
        .collect();
    assert_eq!(ended, ["agent_death"]);
}

//! Finding the lock directory: never one planted by another user, never one created where
//! another agent would not find it, and hooks behind wrappers still register Claude Code.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_tasklock");

/// The binary with no TASKLOCK_*/CLAUDE_* variables, the clock pinned, run in `cwd`.
fn cmd_in(cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    scrub(&mut cmd);
    cmd.env("TASKLOCK_NOW", T0)
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

fn scrub(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let s = k.to_string_lossy();
        if s.starts_with("TASKLOCK_") || s.starts_with("CLAUDE_") {
            cmd.env_remove(&k);
        }
    }
}

fn run_in(cwd: &Path, args: &[&str]) -> Run {
    exec(cmd_in(cwd, args))
}

/// A temp dir with no `.locks` above it (one there would rightly win discovery).
fn clean_tmp() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    if let Some(stray) = tmp
        .path()
        .ancestors()
        .skip(1)
        .find(|d| d.join(".locks").exists())
    {
        panic!(
            "remove {}/.locks: it is above the test's temp dir and wins discovery",
            stray.display()
        );
    }
    tmp
}

/// Every path under `root` named `.locks`.
fn lock_dirs_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_name() == ".locks" {
                found.push(p.clone());
            }
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            }
        }
    }
    found
}

/// `n` agents check out `key` at the same moment, alternately from each of `cwds`.
fn race(cwds: &[PathBuf], n: usize, key: &str) -> Vec<Run> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let cwd = cwds[i % cwds.len()].clone();
            let barrier = barrier.clone();
            let key = key.to_string();
            std::thread::spawn(move || {
                let cmd = cmd_in(&cwd, &["checkout", &key, "--agent", &format!("agent-{i}")]);
                barrier.wait();
                exec(cmd)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

// ---------------------------------------------------------------------------------------
// Outside a git repository: no lock directory is ever created silently

#[test]
fn first_uses_outside_git_refuse_until_init_then_one_winner() {
    let tmp = clean_tmp();
    let p = tmp.path().join("p");
    let sub = p.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let cwds = [p.clone(), sub.clone()];

    // 20 simultaneous first uses from p/ and p/sub/: all refused, nothing created.
    let runs = race(&cwds, 20, "task-1");
    for r in &runs {
        assert_eq!(r.code, 64, "{}", r.text());
        assert!(r.stdout.is_empty(), "{}", r.text());
        assert!(
            r.stderr.contains("no lock directory") && r.stderr.contains("tasklock init"),
            "{}",
            r.text()
        );
    }
    assert_eq!(lock_dirs_under(tmp.path()), Vec::<PathBuf>::new());

    // JSON callers get kind `lock_dir`, exit 64.
    let r = run_in(&sub, &["checkout", "task-1", "--agent", "a", "--json"]);
    assert_eq!(r.code, 64, "{}", r.text());
    let err = &r.json()["error"];
    assert_eq!(err["kind"], "lock_dir");
    assert_eq!(err["exit_code"], 64);
    assert!(
        err["hint"].as_str().unwrap().contains("tasklock init"),
        "{err}"
    );

    // The other commands that would create it refuse too.
    for args in [
        &["heartbeat", "--agent", "a"][..],
        &["freeze", "task-1", "--for", "1h", "--agent", "a"],
        &["run", "task-1", "--agent", "a", "--", "true"],
        &["checkout", "--any", "x", "y", "--agent", "a"],
    ] {
        let r = run_in(&sub, args);
        assert_eq!(r.code, 64, "{args:?}: {}", r.text());
    }
    // Read-only commands answer as for an empty lock directory, and create nothing.
    let r = run_in(&sub, &["list"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stdout.contains("No active checkouts."), "{}", r.text());
    assert_eq!(run_in(&sub, &["status", "task-1"]).code, 0);
    assert_eq!(run_in(&sub, &["release", "task-1", "--agent", "a"]).code, 3);
    assert_eq!(run_in(&sub, &["agents"]).code, 0);
    assert_eq!(lock_dirs_under(tmp.path()), Vec::<PathBuf>::new());

    // `doctor` says why and what to do.
    let r = run_in(&sub, &["doctor", "--json", "--agent", "a"]);
    assert_eq!(r.code, 1, "{}", r.text());
    let j = r.json();
    let check = &j["checks"][0];
    assert_eq!(check["name"], "lock directory");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["fix"].as_str().unwrap().contains("tasklock init"),
        "{check}"
    );
    assert_eq!(lock_dirs_under(tmp.path()), Vec::<PathBuf>::new());

    // `tasklock init` at the project root creates p/.locks; the same race has one winner.
    let r = run_in(&p, &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(lock_dirs_under(tmp.path()), [p.join(".locks")]);
    let runs = race(&cwds, 20, "task-1");
    let winners = runs.iter().filter(|r| r.code == 0).count();
    let held = runs.iter().filter(|r| r.code == 2).count();
    assert_eq!(
        (winners, held),
        (1, 19),
        "{:?}",
        runs.iter().map(Run::text).collect::<Vec<_>>()
    );
    assert_eq!(lock_dirs_under(tmp.path()), [p.join(".locks")]);
}

#[test]
fn hooks_outside_git_without_a_lock_directory_create_nothing() {
    let tmp = clean_tmp();
    let input = serde_json::json!({"session_id": "s1", "cwd": tmp.path()}).to_string();
    for event in [
        "session-start",
        "user-prompt-submit",
        "post-tool-use",
        "session-end",
    ] {
        let mut cmd = cmd_in(tmp.path(), &["hook", event]);
        let r = Run::with_stdin(&mut cmd, &input);
        assert_eq!(r.code, 0, "{event}: {}", r.text());
        assert!(r.stdout.is_empty(), "{event}: {}", r.text());
        assert!(r.stderr.contains("tasklock init"), "{event}: {}", r.text());
    }
    assert_eq!(lock_dirs_under(tmp.path()), Vec::<PathBuf>::new());
}

#[test]
fn inside_git_the_first_use_still_creates_the_root_lock_directory() {
    let tmp = clean_tmp();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("a/b")).unwrap();
    let r = run_in(&repo.join("a/b"), &["checkout", "k", "--agent", "x"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(lock_dirs_under(tmp.path()), [repo.join(".locks")]);
}

// ---------------------------------------------------------------------------------------
// Lock directories owned by another user

/// `tasklock ARGS` in `cwd`, run as `user`.
fn cmd_as(user: &TestUser, cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = user.command(BIN);
    scrub(&mut cmd);
    cmd.args(args)
        .env("TASKLOCK_NOW", T0)
        .env("HOME", "/nonexistent")
        .current_dir(cwd)
        .stdin(Stdio::null());
    cmd
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_lock_directory_planted_by_another_user_is_refused_not_used() {
    let Some(user) = TestUser::create_or_skip("tasklock-t", false) else {
        return;
    };
    let tmp = clean_tmp();
    let x = tmp.path().join("x");
    let repo = x.join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    // The other user plants x/.locks, above a repository that has none of its own.
    let planted = x.join(".locks");
    std::fs::create_dir(&planted).unwrap();
    chown(&planted, user.uid, user.gid);

    let r = run_in(&repo.join("src"), &["checkout", "task-1", "--agent", "a"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stdout.is_empty(), "{}", r.text());
    for needle in [
        planted.display().to_string(),
        user.name.clone(),
        "TASKLOCK_SHARED_DIRS".into(),
        "tasklock init".into(),
    ] {
        assert!(
            r.stderr.contains(&needle),
            "{needle} not named: {}",
            r.text()
        );
    }
    // Neither the planted directory nor the repository's root was used.
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);
    assert!(!repo.join(".locks").exists());
    // Reading commands refuse it too: its records could say anything.
    let r = run_in(&repo, &["list", "--json"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "lock_dir");
    // So do the hooks (on stderr, exit 0), without writing to it.
    let input = serde_json::json!({"session_id": "s1", "cwd": repo}).to_string();
    let r = Run::with_stdin(&mut cmd_in(&repo, &["hook", "session-start"]), &input);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stderr.contains("refusing the lock directory"),
        "{}",
        r.text()
    );
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);

    // doctor explains the finding and touches nothing there.
    let r = run_in(&repo, &["doctor", "--json", "--agent", "a"]);
    assert_eq!(r.code, 1, "{}", r.text());
    let j = r.json();
    let owner = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "owner")
        .unwrap_or_else(|| panic!("no owner check: {j}"))
        .clone();
    assert_eq!(owner["status"], "fail", "{owner}");
    assert!(
        owner["detail"].as_str().unwrap().contains(&user.name),
        "{owner}"
    );
    assert!(
        owner["fix"]
            .as_str()
            .unwrap()
            .contains("TASKLOCK_SHARED_DIRS"),
        "{owner}"
    );
    assert!(
        !j["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "writable")
    );
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);

    // The opt-in: TASKLOCK_SHARED_DIRS names it (or the directory holding it).
    for shared in [
        planted.display().to_string(),
        format!("/nowhere:{}", x.display()),
    ] {
        let mut cmd = cmd_in(&repo, &["status", "task-1"]);
        cmd.env("TASKLOCK_SHARED_DIRS", &shared);
        let r = exec(cmd);
        assert_eq!(r.code, 0, "{shared}: {}", r.text());
    }
    let mut cmd = cmd_in(&repo, &["checkout", "task-1", "--agent", "a"]);
    cmd.env("TASKLOCK_SHARED_DIRS", "*");
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(planted.join("keys").is_dir());
    // An unrelated entry is no opt-in.
    let mut cmd = cmd_in(&repo, &["status", "task-1"]);
    cmd.env("TASKLOCK_SHARED_DIRS", repo.display().to_string());
    assert_eq!(exec(cmd).code, 64);

    // --dir and TASKLOCK_DIR are an explicit choice: used; doctor warns.
    let r = run_in(
        &repo,
        &["--dir", planted.to_str().unwrap(), "status", "task-1"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let mut cmd = cmd_in(&repo, &["doctor", "--json", "--agent", "a"]);
    cmd.env("TASKLOCK_DIR", &planted);
    let j = exec(cmd).json();
    let owner = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "owner")
        .unwrap_or_else(|| panic!("no owner check: {j}"))
        .clone();
    assert_eq!(owner["status"], "warn", "{owner}");
    assert!(
        owner["detail"].as_str().unwrap().contains("TASKLOCK_DIR"),
        "{owner}"
    );

    // The way out: `tasklock init` at the repository makes a lock directory of its own,
    // which is nearer and wins from then on.
    let r = run_in(&repo.join("src"), &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(repo.join(".locks/.gitignore").is_file());
    let r = run_in(&repo.join("src"), &["checkout", "task-1", "--agent", "b"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(repo.join(".locks/keys/task-1").exists());
}

#[test]
fn a_foreign_lock_directory_nearer_than_the_project_root_stops_init_too() {
    let Some(user) = TestUser::create_or_skip("tasklock-t", false) else {
        return;
    };
    let tmp = clean_tmp();
    let repo = tmp.path().join("repo");
    let sub = repo.join("sub");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(sub.join("deep")).unwrap();
    let planted = sub.join(".locks");
    std::fs::create_dir(&planted).unwrap();
    chown(&planted, user.uid, user.gid);
    // A lock directory at the root would not be found first: init refuses.
    let r = run_in(&sub.join("deep"), &["init"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(
        r.stderr.contains("refusing the lock directory"),
        "{}",
        r.text()
    );
    assert!(!repo.join(".locks").exists());
    assert!(!repo.join(".claude").exists(), "init changed nothing");

    // A symbolic link of root's to a foreign directory is refused as well.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(other.join(".git")).unwrap();
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    chown(&target, user.uid, user.gid);
    std::os::unix::fs::symlink(&target, other.join(".locks")).unwrap();
    let r = run_in(&other, &["checkout", "k", "--agent", "a"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn an_unprivileged_user_accepts_root_and_own_lock_directories_but_not_others() {
    let Some(user) = TestUser::create_or_skip("tasklock-t", false) else {
        return;
    };
    let tmp = clean_tmp();
    chmod(tmp.path(), 0o755);
    // Root's shared lock directory, writable by all: accepted.
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(shared.join("proj")).unwrap();
    std::fs::create_dir(shared.join(".locks")).unwrap();
    chmod(&shared.join(".locks"), 0o1777);
    let r = exec(cmd_as(
        &user,
        &shared.join("proj"),
        &["checkout", "task-1", "--agent", "u"],
    ));
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(shared.join(".locks/keys/task-1").exists());

    // Its own lock directory: accepted.
    let mine = tmp.path().join("mine");
    std::fs::create_dir_all(mine.join(".locks")).unwrap();
    std::fs::create_dir_all(mine.join("proj")).unwrap();
    chown(&mine.join(".locks"), user.uid, user.gid);
    let r = exec(cmd_as(
        &user,
        &mine.join("proj"),
        &["checkout", "task-1", "--agent", "u"],
    ));
    assert_eq!(r.code, 0, "{}", r.text());

    // One that another (non-root) user owns: refused, for it as for root.
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir_all(theirs.join(".locks")).unwrap();
    std::fs::create_dir_all(theirs.join("proj")).unwrap();
    chmod(&theirs.join(".locks"), 0o777);
    chown(&theirs.join(".locks"), 1, 1);
    let r = exec(cmd_as(
        &user,
        &theirs.join("proj"),
        &["checkout", "task-1", "--agent", "u"],
    ));
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("TASKLOCK_SHARED_DIRS"), "{}", r.text());
    assert_eq!(std::fs::read_dir(theirs.join(".locks")).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------
// Hooks behind wrappers

#[test]
fn a_hook_behind_a_wrapper_registers_the_process_that_ran_the_wrapper() {
    let e = Env::new();
    let me = std::process::id();
    for (i, wrapper) in [
        "timeout 10",
        "nice -n 1",
        "env FOO=1",
        "timeout 10 nice timeout 9",
        "stdbuf -o0 timeout 10",
        "nohup",
    ]
    .iter()
    .enumerate()
    {
        let session = format!("s{i}");
        let input = serde_json::json!({"session_id": session, "cwd": e.tmp.path()}).to_string();
        // `; true` keeps the shell from exec-ing the wrapper: sh stays in between.
        let mut cmd = Command::new("sh");
        scrub(&mut cmd);
        cmd.arg("-c")
            .arg(format!(
                r#"{wrapper} "$0" --dir "$1" hook session-start; true"#
            ))
            .arg(BIN)
            .arg(e.dir())
            .env("TASKLOCK_NOW", T0)
            .current_dir(e.tmp.path());
        let r = Run::with_stdin(&mut cmd, &input);
        assert_eq!(r.code, 0, "{wrapper}: {}", r.text());
        assert!(r.stderr.is_empty(), "{wrapper}: {}", r.text());
        let path = e.dir().join("agents").join(&session);
        let entry: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            entry["pid"], me,
            "{wrapper}: the shell and the wrapper are looked through: {entry}"
        );
    }
}

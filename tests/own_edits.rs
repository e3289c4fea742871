//! Commits carry only the committer's own edits: several sessions share one working
//! tree, the edit hook records who edited each file last (PostToolUse after Edit, Write,
//! MultiEdit, NotebookEdit), the pre-commit guard refuses a commit of a file another live
//! agent edited last (naming it, with the command that unstages those files), and
//! `tasklock stage` stages exactly the caller's own edits. Through real `git commit`s
//! with the hook `tasklock init --git-hook` installs, and the hooks fed Claude Code's JSON.

#[macro_use]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

/// What the index holds that HEAD does not: the files a commit would carry.
fn staged(top: &Path) -> Vec<String> {
    git(top, &["diff", "--cached", "--name-only"])
        .lines()
        .map(str::to_string)
        .collect()
}

fn path_with_tasklock() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_tasklock"));
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A repository at the temp dir with `src/a.rs` and `src/b.rs` committed, its lock
/// directory and the pre-commit guard set up by `tasklock init --git-hook`.
fn repo() -> (Env, PathBuf) {
    let env = Env::new();
    let top = env.tmp.path().to_path_buf();
    std::fs::create_dir_all(top.join("src")).unwrap();
    git(&top, &["init", "-q", "-b", "main"]);
    std::fs::write(top.join("src/a.rs"), "a\n").unwrap();
    std::fs::write(top.join("src/b.rs"), "b\n").unwrap();
    // What `init` writes is not part of these commits.
    std::fs::write(
        top.join(".gitignore"),
        ".locks/\n.claude/\n.codex/\n.gemini/\n.opencode/\nCLAUDE.md\nAGENTS.md\n",
    )
    .unwrap();
    git(&top, &["add", "-A"]);
    git(&top, &["commit", "-q", "-m", "start"]);
    let r = tl(&env, &top, Some("setup"), &["init", "--git-hook"]);
    assert_eq!(r.code, 0, "{}", r.text());
    (env, top)
}

/// `tasklock ARGS` at the top of the repository as `agent` (None: no identity).
fn tl(env: &Env, top: &Path, agent: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &top.join(".locks"));
    cmd.current_dir(top).args(args);
    if let Some(a) = agent {
        cmd.env("TASKLOCK_AGENT", a);
    }
    exec(cmd)
}

/// The session's Claude Code process (`CLAUDE_PID`) and its secret, as its hooks have
/// them; none: the hooks' parent stands for the process.
#[derive(Clone, Copy, Default)]
struct Session<'a> {
    pid: Option<u32>,
    secret: Option<&'a str>,
}

/// `tasklock hook EVENT` fed `payload` as Claude Code would, from the session's
/// directory.
fn hook(env: &Env, top: &Path, event: &str, payload: &Value, session: Session) -> Run {
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &top.join(".locks"));
    cmd.args(["hook", event])
        .current_dir(top)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(p) = session.pid {
        cmd.env("CLAUDE_PID", p.to_string());
    }
    if let Some(s) = session.secret {
        cmd.env("TASKLOCK_SECRET", s);
    }
    // A name of its own, so the snapshots do not carry the temp dir's.
    if let Some(s) = payload["session_id"].as_str() {
        cmd.env("TASKLOCK_AGENT_NAME", format!("session {s}"));
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let r = Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stderr.is_empty(),
        "the hook reported a failure: {}",
        r.text()
    );
    r
}

/// One edit by `session` (a subagent of it with `sub`), as Claude Code runs it: the edit
/// hook (PreToolUse) allows it, the tool writes the file, PostToolUse follows.
fn edit_as(env: &Env, top: &Path, session: &str, sub: Option<&str>, file: &str, text: &str) {
    edit_in(env, top, session, sub, file, text, Session::default())
}

fn edit_in(
    env: &Env,
    top: &Path,
    session: &str,
    sub: Option<&str>,
    file: &str,
    text: &str,
    how: Session,
) {
    let path = top.join(file);
    let mut payload = json!({
        "session_id": session, "cwd": top, "hook_event_name": "PreToolUse",
        "tool_name": "Write", "tool_input": {"file_path": path, "content": text},
    });
    if let Some(s) = sub {
        payload["agent_id"] = json!(s);
        payload["agent_type"] = json!("general-purpose");
    }
    let pre = hook(env, top, "pre-tool-use", &payload, how);
    assert!(pre.stdout.is_empty(), "allowed: {}", pre.text());
    std::fs::write(&path, text).unwrap();
    payload["hook_event_name"] = json!("PostToolUse");
    payload["tool_response"] = json!({"type": "update", "filePath": path});
    hook(env, top, "post-tool-use", &payload, how);
}

fn session_event(env: &Env, top: &Path, session: &str, event: &str) {
    let name = match event {
        "session-start" => "SessionStart",
        _ => "SessionEnd",
    };
    let payload = json!({"session_id": session, "cwd": top, "hook_event_name": name});
    hook(env, top, event, &payload, Session::default());
}

/// `git commit` as the Claude Code session `session` runs it from its Bash tool (with
/// `CLAUDE_CODE_SESSION_ID` set), or as a person with no agent identity.
fn commit(env: &Env, top: &Path, session: Option<&str>, msg: &str) -> Run {
    let mut cmd = Command::new("git");
    use_store(&mut cmd, &top.join(".locks"));
    cmd.args(["commit", "-q", "-m", msg])
        .current_dir(top)
        .env("PATH", path_with_tasklock())
        .env("TASKLOCK_NOW", &env.now)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .stdin(Stdio::null());
    if let Some(s) = session {
        cmd.env("CLAUDE_CODE_SESSION_ID", s);
    }
    exec(cmd)
}

fn head(top: &Path) -> String {
    git(top, &["rev-parse", "HEAD"])
}

/// The edit records of the main worktree, one file per edited file.
fn records(top: &Path) -> Vec<Value> {
    let dir = top.join(".git/tasklock/edits");
    let mut out: Vec<Value> = std::fs::read_dir(&dir)
        .map(|it| {
            it.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|v: &Value| v["file"].as_str().unwrap().to_string());
    out
}

#[test]
fn a_commit_carries_only_the_committers_edits() {
    let (env, top) = repo();
    session_event(&env, &top, "sess-a", "session-start");
    session_event(&env, &top, "sess-b", "session-start");
    edit_as(&env, &top, "sess-a", None, "src/a.rs", "a, by A\n");
    edit_as(&env, &top, "sess-b", None, "src/b.rs", "b, by B\n");
    // Many edits of one file keep one record, the last.
    for i in 0..5 {
        edit_as(
            &env,
            &top,
            "sess-a",
            None,
            "src/a.rs",
            &format!("a, by A, {i}\n"),
        );
    }
    let recs = records(&top);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0]["file"], "src/a.rs");
    assert_eq!(recs[0]["agent"], "sess-a");
    assert_eq!(recs[1]["agent"], "sess-b");

    // A stages everything and commits: refused, naming B and how to unstage B's file.
    git(&top, &["add", "-A"]);
    let before = head(&top);
    let r = commit(&env, &top, Some("sess-a"), "everything");
    assert_ne!(r.code, 0, "{}", r.text());
    assert!(r.stderr.contains("`sess-b`"), "{}", r.text());
    assert!(
        r.stderr.contains("git restore --staged -- src/b.rs"),
        "{}",
        r.text()
    );
    assert_eq!(head(&top), before, "nothing was committed");
    let mut guard_cmd = base_cmd(&env.now);
    use_store(&mut guard_cmd, &top.join(".locks"));
    guard_cmd
        .current_dir(&top)
        .env("CLAUDE_CODE_SESSION_ID", "sess-a")
        .arg("guard-commit");
    let guard = exec(guard_cmd);
    assert_eq!(guard.code, 2, "{}", guard.text());
    snap!(env, "edited_by_another", guard);
    let j = tl(&env, &top, Some("sess-a"), &["guard-commit", "--json"]).json();
    assert_eq!(j["agent"], "sess-a");
    assert_eq!(j["staged"], 2);
    let files = j["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{j}");
    assert_eq!(files[0]["file"], "src/b.rs");
    assert_eq!(files[0]["verdict"], "edited");
    assert_eq!(files[0]["key"], Value::Null);
    assert_eq!(files[0]["edit"]["agent"], "sess-b");
    assert_eq!(files[0]["edit"]["state"], "alive");
    assert_eq!(files[0]["edit"]["edited_at"], T0);
    assert_eq!(j["unstage"], "git restore --staged -- src/b.rs");
    assert_eq!(j["edited_by_agents"], json!([]));

    // The command it gives does what it says.
    let unstage = j["unstage"].as_str().unwrap();
    let ok = Command::new("sh")
        .args(["-c", unstage])
        .current_dir(&top)
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(staged(&top), ["src/a.rs"]);
    git(&top, &["reset", "-q"]);

    // `tasklock stage` as A: only A's file. --dry-run lists it and stages nothing.
    let dry = tl(&env, &top, Some("sess-a"), &["stage", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.text());
    snap!(env, "stage_dry_run", dry);
    assert!(staged(&top).is_empty());
    let j = tl(
        &env,
        &top,
        Some("sess-a"),
        &["stage", "--dry-run", "--json"],
    )
    .json();
    assert_eq!(j["command"], "stage");
    assert_eq!(j["dry_run"], true);
    assert_eq!(j["staged"], 0);
    assert_eq!(j["files"][0]["file"], "src/a.rs");
    assert!(staged(&top).is_empty());
    let r = tl(&env, &top, Some("sess-a"), &["stage"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "stage", r);
    assert_eq!(staged(&top), ["src/a.rs"]);
    let r = commit(&env, &top, Some("sess-a"), "A's work");
    assert_eq!(r.code, 0, "{}", r.text());
    assert_ne!(head(&top), before);
    // Nothing of A's is left to stage.
    let r = tl(&env, &top, Some("sess-a"), &["stage"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "stage_nothing", r);

    // Once B's session ends, its edits are nobody's to protect: A may commit them.
    git(&top, &["add", "src/b.rs"]);
    assert_ne!(commit(&env, &top, Some("sess-a"), "B's, too early").code, 0);
    session_event(&env, &top, "sess-b", "session-end");
    assert!(
        records(&top).iter().all(|r| r["agent"] != "sess-b"),
        "forgotten at the session's end: {:?}",
        records(&top)
    );
    let r = commit(&env, &top, Some("sess-a"), "B's, after B ended");
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(staged(&top).is_empty());
}

#[test]
fn a_dead_editor_blocks_nothing_and_a_person_is_told() {
    let (env, top) = repo();
    // B's Claude Code process, which dies later; its session is bound to the secret its
    // SessionStart hook hands it.
    let mut b_proc = Command::new("sleep").arg("600").spawn().unwrap();
    let env_file = top.join(".claude-env-b");
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &top.join(".locks"));
    cmd.args(["hook", "session-start"])
        .current_dir(&top)
        .env("CLAUDE_PID", b_proc.id().to_string())
        .env("CLAUDE_ENV_FILE", &env_file)
        .stdin(Stdio::piped());
    let mut child = cmd.stdout(Stdio::null()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            json!({"session_id": "sess-b", "cwd": top, "hook_event_name": "SessionStart"})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert!(child.wait().unwrap().success());
    let exports = std::fs::read_to_string(&env_file).unwrap();
    let secret = exports
        .lines()
        .find_map(|l| l.strip_prefix("export TASKLOCK_SECRET="))
        .expect("the session's secret")
        .trim_matches('\'')
        .to_string();
    std::fs::remove_file(&env_file).unwrap();
    let b = Session {
        pid: Some(b_proc.id()),
        secret: Some(&secret),
    };
    edit_in(&env, &top, "sess-b", None, "src/b.rs", "B\n", b);

    // A person at the terminal (no agent identity) is not refused, but told whose edits
    // the commit carries.
    git(&top, &["add", "src/b.rs"]);
    let person = tl(&env, &top, None, &["guard-commit"]);
    assert_eq!(person.code, 0, "{}", person.text());
    snap!(env, "person", person);
    let j = tl(&env, &top, None, &["guard-commit", "--json"]).json();
    assert_eq!(j["agent"], Value::Null);
    assert_eq!(j["files"], json!([]));
    assert_eq!(j["edited_by_agents"][0]["file"], "src/b.rs");
    assert_eq!(j["edited_by_agents"][0]["edit"]["agent"], "sess-b");
    assert_eq!(j["unstage"], Value::Null);

    // Agent A may not commit it while B lives...
    let before = head(&top);
    let r = commit(&env, &top, Some("sess-a"), "B's work");
    assert_ne!(r.code, 0, "{}", r.text());
    assert_eq!(head(&top), before);
    // ...and may once B's process is gone; the dead editor's record is then forgotten.
    b_proc.kill().unwrap();
    b_proc.wait().unwrap();
    let r = commit(&env, &top, Some("sess-a"), "B's work, B dead");
    assert_eq!(r.code, 0, "{}", r.text());
    assert_ne!(head(&top), before);
    assert!(records(&top).is_empty(), "{:?}", records(&top));
}

#[test]
fn stage_takes_the_last_editors_files_subagents_included() {
    let (env, top) = repo();
    // The session and its subagent edit; B edits a file A edited before (B's now); A
    // adds a file with awkward characters and deletes one.
    edit_as(&env, &top, "sess-a", None, "src/a.rs", "A\n");
    edit_as(
        &env,
        &top,
        "sess-a",
        Some("helper"),
        "src/new.rs",
        "by A's helper\n",
    );
    edit_as(&env, &top, "sess-a", None, "src/b.rs", "A first\n");
    edit_as(&env, &top, "sess-b", None, "src/b.rs", "then B\n");
    edit_as(&env, &top, "sess-a", None, "src/it's *odd*.rs", "odd\n");
    // A deletes a file it wrote (Write, then removed through a tool that edits it away).
    edit_as(&env, &top, "sess-a", None, "src/gone.rs", "soon gone\n");
    git(&top, &["add", "src/gone.rs"]);
    git(&top, &["commit", "-q", "--no-verify", "-m", "gone.rs"]);
    edit_as(&env, &top, "sess-a", None, "src/gone.rs", "");
    std::fs::remove_file(top.join("src/gone.rs")).unwrap();
    // A file A edited and changed back is not staged (it does not differ from the index).
    edit_as(&env, &top, "sess-a", None, "src/same.rs", "x\n");
    git(&top, &["add", "src/same.rs"]);
    git(&top, &["commit", "-q", "--no-verify", "-m", "same.rs"]);

    let j = tl(&env, &top, Some("sess-a"), &["stage", "--json"]).json();
    let got: Vec<(String, String, String)> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                f["change"].as_str().unwrap().to_string(),
                f["agent"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("src/a.rs", "modified", "sess-a"),
        ("src/gone.rs", "deleted", "sess-a"),
        ("src/it's *odd*.rs", "added", "sess-a"),
        ("src/new.rs", "added", "sess-a/helper"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want, "{j}");
    assert_eq!(j["staged"], 4);
    let mut index = staged(&top);
    index.sort();
    assert_eq!(
        index,
        ["src/a.rs", "src/gone.rs", "src/it's *odd*.rs", "src/new.rs"]
    );
    // The commit passes: the subagent's edits are the session's.
    let r = commit(&env, &top, Some("sess-a"), "A's");
    assert_eq!(r.code, 0, "{}", r.text());

    // A file name with glob characters is unstaged literally.
    edit_as(&env, &top, "sess-b", None, "src/[x].rs", "B\n");
    edit_as(&env, &top, "sess-b", None, "src/x.rs", "B\n");
    git(&top, &["add", "-A"]);
    let j = tl(&env, &top, Some("sess-a"), &["guard-commit", "--json"]).json();
    let unstage = j["unstage"].as_str().unwrap().to_string();
    assert_eq!(
        unstage, "git restore --staged -- ':(literal)src/[x].rs' src/b.rs src/x.rs",
        "{j}"
    );
    let ok = Command::new("sh")
        .args(["-c", &unstage])
        .current_dir(&top)
        .status()
        .unwrap();
    assert!(ok.success());
    assert!(staged(&top).is_empty(), "{:?}", staged(&top));

    // Without an identity there is nobody whose edits to stage: a usage error.
    let r = tl(&env, &top, None, &["stage"]);
    assert_eq!(r.code, 64, "{}", r.text());
}

/// Edits through a link from outside the repository, and of files whose names hold a
/// tab, a newline or U+202E, are recorded as the files they change: another agent's
/// commit of them is refused, and their editor's `stage` takes them.
#[test]
fn edits_through_links_and_of_odd_names_are_recorded() {
    let (env, top) = repo();
    session_event(&env, &top, "sess-a", "session-start");
    session_event(&env, &top, "sess-b", "session-start");
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(top.join("src"), elsewhere.path().join("alias")).unwrap();
    let via = elsewhere.path().join("alias/b.rs");
    edit_as(
        &env,
        &top,
        "sess-b",
        None,
        via.to_str().unwrap(),
        "b, by B\n",
    );
    let odd = ["src/tab\there.rs", "src/new\nline.rs", "src/\u{202e}txt.rs"];
    for f in odd {
        edit_as(&env, &top, "sess-b", None, f, "odd, by B\n");
    }
    let recs = records(&top);
    let mut want: Vec<&str> = odd.to_vec();
    want.push("src/b.rs");
    want.sort();
    assert_eq!(
        recs.iter()
            .map(|r| r["file"].as_str().unwrap())
            .collect::<Vec<_>>(),
        want
    );
    assert!(recs.iter().all(|r| r["agent"] == "sess-b"), "{recs:?}");

    // A stages everything and commits: refused, B's four files named.
    git(&top, &["add", "-A"]);
    let before = head(&top);
    let r = commit(&env, &top, Some("sess-a"), "everything");
    assert_ne!(r.code, 0, "{}", r.text());
    assert_eq!(head(&top), before, "nothing was committed");
    // In markdown the hidden characters are shown as code points, the table intact, and
    // the unstage command quotes them as `$'…'`.
    let guard = tl(&env, &top, Some("sess-a"), &["guard-commit"]);
    assert_eq!(guard.code, 2, "{}", guard.text());
    snap!(env, "odd_names", guard);
    let j = tl(&env, &top, Some("sess-a"), &["guard-commit", "--json"]).json();
    let mut refused: Vec<&str> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    refused.sort();
    assert_eq!(refused, want, "{j}");
    // B's `stage` takes them.
    git(&top, &["reset", "-q"]);
    let j = tl(&env, &top, Some("sess-b"), &["stage", "--json"]).json();
    assert_eq!(j["staged"], 4, "{j}");
}

/// `stage` finds the caller's edits however git spells their names: decomposed (NFD) on
/// disk while recorded in NFC, and in a repository with `core.ignorecase` (recorded in
/// lower case, named by git as they are cased on disk).
#[test]
fn stage_finds_own_edits_in_nfd_and_where_case_is_ignored() {
    let (env, top) = repo();
    let nfd = "src/cafe\u{301}.rs";
    edit_as(&env, &top, "sess-a", None, nfd, "x\n");
    git(&top, &["config", "core.ignorecase", "true"]);
    edit_as(&env, &top, "sess-a", None, "src/Mixed.RS", "y\n");
    let files: Vec<String> = records(&top)
        .iter()
        .map(|r| r["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, ["src/café.rs", "src/mixed.rs"]);
    let j = tl(&env, &top, Some("sess-a"), &["stage", "--json"]).json();
    let got: Vec<&str> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["src/Mixed.RS", nfd], "{j}");
    assert_eq!(j["staged"], 2, "{j}");
    let index = git(
        &top,
        &[
            "-c",
            "core.quotepath=false",
            "diff",
            "--cached",
            "--name-only",
        ],
    );
    let mut index: Vec<&str> = index.lines().collect();
    index.sort();
    assert_eq!(index, ["src/Mixed.RS", nfd]);
}

/// Run `cmd` with `stdin`, killed after `limit`: (the run, how long it took), or a
/// failure naming `what` when it did not end in time (the wait it makes is unbounded).
fn bounded(
    mut cmd: Command,
    stdin: &str,
    limit: std::time::Duration,
    what: &str,
) -> (Run, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still waited after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    (run, started.elapsed())
}

/// A process stopped while holding the edit records' lock hangs nothing: the edit hook
/// gives up after `guard_timeout` (from config.yaml here), still allows the edit, and
/// tells the user and the model that it was not recorded, naming the stopped holder;
/// `tasklock stage` gives up on its clean-up (TASKLOCK_GUARD_TIMEOUT here) and stages.
#[test]
fn a_stopped_holder_of_the_edit_lock_hangs_no_hook() {
    let (env, top) = repo();
    edit_as(&env, &top, "sess-a", None, "src/a.rs", "A\n");
    let lock = top.join(".git/tasklock/edits/.lock");
    let holder = Holder(
        Command::new("flock")
            .arg("-o")
            .arg(&lock)
            .args(["sleep", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("flock(1) from util-linux"),
    );
    let held = || {
        !Command::new("flock")
            .arg("-n")
            .arg(&lock)
            .arg("true")
            .status()
            .unwrap()
            .success()
    };
    let t = std::time::Instant::now();
    while !held() {
        assert!(t.elapsed().as_secs() < 10, "flock never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = holder.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(top.join(".locks/config.yaml"), "guard_timeout: 1s\n").unwrap();

    let path = top.join("src/b.rs");
    std::fs::write(&path, "B\n").unwrap();
    let payload = json!({
        "session_id": "sess-b", "cwd": top, "hook_event_name": "PostToolUse",
        "tool_name": "Write", "tool_input": {"file_path": path, "content": "B\n"},
    });
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &top.join(".locks"));
    cmd.args(["hook", "post-tool-use"]).current_dir(&top);
    let (r, took) = bounded(
        cmd,
        &payload.to_string(),
        std::time::Duration::from_secs(20),
        "the hook",
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(took < std::time::Duration::from_secs(4), "took {took:?}");
    assert!(
        r.stderr.contains("gave up after 1s")
            && r.stderr.contains(&format!("pid {pid}"))
            && r.stderr.contains("stopped"),
        "{}",
        r.text()
    );
    let v = r.json();
    let told = v["systemMessage"].as_str().unwrap_or_default();
    assert!(
        told.contains("not recorded") && told.contains("src/b.rs`"),
        "{v}"
    );
    assert_eq!(
        v["hookSpecificOutput"]["hookEventName"], "PostToolUse",
        "{v}"
    );
    assert!(
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .contains("git add -- FILE"),
        "{v}"
    );
    assert!(records(&top).iter().all(|r| r["file"] != "src/b.rs"));

    std::fs::write(top.join(".locks/config.yaml"), "").unwrap();
    let mut cmd = base_cmd(&env.now);
    use_store(&mut cmd, &top.join(".locks"));
    cmd.args(["stage", "--json"])
        .current_dir(&top)
        .env("TASKLOCK_AGENT", "sess-a")
        .env("TASKLOCK_GUARD_TIMEOUT", "1s");
    let (r, took) = bounded(cmd, "", std::time::Duration::from_secs(20), "stage");
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(took < std::time::Duration::from_secs(4), "took {took:?}");
    assert!(r.stderr.contains("gave up after 1s"), "{}", r.text());
    assert_eq!(r.json()["staged"], 1, "{}", r.text());
}

/// A child killed (and reaped) when the test ends, however it ends.
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

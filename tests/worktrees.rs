//! Worktrees tied to checkouts (`checkout --worktree`, `worktrees`, `doctor`), with real
//! git in temporary repositories: made only once the checkout is granted, recorded with
//! it, shown by `list` and `status`, removed by a release only when that loses nothing
//! (no change, every commit also on another branch or a remote), kept otherwise with the
//! reason; and kill -9 of `checkout --worktree` or of `release` at random points leaves
//! no half-made worktree recorded and loses no commit. Store agnostic: tests/pg.rs runs
//! it again on PostgreSQL.

#[macro_use]
mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

fn tl(e: &Env, top: &Path, agent: &str, args: &[&str]) -> Run {
    e.run_in(top, Some(agent), args)
}

fn ok(e: &Env, top: &Path, agent: &str, args: &[&str]) -> Run {
    let r = tl(e, top, agent, args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.text());
    r
}

/// A commit of a new file `name` in `dir`; its id.
fn commit(dir: &Path, name: &str) -> String {
    std::fs::write(dir.join(name), format!("{name}\n")).unwrap();
    git(dir, &["add", name]);
    git(dir, &["commit", "-q", "-m", name]);
    git(dir, &["rev-parse", "HEAD"]).trim().to_string()
}

/// The worktrees git knows, by path, with their branch.
fn git_worktrees(top: &Path) -> Vec<(String, String)> {
    let out = git(top, &["worktree", "list", "--porcelain"]);
    let mut all: Vec<(String, String)> = Vec::new();
    for l in out.lines() {
        if let Some(p) = l.strip_prefix("worktree ") {
            all.push((p.to_string(), String::new()));
        } else if let Some(b) = l.strip_prefix("branch refs/heads/") {
            all.last_mut().unwrap().1 = b.to_string();
        }
    }
    all
}

fn branch_exists(top: &Path, branch: &str) -> bool {
    !git(top, &["branch", "--list", branch]).trim().is_empty()
}

/// Does any ref reach commit `id`?
fn reachable(top: &Path, id: &str) -> bool {
    !git(top, &["for-each-ref", "--contains", id])
        .trim()
        .is_empty()
}

fn wt_path(top: &Path, slug: &str) -> PathBuf {
    top.join(".worktrees").join(slug)
}

#[test]
fn checkout_makes_the_worktree_on_its_branch_and_list_status_show_it() {
    let (e, top) = git_repo();
    let r = ok(&e, &top, "a1", &["checkout", "issue-42", "--worktree"]);
    snap!(e, "checkout_worktree", r);
    let path = wt_path(&top, "issue-42");
    assert!(
        git_worktrees(&top)
            .contains(&(path.display().to_string(), "tasklock/issue-42".to_string())),
        "{:?}",
        git_worktrees(&top)
    );
    // The main worktree does not see it as untracked.
    assert_eq!(
        git(&top, &["status", "--porcelain", "--", ".worktrees"]),
        ""
    );
    snap!(e, "list_with_worktree", ok(&e, &top, "a1", &["list"]));
    let l = ok(&e, &top, "a1", &["list", "--json"]).json();
    let w = &l["checkouts"][0]["worktree"];
    assert_eq!(w["path"], path.display().to_string());
    assert_eq!(w["branch"], "tasklock/issue-42");
    assert_eq!(w["repo"], top.display().to_string());
    let s = ok(&e, &top, "a1", &["status", "issue-42"]);
    assert!(
        s.stdout
            .contains("- Worktree: `.worktrees/issue-42` on branch `tasklock/issue-42`"),
        "{}",
        s.text()
    );
    // A person at a terminal sees it too.
    let t = ok(&e, &top, "a1", &["list", "--format", "table"]);
    assert!(t.stdout.contains(".worktrees/issue-42"), "{}", t.text());
    let t = ok(&e, &top, "a1", &["status", "issue-42", "--format", "table"]);
    assert!(
        t.stdout
            .contains("worktree: .worktrees/issue-42 (branch tasklock/issue-42)"),
        "{}",
        t.text()
    );
    let s = ok(&e, &top, "a1", &["status", "issue-42", "--json"]).json();
    assert_eq!(s["checkout"]["worktree"]["branch"], "tasklock/issue-42");
    snap!(e, "worktrees_held", ok(&e, &top, "a1", &["worktrees"]));
    let j = ok(&e, &top, "a1", &["worktrees", "--json"]).json();
    assert_eq!(j["worktrees"][0]["key"], "issue-42");
    assert_eq!(j["worktrees"][0]["state"]["state"], "clean");
    assert_eq!(j["worktrees"][0]["checkout"]["agent"]["id"], "a1");
    // The holder checking out again gets the same worktree.
    let again = ok(
        &e,
        &top,
        "a1",
        &["checkout", "issue-42", "--worktree", "--json"],
    )
    .json();
    assert_eq!(again["outcome"], "already_held");
    assert_eq!(again["worktree"], "reused");
    assert_eq!(
        again["checkout"]["worktree"]["path"],
        path.display().to_string()
    );
}

#[test]
fn release_of_a_clean_merged_worktree_removes_it_and_its_branch() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "issue-42", "--worktree"]);
    let path = wt_path(&top, "issue-42");
    let id = commit(&path, "fix.rs");
    git(&top, &["merge", "-q", "--ff-only", "tasklock/issue-42"]);
    let r = ok(&e, &top, "a1", &["release", "issue-42"]);
    snap!(e, "release_removes", r);
    assert!(!path.exists());
    assert!(!branch_exists(&top, "tasklock/issue-42"));
    assert_eq!(git_worktrees(&top).len(), 1);
    assert!(reachable(&top, &id));
    let n = ok(&e, &top, "a1", &["worktrees", "--json"]).json();
    assert_eq!(n["worktrees"], serde_json::json!([]));
}

#[test]
fn release_json_says_what_became_of_the_worktree() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "issue-1", "--worktree"]);
    let j = ok(&e, &top, "a1", &["release", "issue-1", "--json"]).json();
    let w = &j["worktrees"][0];
    assert_eq!(w["key"], "issue-1");
    assert_eq!(w["outcome"], "removed");
    assert_eq!(w["branch_deleted"], true);
    assert_eq!(w["state"]["state"], "clean");
    assert_eq!(w["worktree"]["branch"], "tasklock/issue-1");
}

#[test]
fn release_keeps_a_dirty_worktree_and_says_why() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "issue-42", "--worktree"]);
    let path = wt_path(&top, "issue-42");
    std::fs::write(path.join("notes.txt"), "unsaved work\n").unwrap();
    let r = ok(&e, &top, "a1", &["release", "issue-42"]);
    snap!(e, "release_keeps_dirty", r);
    assert_eq!(
        std::fs::read_to_string(path.join("notes.txt")).unwrap(),
        "unsaved work\n"
    );
    // The checkout ended; the worktree is a leftover, shown as such.
    assert_eq!(
        ok(&e, &top, "a1", &["list", "--json"]).json()["checkouts"],
        serde_json::json!([])
    );
    snap!(e, "worktrees_left_over", ok(&e, &top, "a1", &["worktrees"]));
    let j = ok(&e, &top, "a1", &["worktrees", "--json"]).json();
    assert_eq!(j["worktrees"][0]["checkout"], Value::Null);
    assert_eq!(j["worktrees"][0]["state"]["state"], "dirty");
    assert_eq!(j["worktrees"][0]["state"]["changed_files"], 1);
    // doctor names it, with the command that removes it safely.
    let d = tl(&e, &top, "a1", &["doctor", "--json"]).json();
    let check = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "worktrees")
        .unwrap_or_else(|| panic!("no worktrees check: {d}"))
        .clone();
    assert_eq!(check["status"], "warn");
    assert!(
        check["detail"].as_str().unwrap().contains("issue-42"),
        "{check}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .contains("tasklock worktrees --clean"),
        "{check}"
    );
    // --clean keeps it while it holds the change…
    let c = ok(&e, &top, "a1", &["worktrees", "--clean"]);
    snap!(e, "clean_keeps_dirty", c);
    assert!(path.join("notes.txt").exists());
    // …and removes it once the work is committed and merged.
    git(&path, &["add", "notes.txt"]);
    git(&path, &["commit", "-q", "-m", "notes"]);
    git(&top, &["merge", "-q", "--ff-only", "tasklock/issue-42"]);
    let c = ok(&e, &top, "a1", &["worktrees", "--clean", "--json"]).json();
    assert_eq!(c["cleaned"][0]["outcome"], "removed", "{c}");
    assert_eq!(c["worktrees"], serde_json::json!([]));
    assert!(!path.exists());
    assert!(!branch_exists(&top, "tasklock/issue-42"));
}

#[test]
fn release_keeps_a_commit_that_is_only_on_its_branch() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "issue-42", "--worktree"]);
    let path = wt_path(&top, "issue-42");
    let id = commit(&path, "only-here.rs");
    let r = ok(&e, &top, "a1", &["release", "issue-42", "--json"]).json();
    let w = &r["worktrees"][0];
    assert_eq!(w["outcome"], "kept", "{r}");
    assert_eq!(w["state"]["unique_commits"], 1);
    assert!(
        w["why"]
            .as_str()
            .unwrap()
            .contains("1 commit not on any other branch")
    );
    assert!(path.join("only-here.rs").exists());
    assert_eq!(
        git(&top, &["rev-parse", "tasklock/issue-42"]).trim(),
        id.as_str()
    );
    // Another branch elsewhere (not merged) does not make it removable; --clean keeps it.
    let c = ok(&e, &top, "a1", &["worktrees", "--clean", "--json"]).json();
    assert_eq!(c["cleaned"][0]["outcome"], "kept", "{c}");
    assert!(reachable(&top, &id));
    snap!(
        e,
        "worktrees_commit_only_here",
        ok(&e, &top, "a1", &["worktrees"])
    );
}

#[test]
fn a_commit_pushed_to_its_upstream_lets_release_remove_it() {
    let (e, top) = git_repo();
    let bare = e.tmp.path().join("origin.git");
    git(
        e.tmp.path(),
        &["init", "-q", "--bare", bare.to_str().unwrap()],
    );
    git(&top, &["remote", "add", "origin", bare.to_str().unwrap()]);
    git(&top, &["push", "-q", "origin", "main"]);
    ok(&e, &top, "a1", &["checkout", "issue-42", "--worktree"]);
    let path = wt_path(&top, "issue-42");
    let id = commit(&path, "pushed.rs");
    git(&path, &["push", "-q", "-u", "origin", "tasklock/issue-42"]);
    let r = ok(&e, &top, "a1", &["release", "issue-42", "--json"]).json();
    assert_eq!(r["worktrees"][0]["outcome"], "removed", "{r}");
    assert_eq!(r["worktrees"][0]["branch_deleted"], true, "{r}");
    assert!(!path.exists());
    assert!(!branch_exists(&top, "tasklock/issue-42"));
    // The commit is on the remote.
    assert_eq!(
        git(&bare, &["rev-parse", "refs/heads/tasklock/issue-42"]).trim(),
        id.as_str()
    );
}

#[test]
fn a_refused_checkout_makes_no_worktree() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "k"]);
    let r = tl(&e, &top, "a2", &["checkout", "k", "--worktree"]);
    assert_eq!(r.code, 2, "{}", r.text());
    assert_eq!(git_worktrees(&top).len(), 1);
    assert!(!branch_exists(&top, "tasklock/k"));
    assert!(!top.join(".worktrees").exists());
}

#[test]
fn a_worktree_that_cannot_be_made_gives_the_checkout_back() {
    let (e, top) = git_repo();
    std::fs::create_dir_all(top.join("taken")).unwrap();
    std::fs::write(top.join("taken/mine"), "x").unwrap();
    let r = tl(
        &e,
        &top,
        "a1",
        &["checkout", "k", "--worktree", "taken", "--json"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
    let err = r.json();
    assert_eq!(err["error"]["kind"], "worktree");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("was given back"),
        "{err}"
    );
    let r = tl(&e, &top, "a1", &["checkout", "k", "--worktree", "taken"]);
    assert_eq!(r.code, 64);
    snap!(e, "cannot_make", r);
    // Nothing held, nothing made, nothing of the user's touched.
    assert_eq!(
        ok(&e, &top, "a1", &["list", "--json"]).json()["checkouts"],
        serde_json::json!([])
    );
    assert_eq!(git_worktrees(&top).len(), 1);
    assert!(!branch_exists(&top, "tasklock/k"));
    assert_eq!(
        std::fs::read_to_string(top.join("taken/mine")).unwrap(),
        "x"
    );
    ok(&e, &top, "a2", &["checkout", "k"]);
}

#[test]
fn the_place_and_branch_come_from_config_and_any_key_makes_a_valid_branch() {
    let (e, top) = git_repo();
    let elsewhere = tempfile::tempdir().unwrap();
    let wt = elsewhere.path().join("wt");
    e.configure(&format!(
        "worktrees:\n  dir: {}\n  branch: \"work/{{key}}\"\n",
        wt.display()
    ));
    let j = ok(
        &e,
        &top,
        "a1",
        &[
            "checkout",
            "github://acme/app/issues/7",
            "--worktree",
            "--json",
        ],
    )
    .json();
    let w = &j["checkout"]["worktree"];
    let branch = w["branch"].as_str().unwrap();
    assert!(
        branch.starts_with("work/github-acme-app-issues-7-"),
        "{branch}"
    );
    git(&top, &["check-ref-format", "--branch", branch]);
    let path = PathBuf::from(w["path"].as_str().unwrap());
    assert_eq!(path.parent().unwrap(), wt.as_path());
    assert!(path.is_dir());
    ok(&e, &top, "a1", &["release", "github://acme/app/issues/7"]);
    assert!(!path.exists());
    // A template without `{key}` is refused.
    let (e2, top2) = git_repo();
    e2.configure("worktrees:\n  branch: fixed\n");
    let r = tl(&e2, &top2, "a1", &["checkout", "k", "--worktree"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("worktrees.branch"), "{}", r.text());
}

/// `tasklock ARGS` started in `top`, its output dropped.
fn spawn(e: &Env, top: &Path, agent: &str, args: &[&str]) -> std::process::Child {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.current_dir(top)
        .arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd.spawn().unwrap()
}

/// Every recorded worktree is whole: there, on its branch, as git made it.
fn recorded_worktrees_are_whole(e: &Env, top: &Path) {
    let l = ok(e, top, "a1", &["list", "--json"]).json();
    for c in l["checkouts"].as_array().unwrap() {
        let Some(w) = c.get("worktree") else { continue };
        let path = PathBuf::from(w["path"].as_str().unwrap());
        let branch = w["branch"].as_str().unwrap();
        assert!(
            git_worktrees(top).contains(&(path.display().to_string(), branch.to_string())),
            "recorded but not made: {c}"
        );
        assert_eq!(git(&path, &["status", "--porcelain"]), "", "half-made: {c}");
    }
}

#[test]
fn checkout_worktree_killed_at_random_points_records_no_half_made_worktree() {
    let (e, top) = git_repo();
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let mut child = spawn(&e, &top, "a1", &["checkout", key, "--worktree"]);
        // A checkout with its worktree takes about 100 ms: killed anywhere in it.
        std::thread::sleep(Duration::from_micros((i as u64 * 7919) % 150_000));
        let _ = child.kill();
        child.wait().unwrap();
        recorded_worktrees_are_whole(&e, &top);
    }
    // Each is finished by checking out again, and released clean: nothing left.
    for key in &keys {
        let j = ok(&e, &top, "a1", &["checkout", key, "--worktree", "--json"]).json();
        assert!(j["checkout"]["worktree"].is_object(), "{j}");
    }
    recorded_worktrees_are_whole(&e, &top);
    for key in &keys {
        let j = ok(&e, &top, "a1", &["release", key, "--json"]).json();
        assert_eq!(j["worktrees"][0]["outcome"], "removed", "{j}");
    }
    let w = ok(&e, &top, "a1", &["worktrees", "--json"]).json();
    assert_eq!(w["worktrees"], serde_json::json!([]), "{w}");
    assert_eq!(git_worktrees(&top).len(), 1);
    git(&top, &["fsck", "--no-progress"]);
}

#[test]
fn release_killed_at_random_points_loses_no_commit() {
    let (e, top) = git_repo();
    let mut commits = Vec::new();
    for i in 0..12u64 {
        let key = format!("r{i}");
        ok(&e, &top, "a1", &["checkout", &key, "--worktree"]);
        let path = wt_path(&top, &key);
        let id = commit(&path, &format!("work-{i}.rs"));
        // Half of them merged (their release removes them), half with work only there.
        let merged = i % 2 == 0;
        if merged {
            git(
                &top,
                &["merge", "-q", "--no-edit", &format!("tasklock/{key}")],
            );
        }
        let mut child = spawn(&e, &top, "a1", &["release", &key]);
        // A release with its worktree takes about 80 ms: killed anywhere in it.
        std::thread::sleep(Duration::from_micros((i * 7919) % 100_000));
        let _ = child.kill();
        child.wait().unwrap();
        assert!(reachable(&top, &id), "{key}: commit {id} lost");
        recorded_worktrees_are_whole(&e, &top);
        commits.push((key, id, merged));
    }
    // Finish the releases that were cut short, then clean up what ended.
    for (key, ..) in &commits {
        let r = tl(&e, &top, "a1", &["release", key]);
        assert!(r.code == 0 || r.code == 3, "{}", r.text());
    }
    ok(&e, &top, "a1", &["worktrees", "--clean"]);
    for (key, id, merged) in &commits {
        assert!(reachable(&top, id), "{key}: commit {id} lost");
        let path = wt_path(&top, key);
        if *merged {
            assert!(!path.exists(), "{key}: merged, yet kept");
            assert!(!branch_exists(&top, &format!("tasklock/{key}")));
        } else {
            assert!(path.exists(), "{key}: its only copy of {id} was removed");
            assert_eq!(
                git(&top, &["rev-parse", &format!("tasklock/{key}")]).trim(),
                id.as_str()
            );
        }
    }
    git(&top, &["fsck", "--no-progress"]);
}

/// Agents racing for one key with `--worktree`: one wins and gets the only worktree; the
/// others are refused (exit 2) and make nothing. Agents racing for different keys each
/// get their own, all at once in one repository.
#[test]
fn racing_checkouts_make_one_worktree_per_granted_checkout() {
    let (e, top) = git_repo();
    // `n` agents `r0`…, each running `args(i)` at once: their outputs.
    let race = |n: usize, args: &dyn Fn(usize) -> Vec<String>| -> Vec<std::process::Output> {
        let racers: Vec<_> = (0..n)
            .map(|i| {
                let mut cmd = base_cmd(&e.now);
                use_store(&mut cmd, &e.dir());
                cmd.current_dir(&top)
                    .arg("--dir")
                    .arg(e.dir())
                    .args(args(i))
                    .args(["--agent", &format!("r{i}")])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        racers
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect()
    };
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let codes: Vec<i32> = race(8, &|_| words(&["checkout", "one", "--worktree"]))
        .iter()
        .map(|o| o.status.code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|&c| c == 0 || c == 2), "{codes:?}");
    let branches: Vec<String> = git_worktrees(&top).into_iter().map(|w| w.1).collect();
    assert_eq!(branches, ["main", "tasklock/one"]);
    recorded_worktrees_are_whole(&e, &top);
    // Different keys at once: each its own (git's lock on its config, which each
    // marks its branch in, taken in turn).
    for out in race(16, &|i| {
        words(&["checkout", &format!("own-{i}"), "--worktree"])
    }) {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(git_worktrees(&top).len(), 18);
    recorded_worktrees_are_whole(&e, &top);
    let j = ok(&e, &top, "a1", &["worktrees", "--json"]).json();
    assert_eq!(j["worktrees"].as_array().unwrap().len(), 17, "{j}");
    // And released all at once: each removed, with its branch.
    for out in race(16, &|i| words(&["release", &format!("own-{i}"), "--json"])) {
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["worktrees"][0]["outcome"], "removed", "{j}");
        assert_eq!(j["worktrees"][0]["branch_deleted"], true, "{j}");
    }
    assert_eq!(git_worktrees(&top).len(), 2);
}

#[test]
fn no_worktrees_and_one_removed_by_hand() {
    let (e, top) = git_repo();
    snap!(
        e,
        "worktrees_none",
        ok(&e, &top, "a1", &["worktrees", "--clean"])
    );
    ok(&e, &top, "a1", &["checkout", "issue-9", "--worktree"]);
    // Removed by hand (nothing in it): the release forgets it and deletes its branch.
    std::fs::remove_dir_all(wt_path(&top, "issue-9")).unwrap();
    let r = ok(&e, &top, "a1", &["release", "issue-9"]);
    snap!(e, "release_gone_already", r);
    assert!(!branch_exists(&top, "tasklock/issue-9"));
    assert_eq!(git_worktrees(&top).len(), 1);
}

/// The terminal view shows a checkout's worktree: a WORKTREE column (only when some
/// checkout has one) and the fleet's JSON carries it.
#[test]
fn top_shows_the_worktree() {
    let (e, top) = git_repo();
    ok(&e, &top, "a1", &["checkout", "plain"]);
    let frame = ok(&e, &top, "x", &["top", "--once", "--size", "160x20"]).stdout;
    assert!(!frame.contains("WORKTREE"), "{frame}");
    ok(&e, &top, "a1", &["checkout", "issue-7", "--worktree"]);
    let frame = ok(&e, &top, "x", &["top", "--once", "--size", "160x20"]).stdout;
    assert!(frame.contains("WORKTREE"), "{frame}");
    assert!(frame.contains("/issue-7"), "{frame}");
    let fleet = ok(&e, &top, "x", &["top", "--once", "--json"]).json();
    let c = fleet["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "issue-7")
        .unwrap()
        .clone();
    assert_eq!(
        c["worktree"]["path"],
        wt_path(&top, "issue-7").display().to_string()
    );
    assert_eq!(c["worktree"]["branch"], "tasklock/issue-7");
}

/// Claude Code's worktree hooks as it runs them: JSON on stdin, from the project.
fn claude_hook(e: &Env, top: &Path, event: &str, payload: &serde_json::Value) -> Run {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.args(["hook", event, "--dir"])
        .arg(e.dir())
        .current_dir(top);
    Run::with_stdin(&mut cmd, &payload.to_string())
}

/// Issue 49: `claude --worktree NAME` with the hooks `init` writes. WorktreeCreate makes
/// the worktree as a checkout of `worktree:NAME` by the session and prints its path
/// alone (what Claude Code starts the session in); another session asking for the same
/// name is refused with the holder named and nothing made; WorktreeRemove releases the
/// checkout, which removes the worktree only when nothing is lost.
#[test]
fn claude_codes_worktree_hooks_hold_the_worktree_as_the_sessions_checkout() {
    let (e, top) = git_repo();
    let create = |session: &str| {
        serde_json::json!({
            "session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": top,
            "hook_event_name": "WorktreeCreate", "name": "feature-x",
        })
    };
    let r = claude_hook(&e, &top, "worktree-create", &create("s1"));
    assert_eq!(r.code, 0, "{}", r.text());
    // The path alone on its line, where `checkout --worktree` puts the key's worktree.
    let path = PathBuf::from(r.stdout.strip_suffix('\n').unwrap());
    assert!(
        path.starts_with(top.join(".worktrees"))
            && path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("worktree-feature-x-"),
        "{}",
        r.stdout
    );
    assert!(path.join("README").exists());
    let status = ok(&e, &top, "x", &["status", "worktree:feature-x", "--json"]).json();
    assert_eq!(status["checkout"]["agent"]["id"], "s1", "{status}");
    assert!(
        status["checkout"]["worktree"]["branch"]
            .as_str()
            .unwrap()
            .starts_with("tasklock/worktree-feature-x-"),
        "{status}"
    );
    assert_eq!(
        status["checkout"]["worktree"]["path"],
        path.display().to_string()
    );

    // Another session, the same name: refused, the holder named, nothing made.
    let r = claude_hook(&e, &top, "worktree-create", &create("s2"));
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stdout.is_empty(), "{}", r.text());
    assert!(
        r.stderr.contains("`worktree:feature-x`, which s1 (")
            && r.stderr.contains(") holds; no worktree was made"),
        "{}",
        r.text()
    );
    assert_eq!(git_worktrees(&top).len(), 2);

    // Removed with a commit only on its branch: kept, the checkout ended.
    commit(&path, "work.txt");
    let remove = serde_json::json!({
        "session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": top,
        "hook_event_name": "WorktreeRemove", "worktree_path": path,
    });
    let r = claude_hook(&e, &top, "worktree-remove", &remove);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(path.exists(), "a commit on no other branch: kept");
    let after = ok(&e, &top, "x", &["status", "worktree:feature-x", "--json"]).json();
    assert_eq!(after["outcome"], "free", "{after}");
    // Merged, then asked again (as `tasklock worktrees --clean` would): removed.
    let branch = status["checkout"]["worktree"]["branch"]
        .as_str()
        .unwrap()
        .to_string();
    git(&top, &["merge", "-q", &branch]);
    let r = claude_hook(&e, &top, "worktree-create", &create("s1"));
    assert_eq!(r.code, 0, "{}", r.text());
    let r = claude_hook(&e, &top, "worktree-remove", &remove);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!path.exists(), "nothing lost: removed");
}

/// The MCP `checkout` tool takes `worktree` (and `worktree_path`): the worktree is made
/// once the key is granted and named in the result; another agent's server is refused
/// and makes nothing; a release through the tool removes the clean worktree.
#[test]
fn the_mcp_checkout_tool_makes_the_worktree() {
    let (e, top) = git_repo();
    let mut a = common::mcp::Mcp::start(&e, &[("TASKLOCK_AGENT", "mcp-a")]);
    let r = a.ok(
        "checkout",
        serde_json::json!({"key": "issue-7", "worktree": true}),
    );
    let path = wt_path(&top, "issue-7");
    assert!(
        git_worktrees(&top).contains(&(path.display().to_string(), "tasklock/issue-7".into())),
        "{:?}",
        git_worktrees(&top)
    );
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/issue-7"),
        "{r}"
    );
    let json = &r["_meta"]["tasklock/json"];
    assert_eq!(
        json["checkout"]["worktree"]["path"],
        path.display().to_string(),
        "{r}"
    );

    let mut b = common::mcp::Mcp::start(&e, &[("TASKLOCK_AGENT", "mcp-b")]);
    let r = b.call(
        "checkout",
        serde_json::json!({"key": "issue-7", "worktree_path": "elsewhere"}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"].as_str().unwrap().contains("mcp-a"),
        "{r}"
    );
    assert!(!top.join("elsewhere").exists());
    let r = b.ok(
        "checkout",
        serde_json::json!({"key": "issue-8", "worktree_path": "elsewhere"}),
    );
    assert_eq!(
        r["_meta"]["tasklock/json"]["checkout"]["worktree"]["path"],
        top.join("elsewhere").display().to_string(),
        "{r}"
    );
    b.close();

    a.ok("release", serde_json::json!({"keys": ["issue-7"]}));
    assert!(!path.exists());
    assert!(!branch_exists(&top, "tasklock/issue-7"));
    a.close();
}

/// A holder that dies (its process killed) leaves its worktree to the command that ends
/// its checkout (`agent_death`): removed with its branch when that loses nothing, kept
/// (and reported by `worktrees` as ended) when it holds a change. A `why` before, which
/// decides on a dry run, removes nothing.
#[test]
fn a_dead_holders_worktree_is_removed_by_the_command_that_ends_its_checkout_if_it_is_safe() {
    let (e, top) = git_repo();
    let mut a = AgentProcess::start();
    ok(&e, &top, "a1", &["heartbeat", "--pid", &a.pid()]);
    ok(&e, &top, "a1", &["checkout", "issue-1", "--worktree"]);
    ok(&e, &top, "a1", &["checkout", "issue-2", "--worktree"]);
    std::fs::write(wt_path(&top, "issue-2").join("wip.txt"), "half done\n").unwrap();
    a.kill();

    let why = ok(&e, &top, "b1", &["why", "issue-1"]);
    assert!(why.stdout.contains("issue-1"), "{}", why.text());
    assert!(
        wt_path(&top, "issue-1").is_dir(),
        "a dry run removed a worktree"
    );

    ok(&e, &top, "b1", &["checkout", "issue-1"]);
    let audit = e.run(None, &["audit", "--json"]).stdout;
    assert!(audit.contains("agent_death"), "{audit}");
    assert!(!wt_path(&top, "issue-1").exists());
    assert!(!branch_exists(&top, "tasklock/issue-1"));
    // The dirty one: its checkout ended too, the worktree and the change stay.
    assert!(wt_path(&top, "issue-2").join("wip.txt").is_file());
    let rows = ok(&e, &top, "b1", &["worktrees", "--json"]).json();
    let row = rows["worktrees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["key"] == "issue-2")
        .unwrap_or_else(|| panic!("{rows}"))
        .clone();
    assert!(row["checkout"].is_null(), "{row}");
    assert_eq!(row["state"]["state"], "dirty", "{row}");
    assert_eq!(row["state"]["changed_files"], 1, "{row}");
}

/// `heartbeat --watch`, the watcher of an agent's process, ends its checkouts when the
/// process dies, with nobody else running a command: the worktree of one, clean, goes
/// with it.
#[test]
fn the_watcher_removes_the_worktree_of_the_agent_it_saw_die() {
    let (e, top) = git_repo();
    let mut x = AgentProcess::start();
    let pid = x.pid();
    // With the real clock, beside the watcher, which reads it; in the repository.
    let now = |args: &[&str]| {
        let mut cmd = base_cmd(&e.now);
        cmd.env_remove("TASKLOCK_NOW");
        use_store(&mut cmd, &e.dir());
        cmd.current_dir(&top)
            .arg("--dir")
            .arg(e.dir())
            .args(["--agent", "w1"])
            .args(args);
        let r = exec(cmd);
        assert_eq!(r.code, 0, "{args:?}: {}", r.text());
    };
    now(&["heartbeat", "--watch", "--pid", &pid, "--detach"]);
    now(&["checkout", "issue-5", "--worktree"]);
    let path = wt_path(&top, "issue-5");
    assert!(path.is_dir());
    x.kill();
    let end = std::time::Instant::now() + Duration::from_secs(30);
    // The directory goes first, then the branch.
    while path.exists() || branch_exists(&top, "tasklock/issue-5") {
        assert!(
            std::time::Instant::now() < end,
            "the watcher left the worktree: {:?}",
            audit(&e.dir())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended: Vec<Value> = audit(&e.dir())
        .into_iter()
        .filter(|ev| ev["key"] == "issue-5" && ev["event"] != "acquire")
        .collect();
    assert_eq!(ended[0]["reason"], "agent_death", "{ended:?}");
}

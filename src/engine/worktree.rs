//! Git worktrees tied to checkouts (`checkout --worktree`): made after the grant, recorded
//! with the checkout once complete, and removed when the checkout ends only if they hold
//! nothing of value (no change git would lose, no commit that is on no other branch nor
//! on a remote). Git is run as a program (`git worktree add`, `worktree remove` without
//! `--force`, `branch -d`, never `-D`), so git's own refusals stand behind ours.
//!
//! Which worktrees tasklock made is kept by git itself: the branch of each carries the
//! setting `branch.<name>.tasklockKey` (its key), written before the worktree is made and
//! dropped by git with the branch. So a worktree whose checkout ended, or whose making or
//! removal was cut short, is still found ([`registry`]), on every store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::WorktreeSettings;
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::report::{WorktreeEnd, WorktreeHealth, WorktreeMade, WorktreeOutcome, WorktreeState};
use crate::store::{Event, Record, Slot, Worktree};

/// The git setting (of a branch) that names the key a worktree was made for.
pub const KEY_SETTING: &str = "tasklockKey";

/// The longest slug taken from a key, before its hash.
const SLUG_MAX: usize = 48;

/// A key as one component of a branch name and of a directory name: ASCII letters,
/// digits, `.`, `_` and `-`, every other run of characters one `-`, no leading or
/// trailing `-` or `.`, no `..` nor `.lock` at the end. A key that is not already so
/// (`github://acme/app/issues/42`) gets 8 hex digits of its hash appended, so that
/// two keys never share a slug (`github-acme-app-issues-42-1a2b3c4d`).
pub fn slug(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || (c == '.' && !out.ends_with('.')) {
            out.push(c);
        } else if c == '-' || !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut s = out.trim_matches(['-', '.']).to_string();
    s.truncate(SLUG_MAX);
    let s = s.trim_end_matches(['-', '.']).to_string();
    if s == key && !s.ends_with(".lock") && !s.is_empty() {
        return s;
    }
    let base = if s.is_empty() { "key" } else { s.as_str() };
    format!("{base}-{:08x}", fnv1a(key))
}

/// FNV-1a, 32 bits: stable across versions and platforms (a slug must not change).
fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Where a checkout's worktree is to be made, before it is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub worktree: Worktree,
    /// The configured directory of worktrees inside the repository: given a `.gitignore`
    /// of `*` when it is made, so the main worktree never shows them as untracked.
    pub ignore_dir: Option<PathBuf>,
}

/// The worktree for `key`: at `path` (relative to `cwd`) or `<dir>/<slug>` of
/// `worktrees:` in config.yaml, on the branch its template names, in the repository
/// that contains `cwd`.
pub fn plan(cfg: &WorktreeSettings, cwd: &Path, key: &str, path: Option<&Path>) -> Result<Plan> {
    let repo = crate::discover::main_worktree_root(cwd).ok_or_else(|| {
        Error::Worktree(format!(
            "--worktree needs a git repository, and {} is in none",
            cwd.display()
        ))
    })?;
    let repo = repo.canonicalize().unwrap_or(repo);
    let slug = slug(key);
    let branch = cfg.branch.replace("{key}", &slug);
    let ok = git(&repo, &["check-ref-format", "--branch", &branch])?;
    if !ok.success {
        return Err(Error::Worktree(format!(
            "`{branch}` (worktrees.branch in config.yaml) is not a valid branch name"
        )));
    }
    let (path, ignore_dir) = match path {
        Some(p) => (absolute(cwd, p), None),
        None => {
            let dir = absolute(&repo, Path::new(&cfg.dir));
            let inside = dir.starts_with(&repo) && dir != repo;
            (dir.join(&slug), inside.then_some(dir))
        }
    };
    Ok(Plan {
        worktree: Worktree {
            path: path.to_string_lossy().into_owned(),
            branch,
            repo: repo.to_string_lossy().into_owned(),
        },
        ignore_dir,
    })
}

/// `p` from `base`, with `.` and `..` taken out by their text (the path may not exist).
fn absolute(base: &Path, p: &Path) -> PathBuf {
    let joined = base.join(p);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Make the worktree of `plan` for `key` (or find it made): on its branch, new from
/// `HEAD` of the repository, or the existing branch of that name when no other worktree
/// has it checked out. Nothing is recorded here; the caller records it once this returns.
/// Refusals are [`Error::Worktree`].
pub fn create(plan: &Plan, key: &str) -> Result<WorktreeMade> {
    let w = &plan.worktree;
    let repo = Path::new(&w.repo);
    let _turn = repo_lock(repo)?;
    let path = Path::new(&w.path);
    let listed = list(repo)?;
    let want = format!("refs/heads/{}", w.branch);
    if let Some(e) = listed.iter().find(|e| same_path(&e.path, path)) {
        if e.branch.as_deref() == Some(want.as_str()) {
            mark(repo, &w.branch, key)?;
            return Ok(WorktreeMade::Reused);
        }
        return Err(Error::Worktree(format!(
            "{} is already a worktree, on {}; choose another place with --worktree PATH",
            w.path,
            e.branch.as_deref().unwrap_or("a detached HEAD")
        )));
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(Error::Worktree(format!(
            "{} already exists and is not the worktree of `{}`; choose another place with --worktree PATH",
            w.path, w.branch
        )));
    }
    if let Some(e) = listed
        .iter()
        .find(|e| e.branch.as_deref() == Some(want.as_str()))
    {
        return Err(Error::Worktree(format!(
            "branch `{}` is checked out in {}; release what uses it there, or name another branch (worktrees.branch)",
            w.branch,
            e.path.display()
        )));
    }
    if let Some(dir) = &plan.ignore_dir {
        ignored_dir(dir)?;
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let exists = branch_exists(repo, &w.branch)?;
    let fresh_mark = setting(repo, &w.branch)?.is_none();
    // First the mark, then the worktree: one cut short is still found by its mark.
    mark(repo, &w.branch, key)?;
    let out = if exists {
        git(repo, &["worktree", "add", "--quiet", &w.path, &w.branch])?
    } else {
        git(
            repo,
            &[
                "worktree", "add", "--quiet", "-b", &w.branch, &w.path, "HEAD",
            ],
        )?
    };
    if !out.success {
        if fresh_mark {
            let name = format!("branch.{}.{KEY_SETTING}", w.branch);
            let _ = git_retrying(repo, &["config", "--unset", &name]);
        }
        return Err(Error::Worktree(format!(
            "git could not make the worktree {} on `{}`: {}",
            w.path,
            w.branch,
            out.stderr_line()
        )));
    }
    Ok(WorktreeMade::Created)
}

/// The configured directory of worktrees, made with a `.gitignore` of `*` (as `.locks/`).
fn ignored_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let ignore = dir.join(".gitignore");
    if std::fs::symlink_metadata(&ignore).is_err() {
        std::fs::write(&ignore, "*\n").map_err(|e| Error::io(&ignore, e))?;
    }
    Ok(())
}

/// The repository's turn for tasklock's changes of worktrees: git makes and removes
/// worktrees without a lock of its own, and one `git worktree add` fails on another's
/// half-made administrative files, so tasklock's commands take turns (a lock file in the
/// repository's git directory, released by the kernel if the process dies).
fn repo_lock(repo: &Path) -> Result<std::fs::File> {
    let common = crate::discover::git_common_dir(repo).unwrap_or_else(|| repo.join(".git"));
    let path = common.join("tasklock-worktrees.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    file.lock().map_err(|e| Error::io(&path, e))?;
    Ok(file)
}

/// Tag `branch` as made by tasklock for `key`.
fn mark(repo: &Path, branch: &str, key: &str) -> Result<()> {
    let name = format!("branch.{branch}.{KEY_SETTING}");
    let out = git_retrying(repo, &["config", &name, key])?;
    if !out.success {
        return Err(Error::Worktree(format!(
            "git could not record the key of branch `{branch}`: {}",
            out.stderr_line()
        )));
    }
    Ok(())
}

/// The key `branch` was made for, if tasklock made it.
fn setting(repo: &Path, branch: &str) -> Result<Option<String>> {
    let name = format!("branch.{branch}.{KEY_SETTING}");
    let out = git(repo, &["config", "--get", &name])?;
    Ok(out.success.then(|| out.stdout.trim_end().to_string()))
}

fn branch_exists(repo: &Path, branch: &str) -> Result<bool> {
    let r = format!("refs/heads/{branch}");
    Ok(git(repo, &["rev-parse", "--verify", "--quiet", &r])?.success)
}

/// What the worktree holds that removing it would lose: changes git sees (untracked
/// files included) and commits of its `HEAD` and branch that are on no other branch
/// and no remote-tracking branch.
pub fn state(w: &Worktree) -> Result<WorktreeState> {
    let repo = Path::new(&w.repo);
    let path = Path::new(&w.path);
    let here = list(repo)?.iter().any(|e| same_path(&e.path, path)) && path.exists();
    let mut tips = Vec::new();
    let mut changed_files = 0;
    if here {
        let st = git(path, &["status", "--porcelain", "--untracked-files=all"])?;
        if !st.success {
            return Err(Error::Worktree(format!(
                "git status in {} failed: {}",
                w.path,
                st.stderr_line()
            )));
        }
        changed_files = st.stdout.lines().filter(|l| !l.is_empty()).count();
        let head = git(path, &["rev-parse", "--verify", "--quiet", "HEAD"])?;
        if head.success {
            tips.push(head.stdout.trim().to_string());
        }
    }
    if branch_exists(repo, &w.branch)? {
        tips.push(format!("refs/heads/{}", w.branch));
    }
    let unique_commits = if tips.is_empty() {
        0
    } else {
        let exclude = format!("--exclude={}", w.branch);
        let mut args = vec!["rev-list", "--count"];
        args.extend(tips.iter().map(String::as_str));
        args.extend(["--not", &exclude, "--branches", "--remotes"]);
        let out = git(repo, &args)?;
        if !out.success {
            return Err(Error::Worktree(format!(
                "git rev-list in {} failed: {}",
                w.repo,
                out.stderr_line()
            )));
        }
        out.stdout.trim().parse().unwrap_or(usize::MAX)
    };
    let health = if !here {
        WorktreeHealth::Missing
    } else if changed_files > 0 {
        WorktreeHealth::Dirty
    } else if unique_commits > 0 {
        WorktreeHealth::NotElsewhere
    } else {
        WorktreeHealth::Clean
    };
    Ok(WorktreeState {
        health,
        changed_files,
        unique_commits,
    })
}

/// Remove the worktree and delete its branch, only when that loses nothing: no change
/// in it, and no commit of it that is on no other branch nor remote. Git is asked
/// without force (`worktree remove`, `branch -d`), so a change made between the look and
/// the removal still stops it. Otherwise it is kept, and the result says why. A
/// worktree already gone is forgotten (`git worktree prune`) and its branch deleted the
/// same way. Never fails: what could not be looked at is kept, and the result says why.
pub fn remove_if_safe(key: &str, w: &Worktree) -> WorktreeEnd {
    try_remove(key, w).unwrap_or_else(|e| {
        end(
            key,
            w,
            WorktreeOutcome::Kept,
            unknown(),
            Some(format!("it could not be looked at: {e}")),
        )
    })
}

/// The worktrees of checkouts ended without their holder's release (its death, its
/// lease, its session's end), each with the lock directory it was recorded in: removed
/// by [`flush`] once the command's change stands, where that loses nothing.
static ENDED: std::sync::Mutex<Vec<(PathBuf, String, Worktree)>> =
    std::sync::Mutex::new(Vec::new());

/// A checkout with a worktree was ended by someone other than its holder's release: its
/// worktree is to be removed if that is safe, after the store's scope. Nothing in a dry
/// run (`why`, the views), which changes nothing.
pub(crate) fn ended(ctx: &Ctx, record: &Record) {
    let Some(w) = &record.worktree else {
        return;
    };
    if super::dry::active() {
        return;
    }
    if let Ok(mut e) = ENDED.lock() {
        e.push((ctx.dir.clone(), record.key.clone(), w.clone()));
    }
}

/// Remove the worktrees of the checkouts [`ended`] since the last flush, each only if
/// that loses nothing and no checkout holds it now (a change that did not stand, or a
/// new grant to its holder of the same worktree); what is kept is left for `worktrees`
/// and `doctor` to report. Never fails the command.
pub fn flush() {
    let ended = match ENDED.lock() {
        Ok(mut e) => std::mem::take(&mut *e),
        Err(_) => return,
    };
    for (dir, key, w) in ended {
        if !Path::new(&w.path).exists() || still_held(&dir, &key, &w) {
            continue;
        }
        let _ = remove_if_safe(&key, &w);
    }
}

/// Does a checkout in the lock directory `dir` hold worktree `w` now? True when that
/// cannot be read: then it is kept.
fn still_held(dir: &Path, key: &str, w: &Worktree) -> bool {
    let Ok(ctx) = Ctx::new(dir.to_path_buf(), None, None) else {
        return true;
    };
    match ctx.existing_store().and_then(|s| match s {
        Some(s) => s.read(key),
        None => Ok(Slot::Free),
    }) {
        Ok(Slot::Held(r)) => r.worktree.is_some_and(|h| h.path == w.path),
        Ok(Slot::Free) => false,
        _ => true,
    }
}

/// [`state`], or [`WorktreeHealth::Unknown`] where git could not tell.
pub fn state_or_unknown(w: &Worktree) -> WorktreeState {
    state(w).unwrap_or_else(|_| unknown())
}

fn try_remove(key: &str, w: &Worktree) -> Result<WorktreeEnd> {
    let repo = Path::new(&w.repo);
    if !repo.is_dir() {
        return Ok(end(
            key,
            w,
            WorktreeOutcome::Kept,
            unknown(),
            Some(format!("its repository {} is not there", w.repo)),
        ));
    }
    let _turn = repo_lock(repo)?;
    let st = state(w)?;
    let kept = |why: String| Ok(end(key, w, WorktreeOutcome::Kept, st.clone(), Some(why)));
    if st.changed_files > 0 {
        return kept(format!(
            "{} changed or untracked file{}",
            st.changed_files,
            plural(st.changed_files)
        ));
    }
    if st.unique_commits > 0 {
        return kept(format!(
            "{} commit{} not on any other branch nor remote",
            st.unique_commits,
            plural(st.unique_commits)
        ));
    }
    let outcome = if st.health == WorktreeHealth::Missing {
        let _ = git(repo, &["worktree", "prune"])?;
        WorktreeOutcome::Missing
    } else {
        let out = git(repo, &["worktree", "remove", &w.path])?;
        if !out.success {
            return kept(format!("git would not remove it: {}", out.stderr_line()));
        }
        WorktreeOutcome::Removed
    };
    let mut done = end(key, w, outcome, st, None);
    if branch_exists(repo, &w.branch)? {
        let out = git_retrying(repo, &["branch", "-d", &w.branch])?;
        // Deleted even when git then failed to drop its settings.
        if out.success || !branch_exists(repo, &w.branch)? {
            done.branch_deleted = true;
        } else {
            done.why = Some(format!("branch `{}` kept: {}", w.branch, out.stderr_line()));
        }
    } else {
        // The mark outlives a branch deleted by hand only as a section git left.
        let _ = git_retrying(
            repo,
            &[
                "config",
                "--unset",
                &format!("branch.{}.{KEY_SETTING}", w.branch),
            ],
        );
    }
    Ok(done)
}

fn unknown() -> WorktreeState {
    WorktreeState {
        health: WorktreeHealth::Unknown,
        changed_files: 0,
        unique_commits: 0,
    }
}

fn end(
    key: &str,
    w: &Worktree,
    outcome: WorktreeOutcome,
    state: WorktreeState,
    why: Option<String>,
) -> WorktreeEnd {
    WorktreeEnd {
        key: key.to_string(),
        worktree: w.clone(),
        outcome,
        state,
        branch_deleted: false,
        why,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A worktree tasklock made in a repository, found through its branch's mark: its key,
/// and where it is (`path` empty when the branch is there but its worktree is not).
#[derive(Debug, Clone)]
pub struct Found {
    pub key: String,
    pub worktree: Worktree,
}

/// Every branch of the repository at `repo` that tasklock made a worktree on, with
/// that worktree's path where there is one.
pub fn registry(repo: &Path) -> Result<Vec<Found>> {
    let pattern = format!("^branch\\..*\\.{}$", KEY_SETTING.to_ascii_lowercase());
    let out = git(repo, &["config", "--get-regexp", &pattern])?;
    // Exit 1: no such setting at all.
    if !out.success {
        return Ok(Vec::new());
    }
    let listed = list(repo)?;
    let suffix = format!(".{}", KEY_SETTING.to_ascii_lowercase());
    let mut found = Vec::new();
    for line in out.stdout.lines() {
        let Some((name, key)) = line.split_once(' ') else {
            continue;
        };
        let Some(branch) = name
            .strip_prefix("branch.")
            .and_then(|n| n.strip_suffix(&suffix))
        else {
            continue;
        };
        let want = format!("refs/heads/{branch}");
        let path = listed
            .iter()
            .find(|e| e.branch.as_deref() == Some(want.as_str()))
            .map(|e| e.path.to_string_lossy().into_owned())
            .unwrap_or_default();
        found.push(Found {
            key: key.to_string(),
            worktree: Worktree {
                path,
                branch: branch.to_string(),
                repo: repo.to_string_lossy().into_owned(),
            },
        });
    }
    Ok(found)
}

/// One entry of `git worktree list --porcelain`.
struct Listed {
    path: PathBuf,
    branch: Option<String>,
}

fn list(repo: &Path) -> Result<Vec<Listed>> {
    let mut out = git(repo, &["worktree", "list", "--porcelain"])?;
    // Git reads each worktree's files in turn and fails on one removed meanwhile (by
    // another release): read again.
    for _ in 0..50 {
        if out.success {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        out = git(repo, &["worktree", "list", "--porcelain"])?;
    }
    if !out.success {
        return Err(Error::Worktree(format!(
            "git worktree list in {} failed: {}",
            repo.display(),
            out.stderr_line()
        )));
    }
    let mut all: Vec<Listed> = Vec::new();
    for line in out.stdout.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            all.push(Listed {
                path: PathBuf::from(p),
                branch: None,
            });
        } else if let (Some(b), Some(last)) = (line.strip_prefix("branch "), all.last_mut()) {
            last.branch = Some(b.to_string());
        }
    }
    Ok(all)
}

fn same_path(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

struct Out {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Out {
    /// Git's own words, one line.
    fn stderr_line(&self) -> String {
        let s = self.stderr.trim();
        let s = s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s);
        s.trim_start_matches("fatal: ")
            .trim_start_matches("error: ")
            .to_string()
    }
}

/// [`git`], again while git finds a lock file of the repository taken (another
/// command writing `.git/config` or a ref at the same time: git gives up at once
/// instead of waiting); for the writes that do the same when run twice.
fn git_retrying(dir: &Path, args: &[&str]) -> Result<Out> {
    let mut out = git(dir, args)?;
    for _ in 0..100 {
        let locked = ["could not lock", "Unable to create", "cannot lock ref"]
            .iter()
            .any(|m| out.stderr.contains(m));
        if out.success || !locked {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        out = git(dir, args)?;
    }
    Ok(out)
}

/// `git ARGS` in `dir`, with no input, in the C locale, ignoring any repository the
/// environment names (a hook's `GIT_DIR`).
fn git(dir: &Path, args: &[&str]) -> Result<Out> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_COMMON_DIR")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Worktree(format!("cannot run git: {e}")))?;
    Ok(Out {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Record a worktree made for the caller's checkout of `key` (fencing token `token`).
/// False when that checkout is no longer the caller's (it ended meanwhile): nothing is
/// recorded then.
pub fn record(ctx: &Ctx, key: &str, token: u64, w: &Worktree) -> Result<bool> {
    let me = ctx.agent_id()?;
    let store = ctx.open_store()?;
    let locks = crate::engine::key_locks(&[key.to_string()], &me);
    crate::engine::transaction_scoped(&*store, &locks, |guard| {
        let Slot::Held(r) = store.read(key)? else {
            return Ok(false);
        };
        if r.token != token || !r.held_by(&me) {
            return Ok(false);
        }
        if r.worktree.as_ref() == Some(w) {
            return Ok(true);
        }
        let recorded = Record {
            worktree: Some(w.clone()),
            ..r
        };
        store.replace(guard, &recorded)?;
        Ok(true)
    })
}

/// A checkout granted for `--worktree` whose worktree could not be made: given back,
/// as a release would (audited, its queue served), if it is still the caller's under
/// `token`.
pub fn give_back(ctx: &Ctx, key: &str, token: u64, why: &str) -> Result<()> {
    let me = ctx.agent_id()?;
    let store = ctx.open_store()?;
    let locks = crate::engine::key_locks(&[key.to_string()], &me);
    crate::engine::transaction_scoped(&*store, &locks, |guard| {
        let Slot::Held(r) = store.read(key)? else {
            return Ok(());
        };
        if r.token != token || !r.held_by(&me) {
            return Ok(());
        }
        store.remove(guard, key, r.slot, Some(&r.paths))?;
        let mut ev = ctx.event(Event::Release, &r);
        ev.detail = Some(format!("given back: {why}"));
        let released = format!("`{key}` was given back");
        crate::warnings::after_change(
            &format!("{released}, but the audit log was not written"),
            store.audit(guard, &ev),
        );
        crate::warnings::after_change(
            &format!("{released}, but its queue was not updated"),
            crate::engine::queue::after_release(ctx, &*store, guard, &r, None),
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn slugs_are_ref_components_and_distinct() {
        assert_eq!(slug("issue-42"), "issue-42");
        assert_eq!(slug("task_1.2"), "task_1.2");
        let s = slug("github://acme/app/issues/42");
        assert!(s.starts_with("github-acme-app-issues-42-"), "{s}");
        assert_ne!(slug("a/b"), slug("a-b"));
        assert_ne!(slug("a/b"), slug("a:b"));
        for k in ["#44", "..", "x.lock", "-", " a b ", "é", "a..b", ".hidden"] {
            let s = slug(k);
            assert!(
                !s.is_empty() && !s.contains("..") && !s.ends_with(".lock"),
                "{k}: {s}"
            );
            assert!(
                !s.starts_with(['.', '-']) && !s.ends_with(['.', '-']),
                "{k}: {s}"
            );
        }
    }
}

//! Finding the lock directory without spawning git.
//!
//! Order: `--dir`, `TASKLOCK_DIR`, the nearest `.locks/` at or above the working directory,
//! `.locks/` at the root of the main git worktree (so all worktrees of one repository share
//! it). Nothing else: outside a git repository with none of these there is no lock
//! directory, and commands that would create one refuse (exit 64) and point to
//! `tasklock init`, so that two agents started in `p/` and `p/sub/` never each create
//! their own.
//!
//! A `.locks/` found by the search must be owned by the caller or by root, like git's
//! `safe.directory` check (CVE-2022-24765): otherwise another user could plant
//! `/tmp/.locks` and decide who gets which key for every project under `/tmp`. A foreign
//! one is refused with an error, never skipped silently, unless `TASKLOCK_SHARED_DIRS`
//! names it. `--dir` and `TASKLOCK_DIR` are an explicit choice and are taken as given;
//! `doctor` reports their owner.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const DIR_NAME: &str = ".locks";

/// The opt-in for lock directories owned by another user: a `:`-separated list of lock
/// directories, or of the directories that contain them; `*` trusts every one.
pub const SHARED_ENV: &str = "TASKLOCK_SHARED_DIRS";

/// How the lock directory was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--dir`.
    Flag,
    /// `TASKLOCK_DIR`.
    Env,
    /// The nearest `.locks/` at or above the working directory.
    Nearest,
    /// `.locks/` at the root of the main git worktree (it may not exist yet).
    GitRoot,
}

/// The outcome of the search.
#[derive(Debug, Clone)]
pub enum Discovery {
    /// A lock directory to use (it may not exist yet: a git root's, or an explicit one).
    Found { dir: PathBuf, source: Source },
    /// The nearest `.locks/` belongs to another user and is not opted in.
    Foreign { dir: PathBuf, owner: u32 },
    /// Outside a git repository, no `.locks/` above, nothing explicit.
    Missing { cwd: PathBuf },
}

/// The lock directory for a command that may create it (checkout, heartbeat, …): refuses
/// a foreign one and a missing one (exit 64).
pub fn lock_dir(flag: Option<&Path>) -> Result<PathBuf> {
    discover(flag)?.for_store()
}

/// The lock directory for a command that only reads: as [`lock_dir`], but with no lock
/// directory anywhere it answers as for an empty one (`./.locks`, which it never creates).
pub fn read_dir(flag: Option<&Path>) -> Result<PathBuf> {
    discover(flag)?.for_reading()
}

/// The search from the working directory.
pub fn discover(flag: Option<&Path>) -> Result<Discovery> {
    if let Some(d) = explicit(flag) {
        return Ok(d);
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    Ok(discover_from(&cwd))
}

/// `--dir`, then `TASKLOCK_DIR`.
pub fn explicit(flag: Option<&Path>) -> Option<Discovery> {
    if let Some(d) = flag {
        return Some(Discovery::Found {
            dir: d.to_path_buf(),
            source: Source::Flag,
        });
    }
    std::env::var_os("TASKLOCK_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| Discovery::Found {
            dir: PathBuf::from(d),
            source: Source::Env,
        })
}

/// The search from `cwd`, without `--dir` and `TASKLOCK_DIR`.
pub fn discover_from(cwd: &Path) -> Discovery {
    if let Some(dir) = nearest(cwd) {
        return judge(dir, Source::Nearest);
    }
    if let Some(root) = main_worktree_root(cwd) {
        let dir = root.join(DIR_NAME);
        // A linked worktree outside the main one: the root's `.locks/` is not above us,
        // so it gets the same ownership check here.
        if dir.is_dir() {
            return judge(dir, Source::GitRoot);
        }
        return Discovery::Found {
            dir,
            source: Source::GitRoot,
        };
    }
    Discovery::Missing {
        cwd: cwd.to_path_buf(),
    }
}

/// The nearest directory named `.locks` at or above `cwd`.
fn nearest(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|d| d.join(DIR_NAME))
        .find(|c| c.is_dir())
}

fn judge(dir: PathBuf, source: Source) -> Discovery {
    match foreign_owner(&dir) {
        Some(owner) if !opted_in(&dir) => Discovery::Foreign { dir, owner },
        _ => Discovery::Found { dir, source },
    }
}

/// The owner of `dir` (or, for a symbolic link, of the link or of its target) when that
/// is neither the caller nor root.
pub fn foreign_owner(dir: &Path) -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let trusted = |uid: u32| uid == me || uid == 0;
    [std::fs::symlink_metadata(dir), std::fs::metadata(dir)]
        .into_iter()
        .flatten()
        .map(|m| m.uid())
        .find(|&uid| !trusted(uid))
}

/// Whether `TASKLOCK_SHARED_DIRS` names `dir` or the directory that contains it.
pub fn opted_in(dir: &Path) -> bool {
    let Some(list) = std::env::var_os(SHARED_ENV) else {
        return false;
    };
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let dir = canon(dir);
    let parent = dir.parent().map(Path::to_path_buf);
    std::env::split_paths(&list)
        .filter(|p| !p.as_os_str().is_empty())
        .any(|p| {
            p.as_os_str() == "*" || {
                let p = canon(&p);
                p == dir || Some(&p) == parent.as_ref()
            }
        })
}

/// A user's name from `/etc/passwd`, else the uid as text.
pub fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let id = f.nth(1)?;
                (id.parse() == Ok(uid)).then(|| name.to_string())
            })
        })
        .map_or_else(|| format!("uid {uid}"), |n| format!("{n} (uid {uid})"))
}

impl Discovery {
    /// The directory for a command that may create it.
    pub fn for_store(self) -> Result<PathBuf> {
        match self {
            Discovery::Found { dir, .. } => Ok(dir),
            other => Err(other.refusal()),
        }
    }

    /// The directory for a command that only reads.
    pub fn for_reading(self) -> Result<PathBuf> {
        match self {
            Discovery::Found { dir, .. } => Ok(dir),
            Discovery::Missing { cwd } => Ok(cwd.join(DIR_NAME)),
            other => Err(other.refusal()),
        }
    }

    /// The directory as `doctor` inspects it: the one found, the foreign one, or
    /// `./.locks` when there is none.
    pub fn dir(&self) -> PathBuf {
        match self {
            Discovery::Found { dir, .. } | Discovery::Foreign { dir, .. } => dir.clone(),
            Discovery::Missing { cwd } => cwd.join(DIR_NAME),
        }
    }

    /// The error for a foreign or missing lock directory (exit 64).
    pub fn refusal(&self) -> Error {
        match self {
            Discovery::Found { dir, .. } => {
                unreachable!("{} is a usable lock directory", dir.display())
            }
            Discovery::Foreign { dir, owner } => Error::LockDir {
                message: format!(
                    "refusing the lock directory {}: it belongs to {}, not to you or root, so that user could decide who gets which key",
                    dir.display(),
                    user_name(*owner)
                ),
                hint: format!(
                    "if you trust it (a shared setup), opt in with {SHARED_ENV}={} (a `:`-separated list; `*` trusts every one), or name it with --dir or TASKLOCK_DIR; otherwise run `tasklock init` at your project root to make a lock directory of your own there",
                    crate::error::shell_quote(&dir.display().to_string())
                ),
            },
            Discovery::Missing { cwd } => Error::LockDir {
                message: format!(
                    "no lock directory for {}: it is not in a git repository and there is no .locks/ above it, so tasklock would not know where the other agents look",
                    cwd.display()
                ),
                hint: "run `tasklock init` at the project root (every agent started below it then finds the same .locks/), or name a lock directory with --dir or TASKLOCK_DIR".into(),
            },
        }
    }
}

/// Where `tasklock init` puts the lock directory: `--dir`, `TASKLOCK_DIR`, the nearest
/// `.locks/` above if it is the caller's, else `.locks/` at the root of the main git
/// worktree, else in the working directory. Refuses when a foreign `.locks/` would still
/// be found first from the working directory.
pub fn init_dir(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = explicit(flag) {
        return d.for_store();
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    match discover_from(&cwd) {
        Discovery::Found { dir, .. } => Ok(dir),
        Discovery::Missing { cwd } => Ok(cwd.join(DIR_NAME)),
        foreign @ Discovery::Foreign { .. } => {
            let root = main_worktree_root(&cwd).unwrap_or_else(|| cwd.clone());
            let dir = root.join(DIR_NAME);
            // The new one must be nearer than the foreign one, or nothing is gained.
            match nearest(&cwd) {
                Some(n) if n.starts_with(&root) => Err(foreign.refusal()),
                _ => Ok(dir),
            }
        }
    }
}

/// The git directory shared by every worktree of the repository containing `start`
/// (`.git` of the main worktree, or a bare repository), if any. Read from `.git` files
/// and `commondir`, without running git.
pub fn git_common_dir(start: &Path) -> Option<PathBuf> {
    let dir = start.ancestors().find(|d| d.join(".git").exists())?;
    let gitdir = worktree_git_dir(dir)?;
    Some(match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(common) => {
            let common = gitdir.join(common.trim());
            common.canonicalize().unwrap_or(common)
        }
        Err(_) => gitdir,
    })
}

/// The git directory of the worktree whose top is `root` (its own, not the common one:
/// `.git` of the main worktree, `.git/worktrees/NAME` of a linked one), if any. Read from
/// the `.git` file, without running git.
pub fn worktree_git_dir(root: &Path) -> Option<PathBuf> {
    let dotgit = root.join(".git");
    let meta = std::fs::metadata(&dotgit).ok()?;
    if meta.is_dir() {
        return Some(dotgit);
    }
    let text = std::fs::read_to_string(&dotgit).ok()?;
    let gitdir = root.join(text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim());
    Some(gitdir.canonicalize().unwrap_or(gitdir))
}

/// The root of the main worktree of the repository containing `start`, if any.
pub fn main_worktree_root(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let dotgit = dir.join(".git");
        let Ok(meta) = std::fs::metadata(&dotgit) else {
            continue;
        };
        if meta.is_dir() {
            return Some(dir.to_path_buf());
        }
        // A linked worktree (or submodule): `.git` is a file `gitdir: <path>`.
        let text = std::fs::read_to_string(&dotgit).ok()?;
        let gitdir = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        let gitdir = dir.join(gitdir);
        let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) else {
            // No commondir: a submodule or a plain separate git dir; this is its own root.
            return Some(dir.to_path_buf());
        };
        let common = gitdir.join(common.trim());
        let common = common.canonicalize().unwrap_or(common);
        return if common.file_name().is_some_and(|n| n == ".git") {
            common.parent().map(Path::to_path_buf)
        } else {
            // A bare repository's worktree: no main worktree to share; use this one.
            Some(dir.to_path_buf())
        };
    }
    None
}

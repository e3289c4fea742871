//! Finding the lock directory without spawning git.
//!
//! Order: `--dir`, `TASKLOCK_DIR`, the nearest `.locks/` at or above the working directory,
//! `.locks/` at the root of the main git worktree (so all worktrees of one repository share
//! it), then `./.locks/`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const DIR_NAME: &str = ".locks";

pub fn lock_dir(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = flag {
        return Ok(d.to_path_buf());
    }
    if let Some(d) = std::env::var_os("TASKLOCK_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    Ok(find_from(&cwd))
}

pub fn find_from(cwd: &Path) -> PathBuf {
    for dir in cwd.ancestors() {
        let candidate = dir.join(DIR_NAME);
        if candidate.is_dir() {
            return candidate;
        }
    }
    if let Some(root) = main_worktree_root(cwd) {
        return root.join(DIR_NAME);
    }
    cwd.join(DIR_NAME)
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

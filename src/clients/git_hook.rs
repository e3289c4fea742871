//! `init --git-hook`: install the pre-commit guard (`tasklock guard-commit`) beside what is
//! there. A repository's hooks are shared by all its worktrees, so it is installed once.
//!
//! - Plain hooks (`.git/hooks`, or the directory `core.hooksPath` names): our
//!   `pre-commit` runs the guard, then the hook that was there before, kept as
//!   `pre-commit.before-tasklock`. The pre-commit framework's own script is such a hook,
//!   so it keeps running.
//! - husky (`core.hooksPath` is `.husky/_` or `.husky`): one line in `.husky/pre-commit`,
//!   the file the project keeps in git, so every clone gets it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// What marks our hook and our husky line.
pub const MARKER: &str = "tasklock guard-commit";
pub const CHAINED: &str = "pre-commit.before-tasklock";

const HOOK: &str = r#"#!/bin/sh
# tasklock: refuse a commit of files another agent has checked out, or that were edited
# under a checkout since lost (`tasklock guard-commit`). A pre-commit hook that was here
# before is kept as pre-commit.before-tasklock and still runs after this check.
if command -v tasklock >/dev/null 2>&1; then
    tasklock guard-commit || exit $?
else
    echo "tasklock: not on PATH; this commit is not checked against path checkouts" >&2
fi
if [ -x "$(dirname "$0")/pre-commit.before-tasklock" ]; then
    exec "$(dirname "$0")/pre-commit.before-tasklock" "$@"
fi
"#;

const HUSKY_LINE: &str = "if command -v tasklock >/dev/null 2>&1; then tasklock guard-commit; fi # tasklock guard-commit\n";

/// What installing the guard does (or would do): the file, the action (`created`,
/// `updated`, `unchanged`) and what.
pub struct Planned {
    pub path: PathBuf,
    pub action: &'static str,
    pub what: String,
}

/// Install the guard for the repository of `project` (or say what would be done).
/// `None` outside a git repository.
pub fn install(project: &Path, dry_run: bool) -> Result<Option<Planned>> {
    let Some(common) = crate::discover::git_common_dir(project) else {
        return Ok(None);
    };
    let hooks_path = git_config(project, "core.hooksPath");
    let planned = match hooks_path {
        Some(p) => {
            let dir = project.join(&p);
            let husky = dir.ends_with(".husky/_") || dir.ends_with(".husky");
            if husky {
                let top = if dir.ends_with("_") {
                    dir.parent().map(Path::to_path_buf).unwrap_or(dir.clone())
                } else {
                    dir.clone()
                };
                husky_line(&top.join("pre-commit"), dry_run)?
            } else {
                chain(&dir, dry_run, &format!("core.hooksPath {p}"))?
            }
        }
        None => chain(&common.join("hooks"), dry_run, "git hooks")?,
    };
    Ok(Some(planned))
}

fn git_config(dir: &Path, key: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["config", "--get", key])
        .current_dir(dir)
        .output()
        .ok()?;
    let v = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

fn chain(dir: &Path, dry_run: bool, place: &str) -> Result<Planned> {
    let hook = dir.join("pre-commit");
    let chained = dir.join(CHAINED);
    let existing = match std::fs::read(&hook) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(&hook, e)),
    };
    let planned = |action, what: String| Planned {
        path: hook.clone(),
        action,
        what,
    };
    match existing {
        Some(b) if String::from_utf8_lossy(&b).contains(MARKER) => Ok(planned(
            "unchanged",
            format!("pre-commit guard already installed ({place})"),
        )),
        Some(_) => {
            if std::fs::symlink_metadata(&chained).is_ok() {
                return Err(Error::Usage(format!(
                    "{} exists and is not tasklock's, and {} exists too: move one of them away and run `tasklock init --git-hook` again",
                    hook.display(),
                    chained.display()
                )));
            }
            if !dry_run {
                std::fs::rename(&hook, &chained).map_err(|e| Error::io(&chained, e))?;
                write_hook(&hook)?;
            }
            Ok(planned(
                "updated",
                format!(
                    "pre-commit guard ({place}); the hook that was there runs after it, as {CHAINED}"
                ),
            ))
        }
        None => {
            if !dry_run {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
                write_hook(&hook)?;
            }
            Ok(planned("created", format!("pre-commit guard ({place})")))
        }
    }
}

fn write_hook(path: &Path) -> Result<()> {
    std::fs::write(path, HOOK).map_err(|e| Error::io(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(path, e))
}

fn husky_line(file: &Path, dry_run: bool) -> Result<Planned> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(file, e)),
    };
    let planned = |action, what: &str| Planned {
        path: file.to_path_buf(),
        action,
        what: what.to_string(),
    };
    match text {
        Some(t) if t.contains(MARKER) => Ok(planned(
            "unchanged",
            "husky pre-commit already runs the guard",
        )),
        Some(t) => {
            if !dry_run {
                let sep = if t.is_empty() || t.ends_with('\n') {
                    ""
                } else {
                    "\n"
                };
                std::fs::write(file, format!("{t}{sep}{HUSKY_LINE}"))
                    .map_err(|e| Error::io(file, e))?;
            }
            Ok(planned(
                "updated",
                "husky pre-commit: a line runs the guard",
            ))
        }
        None => {
            if !dry_run {
                if let Some(d) = file.parent() {
                    std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
                }
                write_hook_text(file, HUSKY_LINE)?;
            }
            Ok(planned("created", "husky pre-commit running the guard"))
        }
    }
}

fn write_hook_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(path, e))
}

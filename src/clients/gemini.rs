//! Gemini CLI: the hooks `tasklock init` merges into a project's `.gemini/settings.json`
//! (the same hooks the extension in plugins/gemini carries in `hooks/hooks.json`), and the
//! names of the tools its hooks see. See docs/e2e.md for what the real CLI provides.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::hooks_json::{GEMINI_HOOK_EVENTS, GEMINI_SETTINGS_TEMPLATE, merge_hooks, read_object};
use crate::error::Result;

/// The tools BeforeTool is wired for: the file-writing tools (the edit gate) and the shell
/// (its `tasklock` commands are given the session's identity).
pub const BEFORE_TOOL_MATCHER: &str = "write_file|replace|run_shell_command";

/// Gemini CLI lets its hooks set no environment for the model's shell commands, so a
/// session's secret is kept for them in a file only its user can read,
/// `<worktree git dir>/tasklock/sessions/<session>` (beside the edit records; the
/// directory 0700, the file 0600), written by the session-start hook and removed at the
/// session's end. The BeforeTool hook has each `tasklock` command of the shell read it
/// (`TASKLOCK_SECRET_FILE`, [`secret_assignment`]), so the secret itself is never in a
/// command line.
pub fn secret_file(project: &Path, session: &str) -> Option<PathBuf> {
    let root = crate::paths::roots(project)?.worktree;
    let dir = crate::discover::worktree_git_dir(&root)?;
    Some(
        dir.join("tasklock")
            .join("sessions")
            .join(crate::key::encode(session)),
    )
}

/// Keep the session's secret for its shell commands ([`secret_file`]); nothing outside a
/// git repository.
pub fn keep_secret(project: &Path, session: &str, secret: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let Some(path) = secret_file(project, session) else {
        return Ok(());
    };
    let dir = path.parent().expect("the file is in a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| crate::error::Error::io(dir, e))?;
    // A directory that was there already must be ours and closed to others: whoever
    // could change it could swap the file for one holding their own secret.
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::symlink_metadata(dir).map_err(|e| crate::error::Error::io(dir, e))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if !meta.is_dir() || meta.uid() != me {
            return Err(crate::error::Error::Store(format!(
                "{} is not a directory of this user: the session's secret is not kept there, and its shell commands carry none",
                dir.display()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| crate::error::Error::io(dir, e))?;
        }
    }
    // Written whole under another name and renamed, never through a planted link.
    let tmp = dir.join(format!(".tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(secret.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| crate::error::Error::io(&path, e))
}

/// The session ended: its secret is nobody's to use any more.
pub fn forget_secret(project: &Path, session: &str) {
    if let Some(path) = secret_file(project, session) {
        let _ = std::fs::remove_file(path);
    }
}

/// `TASKLOCK_SECRET= TASKLOCK_SECRET_FILE=FILE`: the assignments that give a `tasklock`
/// command of the session's shell its secret, read from the file when the command runs
/// (Gemini CLI refuses a command with `$(…)` in it, so the file is named, not read by the
/// shell; an inherited `TASKLOCK_SECRET` is blanked so that it does not win). `None` when
/// the session has no secret kept.
pub fn secret_assignment(project: &Path, session: &str) -> Option<String> {
    let path = secret_file(project, session).filter(|p| p.is_file())?;
    let path = path.to_str()?;
    Some(format!(
        "{}= {}={}",
        crate::secret::ENV,
        crate::secret::FILE_ENV,
        crate::error::shell_quote(path)
    ))
}

/// `.gemini/settings.json` as read: its path, whether it existed, and the document.
pub struct GeminiSettings {
    pub path: PathBuf,
    pub existed: bool,
    doc: Value,
}

/// Read the project's `.gemini/settings.json` (refused, naming the file, when it is not a
/// JSON object or its hooks have the wrong types: `init` then changes nothing).
pub fn read(project: &Path) -> Result<GeminiSettings> {
    let path = project.join(".gemini").join("settings.json");
    let (existing, doc) = read_object(&path, &GEMINI_HOOK_EVENTS)?;
    Ok(GeminiSettings {
        path,
        existed: existing.is_some(),
        doc,
    })
}

impl GeminiSettings {
    /// Add tasklock's hook groups where missing (other settings and hooks are kept);
    /// returns the events added to.
    pub fn merge(&mut self) -> Vec<String> {
        let template: Value =
            serde_json::from_str(GEMINI_SETTINGS_TEMPLATE).expect("the Gemini template is JSON");
        merge_hooks(&mut self.doc, &template, &GEMINI_HOOK_EVENTS)
    }

    /// The file's new text.
    pub fn text(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.doc).expect("a JSON value serializes");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_wires_each_event_and_the_before_tool_matcher() {
        let t: Value = serde_json::from_str(GEMINI_SETTINGS_TEMPLATE).unwrap();
        assert_eq!(
            t["hooks"].as_object().unwrap().len(),
            GEMINI_HOOK_EVENTS.len()
        );
        for (event, hook_event) in GEMINI_HOOK_EVENTS {
            let c = t["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .unwrap();
            assert!(
                super::super::hooks_json::calls_tasklock_hook(c, hook_event),
                "{event}: {c}"
            );
            // Gemini CLI's timeouts are milliseconds.
            assert_eq!(t["hooks"][event][0]["hooks"][0]["timeout"], 10000);
        }
        assert_eq!(t["hooks"]["BeforeTool"][0]["matcher"], BEFORE_TOOL_MATCHER);
    }
}

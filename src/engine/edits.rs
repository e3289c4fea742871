//! Who last edited each file of a worktree: the record behind "a commit carries only the
//! committer's own edits". The edit hook (Claude Code's PostToolUse after Edit, Write,
//! MultiEdit or NotebookEdit) records every edit; the pre-commit guard refuses a commit
//! that stages a file another live agent edited last, and `tasklock stage` stages the
//! caller's own.
//!
//! Kept beside git's state of that worktree, not in the store: `<worktree git dir>/
//! tasklock/edits/` (`.git/tasklock/edits/` in the main worktree, `.git/worktrees/NAME/
//! tasklock/edits/` in a linked one), because the fact is about one working tree on one
//! machine. Two worktrees (or two clones sharing a PostgreSQL store) each have their own
//! `src/a.rs`, and an edit of one is never in a commit of the other.
//!
//! One file per edited file, named by its path encoded as keys are, holding one JSON
//! object: `{"file", "agent", "at"}`. An edit replaces it whole (temp file + `rename`), so
//! there is one entry per file whatever the number of edits, and the last edit wins.
//! Entries are dropped when their agent's session ends (the session-end hook), when the
//! guard meets one whose agent is dead, and after [`RETENTION`].
//!
//! Writers take a shared `flock` on `.lock` in the directory, and whoever drops entries
//! an exclusive one, so an entry is never dropped just after a newer edit replaced it.
//! Nobody waits for it without limit: a process stopped while holding it would hang
//! every later hook. Commands wait `guard_timeout` at most, hooks [`HOOK_WAIT`] at most
//! (see [`wait_for`]), and then give up with an error naming the holder.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::error::{Error, Result};

/// An entry older than this is forgotten, whoever made it.
pub const RETENTION_DAYS: i64 = 7;

/// A temp file left by a killed writer is removed after this many seconds.
const TEMP_GRACE_SECS: u64 = 60;

/// An entry bigger than this is not one.
const MAX_ENTRY_BYTES: u64 = 64 << 10;

/// The last edit of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    /// Relative to the worktree top, as `paths::normalize_file` gives it.
    pub file: String,
    /// The agent that edited it: a session, or `<session>/<subagent>`.
    pub agent: String,
    pub at: Time,
}

impl Edit {
    /// Past the retention at `now`?
    pub fn expired(&self, now: &Time) -> bool {
        *now - self.at > chrono::Duration::days(RETENTION_DAYS)
    }
}

/// Where the edits of the worktree whose top is `root` are kept; `None` outside git.
pub fn dir(root: &Path) -> Option<PathBuf> {
    crate::discover::worktree_git_dir(root).map(|d| d.join("tasklock").join("edits"))
}

fn entry_path(dir: &Path, file: &str) -> PathBuf {
    dir.join(crate::key::encode(file))
}

/// The longest a hook waits for the lock: the hooks `init` writes time out after 10 s,
/// when the client kills the hook and goes on without it, so a hook gives up first and
/// says so.
pub const HOOK_WAIT: Duration = Duration::from_secs(5);

/// How long to wait for the lock: `TASKLOCK_GUARD_TIMEOUT` when set, else
/// `guard_timeout` (config.yaml; the default when unknown); a hook (`hook: true`) at
/// most [`HOOK_WAIT`].
pub fn wait_for(guard_timeout: Option<Duration>, hook: bool) -> Duration {
    let wait = std::env::var("TASKLOCK_GUARD_TIMEOUT")
        .ok()
        .and_then(|v| crate::duration::parse(&v).ok())
        .or(guard_timeout)
        .unwrap_or_else(|| crate::config::Config::default().guard_timeout);
    if hook { wait.min(HOOK_WAIT) } else { wait }
}

/// `.lock` of `dir`, locked shared or `exclusive`, waiting `wait` at most.
fn lock(dir: &Path, exclusive: bool, wait: Duration) -> Result<std::fs::File> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    let started = Instant::now();
    loop {
        let tried = if exclusive {
            f.try_lock()
        } else {
            f.try_lock_shared()
        };
        match tried {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        let waited = started.elapsed();
        if waited >= wait {
            return Err(Error::Store(format!(
                "gave up after {} waiting for the lock on {}, {}. The records of who edited which file wait for it; find that process and let it go on (kill -CONT PID if it was stopped) or end it; `guard_timeout` in config.yaml sets how long commands wait (hooks wait {} at most)",
                crate::duration::format(wait),
                path.display(),
                holder_words(&path),
                crate::duration::format(HOOK_WAIT),
            )));
        }
        std::thread::sleep((wait - waited).min(Duration::from_millis(20)));
    }
}

/// "held by pid 123 (tasklock, stopped)", or "held by another process".
fn holder_words(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Some(pid) = std::fs::metadata(path)
        .ok()
        .and_then(|m| crate::os::flock_holder(m.dev(), m.ino()))
    else {
        return "held by another process".into();
    };
    let info = crate::os::process(pid);
    let stopped = if info.as_ref().is_some_and(|p| p.stopped) {
        ", stopped"
    } else {
        ""
    };
    match info.and_then(|p| p.name) {
        Some(name) => format!("held by pid {pid} ({name}{stopped})"),
        None if stopped.is_empty() => format!("held by pid {pid}"),
        None => format!("held by pid {pid} (stopped)"),
    }
}

/// Record `edit`, replacing the file's previous entry: one small write and a rename.
/// Waits `wait` at most for the lock ([`wait_for`]).
pub fn record(dir: &Path, edit: &Edit, wait: Duration) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let _lock = lock(dir, false, wait)?;
    let mut text = serde_json::to_vec(edit)
        .map_err(|e| Error::Store(format!("cannot encode an edit record: {e}")))?;
    text.push(b'\n');
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".tmp.{}.{nanos}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, e))?;
    let path = entry_path(dir, &edit.file);
    let done = f
        .write_all(&text)
        .map_err(|e| Error::io(&tmp, e))
        .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e)));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

fn read_path(path: &Path) -> Result<Option<Edit>> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A link or something else planted here is not an entry.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    let mut text = Vec::new();
    f.take(MAX_ENTRY_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(path, e))?;
    // Damage is no entry: the file counts as edited by nobody.
    Ok(serde_json::from_slice(&text).ok())
}

/// The last edit of `file`, if one is on record.
pub fn read(dir: &Path, file: &str) -> Result<Option<Edit>> {
    Ok(read_path(&entry_path(dir, file))?.filter(|e| e.file == file))
}

/// Every entry on record, in no particular order.
pub fn read_all(dir: &Path) -> Result<Vec<Edit>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        if let Some(edit) = read_path(&e.path())?
            && crate::key::encode(&edit.file).as_bytes() == name.as_encoded_bytes()
        {
            out.push(edit);
        }
    }
    Ok(out)
}

/// Drop the entries `drop` picks (judged again under the exclusive lock), and temp files
/// left by killed writers. Returns how many entries were dropped. Waits `wait` at most
/// for the lock ([`wait_for`]).
pub fn forget(dir: &Path, drop: &mut dyn FnMut(&Edit) -> bool, wait: Duration) -> Result<usize> {
    if !dir.is_dir() {
        return Ok(0);
    }
    let _lock = lock(dir, true, wait)?;
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut dropped = 0;
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.as_encoded_bytes();
        if name.starts_with(b".tmp.") {
            let old = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > TEMP_GRACE_SECS);
            if old {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if name.starts_with(b".") {
            continue;
        }
        if let Some(edit) = read_path(&path)?
            && drop(&edit)
        {
            match std::fs::remove_file(&path) {
                Ok(()) => dropped += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
    }
    Ok(dropped)
}

/// Is `agent` the committer `me` or one of its subagents? (A session commits its
/// subagents' work.)
pub fn is_own(agent: &str, me: &str) -> bool {
    agent == me || crate::identity::is_subagent_of(agent, me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&chrono::Utc)
    }

    const W: Duration = Duration::from_secs(1);

    fn edit(file: &str, agent: &str) -> Edit {
        Edit {
            file: file.into(),
            agent: agent.into(),
            at: at("2026-01-01T00:00:00Z"),
        }
    }

    #[test]
    fn one_entry_per_file_the_last_edit_wins_and_forget_drops() {
        let td = tempfile::tempdir().unwrap();
        let dir = td.path().join("edits");
        assert_eq!(read(&dir, "src/x").unwrap(), None);
        assert!(read_all(&dir).unwrap().is_empty());
        record(&dir, &edit("src/x", "a"), W).unwrap();
        record(&dir, &edit("src/y", "a"), W).unwrap();
        record(&dir, &edit("src/x", "b"), W).unwrap();
        assert_eq!(read(&dir, "src/x").unwrap().unwrap().agent, "b");
        let mut all = read_all(&dir).unwrap();
        all.sort_by(|x, y| x.file.cmp(&y.file));
        assert_eq!(all, vec![edit("src/x", "b"), edit("src/y", "a")]);
        // Damage is no entry.
        std::fs::write(entry_path(&dir, "src/z"), b"{\"file\":").unwrap();
        assert_eq!(read(&dir, "src/z").unwrap(), None);
        assert_eq!(read_all(&dir).unwrap().len(), 2);
        // A stale temp file goes with the next forget; a fresh one stays.
        std::fs::write(dir.join(".tmp.1.2"), b"x").unwrap();
        assert_eq!(forget(&dir, &mut |e| e.agent == "a", W).unwrap(), 1);
        assert_eq!(read_all(&dir).unwrap(), vec![edit("src/x", "b")]);
        assert!(dir.join(".tmp.1.2").exists());
        assert!(!edit("f", "a").expired(&at("2026-01-07T23:00:00Z")));
        assert!(edit("f", "a").expired(&at("2026-01-08T00:00:01Z")));
    }

    #[test]
    fn own_edits_are_the_agents_and_its_subagents() {
        assert!(is_own("s", "s"));
        assert!(is_own("s/sub", "s"));
        assert!(!is_own("s", "s/sub"));
        assert!(!is_own("s2", "s"));
    }
}

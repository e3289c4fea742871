//! Edit stamps: under which checkout (key and fencing token) an agent was allowed to edit
//! a file, so that a commit of the file can be refused once that checkout is lost: the
//! fencing check, made when the commit happens.
//!
//! Kept per repository, beside git's own state: `<git common dir>/tasklock/stamps/`,
//! one file per agent (its id encoded as keys are), one JSON line per allowed edit,
//! appended with a single `write`; for each file the last line counts. The edit hook
//! writes them, the pre-commit guard reads them.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::error::{Error, Result};

/// A stamp file bigger than this is cut to its newest lines when next written.
const MAX_STAMPS_BYTES: u64 = 4 << 20;

/// One allowed edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The file, relative to the worktree top (as `paths::normalize_file` gives it).
    pub file: String,
    pub key: String,
    pub token: u64,
    pub at: Time,
}

/// Where the stamps of the repository containing `start` live; `None` outside git.
pub fn dir(start: &Path) -> Option<PathBuf> {
    crate::discover::git_common_dir(start).map(|d| d.join("tasklock").join("stamps"))
}

fn file_of(dir: &Path, agent: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", crate::key::encode(agent)))
}

/// Record that `agent` edits `stamp.file` under `stamp.key`/`stamp.token`.
pub fn record(dir: &Path, agent: &str, stamp: &Stamp) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = file_of(dir, agent);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.len() > MAX_STAMPS_BYTES) {
        compact(&path)?;
    }
    let mut line = serde_json::to_vec(stamp)
        .map_err(|e| Error::Store(format!("cannot encode an edit stamp: {e}")))?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    f.write_all(&line).map_err(|e| Error::io(&path, e))
}

/// Keep only the last stamp of each file.
fn compact(path: &Path) -> Result<()> {
    let latest = read_file(path)?;
    let mut text = Vec::new();
    for s in latest.values() {
        serde_json::to_writer(&mut text, s).expect("a stamp serializes");
        text.push(b'\n');
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

fn read_file(path: &Path) -> Result<HashMap<String, Stamp>> {
    let mut out = HashMap::new();
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(path, e)),
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Ok(out);
    }
    let mut text = String::new();
    f.take(MAX_STAMPS_BYTES * 2)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(path, e))?;
    // A line cut short by a crash, or not a stamp, is skipped.
    for line in text.lines() {
        if let Ok(s) = serde_json::from_str::<Stamp>(line) {
            out.insert(s.file.clone(), s);
        }
    }
    Ok(out)
}

/// The latest stamp of each file `agent` edited, by file.
pub fn read(dir: &Path, agent: &str) -> Result<HashMap<String, Stamp>> {
    read_file(&file_of(dir, agent))
}

/// As [`read`], for a stamp file found by listing the directory.
pub fn read_path(path: &Path) -> Result<HashMap<String, Stamp>> {
    read_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(file: &str, token: u64) -> Stamp {
        Stamp {
            file: file.into(),
            key: "k".into(),
            token,
            at: chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        }
    }

    #[test]
    fn the_last_stamp_of_a_file_counts_and_torn_lines_are_skipped() {
        let td = tempfile::tempdir().unwrap();
        let dir = td.path().join("stamps");
        record(&dir, "a/b", &stamp("src/x", 1)).unwrap();
        record(&dir, "a/b", &stamp("src/y", 2)).unwrap();
        record(&dir, "a/b", &stamp("src/x", 3)).unwrap();
        // A line cut short by a crash.
        let path = file_of(&dir, "a/b");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"file\":\"src/z\",\"ke").unwrap();
        let got = read(&dir, "a/b").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got["src/x"].token, 3);
        assert_eq!(got["src/y"].token, 2);
        assert!(read(&dir, "someone-else").unwrap().is_empty());
        compact(&path).unwrap();
        assert_eq!(read(&dir, "a/b").unwrap(), got);
    }
}

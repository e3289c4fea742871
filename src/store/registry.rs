//! The agent registry (`agents/<encoded id>`), per-key notes (`notes/<encoded key>.jsonl`)
//! and how each key's last checkout ended (`ended/<encoded key>.json`).

use std::fs::OpenOptions;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use super::{FileStore, Guard};
use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;

/// What the registry knows about one agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentEntry {
    pub version: u32,
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub boot_id: Option<String>,
    #[serde(default)]
    pub pid_ns: Option<String>,
    /// The agent's long-lived process (for Claude Code: the parent of a hook command).
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub pid_start: Option<u64>,
    pub first_seen: Time,
    #[serde(default)]
    pub last_heartbeat: Option<Time>,
    #[serde(default)]
    pub heartbeats: u64,
    #[serde(default)]
    pub status: Option<String>,
    /// Set when the agent ended (session end, or its watcher saw its process die).
    #[serde(default)]
    pub ended_at: Option<Time>,
    #[serde(default)]
    pub ended_reason: Option<String>,
    /// For a subagent: the agent (session) that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// One checkpoint in a key's history.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Note {
    pub ts: Time,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    pub text: String,
}

/// How a key's last checkout ended: one small file per key, replaced on every end, so
/// the next holder learns it with one read (never a scan of the audit log).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ended {
    pub version: u32,
    pub key: String,
    /// The holder whose checkout ended.
    pub agent: crate::identity::Agent,
    pub token: u64,
    pub acquired_at: Time,
    pub ended_at: Time,
    /// `released`, `force_released`, `timeout`, `agent_death` or `session_end`.
    pub how: String,
    /// With `agent_death`, when known: `process_gone`, `pid_reused`, `silent` or `ended`.
    #[serde(default)]
    pub cause: Option<String>,
    /// Who ended it, when not the holder itself.
    #[serde(default)]
    pub by: Option<String>,
    /// The `--note` given to the release.
    #[serde(default)]
    pub note: Option<String>,
}

const ENDED: &str = "ended";
const AGENTS: &str = "agents";
const NOTES: &str = "notes";
/// Notes files are read from the end; this bounds what a read ever loads.
const NOTES_TAIL_BYTES: u64 = 64 * 1024;

impl FileStore {
    fn agent_path(&self, id: &str) -> std::path::PathBuf {
        self.root().join(AGENTS).join(key::encode(id))
    }

    /// The registry entry of an agent. A damaged entry counts as absent: the agent is then
    /// judged by its leases alone, which never releases anything early.
    pub fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        let path = self.agent_path(id);
        match read_small(&path)? {
            Some(bytes) => Ok(serde_json::from_slice::<AgentEntry>(&bytes)
                .ok()
                .filter(|e| e.id == id)),
            None => Ok(None),
        }
    }

    pub fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()> {
        let dir = self.root().join(AGENTS);
        self.ensure_dir(&dir)?;
        let mut bytes = serde_json::to_vec_pretty(entry)
            .map_err(|e| Error::Store(format!("cannot encode agent entry: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &self.agent_path(&entry.id))
    }

    /// Remove an agent's registry entry (absent already is fine).
    pub fn remove_agent(&self, _g: &Guard, id: &str) -> Result<()> {
        let path = self.agent_path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Every readable registry entry.
    pub fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        let mut out: Vec<AgentEntry> = read_json_dir(&self.root().join(AGENTS))?
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    fn ended_path(&self, key_name: &str) -> std::path::PathBuf {
        self.root()
            .join(ENDED)
            .join(format!("{}.json", key::encode(key_name)))
    }

    /// Record how a key's checkout ended (replacing the previous fact).
    pub fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()> {
        self.ensure_dir(&self.root().join(ENDED))?;
        let mut bytes = serde_json::to_vec_pretty(ended)
            .map_err(|e| Error::Store(format!("cannot encode ended checkout: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &self.ended_path(&ended.key))
    }

    /// How the key's last checkout ended, if known. A damaged file counts as unknown.
    pub fn read_ended(&self, key_name: &str) -> Result<Option<Ended>> {
        Ok(read_small(&self.ended_path(key_name))?
            .and_then(|b| serde_json::from_slice::<Ended>(&b).ok())
            .filter(|e| e.key == key_name))
    }

    /// Append a note to a key's history (one `write` on an `O_APPEND` file).
    pub fn append_note(&self, _g: &Guard, key_name: &str, note: &Note) -> Result<()> {
        let dir = self.root().join(NOTES);
        self.ensure_dir(&dir)?;
        let path = dir.join(format!("{}.jsonl", key::encode(key_name)));
        let mut line = serde_json::to_vec(note)
            .map_err(|e| Error::Store(format!("cannot encode note: {e}")))?;
        line.push(b'\n');
        append_line(&path, &line)
    }

    /// The last `n` notes of a key, oldest first. Unreadable lines are skipped.
    pub fn last_notes(&self, key_name: &str, n: usize) -> Result<Vec<Note>> {
        let path = self
            .root()
            .join(NOTES)
            .join(format!("{}.jsonl", key::encode(key_name)));
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            return Ok(Vec::new());
        }
        use std::io::{Seek, SeekFrom};
        let start = meta.len().saturating_sub(NOTES_TAIL_BYTES);
        file.seek(SeekFrom::Start(start))
            .map_err(|e| Error::io(&path, e))?;
        let mut buf = Vec::new();
        file.take(NOTES_TAIL_BYTES)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(&path, e))?;
        let text = String::from_utf8_lossy(&buf);
        let mut notes: Vec<Note> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let skip = notes.len().saturating_sub(n);
        Ok(notes.split_off(skip))
    }
}

/// Read a small file without following symlinks; `None` when absent or not a file.
pub(crate) fn read_small(path: &std::path::Path) -> Result<Option<Vec<u8>>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() || meta.len() > super::MAX_RECORD_BYTES {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(bytes))
}

/// Every readable `T` in the JSON files of `dir`, with their paths; damaged files and
/// other files are skipped (all of these are soft state rebuilt by the next write).
pub(crate) fn read_json_dir<T: serde::de::DeserializeOwned>(
    dir: &std::path::Path,
) -> Result<Vec<(std::path::PathBuf, T)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if let Some(bytes) = read_small(&path)?
            && let Ok(v) = serde_json::from_slice::<T>(&bytes)
        {
            out.push((path, v));
        }
    }
    Ok(out)
}

/// Append one line with a single `write` on an `O_APPEND` file (never through a symlink).
///
/// A process killed inside `write` can leave part of a line: the kernel copies a write
/// page by page and stops at a page boundary for a fatal signal. Every append runs under
/// the guard, so a file that does not end in a newline here ends in such a fragment,
/// and it is cut off before the new line is written.
pub(crate) fn append_line(path: &std::path::Path, line: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
        .map_err(|e| Error::io(path, super::symlink_hint(e)))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1)
            .map_err(|e| Error::io(path, e))?;
        if last[0] != b'\n' {
            let keep = complete_lines_end(&f, len).map_err(|e| Error::io(path, e))?;
            f.set_len(keep).map_err(|e| Error::io(path, e))?;
        }
    }
    f.write_all(line).map_err(|e| Error::io(path, e))
}

/// Where the last complete line of a file of `len` bytes ends (0 when there is none).
fn complete_lines_end(f: &std::fs::File, len: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut end = len;
    let mut buf = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        f.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

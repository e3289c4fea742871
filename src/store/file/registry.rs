//! The file store's agent registry (`agents/<encoded id>`), per-key notes
//! (`notes/<encoded key>.jsonl`) and how each key's last checkout ended
//! (`ended/<encoded key>.json`).

use std::io::{Read, Write};

use super::{Dir, FileGuard, FileStore};
use crate::error::{Error, Result};
use crate::key;
use crate::store::{AgentEntry, Ended, Note};

const ENDED: &str = "ended";
const AGENTS: &str = "agents";
const NOTES: &str = "notes";
const WATCHERS: &str = "watchers";
/// The time of the project's last sweep ([`crate::store::Store::sweep_turn`]).
const SWEPT: &str = "swept";
/// Notes files are read from the end; this bounds what a read ever loads.
const NOTES_TAIL_BYTES: u64 = 64 * 1024;

impl FileStore {
    /// The registry entry of an agent. A damaged entry counts as absent: the agent is then
    /// judged by its leases alone, which never releases anything early.
    pub fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        let Some(dir) = self.sub(AGENTS, false)? else {
            return Ok(None);
        };
        match read_small(&dir, &key::encode(id))? {
            Some(bytes) => Ok(serde_json::from_slice::<AgentEntry>(&bytes)
                .ok()
                .filter(|e| e.id == id)),
            None => Ok(None),
        }
    }

    pub fn write_agent(&self, g: &FileGuard, entry: &AgentEntry) -> Result<()> {
        let dir = self.sub(AGENTS, true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(entry)
            .map_err(|e| Error::Store(format!("cannot encode agent entry: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &key::encode(&entry.id))
    }

    /// Remove an agent's registry entry (absent already is fine).
    pub fn remove_agent(&self, _g: &FileGuard, id: &str) -> Result<()> {
        let Some(dir) = self.sub(AGENTS, false)? else {
            return Ok(());
        };
        let name = key::encode(id);
        dir.unlink(&name).map_err(|e| Error::io(dir.join(&name), e))
    }

    /// Every readable registry entry.
    pub fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        let mut out: Vec<AgentEntry> = self
            .read_json_dir(&[AGENTS])?
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// See [`crate::store::Store::sweep_turn`]. `swept` holds the last sweep's time (RFC
    /// 3339); a missing or unreadable one counts as none.
    pub fn sweep_turn(
        &self,
        g: &FileGuard,
        now: &crate::clock::Time,
        every: std::time::Duration,
    ) -> Result<bool> {
        let last = read_small(&self.dir, SWEPT)?
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t.trim()).ok())
            .map(|t| t.with_timezone(&chrono::Utc));
        if !crate::store::sweep_due(last.as_ref(), now, every) {
            return Ok(false);
        }
        let text = format!(
            "{}\n",
            now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        );
        self.publish_replace(g, text.as_bytes(), &self.dir, SWEPT)?;
        Ok(true)
    }

    /// Record how a key's checkout ended (replacing the previous fact).
    pub fn write_ended(&self, g: &FileGuard, ended: &Ended) -> Result<()> {
        let dir = self.sub(ENDED, true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(ended)
            .map_err(|e| Error::Store(format!("cannot encode ended checkout: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(
            g,
            &bytes,
            &dir,
            &format!("{}.json", key::encode(&ended.key)),
        )
    }

    /// How the key's last checkout ended, if known. A damaged file counts as unknown.
    pub fn read_ended(&self, key_name: &str) -> Result<Option<Ended>> {
        let Some(dir) = self.sub(ENDED, false)? else {
            return Ok(None);
        };
        Ok(
            read_small(&dir, &format!("{}.json", key::encode(key_name)))?
                .and_then(|b| serde_json::from_slice::<Ended>(&b).ok())
                .filter(|e| e.key == key_name),
        )
    }

    /// Every readable ended checkout (for recovering a lost fencing counter).
    pub(crate) fn all_ended(&self) -> Result<Vec<Ended>> {
        Ok(self
            .read_json_dir::<Ended>(&[ENDED])?
            .into_iter()
            .map(|(_, e)| e)
            .collect())
    }

    /// Append a note to a key's history (one `write` on an `O_APPEND` file). A FIFO,
    /// socket or device where the notes file belongs is an error naming it.
    pub fn append_note(&self, _g: &FileGuard, key_name: &str, note: &Note) -> Result<()> {
        let dir = self.sub(NOTES, true)?.expect("created");
        let mut line = serde_json::to_vec(note)
            .map_err(|e| Error::Store(format!("cannot encode note: {e}")))?;
        line.push(b'\n');
        append_line(&dir, &format!("{}.jsonl", key::encode(key_name)), &line)
    }

    /// The last `n` notes of a key, oldest first. Unreadable lines are skipped, and so is
    /// a notes file that is not a regular file or cannot be opened (notes are history,
    /// never needed to decide anything).
    pub fn last_notes(&self, key_name: &str, n: usize) -> Result<Vec<Note>> {
        let Some(dir) = self.sub(NOTES, false)? else {
            return Ok(Vec::new());
        };
        let name = format!("{}.jsonl", key::encode(key_name));
        let path = dir.join(&name);
        let Ok(Some(mut file)) = dir.open_regular(&name) else {
            return Ok(Vec::new());
        };
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
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

    /// An exclusive lock on `watchers/<agent>`, held for as long as the file is open;
    /// `None` when another process holds it.
    pub fn lock_watcher(&self, agent_id: &str) -> Result<Option<std::fs::File>> {
        let dir = self.sub(WATCHERS, true)?.expect("created");
        let name = key::encode(agent_id);
        let path = dir.join(&name);
        let file = dir
            .open_rw(&name, false)
            .map_err(|e| Error::io(&path, super::symlink_hint(e)))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
        }
    }

    /// Every readable `T` in the JSON files of the directory `parts`, with their paths;
    /// damaged, unreadable and other files are skipped (all of these are soft state
    /// rebuilt by the next write).
    pub(crate) fn read_json_dir<T: serde::de::DeserializeOwned>(
        &self,
        parts: &[&str],
    ) -> Result<Vec<(std::path::PathBuf, T)>> {
        let Some(dir) = self.dir_at(parts, false)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (name, is_dir) in dir.entries().map_err(|e| Error::io(dir.path(), e))? {
            if is_dir {
                continue;
            }
            if let Some(bytes) = read_small(&dir, &name)?
                && let Ok(v) = serde_json::from_slice::<T>(&bytes)
            {
                out.push((dir.join(&name), v));
            }
        }
        Ok(out)
    }
}

/// Read a small file of `dir` without following symlinks; `None` when absent, not a
/// regular file, too big, or not readable by us.
pub(crate) fn read_small(dir: &Dir, name: &str) -> Result<Option<Vec<u8>>> {
    let path = dir.join(name);
    let mut file = match dir.open_read(name) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
    if !meta.is_file() || meta.len() > super::MAX_RECORD_BYTES {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    // Through `take`, whose read_to_end does not ask the size and position again (a
    // `File`'s does: two more calls); no limit, as before.
    (&mut file)
        .take(u64::MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(&path, e))?;
    Ok(Some(bytes))
}

/// Append one line to `name` in `dir` with a single `write` on an `O_APPEND` file (never
/// through a symlink, never to a FIFO, socket or device).
///
/// A process killed inside `write` can leave part of a line: the kernel copies a write
/// page by page and stops at a page boundary for a fatal signal. Every append runs under
/// the guard, so a file that does not end in a newline here ends in such a fragment,
/// and it is cut off before the new line is written.
pub(crate) fn append_line(dir: &Dir, name: &str, line: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(name);
    // The size as opened: every append runs under the guard.
    let (mut f, meta) = dir
        .open_rw_stat(name, true)
        .map_err(|e| Error::io(&path, super::symlink_hint(e)))?;
    let len = meta.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1)
            .map_err(|e| Error::io(&path, e))?;
        if last[0] != b'\n' {
            let keep = complete_lines_end(&f, len).map_err(|e| Error::io(&path, e))?;
            f.set_len(keep).map_err(|e| Error::io(&path, e))?;
        }
    }
    f.write_all(line).map_err(|e| Error::io(&path, e))
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

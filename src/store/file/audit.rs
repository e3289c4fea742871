//! The file store's audit log: `audit.jsonl`, rotated to `audit.jsonl.1`, `.2`, …

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{AUDIT, FileStore};
use crate::error::{Error, Result};
use crate::store::{AuditEvent, AuditFollow};

impl FileStore {
    /// Every event in the audit files, oldest first; returns how many lines could not be
    /// read as events.
    pub(super) fn read_audit(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        let mut unreadable = 0;
        for path in self.audit_files() {
            let file = match super::at::open_regular_path(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&path, e)),
            };
            for line in BufReader::new(file).lines() {
                let line = line.map_err(|e| Error::io(&path, e))?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<AuditEvent>(&line) {
                    Ok(e) => each(e),
                    Err(_) => unreadable += 1,
                }
            }
        }
        Ok(unreadable)
    }
}

/// Follows the audit log through rotation.
///
/// Files are told apart by inode: the current file is held open, so lines written to it
/// just before it is rotated away are still read; files rotated in and out between two
/// polls are read whole, unless more rotations than `audit_keep` happened in between.
pub(super) struct Follower<'a> {
    store: &'a FileStore,
    path: PathBuf,
    cur: Option<Followed>,
    seen: HashSet<u64>,
    started: bool,
}

impl<'a> Follower<'a> {
    pub(super) fn new(store: &'a FileStore) -> Follower<'a> {
        let path = store.root().join(AUDIT);
        // Open the current file first, so nothing appended after the first read is missed.
        let cur = open_current(&path);
        Follower {
            store,
            path,
            cur,
            seen: HashSet::new(),
            started: false,
        }
    }
}

impl AuditFollow for Follower<'_> {
    fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>> {
        let mut fresh = Vec::new();
        if !self.started {
            self.started = true;
            let skip = self.cur.as_ref().map(|c| c.ino);
            read_rotated(self.store, &self.path, skip, &mut self.seen, &mut |e| {
                fresh.push(e)
            });
            if let Some(c) = self.cur.as_mut() {
                c.drain(&mut |e| fresh.push(e));
            }
            return Ok(fresh);
        }
        std::thread::sleep(timeout);
        if let Some(c) = self.cur.as_mut() {
            c.drain(&mut |e| fresh.push(e));
        }
        let on_disk = std::fs::metadata(&self.path).map(|m| m.ino()).ok();
        if on_disk.is_some() && on_disk != self.cur.as_ref().map(|c| c.ino) {
            // Rotated (once or more), or created: finish the old file, read any file
            // rotated in and out since, then follow the new current file.
            if let Some(c) = self.cur.as_mut() {
                c.drain(&mut |e| fresh.push(e));
                self.seen.insert(c.ino);
            }
            let next = open_current(&self.path);
            let skip = next.as_ref().map(|n| n.ino);
            read_rotated(self.store, &self.path, skip, &mut self.seen, &mut |e| {
                fresh.push(e)
            });
            self.cur = next;
            if let Some(c) = self.cur.as_mut() {
                c.drain(&mut |e| fresh.push(e));
            }
        }
        Ok(fresh)
    }
}

/// The file being followed: an open handle, its inode, and where its first line not yet
/// read starts. An unfinished last line is read again next time: a writer killed
/// mid-line leaves a fragment that the next append cuts off and writes over.
struct Followed {
    file: File,
    ino: u64,
    offset: u64,
}

impl Followed {
    fn drain(&mut self, each: &mut dyn FnMut(AuditEvent)) {
        let mut buf = String::new();
        if self.file.seek(SeekFrom::Start(self.offset)).is_err()
            || self.file.read_to_string(&mut buf).is_err()
        {
            return;
        }
        let complete = buf.rfind('\n').map_or(0, |nl| nl + 1);
        self.offset += complete as u64;
        for line in buf[..complete].lines() {
            if let Ok(e) = serde_json::from_str::<AuditEvent>(line.trim()) {
                each(e);
            }
        }
    }
}

fn open_current(path: &Path) -> Option<Followed> {
    let file = super::at::open_regular_path(path).ok()?;
    let ino = file.metadata().ok()?.ino();
    Some(Followed {
        file,
        ino,
        offset: 0,
    })
}

/// Read the rotated audit files not read yet (by inode), oldest first; `skip` is the
/// inode of the file being followed.
fn read_rotated(
    store: &FileStore,
    current: &Path,
    skip: Option<u64>,
    seen: &mut HashSet<u64>,
    each: &mut dyn FnMut(AuditEvent),
) {
    for p in store.audit_files() {
        if p == current {
            continue;
        }
        let Ok(f) = super::at::open_regular_path(&p) else {
            continue;
        };
        let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
        if skip == Some(ino) || !seen.insert(ino) {
            continue;
        }
        for line in BufReader::new(f).lines().map_while(|l| l.ok()) {
            if let Ok(e) = serde_json::from_str::<AuditEvent>(line.trim()) {
                each(e);
            }
        }
    }
}

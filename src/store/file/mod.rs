//! The file store under the lock directory.
//!
//! ```text
//! .locks/
//!   .gitignore      "*"
//!   .guard          flock target for every mutation; its content is the fencing counter
//!   config.yaml     optional settings
//!   audit.jsonl     append-only event log
//!   keys/<name>     one JSON record per held key (see key::encode)
//!   slots/<name>/<n> for a key with slots, one JSON record per slot held (n from 1)
//!   tmp/            temp files; only written under the guard, so any found there is debris
//! ```
//!
//! Every mutation holds the guard, re-reads what it judged, and publishes whole files by
//! temp file + rename, so readers never see a partial record.

pub mod at;
mod audit;
mod backlog;
mod changes;
mod freeze;
mod paths;
mod queue;
mod registry;
pub mod sharing;

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{
    AgentEntry, AuditEvent, AuditFollow, BacklogClaim, BacklogEntry, BacklogSummary, Changes,
    Delivery, Ended, FORMAT_VERSION, Freeze, Guard, Held, MAX_RECORD_BYTES, Message, Note, Queue,
    Record, Slot, Store,
};
use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;
pub use at::Dir;

const GUARD: &str = ".guard";
/// The second copy of the fencing counter (the first is the content of `.guard`).
const COUNTER: &str = "counter";
/// How long a command waits for a busy guard before saying so on stderr.
pub const GUARD_NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// A deadline of the whole command (`checkout --wait DUR`): waiting for the guard stops
/// there too, not only at `guard_timeout`.
static GUARD_DEADLINE: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// Stop any wait for the guard at `deadline` (for this process, from now on).
pub fn set_guard_deadline(deadline: Option<std::time::Instant>) {
    *GUARD_DEADLINE.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
}

/// The deadline set by [`set_guard_deadline`], if any (the PostgreSQL store's wait for
/// its project lock stops there too).
pub fn guard_deadline() -> Option<std::time::Instant> {
    *GUARD_DEADLINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often a wait for the guard looks at signals and the command's deadline.
const GUARD_WAIT_TICK: std::time::Duration = std::time::Duration::from_millis(100);
const KEYS: &str = "keys";
/// The records of keys with slots: `slots/<encoded key>/<slot number>`.
const SLOTS: &str = "slots";
const TMP: &str = "tmp";
pub const AUDIT: &str = "audit.jsonl";
/// How many times `.guard` may be found replaced after locking it before giving up.
const GUARD_RETRIES: usize = 100;

pub struct FileStore {
    root: PathBuf,
    /// The lock directory, opened once without following a symlink: every file
    /// operation is relative to it or to a subdirectory opened from it.
    dir: Dir,
    keys: PathBuf,
    cfg: std::cell::OnceCell<crate::config::Config>,
}

/// The file store's part of a [`super::Guard`]: the exclusive flocks. Held until the
/// guard is dropped.
pub struct FileGuard {
    file: File,
    /// The lock directory itself, flocked before `.guard`: deleting or replacing
    /// `.guard` cannot let a second process in while one is inside.
    _dir_lock: Option<File>,
    keys: Dir,
    tmp: Dir,
    counter: std::cell::Cell<Option<u64>>,
    /// Files removed under the guard, still open: closed after the guard is let go
    /// ([`Dir::unlink_open`]).
    removed: std::cell::RefCell<Vec<File>>,
}

/// The most removed files a guard keeps open: a command that removes more (`backlog
/// remove` of 10,000 keys, `release` of as many) closes the ones before under the guard,
/// instead of running out of descriptors (1024 by default, 256 on macOS).
const KEEP_REMOVED_OPEN: usize = 64;

impl FileGuard {
    /// Keep `file` (removed) open until the guard is let go; past
    /// [`KEEP_REMOVED_OPEN`] files, close those kept so far now.
    fn close_later(&self, file: Option<File>) {
        if let Some(f) = file {
            let mut removed = self.removed.borrow_mut();
            if removed.len() >= KEEP_REMOVED_OPEN {
                removed.clear();
            }
            removed.push(f);
        }
    }
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        // Let go of the locks first, then close what was removed under them.
        let _ = self.file.unlock();
        if let Some(d) = &self._dir_lock {
            let _ = d.unlock();
        }
        self.removed.get_mut().clear();
    }
}

impl FileStore {
    /// Open an existing store for reading; `None` when the directory does not exist yet.
    pub fn open_existing(root: &Path) -> Result<Option<FileStore>> {
        match Dir::open_root(root) {
            Ok(dir) => Ok(Some(Self::at(root, dir))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(root_error(root, e)),
        }
    }

    /// Open the store, creating the directory layout when needed.
    pub fn open_or_create(root: &Path) -> Result<FileStore> {
        let dir = match Dir::open_root(root) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                create_root(root)?;
                Dir::open_root(root).map_err(|e| root_error(root, e))?
            }
            Err(e) => return Err(root_error(root, e)),
        };
        let store = Self::at(root, dir);
        // Set up already (the common case): one stat. keys/ and tmp/ are checked, and
        // made if missing, under the guard.
        const GI: &str = ".gitignore";
        let gi = root.join(GI);
        let is_file = |len: fn(u64) -> bool| {
            store
                .dir
                .stat(GI)
                .is_ok_and(|s| (s.st_mode & libc::S_IFMT) == libc::S_IFREG && len(s.st_size as u64))
        };
        if is_file(|n| n > 0) {
            return Ok(store);
        }
        match store.dir.create_new(GI) {
            Ok(mut f) => f.write_all(b"*\n").map_err(|e| Error::io(&gi, e))?,
            // Left empty by a process killed between create and write: repair it.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                if is_file(|n| n == 0) {
                    let f = store
                        .dir
                        .open_rw(GI, false)
                        .map_err(|e| Error::io(&gi, e))?;
                    f.write_all_at(b"*\n", 0).map_err(|e| Error::io(&gi, e))?;
                }
            }
            Err(e) => return Err(Error::io(&gi, e)),
        }
        for dir in [KEYS, TMP] {
            store.sub(dir, true)?;
        }
        Ok(store)
    }

    fn at(root: &Path, dir: Dir) -> FileStore {
        FileStore {
            root: root.to_path_buf(),
            dir,
            keys: root.join(KEYS),
            cfg: Default::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Is the lock directory shared with its group (setgid and group-writable)?
    pub fn shared(&self) -> bool {
        self.dir.shared()
    }

    /// Create the file `name` in the lock directory with `bytes` (it must not exist),
    /// with the directory's file mode.
    pub fn create_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.root.join(name);
        let mut f = self.dir.create_new(name).map_err(|e| Error::io(&path, e))?;
        f.write_all(bytes).map_err(|e| Error::io(&path, e))
    }

    pub fn record_path(&self, key: &str) -> PathBuf {
        self.keys.join(key::encode(key))
    }

    /// The subdirectory `name` of the lock directory (made when missing and `create`).
    pub(crate) fn sub(&self, name: &str, create: bool) -> Result<Option<Dir>> {
        self.dir
            .sub(name, create)
            .map_err(|e| Error::io(self.root.join(name), e))
    }

    /// The directory `parts` under the lock directory, one component at a time.
    pub(crate) fn dir_at(&self, parts: &[&str], create: bool) -> Result<Option<Dir>> {
        let Some((first, rest)) = parts.split_first() else {
            return Ok(Some(
                Dir::open_root(&self.root).map_err(|e| root_error(&self.root, e))?,
            ));
        };
        let Some(mut dir) = self.sub(first, create)? else {
            return Ok(None);
        };
        for part in rest {
            match dir
                .sub(part, create)
                .map_err(|e| Error::io(dir.join(part), e))?
            {
                Some(d) => dir = d,
                None => return Ok(None),
            }
        }
        Ok(Some(dir))
    }

    /// Take the exclusive guard and sweep debris left by killed processes.
    pub fn lock(&self) -> Result<FileGuard> {
        self.take_guard(true).map(|g| g.expect("waited for it"))
    }

    /// As [`FileStore::lock`], but `None` at once when another process holds the guard:
    /// for work that can wait for another time (forgetting long-dead agents).
    pub fn try_lock(&self) -> Result<Option<FileGuard>> {
        self.take_guard(false)
    }

    fn take_guard(&self, wait: bool) -> Result<Option<FileGuard>> {
        let path = self.root.join(GUARD);
        for _ in 0..GUARD_RETRIES {
            // The directory first: it cannot be deleted or swapped while we hold a
            // descriptor of it, so this lock excludes every other tasklock of this
            // version whatever happens to `.guard`. A file system that cannot flock a
            // directory leaves `.guard` alone to do it.
            let dir_lock = self.dir.reopen().map_err(|e| Error::io(&self.root, e))?;
            let dir_lock = match dir_lock.try_lock() {
                Ok(()) => Some(dir_lock),
                Err(std::fs::TryLockError::WouldBlock) if !wait => return Ok(None),
                Err(std::fs::TryLockError::WouldBlock) => {
                    Some(self.wait_for_guard(dir_lock, &path)?)
                }
                Err(std::fs::TryLockError::Error(_)) => None,
            };
            // `.guard` too, for older versions that lock only it.
            // Its device and inode, which the open file keeps, as opened.
            let (file, held) = self
                .dir
                .open_rw_stat(GUARD, false)
                .map_err(|e| Error::io(&path, symlink_hint(e)))?;
            let file = if wait {
                self.wait_for_guard(file, &path)?
            } else {
                match file.try_lock() {
                    Ok(()) => file,
                    Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                    Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
                }
            };
            // The file locked must still be the one at the path: one deleted or
            // replaced meanwhile is locked by nobody else, so start again.
            let same = self
                .dir
                .stat(GUARD)
                .is_ok_and(|s| same_dev(s.st_dev, held.dev()) && s.st_ino == held.ino());
            if !same {
                continue;
            }
            // Never sweep or write through a directory swapped for a symlink; make a
            // missing one. These descriptors are used for every write under the guard.
            let keys = self.sub(KEYS, true)?.expect("created");
            let tmp = self.sub(TMP, true)?.expect("created");
            let guard = FileGuard {
                file,
                _dir_lock: dir_lock,
                keys,
                tmp,
                counter: std::cell::Cell::new(None),
                removed: Default::default(),
            };
            self.sweep_tmp(&guard)?;
            return Ok(Some(guard));
        }
        Err(Error::Store(format!(
            "{} was replaced {GUARD_RETRIES} times while this command was taking it; is another program deleting it?",
            path.display()
        )))
    }
    /// Lock `.guard`: at once when it is free (the common case); otherwise wait for it,
    /// saying on stderr after [`GUARD_NOTICE_AFTER`] what is waited for, and give up after
    /// `guard_timeout` (config.yaml, or `TASKLOCK_GUARD_TIMEOUT`).
    fn wait_for_guard(&self, file: File, path: &Path) -> Result<File> {
        // A bad override is an error even when it is not needed, so it is found early.
        let env_timeout = guard_timeout_env()?;
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
        }
        // A broken config.yaml must not block a release: the default is used then.
        let timeout =
            env_timeout.unwrap_or_else(|| self.config().unwrap_or_default().guard_timeout);
        let started = std::time::Instant::now();
        // A blocking flock cannot be interrupted, so it runs on a thread that hands the
        // locked file back. If we gave up meanwhile, the send fails and dropping the file
        // lets go of the lock at once: a late lock is never kept.
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<File>>(0);
        std::thread::spawn(move || {
            let r = file.lock().map(|()| file);
            let _ = tx.send(r);
        });
        let mut noticed = false;
        let deadline = *GUARD_DEADLINE.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let waited = started.elapsed();
            let next = if noticed || timeout <= GUARD_NOTICE_AFTER {
                timeout
            } else {
                GUARD_NOTICE_AFTER
            };
            let stop = |why: &str| {
                Err(Error::GuardWaitStopped {
                    path: path.to_path_buf(),
                    why: why.to_string(),
                })
            };
            // A signal (for the commands that catch them) or the command's own deadline
            // ends the wait; the thread's late lock is then let go at once.
            if crate::signals::received().is_some() {
                return stop("a signal arrived");
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return stop("the time to wait ran out");
            }
            match rx.recv_timeout(next.saturating_sub(waited).min(GUARD_WAIT_TICK)) {
                Ok(Ok(f)) => return Ok(f),
                Ok(Err(e)) => return Err(Error::io(path, e)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::Store(format!(
                        "{}: the thread waiting for the lock ended",
                        path.display()
                    )));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            if started.elapsed() < next {
                continue;
            }
            if started.elapsed() >= timeout {
                return Err(Error::Store(format!(
                    "gave up after {} waiting for the lock on {}, {}. Every change to the lock directory waits for it; find that process and let it go on (kill -CONT PID if it was stopped) or end it; `guard_timeout` in config.yaml sets how long commands wait.",
                    crate::duration::format(timeout),
                    path.display(),
                    guard_holder_words(path)
                )));
            }
            if !noticed {
                noticed = true;
                eprintln!(
                    "tasklock: waiting for the lock on {}, {}; giving up after {}",
                    path.display(),
                    guard_holder_words(path),
                    crate::duration::format(timeout)
                );
            }
        }
    }

    /// Every temp file is written under the guard, so while we hold it any temp file is
    /// debris of a process that died mid-write; the backlog's journal is a change such a
    /// process was making, made again here (and a backlog in the layout before
    /// `backlog/index/` is moved into it).
    fn sweep_tmp(&self, g: &FileGuard) -> Result<()> {
        let entries = g.tmp.entries().map_err(|e| Error::io(g.tmp.path(), e))?;
        let mut journal = false;
        for (name, is_dir) in entries {
            if is_dir {
                // Not ours (we only write files here); leave it rather than fail.
                continue;
            }
            if name == backlog::JOURNAL {
                journal = true;
                continue;
            }
            g.tmp
                .unlink(&name)
                .map_err(|e| Error::io(g.tmp.join(&name), e))?;
        }
        if journal {
            self.backlog_replay(g)?;
        }
        self.backlog_migrate(g)
    }

    /// Read one key's slot. Never follows a symlink; never blocks on a planted FIFO.
    pub fn read(&self, key: &str) -> Result<Slot> {
        let Some(keys) = self.sub(KEYS, false)? else {
            return Ok(Slot::Free);
        };
        read_slot(&keys, &key::encode(key), Some(key))
    }

    /// The records of the slots of `key` held now, in slot order.
    pub fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        let Some(dir) = self.dir_at(&[SLOTS, &key::encode(key)], false)? else {
            return Ok(Vec::new());
        };
        read_slot_dir(&dir, key)
    }

    /// The slots and queues of `keys`, in order: `keys/` and `queues/` are opened once,
    /// then one open (failing for a free key) per record and per queue.
    pub fn read_many(&self, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        let slots: Vec<Slot> = match self.sub(KEYS, false)? {
            None => keys.iter().map(|_| Slot::Free).collect(),
            Some(dir) => keys
                .iter()
                .map(|k| read_slot(&dir, &key::encode(k), Some(k)))
                .collect::<Result<_>>()?,
        };
        Ok(slots.into_iter().zip(self.read_queues(keys)?).collect())
    }

    /// Every record in the store, with corrupt ones reported rather than failing the scan,
    /// in the order of their file names: the keys' records, then the slots' by key.
    pub fn scan(&self) -> Result<Vec<Slot>> {
        let Some(keys) = self.sub(KEYS, false)? else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = keys
            .entries()
            .map_err(|e| Error::io(&self.keys, e))?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        let mut out = read_slots_of(&keys, &names)?;
        out.retain(|s| !matches!(s, Slot::Free));
        drop(names);
        let Some(slots) = self.sub(SLOTS, false)? else {
            return Ok(out);
        };
        let mut names: Vec<String> = slots
            .entries()
            .map_err(|e| Error::io(self.root.join(SLOTS), e))?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        for name in names {
            let dir = match slots.sub(&name, false) {
                Ok(Some(d)) => d,
                // Released meanwhile.
                Ok(None) => continue,
                Err(e) => {
                    out.push(Slot::Corrupt {
                        path: slots.join(&name),
                        problem: format!("it cannot be opened as a directory ({e})"),
                    });
                    continue;
                }
            };
            for slot in read_slot_dir(&dir, "")? {
                out.push(match slot {
                    Slot::Held(r) if key::encode(&r.key) != name => Slot::Corrupt {
                        path: dir.path().to_path_buf(),
                        problem: format!(
                            "it holds a slot of the key {:?}, which belongs in another directory",
                            r.key
                        ),
                    },
                    other => other,
                });
            }
        }
        Ok(out)
    }

    /// The next fencing token. Persisted (in `.guard` and in `counter`) before the record
    /// that uses it is published, so a crash can skip a number but never hand one out
    /// twice.
    pub fn next_token(&self, g: &FileGuard) -> Result<u64> {
        let current = match g.counter.get() {
            Some(c) => c,
            None => self.stored_counter(g)?,
        };
        let next = current.checked_add(1).ok_or_else(|| {
            Error::Store(format!(
                "the fencing counter in {} is at its largest value ({current}); no more tokens can be handed out in this lock directory",
                self.root.join(GUARD).display()
            ))
        })?;
        let text = format!("{next:020}\n");
        g.file
            .write_all_at(text.as_bytes(), 0)
            .map_err(|e| Error::io(self.root.join(GUARD), e))?;
        self.publish_replace(g, text.as_bytes(), &self.dir, COUNTER)?;
        g.counter.set(Some(next));
        Ok(next)
    }

    /// The last token handed out: the larger of the two copies of the counter. When
    /// either is missing or damaged, also every token still on disk (records, ended
    /// checkouts, the tail of the audit log), so a lost counter never restarts below a
    /// token already handed out.
    fn stored_counter(&self, g: &FileGuard) -> Result<u64> {
        let parse = |bytes: &[u8]| {
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        let mut buf = [0u8; 32];
        let n = g
            .file
            .read_at(&mut buf, 0)
            .map_err(|e| Error::io(self.root.join(GUARD), e))?;
        let first = parse(&buf[..n]);
        let second = registry::read_small(&self.dir, COUNTER)?.and_then(|b| parse(&b));
        let known = first.unwrap_or(0).max(second.unwrap_or(0));
        if first.is_some() && second.is_some() {
            return Ok(known);
        }
        Ok(known.max(self.max_token_on_disk()?))
    }

    fn max_token_on_disk(&self) -> Result<u64> {
        let mut max = 0;
        for slot in self.scan()? {
            if let Slot::Held(r) = slot {
                max = max.max(r.token);
            }
        }
        for e in self.all_ended()? {
            max = max.max(e.token);
        }
        // The newest two audit files: the current one may have just been rotated.
        for name in self.audit_names().iter().rev().take(2) {
            max = max.max(self.audit_tail_max_token(name));
        }
        Ok(max)
    }

    /// The largest token in the last 1 MiB of an audit file (0 when unreadable).
    fn audit_tail_max_token(&self, name: &str) -> u64 {
        let Ok(Some(mut f)) = self.dir.open_regular(name) else {
            return 0;
        };
        use std::io::{Seek, SeekFrom};
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(MAX_RECORD_BYTES)))
            .is_err()
        {
            return 0;
        }
        let mut buf = Vec::new();
        if f.take(MAX_RECORD_BYTES).read_to_end(&mut buf).is_err() {
            return 0;
        }
        buf.split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("token").and_then(|t| t.as_u64()))
            .max()
            .unwrap_or(0)
    }

    /// Publish a record for a key (or a slot of it) that has none. Fails if one
    /// appeared meanwhile.
    pub fn insert(&self, g: &FileGuard, record: &Record) -> Result<()> {
        self.index_before_publish(g, record)?;
        let (dir, name) = match record.slot {
            None => (None, key::encode(&record.key)),
            Some(n) => (Some(self.slot_dir(&record.key, true)?), n.to_string()),
        };
        let dest_dir = dir.as_ref().unwrap_or(&g.keys);
        let tmp = self.write_temp(g, &encode_record(record)?)?;
        match g.tmp.rename_noreplace(&tmp, dest_dir, &name) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = g.tmp.unlink(&tmp);
                let dest = dest_dir.join(&name);
                if e.kind() == ErrorKind::AlreadyExists {
                    Err(Error::Store(format!(
                        "{} appeared while the guard was held; is another tool writing to the lock directory?",
                        dest.display()
                    )))
                } else {
                    Err(Error::io(&dest, e))
                }
            }
        }
    }

    /// Replace an existing record whole (rename never follows a symlink at the target).
    pub fn replace(&self, g: &FileGuard, record: &Record) -> Result<()> {
        self.index_before_publish(g, record)?;
        let bytes = encode_record(record)?;
        // The engine never takes paths away from a held key, so the entry written above
        // is the record's paths (or, from an older record of the key, more: harmless).
        match record.slot {
            None => self.publish_over(g, &bytes, &g.keys, &key::encode(&record.key)),
            Some(n) => {
                let dir = self.slot_dir(&record.key, true)?;
                self.publish_over(g, &bytes, &dir, &n.to_string())
            }
        }
    }

    /// As [`FileStore::publish_replace`], by a rename over the old file. ext4 then writes
    /// the new file out with the rename, so after a power loss the file is the old one or
    /// the new one, not empty: for records, which heartbeats replace all the time and
    /// which an empty file would leave stuck until `release --force`. A claim never
    /// replaces one (it publishes a new record), so it does not pay for it.
    fn publish_over(&self, g: &FileGuard, bytes: &[u8], dir: &Dir, name: &str) -> Result<()> {
        self.publish(g, bytes, dir, name, Dir::rename_over)
    }

    /// The directory of `key`'s slot records (made when missing and `create`).
    fn slot_dir(&self, key: &str, create: bool) -> Result<Dir> {
        self.dir_at(&[SLOTS, &key::encode(key)], create)?
            .ok_or_else(|| {
                Error::io(
                    self.root.join(SLOTS).join(key::encode(key)),
                    std::io::Error::from(ErrorKind::NotFound),
                )
            })
    }

    /// Write `bytes` to `name` in `dir` whole: a temp file, then put in place of whatever
    /// is there ([`Dir::replace`]).
    pub(crate) fn publish_replace(
        &self,
        g: &FileGuard,
        bytes: &[u8],
        dir: &Dir,
        name: &str,
    ) -> Result<()> {
        self.publish(g, bytes, dir, name, Dir::replace)
    }

    /// Write `bytes` to a temp file and `put` it in place as `name` in `dir`; the file it
    /// replaced is closed after the guard is let go.
    fn publish(
        &self,
        g: &FileGuard,
        bytes: &[u8],
        dir: &Dir,
        name: &str,
        put: fn(&Dir, &str, &Dir, &str) -> std::io::Result<Option<File>>,
    ) -> Result<()> {
        let tmp = self.write_temp(g, bytes)?;
        let old = put(&g.tmp, &tmp, dir, name).map_err(|e| {
            let _ = g.tmp.unlink(&tmp);
            Error::io(dir.join(name), e)
        })?;
        g.close_later(old);
        Ok(())
    }

    /// Remove a key's record (or the damaged file in its place), or one slot's; a key of
    /// the backlog is ready again. The path index is touched only when the record covered
    /// paths (or may have: `paths` unknown), so a release of a key alone reads nothing more.
    pub fn remove(
        &self,
        g: &FileGuard,
        key: &str,
        slot: Option<u32>,
        paths: Option<&[String]>,
    ) -> Result<()> {
        // The backlog first: killed in between, the key is ready while still held, and
        // the next claim learns its holder (never the other way round: claimed by a
        // holder that is gone, until its lease would have ended).
        self.backlog_after_remove(g, key)?;
        if let Some(n) = slot {
            return self.remove_slot(g, key, n);
        }
        self.remove_record(g, key)?;
        if paths.is_some_and(<[String]>::is_empty) {
            return Ok(());
        }
        self.index_after_remove(g, key)
    }

    /// Remove one slot's record, and the key's directory of slots with its last one.
    fn remove_slot(&self, g: &FileGuard, key: &str, n: u32) -> Result<()> {
        let enc = key::encode(key);
        let Some(dir) = self.dir_at(&[SLOTS, &enc], false)? else {
            return Ok(());
        };
        let name = n.to_string();
        g.close_later(
            dir.unlink_open(&name)
                .map_err(|e| Error::io(dir.join(&name), e))?,
        );
        if let Some(slots) = self.sub(SLOTS, false)? {
            // Fails while other slots are held: the directory stays for them.
            let _ = slots.rmdir(&enc);
        }
        Ok(())
    }

    fn remove_record(&self, g: &FileGuard, key: &str) -> Result<()> {
        let name = key::encode(key);
        let path = g.keys.join(&name);
        match g.keys.unlink_open(&name) {
            Ok(old) => {
                g.close_later(old);
                Ok(())
            }
            // A directory planted where a record goes: remove it if it is empty.
            Err(_) if g.keys.stat(&name).is_ok_and(|s| (s.st_mode & libc::S_IFMT) == libc::S_IFDIR) => {
                g.keys.rmdir(&name).map_err(|e| {
                    Error::io(&path, std::io::Error::other(format!("a directory is where a record belongs and it is not empty ({e}); inspect and remove it by hand")))
                })
            }
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Write a temp file in `tmp/`; returns its name there.
    fn write_temp(&self, g: &FileGuard, bytes: &[u8]) -> Result<String> {
        let name = format!("{}.tmp", std::process::id());
        let path = g.tmp.join(&name);
        let mut f = g.tmp.create_new(&name).map_err(|e| Error::io(&path, e))?;
        f.write_all(bytes).map_err(|e| {
            let _ = g.tmp.unlink(&name);
            Error::io(&path, e)
        })?;
        Ok(name)
    }

    /// Append one event to the audit log (one `write` on an `O_APPEND` file), rotating
    /// the log first when it would grow past `audit_max_size`.
    pub fn audit(&self, _g: &FileGuard, event: &AuditEvent) -> Result<()> {
        let mut line = serde_json::to_vec(event)
            .map_err(|e| Error::Store(format!("cannot encode audit event: {e}")))?;
        line.push(b'\n');
        let size = match self.dir.stat(AUDIT) {
            Ok(s) => s.st_size as u64,
            Err(_) => 0,
        };
        if size > 0 {
            // A broken config.yaml must not block a release: rotate by the defaults then
            // (the commands that need the settings report the error).
            let cfg = self.config().unwrap_or_default();
            if size + line.len() as u64 > cfg.audit_max_size {
                self.rotate_audit(cfg.audit_keep)?;
            }
        }
        registry::append_line(&self.dir, AUDIT, &line)
    }

    /// `audit.jsonl` becomes `audit.jsonl.1`, `.1` becomes `.2`, …; the oldest beyond
    /// `keep` is deleted. Runs under the guard, like every append.
    fn rotate_audit(&self, keep: usize) -> Result<()> {
        let name = |i: usize| format!("{AUDIT}.{i}");
        // The oldest go first, including any left from a larger audit_keep.
        for old in self.audit_names() {
            let index = old
                .strip_prefix(&format!("{AUDIT}."))
                .and_then(|i| i.parse::<usize>().ok());
            if index.is_some_and(|i| i >= keep.max(1)) {
                let _ = self.dir.unlink(&old);
            }
        }
        if keep == 0 {
            return self
                .dir
                .unlink(AUDIT)
                .map_err(|e| Error::io(self.root.join(AUDIT), e));
        }
        for i in (1..keep).rev() {
            match self.dir.rename(&name(i), &self.dir, &name(i + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(self.root.join(name(i)), e)),
            }
        }
        self.dir
            .rename(AUDIT, &self.dir, &name(1))
            .map_err(|e| Error::io(self.root.join(name(1)), e))
    }

    /// The names of the audit files, oldest first (rotated ones, then the current one).
    fn audit_names(&self) -> Vec<String> {
        let mut files: Vec<(usize, String)> = self
            .dir
            .entries()
            .into_iter()
            .flatten()
            .filter_map(|(n, _)| {
                let i = n.strip_prefix(&format!("{AUDIT}."))?.parse().ok()?;
                Some((i, n))
            })
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut out: Vec<String> = files.into_iter().map(|(_, n)| n).collect();
        out.push(AUDIT.to_string());
        out
    }

    /// The audit files, oldest first (rotated ones, then the current one). Open them
    /// with [`at::open_regular_path`].
    pub fn audit_files(&self) -> Vec<PathBuf> {
        self.audit_names()
            .into_iter()
            .map(|n| self.root.join(n))
            .collect()
    }

    /// Use settings already read (by the command) instead of reading them again.
    pub fn share_config(&self, cfg: Option<&crate::config::Config>) {
        if let Some(c) = cfg {
            let _ = self.cfg.set(c.clone());
        }
    }

    /// The lock directory's settings, read once per store.
    pub fn config(&self) -> Result<crate::config::Config> {
        if let Some(c) = self.cfg.get() {
            return Ok(c.clone());
        }
        let c = crate::config::Config::load(&self.root)?;
        let _ = self.cfg.set(c.clone());
        Ok(c)
    }
}

/// Make the lock directory (and what is missing above it, with the usual modes): a new
/// lock directory is private, 0700, whatever the umask.
pub fn create_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    match std::fs::DirBuilder::new()
        .mode(at::PRIVATE_DIR)
        .create(root)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(root, e)),
    }
}

/// Why the lock directory itself cannot be opened, in words.
fn root_error(root: &Path, e: std::io::Error) -> Error {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.file_type().is_symlink() => Error::Store(format!(
            "{} is a symbolic link; the lock directory must be a real directory (tasklock never follows a symlink there)",
            root.display()
        )),
        Ok(m) if !m.is_dir() => Error::Store(format!(
            "{} exists but is not a directory; the lock directory must be one",
            root.display()
        )),
        _ => Error::io(root, e),
    }
}

/// Read the record `name` in `keys`. Never follows a symlink; never blocks on a planted
/// FIFO; a file that cannot be opened (another user's, a socket) is a damaged slot, so
/// a scan goes on.
fn read_slot(keys: &Dir, name: &str, expect_key: Option<&str>) -> Result<Slot> {
    read_record(keys, name, Expect::from(expect_key))
}

/// Below this many records a scan reads them on one thread: a thread costs more than it
/// saves.
const PARALLEL_SCAN: usize = 512;

/// The records named `names` in `keys`, in that order. A large directory is read by a
/// thread per CPU (at most 4), each reading a stretch of the names into its own part of
/// the result: reading is most of `list`'s time, and the files are independent.
fn read_slots_of(keys: &Dir, names: &[String]) -> Result<Vec<Slot>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4);
    let mut out: Vec<Slot> = Vec::new();
    out.resize_with(names.len(), || Slot::Free);
    if threads < 2 || names.len() < PARALLEL_SCAN {
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = read_slot(keys, name, None)?;
        }
        return Ok(out);
    }
    let stretch = names.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = out
            .chunks_mut(stretch)
            .zip(names.chunks(stretch))
            .map(|(part, names)| {
                s.spawn(move || -> Result<()> {
                    for (slot, name) in part.iter_mut().zip(names) {
                        *slot = read_slot(keys, name, None)?;
                    }
                    Ok(())
                })
            })
            .collect();
        parts.into_iter().try_for_each(|p| {
            p.join()
                .unwrap_or_else(|_| Err(Error::Store("a thread reading records failed".into())))
        })
    })?;
    Ok(out)
}

/// What a record read must name.
#[derive(Clone, Copy)]
enum Expect<'a> {
    /// This key.
    Key(&'a str),
    /// The key its file name encodes.
    FileName,
    /// Any key (the caller checks).
    Any,
}

impl<'a> From<Option<&'a str>> for Expect<'a> {
    fn from(k: Option<&'a str>) -> Expect<'a> {
        k.map_or(Expect::FileName, Expect::Key)
    }
}

fn read_record(keys: &Dir, name: &str, expect: Expect<'_>) -> Result<Slot> {
    let path = keys.join(name);
    let corrupt = |problem: String| {
        Ok(Slot::Corrupt {
            path: path.clone(),
            problem,
        })
    };
    let mut file = match keys.open_read(name) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Slot::Free),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return corrupt("it is a symbolic link, not a lock record".into());
        }
        Err(e) => {
            let regular = keys
                .stat(name)
                .is_ok_and(|s| (s.st_mode & libc::S_IFMT) == libc::S_IFREG);
            return corrupt(if regular {
                format!("it cannot be opened ({e})")
            } else {
                "it is not a regular file".into()
            });
        }
    };
    if let Some(record) = read_quickly(&mut file, name, expect) {
        return Ok(Slot::Held(record));
    }
    let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
    if !meta.is_file() {
        return corrupt("it is not a regular file".into());
    }
    // Read again from the start: the quick read may have taken some of it.
    if let Err(e) = file.seek(std::io::SeekFrom::Start(0)) {
        return corrupt(format!("it cannot be read ({e})"));
    }
    if meta.len() > MAX_RECORD_BYTES {
        return corrupt(format!(
            "it is {} bytes, over the 1 MiB limit for a record",
            meta.len()
        ));
    }
    let bytes = match read_sized(&mut file, meta.len(), MAX_RECORD_BYTES + 1) {
        Ok(b) => b,
        Err(e) => return corrupt(format!("it cannot be read ({e})")),
    };
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return corrupt("it grew past the 1 MiB limit for a record".into());
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return corrupt("the file is empty".into());
    }
    // One parse in the common case; on failure a second, lenient one finds the
    // version so a newer format is named as such.
    let record: Record = match serde_json::from_slice::<Record>(&bytes) {
        Ok(r) if (1..=FORMAT_VERSION).contains(&r.version) => r,
        Ok(r) if r.version > FORMAT_VERSION => return corrupt(newer(r.version.into())),
        Ok(_) => return corrupt("it has no valid format version".into()),
        Err(e) => {
            #[derive(Deserialize)]
            struct Probe {
                version: Option<serde_json::Value>,
            }
            let version = serde_json::from_slice::<Probe>(&bytes)
                .ok()
                .and_then(|p| p.version)
                .and_then(|v| v.as_u64());
            return corrupt(match version {
                Some(v) if v > u64::from(FORMAT_VERSION) => newer(v),
                Some(_) => format!("not a valid record ({e})"),
                None if serde_json::from_slice::<serde_json::Value>(&bytes).is_ok() => {
                    "it has no valid format version".into()
                }
                None => format!("not a valid record ({e})"),
            });
        }
    };
    match expect {
        Expect::Key(k) if record.key != k => {
            return corrupt(format!("it names the key {:?}, not {k:?}", record.key));
        }
        Expect::FileName if name != key::encode(&record.key) => {
            return corrupt(format!(
                "it names the key {:?}, which belongs in another file",
                record.key
            ));
        }
        _ => {}
    }
    Ok(Slot::Held(record))
}

/// The common case of [`read_record`], in one `read` and no `stat`: a record smaller than
/// a page, whole and valid, naming what it must. `None` for anything else (empty, larger,
/// not a file, damaged, unreadable), which the careful path reads again and names.
fn read_quickly(file: &mut std::fs::File, name: &str, expect: Expect<'_>) -> Option<Record> {
    // Not zeroed first: filling 4 KiB with zeros was a tenth of `list`'s instructions.
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let len = buf.len();
    // One read; an error (even an interrupted read) leaves it to the careful way.
    let (bytes, _) = rustix::io::read(&*file, &mut buf).ok()?;
    // A full buffer may be a larger record: read it the careful way.
    if bytes.is_empty() || bytes.len() == len {
        return None;
    }
    let record = serde_json::from_slice::<Record>(bytes).ok()?;
    let named = match expect {
        Expect::Key(k) => record.key == k,
        Expect::FileName => name == key::encode(&record.key),
        Expect::Any => true,
    };
    ((1..=FORMAT_VERSION).contains(&record.version) && named).then_some(record)
}

/// A file's bytes, up to `max`, given the size a stat of it just gave: one read, where
/// `read_to_end` makes two (the second to see the end). A read of exactly `size` bytes
/// into room for one more is the whole file, as a record is published whole by a rename
/// and never written again; anything else (the file changed meanwhile) reads on to the
/// end as before.
fn read_sized(file: &mut std::fs::File, size: u64, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; size.min(max) as usize + 1];
    let mut got = 0;
    while got < bytes.len() {
        match file.read(&mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if got as u64 == size {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(got);
    if got as u64 > size {
        file.take(max.saturating_sub(got as u64))
            .read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// The slot records in `dir` (the directory of one key's slots), in slot order. `key`:
/// the key they must name (empty: any; the caller checks).
fn read_slot_dir(dir: &Dir, key: &str) -> Result<Vec<Slot>> {
    let entries = match dir.entries() {
        Ok(e) => e,
        // Its last slot was released meanwhile.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir.path(), e)),
    };
    let mut numbered: Vec<(u32, String)> = entries
        .into_iter()
        .filter_map(|(name, _)| Some((name.parse::<u32>().ok().filter(|n| *n > 0)?, name)))
        .collect();
    numbered.sort();
    let mut out = Vec::with_capacity(numbered.len());
    for (n, name) in numbered {
        let expect = if key.is_empty() {
            Expect::Any
        } else {
            Expect::Key(key)
        };
        let slot = match read_record(dir, &name, expect)? {
            Slot::Held(r) if r.slot != Some(n) => Slot::Corrupt {
                path: dir.join(&name),
                problem: format!(
                    "it is in the place of slot {n} but names {}",
                    r.slot
                        .map_or("no slot".to_string(), |s| format!("slot {s}"))
                ),
            },
            other => other,
        };
        if !matches!(slot, Slot::Free) {
            out.push(slot);
        }
    }
    Ok(out)
}

/// `TASKLOCK_GUARD_TIMEOUT`, when set: it overrides `guard_timeout` from config.yaml.
fn guard_timeout_env() -> Result<Option<std::time::Duration>> {
    match std::env::var_os("TASKLOCK_GUARD_TIMEOUT") {
        None => Ok(None),
        Some(v) => crate::duration::parse(&v.to_string_lossy())
            .map(Some)
            .map_err(|e| Error::Usage(format!("TASKLOCK_GUARD_TIMEOUT: {e}"))),
    }
}

/// Who holds the flock on `path`, in words: "held by pid 123 (tasklock, stopped)", or
/// "held by another process" when `/proc/locks` does not say.
/// Who holds the guard of the lock directory `root` right now ("held by pid 123 (x,
/// stopped)"), or `None` when nobody does. Read from `/proc/locks`; takes no lock.
pub fn guard_held(root: &Path) -> Option<String> {
    let me = std::process::id();
    [root.join(GUARD), root.to_path_buf()]
        .iter()
        .find(|p| guard_holder(p).is_some_and(|(pid, _, _)| pid != me))
        .map(|p| guard_holder_words(p))
}

fn guard_holder_words(path: &Path) -> String {
    match guard_holder(path) {
        Some((pid, comm, stopped)) => format!(
            "held by pid {pid}{}",
            match (comm, stopped) {
                (Some(c), true) => format!(" ({c}, stopped)"),
                (Some(c), false) => format!(" ({c})"),
                (None, true) => " (stopped)".into(),
                (None, false) => String::new(),
            }
        ),
        None => "held by another process".into(),
    }
}

/// A device number as `stat` gives it (`u64` on Linux, `i32` on macOS) against std's.
#[allow(clippy::unnecessary_cast)]
fn same_dev(raw: libc::dev_t, dev: u64) -> bool {
    raw as u64 == dev
}

/// The pid holding a flock on `path` (where the system says: `/proc/locks` on Linux), its
/// command name and whether it is stopped.
fn guard_holder(path: &Path) -> Option<(u32, Option<String>, bool)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let pid = crate::os::flock_holder(meta.dev(), meta.ino())?;
    let info = crate::os::process(pid);
    let stopped = info.as_ref().is_some_and(|p| p.stopped);
    Some((pid, info.and_then(|p| p.name), stopped))
}

fn encode_record(record: &Record) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::Store(format!("cannot encode record: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn symlink_hint(e: std::io::Error) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        std::io::Error::other("it is a symbolic link; tasklock never writes through one, remove it")
    } else {
        e
    }
}

fn newer(v: u64) -> String {
    format!(
        "it has format version {v}, newer than this tasklock understands ({FORMAT_VERSION}); upgrade tasklock"
    )
}

/// The file store as a [`Store`]. The inherent methods of the same names (which take
/// the file store's own guard) do the work.
impl Store for FileStore {
    fn describe(&self) -> String {
        format!("the lock directory {}", self.root.display())
    }

    fn as_file(&self) -> Option<&FileStore> {
        Some(self)
    }

    fn shared(&self) -> bool {
        FileStore::shared(self)
    }

    fn share_config(&self, cfg: &crate::config::Config) {
        let _ = self.cfg.set(cfg.clone());
    }

    fn config(&self) -> Result<crate::config::Config> {
        FileStore::config(self)
    }

    fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        FileStore::path_index(self)
    }

    fn read(&self, key: &str) -> Result<Slot> {
        FileStore::read(self, key)
    }

    fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        FileStore::read_slots(self, key)
    }

    fn read_many(&self, _g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        FileStore::read_many(self, keys)
    }

    fn scan(&self) -> Result<Vec<Slot>> {
        FileStore::scan(self)
    }

    fn read_queue(&self, key: &str) -> Result<Queue> {
        FileStore::read_queue(self, key)
    }

    fn scan_queues(&self) -> Result<Vec<Queue>> {
        FileStore::scan_queues(self)
    }

    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        FileStore::read_agent(self, id)
    }

    fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        FileStore::scan_agents(self)
    }

    fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        FileStore::read_ended(self, key)
    }

    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        FileStore::last_notes(self, key, n)
    }

    fn freezes(&self) -> Result<Vec<Freeze>> {
        FileStore::freezes(self)
    }

    fn frozen(&self, key: &str, now: &crate::clock::Time) -> Result<Option<Freeze>> {
        FileStore::frozen(self, key, now)
    }

    fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        FileStore::unread(self, agent)
    }

    fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        FileStore::mark_read(self, agent, id)
    }

    fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        FileStore::message(self, agent, id)
    }

    fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        self.read_audit(each)
    }

    fn follow_audit(&self) -> Result<Box<dyn AuditFollow + '_>> {
        Ok(Box::new(audit::Follower::new(self)))
    }

    fn changes(&self) -> Result<Box<dyn Changes + '_>> {
        Ok(Box::new(changes::Watcher::new(self)?))
    }

    fn inbox_changes(&self, agent: &str) -> Result<Box<dyn Changes + '_>> {
        Ok(Box::new(changes::Watcher::with_inbox(self, agent)?))
    }

    fn lock_watcher(&self, agent: &str) -> Result<Option<Held>> {
        Ok(FileStore::lock_watcher(self, agent)?.map(|f| Box::new(f) as Held))
    }

    fn begin(&self, wait: bool) -> Result<Option<Guard>> {
        Ok(self.take_guard(wait)?.map(Guard::new))
    }

    fn commit(&self, g: Guard) -> Result<()> {
        // Every write stood when it was made; leaving the scope lets go of the flocks.
        drop(g.into_inner::<FileGuard>());
        Ok(())
    }

    fn next_token(&self, g: &Guard) -> Result<u64> {
        FileStore::next_token(self, g.get())
    }

    fn insert(&self, g: &Guard, record: &Record) -> Result<()> {
        FileStore::insert(self, g.get(), record)
    }

    fn replace(&self, g: &Guard, record: &Record) -> Result<()> {
        FileStore::replace(self, g.get(), record)
    }

    fn remove(
        &self,
        g: &Guard,
        key: &str,
        slot: Option<u32>,
        paths: Option<&[String]>,
    ) -> Result<()> {
        FileStore::remove(self, g.get(), key, slot, paths)
    }

    fn audit(&self, g: &Guard, event: &AuditEvent) -> Result<()> {
        FileStore::audit(self, g.get(), event)
    }

    fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()> {
        FileStore::write_queue(self, g.get(), q)
    }

    fn send(&self, g: &Guard, msg: &Message) -> Result<()> {
        FileStore::send(self, g.get(), msg)
    }

    fn record_delivery(&self, g: &Guard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        FileStore::record_delivery(self, g.get(), agent, id, d)
    }

    fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()> {
        FileStore::write_agent(self, g.get(), entry)
    }

    fn remove_agent(&self, g: &Guard, id: &str) -> Result<()> {
        FileStore::remove_agent(self, g.get(), id)
    }

    fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()> {
        FileStore::write_ended(self, g.get(), ended)
    }

    fn append_note(&self, g: &Guard, key: &str, note: &Note) -> Result<()> {
        FileStore::append_note(self, g.get(), key, note)
    }

    fn write_freeze(&self, g: &Guard, f: &Freeze) -> Result<()> {
        FileStore::write_freeze(self, g.get(), f)
    }

    fn backlog_add(&self, g: &Guard, keys: &[String]) -> Result<usize> {
        FileStore::backlog_add(self, g.get(), keys)
    }
    fn backlog_remove(&self, g: &Guard, keys: &[String]) -> Result<Vec<String>> {
        FileStore::backlog_remove(self, g.get(), keys)
    }
    fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        FileStore::backlog_ready(self, after, n)
    }
    fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        FileStore::backlog_claimed(self)
    }
    fn backlog_mark(&self, g: &Guard, key: &str, claim: Option<&BacklogClaim>) -> Result<()> {
        FileStore::backlog_mark(self, g.get(), key, claim)
    }
    fn sweep_turn(&self, g: &Guard, now: &Time, every: std::time::Duration) -> Result<bool> {
        FileStore::sweep_turn(self, g.get(), now, every)
    }
    fn backlog_rechecked(&self, g: &Guard, recheck: Option<Time>) -> Result<()> {
        FileStore::backlog_rechecked(self, g.get(), recheck)
    }
    fn backlog_summary(&self, holders: bool) -> Result<BacklogSummary> {
        FileStore::backlog_summary(self, holders)
    }
    fn remove_freeze(&self, g: &Guard, pattern: &str) -> Result<Option<Freeze>> {
        FileStore::remove_freeze(self, g.get(), pattern)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, Write};

    #[test]
    fn a_sized_read_sees_what_was_written_after_the_stat() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"{\"a\":1}").unwrap();
        let size = f.metadata().unwrap().len();
        for (extra, max) in [(&b""[..], 64), (b" more", 64), (b" more", 10)] {
            f.seek(std::io::SeekFrom::Start(size)).unwrap();
            f.write_all(extra).unwrap();
            f.rewind().unwrap();
            let got = super::read_sized(&mut f, size, max).unwrap();
            let mut want = b"{\"a\":1}".to_vec();
            want.extend_from_slice(extra);
            want.truncate(max as usize);
            assert_eq!(got, want, "{extra:?} {max}");
        }
        // A file shorter than its stat said is read to its end.
        let mut g = tempfile::tempfile().unwrap();
        g.write_all(b"ab").unwrap();
        g.rewind().unwrap();
        assert_eq!(super::read_sized(&mut g, 5, 64).unwrap(), b"ab");
    }
}

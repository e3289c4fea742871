//! The file store under the lock directory.
//!
//! ```text
//! .locks/
//!   .gitignore      "*"
//!   .guard          flock target for every mutation; its content is the fencing counter
//!   config.yaml     optional settings
//!   audit.jsonl     append-only event log
//!   keys/<name>     one JSON record per held key (see key::encode)
//!   tmp/            temp files; only written under the guard, so any found there is debris
//! ```
//!
//! Every mutation holds the guard, re-reads what it judged, and publishes whole files by
//! temp file + rename, so readers never see a partial record.

pub mod freeze;
pub mod queue;
pub mod record;
pub mod registry;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;
pub use freeze::Freeze;
pub use queue::{Message, Queue, Reservation, Waiter};
pub use record::{FORMAT_VERSION, Record};
pub use registry::{AgentEntry, Ended, Note};

/// A record bigger than this is damage, not a lock.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

const GUARD: &str = ".guard";
/// How long a command waits for a busy guard before saying so on stderr.
pub const GUARD_NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
const KEYS: &str = "keys";
const TMP: &str = "tmp";
pub const AUDIT: &str = "audit.jsonl";

/// What is stored for one key. Short-lived (one read, one decision), so the size of a
/// record inline does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Slot {
    Free,
    Held(Record),
    Corrupt { path: PathBuf, problem: String },
}

pub struct FileStore {
    root: PathBuf,
    keys: PathBuf,
    tmp: PathBuf,
    cfg: std::cell::OnceCell<crate::config::Config>,
}

/// Proof that the caller holds the exclusive guard; mutations require it.
pub struct Guard {
    file: File,
    counter: Option<u64>,
}

impl FileStore {
    /// Open an existing store for reading; `None` when the directory does not exist yet.
    pub fn open_existing(root: &Path) -> Result<Option<FileStore>> {
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => Ok(Some(Self::at(root))),
            Ok(_) => Err(Error::Store(format!(
                "{} exists but is not a directory",
                root.display()
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(root, e)),
        }
    }

    /// Open the store, creating the directory layout when needed.
    pub fn open_or_create(root: &Path) -> Result<FileStore> {
        let store = Self::at(root);
        // Set up already (the common case): one stat. keys/ and tmp/ are checked, and
        // made if missing, under the guard.
        let gi = root.join(".gitignore");
        if std::fs::symlink_metadata(&gi).is_ok_and(|m| m.is_file() && m.len() > 0) {
            return Ok(store);
        }
        if root.exists() && !root.is_dir() {
            return Err(Error::Store(format!(
                "{} exists but is not a directory; the lock directory must be one",
                root.display()
            )));
        }
        if !root.is_dir() {
            std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        }
        match OpenOptions::new().write(true).create_new(true).open(&gi) {
            Ok(mut f) => f.write_all(b"*\n").map_err(|e| Error::io(&gi, e))?,
            // Left empty by a process killed between create and write: repair it.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                if std::fs::symlink_metadata(&gi).is_ok_and(|m| m.is_file() && m.len() == 0) {
                    std::fs::write(&gi, b"*\n").map_err(|e| Error::io(&gi, e))?;
                }
            }
            Err(e) => return Err(Error::io(&gi, e)),
        }
        for dir in [&store.keys, &store.tmp] {
            store.ensure_dir(dir)?;
        }
        Ok(store)
    }

    fn at(root: &Path) -> FileStore {
        FileStore {
            root: root.to_path_buf(),
            keys: root.join(KEYS),
            tmp: root.join(TMP),
            cfg: Default::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn record_path(&self, key: &str) -> PathBuf {
        self.keys.join(key::encode(key))
    }

    /// Take the exclusive guard and sweep debris left by killed processes.
    pub fn lock(&self) -> Result<Guard> {
        self.take_guard(true).map(|g| g.expect("waited for it"))
    }

    /// As [`FileStore::lock`], but `None` at once when another process holds the guard:
    /// for work that can wait for another time (forgetting long-dead agents).
    pub fn try_lock(&self) -> Result<Option<Guard>> {
        self.take_guard(false)
    }

    fn take_guard(&self, wait: bool) -> Result<Option<Guard>> {
        let path = self.root.join(GUARD);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(&path)
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
        // Never sweep or write through a directory swapped for a symlink; make a
        // missing one.
        for dir in [&self.keys, &self.tmp] {
            self.ensure_dir(dir)?;
        }
        let guard = Guard {
            file,
            counter: None,
        };
        self.sweep_tmp(&guard)?;
        Ok(Some(guard))
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
        loop {
            let waited = started.elapsed();
            let next = if noticed || timeout <= GUARD_NOTICE_AFTER {
                timeout
            } else {
                GUARD_NOTICE_AFTER
            };
            match rx.recv_timeout(next.saturating_sub(waited)) {
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
    /// debris of a process that died mid-write.
    fn sweep_tmp(&self, _g: &Guard) -> Result<()> {
        let entries = match std::fs::read_dir(&self.tmp) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&self.tmp, e)),
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                // Not ours (we only write files here); leave it rather than fail.
                continue;
            }
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, e)),
            }
        }
        Ok(())
    }

    /// Read one key's slot. Never follows a symlink; never blocks on a planted FIFO.
    pub fn read(&self, key: &str) -> Result<Slot> {
        self.read_path(&self.record_path(key), Some(key))
    }

    fn read_path(&self, path: &Path, expect_key: Option<&str>) -> Result<Slot> {
        let corrupt = |problem: String| {
            Ok(Slot::Corrupt {
                path: path.to_path_buf(),
                problem,
            })
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Slot::Free),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return corrupt("it is a symbolic link, not a lock record".into());
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return corrupt("it is not a regular file".into());
        }
        if meta.len() > MAX_RECORD_BYTES {
            return corrupt(format!(
                "it is {} bytes, over the 1 MiB limit for a record",
                meta.len()
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
        (&mut file)
            .take(MAX_RECORD_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return corrupt("it grew past the 1 MiB limit for a record".into());
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return corrupt("the file is empty".into());
        }
        // One parse in the common case; on failure a second, lenient one finds the
        // version so a newer format is named as such.
        let record: Record = match serde_json::from_slice::<Record>(&bytes) {
            Ok(r) if r.version == FORMAT_VERSION => r,
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
        if let Some(k) = expect_key {
            if record.key != k {
                return corrupt(format!("it names the key {:?}, not {k:?}", record.key));
            }
        } else if path.file_name().map(|n| n.as_bytes())
            != Some(key::encode(&record.key).as_bytes())
        {
            return corrupt(format!(
                "it names the key {:?}, which belongs in another file",
                record.key
            ));
        }
        Ok(Slot::Held(record))
    }

    /// Every record in the store, with corrupt ones reported rather than failing the scan.
    /// Returns (file name, slot) pairs sorted by file name.
    pub fn scan(&self) -> Result<Vec<(String, Slot)>> {
        let entries = match std::fs::read_dir(&self.keys) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.keys, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.keys, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let slot = self.read_path(&entry.path(), None)?;
            if !matches!(slot, Slot::Free) {
                out.push((name, slot));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The next fencing token. Persisted before the record that uses it is published, so
    /// a crash can skip a number but never hand one out twice.
    pub fn next_token(&self, g: &mut Guard) -> Result<u64> {
        let current = match g.counter {
            Some(c) => c,
            None => {
                let mut buf = [0u8; 32];
                let n = g
                    .file
                    .read_at(&mut buf, 0)
                    .map_err(|e| Error::io(self.root.join(GUARD), e))?;
                let stored = std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                match stored {
                    Some(c) => c,
                    // A new or damaged counter: never go below a token already handed out.
                    None => self.max_token_on_disk()?,
                }
            }
        };
        let next = current + 1;
        let text = format!("{next:020}\n");
        g.file
            .write_all_at(text.as_bytes(), 0)
            .map_err(|e| Error::io(self.root.join(GUARD), e))?;
        g.counter = Some(next);
        Ok(next)
    }

    fn max_token_on_disk(&self) -> Result<u64> {
        let mut max = 0;
        for (_, slot) in self.scan()? {
            if let Slot::Held(r) = slot {
                max = max.max(r.token);
            }
        }
        Ok(max)
    }

    /// Publish a record for a key that has none. Fails if one appeared meanwhile.
    pub fn insert(&self, _g: &Guard, record: &Record) -> Result<()> {
        let tmp = self.write_temp(&encode_record(record)?)?;
        let dest = self.record_path(&record.key);
        match rename_noreplace(&tmp, &dest) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
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
    pub fn replace(&self, g: &Guard, record: &Record) -> Result<()> {
        let bytes = encode_record(record)?;
        self.publish_replace(g, &bytes, &self.record_path(&record.key))
    }

    /// Write `bytes` to `dest` whole: temp file, then rename over whatever is there.
    pub(crate) fn publish_replace(&self, _g: &Guard, bytes: &[u8], dest: &Path) -> Result<()> {
        let tmp = self.write_temp(bytes)?;
        std::fs::rename(&tmp, dest).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(dest, e)
        })
    }

    /// Create a subdirectory of the store when missing; refuse a symlink in its place.
    pub(crate) fn ensure_dir(&self, dir: &Path) -> Result<()> {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(Error::Store(format!(
                "{} is not a directory (a symlink or file was put there); remove it",
                dir.display()
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::create_dir(dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(Error::io(dir, e)),
            },
            Err(e) => Err(Error::io(dir, e)),
        }
    }

    /// Remove a key's record (or the damaged file in its place).
    pub fn remove(&self, _g: &Guard, key: &str) -> Result<()> {
        let path = self.record_path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            // A directory planted where a record goes: remove it if it is empty.
            Err(_) if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) => {
                std::fs::remove_dir(&path).map_err(|e| {
                    Error::io(&path, std::io::Error::other(format!("a directory is where a record belongs and it is not empty ({e}); inspect and remove it by hand")))
                })
            }
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    fn write_temp(&self, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.tmp.join(format!("{}.tmp", std::process::id()));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        f.write_all(bytes).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            Error::io(&path, e)
        })?;
        Ok(path)
    }

    /// Append one event to the audit log (one `write` on an `O_APPEND` file), rotating
    /// the log first when it would grow past `audit_max_size`.
    pub fn audit(&self, _g: &Guard, event: &AuditEvent) -> Result<()> {
        let path = self.root.join(AUDIT);
        let mut line = serde_json::to_vec(event)
            .map_err(|e| Error::Store(format!("cannot encode audit event: {e}")))?;
        line.push(b'\n');
        let size = match std::fs::symlink_metadata(&path) {
            Ok(m) => m.len(),
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
        registry::append_line(&path, &line)
    }

    /// `audit.jsonl` becomes `audit.jsonl.1`, `.1` becomes `.2`, …; the oldest beyond
    /// `keep` is deleted. Runs under the guard, like every append.
    fn rotate_audit(&self, keep: usize) -> Result<()> {
        let name = |i: usize| self.root.join(format!("{AUDIT}.{i}"));
        // The oldest go first, including any left from a larger audit_keep.
        for old in self.audit_files() {
            let index = old
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(&format!("{AUDIT}.")))
                .and_then(|i| i.parse::<usize>().ok());
            if index.is_some_and(|i| i >= keep.max(1)) {
                let _ = std::fs::remove_file(&old);
            }
        }
        if keep == 0 {
            return match std::fs::remove_file(self.root.join(AUDIT)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(self.root.join(AUDIT), e)),
            };
        }
        for i in (1..keep).rev() {
            match std::fs::rename(name(i), name(i + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(name(i), e)),
            }
        }
        std::fs::rename(self.root.join(AUDIT), name(1)).map_err(|e| Error::io(name(1), e))
    }

    /// The audit files, oldest first (rotated ones, then the current one).
    pub fn audit_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                let i = n.strip_prefix(&format!("{AUDIT}."))?.parse().ok()?;
                Some((i, e.path()))
            })
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut out: Vec<PathBuf> = files.into_iter().map(|(_, p)| p).collect();
        out.push(self.root.join(AUDIT));
        out
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

/// The pid holding a flock on `path` (from `/proc/locks`, matched by device and inode),
/// its command name and whether it is stopped.
fn guard_holder(path: &Path) -> Option<(u32, Option<String>, bool)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let ino = format!(":{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->" after the
    // number. Some file systems (overlayfs) show another device than stat does, so
    // the inode alone is the fallback.
    let holders: Vec<(bool, u32)> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&"FLOCK") {
                return None;
            }
            let file = *fields.get(5)?;
            let pid = fields.get(4)?.parse::<u32>().ok().filter(|p| *p > 0)?;
            if file == want {
                Some((true, pid))
            } else if file.ends_with(&ino) {
                Some((false, pid))
            } else {
                None
            }
        })
        .collect();
    let pid = match holders.iter().find(|h| h.0) {
        Some(h) => h.1,
        None if holders.len() == 1 => holders[0].1,
        None => return None,
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string());
    let stopped = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace()
                .next()
                .map(|st| st == "T" || st == "t")
        })
        .unwrap_or(false);
    Some((pid, comm, stopped))
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

#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    let f = CString::new(from.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let t = CString::new(to.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => link_then_unlink(from, to),
        _ => Err(err),
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    link_then_unlink(from, to)
}

/// For file systems without `RENAME_NOREPLACE`: `link` fails if the name is taken.
fn link_then_unlink(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::hard_link(from, to)?;
    let _ = std::fs::remove_file(from);
    Ok(())
}

fn newer(v: u64) -> String {
    format!(
        "it has format version {v}, newer than this tasklock understands ({FORMAT_VERSION}); upgrade tasklock"
    )
}

impl AuditEvent {
    /// An event with only the required fields; set the others as they apply.
    pub fn new(ts: Time, event: &str, key: &str, agent: &str) -> AuditEvent {
        AuditEvent {
            ts,
            event: event.to_string(),
            key: key.to_string(),
            agent: agent.to_string(),
            name: None,
            token: None,
            reason: None,
            by: None,
            holder: None,
            detail: None,
        }
    }
}

/// One line of `audit.jsonl`. `agent` is the agent the event is about: the one that
/// acquired, was denied, released, or whose checkout was force- or auto-released.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditEvent {
    pub ts: Time,
    pub event: String,
    pub key: String,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who caused the event when it is not `agent` (force and auto releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// For a deny: who held the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

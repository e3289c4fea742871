//! `audit`: the event log, across rotated files, filtered; `--follow` streams it.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use super::Ctx;
use crate::duration::to_chrono;
use crate::error::{Error, Result};
use crate::render::Format;
use crate::report::{AuditReport, Report};
use crate::store::{AuditEvent, FileStore};

/// Which events to show.
pub struct Filter {
    pub since: Option<Duration>,
    pub key: Option<String>,
    pub agent: Option<String>,
    /// Show at most this many (the most recent); 0 for all.
    pub limit: usize,
}

impl Filter {
    fn matches(&self, ctx: &Ctx, e: &AuditEvent) -> bool {
        if let Some(s) = self.since
            && e.ts < ctx.now - to_chrono(s)
        {
            return false;
        }
        if self.key.as_deref().is_some_and(|k| k != e.key) {
            return false;
        }
        if let Some(a) = &self.agent {
            let involved =
                e.agent == *a || e.by.as_deref() == Some(a) || e.holder.as_deref() == Some(a);
            if !involved {
                return false;
            }
        }
        true
    }
}

pub fn run(ctx: &Ctx, filter: &Filter) -> Result<Report> {
    if let Some(k) = &filter.key {
        crate::key::validate(k)?;
    }
    let mut events = Vec::new();
    let mut unreadable = 0;
    if let Some(store) = ctx.existing_store()? {
        for path in store.audit_files() {
            read_events(
                &path,
                &mut |line| match serde_json::from_str::<AuditEvent>(line) {
                    Ok(e) if filter.matches(ctx, &e) => events.push(e),
                    Ok(_) => {}
                    Err(_) => unreadable += 1,
                },
            )?;
        }
    }
    let matched = events.len();
    if filter.limit > 0 && events.len() > filter.limit {
        events.drain(..events.len() - filter.limit);
    }
    Ok(Report::Audit(AuditReport {
        command: "audit",
        now: ctx.now,
        matched,
        unreadable_lines: unreadable,
        events,
    }))
}

fn read_events(path: &Path, each: &mut dyn FnMut(&str)) -> Result<()> {
    let file = match crate::store::at::open_regular_path(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    };
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if !line.trim().is_empty() {
            each(&line);
        }
    }
    Ok(())
}

/// Print the matching events so far, then new ones as they are appended, following the
/// log through rotation, until SIGINT or SIGTERM.
///
/// Files are told apart by inode: the current file is held open, so lines written to it
/// just before it is rotated away are still read; files rotated in and out between two
/// polls are read whole, unless more rotations than `audit_keep` happened in between.
pub fn follow(ctx: &Ctx, filter: &Filter, format: Format, out: &mut dyn Write) -> Result<()> {
    crate::signals::install();
    let dir = &ctx.dir;
    let path = dir.join(crate::store::AUDIT);
    let store = FileStore::open_existing(dir)?;
    // Open the current file first, so nothing appended after the first read is missed.
    let mut cur = open_current(&path);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut first = Vec::new();
    if let Some(store) = &store {
        let skip = cur.as_ref().map(|c| c.ino);
        read_rotated(store, &path, skip, &mut seen, &mut |e| first.push(e));
    }
    if let Some(c) = cur.as_mut() {
        c.drain(&mut |e| first.push(e));
    }
    let mut first: Vec<AuditEvent> = first
        .into_iter()
        .filter(|e| filter.matches(ctx, e))
        .collect();
    if filter.limit > 0 && first.len() > filter.limit {
        first.drain(..first.len() - filter.limit);
    }
    let print =
        |out: &mut dyn Write, e: &AuditEvent, now: &crate::clock::Time| -> std::io::Result<()> {
            match format {
                Format::Json => writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default()),
                Format::Markdown => writeln!(out, "{}", crate::render::markdown::audit_row(e, now)),
            }
        };
    if format == Format::Markdown {
        let _ = write!(out, "{}", crate::render::markdown::AUDIT_HEADER);
    }
    for e in &first {
        let _ = print(out, e, &ctx.now);
    }
    let _ = out.flush();
    // New events: everything after the first read passes (only --key/--agent filter).
    let live = Filter {
        since: None,
        key: filter.key.clone(),
        agent: filter.agent.clone(),
        limit: 0,
    };
    while crate::signals::received().is_none() {
        std::thread::sleep(Duration::from_millis(200));
        let mut fresh = Vec::new();
        if let Some(c) = cur.as_mut() {
            c.drain(&mut |e| fresh.push(e));
        }
        let on_disk = std::fs::metadata(&path).map(|m| m.ino()).ok();
        if on_disk.is_some() && on_disk != cur.as_ref().map(|c| c.ino) {
            // Rotated (once or more), or created: finish the old file, read any file
            // rotated in and out since, then follow the new current file.
            if let Some(c) = cur.as_mut() {
                c.drain(&mut |e| fresh.push(e));
                seen.insert(c.ino);
            }
            let next = open_current(&path);
            if let Some(store) = &store {
                let skip = next.as_ref().map(|n| n.ino);
                read_rotated(store, &path, skip, &mut seen, &mut |e| fresh.push(e));
            }
            cur = next;
            if let Some(c) = cur.as_mut() {
                c.drain(&mut |e| fresh.push(e));
            }
        }
        let now = crate::clock::now().unwrap_or(ctx.now);
        for e in fresh.iter().filter(|e| live.matches(ctx, e)) {
            if print(out, e, &now).is_err() {
                return Ok(()); // the reader went away
            }
        }
        let _ = out.flush();
    }
    Ok(())
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
    let file = crate::store::at::open_regular_path(path).ok()?;
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
        let Ok(f) = crate::store::at::open_regular_path(&p) else {
            continue;
        };
        let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
        if skip == Some(ino) || !seen.insert(ino) {
            continue;
        }
        read_lines(f, each);
    }
}

fn read_lines(file: File, each: &mut dyn FnMut(AuditEvent)) {
    for line in BufReader::new(file).lines().map_while(|l| l.ok()) {
        if let Ok(e) = serde_json::from_str::<AuditEvent>(line.trim()) {
            each(e);
        }
    }
}

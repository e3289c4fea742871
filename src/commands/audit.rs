//! `audit`: the event log, across rotated files, filtered; `--follow` streams it.

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
    if let Some(store) = FileStore::open_existing(&ctx.dir)? {
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
    let file = match File::open(path) {
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

/// Print the matching events so far, then new ones as they are appended (following the
/// log through rotation) until SIGINT or SIGTERM.
pub fn follow(ctx: &Ctx, filter: &Filter, format: Format, out: &mut dyn Write) -> Result<()> {
    crate::signals::install();
    let Report::Audit(first) = run(ctx, filter)? else {
        unreachable!("audit returns an audit report")
    };
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
    for e in &first.events {
        let _ = print(out, e, &ctx.now);
    }
    let _ = out.flush();
    let path = ctx.dir.join(crate::store::AUDIT);
    let mut current: Option<(File, u64)> = None;
    let mut offset = 0u64;
    if let Ok(f) = File::open(&path) {
        offset = f.metadata().map(|m| m.len()).unwrap_or(0);
        let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
        current = Some((f, ino));
    }
    let mut pending = String::new();
    while crate::signals::received().is_none() {
        std::thread::sleep(Duration::from_millis(200));
        // Drain what was appended to the file we have open (even if it was rotated away).
        if let Some((f, _)) = current.as_mut() {
            let mut buf = String::new();
            if f.seek(SeekFrom::Start(offset)).is_ok() && f.read_to_string(&mut buf).is_ok() {
                offset += buf.len() as u64;
                pending.push_str(&buf);
            }
        }
        while let Some(nl) = pending.find('\n') {
            let line: String = pending.drain(..=nl).collect();
            if let Ok(e) = serde_json::from_str::<AuditEvent>(line.trim())
                && filter.matches(
                    &Ctx {
                        now: e.ts,
                        ..ctx.clone()
                    },
                    &e,
                )
            {
                let now = crate::clock::now().unwrap_or(e.ts);
                if print(out, &e, &now).is_err() {
                    return Ok(()); // the reader went away
                }
            }
        }
        let _ = out.flush();
        // Rotated (or created): switch to the new file from its start.
        let on_disk = std::fs::metadata(&path).map(|m| m.ino()).ok();
        if on_disk.is_some() && on_disk != current.as_ref().map(|c| c.1) {
            // Lines written to the old file just before it was rotated away.
            if let Some((f, _)) = current.as_mut() {
                let mut buf = String::new();
                if f.seek(SeekFrom::Start(offset)).is_ok() && f.read_to_string(&mut buf).is_ok() {
                    for line in buf.lines() {
                        if let Ok(e) = serde_json::from_str::<AuditEvent>(line.trim())
                            && filter.matches(
                                &Ctx {
                                    now: e.ts,
                                    ..ctx.clone()
                                },
                                &e,
                            )
                        {
                            let _ = print(out, &e, &e.ts);
                        }
                    }
                }
            }
            if let Ok(f) = File::open(&path) {
                let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
                current = Some((f, ino));
                offset = 0;
            }
        }
    }
    Ok(())
}

//! `audit`: the event log, across rotated files, filtered; `--follow` streams it.

use std::io::Write;
use std::time::Duration;

use crate::duration::to_chrono;
use crate::engine::Ctx;
use crate::error::Result;
use crate::render::Format;
use crate::report::{AuditReport, Report};
use crate::store::AuditEvent;

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
            && e.ts < ctx.now() - to_chrono(s)
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
        unreadable = store.audit_events(&mut |e| {
            if filter.matches(ctx, &e) {
                events.push(e);
            }
        })?;
    }
    let matched = events.len();
    if filter.limit > 0 && events.len() > filter.limit {
        events.drain(..events.len() - filter.limit);
    }
    Ok(Report::Audit(AuditReport {
        command: "audit",
        now: ctx.now(),
        matched,
        unreadable_lines: unreadable,
        events,
    }))
}

/// How often `--follow` looks for new events (and for a signal).
const POLL: Duration = Duration::from_millis(200);

/// Print the matching events so far, then new ones as they are appended, until SIGINT
/// or SIGTERM.
pub fn follow(ctx: &Ctx, filter: &Filter, format: Format, out: &mut dyn Write) -> Result<()> {
    crate::signals::install();
    let print =
        |out: &mut dyn Write, e: &AuditEvent, now: &crate::clock::Time| -> std::io::Result<()> {
            match format {
                Format::Json => writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default()),
                Format::Markdown | Format::Table(_) => {
                    writeln!(out, "{}", crate::render::markdown::audit_row(e, now))
                }
            }
        };
    if format == Format::Markdown {
        let _ = write!(out, "{}", crate::render::markdown::AUDIT_HEADER);
    }
    // A lock directory made after the command started is followed from when it appears,
    // and all of its events are new.
    let mut store = ctx.existing_store()?;
    let existed = store.is_some();
    while store.is_none() {
        let _ = out.flush();
        if crate::signals::received().is_some() {
            return Ok(());
        }
        std::thread::sleep(POLL);
        store = ctx.existing_store()?;
    }
    let store = store.expect("found");
    let mut log = store.follow_audit()?;
    let mut first = log.next(Duration::ZERO)?;
    // New events: everything after the first read passes (only --key/--agent filter).
    let live = Filter {
        since: None,
        key: filter.key.clone(),
        agent: filter.agent.clone(),
        limit: 0,
    };
    if existed {
        first.retain(|e| filter.matches(ctx, e));
        if filter.limit > 0 && first.len() > filter.limit {
            first.drain(..first.len() - filter.limit);
        }
    } else {
        first.retain(|e| live.matches(ctx, e));
    }
    for e in &first {
        if print(out, e, &ctx.now()).is_err() {
            return Ok(());
        }
    }
    let _ = out.flush();
    while crate::signals::received().is_none() {
        let fresh = log.next(POLL)?;
        let now = crate::clock::now().unwrap_or(ctx.now());
        for e in fresh.iter().filter(|e| live.matches(ctx, e)) {
            if print(out, e, &now).is_err() {
                return Ok(()); // the reader went away
            }
        }
        let _ = out.flush();
    }
    Ok(())
}

/// `audit` (`--follow` is served before a command's context exists: see `lib.rs`).
/// `agent`: the global `--agent`, a filter here.
pub fn execute(ctx: &Ctx, a: crate::cli::AuditArgs, agent: Option<String>) -> Result<Report> {
    run(
        ctx,
        &Filter {
            since: a.since,
            key: a.key,
            agent,
            limit: a.limit,
        },
    )
}

//! `backlog`: the project's backlog of keys for `checkout --next`. `add` appends keys
//! (from the command line, a file or standard input), `remove` takes them out, `show`
//! (the default) prints the counts, the next keys in line and the claims.

use std::io::Read;

use crate::cli::{BacklogAction, BacklogArgs};
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::report::{BacklogKey, BacklogReport, Report};
use crate::store::Store;

/// Ready keys shown by `backlog`.
const SHOWN: usize = 10;

pub fn execute(ctx: &Ctx, a: BacklogArgs) -> Result<Report> {
    match a.action.unwrap_or(BacklogAction::Show) {
        BacklogAction::Show => {
            let Some(store) = ctx.existing_store()? else {
                return Ok(empty(ctx, "show"));
            };
            let claims = store
                .backlog_claimed()?
                .into_iter()
                .map(|e| BacklogKey {
                    key: e.key,
                    seq: e.seq,
                    claimed_by: e.claimed.map(|c| c.agent),
                })
                .collect();
            report(ctx, &*store, "show", None, None, Some(claims))
        }
        BacklogAction::Add(add) => {
            let keys = keys_of(add.keys, add.file.as_deref())?;
            let store = ctx.open_store()?;
            let added = store.transaction(|g| store.backlog_add(g, &keys))?;
            report(ctx, &*store, "add", Some(added), None, None)
        }
        BacklogAction::Remove(rm) => {
            let keys = keys_of(rm.keys, rm.file.as_deref())?;
            let Some(store) = ctx.existing_store()? else {
                let mut r = empty(ctx, "remove");
                if let Report::Backlog(b) = &mut r {
                    b.removed = Some(Vec::new());
                }
                return Ok(r);
            };
            let removed = store.transaction(|g| store.backlog_remove(g, &keys))?;
            report(ctx, &*store, "remove", None, Some(removed), None)
        }
    }
}

fn report(
    ctx: &Ctx,
    store: &dyn Store,
    action: &'static str,
    added: Option<usize>,
    removed: Option<Vec<String>>,
    claims: Option<Vec<BacklogKey>>,
) -> Result<Report> {
    let summary = store.backlog_summary(true)?;
    let next = store
        .backlog_ready(None, SHOWN)?
        .into_iter()
        .map(|e| BacklogKey {
            key: e.key,
            seq: e.seq,
            claimed_by: None,
        })
        .collect();
    Ok(Report::Backlog(BacklogReport {
        command: "backlog",
        now: ctx.now(),
        action,
        added,
        removed,
        ready: summary.ready,
        claimed: summary.claimed,
        next,
        claims,
    }))
}

fn empty(ctx: &Ctx, action: &'static str) -> Report {
    Report::Backlog(BacklogReport {
        command: "backlog",
        now: ctx.now(),
        action,
        added: None,
        removed: None,
        ready: 0,
        claimed: 0,
        next: Vec::new(),
        claims: (action == "show").then(Vec::new),
    })
}

/// The keys named on the command line, then those of `--file`, validated.
fn keys_of(mut keys: Vec<String>, file: Option<&std::path::Path>) -> Result<Vec<String>> {
    if let Some(file) = file {
        keys.extend(read_keys(file)?);
    }
    crate::key::validate_all(keys)
}

/// The most a `--file` of keys may hold: room for about a million keys, and a bound on
/// what an endless input (`/dev/zero`, `yes |`) can make the command read.
const MAX_KEYS_FILE: u64 = 16 << 20;

/// The keys of a file (or standard input for `-`), one a line, in NFC; blank lines and
/// `#` comments skipped. A bad key names its line; more than [`MAX_KEYS_FILE`] bytes is
/// refused, having read no more than that.
fn read_keys(file: &std::path::Path) -> Result<Vec<String>> {
    let mut bytes = Vec::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_KEYS_FILE + 1)
            .read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(MAX_KEYS_FILE + 1).read_to_end(&mut bytes))
    };
    let cannot = |e: &dyn std::fmt::Display| {
        Error::Usage(format!("cannot read keys from {}: {e}", file.display()))
    };
    read.map_err(|e| cannot(&e))?;
    if bytes.len() as u64 > MAX_KEYS_FILE {
        return Err(Error::Usage(format!(
            "{} holds more than {} MiB of keys; add them in parts of at most that size",
            file.display(),
            MAX_KEYS_FILE >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| cannot(&"it is not UTF-8"))?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let k = crate::key::normalize(line);
        crate::key::validate(&k)
            .map_err(|e| Error::Usage(format!("{}, line {}: {e}", file.display(), i + 1)))?;
        keys.push(k);
    }
    Ok(keys)
}

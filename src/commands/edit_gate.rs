//! The edit hook: Claude Code's PreToolUse for the file-editing tools (Edit, Write,
//! MultiEdit, NotebookEdit). Path checkouts are enforced where edits happen: an edit of
//! a file another live agent has checked out is refused (or warned about, as
//! `enforce:` in config.yaml says), an edit inside the agent's own checkout is allowed
//! and stamped (for the pre-commit guard), and an unclaimed file is left alone or
//! checked out for the agent (`auto_checkout:`).
//!
//! Reads only, unless it must write: a stamp is an append outside the lock directory,
//! and only `auto_checkout` takes the guard. Errors are the caller's to report on
//! stderr; the edit is then allowed (an unreadable store must not block all editing).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use super::checkout::{self, Join};
use crate::clock::Time;
use crate::config::Enforce;
use crate::engine::{Ctx, Judge, edits, paths as epaths, stamps};
use crate::error::Result;
use crate::report::Report;
use crate::store::Record;

/// The tools that edit files, and where each names its file.
pub const EDIT_TOOLS: [(&str, &str); 4] = [
    ("Edit", "file_path"),
    ("Write", "file_path"),
    ("MultiEdit", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// The hook matcher for those tools (`tasklock init` wires it).
pub const EDIT_MATCHER: &str = "Edit|Write|MultiEdit|NotebookEdit";

/// The file an editing tool call edits, as given (absolute in Claude Code's input).
pub fn edited_file(payload: &Value) -> Option<&str> {
    let tool = payload["tool_name"].as_str()?;
    let (_, field) = EDIT_TOOLS.iter().find(|(t, _)| *t == tool)?;
    payload["tool_input"][*field]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Another agent's live checkout covering the file.
struct Holder {
    record: Record,
    pattern: String,
}

/// Judge one edit of `file` by `agent`. `cwd` is the session's directory, `dir` the
/// lock directory found from it (`None`: there is none, so nothing is checked out).
/// Returns the hook's output (none: allowed, nothing to say).
pub fn judge(
    dir: Option<PathBuf>,
    cwd: &Path,
    agent: &str,
    file: &str,
    authorize: &dyn Fn(&dyn crate::store::Store) -> Result<()>,
) -> Result<Option<String>> {
    let Some(dir) = dir else { return Ok(None) };
    let ctx = Ctx {
        dir,
        now: crate::clock::now()?,
        agent_flag: Some(agent.to_string()),
        name_flag: None,
        cfg: Default::default(),
    };
    let Some(store) = ctx.existing_store()? else {
        return Ok(None);
    };
    let cfg = ctx.config()?;
    let root = epaths::root(&ctx, cwd);
    // A file outside the repository (or a link out of it) is not ours to guard.
    let Ok(rel) = crate::paths::normalize_file(&root, cwd, file) else {
        return Ok(None);
    };
    let mut judge = Judge::new(&ctx, &*store);
    let mut others = Vec::new();
    let mut mine: Option<Record> = None;
    for (record, pattern) in epaths::covering(&*store, &rel)? {
        // Expired leases and dead holders block nothing; they are ended by the next
        // checkout that needs them, not here (no writes under the guard for a read).
        if judge.reap_reason(&record)?.is_some() {
            continue;
        }
        if record.held_by(agent) {
            if !record.expired_for_holder(&ctx.now) && mine.is_none() {
                mine = Some(record);
            }
        } else {
            others.push(Holder { record, pattern });
        }
    }
    if !others.is_empty() {
        match cfg.enforce {
            Enforce::Deny => return Ok(Some(deny(&ctx, &rel, &others))),
            Enforce::Warn => return Ok(Some(warn(&ctx, &rel, &others))),
            Enforce::Off => {}
        }
    }
    if let Some(r) = mine {
        stamp(&root, agent, &rel, &r.key, r.token, &ctx)?;
        return Ok(None);
    }
    if !others.is_empty() || !cfg.auto_checkout {
        return Ok(None);
    }
    // Unclaimed, and the settings say: check it out for the agent.
    authorize(&*store)?;
    drop(store);
    let pattern = crate::paths::escape(&rel);
    let key = crate::key::for_paths(std::slice::from_ref(&pattern))?;
    let Report::Checkout(r) = checkout::run(
        &ctx,
        &key,
        vec![pattern],
        None,
        Some("checked out by the edit hook (auto_checkout)".into()),
        Join::No,
    )?
    else {
        unreachable!("checkout returns a checkout report")
    };
    if r.outcome.exit_code() == 0
        && let Some(c) = &r.checkout
    {
        stamp(&root, agent, &rel, &r.key, c.token, &ctx)?;
        return Ok(Some(context(format!(
            "tasklock: `{rel}` was checked out for you as `{}` (auto_checkout); release it with `tasklock release {}` when you are done with the file.",
            r.key,
            crate::error::shell_quote(&r.key)
        ))));
    }
    // Refused: someone else's checkout (or a reservation, or a freeze) is in the way.
    // Each with its label, for the prose.
    let in_the_way: Vec<(String, HolderData)> = if r.overlaps.is_empty() {
        r.checkout
            .iter()
            .map(|c| {
                let h = HolderData {
                    agent: &c.agent.id,
                    name: c.agent.name.as_deref(),
                    key: &c.key,
                    token: Some(c.token),
                    pattern: None,
                    until: c.expires_at,
                    reserved: false,
                };
                (c.agent.label(), h)
            })
            .collect()
    } else {
        r.overlaps
            .iter()
            .map(|o| {
                let h = HolderData {
                    agent: &o.agent.id,
                    name: o.agent.name.as_deref(),
                    key: &o.key,
                    token: o.token,
                    pattern: Some(&o.theirs),
                    until: o.until,
                    reserved: o.reserved,
                };
                (o.agent.label(), h)
            })
            .collect()
    };
    let blockers: Vec<String> = in_the_way
        .iter()
        .map(|(label, h)| match h.pattern {
            None => format!("`{label}` holds `{}`", h.key),
            Some(pattern) => format!(
                "`{label}` {} `{}` (pattern `{pattern}`)",
                if h.reserved {
                    "is next in line for"
                } else {
                    "holds"
                },
                h.key
            ),
        })
        .collect();
    let holders: Vec<HolderData> = in_the_way.into_iter().map(|(_, h)| h).collect();
    let data = hook_data(&rel, &holders);
    let what = if blockers.is_empty() {
        format!(
            "the automatic checkout of `{rel}` was refused ({})",
            serde_json::to_value(r.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )
    } else {
        format!(
            "the automatic checkout of `{rel}` was refused: {}",
            blockers.join("; ")
        )
    };
    Ok(match cfg.enforce {
        Enforce::Deny => Some(deny_text(
            &format!("tasklock: {what}. {}", advice(&rel)),
            data,
        )),
        Enforce::Warn => Some(warn_text(
            &format!(
                "tasklock warning: {what}. The edit goes ahead (enforce: warn), but {}",
                advice(&rel)
            ),
            data,
        )),
        Enforce::Off => None,
    })
}

/// Record that `agent` edited `file` (as the tool named it), in the edit records of the
/// worktree of `cwd`. A file outside the repository is not recorded.
pub fn record_edit(cwd: &Path, agent: &str, file: &str, now: &Time) -> Result<()> {
    let Some(root) = crate::paths::roots(cwd).map(|r| r.worktree) else {
        return Ok(());
    };
    let Ok(rel) = crate::paths::normalize_file(&root, cwd, file) else {
        return Ok(());
    };
    let Some(dir) = edits::dir(&root) else {
        return Ok(());
    };
    edits::record(
        &dir,
        &edits::Edit {
            file: rel,
            agent: agent.to_string(),
            at: *now,
        },
    )
}

/// Forget the edits of `agent` and its subagents in the worktree of `cwd` (its session
/// ended), and every entry past the retention.
pub fn forget_edits(cwd: &Path, agent: &str, now: &Time) -> Result<()> {
    let Some(dir) = crate::paths::roots(cwd).and_then(|r| edits::dir(&r.worktree)) else {
        return Ok(());
    };
    edits::forget(&dir, &mut |e| {
        edits::is_own(&e.agent, agent) || e.expired(now)
    })?;
    Ok(())
}

fn stamp(root: &Path, agent: &str, rel: &str, key: &str, token: u64, ctx: &Ctx) -> Result<()> {
    let Some(dir) = stamps::dir(root) else {
        return Ok(());
    };
    stamps::record(
        &dir,
        agent,
        &stamps::Stamp {
            file: rel.to_string(),
            key: key.to_string(),
            token,
            at: ctx.now,
        },
    )
}

fn holders_text(ctx: &Ctx, others: &[Holder]) -> String {
    others
        .iter()
        .map(|h| {
            let r = &h.record;
            let who = match &r.agent.name {
                Some(n) => format!("`{}` ({n})", r.agent.id),
                None => format!("`{}`", r.agent.id),
            };
            let why = r
                .reason
                .as_deref()
                .map(|t| format!(", reason: {t}"))
                .unwrap_or_default();
            format!(
                "{who} holds `{}` (pattern `{}`, token {}, lease until {}, {}{why})",
                r.key,
                h.pattern,
                r.token,
                crate::clock::rfc3339(&r.expires_at),
                crate::clock::relative(&r.expires_at, &ctx.now),
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One agent in the way of an edit, for programs (the prose says the same for the model).
#[derive(Serialize)]
struct HolderData<'a> {
    agent: &'a str,
    name: Option<&'a str>,
    key: &'a str,
    /// None for a reservation.
    token: Option<u64>,
    /// The holder's pattern that covers the file; None when the refusal was over the key.
    pattern: Option<&'a str>,
    /// When the lease (or the reservation) ends.
    until: Time,
    /// Next in line for the key (a reservation), not its holder.
    reserved: bool,
}

fn holders_data(others: &[Holder]) -> Vec<HolderData<'_>> {
    others
        .iter()
        .map(|h| HolderData {
            agent: &h.record.agent.id,
            name: h.record.agent.name.as_deref(),
            key: &h.record.key,
            token: Some(h.record.token),
            pattern: Some(&h.pattern),
            until: h.record.expires_at,
            reserved: false,
        })
        .collect()
}

/// The top-level `tasklock` object of a deny or warning: the file and who is in the way,
/// so that programs reading the hook's output need not parse the prose. Claude Code
/// ignores top-level keys it does not know.
fn hook_data(rel: &str, holders: &[HolderData]) -> Value {
    json!({ "file": rel, "holders": holders })
}

fn advice(rel: &str) -> String {
    format!(
        "Do not edit it now: work on other files. To be told when it is free, run `tasklock checkout --path {} --queue` (exit 2 with your place in line; the inbox tells you when it is yours). Never retry this edit in a loop.",
        crate::error::shell_quote(&crate::paths::escape(rel))
    )
}

fn deny(ctx: &Ctx, rel: &str, others: &[Holder]) -> String {
    deny_text(
        &format!(
            "tasklock: `{rel}` is checked out by another agent: {}. {}",
            holders_text(ctx, others),
            advice(rel)
        ),
        hook_data(rel, &holders_data(others)),
    )
}

fn warn(ctx: &Ctx, rel: &str, others: &[Holder]) -> String {
    warn_text(
        &format!(
            "tasklock warning: `{rel}` is checked out by another agent: {}. The edit goes ahead (enforce: warn), but you may be overwriting their work. {}",
            holders_text(ctx, others),
            advice(rel)
        ),
        hook_data(rel, &holders_data(others)),
    )
}

fn deny_text(reason: &str, data: Value) -> String {
    let v = json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        },
        "tasklock": data,
    });
    format!("{v}\n")
}

fn warn_text(text: &str, data: Value) -> String {
    let v = json!({
        "systemMessage": text,
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "additionalContext": text,
        },
        "tasklock": data,
    });
    format!("{v}\n")
}

fn context(text: String) -> String {
    let v = json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "additionalContext": text,
        }
    });
    format!("{v}\n")
}

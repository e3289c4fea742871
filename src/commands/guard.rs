//! `tasklock guard-commit`: the git pre-commit guard. A commit is refused when it stages a
//! file that another live agent has checked out (exit 2), or a file the committing agent
//! edited under a checkout it no longer holds (exit 4: the fencing check, made when the
//! commit happens, from the edit stamps of `engine::stamps`).
//!
//! The committing agent is the caller's identity (`TASKLOCK_AGENT`, Claude Code's or
//! Codex's session, else the person at the terminal); a session's subagents count as the
//! session, since their work is committed by it. Without a store there is nothing to
//! guard: the commit passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::clock::Time;
use crate::engine::{Ctx, Judge, ReapReason, Settled, edits, paths, reap, stamps};
use crate::error::{Error, Result};
use crate::report::{CheckoutView, EditView, GuardFile, GuardReport, GuardVerdict, Report};
use crate::store::{EndHow, Record, Slot};

pub fn run(ctx: &Ctx) -> Result<Report> {
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let me = ctx.agent_id().ok();
    let mut report = GuardReport {
        command: "guard-commit",
        now: ctx.now(),
        agent: me.clone(),
        staged: 0,
        files: Vec::new(),
        unstage: None,
        edited_by_agents: Vec::new(),
    };
    let Some(store) = ctx.existing_store()? else {
        return Ok(Report::Guard(report));
    };
    let root = paths::root(ctx, &cwd);
    let stamped = match (&me, stamps::dir(&root)) {
        (Some(m), Some(dir)) => stamps_of(&dir, m)?,
        _ => Vec::new(),
    };
    let edit_dir = edits::dir(&root).filter(|d| has_entries(d));
    let coverage = paths::Coverage::load(&*store)?;
    // Nothing any staged file could meet: no need to ask git.
    if coverage.is_empty() && stamped.is_empty() && edit_dir.is_none() {
        return Ok(Report::Guard(report));
    }
    let staged = staged_files(&root)?;
    report.staged = staged.len();
    if staged.is_empty() {
        return Ok(Report::Guard(report));
    }
    let mut guarding = Guarding {
        ctx,
        store: &*store,
        judge: Judge::new(ctx, &*store),
        coverage: &coverage,
        edit_dir: edit_dir.as_deref(),
        stamped: &stamped,
        me: me.as_deref(),
        gone: Vec::new(),
    };
    let mut theirs: Vec<String> = Vec::new();
    for raw in staged {
        let file = match crate::paths::normalize_file(&root, &root, &raw) {
            Ok(f) => f,
            // Git names it, so it is inside the worktree; take git's spelling.
            Err(_) => crate::key::normalize(&raw),
        };
        let Some(v) = guarding.file(&file, &mut report)? else {
            continue;
        };
        if matches!(v.verdict, GuardVerdict::Held | GuardVerdict::Edited) {
            // As git spells it, for the command that unstages it.
            theirs.push(raw);
        }
        report.files.push(v);
    }
    if !theirs.is_empty() {
        let theirs: Vec<&str> = theirs.iter().map(String::as_str).collect();
        report.unstage = Some(unstage_command(&theirs));
    }
    let gone = guarding.gone;
    if let Some(dir) = &edit_dir
        && !gone.is_empty()
    {
        // Judged again under the lock: an entry replaced since by a newer edit stays.
        let wait = edits::wait_for(ctx.config().ok().map(|c| c.guard_timeout), false);
        let forgotten = edits::forget(dir, &mut |e| gone.contains(e), wait);
        crate::warnings::after_change(
            "the edits of ended agents were not forgotten",
            forgotten.map(drop),
        );
    }
    Ok(Report::Guard(report))
}

/// The commit's files judged one by one.
struct Guarding<'a> {
    ctx: &'a Ctx,
    store: &'a dyn crate::store::Store,
    judge: Judge<'a>,
    coverage: &'a paths::Coverage,
    edit_dir: Option<&'a Path>,
    stamped: &'a [stamps::Stamp],
    me: Option<&'a str>,
    /// Entries of editors found dead or ended: forgotten once judged.
    gone: Vec<edits::Edit>,
}

impl Guarding<'_> {
    fn mine(&self, id: &str) -> bool {
        self.me.is_some_and(|m| edits::is_own(id, m))
    }

    /// What refuses the commit of `file`, if anything: another live agent's checkout
    /// covering it, its last edit by another live agent, or the committer's edit stamped
    /// under a checkout it has lost. An edit by another agent with no one committing for
    /// an agent (a person at the terminal) is told in the report instead.
    fn file(&mut self, file: &str, report: &mut GuardReport) -> Result<Option<GuardFile>> {
        let row = |verdict| GuardFile {
            file: file.to_string(),
            verdict,
            key: None,
            token: None,
            pattern: None,
            checkout: None,
            ended: None,
            edit: None,
        };
        for (record, pattern) in self.coverage.covering(self.store, file)? {
            if self.mine(&record.agent.id) || self.judge.reap_reason(&record)?.is_some() {
                continue;
            }
            return Ok(Some(GuardFile {
                key: Some(record.key.clone()),
                token: Some(record.token),
                pattern: Some(pattern),
                checkout: Some(CheckoutView::from(&record)),
                ..row(GuardVerdict::Held)
            }));
        }
        if let Some(dir) = self.edit_dir
            && let Some(edit) = edits::read(dir, file)?
            && !self.mine(&edit.agent)
        {
            match live_editor(&mut self.judge, &self.ctx.now(), &edit)? {
                Some(view) => {
                    let f = GuardFile {
                        edit: Some(view),
                        ..row(GuardVerdict::Edited)
                    };
                    // Nobody to protect it from: a person at the terminal is told.
                    if self.me.is_some() {
                        return Ok(Some(f));
                    }
                    report.edited_by_agents.push(f);
                }
                None => self.gone.push(edit),
            }
        }
        if let Some(stamp) = self.stamped.iter().find(|s| s.file == file)
            && let Some(ended) = lost(self.ctx, self.store, &mut self.judge, stamp, self.me)?
        {
            return Ok(Some(GuardFile {
                key: Some(stamp.key.clone()),
                token: Some(stamp.token),
                ended,
                ..row(GuardVerdict::Lost)
            }));
        }
        Ok(None)
    }
}

/// Does the directory hold anything (entries, or the lock)?
fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| it.next().is_some())
}

/// The agent that made `edit`, if it is alive (or stalled); a subagent's edit counts as
/// long as the subagent or its session lives, since the session commits its work. An
/// agent the registry does not know has ended: the hook that records an edit beats
/// for its agent, so a live editor is always registered.
fn live_editor(judge: &mut Judge, now: &Time, edit: &edits::Edit) -> Result<Option<EditView>> {
    let cfg = judge.config()?.clone();
    let name = judge.entry(&edit.agent)?.and_then(|e| e.name);
    let mut id = edit.agent.as_str();
    loop {
        if let Some(e) = judge.entry(id)? {
            let j = crate::liveness::judge_entry(&e, now, &cfg);
            if !j.dead() {
                return Ok(Some(EditView {
                    agent: edit.agent.clone(),
                    name,
                    state: j.state,
                    edited_at: edit.at,
                }));
            }
        }
        match id.rfind('/') {
            Some(i) => id = &id[..i],
            None => return Ok(None),
        }
    }
}

/// `git restore --staged -- 'a' 'b'`: unstages the files (paths from the worktree top),
/// each quoted for the shell; a path with a glob character is given as a literal
/// pathspec, so it names that file only.
pub fn unstage_command(files: &[&str]) -> String {
    let quoted: Vec<String> = files
        .iter()
        .map(|f| {
            let spec = if f.contains(['*', '?', '[', '\\']) || f.starts_with(':') {
                format!(":(literal){f}")
            } else {
                (*f).to_string()
            };
            crate::error::shell_quote(&spec)
        })
        .collect();
    format!("git restore --staged -- {}", quoted.join(" "))
}

/// Is the checkout a stamp names lost? `None`: still held under that token, or released
/// by its holder (work given up on purpose). `Some(how)`: lost, and how it ended when
/// that is known. A checkout still there whose process is gone is ended first (as every
/// command ends its caller's own such checkout), by `me`.
fn lost(
    ctx: &Ctx,
    store: &dyn crate::store::Store,
    judge: &mut Judge,
    stamp: &stamps::Stamp,
    me: Option<&str>,
) -> Result<Option<Option<EndHow>>> {
    if let Slot::Held(r) = store.read(&stamp.key)?
        && r.token == stamp.token
    {
        match judge.own_end(&r)? {
            None => return Ok(None),
            // Still there, but a lease that ran out is lost for its holder.
            Some((ReapReason::Timeout, _)) => return Ok(Some(Some(EndHow::Timeout))),
            Some(_) => {
                let own_end = &mut |r: &Record, j: &mut Judge| j.own_end(r);
                match reap(ctx, store, judge, vec![r.id()], me, own_end)?.pop() {
                    // Ended by someone else meanwhile: how is read below.
                    Some((_, Settled::Ended { .. })) | None => {}
                    Some((_, Settled::Kept(Slot::Held(now)))) if now.token == stamp.token => {
                        return Ok(None);
                    }
                    Some((_, Settled::Kept(_))) => {}
                }
            }
        }
    }
    match store.read_ended(&stamp.key)? {
        Some(e) if e.token == stamp.token && e.how == EndHow::Released => Ok(None),
        Some(e) if e.token == stamp.token => Ok(Some(Some(e.how))),
        _ => Ok(Some(None)),
    }
}

/// The latest stamps of the agent and of its subagents.
fn stamps_of(dir: &Path, me: &str) -> Result<Vec<stamps::Stamp>> {
    let mut out: Vec<stamps::Stamp> = stamps::read(dir, me)?.into_values().collect();
    let prefix = crate::key::encode(&format!("{me}/"));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                let path: PathBuf = e.path();
                out.extend(stamps::read_path(&path)?.into_values());
            }
        }
    }
    // The newest stamp of each file counts.
    out.sort_by_key(|s| std::cmp::Reverse(s.at));
    let mut seen = std::collections::HashSet::new();
    out.retain(|s| seen.insert(s.file.clone()));
    Ok(out)
}

/// The files the commit would change, old and new side of a rename both.
fn staged_files(root: &Path) -> Result<Vec<String>> {
    let out = Command::new("git")
        .args([
            "diff",
            "--cached",
            "--name-only",
            "-z",
            "--no-renames",
            "--diff-filter=ACDMRTUXB",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| Error::Store(format!("cannot run git to list the staged files: {e}")))?;
    if !out.status.success() {
        return Err(Error::Store(format!(
            "git could not list the staged files: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

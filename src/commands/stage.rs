//! `tasklock stage`: stage exactly the caller's own edits. Several sessions share one
//! working tree; `git add -A` would take everyone's changes. This stages the files whose
//! last recorded edit (`engine::edits`, written by the edit hook) is the caller's or one
//! of its subagents', and that still differ from the index: `git add -- FILES`.
//! `--dry-run` lists them and stages nothing.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::engine::{Ctx, edits};
use crate::error::{Error, Result};
use crate::report::{Report, StageFile, StageReport};

/// Files per `git` invocation, to stay far below the argument limit.
const CHUNK: usize = 500;

pub fn run(ctx: &Ctx, dry_run: bool) -> Result<Report> {
    let me = ctx.agent_id()?;
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let root = crate::paths::roots(&cwd)
        .map(|r| r.worktree)
        .ok_or_else(|| {
            Error::Usage(
                "not inside a git repository: `tasklock stage` stages files of the worktree you are in".into(),
            )
        })?;
    let mut report = StageReport {
        command: "stage",
        now: ctx.now(),
        agent: me.clone(),
        dry_run,
        root: root.display().to_string(),
        files: Vec::new(),
        staged: 0,
    };
    let Some(dir) = edits::dir(&root) else {
        return Ok(Report::Stage(report));
    };
    let now = ctx.now();
    let mine: HashMap<String, edits::Edit> = edits::read_all(&dir)?
        .into_iter()
        .filter(|e| edits::is_own(&e.agent, &me) && !e.expired(&now))
        .map(|e| (e.file.clone(), e))
        .collect();
    if !dry_run {
        crate::warnings::after_change(
            "old edit records were not forgotten",
            edits::forget(
                &dir,
                &mut |e| e.expired(&now),
                edits::wait_for(ctx.config().ok().map(|c| c.guard_timeout), false),
            )
            .map(drop),
        );
    }
    if mine.is_empty() {
        return Ok(Report::Stage(report));
    }
    let mut files: Vec<&str> = mine.keys().map(String::as_str).collect();
    files.sort_unstable();
    // Records hold the form the hooks compare (NFC, and lower case where the repository
    // ignores case); git names files as they are on disk. Where the two can differ, ask
    // git about the whole worktree and compare in the records' form.
    let ignores_case = crate::paths::ignores_case(&root);
    let exact = !ignores_case && files.iter().all(|f| f.is_ascii());
    let form = |path: &str| {
        let nfc = crate::key::normalize(path);
        if ignores_case {
            crate::paths::fold_case(&nfc)
        } else {
            nfc
        }
    };
    for (path, change) in unstaged(&root, if exact { &files } else { &[] })? {
        if let Some(e) = mine.get(&form(&path)) {
            report.files.push(StageFile {
                file: path,
                change,
                agent: e.agent.clone(),
                edited_at: e.at,
            });
        }
    }
    report.files.sort_by(|a, b| a.file.cmp(&b.file));
    if !dry_run && !report.files.is_empty() {
        let paths: Vec<&str> = report.files.iter().map(|f| f.file.as_str()).collect();
        for chunk in paths.chunks(CHUNK) {
            git(&root, &["add", "--"], chunk)?;
        }
        report.staged = report.files.len();
    }
    Ok(Report::Stage(report))
}

/// Of `files` (every file of the worktree when empty), those whose working-tree state
/// differs from the index, and how: `git status`'s second column (`?` untracked, `D`
/// deleted, anything else a change).
fn unstaged(root: &Path, files: &[&str]) -> Result<Vec<(String, &'static str)>> {
    let mut out = Vec::new();
    let whole: [&[&str]; 1] = [&[]];
    let chunks: Vec<&[&str]> = if files.is_empty() {
        whole.to_vec()
    } else {
        files.chunks(CHUNK).collect()
    };
    for chunk in chunks {
        let stdout = git(
            root,
            &[
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
                "--",
            ],
            chunk,
        )?;
        for entry in stdout.split(|b| *b == 0) {
            if entry.len() < 4 {
                continue;
            }
            let change = match entry[1] {
                b' ' => continue,
                b'?' | b'A' => "added",
                b'D' => "deleted",
                _ => "modified",
            };
            out.push((String::from_utf8_lossy(&entry[3..]).into_owned(), change));
        }
    }
    Ok(out)
}

/// `git --literal-pathspecs ARGS PATHS` at the worktree top (each path names that file,
/// whatever characters it holds); its stdout.
fn git(root: &Path, args: &[&str], paths: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("--literal-pathspecs")
        .args(args)
        .args(paths)
        .current_dir(root)
        .output()
        .map_err(|e| Error::Store(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Store(format!(
            "git {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// `stage [--dry-run]`.
pub fn execute(ctx: &Ctx, a: crate::cli::StageArgs) -> Result<Report> {
    run(ctx, a.dry_run)
}

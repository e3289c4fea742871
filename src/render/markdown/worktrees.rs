//! `tasklock worktrees`, and the worktrees a `release` removed or kept.

use super::*;

/// A worktree's path as a person reads it: relative to its repository when inside it.
pub(in crate::render) fn shown_path(w: &crate::store::Worktree) -> String {
    if w.path.is_empty() {
        return "(none)".into();
    }
    match std::path::Path::new(&w.path).strip_prefix(&w.repo) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => w.path.clone(),
    }
}

/// One line per worktree a release (or `--clean`) dealt with.
pub(super) fn worktree_end_lines(out: &mut String, ends: &[WorktreeEnd], inv: &Invocation) {
    for e in ends {
        let (p, b) = (code(&shown_path(&e.worktree)), code(&e.worktree.branch));
        let branch = match (&e.why, e.branch_deleted) {
            (_, true) => format!(", and its branch {b} deleted"),
            (Some(why), false) => format!("; {why}"),
            (None, false) => String::new(),
        };
        let _ = match e.outcome {
            WorktreeOutcome::Removed => writeln!(out, "- Worktree {p} removed{branch}."),
            WorktreeOutcome::Missing => {
                writeln!(out, "- Worktree {p} was gone already{branch}.")
            }
            WorktreeOutcome::Kept => writeln!(
                out,
                "- Worktree {p} (branch {b}) kept: {}. {} then {}.",
                e.why.as_deref().unwrap_or("it holds work"),
                finish_words(&e.state, &e.worktree.branch),
                inv.code("worktrees --clean")
            ),
        };
    }
}

/// How to finish the work a kept worktree holds, so that it can go.
fn finish_words(s: &WorktreeState, branch: &str) -> String {
    match (s.changed_files > 0, s.unique_commits > 0) {
        (true, _) => "Commit or remove its changes, merge or push its commits,".into(),
        (false, true) => format!(
            "Merge its commits into another branch or push them ({}),",
            code(&format!("git push -u origin {branch}"))
        ),
        (false, false) => "Look at it,".into(),
    }
}

pub(super) fn worktrees(r: &WorktreesReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let ended = r.worktrees.iter().filter(|w| w.checkout.is_none()).count();
    let n = r.worktrees.len();
    if n == 0 {
        out.push_str("No worktrees made by tasklock here.\n");
    } else {
        let _ = writeln!(
            out,
            "{n} worktree{} made by tasklock; {ended} whose checkout has ended.\n",
            if n == 1 { "" } else { "s" }
        );
        out.push_str("| Key | Worktree | Branch | Checkout | State |\n|---|---|---|---|---|\n");
        for w in &r.worktrees {
            let checkout = match &w.checkout {
                Some(c) => format!("held by {}", cell(&c.agent.label())),
                None => "ended".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {checkout} | {} |",
                code_cell(&w.key),
                code_cell(&shown_path(&w.worktree)),
                code_cell(&w.worktree.branch),
                w.state.words()
            );
        }
    }
    if let Some(cleaned) = &r.cleaned {
        if cleaned.is_empty() {
            out.push_str("\nNothing to clean: no worktree whose checkout has ended.\n");
        } else {
            out.push_str("\nCleaned:\n\n");
            worktree_end_lines(&mut out, cleaned, inv);
        }
    }
    let _ = if ended > 0 {
        writeln!(
            out,
            "\nNext: {} removes those whose checkout has ended and that hold nothing of value; commit, merge or push the work of the others first.",
            inv.code("worktrees --clean")
        )
    } else {
        writeln!(
            out,
            "\nNext: a worktree goes when its checkout is released, if that loses nothing; {} makes one.",
            inv.code("checkout KEY --worktree")
        )
    };
    out
}

//! Commits and edits: the commit guard (`guard-commit`) and `stage`.

use super::*;

pub(super) fn guard(r: &GuardReport, inv: &Invocation) -> String {
    let mut out = String::new();
    if r.files.is_empty() {
        if r.edited_by_agents.is_empty() {
            out.push_str("Commit allowed: no staged file is checked out or was last edited by another live agent, or was edited under a checkout you lost.\n");
            return out;
        }
        let n = r.edited_by_agents.len();
        let _ = writeln!(
            out,
            "Commit allowed, carrying other agents' edits: you have no agent identity (a person at the terminal), so edits are not judged by who made them; {n} staged file{} {} last edited by live agents.\n",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" }
        );
        let files: Vec<&GuardFile> = r.edited_by_agents.iter().collect();
        edits_table(&mut out, &files, &r.now);
        out.push_str(
            "\nNext: check that you mean to commit their work; they may still be changing it.\n",
        );
        return out;
    }
    let n = r.files.len();
    let edited: Vec<&GuardFile> = r
        .files
        .iter()
        .filter(|f| f.verdict == GuardVerdict::Edited)
        .collect();
    let other: Vec<&GuardFile> = r
        .files
        .iter()
        .filter(|f| f.verdict != GuardVerdict::Edited)
        .collect();
    let (s, are, were) = if n == 1 {
        ("", "is", "was")
    } else {
        ("s", "are", "were")
    };
    if edited.is_empty() {
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {are} checked out by other agents or edited under a checkout you lost.\n"
        );
    } else if other.is_empty() {
        let mut agents: Vec<String> = edited
            .iter()
            .filter_map(|f| f.edit.as_ref())
            .map(|e| code(&e.agent))
            .collect();
        agents.dedup();
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {were} last edited by another live agent ({}).\n",
            agents.join(", ")
        );
    } else {
        let _ = writeln!(
            out,
            "Commit refused: {n} staged file{s} {are} checked out by other agents, last edited by other live agents or edited under a checkout you lost.\n"
        );
    }
    if !other.is_empty() {
        out.push_str("| File | Why | Key | Token | Until |\n|---|---|---|---|---|\n");
    }
    for f in &other {
        let (why, until) = match (&f.checkout, f.verdict) {
            (Some(c), GuardVerdict::Held) => (
                format!(
                    "held by {} (pattern {})",
                    c.agent.label(),
                    code(f.pattern.as_deref().unwrap_or(""))
                ),
                with_relative(&c.expires_at, &r.now),
            ),
            _ => (
                match f.ended {
                    Some(how) => format!(
                        "you edited it under a checkout you lost ({})",
                        match how {
                            EndHow::Timeout => "its lease ran out",
                            EndHow::AgentDeath => "you were judged dead",
                            EndHow::ForceReleased => "it was force-released",
                            EndHow::SessionEnd => "your session ended",
                            EndHow::SubagentEnd => "its subagent stopped",
                            EndHow::Released | EndHow::Other => "it ended",
                        }
                    ),
                    None => "you edited it under a checkout you no longer hold".to_string(),
                },
                String::new(),
            ),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            code_cell(&f.file),
            cell(&why),
            code_cell(f.key.as_deref().unwrap_or("")),
            f.token.map(|t| t.to_string()).unwrap_or_default(),
            until
        );
    }
    if !edited.is_empty() {
        if !other.is_empty() {
            out.push('\n');
        }
        edits_table(&mut out, &edited, &r.now);
    }
    if let Some(cmd) = &r.unstage {
        let _ = writeln!(
            out,
            "\nUnstage the files that are other agents' (from the top of the worktree): {}",
            code(cmd)
        );
    }
    let held = r.files.iter().any(|f| f.verdict == GuardVerdict::Held);
    let lost = r.files.iter().any(|f| f.verdict == GuardVerdict::Lost);
    let mut next = Vec::new();
    if held {
        next.push(
            "leave the files others hold to them: unstage them and commit the rest, or ask their holders"
                .to_string(),
        );
    }
    if !edited.is_empty() {
        next.push(format!(
            "the files other agents edited last are their work, for them to commit: unstage them, and stage only your own edits with {}",
            inv.code("stage")
        ));
    }
    if lost {
        next.push(format!(
            "for a checkout you lost, check it out again ({}), check your changes against what others did since, then commit",
            inv.code("checkout --path FILE")
        ));
    }
    let _ = writeln!(
        out,
        "\nNext: {}. A person who is sure can skip this check with {}.",
        next.join("; "),
        code("git commit --no-verify")
    );
    out
}

pub(super) fn stage(r: &StageReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let n = r.files.len();
    let s = if n == 1 { "" } else { "s" };
    if n == 0 {
        out.push_str(
            "Nothing to stage: none of the files you edited last differs from the index.\n",
        );
    } else {
        if r.dry_run {
            let _ = writeln!(
                out,
                "Would stage {n} file{s} you edited last (dry run: nothing staged).\n"
            );
        } else {
            let _ = writeln!(out, "Staged {n} file{s} you edited last.\n");
        }
        out.push_str("| File | Change | Edited |\n|---|---|---|\n");
        for f in &r.files {
            let mut when = with_relative(&f.edited_at, &r.now);
            if f.agent != r.agent {
                let _ = write!(when, " by subagent {}", code(&f.agent));
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                code_cell(&f.file),
                f.change,
                cell(&when)
            );
        }
    }
    let next = if n == 0 {
        "nothing of yours to commit".to_string()
    } else if r.dry_run {
        format!("{} stages them", inv.code("stage"))
    } else {
        format!("check them with {}, then commit", code("git diff --cached"))
    };
    let _ = writeln!(
        out,
        "\nNext: {next}. Files other agents edited last stay as they are. Only edits made with Edit, Write, MultiEdit or NotebookEdit are recorded: stage a file you changed through a shell command yourself ({}).",
        code("git add -- FILE")
    );
    out
}

/// The staged files other agents edited last: who, and when.
pub(super) fn edits_table(out: &mut String, files: &[&GuardFile], now: &Time) {
    out.push_str("| File | Last edited by | When |\n|---|---|---|\n");
    for f in files {
        let Some(e) = &f.edit else { continue };
        let mut who = code(&e.agent);
        if let Some(name) = &e.name {
            let _ = write!(who, " ({name})");
        }
        if e.state == crate::liveness::State::Stalled {
            who.push_str(", stalled");
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            code_cell(&f.file),
            cell(&who),
            with_relative(&e.edited_at, now)
        );
    }
}

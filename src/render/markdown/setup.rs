//! Setting things up and looking after them: `setup`, `init`, `freeze`, `doctor`.

use super::*;

pub(super) fn setup(r: &crate::report::SetupReport, inv: &Invocation) -> String {
    if r.uninstall {
        return setup_uninstall(r, inv);
    }
    let changed = r
        .changes
        .iter()
        .filter(|c| c.action == "created" || c.action == "updated")
        .count();
    let kept = r.changes.iter().filter(|c| c.action == "kept").count();
    let mut out = if r.dry_run {
        format!(
            "Dry run: `tasklock setup` would change {changed} of {} paths for the skills of tasklock {}.\n",
            r.changes.len(),
            r.version
        )
    } else if changed == 0 {
        format!(
            "Nothing to do: the skills of tasklock {} are in place.\n",
            r.version
        )
    } else {
        format!(
            "Installed the skills of tasklock {}: {changed} of {} paths changed.\n",
            r.version,
            r.changes.len()
        )
    };
    changes_table(&mut out, "Path", &r.changes, r.dry_run);
    let next = if r.dry_run {
        format!("Next: run {} to apply.", inv.code("setup"))
    } else if kept > 0 {
        format!(
            "Next: the paths kept are not this version's; {} replaces them. Then, in each project, {}.",
            inv.code("setup --force"),
            inv.code("init")
        )
    } else {
        format!(
            "Next: new Claude Code and Codex sessions load the skills; in each project, {} wires the hooks.",
            inv.code("init")
        )
    };
    let _ = writeln!(out, "\n{next}");
    out
}

/// `setup --uninstall`: what it removed of the receipt's paths, and what it kept.
fn setup_uninstall(r: &crate::report::SetupReport, inv: &Invocation) -> String {
    let removed = r.changes.iter().filter(|c| c.action == "removed").count();
    let kept = r.changes.len() - removed;
    let receipt = r.receipt.as_deref().unwrap_or("its receipt");
    if r.changes.is_empty() {
        return format!(
            "Nothing to remove: no path installed by `tasklock setup` is listed in {}.\n\nNext: remove the binary the way it was installed (see Uninstall in docs/install.md).\n",
            code(receipt)
        );
    }
    let mut out = if r.dry_run {
        format!(
            "Dry run: `tasklock setup --uninstall` would remove {removed} of the {} paths setup installed.\n",
            r.changes.len()
        )
    } else {
        format!(
            "Uninstalled what `tasklock setup` installed: {removed} paths removed, {kept} kept.\n"
        )
    };
    changes_table(&mut out, "Path", &r.changes, r.dry_run);
    let next = if r.dry_run {
        format!("Next: run {} to apply.", inv.code("setup --uninstall"))
    } else if kept > 0 {
        "Next: the paths kept hold what you wrote or changed, and are yours now; delete them by hand if you do not want them. Then remove the binary the way it was installed (see Uninstall in docs/install.md).".to_string()
    } else {
        "Next: remove the binary the way it was installed (see Uninstall in docs/install.md); hooks that `tasklock init` wrote into projects stay there.".to_string()
    };
    let _ = writeln!(out, "\n{next}");
    out
}

/// The table of what `init` or `setup` changed (or, in a dry run, would change: every
/// action but `unchanged` and `kept` reads "would be …").
pub(super) fn changes_table(
    out: &mut String,
    first: &str,
    changes: &[crate::report::Change],
    dry_run: bool,
) {
    let _ = write!(out, "\n| {first} | Action | What |\n|---|---|---|\n");
    for c in changes {
        let action = if dry_run && c.action != "unchanged" && c.action != "kept" {
            format!("would be {}", c.action)
        } else {
            c.action.clone()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            cell(&c.path),
            action,
            cell(&c.what)
        );
    }
}

pub(super) fn init(r: &InitReport, inv: &Invocation) -> String {
    let changed = r.changes.iter().filter(|c| c.action != "unchanged").count();
    let mut out = if r.dry_run {
        format!(
            "Dry run: `tasklock init` would change {changed} file{} in {}.\n",
            if changed == 1 { "" } else { "s" },
            r.project
        )
    } else if changed == 0 {
        format!("Nothing to do: {} is already set up.\n", r.project)
    } else {
        format!(
            "Set up {}: {changed} file{} changed.\n",
            r.project,
            if changed == 1 { "" } else { "s" }
        )
    };
    changes_table(&mut out, "File", &r.changes, r.dry_run);
    out.push_str("\nClients set up, and what each still needs:\n");
    for c in &r.clients {
        let _ = writeln!(out, "- {}: {}. Still to do: {}.", c.client, c.why, c.needs);
    }
    let next = if r.dry_run {
        &format!(
            "Next: run {} to apply.",
            inv.code(
                if r.changes.iter().any(|c| c.path.ends_with("pre-commit")) {
                    "init --git-hook"
                } else {
                    "init"
                }
            )
        )
    } else {
        "Next: commit these files so every agent session coordinates; make sure `tasklock` is on PATH for the hooks and the MCP server."
    };
    let _ = writeln!(out, "\n{next}");
    if r.git_hook_offered {
        let _ = writeln!(
            out,
            "\nTo refuse commits of files other agents have checked out (and of edits made under a lost checkout), add the git pre-commit guard: {}. It runs before an existing pre-commit hook or from husky's.",
            inv.code("init --git-hook")
        );
    }
    mcp_setup(
        &mut out,
        &r.mcp,
        r.clients.iter().any(|c| c.client == "codex"),
    );
    out
}

/// How to give other MCP clients the tools (`tasklock mcp`), printed by `init`.
pub(super) fn mcp_setup(out: &mut String, m: &crate::report::McpSetup, codex: bool) {
    let _ = writeln!(
        out,
        "\nMCP clients get the same commands as tools from {} (one server per session; its checkouts are released when the session ends).{} Others:\n- Claude Code: {}\n- Codex, for every project: {}\n- Cursor, Claude Desktop and most others, in their `mcpServers` JSON:\n\n```json\n{}\n```",
        code(&format!("{} {}", m.command, m.args.join(" "))),
        if codex {
            " Codex: the project's `.codex/config.toml` above."
        } else {
            ""
        },
        code(&m.claude_code),
        code(&m.codex),
        m.mcp_servers
    );
}

pub(super) fn freeze(r: &FreezeReport, inv: &Invocation) -> String {
    let p = code(&r.pattern);
    if let (Some(why), Some(f)) = (r.refused, &r.freeze) {
        let wrong = match why {
            "not_owner" => format!("{} set it", f.by),
            "wrong_secret" => "it was set with another TASKLOCK_SECRET than yours".into(),
            _ => "it was set with a TASKLOCK_SECRET and you gave none".into(),
        };
        return format!(
            "Refused: {p} stays frozen: {wrong}. Only whoever set a freeze (with its secret), a person at a terminal or a caller with the operator secret (TASKLOCK_OPERATOR_SECRET) may end it early or replace it.\n\nNext: wait for it to end by itself ({}).\n",
            crate::clock::rfc3339(&f.until)
        );
    }
    match (&r.freeze, r.frozen) {
        (Some(f), true) => format!(
            "Frozen: {p} {}.\n\nNo checkout of {} succeeds until then; holders keep their checkouts until their leases end but cannot renew.\n\nNext: {} ends it early.\n",
            freeze_words(f, &r.pattern, &r.now),
            if f.pattern.ends_with('*') {
                "any matching key"
            } else {
                "it"
            },
            inv.cmd("unfreeze", &f.pattern)
        ),
        (Some(f), false) => format!(
            "Unfrozen: {p}; it had been frozen by {} until {}.\n\nNext: checkouts of it work again.\n",
            f.by,
            crate::clock::rfc3339(&f.until)
        ),
        (None, _) => match &r.covered_by {
            Some(f) => format!(
                "Not frozen by its own freeze: {p} {}.\n\nNext: {} ends that freeze, for every key it covers.\n",
                freeze_words(f, &r.pattern, &r.now),
                inv.cmd("unfreeze", &f.pattern)
            ),
            None => format!("Not frozen: there is no freeze on {p}.\n"),
        },
    }
}

pub(super) fn doctor(r: &DoctorReport) -> String {
    let fails = r.checks.iter().filter(|c| c.status == "fail").count();
    let warns = r.checks.iter().filter(|c| c.status == "warn").count();
    let mut out = if fails > 0 {
        format!(
            "Unhealthy: {fails} problem{} to fix, {warns} warning{}.\n",
            if fails == 1 { "" } else { "s" },
            if warns == 1 { "" } else { "s" }
        )
    } else if warns > 0 {
        format!(
            "Healthy, with {warns} warning{}.\n",
            if warns == 1 { "" } else { "s" }
        )
    } else {
        "Healthy.\n".to_string()
    };
    out.push('\n');
    for c in &r.checks {
        let mark = match c.status.as_str() {
            "ok" => "[x]",
            "warn" => "[!]",
            _ => "[ ]",
        };
        let _ = writeln!(out, "- {mark} {}: {}", c.name, c.detail);
        if let Some(f) = &c.fix {
            let _ = writeln!(out, "  - Fix: {f}");
        }
    }
    let _ = writeln!(out, "\nLock directory: {}", r.lock_dir);
    out
}

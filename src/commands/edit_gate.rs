//! The edit hook: Claude Code's PreToolUse for the file-editing tools (Edit, Write,
//! MultiEdit, NotebookEdit) and Codex's for `apply_patch` (every file the patch adds,
//! updates, deletes or moves to), called as the tool or run as a shell command. Path checkouts are enforced where edits happen: an edit of
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

/// Codex's file-editing tool: its PreToolUse input carries the patch text in
/// `tool_input.command` (`*** Begin Patch` … `*** End Patch`).
pub const PATCH_TOOL: &str = "apply_patch";

/// The hook matcher for it (`tasklock init` wires it in `.codex/hooks.json`).
pub const PATCH_MATCHER: &str = "apply_patch";

/// Which agent's hook output to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Claude Code: the decision, plus a top-level `tasklock` object for programs (Claude
    /// Code ignores top-level keys it does not know).
    Claude,
    /// Codex: the decision only. Codex 0.169 rejects hook output with keys it does not
    /// know and then lets the call through, so a deny with `tasklock` would not deny.
    Codex,
    /// Gemini CLI: `decision: "deny"` with a `reason` the model reads as the tool's error.
    Gemini,
}

/// Gemini CLI's file-writing tools, each naming its file in `file_path`.
pub const GEMINI_EDIT_TOOLS: [&str; 2] = ["write_file", "replace"];

/// The shell tools whose commands may apply a patch: Codex reports its shell (and a patch
/// applied through it) as `Bash`, as Claude Code names its own; the others are the names
/// Codex's shell tools have had.
pub const SHELL_TOOLS: [&str; 4] = ["Bash", "shell", "exec_command", "local_shell"];

/// The hook matcher for the shell (`tasklock init` wires it in `.codex/hooks.json` beside
/// `apply_patch`, so that a patch applied as a command reaches the gate).
pub const SHELL_MATCHER: &str = "Bash";

/// What an editing tool call edits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The files, as given: absolute in Claude Code's input, relative to the session's
    /// directory or absolute in a Codex patch (with the `cd` before a shell patch applied).
    pub files: Vec<String>,
    pub flavor: Flavor,
    /// A shell command applies a patch whose files cannot be told from it: why.
    pub unknown: Option<&'static str>,
    /// Record the edit when the gate allows it: Codex runs no PostToolUse hook after a
    /// patch applied through the shell, so there is no later moment to record it.
    pub record_when_allowed: bool,
    /// Which client's tool writes the files: how it turns the names into the files.
    pub writer: Writer,
}

/// The tool that writes an edit's files, for the forms in which it reaches them
/// ([`forms`]). Each client makes a name absolute and applies its `..` to the text before
/// the kernel resolves the links along it (docs/paths.md):
///
/// - Claude Code trims the name, expands `~`, then `path.normalize`s an absolute one and
///   `path.resolve`s a relative one against the session's directory;
/// - Codex expands `~` and makes the name absolute against the patch's directory,
///   normalised (its `AbsolutePathBuf`);
/// - Gemini CLI `path.resolve`s the name against the project (dropping a leading `@` when
///   no such file exists), decodes `%XX` escapes and resolves it again; its `replace`
///   first looks a relative name that does not exist up in the project by its last
///   segments (`correctPath`);
/// - OpenCode's `edit` and `write` `path.join` a relative name to the project but take an
///   absolute one as given; its `apply_patch` `path.resolve`s every name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    ClaudeCode,
    Codex,
    Gemini,
    GeminiReplace,
    OpenCodeEdit,
    OpenCodePatch,
}

/// What the gate says about one edit.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The hook's output; none: allowed, nothing to say.
    pub output: Option<String>,
    /// The edit was refused.
    pub denied: bool,
    /// `guard_timeout` of the lock directory's config.yaml, when it was read.
    pub guard_timeout: Option<std::time::Duration>,
}

/// The files an editing tool call edits, and how to answer. `None`: not an editing
/// tool, or a shell command that applies no patch. An `apply_patch` call whose patch
/// names no file gives an empty list (Codex refuses such a patch itself).
pub fn edited_files(payload: &Value) -> Option<Edited> {
    let tool = payload["tool_name"].as_str()?;
    // tasklock's OpenCode plugin says so in every payload.
    let opencode = payload["opencode"].is_object();
    if tool == PATCH_TOOL {
        let input = &payload["tool_input"];
        // The freeform tool gives the patch as `command`; be lenient about the shapes a
        // function-style tool would use (`input`, or `["apply_patch", PATCH]`).
        let patch = input["command"]
            .as_str()
            .or_else(|| input["input"].as_str())
            .or_else(|| input["command"].as_array()?.last()?.as_str())
            .or_else(|| input["patch"].as_str())
            .unwrap_or_default();
        return Some(Edited {
            files: patched_files(patch),
            flavor: Flavor::Codex,
            unknown: None,
            record_when_allowed: false,
            writer: if opencode {
                Writer::OpenCodePatch
            } else {
                Writer::Codex
            },
        });
    }
    if SHELL_TOOLS.contains(&tool) {
        return shell_edit(&payload["tool_input"]);
    }
    if GEMINI_EDIT_TOOLS.contains(&tool) {
        // AfterTool follows a failed call too: only a call without an error edited.
        if !payload["tool_response"]["error"].is_null() {
            return None;
        }
        let file = payload["tool_input"]["file_path"]
            .as_str()
            .filter(|s| !s.is_empty())?;
        return Some(Edited {
            files: vec![file.to_string()],
            flavor: Flavor::Gemini,
            unknown: None,
            record_when_allowed: false,
            writer: if tool == "replace" {
                Writer::GeminiReplace
            } else {
                Writer::Gemini
            },
        });
    }
    let (_, field) = EDIT_TOOLS.iter().find(|(t, _)| *t == tool)?;
    let file = payload["tool_input"][*field]
        .as_str()
        .filter(|s| !s.is_empty())?;
    Some(Edited {
        files: vec![file.to_string()],
        flavor: Flavor::Claude,
        unknown: None,
        record_when_allowed: false,
        writer: if opencode {
            Writer::OpenCodeEdit
        } else {
            Writer::ClaudeCode
        },
    })
}

/// A shell command that applies a patch (Codex's `apply_patch` run as a command): its
/// files, relative to the directory the patch is applied in (`workdir` of the call, then
/// each `cd` before it). The answer is Codex's (the decision only), which Claude Code
/// reads as well.
fn shell_edit(input: &Value) -> Option<Edited> {
    use crate::clients::apply_patch as ap;
    let patch = match &input["command"] {
        Value::String(script) => ap::shell_patch(script)?,
        Value::Array(argv) => {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            match argv.as_slice() {
                // `bash -lc SCRIPT`, `sh -c SCRIPT`.
                [_, flag, script] if flag.starts_with('-') && flag.ends_with('c') => {
                    ap::shell_patch(script)?
                }
                _ => ap::shell_patch(&argv.join(" "))?,
            }
        }
        _ => return None,
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let expand = |d: &str| -> String {
        match d.strip_prefix('~') {
            Some("") => home.clone(),
            Some(rest) if rest.starts_with('/') => format!("{home}{rest}"),
            _ => d.to_string(),
        }
    };
    let join = |base: &str, next: &str| -> String {
        if base.is_empty() || next.starts_with('/') {
            next.to_string()
        } else {
            format!("{}/{next}", base.trim_end_matches('/'))
        }
    };
    let mut base = input["workdir"].as_str().unwrap_or_default().to_string();
    for d in &patch.dirs {
        base = join(&base, &expand(d));
    }
    Some(Edited {
        // Codex expands `~` in a patch's names too.
        files: patch
            .files
            .iter()
            .map(|f| join(&base, &expand(f)))
            .collect(),
        flavor: Flavor::Codex,
        unknown: patch.unknown,
        // Only a patch the command really applies is an edit to record.
        record_when_allowed: patch.invoked,
        writer: Writer::Codex,
    })
}

/// The files a patch in Codex's `apply_patch` format touches
/// ([`crate::clients::apply_patch::patch_files`]).
pub fn patched_files(patch: &str) -> Vec<String> {
    crate::clients::apply_patch::patch_files(patch)
}

/// Every form in which the tool of `writer` may reach the file `file` names, from the
/// session's directory `cwd`; the first is the one it writes. Each is resolved on disk
/// afterwards ([`crate::paths::locate_file`]): the name as the kernel takes it (`l/../x`
/// through the link `l`), the name with its `..` applied to the text first (as the
/// clients do), and the client's own reading of it. The gate refuses the edit when any of
/// them is another agent's.
pub fn forms(writer: Writer, cwd: &Path, file: &str) -> Vec<String> {
    let lexical = |p: &str| crate::paths::lexical_file(cwd, p);
    let found = match writer {
        Writer::GeminiReplace => gemini_lookup(cwd, file),
        _ => Vec::new(),
    };
    let written = match writer {
        Writer::ClaudeCode => lexical(&home(file.trim())),
        Writer::Codex => lexical(&home(file)),
        Writer::Gemini => gemini_file(cwd, file),
        Writer::GeminiReplace => match found.as_slice() {
            [one] => Some(one.clone()),
            _ => gemini_file(cwd, file),
        },
        Writer::OpenCodeEdit if file.starts_with('/') => Some(file.to_string()),
        Writer::OpenCodeEdit | Writer::OpenCodePatch => lexical(file),
    };
    let mut out: Vec<String> = Vec::new();
    for f in [written, Some(file.to_string()), lexical(file)]
        .into_iter()
        .flatten()
        .chain(found)
    {
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// `~` and `~/…` as the home directory (Claude Code and Codex expand them).
fn home(file: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    match file.strip_prefix('~') {
        Some("") if !home.is_empty() => home,
        Some(rest) if rest.starts_with('/') && !home.is_empty() => format!("{home}{rest}"),
        _ => file.to_string(),
    }
}

/// The file Gemini CLI's `write_file` and `replace` write for `file`: a leading `@` is
/// dropped when no such file exists (unless a directory `@<first segment>` does), the
/// name is resolved against the project, its `%XX` escapes decoded (when they all are
/// valid), and it is resolved again.
fn gemini_file(cwd: &Path, file: &str) -> Option<String> {
    let clean = file.replace('\0', "");
    let lexical = |p: &str| crate::paths::lexical_file(cwd, p);
    let mut name = clean.as_str();
    if let Some(rest) = clean.strip_prefix('@')
        && !rest.is_empty()
        && !lexical(&clean).is_some_and(|p| Path::new(&p).exists())
    {
        let stripped = rest.trim_start_matches('/');
        let first = stripped.split('/').next().unwrap_or_default();
        let keep = !rest.starts_with('/')
            && !first.is_empty()
            && lexical(&format!("@{first}")).is_some_and(|p| Path::new(&p).exists());
        if !keep && !stripped.is_empty() {
            name = stripped;
        }
    }
    let resolved = lexical(name)?;
    match percent_decoded(&resolved) {
        Some(decoded) => lexical(&decoded),
        None => Some(resolved),
    }
}

/// The files Gemini CLI's `replace` may find for a relative name that does not exist from
/// the project (`correctPath`): those below the session's directory whose path ends with
/// the name, by whole segments (it searches breadth first, in a bounded number of
/// directories, and edits a match only when there is one; every one is judged here). None
/// for an absolute name or one that exists.
fn gemini_lookup(cwd: &Path, file: &str) -> Vec<String> {
    /// Directories searched at most (Gemini CLI searches 50, in its own order).
    const MAX_DIRS: usize = 2000;
    let name = file.replace('\0', "");
    if name.starts_with('/')
        || name.is_empty()
        || cwd.join(&name).exists()
        || name.split('/').any(|s| s == "..")
    {
        return Vec::new();
    }
    let suffix = format!("/{}", name.trim_start_matches("./"));
    let Some(base) = Path::new(&suffix).file_name().map(|n| n.to_os_string()) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([cwd.to_path_buf()]);
    let mut seen = 0;
    while let Some(dir) = queue.pop_front() {
        seen += 1;
        if seen > MAX_DIRS {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                if e.file_name() != ".git" {
                    queue.push_back(path);
                }
            } else if e.file_name() == base
                && let Some(p) = path.to_str()
                && p.ends_with(&suffix)
            {
                found.push(p.to_string());
            }
        }
    }
    found
}

/// `%XX` escapes decoded as JavaScript's `decodeURIComponent` does; `None` when there is
/// none, or when one is malformed or the bytes are not UTF-8 (it then throws, and Gemini
/// CLI keeps the name as it was).
fn percent_decoded(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Another agent's live checkout covering the file.
struct Holder {
    record: Record,
    pattern: String,
}

/// What the judgement of one file says to the agent.
enum Said {
    /// Refused (`enforce: deny`): the reason, and the data for programs.
    Deny(String, Value),
    /// Allowed with a warning (`enforce: warn`).
    Warn(String, Value),
    /// Allowed, with something the model should know (an automatic checkout).
    Context(String),
}

/// One file of the edit, normalised, with the live checkouts covering it.
struct Judged {
    /// The form the refusal names: one another agent holds, else the file written.
    rel: String,
    /// The file the client writes, when it is in the repository.
    written: Option<String>,
    /// Other agents' checkouts covering any form of the file.
    others: Vec<Holder>,
    /// The agent's own checkout covering the file written.
    mine: Option<Record>,
}

/// Judge one edit of `files` by `agent` (one file for Claude Code's tools, every file a
/// Codex patch touches). `cwd` is the session's directory, `dir` the lock directory found
/// from it (`None`: there is none, so nothing is checked out). A file covered by another
/// live agent's checkout refuses the whole edit (with `enforce: deny`), and then nothing
/// is stamped or checked out; else the files inside the agent's own checkouts are stamped.
pub fn judge(
    dir: Option<PathBuf>,
    cwd: &Path,
    agent: &str,
    edited: &Edited,
    authorize: &dyn Fn(&dyn crate::store::Store) -> Result<()>,
) -> Result<Verdict> {
    let Some(dir) = dir else {
        return Ok(Verdict::default());
    };
    let (files, flavor) = (&edited.files, edited.flavor);
    if files.is_empty() && edited.unknown.is_none() {
        return Ok(Verdict::default());
    }
    let ctx = Ctx::new(dir, Some(agent.to_string()), None)?;
    let Some(store) = ctx.existing_store()? else {
        return Ok(Verdict::default());
    };
    let cfg = ctx.config()?;
    let guard_timeout = Some(cfg.guard_timeout);
    let verdict = |said: Vec<Said>| Verdict {
        guard_timeout,
        ..verdict(said, flavor)
    };
    if let Some(why) = edited.unknown {
        // A shell patch whose files cannot be told: refused (or warned about) while any
        // path checkout is held, since any of them might be in it.
        if cfg.enforce == Enforce::Off || epaths::Coverage::load(&*store)?.is_empty() {
            return Ok(verdict(Vec::new()));
        }
        return Ok(verdict(vec![unknown_patch(cfg.enforce, why)]));
    }
    let root = epaths::root(&ctx, cwd);
    let judged = judge_files(&ctx, &*store, &root, cwd, agent, edited)?;
    drop(store);
    let mut said = Vec::new();
    // Refused as a whole before anything is stamped or checked out.
    if cfg.enforce != Enforce::Off {
        for j in judged.iter().filter(|j| !j.others.is_empty()) {
            said.push(match cfg.enforce {
                Enforce::Deny => deny(&ctx, &j.rel, &j.others),
                _ => warn(&ctx, &j.rel, &j.others),
            });
        }
        if said.iter().any(|s| matches!(s, Said::Deny(..))) {
            return Ok(verdict(said));
        }
    }
    for j in &judged {
        // Warned about (another agent holds it too): neither stamped nor checked out.
        if !j.others.is_empty() && cfg.enforce != Enforce::Off {
            continue;
        }
        let Some(rel) = &j.written else {
            continue;
        };
        if let Some(r) = &j.mine {
            stamp(&root, agent, rel, &r.key, r.token, &ctx)?;
        } else if j.others.is_empty() && cfg.auto_checkout {
            let store = ctx.existing_store()?;
            if let Some(store) = &store {
                authorize(&**store)?;
            }
            drop(store);
            if let Some(s) = auto_checkout(&ctx, &root, agent, rel, cfg.enforce)? {
                let refused = matches!(s, Said::Deny(..));
                said.push(s);
                if refused {
                    return Ok(verdict(said));
                }
            }
        }
    }
    Ok(verdict(said))
}

/// Each file of the edit, once, with who else holds it and the caller's own checkout of
/// it.
fn judge_files(
    ctx: &Ctx,
    store: &dyn crate::store::Store,
    root: &Path,
    cwd: &Path,
    agent: &str,
    edited: &Edited,
) -> Result<Vec<Judged>> {
    let coverage = epaths::Coverage::load(store)?;
    let mut judged: Vec<Judged> = Vec::new();
    let mut judge = Judge::new(ctx, store);
    for file in &edited.files {
        let (rels, written) = located(root, cwd, edited.writer, file);
        let seen = |j: &Judged| written.is_some() && j.written == written;
        if rels.is_empty() || judged.iter().any(seen) {
            continue;
        }
        let (others, mine, shown) =
            holders(&rels, written.as_ref(), agent, &coverage, store, &mut judge)?;
        let rel = shown
            .or_else(|| written.clone())
            .unwrap_or_else(|| rels[0].clone());
        judged.push(Judged {
            rel,
            written,
            others,
            mine,
        });
    }
    Ok(judged)
}

/// Who is in the way of a refused checkout, each with its label (for the prose): the
/// holder of the key, or those of overlapping paths (or the agents they are reserved
/// for).
fn in_the_way(r: &crate::report::CheckoutReport) -> Vec<(String, HolderData<'_>)> {
    if r.overlaps.is_empty() {
        return r
            .checkout
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
            .collect();
    }
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
}

/// The forms of `file` in the repository (normalised, each once) and the one the client
/// of `writer` writes, when it is there: a form outside the repository (or a link out of
/// it) is not ours to guard.
fn located(root: &Path, cwd: &Path, writer: Writer, file: &str) -> (Vec<String>, Option<String>) {
    let mut rels: Vec<String> = Vec::new();
    let mut written = None;
    for (i, form) in forms(writer, cwd, file).iter().enumerate() {
        let Ok(rel) = crate::paths::normalize_file(root, cwd, form) else {
            continue;
        };
        if i == 0 {
            written = Some(rel.clone());
        }
        if !rels.contains(&rel) {
            rels.push(rel);
        }
    }
    (rels, written)
}

/// The live checkouts covering the forms `rels` of one file: other agents' (covering any
/// form, with the first form one covers), and the agent's own covering the file written.
fn holders(
    rels: &[String],
    written: Option<&String>,
    agent: &str,
    coverage: &epaths::Coverage,
    store: &dyn crate::store::Store,
    judge: &mut Judge,
) -> Result<(Vec<Holder>, Option<Record>, Option<String>)> {
    let mut others: Vec<Holder> = Vec::new();
    let mut mine: Option<Record> = None;
    let mut shown: Option<String> = None;
    for rel in rels {
        for (record, pattern) in coverage.covering(store, rel)? {
            // Ended checkouts (a lease out, a dead holder, one's own whose process is
            // gone) block and protect nothing; they are ended by the next checkout that
            // needs them, not here (no writes under the guard for a read). One's own is
            // judged as its agent's commands judge it: silence is answered by asking.
            if record.held_by(agent) {
                if Some(rel) == written && mine.is_none() && judge.own_end(&record)?.is_none() {
                    mine = Some(record);
                }
            } else if judge.reap_reason(&record)?.is_some() {
                continue;
            } else if !others.iter().any(|h| h.record.key == record.key) {
                shown.get_or_insert_with(|| rel.clone());
                others.push(Holder { record, pattern });
            }
        }
    }
    Ok((others, mine, shown))
}

fn verdict(said: Vec<Said>, flavor: Flavor) -> Verdict {
    Verdict {
        denied: said.iter().any(|s| matches!(s, Said::Deny(..))),
        output: render(said, flavor),
        guard_timeout: None,
    }
}

/// The hook output for what was said about the files: a deny if any file is refused
/// (with every reason), else a warning, else context; none when nothing was said.
fn render(said: Vec<Said>, flavor: Flavor) -> Option<String> {
    let data = |s: &Said| match s {
        Said::Deny(_, d) | Said::Warn(_, d) => Some(d.clone()),
        Said::Context(_) => None,
    };
    let denies: Vec<&Said> = said
        .iter()
        .filter(|s| matches!(s, Said::Deny(..)))
        .collect();
    let (kind, chosen): (u8, Vec<&Said>) = if !denies.is_empty() {
        (0, denies)
    } else if said.iter().any(|s| matches!(s, Said::Warn(..))) {
        (1, said.iter().collect())
    } else if !said.is_empty() {
        (2, said.iter().collect())
    } else {
        return None;
    };
    let text = chosen
        .iter()
        .map(|s| match s {
            Said::Deny(t, _) | Said::Warn(t, _) | Said::Context(t) => t.as_str(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let data = match flavor {
        Flavor::Codex | Flavor::Gemini => None,
        Flavor::Claude => chosen.iter().find_map(|s| data(s)),
    };
    if flavor == Flavor::Gemini {
        return Some(gemini_text(kind, &text));
    }
    Some(match kind {
        0 => deny_text(&text, data),
        1 => warn_text(&text, data),
        _ => context(text),
    })
}

/// Check an unclaimed file out for the agent (`auto_checkout: true`), and stamp it; or,
/// when the checkout is refused, what `enforce:` says about the agents in the way.
fn auto_checkout(
    ctx: &Ctx,
    root: &Path,
    agent: &str,
    rel: &str,
    enforce: Enforce,
) -> Result<Option<Said>> {
    let pattern = crate::paths::escape(rel);
    let key = crate::key::for_paths(std::slice::from_ref(&pattern))?;
    let Report::Checkout(r) = checkout::run(
        ctx,
        &key,
        checkout::Want {
            paths: vec![pattern],
            slots: None,
            pid: None,
        },
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
        stamp(root, agent, rel, &r.key, c.token, ctx)?;
        return Ok(Some(Said::Context(format!(
            "tasklock: `{}` was checked out for you as `{}` (auto_checkout); release it with `tasklock {}` when you are done with the file.",
            shown(rel),
            r.key,
            crate::key::Line::new("release").arg(&r.key).render(&[])
        ))));
    }
    // Refused: someone else's checkout (or a reservation, or a freeze) is in the way.
    let in_the_way = in_the_way(&r);
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
    let data = hook_data(rel, &holders);
    let what = if blockers.is_empty() {
        format!(
            "the automatic checkout of `{}` was refused ({})",
            shown(rel),
            serde_json::to_value(r.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )
    } else {
        format!(
            "the automatic checkout of `{}` was refused: {}",
            shown(rel),
            blockers.join("; ")
        )
    };
    Ok(match enforce {
        Enforce::Deny => Some(Said::Deny(
            format!("tasklock: {what}. {}", advice(rel)),
            data,
        )),
        Enforce::Warn => Some(Said::Warn(
            format!(
                "tasklock warning: {what}. The edit goes ahead (enforce: warn), but {}",
                advice(rel)
            ),
            data,
        )),
        Enforce::Off => None,
    })
}

/// Record that `agent` edited `file` (as the tool named it; the file recorded is the one
/// the tool of `writer` writes, [`forms`]), in the edit records of the worktree that holds
/// it (the one of `cwd`, or another worktree of its repository reached through a link or
/// an absolute path). A file outside the repository is not recorded.
pub fn record_edit(
    cwd: &Path,
    agent: &str,
    file: &str,
    writer: Writer,
    now: &Time,
    wait: std::time::Duration,
) -> Result<()> {
    let Some(root) = crate::paths::roots(cwd).map(|r| r.worktree) else {
        return Ok(());
    };
    let Some(written) = forms(writer, cwd, file).into_iter().next() else {
        return Ok(());
    };
    let Ok((root, rel)) = crate::paths::locate_file(&root, cwd, &written) else {
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
        wait,
    )
}

/// Forget the edits of `agent` and its subagents in the worktree of `cwd` (its session
/// ended), and every entry past the retention.
pub fn forget_edits(cwd: &Path, agent: &str, now: &Time, wait: std::time::Duration) -> Result<()> {
    let Some(dir) = crate::paths::roots(cwd).and_then(|r| edits::dir(&r.worktree)) else {
        return Ok(());
    };
    edits::forget(
        &dir,
        &mut |e| edits::is_own(&e.agent, agent) || e.expired(now),
        wait,
    )?;
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

/// A file name as the model is shown it: control and direction-changing characters as
/// their code points.
fn shown(rel: &str) -> std::borrow::Cow<'_, str> {
    crate::render::markdown::visible(rel)
}

fn advice(rel: &str) -> String {
    format!(
        "Do not edit it now: work on other files. To be told when it is free, run `tasklock {}` (exit 2 with your place in line; the inbox tells you when it is yours). Never retry this edit in a loop.",
        crate::key::Line::new("checkout")
            .opt("--path", &crate::paths::escape(rel))
            .flag("--queue")
            .render(&[])
    )
}

/// What is said about a shell patch whose files cannot be told.
fn unknown_patch(enforce: Enforce, why: &str) -> Said {
    let what = format!(
        "this command runs `apply_patch`, but {why}, so tasklock cannot tell which files it changes, and files are checked out with `--path`"
    );
    let fix = "Write the patch in the command itself (`apply_patch <<'PATCH'` … `PATCH`, after at most a plain `cd DIR &&`), or use the apply_patch tool.";
    let data = json!({ "file": null, "holders": [] });
    match enforce {
        Enforce::Warn => Said::Warn(
            format!("tasklock warning: {what}. The command goes ahead (enforce: warn). {fix}"),
            data,
        ),
        _ => Said::Deny(format!("tasklock: {what}. {fix}"), data),
    }
}

fn deny(ctx: &Ctx, rel: &str, others: &[Holder]) -> Said {
    Said::Deny(
        format!(
            "tasklock: `{}` is checked out by another agent: {}. {}",
            shown(rel),
            holders_text(ctx, others),
            advice(rel)
        ),
        hook_data(rel, &holders_data(others)),
    )
}

fn warn(ctx: &Ctx, rel: &str, others: &[Holder]) -> Said {
    Said::Warn(
        format!(
            "tasklock warning: `{}` is checked out by another agent: {}. The edit goes ahead (enforce: warn), but you may be overwriting their work. {}",
            shown(rel),
            holders_text(ctx, others),
            advice(rel)
        ),
        hook_data(rel, &holders_data(others)),
    )
}

/// Claude Code's PreToolUse deny: the reason the model reads, and tasklock's `data` for
/// programs (a top-level `tasklock` object, which Claude Code ignores).
pub(super) fn deny_text(reason: &str, data: Option<Value>) -> String {
    let mut v = json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        },
    });
    if let Some(data) = data {
        v["tasklock"] = data;
    }
    format!("{v}\n")
}

fn warn_text(text: &str, data: Option<Value>) -> String {
    let mut v = json!({
        "systemMessage": text,
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "additionalContext": text,
        },
    });
    if let Some(data) = data {
        v["tasklock"] = data;
    }
    format!("{v}\n")
}

/// Gemini CLI's BeforeTool output: a deny with the reason the model reads, else the text
/// for the user and the model.
fn gemini_text(kind: u8, text: &str) -> String {
    let v = if kind == 0 {
        json!({ "decision": "deny", "reason": text })
    } else {
        json!({
            "systemMessage": text,
            "hookSpecificOutput": { "additionalContext": text },
        })
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_every_file_it_adds_updates_deletes_or_moves_to() {
        let patch = "*** Begin Patch\n*** Add File: src/new.rs\n+fn main() {}\n*** Update File: src/a.rs\n*** Move to: src/moved.rs\n@@\n-old\n+new\n  *** Delete File:  docs/old.md  \n*** Update File: src/a.rs\n@@\n-x\n+y\n*** End Patch\n";
        assert_eq!(
            patched_files(patch),
            ["src/new.rs", "src/a.rs", "src/moved.rs", "docs/old.md"]
        );
    }

    #[test]
    fn a_malformed_patch_names_what_it_can_and_never_fails() {
        for patch in [
            "",
            "not a patch",
            "*** Begin Patch\n*** Update File:\n*** Add File:   \n",
            "*** Update File",
            "\u{0}*** Delete File: \u{fffd}",
            "*** Begin Patch\r\n*** Update File: src/a.rs\r\n*** End Patch",
        ] {
            let files = patched_files(patch);
            assert!(
                files.iter().all(|f| !f.is_empty() && f.trim() == f),
                "{files:?}"
            );
        }
        assert_eq!(
            patched_files("*** Begin Patch\r\n*** Update File: src/a.rs\r\n*** End Patch"),
            ["src/a.rs"]
        );
    }

    #[test]
    fn the_patch_is_read_from_the_tool_input() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n*** End Patch\n";
        for input in [
            json!({ "command": patch }),
            json!({ "input": patch }),
            json!({ "command": ["apply_patch", patch] }),
        ] {
            let payload = json!({ "tool_name": "apply_patch", "tool_input": input });
            assert_eq!(
                files(&payload),
                Some((vec!["src/a.rs".into()], Flavor::Codex))
            );
        }
        let payload = json!({ "tool_name": "apply_patch", "tool_input": 3 });
        assert_eq!(files(&payload), Some((vec![], Flavor::Codex)));
        let payload = json!({ "tool_name": "Edit", "tool_input": { "file_path": "/r/x" } });
        assert_eq!(files(&payload), Some((vec!["/r/x".into()], Flavor::Claude)));
        // A patch in a shell command that does not apply it is no edit.
        let payload = json!({ "tool_name": "Bash", "tool_input": { "command": "ls -la" } });
        assert_eq!(edited_files(&payload), None);
    }

    fn files(payload: &Value) -> Option<(Vec<String>, Flavor)> {
        edited_files(payload).map(|e| (e.files, e.flavor))
    }

    #[test]
    fn a_shell_patch_is_an_edit_from_its_directory() {
        let patch =
            "*** Begin Patch\n*** Update File: a.rs\n*** Add File: /abs/b.rs\n*** End Patch";
        let shell = |command: Value, workdir: Option<&str>| {
            let mut input = json!({ "command": command });
            if let Some(w) = workdir {
                input["workdir"] = json!(w);
            }
            files(&json!({ "tool_name": "Bash", "tool_input": input }))
        };
        let heredoc = format!("cd src/x && apply_patch <<'PATCH'\n{patch}\nPATCH\n");
        assert_eq!(
            shell(json!(heredoc), None),
            Some((vec!["src/x/a.rs".into(), "/abs/b.rs".into()], Flavor::Codex))
        );
        assert_eq!(
            shell(json!(heredoc), Some("/repo/sub")),
            Some((
                vec!["/repo/sub/src/x/a.rs".into(), "/abs/b.rs".into()],
                Flavor::Codex
            ))
        );
        assert_eq!(
            shell(json!(["apply_patch", patch]), None),
            Some((vec!["a.rs".into(), "/abs/b.rs".into()], Flavor::Codex))
        );
        assert_eq!(
            shell(json!(["bash", "-lc", heredoc]), Some("w")),
            Some((
                vec!["w/src/x/a.rs".into(), "/abs/b.rs".into()],
                Flavor::Codex
            ))
        );
        let unknown = edited_files(&json!({
            "tool_name": "Bash", "tool_input": { "command": "apply_patch < p.diff" }
        }))
        .unwrap();
        assert_eq!(
            unknown.unknown,
            Some(crate::clients::apply_patch::NOT_IN_COMMAND)
        );
    }
}

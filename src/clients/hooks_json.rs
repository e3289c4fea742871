//! The hooks documents of Claude Code (`.claude/settings.json`) and Codex
//! (`.codex/hooks.json`): what tasklock adds to them, and how `init` merges it into what
//! is there and `doctor` checks it. Knows JSON and the clients' schemas, nothing of
//! checkouts.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

pub(crate) const SETTINGS_TEMPLATE: &str = include_str!("../../templates/claude-settings.json");
pub(crate) const CODEX_HOOKS_TEMPLATE: &str = include_str!("../../templates/codex-hooks.json");
pub(crate) const GEMINI_SETTINGS_TEMPLATE: &str =
    include_str!("../../templates/gemini-settings.json");

/// The `permissions.allow` rules `init` writes: one per subcommand that cannot run an
/// arbitrary command. Not `run` (it runs any command), `init` or `hook`, nor `unfreeze`
/// (which, with the operator secret in the environment, ends another's freeze). Each form
/// `Bash(tasklock SUB *)` matches the bare command and the command with arguments.
/// `templates/claude-settings.json` lists exactly these.
pub const ALLOWED_RULES: &[&str] = &[
    "Bash(tasklock checkout *)",
    "Bash(tasklock release *)",
    "Bash(tasklock leave *)",
    "Bash(tasklock renew *)",
    "Bash(tasklock status *)",
    "Bash(tasklock list *)",
    "Bash(tasklock verify *)",
    "Bash(tasklock note *)",
    "Bash(tasklock give *)",
    "Bash(tasklock heartbeat *)",
    "Bash(tasklock agents *)",
    "Bash(tasklock inbox *)",
    "Bash(tasklock why *)",
    "Bash(tasklock stage *)",
    "Bash(tasklock audit *)",
    "Bash(tasklock doctor *)",
    "Bash(tasklock freeze *)",
    "Bash(tasklock backlog *)",
    "Bash(tasklock --version)",
];

/// The rule older versions of `init` wrote. It pre-approves `tasklock run KEY -- CMD`,
/// so any command at all; `init` removes it.
pub const LEGACY_RULE: &str = "Bash(tasklock *)";

/// Rules older versions of `init` wrote that it removes, each with why.
pub const REVOKED_RULES: &[(&str, &str)] = &[
    (
        LEGACY_RULE,
        "it pre-approved `tasklock run`, which runs any command",
    ),
    (
        "Bash(tasklock unfreeze *)",
        "ending a freeze early is for whoever set it, a person or the operator, not pre-approved",
    ),
];

/// Rules that pre-approve `tasklock run` (so any command); `doctor` warns about them.
pub const RUN_RULES: &[&str] = &[
    "Bash(tasklock *)",
    "Bash(tasklock:*)",
    "Bash(tasklock run *)",
    "Bash(tasklock run:*)",
];

/// Claude Code's hook events and the `tasklock hook` event wired to each.
pub const HOOK_EVENTS: [(&str, &str); 10] = [
    ("SessionStart", "session-start"),
    ("UserPromptSubmit", "user-prompt-submit"),
    ("PreToolUse", "pre-tool-use"),
    ("PostToolUse", "post-tool-use"),
    ("SubagentStart", "subagent-start"),
    ("SubagentStop", "subagent-stop"),
    ("SessionEnd", "session-end"),
    // A worktree Claude Code makes (`claude --worktree`) is a checkout of the session's.
    ("WorktreeCreate", "worktree-create"),
    ("WorktreeRemove", "worktree-remove"),
    // A teammate's (or the session's) task marked completed: its claim ends `--done`.
    ("TaskCompleted", "task-completed"),
];

/// Codex's hook events (in `.codex/hooks.json`, Claude Code's format) and the
/// `tasklock hook` event wired to each. Codex 0.169 has no subagent events, and its
/// commands carry their own identity (`CODEX_THREAD_ID`), so PreToolUse is wired only
/// for the edit gate: `apply_patch`, and `Bash` (a patch applied as a shell command).
pub const CODEX_HOOK_EVENTS: [(&str, &str); 6] = [
    ("SessionStart", "session-start"),
    ("UserPromptSubmit", "user-prompt-submit"),
    ("PreToolUse", "pre-tool-use"),
    ("PostToolUse", "post-tool-use"),
    ("Stop", "stop"),
    ("SessionEnd", "session-end"),
];

/// Gemini CLI's hook events (in `.gemini/settings.json`, or an extension's
/// `hooks/hooks.json`) and the `tasklock hook` event wired to each: `BeforeAgent` is its
/// prompt hook, `BeforeTool`/`AfterTool` its tool hooks, `AfterAgent` the end of a turn.
/// It has no subagent events. `BeforeTool` is wired for the file-writing tools (the edit
/// gate) and the shell (its `tasklock` commands are given the session's identity).
pub const GEMINI_HOOK_EVENTS: [(&str, &str); 6] = [
    ("SessionStart", "session-start"),
    ("BeforeAgent", "user-prompt-submit"),
    ("BeforeTool", "pre-tool-use"),
    ("AfterTool", "post-tool-use"),
    ("AfterAgent", "stop"),
    ("SessionEnd", "session-end"),
];

/// What `merge_settings` changed.
#[derive(Default)]
pub(crate) struct Merged {
    hooks: Vec<String>,
    rules: Vec<String>,
    removed: Vec<String>,
}

/// Does `command` run `tasklock hook EVENT`, by name or by a path ending in
/// `/tasklock` (quoted or not, like `"$HOME/.local/bin/tasklock" hook post-tool-use`)?
pub fn calls_tasklock_hook(command: &str, event: &str) -> bool {
    let words = crate::error::shell_split(command).unwrap_or_default();
    let [program, hook, ev] = words.as_slice() else {
        return false;
    };
    (program == "tasklock" || program.ends_with("/tasklock")) && hook == "hook" && ev == event
}

/// "an array", "a string"…: what a JSON value is, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON file whose top level is an object with hooks `init` can merge into, with its
/// text (`None` when missing: an empty object then). Anything else is refused, naming
/// the file, before anything is changed.
pub(crate) fn read_object(path: &Path, events: &[(&str, &str)]) -> Result<(Option<String>, Value)> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let doc: Value = serde_json::from_str(&text).map_err(|e| Error::Config {
                path: path.to_path_buf(),
                message: format!("not valid JSON ({e}); fix it and run `tasklock init` again"),
            })?;
            if !doc.is_object() {
                return Err(Error::Config {
                    path: path.to_path_buf(),
                    message: "the top level is not a JSON object".into(),
                });
            }
            if let Err(problem) = check_types(&doc, events) {
                return Err(Error::Config {
                    path: path.to_path_buf(),
                    message: format!(
                        "{problem}; fix it and run `tasklock init` again (nothing was changed)"
                    ),
                });
            }
            Ok((Some(text), doc))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok((None, Value::Object(Default::default())))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Refuse settings whose parts `init` writes to have the wrong type, naming the JSON
/// path: rather than replace or skip them, `init` changes nothing.
pub(crate) fn check_types(doc: &Value, events: &[(&str, &str)]) -> std::result::Result<(), String> {
    let wrong =
        |path: &str, v: &Value, want: &str| Err(format!("`{path}` is {}, not {want}", kind(v)));
    if let Some(hooks) = doc.get("hooks") {
        let Some(hooks) = hooks.as_object() else {
            return wrong("hooks", hooks, "an object");
        };
        for (event, _) in events {
            let Some(groups) = hooks.get(*event) else {
                continue;
            };
            let Some(groups) = groups.as_array() else {
                return wrong(&format!("hooks.{event}"), groups, "an array");
            };
            for (i, group) in groups.iter().enumerate() {
                let Some(group) = group.as_object() else {
                    return wrong(&format!("hooks.{event}[{i}]"), group, "an object");
                };
                if let Some(list) = group.get("hooks")
                    && !list.is_array()
                {
                    return wrong(&format!("hooks.{event}[{i}].hooks"), list, "an array");
                }
            }
        }
    }
    if let Some(perms) = doc.get("permissions") {
        let Some(perms) = perms.as_object() else {
            return wrong("permissions", perms, "an object");
        };
        if let Some(allow) = perms.get("allow")
            && !allow.is_array()
        {
            return wrong("permissions.allow", allow, "an array");
        }
    }
    Ok(())
}

/// Add each of the template's hook groups where no hook group of the event with the same
/// tools runs `tasklock hook EVENT` yet; other hooks are kept as they are. (PreToolUse has
/// two: `Bash`, and the file-editing tools.) Returns the events added to. The types were
/// checked by `check_types`.
pub(crate) fn merge_hooks(
    doc: &mut Value,
    template: &Value,
    events: &[(&str, &str)],
) -> Vec<String> {
    let mut added = Vec::new();
    let hooks = doc
        .as_object_mut()
        .expect("checked to be an object")
        .entry("hooks")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()
        .expect("checked to be an object");
    for &(event, hook_event) in events {
        let groups = template["hooks"][event]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let list = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .expect("checked to be an array");
        let mut any = false;
        for group in groups {
            let present = list.iter().any(|g| {
                covers(&g["matcher"], &group["matcher"])
                    && g["hooks"].as_array().is_some_and(|hs| {
                        hs.iter().any(|h| {
                            h["command"]
                                .as_str()
                                .is_some_and(|c| calls_tasklock_hook(c, hook_event))
                        })
                    })
            });
            if !present {
                list.push(group);
                any = true;
            }
        }
        if any {
            added.push(event.to_string());
        }
    }
    added
}

/// Does a hook group's matcher (`Bash`, `Edit|Write`, `*`, none) match every tool the
/// template's matcher names? No matcher, an empty one or `*` matches every tool.
pub fn covers(theirs: &Value, ours: &Value) -> bool {
    let all = |m: &Value| m.as_str().is_none_or(|s| s.is_empty() || s == "*");
    if all(theirs) {
        return true;
    }
    if all(ours) {
        return false;
    }
    let names = |m: &Value| -> Vec<String> {
        m.as_str()
            .unwrap_or_default()
            .split('|')
            .map(|t| t.trim().to_string())
            .collect()
    };
    let theirs = names(theirs);
    names(ours).iter().all(|t| theirs.contains(t))
}

/// Add our hooks and permissions where missing and drop the legacy rule; the types were
/// checked by `check_types`.
pub(crate) fn merge_settings(doc: &mut Value) -> Merged {
    let template: Value = serde_json::from_str(SETTINGS_TEMPLATE).expect("the template is JSON");
    let mut merged = Merged {
        hooks: merge_hooks(doc, &template, &HOOK_EVENTS),
        ..Merged::default()
    };
    let root = doc.as_object_mut().expect("checked to be an object");
    let allow = root
        .entry("permissions")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()
        .expect("checked to be an object")
        .entry("allow")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .expect("checked to be an array");
    for (rule, _) in REVOKED_RULES {
        let before = allow.len();
        allow.retain(|r| r.as_str() != Some(rule));
        if allow.len() != before {
            merged.removed.push(rule.to_string());
        }
    }
    for rule in ALLOWED_RULES {
        if !allow.iter().any(|r| r.as_str() == Some(rule)) {
            allow.push(Value::String(rule.to_string()));
            merged.rules.push(rule.to_string());
        }
    }
    merged
}

impl Merged {
    pub(crate) fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.rules.is_empty() && self.removed.is_empty()
    }

    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.hooks.is_empty() {
            parts.push(format!("added hooks {}", self.hooks.join(", ")));
        }
        if self.rules.len() > 3 {
            parts.push(format!(
                "added {} permissions `Bash(tasklock SUBCOMMAND *)` (every subcommand but run, init, hook and unfreeze)",
                self.rules.len()
            ));
        } else if !self.rules.is_empty() {
            parts.push(format!("added permissions {}", self.rules.join(", ")));
        }
        for rule in &self.removed {
            let why = REVOKED_RULES
                .iter()
                .find(|(r, _)| r == rule)
                .map_or("", |(_, why)| why);
            parts.push(format!("removed permission {rule}: {why}"));
        }
        parts.join("; ")
    }
}

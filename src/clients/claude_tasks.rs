//! Claude Code's task list (its `TaskCreate`/`TaskUpdate` tools, one list shared by an
//! agent team): which list a hook's caller works on, what a `TaskUpdate` does to its task,
//! and who a teammate is. What Claude Code 2.1.330 does, read from its code and checked
//! with the real CLI (docs/e2e.md):
//!
//! - The list is `CLAUDE_CODE_TASK_LIST_ID` when set; else a teammate's team (a teammate
//!   in its own terminal pane is a `claude` process started with `--agent-name NAME
//!   --team-name TEAM`); else the team the session leads (agent teams give every
//!   interactive session a team, recorded in `~/.claude/teams/TEAM/config.json` with its
//!   `leadSessionId`; a teammate running inside the lead's process has the lead's
//!   `session_id`); else the session's id. Its tasks are the files
//!   `~/.claude/tasks/LIST/ID.json`, the names with every character but letters, digits,
//!   `_` and `-` made `-`.
//! - No hook input names the list; `TaskCompleted` and `TeammateIdle` name the team
//!   (`team_name`).

use std::path::PathBuf;

use serde_json::Value;

/// How the key of a task starts: `task:LIST/ID`.
pub const KEY_PREFIX: &str = "task:";

/// The hook matcher for the tool that claims tasks (`tasklock init` wires it).
pub const TASK_UPDATE_MATCHER: &str = "TaskUpdate";

/// What a `TaskUpdate` does to the ownership of its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The caller takes it: it sets the owner (to itself), or the status `in_progress`.
    Claim,
    /// It sets the status `completed`.
    Done,
    /// It gives the task up: an empty owner, the status `pending`, or `deleted`.
    Drop,
    /// It names another owner (a lead assigning the task): the assignee claims it when it
    /// starts.
    Assign(String),
    /// Nothing about who works on it (a subject, a dependency).
    Other,
}

/// One `TaskUpdate` call: its task and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub task: String,
    pub change: Change,
}

/// The `TaskUpdate` of a PreToolUse input, as called by an agent named `own` in its team
/// (when known); `None` for another tool or a call without a task.
pub fn update(payload: &Value, own: Option<&str>) -> Option<Update> {
    if payload["tool_name"] != "TaskUpdate" {
        return None;
    }
    let input = &payload["tool_input"];
    let task = match &input["taskId"] {
        Value::String(s) if !s.trim().is_empty() => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let status = input["status"].as_str().unwrap_or_default();
    let owner = input["owner"].as_str().map(str::trim);
    let change = match (status, owner) {
        ("completed", _) => Change::Done,
        ("pending" | "deleted", _) | (_, Some("")) => Change::Drop,
        (_, Some(o)) if own.is_some_and(|me| me != o) => Change::Assign(o.to_string()),
        (_, Some(_)) | ("in_progress", None) => Change::Claim,
        _ => Change::Other,
    };
    Some(Update { task, change })
}

/// A teammate running as a `claude` process of its own (in a terminal pane), as its
/// command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teammate {
    pub name: String,
    pub team: String,
}

/// The teammate the Claude Code process `pid` is, if it is one.
pub fn teammate(pid: Option<u32>) -> Option<Teammate> {
    let argv = crate::os::argv(pid?)?;
    Some(Teammate {
        name: flag(&argv, "--agent-name")?,
        team: flag(&argv, "--team-name")?,
    })
}

/// The value of `--name VALUE` or `--name=VALUE`.
fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter().enumerate().find_map(|(i, a)| {
        let value = if a == name {
            argv.get(i + 1)?.clone()
        } else {
            a.strip_prefix(name)?.strip_prefix('=')?.to_string()
        };
        (!value.is_empty()).then_some(value)
    })
}

/// The team session `session` leads, and the lead's name in it (`team-lead`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Led {
    pub team: String,
    pub lead: Option<String>,
}

/// The team whose config names `session` as its lead's session.
pub fn led_team(session: &str) -> Option<Led> {
    let teams = config_dir()?.join("teams");
    for entry in std::fs::read_dir(teams).ok()?.flatten() {
        let Some(text) = crate::os::read_text(entry.path().join("config.json")) else {
            continue;
        };
        let Ok(config) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if config["leadSessionId"] != session {
            continue;
        }
        let team = config["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| entry.file_name().to_string_lossy().into_owned());
        let lead = config["members"].as_array().and_then(|ms| {
            ms.iter()
                .find(|m| m["agentId"] == config["leadAgentId"])
                .and_then(|m| m["name"].as_str().map(str::to_string))
        });
        return Some(Led { team, lead });
    }
    None
}

/// Claude Code's configuration directory: `CLAUDE_CONFIG_DIR`, else `~/.claude`.
fn config_dir() -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            Some(PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".claude"))
        }
    }
}

/// The task list the caller works on, in the order Claude Code picks it: the
/// environment's, the team the hook input names, the teammate's team, the team the
/// session leads, the session's own.
pub fn list_id(
    payload: &Value,
    session: &str,
    mate: Option<&Teammate>,
    led: Option<&Led>,
) -> String {
    std::env::var("CLAUDE_CODE_TASK_LIST_ID")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            payload["team_name"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
        .or_else(|| mate.map(|m| m.team.clone()))
        .or_else(|| led.map(|l| l.team.clone()))
        .unwrap_or_else(|| session.to_string())
}

/// The key a task is checked out as: `task:LIST/ID`, each as Claude Code names its
/// directory and file.
pub fn key(list: &str, task: &str) -> String {
    format!("{KEY_PREFIX}{}/{}", file_name(list), file_name(task))
}

/// Every character but ASCII letters, digits, `_` and `-` made `-`.
fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(input: Value, own: Option<&str>) -> Change {
        let payload = json!({"tool_name": "TaskUpdate", "tool_input": input});
        update(&payload, own).expect("a TaskUpdate").change
    }

    #[test]
    fn what_an_update_does() {
        let claim = json!({"taskId": "1", "owner": "mate0", "status": "in_progress"});
        assert_eq!(change(claim.clone(), None), Change::Claim);
        assert_eq!(change(claim.clone(), Some("mate0")), Change::Claim);
        assert_eq!(
            change(claim, Some("team-lead")),
            Change::Assign("mate0".into())
        );
        assert_eq!(
            change(json!({"taskId": "1", "status": "in_progress"}), None),
            Change::Claim
        );
        assert_eq!(
            change(json!({"taskId": "1", "status": "completed"}), None),
            Change::Done
        );
        assert_eq!(
            change(json!({"taskId": "1", "owner": ""}), None),
            Change::Drop
        );
        assert_eq!(
            change(json!({"taskId": "1", "status": "pending"}), None),
            Change::Drop
        );
        assert_eq!(
            change(json!({"taskId": "1", "subject": "x"}), None),
            Change::Other
        );
        let other = json!({"tool_name": "Bash", "tool_input": {"taskId": "1"}});
        assert_eq!(update(&other, None), None);
    }

    #[test]
    fn keys_name_the_list_and_task_as_claude_codes_files_do() {
        assert_eq!(key("session-1a2b3c4d", "7"), "task:session-1a2b3c4d/7");
        assert_eq!(key("my team/x", "7"), "task:my-team-x/7");
    }

    #[test]
    fn flags_in_both_forms() {
        let argv: Vec<String> = ["claude", "--agent-name", "mate0", "--team-name=t"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(flag(&argv, "--agent-name").as_deref(), Some("mate0"));
        assert_eq!(flag(&argv, "--team-name").as_deref(), Some("t"));
        assert_eq!(flag(&argv, "--agent-id"), None);
    }
}

//! Cursor: the project rules that teach its agent the checkout discipline
//! (`.cursor/rules/tasklock.mdc`) and the MCP server in the project's `.cursor/mcp.json`.
//! Cursor's agent puts no session id in the environment of the commands it runs, so its
//! agents work through the MCP server: one agent per server process.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::codex::{ARGS, COMMAND, SERVER};
use crate::error::{Error, Result};

/// The rules file `init` writes.
pub const RULES: &str = include_str!("../../templates/cursor-rules.mdc");

/// One file `init` writes for Cursor, or leaves: its path, the action (`created`,
/// `updated`, `unchanged`), what it is, and the text to write (none when unchanged).
pub struct Planned {
    pub path: PathBuf,
    pub action: &'static str,
    pub what: String,
    pub text: Option<String>,
}

/// Should `init` set the project up for Cursor? When asked, or when it has `.cursor/`.
pub fn wanted(project: &Path, asked: bool) -> bool {
    asked || project.join(".cursor").is_dir()
}

/// What `init` would write for Cursor in `project`; reads and checks everything first,
/// so that nothing is written when a file cannot be read as expected.
pub fn plan(project: &Path) -> Result<Vec<Planned>> {
    let dir = project.join(".cursor");
    let rules = dir.join("rules").join("tasklock.mdc");
    let rules_plan = match std::fs::read_to_string(&rules) {
        Ok(t) if t == RULES => Planned {
            path: rules,
            action: "unchanged",
            what: "tasklock rules for Cursor's agent present".into(),
            text: None,
        },
        Ok(_) => Planned {
            path: rules,
            action: "unchanged",
            what: "kept as it is (not this version's rules: remove it and run `tasklock init` \
                   again to get them)"
                .into(),
            text: None,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Planned {
            path: rules,
            action: "created",
            what: "tasklock rules for Cursor's agent (always applied)".into(),
            text: Some(RULES.to_string()),
        },
        Err(e) => return Err(Error::io(&rules, e)),
    };
    let mcp = dir.join("mcp.json");
    let ours = json!({ "command": COMMAND, "args": ARGS });
    let mcp_plan = match std::fs::read_to_string(&mcp) {
        Ok(text) => {
            let config = |message: String| Error::Config {
                path: mcp.clone(),
                message: format!(
                    "{message}; fix it and run `tasklock init` again (nothing was changed)"
                ),
            };
            let mut doc: Value =
                serde_json::from_str(&text).map_err(|e| config(format!("not valid JSON ({e})")))?;
            let Some(top) = doc.as_object_mut() else {
                return Err(config("the top level is not a JSON object".into()));
            };
            let servers = top
                .entry("mcpServers")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(servers) = servers.as_object_mut() else {
                return Err(config("`mcpServers` is not a JSON object".into()));
            };
            if servers.contains_key(SERVER) {
                Planned {
                    path: mcp,
                    action: "unchanged",
                    what: format!("MCP server `{SERVER}` present"),
                    text: None,
                }
            } else {
                servers.insert(SERVER.into(), ours);
                Planned {
                    path: mcp,
                    action: "updated",
                    what: format!("added the MCP server `{SERVER}` (`tasklock mcp`)"),
                    text: Some(pretty(&doc)),
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Planned {
            path: mcp,
            action: "created",
            what: format!("the MCP server `{SERVER}` (`tasklock mcp`)"),
            text: Some(pretty(&json!({ "mcpServers": { SERVER: ours } }))),
        },
        Err(e) => return Err(Error::io(&mcp, e)),
    };
    Ok(vec![rules_plan, mcp_plan])
}

fn pretty(doc: &Value) -> String {
    let mut text = serde_json::to_string_pretty(doc).expect("a JSON value serializes");
    text.push('\n');
    text
}

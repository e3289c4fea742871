//! Gemini CLI: the hooks `tasklock init` merges into a project's `.gemini/settings.json`
//! (the same hooks the extension in plugins/gemini carries in `hooks/hooks.json`), and the
//! names of the tools its hooks see. See docs/e2e.md for what the real CLI provides.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::hooks_json::{GEMINI_HOOK_EVENTS, GEMINI_SETTINGS_TEMPLATE, merge_hooks, read_object};
use crate::error::Result;

/// The tools BeforeTool is wired for: the file-writing tools (the edit gate) and the shell
/// (its `tasklock` commands are given the session's identity).
pub const BEFORE_TOOL_MATCHER: &str = "write_file|replace|run_shell_command";

/// `.gemini/settings.json` as read: its path, whether it existed, and the document.
pub struct GeminiSettings {
    pub path: PathBuf,
    pub existed: bool,
    doc: Value,
}

/// Read the project's `.gemini/settings.json` (refused, naming the file, when it is not a
/// JSON object or its hooks have the wrong types: `init` then changes nothing).
pub fn read(project: &Path) -> Result<GeminiSettings> {
    let path = project.join(".gemini").join("settings.json");
    let (existing, doc) = read_object(&path, &GEMINI_HOOK_EVENTS)?;
    Ok(GeminiSettings {
        path,
        existed: existing.is_some(),
        doc,
    })
}

impl GeminiSettings {
    /// Add tasklock's hook groups where missing (other settings and hooks are kept);
    /// returns the events added to.
    pub fn merge(&mut self) -> Vec<String> {
        let template: Value =
            serde_json::from_str(GEMINI_SETTINGS_TEMPLATE).expect("the Gemini template is JSON");
        merge_hooks(&mut self.doc, &template, &GEMINI_HOOK_EVENTS)
    }

    /// The file's new text.
    pub fn text(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.doc).expect("a JSON value serializes");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_wires_each_event_and_the_before_tool_matcher() {
        let t: Value = serde_json::from_str(GEMINI_SETTINGS_TEMPLATE).unwrap();
        assert_eq!(
            t["hooks"].as_object().unwrap().len(),
            GEMINI_HOOK_EVENTS.len()
        );
        for (event, hook_event) in GEMINI_HOOK_EVENTS {
            let c = t["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .unwrap();
            assert!(
                super::super::hooks_json::calls_tasklock_hook(c, hook_event),
                "{event}: {c}"
            );
            // Gemini CLI's timeouts are milliseconds.
            assert_eq!(t["hooks"][event][0]["hooks"][0]["timeout"], 10000);
        }
        assert_eq!(t["hooks"]["BeforeTool"][0]["matcher"], BEFORE_TOOL_MATCHER);
    }
}

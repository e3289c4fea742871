//! What tasklock knows of the programs that host agents and their work: Claude Code and
//! Codex (their hooks documents, Codex's config, the commands a subagent is started with,
//! how a message is pushed into a session) and git (the pre-commit hook). Nothing here
//! decides about checkouts: commands and the engine's delivery call it. It imports the
//! basic layer and store types (where a session is reached), nothing above them.

pub mod apply_patch;
pub mod claude_tasks;
pub mod codex;
pub mod cursor;
pub mod gemini;
pub mod git_hook;
pub mod hooks_json;
pub mod inject;
pub mod shell;
pub mod wake;

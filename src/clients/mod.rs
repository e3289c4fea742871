//! What tasklock knows of the programs that host agents and their work: Claude Code and
//! Codex (their hooks documents, Codex's config, the commands a subagent is started
//! with) and git (the pre-commit hook). Nothing here decides about checkouts: commands
//! call it; it imports only the basic layer (errors, paths).

pub mod codex;
pub mod git_hook;
pub mod hooks_json;
pub mod inject;

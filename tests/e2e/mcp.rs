//! The official MCP TypeScript SDK (`@modelcontextprotocol/sdk` from npm, installed into
//! `target/e2e/mcp-sdk`) and a scripted client on it for `tasklock mcp`. See docs/e2e.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::npm_install;

/// The SDK release these tests were written and checked against.
pub const MCP_SDK_VERSION: &str = "1.32.2";

/// `target/e2e/mcp-sdk` with the SDK installed, and the client script copied next to its
/// `node_modules` (ES modules resolve packages from the script's own directory).
pub fn mcp_sdk() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install).clone()
}

fn installed(prefix: &Path) -> bool {
    std::fs::read_to_string(prefix.join("node_modules/@modelcontextprotocol/sdk/package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|m| m["version"] == MCP_SDK_VERSION)
}

fn install() -> PathBuf {
    let prefix = npm_install(
        "mcp-sdk",
        "@modelcontextprotocol/sdk",
        MCP_SDK_VERSION,
        "the MCP SDK",
        |p| installed(p).then(|| p.to_path_buf()),
        "its package.json does not say that version",
    );
    std::fs::write(
        prefix.join("mcp_client.mjs"),
        include_str!("mcp_client.mjs"),
    )
    .expect("write the MCP client script");
    prefix
}

// ---------------------------------------------------------------------------------------
// Claude Code as an MCP client
// ---------------------------------------------------------------------------------------

/// The tasklock tools as Claude Code names them.
pub const CLAUDE_MCP_TOOLS: [&str; 11] = [
    "mcp__tasklock__checkout",
    "mcp__tasklock__release",
    "mcp__tasklock__renew",
    "mcp__tasklock__status",
    "mcp__tasklock__list",
    "mcp__tasklock__note",
    "mcp__tasklock__give",
    "mcp__tasklock__verify",
    "mcp__tasklock__inbox",
    "mcp__tasklock__agents",
    "mcp__tasklock__why",
];

/// An `--mcp-config` file that starts the tasklock under test as server `tasklock`, as
/// `claude mcp add tasklock -- tasklock mcp` would.
pub fn mcp_config(dir: &Path) -> PathBuf {
    let path = dir.join("mcp.json");
    let config = serde_json::json!({
        "mcpServers": {
            "tasklock": {"type": "stdio", "command": super::tasklock_bin(), "args": ["mcp"]}
        }
    });
    std::fs::write(&path, config.to_string()).expect("write mcp.json");
    path
}

/// A headless session's command: the stub as the API, the tasklock MCP server, its tools
/// allowed.
pub fn mcp_session_cmd(
    home: &Path,
    project: &Path,
    stub: &super::Stub,
    config: &Path,
    prompt: &str,
    id: &str,
) -> Command {
    let mut cmd = super::claude_cmd(home, Some(stub));
    cmd.current_dir(project)
        .arg("--mcp-config")
        .arg(config)
        .arg("--allowedTools")
        .args(CLAUDE_MCP_TOOLS)
        .args(["-p", prompt, "--session-id", id, "--output-format", "json"]);
    cmd
}

//! The MCP server that `tasklock mcp` starts: a binary of its own, so that no other
//! command pays at start-up for the async runtime and MCP SDK it links
//! (docs/performance.md). Takes the global options `--dir`, `--agent` and `--name`.

fn main() {
    tasklock::install_panic_hook();
    std::process::exit(tasklock::mcp_main(std::env::args_os()));
}

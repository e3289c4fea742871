//! The MCP tools as a model reads them (names, descriptions, input schemas): a change
//! here changes what every MCP client's model is told, so it is reviewed as a snapshot.
#![cfg(feature = "mcp")]

#[test]
fn mcp_tools_list() {
    insta::assert_json_snapshot!("mcp_tools_list", tasklock::mcp::tools());
}

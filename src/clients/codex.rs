//! The tasklock MCP server in a project's `.codex/config.toml`, for `tasklock init`.
//!
//! The file is edited with `toml_edit`, so everything else in it (comments, other servers,
//! other tables, the order and layout) is kept byte for byte. A file that is not TOML, or
//! whose `mcp_servers` or `mcp_servers.tasklock` is not a table, is refused before `init`
//! changes anything.

use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use crate::error::{Error, Result};

/// The server's name in `mcp_servers` (Codex calls its tools `tasklock` tools).
pub const SERVER: &str = "tasklock";
/// The command the server entry runs: `tasklock` from PATH, as the hooks do, so that the
/// file can be committed and used on every machine.
pub const COMMAND: &str = "tasklock";
/// Its arguments.
pub const ARGS: &[&str] = &["mcp"];

/// What `init` writes above the table it adds.
const COMMENT: &str = "# The tasklock MCP server (added by `tasklock init`): checkout, release, status... as tools.\n# Its tools only take and give back task checkouts, so Codex runs them without asking.\n";

/// `.codex/config.toml` as read: its text (`None`: no file yet) and the parsed document.
pub struct CodexConfig {
    pub path: PathBuf,
    pub existing: Option<String>,
    doc: DocumentMut,
}

/// What `merge` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Merged {
    /// Added `[mcp_servers.tasklock]`.
    Added,
    /// A `tasklock` server was already there; kept as it is.
    Present,
}

/// Read and check the file: refused (error kind `config`, nothing changed) when it is not
/// TOML or `mcp_servers` / `mcp_servers.tasklock` is not a table.
pub fn read(path: &Path) -> Result<CodexConfig> {
    let existing = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, e)),
    };
    let doc = match &existing {
        None => DocumentMut::new(),
        Some(text) => text.parse::<DocumentMut>().map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: format!(
                "not valid TOML ({}); fix it and run `tasklock init` again (nothing was changed)",
                describe(text, &e)
            ),
        })?,
    };
    let refuse = |what: String| Error::Config {
        path: path.to_path_buf(),
        message: format!("{what}; fix it and run `tasklock init` again (nothing was changed)"),
    };
    if let Some(servers) = doc.get("mcp_servers") {
        let Some(servers) = servers.as_table_like() else {
            return Err(refuse(format!(
                "`mcp_servers` is {}, not a table",
                kind(servers)
            )));
        };
        if let Some(ours) = servers.get(SERVER)
            && !ours.is_table_like()
        {
            return Err(refuse(format!(
                "`mcp_servers.{SERVER}` is {}, not a table",
                kind(ours)
            )));
        }
    }
    Ok(CodexConfig {
        path: path.to_path_buf(),
        existing,
        doc,
    })
}

impl CodexConfig {
    /// Add `[mcp_servers.tasklock]` unless a `tasklock` server is there already (whatever
    /// it says: a server someone configured is theirs).
    pub fn merge(&mut self) -> Merged {
        let root = self.doc.as_table_mut();
        if !root.contains_key("mcp_servers") {
            let mut servers = Table::new();
            // No `[mcp_servers]` header of its own: only `[mcp_servers.tasklock]`.
            servers.set_implicit(true);
            root.insert("mcp_servers", Item::Table(servers));
        }
        let servers = root.get_mut("mcp_servers").expect("inserted above");
        if servers
            .as_table_like()
            .is_some_and(|t| t.contains_key(SERVER))
        {
            return Merged::Present;
        }
        let args = Array::from_iter(ARGS.iter().copied());
        match servers {
            // `[mcp_servers]` or dotted keys: a table of its own at the end of the file.
            Item::Table(table) => {
                let mut ours = Table::new();
                ours.insert("command", toml_edit::value(COMMAND));
                ours.insert("args", toml_edit::value(args));
                ours.insert("default_tools_approval_mode", toml_edit::value("approve"));
                let text = self.existing.as_deref().unwrap_or_default();
                let sep = if text.is_empty() || text.ends_with("\n\n") {
                    ""
                } else if text.ends_with('\n') {
                    "\n"
                } else {
                    "\n\n"
                };
                ours.decor_mut().set_prefix(format!("{sep}{COMMENT}"));
                ours.set_position(Some(isize::MAX));
                table.insert(SERVER, Item::Table(ours));
            }
            // `mcp_servers = { … }`: an inline table in it.
            Item::Value(Value::InlineTable(table)) => {
                let mut ours = InlineTable::new();
                ours.insert("command", COMMAND.into());
                ours.insert("args", Value::Array(args));
                ours.insert("default_tools_approval_mode", "approve".into());
                table.insert(SERVER, Value::InlineTable(ours));
            }
            _ => unreachable!("checked by read to be a table"),
        }
        Merged::Added
    }

    /// The file's new text.
    pub fn text(&self) -> String {
        self.doc.to_string()
    }
}

/// The table `init` writes, as text (for messages and docs).
pub fn snippet() -> String {
    let args: Vec<String> = ARGS.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[mcp_servers.{SERVER}]\ncommand = \"{COMMAND}\"\nargs = [{}]\ndefault_tools_approval_mode = \"approve\"\n",
        args.join(", ")
    )
}

/// "line 3, column 7: invalid table header; expected `.`, `]`": a parse error in one line.
fn describe(text: &str, e: &toml_edit::TomlError) -> String {
    let message = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// "a string", "an array of tables"…: what a TOML item is, for messages.
fn kind(item: &Item) -> &'static str {
    match item {
        Item::None => "empty",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(v) => match v {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a date-time",
            Value::Array(_) => "an array",
            Value::InlineTable(_) => "an inline table",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(text: &str) -> (Merged, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        let mut c = read(&path).unwrap();
        let m = c.merge();
        (m, c.text())
    }

    #[test]
    fn the_snippet_is_what_merge_writes() {
        let (m, text) = merged("");
        assert_eq!(m, Merged::Added);
        assert_eq!(text, format!("{COMMENT}{}", snippet()));
    }

    #[test]
    fn a_dotted_or_inline_mcp_servers_gets_our_server_in_its_own_style() {
        let (m, text) = merged("mcp_servers.other.command = \"x\"\n");
        assert_eq!(m, Merged::Added);
        let doc: DocumentMut = text.parse().unwrap();
        assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("x"));
        assert_eq!(
            doc["mcp_servers"]["tasklock"]["command"].as_str(),
            Some("tasklock")
        );
        let (m, text) = merged("mcp_servers = { other = { command = \"x\" } }\n");
        assert_eq!(m, Merged::Added);
        assert!(
            text.starts_with("mcp_servers = { other = { command = \"x\" }")
                && text.lines().count() == 1,
            "still one inline table: {text}"
        );
        let doc: DocumentMut = text.parse().unwrap();
        assert_eq!(
            doc["mcp_servers"]["tasklock"]["args"][0].as_str(),
            Some("mcp")
        );
    }

    #[test]
    fn parse_errors_name_the_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "a = 1\n[mcp_servers.x\nb = 2\n").unwrap();
        let Err(Error::Config { message, .. }) = read(&path) else {
            panic!("accepted")
        };
        assert!(
            message.starts_with("not valid TOML (line 2, column "),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
    }
}

//! `tasklock init`: set up a project for Claude Code, Codex and other agents.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::clients::codex as codex_config;
use crate::clients::hooks_json::*;
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::report::{Change, ClientSetup, InitReport, McpSetup, Report};
use crate::store::sharing;

const INSTRUCTIONS: &str = include_str!("../../templates/instructions.md");
const CONFIG_TEMPLATE: &str = include_str!("../../templates/config.yaml");
const MARKER: &str = "<!-- tasklock:begin -->";
/// The OpenCode plugin (also shipped as plugins/opencode/tasklock.js).
pub const OPENCODE_PLUGIN: &str = include_str!("../../templates/opencode-plugin.js");
/// Where `init` writes it: OpenCode loads every `.js` file of the project's
/// `.opencode/plugin/`.
const OPENCODE_PLUGIN_PATH: &str = ".opencode/plugin/tasklock.js";

/// The agent clients `init` can set a project up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Claude,
    Codex,
    Gemini,
    OpenCode,
    Cursor,
}

pub const CLIENTS: [Client; 5] = [
    Client::Claude,
    Client::Codex,
    Client::Gemini,
    Client::OpenCode,
    Client::Cursor,
];

impl Client {
    /// Its name for `--client`.
    pub fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Codex => "codex",
            Client::Gemini => "gemini",
            Client::OpenCode => "opencode",
            Client::Cursor => "cursor",
        }
    }

    /// The folder a project that uses it has.
    fn folder(self) -> &'static str {
        match self {
            Client::Claude => ".claude",
            Client::Codex => ".codex",
            Client::Gemini => ".gemini",
            Client::OpenCode => ".opencode",
            Client::Cursor => ".cursor",
        }
    }

    /// Its command, when it is installed.
    fn command(self) -> &'static str {
        match self {
            Client::Cursor => "cursor-agent",
            c => c.name(),
        }
    }

    /// What is left to do in the client itself once `init` has written its files.
    fn needs(self) -> &'static str {
        match self {
            Client::Claude => "nothing: new Claude Code sessions in the project read it",
            Client::Codex => {
                "trust the project, then its hooks: run `/hooks` in Codex and approve them"
            }
            Client::Gemini => {
                "trust the folder (Gemini CLI asks when it starts in it): hooks run only in a trusted folder"
            }
            Client::OpenCode => "nothing: OpenCode loads the plugin when it starts",
            Client::Cursor => "enable the MCP server `tasklock` in Cursor's settings (MCP)",
        }
    }
}

/// The clients to set up and why: those named with `--client` (and `--cursor`), else
/// those the project or PATH shows it uses, else Claude Code alone.
fn choose(project: &Path, named: &[String], cursor: bool) -> Result<Vec<ClientSetup>> {
    let setup = |c: Client, why: String| ClientSetup {
        client: c.name(),
        why,
        needs: c.needs(),
    };
    let mut chosen = Vec::new();
    for name in named.iter().flat_map(|n| n.split(',')).map(str::trim) {
        let Some(c) = CLIENTS.into_iter().find(|c| c.name() == name) else {
            let all: Vec<_> = CLIENTS.iter().map(|c| c.name()).collect();
            return Err(Error::Usage(format!(
                "--client {name:?}: no such client; the clients are {}",
                all.join(", ")
            )));
        };
        if !chosen.iter().any(|s: &ClientSetup| s.client == c.name()) {
            chosen.push(setup(c, "named with --client".into()));
        }
    }
    if cursor && !chosen.iter().any(|s| s.client == "cursor") {
        chosen.push(setup(Client::Cursor, "asked for with --cursor".into()));
    }
    if !named.is_empty() {
        return Ok(chosen);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for c in CLIENTS {
        if chosen.iter().any(|s| s.client == c.name()) {
            continue;
        }
        let why = if project.join(c.folder()).is_dir() {
            format!("the project has {}/", c.folder())
        } else if crate::os::on_path(&path, c.command()).is_some() {
            format!("`{}` is on PATH", c.command())
        } else {
            continue;
        };
        chosen.push(setup(c, why));
    }
    if chosen.is_empty() {
        chosen.push(setup(
            Client::Claude,
            "no client's folder in the project nor command on PATH, so Claude Code only (name others with --client)".into(),
        ));
    }
    Ok(chosen)
}

/// What `init` was asked.
pub struct Options<'a> {
    pub dry_run: bool,
    pub shared: Option<&'a str>,
    pub git_hook: bool,
    pub cursor: bool,
    pub clients: &'a [String],
}

pub fn run(ctx: &Ctx, o: &Options) -> Result<Report> {
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let project = project_root(&cwd);
    let clients = choose(&project, o.clients, o.cursor)?;
    let has = |c: Client| clients.iter().any(|s| s.client == c.name());
    // Read every file first: if one cannot be read, nothing is changed at all.
    let claude = has(Client::Claude)
        .then(|| read_object(&project.join(".claude").join("settings.json"), &HOOK_EVENTS))
        .transpose()?;
    let codex_hooks = project.join(".codex").join("hooks.json");
    let codex = match has(Client::Codex) {
        true => Some((
            read_object(&codex_hooks, &CODEX_HOOK_EVENTS)?,
            codex_config::read(&project.join(".codex").join("config.toml"))?,
        )),
        false => None,
    };
    let gemini = has(Client::Gemini)
        .then(|| crate::clients::gemini::read(&project))
        .transpose()?;
    let cursor_files = match has(Client::Cursor) {
        true => crate::clients::cursor::plan(&project)?,
        false => Vec::new(),
    };
    let mut changes = lock_dir(ctx, o.shared, o.dry_run)?;
    if let Some((existing, mut doc)) = claude {
        let settings = project.join(".claude").join("settings.json");
        changes.push(claude_settings(
            &settings,
            existing.is_some(),
            &mut doc,
            o.dry_run,
        )?);
    }
    let mut codex_config = None;
    if let Some(((existing, mut doc), config)) = codex {
        let exists = existing.is_some();
        changes.push(codex_hook_file(&codex_hooks, exists, &mut doc, o.dry_run)?);
        codex_config = Some(config);
    }
    if let Some(mut g) = gemini {
        changes.push(gemini_hooks(&mut g, o.dry_run)?);
    }
    if let Some(mut config) = codex_config {
        changes.push(codex_mcp(&mut config, o.dry_run)?);
    }
    if has(Client::OpenCode) {
        changes.push(opencode_plugin(&project, o.dry_run)?);
    }
    // CLAUDE.md for Claude Code, AGENTS.md for Codex and the others.
    let others = clients.iter().any(|s| s.client != "claude");
    for (file, wanted) in [("CLAUDE.md", has(Client::Claude)), ("AGENTS.md", others)] {
        if wanted {
            changes.push(instructions(&project.join(file), o.dry_run)?);
        }
    }
    for f in cursor_files {
        if let (false, Some(text)) = (o.dry_run, &f.text) {
            let parent = f.path.parent().expect("has a parent");
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            write_atomic(&f.path, text)?;
        }
        changes.push(change(&f.path, f.action, &f.what));
    }
    // The git pre-commit guard, when asked for; otherwise `init` says how.
    let in_git = crate::discover::git_common_dir(&project).is_some();
    if o.git_hook {
        let Some(p) = crate::clients::git_hook::install(&project, o.dry_run)? else {
            return Err(Error::Usage(format!(
                "--git-hook: {} is not in a git repository",
                project.display()
            )));
        };
        changes.push(change(&p.path, p.action, &p.what));
    }
    Ok(Report::Init(InitReport {
        command: "init",
        now: ctx.now(),
        dry_run: o.dry_run,
        project: project.display().to_string(),
        changes,
        clients,
        mcp: mcp_setup(),
        git_hook_offered: in_git && !o.git_hook,
    }))
}

/// The lock directory, its .gitignore, its sharing (`--shared`) and a commented config.
fn lock_dir(ctx: &Ctx, shared: Option<&str>, dry_run: bool) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    let lock_dir = ctx.dir.clone();
    let had_dir = lock_dir.join(".gitignore").is_file();
    // `--shared`: the group, checked before anything is changed.
    let gid = match shared {
        None => None,
        // SAFETY: getegid has no preconditions.
        Some("") => Some(unsafe { libc::getegid() }),
        Some(g) => Some(sharing::group_id(g).ok_or_else(|| {
            Error::Usage(format!("--shared {g}: no such group (see /etc/group)"))
        })?),
    };
    let mut store = None;
    if !dry_run {
        if gid.is_some() {
            crate::store::create_root(&lock_dir)?;
        }
        store = Some(crate::store::FileStore::open_or_create(&lock_dir)?);
    }
    changes.push(change(
        &lock_dir,
        if had_dir { "unchanged" } else { "created" },
        "lock directory with a .gitignore of *",
    ));
    if let Some(gid) = gid {
        let group = sharing::group_name(gid);
        let already = std::fs::metadata(&lock_dir).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            crate::store::at::is_shared_mode(m.mode()) && m.gid() == gid
        });
        let mut what = format!(
            "shared with group {group}: mode 2770, files 0660, directories 2770 (every member may take, release and read every key)"
        );
        if !dry_run && !already {
            let left = sharing::make_shared(&lock_dir, gid)?;
            if !left.is_empty() {
                what.push_str(&format!(
                    "; left as they are (another user's; their owner or root can fix them): {}",
                    left.join(", ")
                ));
            }
            store = Some(crate::store::FileStore::open_or_create(&lock_dir)?);
        }
        changes.push(change(
            &lock_dir,
            if already { "unchanged" } else { "updated" },
            &what,
        ));
    }
    let config = lock_dir.join("config.yaml");
    if config.exists() {
        changes.push(change(&config, "unchanged", "settings (kept as they are)"));
    } else {
        if let Some(store) = &store {
            store.create_file(crate::config::Config::FILE, CONFIG_TEMPLATE.as_bytes())?;
        }
        changes.push(change(&config, "created", "commented default settings"));
    }
    Ok(changes)
}

/// Claude Code hooks and the permissions to run tasklock, merged into settings.json.
fn claude_settings(
    settings: &Path,
    existed: bool,
    doc: &mut Value,
    dry_run: bool,
) -> Result<Change> {
    let merged = merge_settings(doc);
    if merged.is_empty() {
        return Ok(change(
            settings,
            "unchanged",
            "hooks and permissions already in place",
        ));
    }
    if !dry_run {
        write_json(settings, doc)?;
    }
    let action = if existed { "updated" } else { "created" };
    Ok(change(settings, action, &merged.describe()))
}

/// Codex hooks, merged into the project's .codex/hooks.json (read by Codex in a project
/// it trusts, once the hooks themselves are trusted).
fn codex_hook_file(path: &Path, existed: bool, doc: &mut Value, dry_run: bool) -> Result<Change> {
    let template: Value =
        serde_json::from_str(CODEX_HOOKS_TEMPLATE).expect("the Codex template is JSON");
    let added = merge_hooks(doc, &template, &CODEX_HOOK_EVENTS);
    if added.is_empty() {
        return Ok(change(path, "unchanged", "Codex hooks already in place"));
    }
    if !dry_run {
        write_json(path, doc)?;
    }
    Ok(change(
        path,
        if existed { "updated" } else { "created" },
        &format!(
            "added Codex hooks {} (Codex runs them once the project and the hooks are trusted)",
            added.join(", ")
        ),
    ))
}

/// A JSON document, pretty, in a directory made if missing.
fn write_json(path: &Path, doc: &Value) -> Result<()> {
    std::fs::create_dir_all(path.parent().expect("has a parent"))
        .map_err(|e| Error::io(path, e))?;
    let mut text = serde_json::to_string_pretty(doc).expect("a JSON value serializes");
    text.push('\n');
    write_atomic(path, &text)
}

/// The MCP server for Codex, merged into the project's .codex/config.toml.
fn codex_mcp(config: &mut codex_config::CodexConfig, dry_run: bool) -> Result<Change> {
    let path = config.path.clone();
    Ok(match config.merge() {
        codex_config::Merged::Present => change(
            &path,
            "unchanged",
            "MCP server `tasklock` already configured (kept as it is)",
        ),
        codex_config::Merged::Added => {
            if !dry_run {
                std::fs::create_dir_all(path.parent().expect("has a parent"))
                    .map_err(|e| Error::io(&path, e))?;
                write_atomic(&path, &config.text())?;
            }
            change(
                &path,
                if config.existing.is_some() {
                    "updated"
                } else {
                    "created"
                },
                "added MCP server `tasklock` (`tasklock mcp`), its tools approved (Codex reads it once the project is trusted)",
            )
        }
    })
}

/// The coordination protocol in an instructions file (CLAUDE.md, AGENTS.md): created,
/// or appended once.
fn instructions(path: &Path, dry_run: bool) -> Result<Change> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, e)),
    };
    Ok(match text {
        Some(t) if t.contains(MARKER) => {
            change(path, "unchanged", "coordination instructions present")
        }
        Some(t) => {
            if !dry_run {
                let sep = if t.is_empty() || t.ends_with("\n\n") {
                    ""
                } else if t.ends_with('\n') {
                    "\n"
                } else {
                    "\n\n"
                };
                write_atomic(path, &format!("{t}{sep}{INSTRUCTIONS}"))?;
            }
            change(path, "updated", "appended coordination instructions")
        }
        None => {
            if !dry_run {
                write_new(path, INSTRUCTIONS)?;
            }
            change(path, "created", "coordination instructions")
        }
    })
}

/// Gemini CLI's hooks, merged into the project's `.gemini/settings.json` (read by Gemini
/// CLI in a trusted folder).
fn gemini_hooks(
    gemini: &mut crate::clients::gemini::GeminiSettings,
    dry_run: bool,
) -> Result<Change> {
    let added = gemini.merge();
    let path = gemini.path.clone();
    if added.is_empty() {
        return Ok(change(
            &path,
            "unchanged",
            "Gemini CLI hooks already in place",
        ));
    }
    if !dry_run {
        std::fs::create_dir_all(path.parent().expect("has a parent"))
            .map_err(|e| Error::io(&path, e))?;
        write_atomic(&path, &gemini.text())?;
    }
    Ok(change(
        &path,
        if gemini.existed { "updated" } else { "created" },
        &format!(
            "added Gemini CLI hooks {} (Gemini CLI runs them in a trusted folder)",
            added.join(", ")
        ),
    ))
}

/// The OpenCode plugin in the project, written whole: created, replaced when it is another
/// version, left alone when it is this one.
fn opencode_plugin(project: &Path, dry_run: bool) -> Result<Change> {
    let path = project.join(OPENCODE_PLUGIN_PATH);
    let existing = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(&path, e)),
    };
    let action = match existing.as_deref() {
        Some(t) if t == OPENCODE_PLUGIN => {
            return Ok(change(&path, "unchanged", "OpenCode plugin in place"));
        }
        Some(_) => "updated",
        None => "created",
    };
    if !dry_run {
        std::fs::create_dir_all(path.parent().expect("has a parent"))
            .map_err(|e| Error::io(&path, e))?;
        write_atomic(&path, OPENCODE_PLUGIN)?;
    }
    Ok(change(
        &path,
        action,
        "OpenCode plugin: each session an agent, edits gated, woken when its turn comes",
    ))
}

/// How any MCP client starts the server: `tasklock mcp`, from PATH like the hooks.
fn mcp_setup() -> McpSetup {
    let (command, args) = (codex_config::COMMAND, codex_config::ARGS);
    let line = format!("{command} {}", args.join(" "));
    McpSetup {
        command: command.to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        claude_code: format!("claude mcp add {} -- {line}", codex_config::SERVER),
        codex: format!("codex mcp add {} -- {line}", codex_config::SERVER),
        mcp_servers: serde_json::json!({
            "mcpServers": { (codex_config::SERVER): { "command": command, "args": args } }
        }),
    }
}

fn change(path: &Path, action: &str, what: &str) -> Change {
    Change {
        path: path.display().to_string(),
        action: action.to_string(),
        what: what.to_string(),
    }
}

/// The worktree containing `cwd` (where `.git` is), else `cwd`.
fn project_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

fn write_new(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Replace a file whole, keeping its permissions.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension(format!("tasklock-{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// `init`.
pub fn execute(ctx: &Ctx, a: crate::cli::InitArgs) -> Result<Report> {
    run(
        ctx,
        &Options {
            dry_run: a.dry_run,
            shared: a.shared.as_deref(),
            git_hook: a.git_hook,
            cursor: a.cursor,
            clients: &a.client,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_allows_exactly_the_allowed_rules() {
        let template: Value = serde_json::from_str(SETTINGS_TEMPLATE).unwrap();
        let allow: Vec<&str> = template["permissions"]["allow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(allow, ALLOWED_RULES);
        for rule in ALLOWED_RULES {
            assert!(!RUN_RULES.contains(rule), "{rule}");
            for bad in [" run", " init", " hook"] {
                assert!(!rule.contains(bad), "{rule}");
            }
        }
    }

    #[test]
    fn the_template_wires_each_event_to_its_hook() {
        let template: Value = serde_json::from_str(SETTINGS_TEMPLATE).unwrap();
        for (event, hook_event) in HOOK_EVENTS {
            let c = template["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .unwrap();
            assert!(calls_tasklock_hook(c, hook_event), "{event}: {c}");
        }
        let codex: Value = serde_json::from_str(CODEX_HOOKS_TEMPLATE).unwrap();
        assert_eq!(
            codex["hooks"].as_object().unwrap().len(),
            CODEX_HOOK_EVENTS.len(),
            "the Codex template wires exactly CODEX_HOOK_EVENTS"
        );
        for (event, hook_event) in CODEX_HOOK_EVENTS {
            let c = codex["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .unwrap();
            assert!(calls_tasklock_hook(c, hook_event), "{event}: {c}");
        }
        // Codex's PreToolUse is the edit gate: the apply_patch tool, and the shell, through
        // which a model may run apply_patch as a command.
        assert_eq!(
            codex["hooks"]["PreToolUse"][0]["matcher"],
            crate::commands::edit_gate::PATCH_MATCHER
        );
        assert_eq!(
            codex["hooks"]["PreToolUse"][1]["matcher"],
            crate::commands::edit_gate::SHELL_MATCHER
        );
        // Gemini CLI's BeforeTool covers its file-writing tools (the edit gate).
        for tool in crate::commands::edit_gate::GEMINI_EDIT_TOOLS {
            assert!(
                crate::clients::gemini::BEFORE_TOOL_MATCHER
                    .split('|')
                    .any(|t| t == tool),
                "{tool}"
            );
        }
        // Every event `tasklock hook` takes is wired for one agent or the other.
        let mut wired: Vec<&str> = HOOK_EVENTS
            .iter()
            .chain(CODEX_HOOK_EVENTS.iter())
            .map(|(_, e)| *e)
            .collect();
        wired.sort();
        wired.dedup();
        let mut events = crate::commands::hook::EVENTS.to_vec();
        events.sort();
        assert_eq!(wired, events, "the same events as `tasklock hook` takes");
    }

    #[test]
    fn hook_commands_by_name_or_path() {
        for yes in [
            "tasklock hook session-start",
            "/usr/local/bin/tasklock hook session-start",
            "\"$HOME/.local/bin/tasklock\" hook session-start",
            "'/opt/my tools/tasklock'  hook   session-start",
        ] {
            assert!(calls_tasklock_hook(yes, "session-start"), "{yes}");
        }
        for no in [
            "tasklock hook session-end",
            "tasklock hook session-start --verbose",
            "mytasklock hook session-start",
            "echo tasklock hook session-start",
            "/usr/bin/tasklock-old hook session-start",
            "",
        ] {
            assert!(!calls_tasklock_hook(no, "session-start"), "{no}");
        }
    }
}

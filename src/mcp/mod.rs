//! `tasklock mcp`: an MCP server on stdin/stdout, built on the official Rust SDK (`rmcp`).
//!
//! Each tool builds the same command line a person would type (`tasklock --agent=ID
//! checkout -- KEY`: every key after `--`, every value joined to its option, so that no
//! text of the caller's is read as an option) and runs it through [`crate::dispatch::call`], the path `tasklock` itself takes:
//! the content is the CLI's markdown (what the model reads), `_meta["tasklock/json"]` the
//! CLI's `--json` object (for programs), and a non-zero exit is an error result (`isError`)
//! with `exit_code` and `error_kind` in that object.
//!
//! One server process is one agent. Its id comes from the caller (`--agent`,
//! `TASKLOCK_AGENT`, the Claude Code session or Codex thread when the client passes one in
//! the environment) or is made up at `initialize` from the client's name (`clientInfo`):
//! `mcp-claude-code-1a2b3c4d`. The server registers the client's process (its parent, with
//! its start time) as the agent's process, so that other commands see the agent die with
//! its client even when this server is killed too; it beats every 30 s while it runs; and
//! it ends the agent (its checkouts released, audited) when stdin closes (`session_end`)
//! or the client process is gone (`agent_death`). Inbox messages are pushed to the client
//! as logging notifications (`notifications/message`) besides the `inbox` tool.
//!
//! The tokio runtime exists only inside `tasklock mcp`: every other command starts as fast
//! as before.

// Logging notifications are deprecated by the newest protocol revision (SEP-2577), but
// they are what today's clients (Claude Code, the TypeScript SDK) receive: keep them until
// the clients move on.
#![allow(deprecated)]

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::dispatch::Called;
use crate::engine::{Ctx, ReapReason};
use crate::error::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};

/// The longest `wait_seconds` a checkout may block a tool call.
pub const MAX_WAIT_SECS: u64 = 90;
/// Time between the server's heartbeats for its agent.
const BEAT_EVERY: Duration = Duration::from_secs(30);
/// How often the inbox is looked at for messages to push.
const INBOX_EVERY: Duration = Duration::from_secs(2);
/// How often the client process (and a termination signal) is checked.
const CLIENT_EVERY: Duration = Duration::from_millis(200);

/// Work for the command thread.
type Job = Box<dyn FnOnce() + Send>;

/// The one thread the server's commands run on, one at a time (warnings are collected
/// process-wide, and an agent's own calls have no reason to race each other). Being one
/// thread, it keeps one PostgreSQL connection for all of them (the store keeps its
/// connections per thread), instead of connecting for each.
static COMMANDS: OnceLock<std::sync::mpsc::Sender<Job>> = OnceLock::new();

fn commands() -> &'static std::sync::mpsc::Sender<Job> {
    COMMANDS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("tasklock-commands".into())
            .spawn(move || {
                for job in rx {
                    // A command that panics fails its call, not the ones after it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        if let Err(e) = spawned {
            eprintln!("tasklock mcp: cannot start the command thread: {e}");
        }
        tx
    })
}

/// Run `f` on the command thread and wait for its result; `None` if it could not run or
/// did not finish.
fn on_commands_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    commands()
        .send(Box::new(move || {
            let _ = tx.send(f());
        }))
        .ok()?;
    rx.recv().ok()
}

/// [`on_commands_blocking`] without holding up the runtime.
async fn on_commands<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(move || on_commands_blocking(f))
        .await
        .ok()
        .flatten()
}

/// Serve MCP on stdin/stdout until stdin closes or the client process is gone; returns
/// the process exit code.
pub fn serve(dir: Option<PathBuf>, agent: Option<String>, name: Option<String>) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tasklock mcp: cannot start the async runtime: {e}");
            return EXIT_ERROR;
        }
    };
    // The server's own secret, unless it was given one: the checkouts it makes are bound
    // to it, so no other process can act for them by naming the agent.
    if crate::secret::caller().is_none() {
        match crate::secret::generate() {
            Ok(s) => crate::secret::use_secret(&s),
            Err(e) => eprintln!("tasklock mcp: no secret for this server: {e}"),
        }
    }
    let client = crate::os::client_pid()
        .and_then(|pid| crate::os::start_time(pid).map(|start| (pid, start)));
    let server = Server(Arc::new(Inner {
        dir,
        agent_flag: agent,
        name_flag: name,
        me: Mutex::new(None),
        client,
        level: Mutex::new(LoggingLevel::Info),
        pushed: Mutex::new(HashSet::new()),
        started: OnceLock::new(),
    }));
    // A client that ends its server with a signal (Claude Code does, at the end of a
    // session) ends the session; a client that is gone ends the agent as dead.
    crate::signals::install();
    let code = runtime.block_on(async {
        let watcher = server.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CLIENT_EVERY).await;
                let reason = if !watcher.client_alive() {
                    ReapReason::AgentDeath
                } else if crate::signals::received().is_some() {
                    ReapReason::SessionEnd
                } else {
                    continue;
                };
                let s = watcher.clone();
                let _ = on_commands(move || s.end(reason)).await;
                std::process::exit(EXIT_OK);
            }
        });
        let running = match server.clone().serve(rmcp::transport::stdio()).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tasklock mcp: the client did not complete the handshake: {e}");
                return EXIT_ERROR;
            }
        };
        let _ = running.waiting().await;
        EXIT_OK
    });
    // stdin closed: the session is over, unless the client died first.
    let reason = if server.client_alive() {
        ReapReason::SessionEnd
    } else {
        ReapReason::AgentDeath
    };
    server.end(reason);
    // The runtime's stdin reader may still be blocked in read(2): do not wait for it.
    std::process::exit(code)
}

#[derive(Clone)]
struct Server(Arc<Inner>);

struct Inner {
    dir: Option<PathBuf>,
    agent_flag: Option<String>,
    name_flag: Option<String>,
    /// The agent this server is, set at the first request; a made-up one gives way to
    /// the client's session once its hooks have registered it (see [`Server::adopt`]).
    me: Mutex<Option<Me>>,
    /// The client's process (this server's parent, through shells): pid and start time.
    client: Option<(u32, u64)>,
    /// The least severe logging level the client wants (`logging/setLevel`).
    level: Mutex<LoggingLevel>,
    /// Inbox messages already pushed as notifications.
    pushed: Mutex<HashSet<String>>,
    /// Set once the background work runs.
    started: OnceLock<()>,
}

#[derive(Clone, Debug)]
struct Me {
    id: String,
    name: String,
    /// Made up here (no identity given, no session found): may still become the session.
    made_up: bool,
}

impl Server {
    /// The agent as it is now.
    fn current(&self) -> Option<Me> {
        self.0.me.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The agent: the caller's identity; else the session whose registered process runs
    /// this server (its hooks registered it: Codex gives its MCP servers no thread id in
    /// the environment); else one made up from the client's name.
    fn identify(&self, client_name: Option<&str>) -> Me {
        let mut me = self.0.me.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = &*me {
            return m.clone();
        }
        let given = crate::identity::resolve_id(self.0.agent_flag.as_deref())
            .ok()
            .filter(|(_, s)| *s != crate::identity::Source::UserAtHost)
            .map(|(id, _)| id);
        let made = if let Some(id) = given {
            self.named(id, None, false)
        } else {
            match on_commands_blocking(self.find_session()).flatten() {
                Some((id, name)) => self.named(id, name, false),
                None => {
                    let client = slug(client_name.unwrap_or("client"));
                    self.named(format!("mcp-{client}-{}", random_hex()), None, true)
                }
            }
        };
        // Under the session's own process the server acts for the session as its hooks do.
        on_commands_blocking(self.prove_if_child_of(&made.id));
        *me = Some(made.clone());
        made
    }

    fn named(&self, id: String, registered: Option<String>, made_up: bool) -> Me {
        let name = crate::identity::resolve_name(self.0.name_flag.as_deref())
            .ok()
            .flatten()
            .or(registered)
            .unwrap_or_else(|| {
                let project = std::env::current_dir()
                    .ok()
                    .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "/".into());
                let short: String = id
                    .rsplit('-')
                    .next()
                    .unwrap_or(&id)
                    .chars()
                    .take(8)
                    .collect();
                let client = id.strip_prefix("mcp-").unwrap_or(&id);
                let client = client.rsplit_once('-').map_or(client, |(c, _)| c);
                format!("{client} (MCP) in {project} #{short}")
            });
        Me { id, name, made_up }
    }

    /// A made-up agent becomes the client's session once the session's hooks have
    /// registered it with this server's client process (Codex starts its MCP servers
    /// before its SessionStart hook runs). The made-up agent, which never held
    /// anything, is ended.
    async fn adopt(&self, me: Me) -> Me {
        if !me.made_up {
            return me;
        }
        let found = on_commands(self.find_session()).await.flatten();
        let Some((id, name)) = found else { return me };
        let session = self.named(id, name, false);
        on_commands(self.prove_if_child_of(&session.id)).await;
        *self.0.me.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
        let s = self.clone();
        let old = me.clone();
        let _ = on_commands(move || s.end_as(&old, ReapReason::SessionEnd)).await;
        self.beat(&session).await;
        session
    }

    /// The agent, and the background work started, on the first request: `initialize`
    /// (the handshake of protocol revisions up to 2025-11-25) or, for clients of the
    /// stateless revision 2026-07-28 (Claude Code 2.1.330), whatever comes first, with the
    /// client's name in the request's metadata.
    async fn start(&self, context: &RequestContext<RoleServer>) -> Me {
        let client = context.client_info().map(|i| i.name);
        let me = self.identify(client.as_deref());
        if self.0.started.set(()).is_ok() {
            // Registered before the first tool call, so a client that dies right after a
            // checkout is seen dead by the process check.
            self.beat(&me).await;
            // Unsolicited notifications need the session of the initialize handshake.
            let push = context.peer.peer_info().is_some();
            self.start_background(me.clone(), push.then(|| context.peer.clone()));
        }
        me
    }

    /// `tasklock [--dir D] --agent ID --name NAME <args>`.
    fn argv(&self, me: &Me, args: Vec<String>) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["tasklock".into()];
        if let Some(d) = &self.0.dir {
            let mut o = OsString::from("--dir=");
            o.push(d);
            v.push(o);
        }
        v.push(opt("--agent", &me.id).into());
        v.push(opt("--name", &me.name).into());
        v.extend(args.into_iter().map(OsString::from));
        v
    }

    async fn run(&self, me: &Me, args: Vec<String>) -> Called {
        let argv = self.argv(me, args);
        // The server lives on: what the command queued to push goes now, not at exit.
        let called = on_commands(move || {
            let called = crate::dispatch::call(argv);
            crate::engine::deliver::flush();
            crate::engine::worktree::flush();
            called
        });
        match called.await {
            Some(called) => called,
            None => internal("the command did not finish"),
        }
    }

    fn client_alive(&self) -> bool {
        match self.0.client {
            Some((pid, start)) => crate::os::start_time(pid) == Some(start),
            None => true,
        }
    }

    /// Register the client's process for the agent and say it is alive.
    async fn beat(&self, me: &Me) {
        let mut args = vec![
            "heartbeat".to_string(),
            "--status".into(),
            "MCP server".into(),
        ];
        if let Some((pid, _)) = self.0.client {
            args.extend(["--pid".into(), pid.to_string()]);
        }
        let called = self.run(me, args).await;
        if called.exit_code != 0 {
            eprintln!("tasklock mcp: heartbeat failed: {}", called.markdown.trim());
        }
    }

    /// The agent ended: release its checkouts (audited) and mark it ended.
    fn end(&self, reason: ReapReason) {
        if let Some(me) = self.current() {
            self.end_as(&me, reason);
        }
    }

    /// The session whose registered process runs this server: a job for the command
    /// thread.
    fn find_session(&self) -> impl FnOnce() -> Option<(String, Option<String>)> + Send + 'static {
        let dir = self.0.dir.clone();
        move || crate::commands::hook::session_of_this_process(dir.as_deref())
    }

    /// Act for `id` as its hooks do when this server runs under its process: a job for
    /// the command thread.
    fn prove_if_child_of(&self, id: &str) -> impl FnOnce() + Send + 'static {
        let (dir, id) = (self.0.dir.clone(), id.to_string());
        move || crate::commands::hook::prove_if_child_of(dir.as_deref(), &id)
    }

    /// On the command thread.
    fn end_as(&self, me: &Me, reason: ReapReason) {
        let result = crate::discover::discover(self.0.dir.as_deref())
            .and_then(|d| d.for_reading())
            .and_then(|dir| {
                let ctx = Ctx::new(dir, Some(me.id.clone()), Some(me.name.clone()))?;
                crate::engine::end_agent(&ctx, &me.id, true, reason)
            });
        if let Err(e) = result {
            eprintln!("tasklock mcp: could not end agent {}: {e}", me.id);
        }
    }

    /// Beat, watch the client, push inbox messages: for as long as the server runs.
    fn start_background(&self, me: Me, peer: Option<Peer<RoleServer>>) {
        let s = self.clone();
        let first = me.clone();
        // Each round acts for the agent as it is then (it may have become the session).
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(BEAT_EVERY).await;
                let who = s.current().unwrap_or_else(|| first.clone());
                s.beat(&who).await;
            }
        });
        let Some(peer) = peer else { return };
        let s = self.clone();
        tokio::spawn(async move {
            loop {
                let who = s.current().unwrap_or_else(|| me.clone());
                s.push_inbox(&who, &peer).await;
                tokio::time::sleep(INBOX_EVERY).await;
            }
        });
    }

    /// New inbox messages as a logging notification; they stay unread for `inbox`.
    async fn push_inbox(&self, me: &Me, peer: &Peer<RoleServer>) {
        if level_rank(*self.0.level.lock().unwrap_or_else(|e| e.into_inner()))
            > level_rank(LoggingLevel::Notice)
        {
            return;
        }
        let called = self.run(me, vec!["inbox".into(), "--peek".into()]).await;
        let fresh: Vec<Value> = {
            let mut pushed = self.0.pushed.lock().unwrap_or_else(|e| e.into_inner());
            called.json["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| {
                    m["id"]
                        .as_str()
                        .is_some_and(|id| pushed.insert(id.to_string()))
                })
                .cloned()
                .collect()
        };
        if fresh.is_empty() {
            return;
        }
        let lines: Vec<String> = fresh
            .iter()
            .map(|m| {
                format!(
                    "- [{}] `{}`: {}",
                    m["kind"].as_str().unwrap_or("message"),
                    m["key"].as_str().unwrap_or_default(),
                    m["body"].as_str().unwrap_or_default()
                )
            })
            .collect();
        let text = format!(
            "tasklock inbox ({} new; the `inbox` tool marks them read):\n{}",
            fresh.len(),
            lines.join("\n")
        );
        let param = LoggingMessageNotificationParam::new(
            LoggingLevel::Notice,
            json!({ "message": text, "agent": me.id, "messages": fresh }),
        )
        .with_logger("tasklock");
        if peer.notify_logging_message(param).await.is_err() {
            // The client is gone; the transport's end takes care of the rest.
        }
    }
}

fn level_rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// `claude-code`, `codex-mcp-client`: a client's name as a piece of an agent id.
fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s: String = s
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
        .chars()
        .take(32)
        .collect();
    if s.is_empty() { "client".into() } else { s }
}

/// 8 random hex digits (the system's generator).
fn random_hex() -> String {
    crate::os::random_hex().unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{:08x}", t ^ std::process::id())
    })
}

fn internal(message: &str) -> Called {
    Called {
        exit_code: EXIT_ERROR,
        markdown: crate::render::error_line(message),
        json: crate::render::error_json("internal", message, None, EXIT_ERROR),
        error_kind: Some("internal".into()),
    }
}

fn usage(message: &str) -> Called {
    Called {
        exit_code: EXIT_USAGE,
        markdown: crate::render::error_line(message),
        json: crate::render::error_json("usage", message, None, EXIT_USAGE),
        error_kind: Some("usage".into()),
    }
}

/// What a report's non-zero exit code means, for `error_kind`.
fn kind_of(code: i32) -> &'static str {
    match code {
        2 => "conflict",
        3 => "no_such_checkout",
        4 => "not_holder",
        5 => "deadlock",
        64 => "usage",
        _ => "error",
    }
}

/// The `_meta` key of a tool result that carries the CLI's `--json` object.
pub const JSON_META: &str = "tasklock/json";

/// The tool result: the CLI's markdown as its only content, for the model; the CLI's JSON
/// object, with `exit_code` (and for a non-zero exit `error_kind`, with `isError`), in
/// `_meta["tasklock/json"]`, for programs.
///
/// Not `structuredContent`: the MCP specification makes it the same result as the content
/// (a tool that returns it "SHOULD also return the serialized JSON in a TextContent
/// block"), so clients give the model one or the other, and Claude Code 2.1.330 and Codex
/// 0.169 give it the structured content when there is one. The markdown is what agents
/// are meant to read (a verdict, the facts, what to do next), so it is the only content.
pub fn tool_result(called: Called) -> CallToolResult {
    let Called {
        exit_code,
        markdown,
        json,
        error_kind,
    } = called;
    let mut object = match json {
        Value::Object(map) => map,
        other => {
            let mut m = serde_json::Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    object.insert("exit_code".into(), json!(exit_code));
    if exit_code != 0 {
        let kind = error_kind.unwrap_or_else(|| kind_of(exit_code).to_string());
        object.insert("error_kind".into(), json!(kind));
    }
    let r = if exit_code == 0 {
        CallToolResult::success(vec![ContentBlock::text(markdown)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(markdown)])
    };
    let mut meta = serde_json::Map::new();
    meta.insert(JSON_META.into(), Value::Object(object));
    r.with_meta(Some(rmcp::model::MetaObject(meta)))
}

// ---------------------------------------------------------------------------------------
// The tools
// ---------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CheckoutArgs {
    /// The key to take: a task id, issue URL, `deploy://api-prod`… (any text up to 512
    /// bytes, case-sensitive). Give `key` or `any`, not both.
    #[serde(default)]
    key: Option<String>,
    /// Instead of `key`: several keys in order of preference; you get the first free one
    /// (agents racing for the same list get different keys).
    #[serde(default)]
    any: Option<Vec<String>>,
    /// Instead of `key`: claim the first key of the project's backlog that can be taken
    /// (keys added with `tasklock backlog add`, in order). A conflict result when every
    /// key is claimed; `backlog_empty` when none is left. Release it with `done: true`
    /// when its work is finished.
    #[serde(default)]
    next: bool,
    /// Why you are taking it, shown to other agents.
    #[serde(default)]
    reason: Option<String>,
    /// Lease length such as `30m`, `2h` (default: 30m). This server renews your leases
    /// while your session runs.
    #[serde(default)]
    timeout: Option<String>,
    /// If another agent holds the key, join its queue and return at once (a conflict
    /// result with your place in line); your inbox says when the key is handed to you.
    #[serde(default)]
    queue: bool,
    /// If another agent holds the key, queue and wait up to this many seconds (1 to 90)
    /// for it; a conflict result when the time runs out.
    #[serde(default)]
    #[schemars(range(min = 1, max = 90))]
    wait_seconds: Option<u64>,
    /// Repository files to take with `key`, or alone (then leave out `key`): a file, a
    /// directory tree (`src/parser` covers everything below it) or a glob
    /// (`src/**/*.rs`), relative to the project. Another agent holding paths that share
    /// a file with these makes it a conflict; all are taken or none.
    #[serde(default)]
    paths: Vec<String>,
    /// Let up to this many agents hold `key` at once, each in a slot of its own (a
    /// limit on heavy work, such as 3 builds at a time). Leave it out to keep the
    /// count the key already has.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    slots: Option<u32>,
    /// Once `key` is yours, make a git worktree to work in, on a branch of its own
    /// (`tasklock/<key>`), at `.worktrees/<key>` in the repository; the result names it.
    /// Its release removes it only when that loses nothing (no uncommitted change, every
    /// commit also on another branch or a remote); otherwise it is kept and the release
    /// says why.
    #[serde(default)]
    worktree: bool,
    /// Where to make that worktree instead (implies `worktree`), relative to the project.
    #[serde(default)]
    worktree_path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReleaseArgs {
    /// The keys to release.
    #[serde(default)]
    keys: Vec<String>,
    /// Release everything you hold instead.
    #[serde(default)]
    all: bool,
    /// A one-line note for the audit log and the next holder (what is done, what is not).
    #[serde(default)]
    note: Option<String>,
    /// The work is finished: also take the keys out of the project's backlog (without
    /// it, a key claimed with `next` goes back to the backlog for another agent).
    #[serde(default)]
    done: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RenewArgs {
    /// The keys to renew.
    #[serde(default)]
    keys: Vec<String>,
    /// Renew everything you hold instead.
    #[serde(default)]
    all: bool,
    /// New lease length from now, such as `1h` (default: the lease keeps its own length).
    #[serde(default)]
    timeout: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KeyArgs {
    /// The key.
    key: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Only your own checkouts.
    #[serde(default)]
    mine: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoteArgs {
    /// A key you hold.
    key: String,
    /// The checkpoint, one line.
    text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct VerifyArgs {
    /// The key.
    key: String,
    /// The fencing token your checkout result gave (`token`).
    token: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GiveArgs {
    /// A key you hold.
    key: String,
    /// The agent id that is to hold it (as `agents` lists it): registered, alive, not
    /// ended.
    to: String,
    /// The receiver's lease from now, such as `1h` (default: the configured lease).
    #[serde(default)]
    timeout: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct InboxArgs {
    /// Leave the messages unread.
    #[serde(default)]
    peek: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AgentsArgs {
    /// Every agent ever registered, not only live and recently ended ones.
    #[serde(default)]
    all: bool,
}

const CONFLICT: &str = "A conflict (an error result starting `Conflict:`; exit_code 2, error_kind `conflict` in its `_meta`) means another agent holds the key (the text names it, since when and until when), or it is reserved for the head of its queue, or frozen: do not work on that task. Pick other work, or queue for it. Never call again in a loop hoping it frees up.";

struct ToolDef {
    name: &'static str,
    description: String,
    schema: Arc<rmcp::model::JsonObject>,
    read_only: bool,
}

/// A tool's input schema, with the doc comments' line breaks made spaces.
fn schema<T: JsonSchema + 'static>() -> Arc<rmcp::model::JsonObject> {
    fn unwrap_lines(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    match v {
                        Value::String(s) if k == "description" => *s = s.replace('\n', " "),
                        _ => unwrap_lines(v),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(unwrap_lines),
            _ => {}
        }
    }
    let raw = rmcp::handler::server::common::schema_for_input::<T>()
        .expect("tool input types are JSON objects");
    let mut v = Value::Object((*raw).clone());
    unwrap_lines(&mut v);
    match v {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("still an object"),
    }
}

fn defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "checkout",
            description: format!(
                "Check out (lock) a task before you start working on it, so that no other agent works on it at the same time. Exactly one agent wins; the winner holds the key under a lease (30m by default, renewed by this server while your session runs) and gets a fencing token. Checking out a key you already hold succeeds and extends the lease. Give `paths` to lock the repository files you will edit, with the key or alone. {CONFLICT} With `queue: true` you join the key's queue and your inbox tells you when it is yours; with `wait_seconds` (at most {MAX_WAIT_SECS}) you wait for it. Exit code 5 (`deadlock`): your own wait would close a wait-for cycle (queueing or waiting, or taking what others wait for while you wait for them); give up one of your keys or leave the queue you wait in. Release the key when you are done."
            ),
            schema: schema::<CheckoutArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "release",
            description: "Release checkouts you hold as soon as your work on them is done or abandoned, so that others can take them (the next agent in the key's queue is told). Give `keys`, or `all: true`; a `note` is kept for the next holder. Exit code 3: nobody holds the key. Exit code 4: another agent holds it; it is not yours to release. A free key you only queued for (reserved for you) and no longer want: releasing it leaves its queue (`all: true` leaves every queue too). Your checkouts are also released when your session ends.".into(),
            schema: schema::<ReleaseArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "renew",
            description: "Extend the lease of checkouts you hold. This server already renews your leases while your session runs, so you rarely need it; use `timeout` to ask for a longer lease. Exit code 4: the lease was lost (another agent has the key now): stop working on that task.".into(),
            schema: schema::<RenewArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "status",
            description: "One key in detail: free or held, by whom, since when, when the lease ends, the fencing token, the queue and recent notes. Read-only.".into(),
            schema: schema::<KeyArgs>(),
            read_only: true,
        },
        ToolDef {
            name: "list",
            description: "The table of active checkouts, all agents' (or only yours with `mine: true`). Read-only: use it to pick work nobody holds.".into(),
            schema: schema::<ListArgs>(),
            read_only: true,
        },
        ToolDef {
            name: "note",
            description: "Append a one-line checkpoint to a key you hold (what is done, what is next); whoever takes the key next sees it. Holder only: exit code 4 otherwise.".into(),
            schema: schema::<NoteArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "give",
            description: "Hand a checkout you hold to another live agent (`to`, its agent id), for example to the agent you started for the task. It gets a new fencing token (yours is no longer valid: stop writing under it) and is told in its inbox. Exit code 3: no such agent, or it is dead or ended. Exit code 4: you do not hold the key. Exit code 2: the key is frozen, or the receiver already holds it. Exit code 5: the receiver waits for something you hold, so the hand-over would close a wait-for cycle.".into(),
            schema: schema::<GiveArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "verify",
            description: "Before an irreversible step (deploy, merge, migration), check that you still hold the key under the fencing token your checkout gave. Success: you do. Exit code 4: you lost it (stale token or another holder): stop. Exit code 3: nobody holds it.".into(),
            schema: schema::<VerifyArgs>(),
            read_only: true,
        },
        ToolDef {
            name: "inbox",
            description: "Your unread notifications: a key you queued for was handed to you, a lease ran out, a checkout was ended on your behalf. Marked read unless `peek: true`. Look after queueing, and when told you have messages.".into(),
            schema: schema::<InboxArgs>(),
            read_only: false,
        },
        ToolDef {
            name: "agents",
            description: "The table of known agents: alive, stalled or dead, last heartbeat, and what each holds. Read-only.".into(),
            schema: schema::<AgentsArgs>(),
            read_only: true,
        },
        ToolDef {
            name: "why",
            description: "Explain in plain words why a key can or cannot be checked out now (held, queued, frozen, lease ending, holder dead) and what to do about it. Read-only: use it instead of retrying a checkout.".into(),
            schema: schema::<KeyArgs>(),
            read_only: true,
        },
    ]
}

/// The tools this server offers (for `tools/list`, and the snapshot of what a model reads).
pub fn tools() -> Vec<Tool> {
    defs()
        .into_iter()
        .map(|d| {
            Tool::new(d.name, d.description, d.schema)
                .with_annotations(ToolAnnotations::new().read_only(d.read_only))
        })
        .collect()
}

/// An option with its value in one word, `--name=VALUE`: a value that begins with `-`
/// (any text of the caller's) stays the value. Every key goes after `--`.
fn opt(name: &str, value: &str) -> String {
    format!("{name}={value}")
}

fn parse<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| format!("bad arguments: {e}"))
}

/// The command line (after the global options) for a tool call; `None` for an unknown
/// tool; `Err` for arguments the tool does not take.
fn command(tool: &str, args: Value) -> Option<Result<Vec<String>, String>> {
    let s = |v: &str| v.to_string();
    let flag = |v: &mut Vec<String>, on: bool, name: &str| {
        if on {
            v.push(s(name));
        }
    };
    Some(match tool {
        "checkout" => parse(args).and_then(checkout_command),
        "release" => parse(args).and_then(|a: ReleaseArgs| {
            let mut extra: Vec<String> =
                a.note.map(|n| vec![opt("--note", &n)]).unwrap_or_default();
            flag(&mut extra, a.done, "--done");
            keys_command(tool, extra, a.keys, a.all)
        }),
        "renew" => parse(args).and_then(|a: RenewArgs| {
            let extra = a.timeout.map(|t| vec![opt("--timeout", &t)]);
            keys_command(tool, extra.unwrap_or_default(), a.keys, a.all)
        }),
        "status" | "why" => parse(args).map(|a: KeyArgs| vec![s(tool), s("--"), a.key]),
        "list" => parse(args).map(|a: ListArgs| {
            let mut v = vec![s("list")];
            flag(&mut v, a.mine, "--mine");
            v
        }),
        "note" => parse(args).map(|a: NoteArgs| vec![s("note"), s("--"), a.key, a.text]),
        "give" => parse(args).map(|a: GiveArgs| {
            let mut v = vec![s("give"), opt("--to", &a.to)];
            if let Some(t) = a.timeout {
                v.push(opt("--timeout", &t));
            }
            v.extend([s("--"), a.key]);
            v
        }),
        "verify" => parse(args).map(|a: VerifyArgs| {
            vec![
                s("verify"),
                opt("--token", &a.token.to_string()),
                s("--"),
                a.key,
            ]
        }),
        "inbox" => parse(args).map(|a: InboxArgs| {
            let mut v = vec![s("inbox")];
            flag(&mut v, a.peek, "--peek");
            v
        }),
        "agents" => parse(args).map(|a: AgentsArgs| {
            let mut v = vec![s("agents")];
            flag(&mut v, a.all, "--all");
            v
        }),
        _ => return None,
    })
}

/// `release` and `renew`: their options, then `--all` or the keys.
fn keys_command(
    tool: &str,
    extra: Vec<String>,
    keys: Vec<String>,
    all: bool,
) -> Result<Vec<String>, String> {
    let mut v = vec![tool.to_string()];
    v.extend(extra);
    match (all, keys.is_empty()) {
        (true, true) => v.push("--all".into()),
        (false, false) => {
            v.push("--".into());
            v.extend(keys);
        }
        (true, false) => return Err("give `keys` or `all: true`, not both".into()),
        (false, true) => return Err("give `keys`, or `all: true`".into()),
    }
    Ok(v)
}

/// The `checkout` tool: one key, paths, `any` of a list, or `next` from the backlog.
fn checkout_command(a: CheckoutArgs) -> Result<Vec<String>, String> {
    let s = |v: &str| v.to_string();
    let mut v = vec![s("checkout")];
    if let Some(r) = a.reason {
        v.push(opt("--reason", &r));
    }
    if let Some(t) = a.timeout {
        v.push(opt("--timeout", &t));
    }
    if a.queue {
        v.push(s("--queue"));
    }
    if let Some(w) = a.wait_seconds {
        if !(1..=MAX_WAIT_SECS).contains(&w) {
            return Err(format!(
                "wait_seconds must be between 1 and {MAX_WAIT_SECS}; to wait longer, queue (`queue: true`) and look at your inbox later"
            ));
        }
        v.push(opt("--wait", &format!("{w}s")));
    }
    for p in &a.paths {
        v.push(opt("--path", p));
    }
    if let Some(n) = a.slots {
        v.push(opt("--slots", &n.to_string()));
    }
    if a.worktree || a.worktree_path.is_some() {
        if a.key.is_none() || a.next || a.any.is_some() || a.queue || a.slots.is_some() {
            return Err(
                "`worktree` goes with one `key`, and takes no `next`, `any`, `queue` or `slots`"
                    .into(),
            );
        }
        v.push(match &a.worktree_path {
            Some(p) => opt("--worktree", p),
            None => s("--worktree"),
        });
    }
    if a.next {
        if a.key.is_some() || a.any.is_some() || !a.paths.is_empty() {
            return Err("`next` claims from the backlog: give no `key`, `any` or `paths`".into());
        }
        if a.queue || a.wait_seconds.is_some() || a.slots.is_some() {
            return Err("`next` takes no `queue`, `wait_seconds` or `slots`".into());
        }
        v.push(s("--next"));
        return Ok(v);
    }
    match (a.key, a.any) {
        (Some(k), None) => v.extend([s("--"), k]),
        (None, None) if !a.paths.is_empty() => {}
        (_, Some(_)) if !a.paths.is_empty() => {
            return Err("`any` takes no `paths`".into());
        }
        (None, Some(keys)) if !keys.is_empty() => {
            if a.queue || a.wait_seconds.is_some() {
                return Err("`any` takes no `queue` or `wait_seconds`".into());
            }
            v.push(s("--any"));
            v.push(s("--"));
            v.extend(keys);
        }
        (Some(_), Some(_)) => return Err("give `key` or `any`, not both".into()),
        _ => {
            return Err("give `key` (one key), `paths`, or `any` (a list of keys)".into());
        }
    }
    Ok(v)
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("tasklock", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "tasklock: atomic task checkouts between agents working side by side. Check a task out (`checkout`) before working on it; a conflict (an error result starting `Conflict:`) means another agent holds it: pick other work or queue, never retry in a loop. Release it when done. Your checkouts are renewed while this session runs and released when it ends.",
        )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        self.start(&context).await;
        self.negotiate_initialize(&request)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.0.level.lock().unwrap_or_else(|e| e.into_inner()) = request.level;
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.start(&context).await;
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let me = self.start(&context).await;
        let me = self.adopt(me).await;
        let args = Value::Object(request.arguments.unwrap_or_default());
        let called = match command(&request.name, args) {
            None => {
                return Err(McpError::invalid_params(
                    format!("no tool named {:?}", request.name),
                    None,
                ));
            }
            Some(Err(message)) => usage(&message),
            Some(Ok(cmd)) => self.run(&me, cmd).await,
        };
        Ok(tool_result(called).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_put_keys_after_a_double_dash() {
        let c = command("checkout", json!({"key": "-x", "wait_seconds": 5})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--wait=5s", "--", "-x"]);
        let c = command("checkout", json!({"paths": ["src/a", "-b"]})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--path=src/a", "--path=-b"]);
        let c = command("checkout", json!({"key": "k", "paths": ["src/a"]})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--path=src/a", "--", "k"]);
        assert!(
            command("checkout", json!({"any": ["a"], "paths": ["src/a"]}))
                .unwrap()
                .is_err()
        );
        let c = command("checkout", json!({"key": "build", "slots": 3})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--slots=3", "--", "build"]);
        let c = command("checkout", json!({"key": "-k", "worktree": true})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--worktree", "--", "-k"]);
        let c = command("checkout", json!({"key": "k", "worktree_path": "-w"})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--worktree=-w", "--", "k"]);
        for bad in [
            json!({"next": true, "worktree": true}),
            json!({"any": ["a"], "worktree": true}),
            json!({"key": "k", "queue": true, "worktree": true}),
            json!({"paths": ["src"], "worktree_path": "w"}),
        ] {
            assert!(command("checkout", bad.clone()).unwrap().is_err(), "{bad}");
        }
        let c = command("checkout", json!({"any": ["a", "b"]})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--any", "--", "a", "b"]);
        assert!(
            command("checkout", json!({"key": "a", "wait_seconds": 91}))
                .unwrap()
                .is_err()
        );
        assert!(
            command("checkout", json!({"key": "a", "bogus": 1}))
                .unwrap()
                .is_err()
        );
        assert!(command("nope", json!({})).is_none());
        let c = command("give", json!({"key": "-k", "to": "worker-1"})).unwrap();
        assert_eq!(c.unwrap(), ["give", "--to=worker-1", "--", "-k"]);
        let c = command("give", json!({"key": "k", "to": "w", "timeout": "1h"})).unwrap();
        assert_eq!(c.unwrap(), ["give", "--to=w", "--timeout=1h", "--", "k"]);
        assert!(command("give", json!({"key": "k"})).unwrap().is_err());
        let c = command("release", json!({"all": true, "note": "done"})).unwrap();
        assert_eq!(c.unwrap(), ["release", "--note=done", "--all"]);
        let c = command("release", json!({"keys": ["t1"], "done": true})).unwrap();
        assert_eq!(c.unwrap(), ["release", "--done", "--", "t1"]);
        let c = command("checkout", json!({"next": true, "reason": "r"})).unwrap();
        assert_eq!(c.unwrap(), ["checkout", "--reason=r", "--next"]);
        assert!(
            command("checkout", json!({"next": true, "key": "a"}))
                .unwrap()
                .is_err()
        );
        assert!(
            command("checkout", json!({"next": true, "queue": true}))
                .unwrap()
                .is_err()
        );
    }

    #[test]
    fn client_names_become_id_pieces() {
        assert_eq!(slug("claude-code"), "claude-code");
        assert_eq!(slug("Codex MCP Client"), "codex-mcp-client");
        assert_eq!(slug("../"), "client");
    }
}

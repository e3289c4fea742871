//! The agent registry (`agents/<encoded id>`), per-key notes (`notes/<encoded key>.jsonl`)
//! and how each key's last checkout ended (`ended/<encoded key>.json`).

use serde::{Deserialize, Serialize};

use crate::clock::Time;

/// What the registry knows about one agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentEntry {
    pub version: u32,
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub boot_id: Option<String>,
    #[serde(default)]
    pub pid_ns: Option<String>,
    /// The agent's long-lived process (for Claude Code: the parent of a hook command).
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub pid_start: Option<u64>,
    pub first_seen: Time,
    #[serde(default)]
    pub last_heartbeat: Option<Time>,
    #[serde(default)]
    pub heartbeats: u64,
    #[serde(default)]
    pub status: Option<String>,
    /// Set when the agent ended (session end, or its watcher saw its process die).
    #[serde(default)]
    pub ended_at: Option<Time>,
    #[serde(default)]
    pub ended_reason: Option<String>,
    /// For a subagent: the agent (session) that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The agent's secret, as a salted hash: heartbeats and the inbox need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::secret::Proof>,
    /// Where the agent's session takes pushed messages (Claude Code's messaging socket),
    /// as its hooks found it; inbox messages are pushed there (docs/wake.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Reach>,
}

/// A session that can be woken (docs/wake.md): Claude Code's per-session messaging socket,
/// or a Codex thread, pushed to through Codex's own `codex queue`. No credential is kept:
/// the socket's owner and mode are its access control, and Codex's queue is a file of the
/// user's `CODEX_HOME`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reach {
    /// How: Claude Code's socket (the default, for entries written before Codex could be
    /// reached) or Codex's queue.
    #[serde(default)]
    pub via: Via,
    /// The Unix socket a Claude Code session listens on; empty for Codex (written all the
    /// same: tasklock versions before `via` need the field).
    #[serde(default)]
    pub socket: String,
    /// The session's id (Claude Code's session id, Codex's thread id): the agent id. A
    /// Claude Code session drops a line naming another session, so a socket path reused
    /// by another session never gets this agent's messages.
    pub session: String,
    /// Codex: the `CODEX_HOME` the session runs with (its queue is there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex_home: Option<String>,
    /// Codex: the native `codex` program the session runs, to run `codex queue` with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// OpenCode: the origin of the server the session runs in (`http://127.0.0.1:PORT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// OpenCode: the session's project directory, which the server routes a request by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}

/// How a session is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// Claude Code's messaging socket.
    #[default]
    ClaudeCode,
    /// Codex's message queue (`codex queue`).
    Codex,
    /// OpenCode's server (`POST /session/:id/prompt_async` on loopback).
    #[serde(rename = "opencode")]
    OpenCode,
    /// A way written by a newer tasklock: not pushed to.
    #[serde(other)]
    Other,
}

impl Via {
    /// As `delivery.via` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::ClaudeCode => "claude-code",
            Via::Codex => "codex",
            Via::OpenCode => "opencode",
            Via::Other => "other",
        }
    }
}

/// One checkpoint in a key's history.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Note {
    pub ts: Time,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    pub text: String,
}

/// How a key's last checkout ended: one small file per key, replaced on every end, so
/// the next holder learns it with one read (never a scan of the audit log).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ended {
    pub version: u32,
    pub key: String,
    /// The holder whose checkout ended.
    pub agent: crate::identity::Agent,
    pub token: u64,
    pub acquired_at: Time,
    pub ended_at: Time,
    pub how: EndHow,
    /// With `agent_death`, when known: `process_gone`, `pid_reused`, `silent` or `ended`.
    #[serde(default)]
    pub cause: Option<String>,
    /// Who ended it, when not the holder itself.
    #[serde(default)]
    pub by: Option<String>,
    /// The `--note` given to the release.
    #[serde(default)]
    pub note: Option<String>,
}

/// How a checkout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndHow {
    /// Its holder released it.
    Released,
    /// Another caller force-released it.
    ForceReleased,
    /// Its lease ran out.
    Timeout,
    /// Its holder was judged dead.
    AgentDeath,
    /// Its holder's session ended.
    SessionEnd,
    /// Its holder, a subagent, stopped.
    SubagentEnd,
    /// A way written by a newer tasklock.
    #[serde(other)]
    Other,
}

//! Who is calling: agent id and name, and facts about the machine it runs on.

use std::io::IsTerminal;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The identity of the calling agent as recorded in a lock record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Agent {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<String>,
    /// The agent's long-lived process, when known (never a short `tasklock` process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// That process's start time in clock ticks since boot (`/proc/PID/stat` field 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// For a subagent: the agent (session) that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The Unix user the agent runs as (absent in records of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UnixUser>,
}

/// A Unix user, as recorded by whoever wrote a record, queue entry or message. In a
/// group-shared lock directory every member can write every file, so this says who
/// tasklock ran as, not a proof.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UnixUser {
    pub name: String,
    pub uid: u32,
}

impl UnixUser {
    /// The user this process runs as (effective uid).
    pub fn current() -> UnixUser {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let name = crate::os::read_text("/etc/passwd")
            .and_then(|text| {
                text.lines().find_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next()?;
                    (f.nth(1)?.parse() == Ok(uid)).then(|| name.to_string())
                })
            })
            .unwrap_or_else(|| format!("uid {uid}"));
        UnixUser { name, uid }
    }

    /// Is this someone other than the user running this process?
    pub fn is_other(&self) -> bool {
        self.uid != euid()
    }
}

/// The effective uid of this process, asked once: `list` labels every holder with it.
fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    // SAFETY: geteuid has no preconditions.
    *EUID.get_or_init(|| unsafe { libc::geteuid() })
}

/// "agent-a (researcher)" or "agent-a", with "user alice" in the parentheses when the
/// agent runs as another Unix user than the caller.
pub fn label(id: &str, name: Option<&str>, user: Option<&UnixUser>) -> String {
    let user = user
        .filter(|u| u.is_other())
        .map(|u| format!("user {}", u.name));
    match (name, user) {
        (Some(n), Some(u)) => format!("{id} ({n}; {u})"),
        (Some(n), None) => format!("{id} ({n})"),
        (None, Some(u)) => format!("{id} ({u})"),
        (None, None) => id.to_string(),
    }
}

/// " (user alice)" when `user` is another Unix user than the caller's, else "".
pub fn other_user_suffix(user: Option<&UnixUser>) -> String {
    match user {
        Some(u) if u.is_other() => format!(" (user {})", u.name),
        _ => String::new(),
    }
}

impl Agent {
    /// The same agent as seen now: newer facts win, known ones are not forgotten.
    pub fn refreshed(&self, newer: &Agent) -> Agent {
        Agent {
            name: newer.name.clone().or_else(|| self.name.clone()),
            pid: newer.pid.or(self.pid),
            pid_start: newer.pid_start.or(self.pid_start),
            parent: newer.parent.clone().or_else(|| self.parent.clone()),
            user: newer.user.clone().or_else(|| self.user.clone()),
            ..newer.clone()
        }
    }

    /// "agent-a (researcher)" or "agent-a"; "agent-a (researcher; user alice)" or
    /// "agent-a (user alice)" when the agent runs as another Unix user than the caller.
    pub fn label(&self) -> String {
        label(&self.id, self.name.as_deref(), self.user.as_ref())
    }
}

/// The variable tasklock's OpenCode plugin sets in every shell command of a session: the
/// session's id.
pub const OPENCODE_SESSION_ENV: &str = "OPENCODE_SESSION_ID";

/// The agent client this process runs under, judged by the variables each sets in the
/// commands it runs: Claude Code `CLAUDECODE` and `CLAUDE_CODE_*`, Codex `CODEX_*` (even
/// when it gives the command a terminal), Gemini CLI `GEMINI_CLI` (its hooks
/// `GEMINI_SESSION_ID`), OpenCode `OPENCODE*`, Cursor's agent `CURSOR_AGENT`. Output is
/// for that agent then, not for a person.
pub fn agent_environment() -> Option<&'static str> {
    std::env::vars_os().find_map(|(name, _)| {
        let n = name.to_string_lossy();
        if n == "CLAUDECODE" || n.starts_with("CLAUDE_CODE_") {
            Some("claude")
        } else if n.starts_with("CODEX_") {
            Some("codex")
        } else if n == "GEMINI_CLI" || n == "GEMINI_SESSION_ID" {
            Some("gemini")
        } else if n.starts_with("OPENCODE") {
            Some("opencode")
        } else if n == "CURSOR_AGENT" {
            Some("cursor")
        } else {
            None
        }
    })
}

/// How the id was found; `doctor` warns about the fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    ClaudeSession,
    CodexThread,
    GeminiSession,
    OpenCodeSession,
    UserAtHost,
}

/// Resolve the agent id: `--agent`, `TASKLOCK_AGENT`, `CLAUDE_CODE_SESSION_ID`,
/// `CODEX_THREAD_ID` (set by the Codex CLI in every command it runs), `GEMINI_SESSION_ID`
/// (set by Gemini CLI in its hooks' environment; its shell commands get `--agent` from the
/// BeforeTool hook instead), `OPENCODE_SESSION_ID` (set by tasklock's OpenCode plugin in
/// every shell command of a session), then `USER@HOSTNAME` only when stdin is a terminal.
pub fn resolve_id(flag: Option<&str>) -> Result<(String, Source)> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (id, source) = if let Some(f) = flag {
        (f.to_string(), Source::Flag)
    } else if let Some(v) = env("TASKLOCK_AGENT") {
        (v, Source::Env)
    } else if let Some(v) = env("CLAUDE_CODE_SESSION_ID") {
        (v, Source::ClaudeSession)
    } else if let Some(v) = env("CODEX_THREAD_ID") {
        (v, Source::CodexThread)
    } else if let Some(v) = env("GEMINI_SESSION_ID") {
        (v, Source::GeminiSession)
    } else if let Some(v) = env(OPENCODE_SESSION_ENV) {
        (v, Source::OpenCodeSession)
    } else if std::io::stdin().is_terminal() {
        let user = env("USER")
            .or_else(|| env("LOGNAME"))
            .unwrap_or_else(|| "user".into());
        (format!("{user}@{}", hostname()), Source::UserAtHost)
    } else {
        return Err(Error::Usage(
            "no agent identity: pass --agent ID, or set TASKLOCK_AGENT (in Claude Code, \
             CLAUDE_CODE_SESSION_ID is used automatically, in Codex CODEX_THREAD_ID, in \
             Gemini CLI's hooks GEMINI_SESSION_ID and in OpenCode OPENCODE_SESSION_ID; \
             `tasklock init` wires up their hooks). Without one, two agents would silently \
             share a lock."
                .into(),
        ));
    };
    validate_label("agent id", &id)?;
    Ok((id, source))
}

pub fn resolve_name(flag: Option<&str>) -> Result<Option<String>> {
    let name = flag
        .map(str::to_string)
        .or_else(|| std::env::var("TASKLOCK_AGENT_NAME").ok())
        .filter(|n| !n.is_empty());
    if let Some(n) = &name {
        validate_label("agent name", n)?;
    }
    Ok(name)
}

fn validate_label(what: &str, s: &str) -> Result<()> {
    if s.trim().is_empty() {
        return Err(Error::Usage(format!(
            "invalid {what}: it must not be blank"
        )));
    }
    if s.len() > 256 {
        return Err(Error::Usage(format!(
            "invalid {what}: longer than 256 bytes"
        )));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::Usage(format!(
            "invalid {what} {s:?}: control characters are not allowed"
        )));
    }
    Ok(())
}

/// The full record of the calling agent.
pub fn current(flag_agent: Option<&str>, flag_name: Option<&str>) -> Result<Agent> {
    let (id, _) = resolve_id(flag_agent)?;
    let name = resolve_name(flag_name)?;
    Ok(Agent {
        id,
        name,
        host: hostname(),
        boot_id: boot_id(),
        pid_ns: pid_namespace(),
        pid: None,
        pid_start: None,
        parent: None,
        user: Some(UnixUser::current()),
    })
}

/// This host's name, read once per process.
pub fn hostname() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(read_hostname).clone()
}

fn read_hostname() -> String {
    if let Some(h) = crate::os::hostname() {
        return h;
    }
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its full length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(s) = std::str::from_utf8(&buf[..end])
            && !s.is_empty()
        {
            return s.to_string();
        }
    }
    "localhost".into()
}

/// This boot's id, read once per process.
pub fn boot_id() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(crate::os::boot_id).clone()
}

/// This process's pid namespace, read once per process (Linux: `pid:[INODE]@START`,
/// see `src/os/linux.rs`; `None` where there are none).
pub fn pid_namespace() -> Option<String> {
    static NS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NS.get_or_init(crate::os::pid_namespace).clone()
}

/// `id` is a subagent of `parent` (`<parent>/<subagent>`).
pub fn is_subagent_of(id: &str, parent: &str) -> bool {
    id.len() > parent.len() + 1 && id.starts_with(parent) && id.as_bytes()[parent.len()] == b'/'
}

/// Is `recorded` (a record's `pid_ns`) this process's pid namespace? A record written by
/// an older version holds the inode alone, compared as it was then.
pub fn same_pid_namespace(recorded: Option<&str>) -> bool {
    let Some(recorded) = recorded else {
        return pid_namespace().is_none();
    };
    let Some(mine) = pid_namespace() else {
        return false;
    };
    if recorded == mine {
        return true;
    }
    !recorded.contains('@') && mine.split('@').next() == Some(recorded)
}

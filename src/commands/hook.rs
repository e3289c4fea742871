//! `tasklock hook EVENT`: the entry point for Claude Code hooks.
//!
//! Hooks must be fast and must never break the agent: any failure is reported on stderr
//! and the hook still exits 0.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde_json::{Value, json};

use super::{Ctx, ReapReason, auto_release, heartbeat, inbox};
use crate::error::{Error, Result};
use crate::report::Report;
use crate::store::{Message, Slot};

pub const EVENTS: [&str; 4] = [
    "session-start",
    "user-prompt-submit",
    "post-tool-use",
    "session-end",
];

/// Run a hook; returns what to print on stdout (Claude Code's hook output JSON).
pub fn run(
    global_dir: Option<PathBuf>,
    agent_flag: Option<String>,
    name_flag: Option<String>,
    event: &str,
) -> Result<Option<String>> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(1 << 20)
        .read_to_end(&mut input)
        .map_err(|e| Error::io("stdin", e))?;
    let payload: Value = if input.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&input)
            .map_err(|e| Error::Usage(format!("hook input is not JSON: {e}")))?
    };
    let session = payload["session_id"].as_str().map(str::to_string);
    let agent = agent_flag
        .or(session)
        .or_else(|| {
            std::env::var("CLAUDE_CODE_SESSION_ID")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .ok_or_else(|| {
            Error::Usage("hook input has no session_id and no agent identity is set".into())
        })?;
    let name = name_flag
        .or_else(|| {
            std::env::var("TASKLOCK_AGENT_NAME")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .or_else(|| Some("claude".into()));
    let dir = match global_dir {
        Some(d) => d,
        None => match std::env::var_os("TASKLOCK_DIR").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => {
                let start = payload["cwd"]
                    .as_str()
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from))
                    .map_or_else(std::env::current_dir, Ok)
                    .map_err(|e| Error::io(".", e))?;
                crate::discover::find_from(&start)
            }
        },
    };
    let ctx = Ctx {
        dir,
        now: crate::clock::now()?,
        agent_flag: Some(agent.clone()),
        name_flag: name,
        cfg: Default::default(),
    };
    match event {
        "session-start" => session_start(&ctx, &agent),
        "post-tool-use" => beat_and_deliver(&ctx, "PostToolUse"),
        "user-prompt-submit" => beat_and_deliver(&ctx, "UserPromptSubmit"),
        "session-end" => session_end(&ctx, &agent).map(|()| None),
        other => Err(Error::Usage(format!(
            "unknown hook event {other:?}; expected one of: {}",
            EVENTS.join(", ")
        ))),
    }
}

fn output(event: &str, context: String) -> Option<String> {
    let v = json!({
        "hookSpecificOutput": { "hookEventName": event, "additionalContext": context }
    });
    Some(format!("{v}\n"))
}

fn session_start(ctx: &Ctx, agent: &str) -> Result<Option<String>> {
    let pid = claude_pid();
    let Report::Heartbeat(beat) = heartbeat::run(ctx, Some("session started".into()), pid)? else {
        unreachable!("heartbeat returns a heartbeat report")
    };
    if let Some(env_file) = std::env::var_os("CLAUDE_ENV_FILE").filter(|f| !f.is_empty()) {
        // Every later Bash call of the session sees the identity, even outside hooks.
        let line = format!(
            "export TASKLOCK_AGENT={}\n",
            crate::error::shell_quote(agent)
        );
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&env_file)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| Error::io(PathBuf::from(&env_file), e))?;
    }
    let mut context = format!(
        "tasklock: this session is agent `{agent}`. Before working on a task, review or deploy, check it out with `tasklock checkout KEY` (exit 2 = another agent holds it: pick other work). "
    );
    if beat.agent.checkouts.is_empty() {
        context.push_str("You hold no checkouts.");
    } else {
        context.push_str(&format!(
            "You hold: {}.",
            beat.agent
                .checkouts
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(text) = deliver(ctx)? {
        context.push('\n');
        context.push_str(&text);
    }
    Ok(output("SessionStart", context))
}

fn beat_and_deliver(ctx: &Ctx, event: &str) -> Result<Option<String>> {
    heartbeat::run(ctx, None, None)?;
    Ok(deliver(ctx)?.and_then(|text| output(event, text)))
}

/// Unread inbox messages as context for the model; marks them read.
fn deliver(ctx: &Ctx) -> Result<Option<String>> {
    let Report::Inbox(r) = inbox::run(ctx, false)? else {
        unreachable!("inbox returns an inbox report")
    };
    if r.messages.is_empty() {
        return Ok(None);
    }
    let lines: Vec<String> = r.messages.iter().map(message_line).collect();
    Ok(Some(format!(
        "tasklock inbox ({} new):\n{}",
        lines.len(),
        lines.join("\n")
    )))
}

fn message_line(m: &Message) -> String {
    format!("- [{}] `{}`: {}", m.kind, m.key, m.body)
}

/// End of session: release everything the session holds and mark the agent ended.
fn session_end(ctx: &Ctx, agent: &str) -> Result<()> {
    let Some(store) = ctx.existing_store()? else {
        return Ok(());
    };
    let guard = store.lock()?;
    for (_, slot) in store.scan()? {
        if let Slot::Held(r) = slot
            && r.held_by(agent)
        {
            auto_release(ctx, &store, &guard, &r, None, ReapReason::SessionEnd)?;
        }
    }
    if let Some(mut entry) = store.read_agent(agent)? {
        entry.ended_at = Some(ctx.now);
        entry.ended_reason = Some("session_end".into());
        store.write_agent(&guard, &entry)?;
    }
    Ok(())
}

/// The Claude Code process: the hook's parent, looking through a shell that ran us.
fn claude_pid() -> Option<u32> {
    // Recent Claude Code versions name their own pid for hooks.
    if let Some(pid) = std::env::var("CLAUDE_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .filter(|&p| p > 1 && crate::liveness::start_time(p).is_some())
    {
        return Some(pid);
    }
    // SAFETY: getppid has no preconditions.
    let mut pid = unsafe { libc::getppid() } as u32;
    for _ in 0..3 {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if !matches!(comm.trim(), "sh" | "bash" | "dash" | "zsh" | "fish" | "ksh") {
            break;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        pid = rest.split_whitespace().nth(1)?.parse().ok()?;
    }
    (pid > 1).then_some(pid)
}

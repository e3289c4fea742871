//! `heartbeat --watch`: beat while a process lives; when it dies, release at once.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Ctx, ReapReason, auto_release, heartbeat};
use crate::error::{Error, Result};
use crate::liveness::{self, Proc};
use crate::report::{Report, WatchReport};
use crate::store::Slot;

/// How often the watched process is checked between beats.
const POLL: Duration = Duration::from_millis(200);

pub fn run(
    ctx: &Ctx,
    status: Option<String>,
    pid: Option<u32>,
    interval: Option<Duration>,
    detach: bool,
) -> Result<Report> {
    let pid = pid.ok_or_else(|| Error::Usage("--watch needs --pid PID".into()))?;
    let start = liveness::start_time(pid)
        .ok_or_else(|| Error::Usage(format!("--pid {pid}: no such process on this host")))?;
    let agent = ctx.agent()?;
    let interval = match interval {
        Some(i) => i,
        None => ctx.config()?.heartbeat_interval,
    };
    if detach {
        // Beat once here, so the pid is on record even if it dies before the watcher
        // starts: then any command that meets its checkouts sees the death.
        heartbeat::run(ctx, status.clone(), Some(pid))?;
        return spawn_detached(ctx, &agent.id, agent.name.as_deref(), status, pid, interval);
    }
    crate::signals::install();
    let mut beats = 0u64;
    let mut status = status;
    loop {
        let beat_ctx = ctx.at_now(&agent.id)?;
        match heartbeat::run(&beat_ctx, status.take(), Some(pid)) {
            Ok(_) => beats += 1,
            // Keep watching through a transient failure; say so where someone may look.
            Err(_) if liveness::start_time(pid) != Some(start) => {}
            Err(e) => eprintln!("tasklock heartbeat --watch: {e}"),
        }
        let next = Instant::now() + interval;
        while Instant::now() < next {
            if crate::signals::received().is_some() {
                return Ok(report(ctx, &agent.id, pid, "stopped", beats, Vec::new()));
            }
            let gone = match liveness::check_process(
                &agent.host,
                agent.boot_id.as_deref(),
                agent.pid_ns.as_deref(),
                pid,
                Some(start),
            ) {
                Proc::Gone | Proc::Reused => true,
                Proc::Running | Proc::Unknown => false,
            };
            if gone {
                let released = release_all(&ctx.at_now(&agent.id)?, &agent.id)?;
                return Ok(report(
                    ctx,
                    &agent.id,
                    pid,
                    "process_exited",
                    beats,
                    released,
                ));
            }
            std::thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
        }
    }
}

fn report(
    ctx: &Ctx,
    agent: &str,
    pid: u32,
    outcome: &'static str,
    beats: u64,
    released: Vec<String>,
) -> Report {
    Report::Watch(WatchReport {
        command: "heartbeat",
        now: ctx.now,
        agent: agent.to_string(),
        pid,
        outcome,
        beats,
        released,
        watcher_pid: None,
    })
}

/// The watched process died: end every checkout of the agent and mark it ended.
fn release_all(ctx: &Ctx, agent_id: &str) -> Result<Vec<String>> {
    let store = ctx.open_store()?;
    let guard = store.lock()?;
    let mut released = Vec::new();
    for (_, slot) in store.scan()? {
        if let Slot::Held(r) = slot
            && r.held_by(agent_id)
        {
            auto_release(ctx, &store, &guard, &r, None, ReapReason::AgentDeath)?;
            released.push(r.key);
        }
    }
    if let Some(mut entry) = store.read_agent(agent_id)? {
        entry.ended_at = Some(ctx.now);
        entry.ended_reason = Some("process_gone".into());
        store.write_agent(&guard, &entry)?;
    }
    Ok(released)
}

/// Start the watcher in its own session with no inherited stdio, so a hook that starts
/// it returns at once and nothing holds the hook's output open.
fn spawn_detached(
    ctx: &Ctx,
    agent: &str,
    name: Option<&str>,
    status: Option<String>,
    pid: u32,
    interval: Duration,
) -> Result<Report> {
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    let mut cmd = Command::new(&exe);
    cmd.arg("--dir")
        .arg(&ctx.dir)
        .args(["--agent", agent, "heartbeat", "--watch", "--pid"])
        .arg(pid.to_string())
        .arg("--interval")
        .arg(format!("{}ms", interval.as_millis()));
    if let Some(n) = name {
        cmd.args(["--name", n]);
    }
    if let Some(s) = status {
        cmd.args(["--status", &s]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| Error::io(&exe, e))?;
    Ok(Report::Watch(WatchReport {
        command: "heartbeat",
        now: ctx.now,
        agent: agent.to_string(),
        pid,
        outcome: "detached",
        beats: 0,
        released: Vec::new(),
        watcher_pid: Some(child.id()),
    }))
}

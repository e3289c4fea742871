//! `heartbeat --watch`: beat while a process lives; when it dies, release at once.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::heartbeat;
use crate::engine::{Ctx, ReapReason};
use crate::error::{Error, Result};
use crate::liveness::{self, Proc};
use crate::report::{Report, WatchReport};

/// How often the watched process is checked between beats.
const POLL: Duration = Duration::from_millis(200);

pub fn run(
    ctx: &Ctx,
    status: Option<String>,
    pid: Option<u32>,
    interval: Option<Duration>,
    detach: bool,
    after_beat: bool,
) -> Result<Report> {
    let mut pid = pid.or_else(crate::os::client_pid).ok_or_else(|| {
        Error::Usage("--watch needs --pid PID: no Claude Code process or parent shell found".into())
    })?;
    let agent = ctx.agent()?;
    let start = match crate::os::start_time(pid) {
        Some(start) => start,
        // Started by --detach, which checked the process and recorded it: it died
        // before this watcher got going, so do at once what the watcher is for.
        None if after_beat => match died(ctx, &agent, pid, None, 0, &mut Vec::new())? {
            Died::Follow(next, next_start) => {
                pid = next;
                next_start
            }
            Died::Ended(report) => return Ok(*report),
        },
        None => {
            return Err(Error::Usage(format!(
                "--pid {pid}: no such process on this host"
            )));
        }
    };
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
    // One watcher per agent: a second one (a session resumed, a skill run by hand) leaves
    // the watching to the first.
    let Some(_watching) = watcher_lock(ctx, &agent.id)? else {
        return Ok(report(
            ctx,
            &agent.id,
            pid,
            "already_watched",
            0,
            Vec::new(),
        ));
    };
    crate::signals::install();
    let mut watcher = Watcher {
        ctx,
        agent: &agent,
        pid,
        start,
        beats: 0,
        released: Vec::new(),
    };
    let mut status = status;
    let mut skip_beat = after_beat;
    loop {
        if !std::mem::take(&mut skip_beat)
            && let Some(stopped) = watcher.beat(status.take())?
        {
            return Ok(stopped);
        }
        if let Some(ended) = watcher.watch_until(Instant::now() + interval)? {
            return Ok(ended);
        }
    }
}

/// A watcher's agent, the process it watches and the beats it made.
struct Watcher<'a> {
    ctx: &'a Ctx,
    agent: &'a crate::identity::Agent,
    pid: u32,
    start: u64,
    beats: u64,
    /// Checkouts a beat ended because the agent died (the death seen mid-beat): the
    /// watcher reports them with what it ends itself.
    released: Vec<String>,
}

impl Watcher<'_> {
    /// One beat for the agent; the report to end with when the lock directory is gone.
    fn beat(&mut self, status: Option<String>) -> Result<Option<Report>> {
        let (ctx, id, pid) = (self.ctx, &self.agent.id, self.pid);
        let beat_ctx = ctx.at_now(id)?;
        // Register the watched process only while it is (or nothing is) the agent's
        // process: a beat must not take the registration back from a process the agent
        // registered since.
        let register = match registered(ctx, id) {
            Ok(Some((p, s))) => p == pid && s.is_none_or(|s| s == self.start),
            _ => true,
        };
        let beat = heartbeat::run(&beat_ctx, status, register.then_some(pid));
        if let Ok(r) = &beat {
            self.beats += 1;
            if let Report::Heartbeat(h) = r {
                self.released.extend(h.died.iter().cloned());
            }
        }
        // A beat may end others' checkouts and hand their keys on: push those messages now.
        crate::engine::deliver::flush();
        crate::engine::worktree::flush();
        match beat {
            Ok(_) => {}
            // The lock directory was removed: nothing is left to keep alive.
            Err(_) if !ctx.dir.is_dir() => {
                return Ok(Some(self.report("stopped")));
            }
            // Keep watching through a transient failure; say so where someone may look.
            Err(_) if crate::os::start_time(pid) != Some(self.start) => {}
            Err(e) => eprintln!("tasklock heartbeat --watch: {e}"),
        }
        Ok(None)
    }

    /// Watch the process until `next` (the next beat), following the agent to the
    /// process it registered since when this one dies; the report to end with when the
    /// watching is over (a signal, the agent ended with its process).
    fn watch_until(&mut self, next: Instant) -> Result<Option<Report>> {
        let agent = self.agent;
        while Instant::now() < next {
            if crate::signals::received().is_some() {
                return Ok(Some(self.report("stopped")));
            }
            let gone = match liveness::check_process(
                &agent.host,
                agent.boot_id.as_deref(),
                agent.pid_ns.as_deref(),
                self.pid,
                Some(self.start),
            ) {
                Proc::Gone | Proc::Reused => true,
                Proc::Running | Proc::Unknown => false,
            };
            if gone {
                let (ctx, pid, start, beats) = (self.ctx, self.pid, self.start, self.beats);
                match died(ctx, agent, pid, Some(start), beats, &mut self.released)? {
                    Died::Follow(next, next_start) => {
                        // The agent lives on in the process it registered since: watch
                        // that one now, so its death still ends the agent at once.
                        self.pid = next;
                        self.start = next_start;
                    }
                    Died::Ended(report) => return Ok(Some(*report)),
                }
            }
            std::thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
        }
        Ok(None)
    }

    fn report(&self, outcome: &'static str) -> Report {
        report(
            self.ctx,
            &self.agent.id,
            self.pid,
            outcome,
            self.beats,
            Vec::new(),
        )
    }
}

/// What a watcher does when its process is gone.
enum Died {
    /// The agent registered another process since, alive on this host: watch it.
    Follow(u32, u64),
    /// Done: the agent ended with its process (`process_exited`), or lives on in a
    /// process that cannot be watched from here (`superseded`).
    Ended(Box<Report>),
}

/// The watched process is gone. It ends the agent only if it is still the agent's
/// registered process: when the agent registered another process since (a new Claude
/// Code process for the session, `heartbeat --pid` from elsewhere) and that one is
/// alive, the agent lives on and this watcher follows that process, or stops
/// (`superseded`) when it runs where it cannot be checked from here (another host).
/// `released`: what the watcher's beats already ended for the death, reported with
/// what is ended here.
fn died(
    ctx: &Ctx,
    agent: &crate::identity::Agent,
    pid: u32,
    start: Option<u64>,
    beats: u64,
    released: &mut Vec<String>,
) -> Result<Died> {
    let now = ctx.at_now(&agent.id)?;
    if let Some(store) = now.existing_store()?
        && let Some(entry) = store.read_agent(&agent.id)?
        && entry.ended_at.is_none()
        && let Some(other) = entry.pid
    {
        let ours = other == pid && (start.is_none() || entry.pid_start == start);
        if !ours {
            match liveness::check_process(
                &entry.host,
                entry.boot_id.as_deref(),
                entry.pid_ns.as_deref(),
                other,
                entry.pid_start,
            ) {
                Proc::Running => {
                    if let Some(s) = entry.pid_start.or_else(|| crate::os::start_time(other)) {
                        return Ok(Died::Follow(other, s));
                    }
                }
                Proc::Unknown => {
                    return Ok(Died::Ended(Box::new(report(
                        ctx,
                        &agent.id,
                        pid,
                        "superseded",
                        beats,
                        Vec::new(),
                    ))));
                }
                Proc::Gone | Proc::Reused => {}
            }
        }
    }
    released.extend(release_all(&now, &agent.id)?);
    Ok(Died::Ended(Box::new(report(
        ctx,
        &agent.id,
        pid,
        "process_exited",
        beats,
        std::mem::take(released),
    ))))
}

/// The process the agent registered (pid and start time), if any.
fn registered(ctx: &Ctx, agent_id: &str) -> Result<Option<(u32, Option<u64>)>> {
    let Some(store) = ctx.existing_store()? else {
        return Ok(None);
    };
    Ok(store
        .read_agent(agent_id)?
        .and_then(|e| e.pid.map(|p| (p, e.pid_start))))
}

/// An exclusive lock on `watchers/<agent>` for as long as this watcher runs; `None` when
/// another process holds it.
fn watcher_lock(ctx: &Ctx, agent_id: &str) -> Result<Option<crate::store::Held>> {
    ctx.open_store()?.lock_watcher(agent_id)
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

/// The watched process died: end every checkout of the agent and its subagents.
fn release_all(ctx: &Ctx, agent_id: &str) -> Result<Vec<String>> {
    crate::engine::end_agent(ctx, agent_id, true, ReapReason::AgentDeath)
}

/// Start the watcher in its own session with no inherited stdio, so a hook that starts
/// it returns at once and nothing holds the hook's output open.
pub(crate) fn spawn_detached(
    ctx: &Ctx,
    agent: &str,
    name: Option<&str>,
    status: Option<String>,
    pid: u32,
    interval: Duration,
) -> Result<Report> {
    let exe = std::env::current_exe().map_err(|e| Error::io("current executable", e))?;
    let mut cmd = Command::new(&exe);
    // Values joined to their options (`--agent=ID`): an id, name or status that begins
    // with `-` stays the value.
    let mut dir = std::ffi::OsString::from("--dir=");
    dir.push(&ctx.dir);
    cmd.arg(dir)
        .arg(format!("--agent={agent}"))
        .args(["heartbeat", "--watch", "--pid"])
        .arg(pid.to_string())
        .arg("--interval")
        .arg(format!("{}ms", interval.as_millis()))
        .arg("--after-beat");
    if let Some(n) = name {
        cmd.arg(format!("--name={n}"));
    }
    if let Some(s) = status {
        cmd.arg(format!("--status={s}"));
    }
    // The watcher beats as the agent: it needs the agent's secret.
    if let Some(s) = crate::secret::caller() {
        cmd.env(crate::secret::ENV, s);
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

/// `heartbeat --watch`.
pub fn execute(ctx: &Ctx, a: crate::cli::HeartbeatArgs) -> Result<Report> {
    run(ctx, a.status, a.pid, a.interval, a.detach, a.after_beat)
}

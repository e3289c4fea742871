//! Alive, stalled or dead: from heartbeats and, on this host, from the process itself.

use serde::Serialize;

use crate::clock::Time;
use crate::config::Config;
use crate::duration::to_chrono;
use crate::identity::{self, Agent};
use crate::store::AgentEntry;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Alive,
    Stalled,
    Dead,
}

/// Why an agent counts as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Its recorded process no longer exists on this host.
    ProcessGone,
    /// Its recorded pid now belongs to another process (different start time).
    PidReused,
    /// No heartbeat for longer than `dead_after`.
    Silent,
    /// It ended (session end or its watcher saw it die).
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Judgement {
    pub state: State,
    pub cause: Option<Cause>,
}

impl Judgement {
    const ALIVE: Judgement = Judgement {
        state: State::Alive,
        cause: None,
    };

    pub fn dead(&self) -> bool {
        self.state == State::Dead
    }

    fn dead_of(cause: Cause) -> Judgement {
        Judgement {
            state: State::Dead,
            cause: Some(cause),
        }
    }
}

/// What the process table says about a recorded pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    Running,
    Gone,
    Reused,
    /// Not checkable from here (another host, boot or pid namespace).
    Unknown,
}

/// Process checks made, by (pid, recorded start time).
type Seen = std::collections::HashMap<(u32, Option<u64>), Proc>;

thread_local! {
    /// Process checks already made by the current [`Judging`] scope.
    static SEEN: std::cell::RefCell<Option<Seen>> = const { std::cell::RefCell::new(None) };
}

/// While alive, process checks on this thread are remembered, so a command judging many
/// records of the same agents checks each process once. Long-running commands open a new
/// scope for each round, so they always see fresh results.
pub struct Judging(());

impl Judging {
    pub fn begin() -> Judging {
        SEEN.with(|s| *s.borrow_mut() = Some(Default::default()));
        Judging(())
    }

    /// Forget what was seen (after taking the guard, to judge on fresh data).
    pub fn forget(&self) {
        SEEN.with(|s| {
            if let Some(m) = s.borrow_mut().as_mut() {
                m.clear();
            }
        });
    }
}

impl Drop for Judging {
    fn drop(&mut self) {
        SEEN.with(|s| *s.borrow_mut() = None);
    }
}

/// As [`check_process`], remembered within a [`Judging`] scope.
fn check_process_cached(
    host: &str,
    boot: Option<&str>,
    ns: Option<&str>,
    pid: u32,
    start: Option<u64>,
) -> Proc {
    if let Some(p) = SEEN.with(|s| {
        s.borrow()
            .as_ref()
            .and_then(|m| m.get(&(pid, start)).copied())
    }) {
        return p;
    }
    let p = check_process(host, boot, ns, pid, start);
    // Only local results are keyed by pid alone; others are cheap and never cached.
    if p != Proc::Unknown {
        SEEN.with(|s| {
            if let Some(m) = s.borrow_mut().as_mut() {
                m.insert((pid, start), p);
            }
        });
    }
    p
}

/// Is `pid` (started at `start`) still running? Only trusted on the same host, boot and
/// pid namespace; EPERM from `kill(pid, 0)` means it exists.
pub fn check_process(
    agent_host: &str,
    boot: Option<&str>,
    ns: Option<&str>,
    pid: u32,
    start: Option<u64>,
) -> Proc {
    if pid == 0 || pid > i32::MAX as u32 {
        return Proc::Unknown;
    }
    if agent_host != identity::hostname()
        || boot.is_none()
        || boot.map(str::to_string) != identity::boot_id()
        || !identity::same_pid_namespace(ns)
    {
        return Proc::Unknown;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as i32, 0) };
    if rc != 0 {
        let err = std::io::Error::last_os_error().raw_os_error();
        if err != Some(libc::EPERM) {
            return Proc::Gone;
        }
    }
    let info = crate::os::process(pid);
    // A zombie has exited; only its parent has not collected it yet.
    if info.as_ref().is_some_and(|p| p.zombie) {
        return Proc::Gone;
    }
    let now_start = info.and_then(|p| p.start);
    match (start, now_start) {
        (Some(recorded), Some(now)) if crate::os::same_start(recorded, now) == Some(false) => {
            Proc::Reused
        }
        (Some(_), None) if rc == 0 => Proc::Gone,
        _ => Proc::Running,
    }
}

/// Judge an agent from its registry entry (if any).
/// `entry` with a renewal of one of its checkouts after its last beat counted as a beat:
/// a renewal is a sign of life too, as when checkouts are judged.
pub fn with_renewal(entry: &AgentEntry, renewed: Option<&Time>) -> AgentEntry {
    let mut judged = entry.clone();
    if let (Some(beat), Some(r)) = (judged.last_heartbeat, renewed)
        && *r > beat
    {
        judged.last_heartbeat = Some(*r);
    }
    judged
}

/// The last time an agent was heard of: its last beat, its end, or its first beat.
pub fn last_sign(e: &AgentEntry) -> Time {
    [e.last_heartbeat, e.ended_at]
        .into_iter()
        .flatten()
        .fold(e.first_seen, Time::max)
}

pub fn judge_entry(entry: &AgentEntry, now: &Time, cfg: &Config) -> Judgement {
    judge_entry_with(entry, now, cfg, false)
}

/// As [`judge_entry`]; `running` says a process of the agent was already seen running
/// here, which rules out death by silence as well.
fn judge_entry_with(entry: &AgentEntry, now: &Time, cfg: &Config, running: bool) -> Judgement {
    if entry.ended_at.is_some() {
        return Judgement::dead_of(Cause::Ended);
    }
    let running = match entry_process(entry) {
        Err(dead) => return dead,
        Ok(seen) => running || seen,
    };
    let Some(last) = entry.last_heartbeat else {
        // Never beat: judged by its leases alone.
        return Judgement::ALIVE;
    };
    let silent = *now - last;
    // Silence kills only where the process cannot be checked: an agent whose process is
    // seen running is waiting (for its user, a long command, a long model turn), at most
    // stalled.
    if silent >= to_chrono(cfg.dead_after) && !running {
        Judgement::dead_of(Cause::Silent)
    } else if silent >= to_chrono(cfg.stalled_after) {
        Judgement {
            state: State::Stalled,
            cause: None,
        }
    } else {
        Judgement::ALIVE
    }
}

/// A recorded process: `Err` (dead) when it is gone or its pid was reused, `Ok(true)`
/// when it is seen running here, `Ok(false)` when there is none or it cannot be checked.
fn process(
    host: &str,
    boot: Option<&str>,
    ns: Option<&str>,
    pid: Option<u32>,
    start: Option<u64>,
) -> Result<bool, Judgement> {
    let Some(pid) = pid else { return Ok(false) };
    match check_process_cached(host, boot, ns, pid, start) {
        Proc::Gone => Err(Judgement::dead_of(Cause::ProcessGone)),
        Proc::Reused => Err(Judgement::dead_of(Cause::PidReused)),
        Proc::Running => Ok(true),
        Proc::Unknown => Ok(false),
    }
}

/// Judge the holder of a record: its own recorded process (a `run` or an agent that
/// registered a pid), then its registry entry.
pub fn judge_holder(
    agent: &Agent,
    entry: Option<&AgentEntry>,
    now: &Time,
    cfg: &Config,
) -> Judgement {
    let running = match agent_process(agent) {
        Err(dead) => return dead,
        Ok(seen) => seen,
    };
    match entry {
        Some(e) => judge_entry_with(e, now, cfg, running),
        None => Judgement::ALIVE,
    }
}

/// As [`judge_holder`], counting the record's last renewal as a sign of life too: an
/// agent that renews but never beats again is not silent.
pub fn judge_record(
    record: &crate::store::Record,
    entry: Option<&AgentEntry>,
    now: &Time,
    cfg: &Config,
) -> Judgement {
    let entry = entry.map(|e| {
        let mut e = e.clone();
        if e.last_heartbeat.is_some_and(|t| t < record.renewed_at) {
            e.last_heartbeat = Some(record.renewed_at);
        }
        e
    });
    judge_holder(&record.agent, entry.as_ref(), now, cfg)
}

/// Is `agent` dead for a cause that asking cannot answer: the process recorded with its
/// checkout gone (or its pid reused), its agent ended, or its registered process gone?
/// [`judge_holder`] without silence, which needs no threshold (and no settings).
pub fn gone_for_good(agent: &Agent, entry: Option<&AgentEntry>) -> Option<Cause> {
    if let Err(dead) = agent_process(agent) {
        return dead.cause;
    }
    let e = entry?;
    if e.ended_at.is_some() {
        return Some(Cause::Ended);
    }
    entry_process(e).err().and_then(|dead| dead.cause)
}

/// Is the agent's registered process gone (or its pid reused)?
pub fn registered_gone(e: &AgentEntry) -> bool {
    entry_process(e).is_err()
}

/// [`process`] of the one recorded with a checkout.
fn agent_process(agent: &Agent) -> Result<bool, Judgement> {
    process(
        &agent.host,
        agent.boot_id.as_deref(),
        agent.pid_ns.as_deref(),
        agent.pid,
        agent.pid_start,
    )
}

/// [`process`] of the one an agent registered.
fn entry_process(e: &AgentEntry) -> Result<bool, Judgement> {
    process(
        &e.host,
        e.boot_id.as_deref(),
        e.pid_ns.as_deref(),
        e.pid,
        e.pid_start,
    )
}

/// Is a waiter gone: its waiting process died, or its agent is dead? A dead agent holds
/// nothing, a place in line and a reservation included.
pub fn waiter_gone(
    store: &dyn crate::store::Store,
    w: &crate::store::Waiter,
    now: &Time,
    cfg: &Config,
) -> crate::error::Result<bool> {
    if let Some(pid) = w.pid {
        match check_process(
            &w.host,
            w.boot_id.as_deref(),
            w.pid_ns.as_deref(),
            pid,
            w.pid_start,
        ) {
            Proc::Gone | Proc::Reused => return Ok(true),
            Proc::Running => {
                // A blocked --wait cannot beat, so silence proves nothing; but an agent
                // whose own process is gone, or that ended, must never be handed the key
                // through an orphaned wait.
                return Ok(store.read_agent(&w.agent)?.is_some_and(|e| {
                    e.ended_at.is_some()
                        || e.pid.is_some_and(|p| {
                            matches!(
                                check_process(
                                    &e.host,
                                    e.boot_id.as_deref(),
                                    e.pid_ns.as_deref(),
                                    p,
                                    e.pid_start,
                                ),
                                Proc::Gone | Proc::Reused
                            )
                        })
                }));
            }
            Proc::Unknown => {}
        }
    }
    match store.read_agent(&w.agent)? {
        Some(mut e) => {
            // Joining (or keeping a place in) a queue is a sign of life too.
            if e.last_heartbeat.is_some_and(|t| t < w.since) {
                e.last_heartbeat = Some(w.since);
            }
            Ok(judge_entry(&e, now, cfg).dead())
        }
        None => Ok(false),
    }
}

/// Does this process run under the agent's registered process (a hook of its session, or
/// a command the session started: its MCP server, its monitor)? Found by walking up the
/// real parent chain (never from environment variables, which any process can set).
pub fn is_own_process(entry: &AgentEntry) -> bool {
    let (Some(pid), Some(start)) = (entry.pid, entry.pid_start) else {
        return false;
    };
    entry.host == crate::identity::hostname()
        && entry.boot_id == crate::identity::boot_id()
        && crate::os::parent_chain_pid() == Some(pid)
        && crate::os::start_time(pid) == Some(start)
}

//! `run KEY -- CMD…`: check out, run CMD renewing the lease, release when it ends.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use super::{checkout, release, renew};
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::report::{Report, RunReport};

pub fn run(
    ctx: &Ctx,
    key: &str,
    slots: Option<u32>,
    timeout: Option<Duration>,
    reason: Option<String>,
    wait: Option<Option<Duration>>,
    cmd: Vec<OsString>,
) -> Result<Report> {
    let Some((program, args)) = cmd.split_first() else {
        return Err(Error::Usage("run needs a command after `--`".into()));
    };
    let agent = ctx.agent_id()?;
    let granted = take(ctx, key, slots, timeout, reason, wait)?;
    let Report::Checkout(c) = &granted else {
        unreachable!("checkout returns a checkout report")
    };
    let Some(held) = c.checkout.as_ref().filter(|_| c.outcome.exit_code() == 0) else {
        let Report::Checkout(mut denied) = granted else {
            unreachable!()
        };
        denied.command = "run";
        return Ok(Report::Checkout(denied));
    };
    let token = held.token;
    // The agent held the key before: the command runs under that checkout, which `run`
    // did not take and so does not release.
    let kept = c.outcome == crate::error::Outcome::AlreadyHeld;
    let lease = (held.expires_at - held.renewed_at)
        .to_std()
        .unwrap_or(Duration::from_secs(60));
    let ended = |released, code| finish(ctx, key, token, None, false, released, kept, code);

    crate::signals::install();
    if let Some(sig) = crate::signals::received() {
        // Asked to stop before CMD started: do not start it.
        let released = !kept && release_quietly(ctx, &agent, key).unwrap_or(false);
        return Ok(ended(released, 128 + sig));
    }
    let mut child = match start(program, args) {
        Ok(child) => child,
        Err(e) => {
            let released = !kept && release_quietly(ctx, &agent, key).unwrap_or(false);
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!(
                "tasklock run: cannot run {}: {e}",
                program.to_string_lossy()
            );
            return Ok(ended(released, code));
        }
    };

    let lost = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let renewer = renew_while_running(ctx, &agent, key, token, lease, lost.clone(), stop_rx);
    let status = child.wait().map_err(|e| Error::io(program, e))?;
    let _ = stop_tx.send(());
    let _ = renewer.join();
    let cmd_exit = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    let end = ctx.at_now(&agent)?;
    let (released, still_ours) = if kept {
        (false, still_held(&end, &agent, key, token)?)
    } else {
        let released = release_quietly(&end, &agent, key)?;
        (released, released)
    };
    let lost = lost.load(Ordering::SeqCst) || !still_ours;
    if lost {
        eprintln!(
            "tasklock run: the lease on {key} (token {token}) was lost before the command ended."
        );
    }
    let code = if lost && cmd_exit == 0 {
        crate::error::EXIT_NOT_HOLDER
    } else {
        cmd_exit
    };
    Ok(finish(
        ctx,
        key,
        token,
        Some(cmd_exit),
        lost,
        released,
        kept,
        code,
    ))
}

/// `run`'s checkout, waited for with `--wait`. Our own pid is recorded: if this process
/// is killed, the checkout ends at once.
fn take(
    ctx: &Ctx,
    key: &str,
    slots: Option<u32>,
    timeout: Option<Duration>,
    reason: Option<String>,
    wait: Option<Option<Duration>>,
) -> Result<Report> {
    match wait {
        Some(dur) => super::wait::run_for(
            ctx,
            key,
            checkout::Want {
                paths: Vec::new(),
                slots,
                pid: None,
            },
            timeout,
            reason,
            dur,
            true,
        ),
        None => checkout::run_as(ctx, key, slots, timeout, reason, std::process::id()),
    }
}

/// Start CMD, dying with us, and forward the signals we get to it.
fn start(program: &OsString, args: &[OsString]) -> std::io::Result<std::process::Child> {
    let mut command = Command::new(program);
    command.args(args);
    // Without a terminal, CMD gets its own process group so a forwarded signal reaches
    // everything it started. At a terminal it stays in ours, so it can read the terminal
    // and gets Ctrl-C from it directly.
    let interactive = std::io::stdin().is_terminal();
    if !interactive {
        command.process_group(0);
    }
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: die_with_parent makes async-signal-safe calls only; no allocation here.
    unsafe {
        command.pre_exec(move || {
            // Die with us: CMD must not live on unguarded after the key is reaped.
            crate::os::die_with_parent(parent, libc::SIGKILL);
            Ok(())
        });
    }
    let child = command.spawn()?;
    let target = if interactive {
        child.id() as i32
    } else {
        -(child.id() as i32)
    };
    crate::signals::forward_to(target, interactive);
    if let Some(sig) = crate::signals::received() {
        // A signal that came between installing the handler and knowing the child.
        // SAFETY: plain kill of the process (group) we just started.
        unsafe {
            libc::kill(target, sig);
        }
    }
    Ok(child)
}

/// A thread that renews the lease well before it runs out (every third of it) until
/// told to stop; it sets `lost` and stops when the checkout is no longer ours.
fn renew_while_running(
    ctx: &Ctx,
    agent: &str,
    key: &str,
    token: u64,
    lease: Duration,
    lost: Arc<AtomicBool>,
    stop: mpsc::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    let ctx = ctx.clone();
    let (agent, key) = (agent.to_string(), key.to_string());
    let every = (lease / 3).max(Duration::from_millis(200));
    std::thread::spawn(move || {
        let mut warned_frozen = false;
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(every) {
            let Ok(now_ctx) = ctx.at_now(&agent) else {
                continue;
            };
            if !renew_once(&now_ctx, &key, lease, &mut warned_frozen) {
                lost.store(true, Ordering::SeqCst);
                eprintln!(
                    "tasklock run: LEASE LOST on {key} (token {token}) while the command runs; \
                     another agent may take it. Its results must not be trusted as done under the lock."
                );
                return;
            }
        }
    })
}

/// One renewal of `run`'s lease: whether the checkout is still ours.
fn renew_once(ctx: &Ctx, key: &str, lease: Duration, warned_frozen: &mut bool) -> bool {
    match renew::run(ctx, vec![key.to_string()], false, Some(lease)) {
        Ok(Report::Keys(r))
            if r.results
                .first()
                .is_some_and(|k| k.outcome == crate::error::Outcome::Frozen) =>
        {
            // Still ours until the lease ends; a freeze only stops renewals.
            if !*warned_frozen {
                *warned_frozen = true;
                eprintln!(
                    "tasklock run: {key} was frozen while the command runs; the lease can no longer be renewed and ends at its current end."
                );
            }
            true
        }
        Ok(r) => r.exit_code() == 0,
        Err(e) => {
            eprintln!("tasklock run: renewing {key} failed: {e}");
            true
        }
    }
}

/// Does `agent` still hold `key` under `token`, its lease not over?
fn still_held(ctx: &Ctx, agent: &str, key: &str, token: u64) -> Result<bool> {
    let store = ctx.open_store()?;
    Ok(matches!(
        crate::engine::slots::read_mine(&*store, key, agent)?,
        crate::store::Slot::Held(r)
            if r.held_by(agent) && r.token == token && !r.expired_for_holder(&ctx.now)
    ))
}

/// Release KEY if we still hold it; `Ok(false)` when the lease was already gone.
fn release_quietly(ctx: &Ctx, _agent: &str, key: &str) -> Result<bool> {
    let r = release::run(ctx, vec![key.to_string()], false, false, false, None)?;
    Ok(r.exit_code() == 0)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    ctx: &Ctx,
    key: &str,
    token: u64,
    cmd_exit: Option<i32>,
    lease_lost: bool,
    released: bool,
    kept: bool,
    exit_code: i32,
) -> Report {
    Report::Run(RunReport {
        command: "run",
        now: ctx.now,
        key: key.to_string(),
        token,
        cmd_exit,
        lease_lost,
        released,
        kept,
        exit_code,
    })
}

/// `run KEY [--wait [DUR]] -- CMD…`.
pub fn execute(ctx: &Ctx, a: crate::cli::RunArgs) -> Result<Report> {
    let mut keys: Vec<String> = a.key.into_iter().collect();
    let wait = super::wait_or_key(&mut keys, a.wait)?;
    let [key] = keys.as_slice() else {
        return Err(match keys.len() {
            0 => super::missing_key(),
            _ => Error::Usage("run takes one KEY; the command goes after `--`".into()),
        });
    };
    run(ctx, key, a.slots, a.timeout, a.reason, wait, a.cmd)
}

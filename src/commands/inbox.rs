use crate::engine::Ctx;
use crate::error::Result;
use crate::report::{InboxReport, Report};
use crate::store::Message;

/// This agent's unread messages, oldest first; marked read unless `peek`.
pub fn run(ctx: &Ctx, peek: bool) -> Result<Report> {
    let me = ctx.agent_id()?;
    let mut messages = Vec::new();
    if let Some(store) = ctx.existing_store()? {
        // An agent bound to a secret reads its inbox only with it.
        let owner = store.read_agent(&me)?.and_then(|e| e.owner);
        if crate::secret::standing_for(&me, owner.as_ref()).refused() {
            let agent = ctx.agent()?;
            let standing = store.transaction(|g| {
                crate::engine::agent_refused(ctx, &*store, g, &agent, owner.as_ref(), "inbox")
            })?;
            return Err(crate::error::Error::SecretRefused {
                agent: me,
                wrong: standing == Some(crate::secret::Standing::WrongSecret),
            });
        }
        messages = take(&*store, &me, peek)?;
    }
    Ok(report(ctx, me, messages, peek))
}

/// As [`run`] without `peek`, for a hook right after the agent's beat, which has just
/// made the same check of its secret: one read of the registry fewer.
pub fn after_beat(ctx: &Ctx) -> Result<Report> {
    let me = ctx.agent_id()?;
    let messages = match ctx.existing_store()? {
        Some(store) => take(&*store, &me, false)?,
        None => Vec::new(),
    };
    Ok(report(ctx, me, messages, false))
}

/// The unread messages of `me`, marked read unless `peek`.
fn take(store: &dyn crate::store::Store, me: &str, peek: bool) -> Result<Vec<Message>> {
    let mut messages = Vec::new();
    for msg in store.unread(me)? {
        // With two readers at once, each message goes to exactly one of them.
        if peek || store.mark_read(me, &msg.id)? {
            messages.push(msg);
        }
    }
    Ok(messages)
}

fn report(ctx: &Ctx, me: String, messages: Vec<Message>, peek: bool) -> Report {
    Report::Inbox(InboxReport {
        command: "inbox",
        now: ctx.now(),
        agent: me,
        messages,
        marked_read: !peek,
    })
}

/// `inbox [--peek]`.
pub fn execute(ctx: &Ctx, a: crate::cli::InboxArgs) -> Result<Report> {
    run(ctx, a.peek)
}

/// How often `inbox --follow` looks, at the latest, whether its session still runs, for a
/// signal, and for messages whose push failed after it was claimed (a failure is written
/// where the store's change signal does not look).
const ROUND: std::time::Duration = std::time::Duration::from_secs(1);
/// How often `inbox --follow` looks for the agent its session goes on as, once its own
/// agent ended.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_secs(2);
/// How soon `inbox --follow` looks again while a message is left to a push for a moment.
const SOON: std::time::Duration = std::time::Duration::from_millis(100);
/// How long `inbox --follow` waits for the agent's registry entry to accept it (a
/// resumed session's hook registers its new process as the follower starts) before it
/// gives up with the refusal.
const REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// `inbox --follow`: print each message that no push delivered, one line each as it
/// arrives (markdown: the text a push carries, on one line; JSON: the message), claimed
/// first, and recorded as delivered `via: monitor` once its line is written and flushed:
/// at least once, never lost (docs/wake.md). Runs until the session it serves
/// ends (the first ancestor that is not a shell: the Claude Code process for a plugin's
/// monitor), its output is closed, or SIGINT/SIGTERM. `open` makes the command's context;
/// until it can (no lock directory yet), it is tried again each round.
pub fn follow(
    open: &mut dyn FnMut() -> Result<Ctx>,
    format: crate::render::Format,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    crate::signals::install();
    let session = crate::os::parent_chain_pid().map(|p| (p, crate::os::start_time(p)));
    // A killed session's process may wait as a zombie for its parent for a while.
    let session_runs = || {
        session.is_none_or(|(pid, start)| {
            crate::os::process(pid)
                .is_some_and(|p| start.is_some() && p.start == start && !p.zombie)
        })
    };
    let running = || crate::signals::received().is_none() && session_runs();
    let (ctx, store) = loop {
        if !running() {
            return Ok(());
        }
        if let Ok(ctx) = open() {
            ctx.agent_id()?;
            if let Some(store) = ctx.existing_store()? {
                break (ctx, store);
            }
        }
        std::thread::sleep(ROUND);
    };
    let mut me = ctx.agent_id()?;
    let mut changes = store.inbox_changes(&me)?;
    let mut refused_since: Option<std::time::Instant> = None;
    let mut looked_on: Option<std::time::Instant> = None;
    while running() {
        let mut wait = ROUND;
        let owner = store.read_agent(&me)?;
        // The agent ended while its session's process goes on: a Claude Code session
        // cleared with `/clear` goes on under a new session id, which its hooks register.
        if owner.as_ref().is_some_and(|e| e.ended_at.is_some())
            && looked_on.is_none_or(|t| t.elapsed() >= LOOK_AGAIN)
        {
            looked_on = Some(std::time::Instant::now());
            if let Some(next) = successor(&*store, &me, session)? {
                me = next;
                changes = store.inbox_changes(&me)?;
                refused_since = None;
                continue;
            }
        }
        if let Some(entry) = owner.as_ref().filter(|e| e.owner.is_some())
            && crate::liveness::is_own_process(entry)
        {
            crate::secret::prove_as(&me);
        }
        let standing =
            crate::secret::standing_for(&me, owner.as_ref().and_then(|e| e.owner.as_ref()));
        if standing.refused() {
            let since = *refused_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= REFUSED_FOR {
                return Err(crate::error::Error::SecretRefused {
                    agent: me,
                    wrong: standing == crate::secret::Standing::WrongSecret,
                });
            }
        } else {
            refused_since = None;
            let claim = crate::engine::deliver::claim_for_monitor(&*store, &me)?;
            if claim.pending {
                wait = SOON;
            }
            for msg in claim.shown {
                let line = match format {
                    crate::render::Format::Json => serde_json::to_string(&msg).unwrap_or_default(),
                    crate::render::Format::Markdown | crate::render::Format::Table(_) => {
                        crate::clients::wake::line(&msg)
                    }
                };
                // Delivered once written out, not before: killed at any point, the
                // monitor loses no message (one may be shown twice).
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return Ok(()); // the reader went away
                }
                crate::engine::deliver::shown_by_monitor(&*store, &msg)?;
            }
        }
        changes.wait(wait);
    }
    Ok(())
}

/// The live agent, other than `me`, that the session's process (`pid`, with its start
/// time) runs as now: registered with that very process on this host and boot, not a
/// subagent; the one that beat last.
fn successor(
    store: &dyn crate::store::Store,
    me: &str,
    session: Option<(u32, Option<u64>)>,
) -> Result<Option<String>> {
    let Some((pid, Some(start))) = session else {
        return Ok(None);
    };
    let host = crate::identity::hostname();
    let boot = crate::identity::boot_id();
    Ok(store
        .scan_agents()?
        .into_iter()
        .filter(|e| {
            e.id != me
                && e.ended_at.is_none()
                && e.parent.is_none()
                && e.pid == Some(pid)
                && e.pid_start == Some(start)
                && e.host == host
                && e.boot_id == boot
        })
        .max_by_key(|e| e.last_heartbeat)
        .map(|e| e.id))
}

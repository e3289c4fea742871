use super::checkout::check_text;
use crate::duration::to_chrono;
use crate::engine::{Ctx, Judge, Scope, Settled, own_end, reap_in};
use crate::error::{Error, Result};
use crate::identity::Agent;
use crate::liveness;
use crate::report::{AgentRow, EndedCheckout, HeartbeatReport, ReapReason, Report};
use crate::store::{AgentEntry, Event, Record, Slot, Store};

/// One beat: update the registry, renew this agent's leases that are past half-way,
/// and end checkouts of dead agents met on the way.
pub fn run(ctx: &Ctx, status: Option<String>, pid: Option<u32>) -> Result<Report> {
    beat(ctx, status, pid, None)
}

/// As [`run`]; `parent` registers the agent as a subagent of that agent. A beat also
/// renews the leases of the agent's subagents (`<id>/<subagent>`): they run inside its
/// process.
pub fn beat(
    ctx: &Ctx,
    status: Option<String>,
    pid: Option<u32>,
    parent: Option<String>,
) -> Result<Report> {
    if let Some(s) = &status {
        check_text("status", s)?;
    }
    let registered = match pid {
        Some(p) => Some((
            p,
            crate::os::start_time(p).ok_or_else(|| {
                Error::Usage(format!(
                    "--pid {p}: no such process on this host; pass the agent's own long-lived process"
                ))
            })?,
        )),
        None => None,
    };
    let agent = ctx.agent()?;
    let store = ctx.open_store()?;
    let (entry, swept) = register(ctx, &*store, &agent, registered, status, parent)?;
    let mut judge = Judge::new(ctx, &*store);
    let (held, todo) = to_change(ctx, &*store, &mut judge, &entry, swept)?;
    let mut beaten = Beaten {
        held,
        ..Beaten::default()
    };
    if !todo.is_empty() {
        beaten = renew_and_reap(ctx, &*store, &mut judge, &entry, todo, beaten.held)?;
    }
    let cfg = judge.config()?.clone();
    let judgement = liveness::judge_entry(&entry, &ctx.now(), &cfg);
    Ok(Report::Heartbeat(HeartbeatReport {
        command: "heartbeat",
        now: ctx.now(),
        agent: AgentRow::new(&entry, judgement, beaten.held),
        renewed: beaten.renewed,
        lost: beaten.lost,
        died: beaten.died,
        ended: beaten.ended,
        frozen: beaten.frozen,
        swept,
    }))
}

/// The beat itself, under the agent's own lock: the registry entry written (its process,
/// status, parent, secret). Returns the entry and whether this beat sweeps the project.
fn register(
    ctx: &Ctx,
    store: &dyn Store,
    agent: &Agent,
    registered: Option<(u32, u64)>,
    status: Option<String>,
    parent: Option<String>,
) -> Result<(AgentEntry, bool)> {
    // Hashed before the guard: a beat with a secret binds an agent not yet bound.
    let proof = crate::secret::caller()
        .as_deref()
        .map(crate::secret::Proof::of)
        .transpose()?;
    let sweep_every = ctx.config()?.sweep_interval;
    // The agent's own registry entry alone, beside every other agent's beat.
    let own = [crate::engine::agent_lock(&agent.id)];
    let beat = crate::engine::transaction_scoped(store, &own, |guard| {
        // Escalated to the project's scope, the entry's own lock is still needed.
        store.lock_agent(guard, &agent.id, true)?;
        let entry = store.read_agent(&agent.id)?;
        // An agent bound to a secret beats only with it; one that is not yet bound is
        // bound by its first beat with a secret.
        let owner = entry.as_ref().and_then(|e| e.owner.clone());
        if let Some(standing) =
            crate::engine::agent_refused(ctx, store, guard, agent, owner.as_ref(), "heartbeat")?
        {
            return Ok(Err(standing));
        }
        let owner = owner.or_else(|| proof.clone());
        let entry = crate::engine::take::beaten(
            ctx,
            agent,
            entry.as_ref(),
            registered,
            status.clone(),
            parent.clone(),
            owner,
        );
        store.write_agent(guard, &entry)?;
        // Whether this beat looks at the other agents' checkouts too: at most one beat
        // in the project per `sweep_interval` does, so that a fleet's beats cost each
        // what the agent holds, not what the fleet holds.
        let sweep = sweep_every.is_zero() || store.sweep_turn(guard, &ctx.now(), sweep_every)?;
        Ok(Ok((entry, sweep)))
    })?;
    beat.map_err(|s| Error::SecretRefused {
        agent: agent.id.clone(),
        wrong: s == crate::secret::Standing::WrongSecret,
    })
}

/// The keys the agent holds, and the checkouts this beat changes: its own (and its
/// subagents') to renew or end, and, on a sweep, others' that ended. Read outside the
/// guard, so a beat over many checkouts never holds up the others; only the records
/// that need a change are re-read and changed under it.
fn to_change(
    ctx: &Ctx,
    store: &dyn Store,
    judge: &mut Judge,
    entry: &AgentEntry,
    swept: bool,
) -> Result<(Vec<String>, Vec<Record>)> {
    let me = entry.id.as_str();
    let records: Vec<Record> = if swept {
        let all: Vec<Record> = store.scan()?.into_iter().filter_map(Slot::held).collect();
        judge.expect(&all)?;
        all
    } else {
        store.held_by(me, true)?
    };
    let mut held = Vec::new();
    let mut todo = Vec::new();
    for r in records {
        if r.held_by_or_under(me, true) {
            if r.held_by(me) {
                held.push(r.key.clone());
            }
            // A checkout bound to a secret this beat does not prove (a claim made for
            // the session with a secret it was not started with) is not kept alive by
            // it: it ends with its lease.
            let renewable = needs_renewal(&r, &ctx.now())
                && !crate::secret::standing_for(&r.agent.id, r.owner.as_ref()).refused();
            // Judged with the entry just beaten (a subagent's checkout by its own
            // process alone): a beat reads nothing more for it.
            let own_entry = r.held_by(me).then_some(entry);
            if renewable || own_end(&r, own_entry, &ctx.now()).is_some() {
                todo.push(r);
            }
        } else if judge.reap_reason(&r)?.is_some() {
            todo.push(r);
        }
    }
    Ok((held, todo))
}

/// What a beat did to the checkouts.
#[derive(Default)]
struct Beaten {
    held: Vec<String>,
    renewed: Vec<String>,
    lost: Vec<String>,
    /// Of `lost`, those that ended because this agent died.
    died: Vec<String>,
    ended: Vec<EndedCheckout>,
    frozen: Vec<String>,
}

/// Under the guard, each checkout of `todo` judged again: this agent's (and its
/// subagents') lost leases end as timeouts, others' checkouts as they may; what is left
/// of this agent's is renewed.
fn renew_and_reap(
    ctx: &Ctx,
    store: &dyn Store,
    judge: &mut Judge,
    entry: &AgentEntry,
    todo: Vec<Record>,
    held: Vec<String>,
) -> Result<Beaten> {
    let max_hold = to_chrono(judge.config()?.max_hold);
    let me = entry.id.as_str();
    // The keys to renew (and to end), beside changes to other keys; escalated when
    // ending another's checkout has to tell it or hand the key on.
    let mut locks: Vec<String> = todo.iter().map(|r| r.key.clone()).collect();
    locks.push(crate::engine::agent_lock(me));
    crate::engine::transaction_scoped(store, &locks, |guard| {
        // Run again under the project's lock if it escalates: from the start.
        let mut out = Beaten {
            held: held.clone(),
            ..Beaten::default()
        };
        let mine = |r: &Record| r.held_by_or_under(me, true);
        let mut rule = |r: &Record, judge: &mut Judge| {
            if mine(r) {
                // Never revived: someone may already have acted on the lost lease; a
                // checkout whose process is gone is dead for its own agent too.
                let own_entry = r.held_by(me).then_some(entry);
                Ok(own_end(r, own_entry, &ctx.now()))
            } else {
                judge.reap_cause(r)
            }
        };
        let keys = todo.iter().map(Record::id).collect();
        for (_, settled) in reap_in(ctx, store, guard, judge, keys, Some(me), &mut rule)? {
            match settled {
                Settled::Ended { record, reason, .. } if mine(&record) => {
                    out.held.retain(|k| *k != record.key);
                    if reason == ReapReason::AgentDeath {
                        out.died.push(record.key.clone());
                    }
                    out.lost.push(record.key);
                }
                Settled::Ended { record, reason, .. } => out.ended.push(EndedCheckout {
                    key: record.key.clone(),
                    agent: record.agent.id.clone(),
                    token: record.token,
                    reason,
                }),
                Settled::Kept(Slot::Held(r)) if mine(&r) && needs_renewal(&r, &ctx.now()) => {
                    if store.frozen(&r.key, &ctx.now())?.is_some() {
                        out.frozen.push(r.key);
                    } else if let Some(key) =
                        renew(Scope::new(ctx, store, guard), judge, r, max_hold)?
                    {
                        out.renewed.push(key);
                    }
                }
                Settled::Kept(_) => {}
            }
        }
        Ok(out)
    })
}

/// Renew one of the agent's leases under the guard: its key, unless it has reached
/// max_hold. Automatic renewals stop at max_hold after the grant; the holder is told
/// once, when the last one is made.
fn renew(
    scope: Scope,
    judge: &mut Judge,
    r: Record,
    max_hold: chrono::Duration,
) -> Result<Option<String>> {
    let Scope { ctx, store, guard } = scope;
    let cap = r.acquired_at + max_hold;
    if r.expires_at >= cap {
        return Ok(None);
    }
    // Never earlier than the current end, even with a clock far behind.
    let expires_at = (ctx.now() + (r.expires_at - r.renewed_at))
        .max(r.expires_at)
        .min(cap);
    let fresh = Record {
        renewed_at: ctx.now().max(r.acquired_at),
        expires_at,
        ..r
    };
    store.replace(guard, &fresh)?;
    crate::warnings::after_change(
        &format!(
            "`{}` was renewed, but the audit log was not written",
            fresh.key
        ),
        store.audit(guard, &ctx.event(Event::Renew, &fresh)),
    );
    if expires_at == cap {
        let body = format!(
            "held for max_hold ({}) since {}: automatic renewals stop and the lease ends {}; run `tasklock {}` if you are still working on it, else release it",
            crate::duration::format(judge.config()?.max_hold),
            crate::clock::rfc3339(&fresh.acquired_at),
            crate::clock::rfc3339(&cap),
            crate::key::Line::new("renew").arg(&fresh.key).render(&[]),
        );
        crate::warnings::after_change(
            &format!(
                "`{}` was renewed, but the max_hold message was not delivered",
                fresh.key
            ),
            scope
                .notify(
                    &fresh.agent.id,
                    None,
                    crate::store::MessageKind::MaxHold,
                    &fresh.key,
                    &body,
                )
                .map(drop),
        );
    }
    Ok(Some(fresh.key))
}

/// A lease is renewed by a beat once less than half of it is left.
fn needs_renewal(r: &Record, now: &crate::clock::Time) -> bool {
    (r.expires_at - *now) * 2 < r.expires_at - r.renewed_at
}

/// `heartbeat` (without `--watch`).
pub fn execute(ctx: &Ctx, a: crate::cli::HeartbeatArgs) -> Result<Report> {
    run(ctx, a.status, a.pid)
}

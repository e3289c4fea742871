use super::checkout::check_text;
use crate::duration::to_chrono;
use crate::engine::{Ctx, Judge, Settled, own_end, queue, reap_in};
use crate::error::{Error, Result};
use crate::liveness;
use crate::report::{AgentRow, EndedCheckout, HeartbeatReport, ReapReason, Report};
use crate::store::{Record, Slot};

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
    let pid_start = match pid {
        Some(p) => Some(crate::os::start_time(p).ok_or_else(|| {
            Error::Usage(format!(
                "--pid {p}: no such process on this host; pass the agent's own long-lived process"
            ))
        })?),
        None => None,
    };
    let agent = ctx.agent()?;
    let store = ctx.open_store()?;
    // Hashed before the guard: a beat with a secret binds an agent not yet bound.
    let proof = crate::secret::caller()
        .as_deref()
        .map(crate::secret::Proof::of)
        .transpose()?;
    let sweep_every = ctx.config()?.sweep_interval;
    // The agent's own registry entry alone, beside every other agent's beat.
    let own = [crate::engine::agent_lock(&agent.id)];
    let beat = crate::engine::transaction_scoped(&*store, &own, |guard| {
        // Escalated to the project's scope, the entry's own lock is still needed.
        store.lock_agent(guard, &agent.id, true)?;
        let entry = store.read_agent(&agent.id)?;
        // An agent bound to a secret beats only with it; one that is not yet bound is
        // bound by its first beat with a secret.
        let owner = entry.as_ref().and_then(|e| e.owner.clone());
        if let Some(standing) =
            crate::engine::agent_refused(ctx, &*store, guard, &agent, owner.as_ref(), "heartbeat")?
        {
            return Ok(Err(standing));
        }
        let owner = owner.or_else(|| proof.clone());
        let registered = pid.zip(pid_start);
        let entry = crate::engine::take::beaten(
            ctx,
            &agent,
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
        let sweep = sweep_every.is_zero() || store.sweep_turn(guard, &ctx.now, sweep_every)?;
        Ok(Ok((entry, sweep)))
    })?;
    let (entry, swept) = beat.map_err(|s| crate::error::Error::SecretRefused {
        agent: agent.id.clone(),
        wrong: s == crate::secret::Standing::WrongSecret,
    })?;
    let mut judge = Judge::new(ctx, &*store);
    // The reads run outside the guard, so a beat over many checkouts never holds up the
    // others; only the records that need a change are re-read and changed under it.
    let records: Vec<Record> = if swept {
        let all: Vec<Record> = store.scan()?.into_iter().filter_map(Slot::held).collect();
        judge.expect(&all)?;
        all
    } else {
        store.held_by(&agent.id, true)?
    };
    let mut held = Vec::new();
    let mut todo = Vec::new();
    for r in records {
        if r.held_by_or_under(&agent.id, true) {
            if r.held_by(&agent.id) {
                held.push(r.key.clone());
            }
            // A checkout bound to a secret this beat does not prove (a claim made for
            // the session with a secret it was not started with) is not kept alive by
            // it: it ends with its lease.
            let renewable = needs_renewal(&r, &ctx.now)
                && !crate::secret::standing_for(&r.agent.id, r.owner.as_ref()).refused();
            // Judged with the entry just beaten (a subagent's checkout by its own
            // process alone): a beat reads nothing more for it.
            let own_entry = r.held_by(&agent.id).then_some(&entry);
            if renewable || own_end(&r, own_entry, &ctx.now).is_some() {
                todo.push(r);
            }
        } else if judge.reap_reason(&r)?.is_some() {
            todo.push(r);
        }
    }
    let mut renewed = Vec::new();
    let mut lost = Vec::new();
    let mut died = Vec::new();
    let mut ended = Vec::new();
    let mut frozen = Vec::new();
    let max_hold = to_chrono(judge.config()?.max_hold);
    if !todo.is_empty() {
        // The keys to renew (and to end), beside changes to other keys; escalated when
        // ending another's checkout has to tell it or hand the key on.
        let mut locks: Vec<String> = todo.iter().map(|r| r.key.clone()).collect();
        locks.push(crate::engine::agent_lock(&agent.id));
        let held_before = held.clone();
        crate::engine::transaction_scoped(&*store, &locks, |guard| {
            // Run again under the project's lock if it escalates: from the start.
            renewed.clear();
            lost.clear();
            died.clear();
            ended.clear();
            frozen.clear();
            held.clone_from(&held_before);
            // One reaper: this agent's (and its subagents') lost leases end as timeouts,
            // others' checkouts as they may; what is left of this agent's is renewed.
            let me = agent.id.as_str();
            let mine = |r: &Record| r.held_by_or_under(me, true);
            let mut rule = |r: &Record, judge: &mut Judge| {
                if mine(r) {
                    // Never revived: someone may already have acted on the lost lease; a
                    // checkout whose process is gone is dead for its own agent too.
                    let own_entry = r.held_by(me).then_some(&entry);
                    Ok(own_end(r, own_entry, &ctx.now))
                } else {
                    judge.reap_cause(r)
                }
            };
            let keys = todo.iter().map(Record::id).collect();
            for (_, settled) in reap_in(ctx, &*store, guard, &mut judge, keys, Some(me), &mut rule)?
            {
                let r = match settled {
                    Settled::Ended { record, reason, .. } if mine(&record) => {
                        held.retain(|k| *k != record.key);
                        if reason == ReapReason::AgentDeath {
                            died.push(record.key.clone());
                        }
                        lost.push(record.key);
                        continue;
                    }
                    Settled::Ended { record, reason, .. } => {
                        ended.push(EndedCheckout {
                            key: record.key.clone(),
                            agent: record.agent.id.clone(),
                            token: record.token,
                            reason,
                        });
                        continue;
                    }
                    Settled::Kept(Slot::Held(r)) if mine(&r) => r,
                    Settled::Kept(_) => continue,
                };
                if needs_renewal(&r, &ctx.now) {
                    if store.frozen(&r.key, &ctx.now)?.is_some() {
                        frozen.push(r.key);
                        continue;
                    }
                    // Automatic renewals stop at max_hold after the grant; the holder
                    // is told once, when the last one is made.
                    let cap = r.acquired_at + max_hold;
                    if r.expires_at >= cap {
                        continue;
                    }
                    // Never earlier than the current end, even with a clock far behind.
                    let expires_at = (ctx.now + (r.expires_at - r.renewed_at))
                        .max(r.expires_at)
                        .min(cap);
                    let fresh = Record {
                        renewed_at: ctx.now.max(r.acquired_at),
                        expires_at,
                        ..r
                    };
                    store.replace(guard, &fresh)?;
                    crate::warnings::after_change(
                        &format!(
                            "`{}` was renewed, but the audit log was not written",
                            fresh.key
                        ),
                        store.audit(guard, &ctx.event("renew", &fresh)),
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
                            queue::notify(
                                ctx,
                                &*store,
                                guard,
                                &fresh.agent.id,
                                None,
                                crate::store::MessageKind::MaxHold,
                                &fresh.key,
                                &body,
                            )
                            .map(drop),
                        );
                    }
                    renewed.push(fresh.key);
                }
            }
            Ok(())
        })?;
    }
    let cfg = judge.config()?.clone();
    let judgement = liveness::judge_entry(&entry, &ctx.now, &cfg);
    Ok(Report::Heartbeat(HeartbeatReport {
        command: "heartbeat",
        now: ctx.now,
        agent: AgentRow::new(&entry, judgement, held),
        renewed,
        lost,
        died,
        ended,
        frozen,
        swept,
    }))
}

/// A lease is renewed by a beat once less than half of it is left.
fn needs_renewal(r: &Record, now: &crate::clock::Time) -> bool {
    (r.expires_at - *now) * 2 < r.expires_at - r.renewed_at
}

/// `heartbeat` (without `--watch`).
pub fn execute(ctx: &Ctx, a: crate::cli::HeartbeatArgs) -> Result<Report> {
    run(ctx, a.status, a.pid)
}

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::Time;
use crate::engine::{Ctx, Judge, scan_reaping};
use crate::error::Result;
use crate::liveness::{self, State};
use crate::report::{AgentRow, AgentsReport, EndedCheckout, Report};
use crate::store::{AgentEntry, Slot, Store};

/// Without `--all`, dead agents are shown only if their last sign of life is this recent…
pub const RECENT_DEAD_SECS: i64 = 3600;
/// …and at most this many of them, the most recent first.
pub const RECENT_DEAD_MAX: usize = 10;

/// Known agents: the registry, plus holders that never sent a heartbeat and agents known
/// only from their places in queues. Dead agents' checkouts are ended on the way, like every command that meets them, and registry
/// entries of agents dead for longer than `agent_retention` that hold nothing are
/// removed. Without `all`, only live agents, holders and recently dead ones are listed.
pub fn run(ctx: &Ctx, all: bool) -> Result<Report> {
    let mut rows: Vec<(AgentRow, Option<Time>)> = Vec::new();
    let mut ended = Vec::new();
    let mut pruned = 0;
    if let Some(store) = ctx.existing_store()? {
        let by = ctx.agent_id().ok();
        let mut judge = Judge::new(ctx, &*store);
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unregistered: BTreeMap<String, crate::store::Record> = BTreeMap::new();
        // A renewal is a sign of life too, as when checkouts are judged.
        let mut renewed: BTreeMap<String, Time> = BTreeMap::new();
        // Dead agents' checkouts are ended on the way, as every command does.
        let (slots, reaped) = scan_reaping(ctx, &*store, &mut judge, by.as_deref())?;
        for (r, reason) in reaped {
            ended.push(EndedCheckout {
                key: r.key.clone(),
                agent: r.agent.id.clone(),
                token: r.token,
                reason,
            });
        }
        for slot in slots {
            let Slot::Held(r) = slot else { continue };
            held.entry(r.agent.id.clone())
                .or_default()
                .push(r.key.clone());
            let last = renewed.entry(r.agent.id.clone()).or_insert(r.renewed_at);
            *last = (*last).max(r.renewed_at);
            if judge.entry(&r.agent.id)?.is_none() {
                unregistered.entry(r.agent.id.clone()).or_insert(r);
            }
        }
        let cfg = judge.config()?.clone();
        // The queues as the next command to meet them would leave them, as the views
        // show them.
        let queues = crate::engine::fleet::settled(ctx, &*store, |s| s.scan_queues())?;
        let mut places = crate::engine::fleet::places(&queues);
        let mut waits_of = |id: &str| {
            let keys = places
                .remove(id)
                .map(|(keys, _)| keys.into_iter().collect());
            Some(keys.unwrap_or_default())
        };
        let mut stale = Vec::new();
        for entry in store.scan_agents()? {
            let judged = liveness::with_renewal(&entry, renewed.get(&entry.id));
            let j = liveness::judge_entry(&judged, &ctx.now(), &cfg);
            let keys = held.remove(&entry.id).unwrap_or_default();
            if j.dead() && keys.is_empty() && expired(&entry, &ctx.now(), &cfg) {
                stale.push(entry.id.clone());
            }
            let mut row = AgentRow::new(&entry, j, keys);
            row.waiting_for = waits_of(&entry.id);
            rows.push((row, Some(liveness::last_sign(&judged))));
        }
        for (id, keys) in held {
            if let Some(r) = unregistered.get(&id) {
                let mut row = AgentRow::unregistered(r, keys);
                row.waiting_for = waits_of(&id);
                rows.push((row, None));
            }
        }
        // Agents known only from their places in queues.
        for (keys, w) in places.into_values() {
            rows.push((AgentRow::waiting(&w, keys.into_iter().collect()), None));
        }
        if !stale.is_empty() {
            let removed = prune(ctx, &*store, &stale)?;
            pruned = removed.len();
            rows.retain(|(r, _)| !removed.contains(&r.id));
        }
    }
    // Alive, stalled, dead; then the most recent heartbeat first (never: last); then id.
    let rank = |s: State| match s {
        State::Alive => 0,
        State::Stalled => 1,
        State::Dead => 2,
    };
    rows.sort_by(|(a, _), (b, _)| {
        rank(a.state)
            .cmp(&rank(b.state))
            .then_with(|| b.last_heartbeat.cmp(&a.last_heartbeat))
            .then_with(|| a.id.cmp(&b.id))
    });
    let total = rows.len();
    if !all {
        // Dead agents are sorted among themselves by last heartbeat; the window is
        // judged by the last sign of life (an end can come long after the last beat).
        let since = ctx.now() - chrono::Duration::seconds(RECENT_DEAD_SECS);
        let mut dead_shown = 0;
        rows.retain(|(row, sign)| {
            if row.state != State::Dead || !row.checkouts.is_empty() {
                return true;
            }
            let recent = sign.is_some_and(|t| t >= since) && dead_shown < RECENT_DEAD_MAX;
            dead_shown += usize::from(recent);
            recent
        });
    }
    let agents: Vec<AgentRow> = rows.into_iter().map(|(r, _)| r).collect();
    Ok(Report::Agents(AgentsReport {
        command: "agents",
        now: ctx.now(),
        hidden: total - agents.len(),
        pruned,
        agents,
        ended,
    }))
}

/// Heard of last longer than `agent_retention` ago.
fn expired(e: &AgentEntry, now: &Time, cfg: &crate::config::Config) -> bool {
    *now - liveness::last_sign(e) >= crate::duration::to_chrono(cfg.agent_retention)
}

/// Remove the registry entries of `ids` that, judged again under the guard, are still
/// dead past the retention, hold no checkout and wait in no queue (a waiter without an
/// entry would count as alive). Returns the ids removed. When another process holds the
/// guard, nothing is removed: a later `agents` does it, and a listing never waits for it.
fn prune(ctx: &Ctx, store: &dyn Store, ids: &[String]) -> Result<BTreeSet<String>> {
    let Some(guard) = store.try_lock()? else {
        return Ok(BTreeSet::new());
    };
    let cfg = ctx.config()?;
    let mut busy = BTreeSet::new();
    for slot in store.scan()? {
        if let Slot::Held(r) = slot {
            busy.insert(r.agent.id);
        }
    }
    for q in store.scan_queues()? {
        busy.extend(q.waiters.into_iter().map(|w| w.agent));
        busy.extend(q.reservations.into_iter().map(|r| r.agent));
    }
    let mut removed = BTreeSet::new();
    for id in ids {
        if busy.contains(id) {
            continue;
        }
        // An agent beating right now is not dead: left for a later look.
        if !store.lock_agent(&guard, id, false)? {
            continue;
        }
        let Some(entry) = store.read_agent(id)? else {
            continue;
        };
        if liveness::judge_entry(&entry, &ctx.now(), &cfg).dead()
            && expired(&entry, &ctx.now(), &cfg)
        {
            store.remove_agent(&guard, id)?;
            removed.insert(id.clone());
        }
    }
    store.commit(guard)?;
    Ok(removed)
}

/// `agents [--all]`.
pub fn execute(ctx: &Ctx, a: crate::cli::AgentsArgs) -> Result<Report> {
    run(ctx, a.all)
}

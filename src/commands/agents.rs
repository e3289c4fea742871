use std::collections::BTreeMap;

use super::{Ctx, Judge, auto_release};
use crate::error::Result;
use crate::liveness;
use crate::report::{AgentRow, AgentsReport, EndedCheckout, Report};
use crate::store::Slot;

/// Every agent the registry knows, plus holders that never sent a heartbeat. Dead
/// agents' checkouts are ended on the way, like every command that meets them.
pub fn run(ctx: &Ctx) -> Result<Report> {
    let mut rows = Vec::new();
    let mut ended = Vec::new();
    if let Some(store) = ctx.existing_store()? {
        let by = ctx.agent_id().ok();
        let mut judge = Judge::new(ctx, &store);
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unregistered: BTreeMap<String, crate::store::Record> = BTreeMap::new();
        let mut to_end = Vec::new();
        // A renewal is a sign of life too, as when checkouts are judged.
        let mut renewed: BTreeMap<String, crate::clock::Time> = BTreeMap::new();
        for (_, slot) in store.scan()? {
            let Slot::Held(r) = slot else { continue };
            if judge.reap_reason(&r)?.is_some() {
                to_end.push(r);
                continue;
            }
            held.entry(r.agent.id.clone())
                .or_default()
                .push(r.key.clone());
            let last = renewed.entry(r.agent.id.clone()).or_insert(r.renewed_at);
            *last = (*last).max(r.renewed_at);
            if judge.entry(&r.agent.id)?.is_none() {
                unregistered.entry(r.agent.id.clone()).or_insert(r);
            }
        }
        if !to_end.is_empty() {
            let guard = store.lock()?;
            judge.refresh();
            for r in to_end {
                let Slot::Held(again) = store.read(&r.key)? else {
                    continue;
                };
                match judge.reap_reason(&again)? {
                    Some(reason) => {
                        auto_release(ctx, &store, &guard, &again, by.as_deref(), reason)?;
                        ended.push(EndedCheckout {
                            key: again.key.clone(),
                            agent: again.agent.id.clone(),
                            token: again.token,
                            reason,
                        });
                    }
                    None => held
                        .entry(again.agent.id.clone())
                        .or_default()
                        .push(again.key),
                }
            }
        }
        let cfg = judge.config()?.clone();
        for entry in store.scan_agents()? {
            let mut judged = entry.clone();
            if let (Some(beat), Some(r)) = (judged.last_heartbeat, renewed.get(&entry.id))
                && *r > beat
            {
                judged.last_heartbeat = Some(*r);
            }
            let j = liveness::judge_entry(&judged, &ctx.now, &cfg);
            let keys = held.remove(&entry.id).unwrap_or_default();
            rows.push(AgentRow::new(&entry, j, keys));
        }
        for (id, keys) in held {
            if let Some(r) = unregistered.get(&id) {
                rows.push(AgentRow::unregistered(r, keys));
            }
        }
        rows.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(Report::Agents(AgentsReport {
        command: "agents",
        now: ctx.now,
        agents: rows,
        ended,
    }))
}

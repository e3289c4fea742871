//! The fleet as it is now, for the live views (`tasklock top`): every checkout, agent,
//! queue, wait and freeze, read from the store with no scope taken and nothing written,
//! and judged as the commands judge them. Where a command that met a checkout would end
//! it (lease over, holder dead), the view says so (`ending`) instead of ending it:
//! looking must never change what it looks at. Queues are shown as the next command to
//! meet them would leave them (a reservation past its deadline passed on, a waiter that
//! is gone dropped): settled by the engine's own rule on a [`DryRun`], so that nothing is
//! written.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::dry::DryRun;
use super::{Ctx, Judge, queue};
use crate::clock::Time;
use crate::error::Result;
use crate::liveness::{self, Cause, State};
use crate::report::{AgentRow, CheckoutView, QueueView, ReapReason};
use crate::store::{Freeze, Queue, Slot, Store, Waiter};

#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    pub now: Time,
    /// Which store this is (the lock directory's path, or the PostgreSQL project).
    pub store: String,
    /// Every checkout, by key then slot.
    pub checkouts: Vec<FleetCheckout>,
    /// Agents that are alive, stalled, hold something, wait for something, or died in the
    /// last hour: live ones first.
    pub agents: Vec<FleetAgent>,
    /// Keys with a queue or a reservation.
    pub queues: BTreeMap<String, QueueView>,
    /// Who waits for whom, from the engine's waits-for graph: one edge per queued agent
    /// and agent that keeps it waiting (a holder of its key or of paths it asked for, or
    /// the agent a key or such paths are reserved for).
    pub waits: Vec<Wait>,
    /// Agents whose waits go round in a circle (each such circle, as agent ids). Every
    /// change that would close one is refused or announced, so one stands only where an
    /// older version or a hand edit left it.
    pub cycles: Vec<Vec<String>>,
    pub freezes: Vec<Freeze>,
    /// Records the store could not read.
    pub corrupt: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetCheckout {
    #[serde(flatten)]
    pub view: CheckoutView,
    /// The holder as judged now.
    pub holder_state: State,
    /// The program the holder's session runs in, where its hooks said: `claude-code` or
    /// `codex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_client: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_cause: Option<Cause>,
    /// The next command to meet this checkout will end it, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending: Option<ReapReason>,
    /// Agents queued for its key.
    pub queued: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetAgent {
    /// With `waiting_for`: the keys it is queued for (or has reserved for it).
    #[serde(flatten)]
    pub row: AgentRow,
    /// The program its session runs in, where its hooks said: `claude-code`, `codex` or
    /// `opencode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<&'static str>,
}

impl FleetAgent {
    /// The keys it is queued for (or has reserved for it).
    pub fn waiting_for(&self) -> &[String] {
        self.row.waiting_for.as_deref().unwrap_or_default()
    }
}

fn client_of(entry: Option<&crate::store::AgentEntry>) -> Option<&'static str> {
    entry
        .and_then(|e| e.reach.as_ref())
        .map(|r| r.via.as_str())
        .filter(|v| *v != "other")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wait {
    pub waiter: String,
    pub key: String,
    /// The agent in its way: a holder of the key, or the agent it is reserved for.
    pub blocker: String,
}

/// How long a dead agent that holds nothing stays in view.
const DEAD_SHOWN_SECS: i64 = 3600;

/// Read the fleet. Takes no scope and writes nothing.
pub fn snapshot(ctx: &Ctx, store: &dyn Store) -> Result<Fleet> {
    settled(ctx, store, |store| read(ctx, store))
}

/// `f` on `store` with its queues as the next command to meet them would leave them
/// ([`queue::settle_now`], on a [`DryRun`]): nothing is written.
pub fn settled<T>(
    ctx: &Ctx,
    store: &dyn Store,
    f: impl FnOnce(&dyn Store) -> Result<T>,
) -> Result<T> {
    let keys: Vec<String> = store
        .scan_queues()?
        .into_iter()
        .filter(|q| !q.is_empty())
        .map(|q| q.key)
        .collect();
    if keys.is_empty() {
        return f(store);
    }
    DryRun::new(store).run(|dry, guard| {
        for key in &keys {
            queue::settle_now(ctx, dry, guard, key, None)?;
        }
        f(dry)
    })
}

/// Each agent's place in the queues: the keys it waits for (or has reserved), and its
/// first waiter entry.
pub(crate) fn places(queues: &[Queue]) -> BTreeMap<String, (BTreeSet<String>, Waiter)> {
    let mut out: BTreeMap<String, (BTreeSet<String>, Waiter)> = BTreeMap::new();
    for q in queues {
        for w in &q.waiters {
            out.entry(w.agent.clone())
                .or_insert_with(|| (BTreeSet::new(), w.clone()))
                .0
                .insert(q.key.clone());
        }
    }
    out
}

fn read(ctx: &Ctx, store: &dyn Store) -> Result<Fleet> {
    let mut judge = Judge::new(ctx, store);
    let slots = store.scan()?;
    judge.expect(slots.iter().filter_map(Slot::as_held))?;
    let queues_raw = store.scan_queues()?;
    let queues: BTreeMap<String, QueueView> = queues_raw
        .iter()
        .filter(|q| !q.is_empty())
        .map(|q| (q.key.clone(), QueueView::from_queue(q)))
        .collect();
    let held = Held::judge(&mut judge, slots, &queues)?;
    // Waits, from the engine's one waits-for graph (the one every change is checked
    // against): an edge from each waiter to each agent that keeps it waiting.
    let graph = super::waits::Graph::build(ctx, store, None, None)?;
    let waiting_for = places(&queues_raw);
    let waits = graph
        .waits
        .iter()
        .flat_map(|w| {
            w.blockers.iter().filter(|b| **b != w.agent).map(|b| Wait {
                waiter: w.agent.clone(),
                key: w.key.clone(),
                blocker: b.clone(),
            })
        })
        .collect();
    let cycles = cycles(&graph);
    let agents = agents(ctx, store, &mut judge, &held, &waiting_for)?;
    let mut freezes: Vec<_> = store.freezes()?.iter().map(Freeze::public).collect();
    freezes.retain(|f| f.until > ctx.now());
    freezes.sort_by(|a, b| a.pattern.cmp(&b.pattern));
    Ok(Fleet {
        now: ctx.now(),
        store: store.describe(),
        checkouts: held.checkouts,
        agents,
        queues,
        waits,
        cycles,
        freezes,
        corrupt: held.corrupt,
    })
}

/// The checkouts as judged now, and what the agents' rows need of them.
struct Held {
    /// By key, then slot.
    checkouts: Vec<FleetCheckout>,
    corrupt: usize,
    /// Each holder's keys.
    keys: BTreeMap<String, Vec<String>>,
    /// Each holder's latest renewal.
    renewed: BTreeMap<String, Time>,
    /// A checkout of each holder with no registry entry.
    unregistered: BTreeMap<String, crate::store::Record>,
}

impl Held {
    fn judge(
        judge: &mut Judge,
        slots: Vec<Slot>,
        queues: &BTreeMap<String, QueueView>,
    ) -> Result<Held> {
        let mut held = Held {
            checkouts: Vec::new(),
            corrupt: 0,
            keys: BTreeMap::new(),
            renewed: BTreeMap::new(),
            unregistered: BTreeMap::new(),
        };
        for slot in slots {
            let r = match slot {
                Slot::Held(r) => r,
                Slot::Corrupt { .. } => {
                    held.corrupt += 1;
                    continue;
                }
                Slot::Free => continue,
            };
            let j = judge.holder(&r)?;
            let ending = judge.reap_reason(&r)?;
            held.keys
                .entry(r.agent.id.clone())
                .or_default()
                .push(r.key.clone());
            let last = held
                .renewed
                .entry(r.agent.id.clone())
                .or_insert(r.renewed_at);
            *last = (*last).max(r.renewed_at);
            let entry = judge.entry(&r.agent.id)?;
            if entry.is_none() {
                held.unregistered
                    .entry(r.agent.id.clone())
                    .or_insert(r.clone());
            }
            held.checkouts.push(FleetCheckout {
                view: CheckoutView::from(&r),
                holder_state: j.state,
                holder_client: client_of(entry.as_ref()),
                holder_cause: j.cause,
                ending,
                queued: queues.get(&r.key).map_or(0, |q| q.length),
            });
        }
        held.checkouts
            .sort_by(|a, b| (&a.view.key, a.view.slot).cmp(&(&b.view.key, b.view.slot)));
        Ok(held)
    }
}

/// Each cycle of waits once, as its agents, from the smallest id.
fn cycles(graph: &super::waits::Graph) -> Vec<Vec<String>> {
    let mut cycles: BTreeSet<Vec<String>> = BTreeSet::new();
    let agents_waiting: BTreeSet<&str> = graph.waits.iter().map(|w| w.agent.as_str()).collect();
    for a in agents_waiting {
        if let Some(c) = graph.cycle_through(a) {
            let mut ring: Vec<String> = c.iter().step_by(2).cloned().collect();
            ring.pop();
            if let Some(min) = ring
                .iter()
                .enumerate()
                .min_by_key(|(_, x)| *x)
                .map(|(i, _)| i)
            {
                ring.rotate_left(min);
            }
            cycles.insert(ring);
        }
    }
    cycles.into_iter().collect()
}

/// The agents in view: registered ones that are alive, stalled, hold or wait for
/// something, or died lately; then holders with no registry entry. Live ones first.
fn agents(
    ctx: &Ctx,
    store: &dyn Store,
    judge: &mut Judge,
    held: &Held,
    waiting_for: &BTreeMap<String, (BTreeSet<String>, Waiter)>,
) -> Result<Vec<FleetAgent>> {
    let waits_of = |id: &String| -> Vec<String> {
        waiting_for
            .get(id)
            .map(|(keys, _)| keys.iter().cloned().collect())
            .unwrap_or_default()
    };
    let cfg = judge.config()?.clone();
    let mut agents = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in store.scan_agents()? {
        let judged = liveness::with_renewal(&entry, held.renewed.get(&entry.id));
        let j = liveness::judge_entry(&judged, &ctx.now(), &cfg);
        let keys = held.keys.get(&entry.id).cloned().unwrap_or_default();
        let waits_on = waits_of(&entry.id);
        let recent =
            ctx.now() - liveness::last_sign(&judged) < chrono::Duration::seconds(DEAD_SHOWN_SECS);
        if j.dead() && keys.is_empty() && waits_on.is_empty() && !recent {
            continue;
        }
        seen.insert(entry.id.clone());
        let mut row = AgentRow::new(&entry, j, keys);
        row.waiting_for = Some(waits_on);
        agents.push(FleetAgent {
            client: client_of(Some(&entry)),
            row,
        });
    }
    for (id, keys) in &held.keys {
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(r) = held.unregistered.get(id) {
            let mut row = AgentRow::unregistered(r, keys.clone());
            row.waiting_for = Some(waits_of(id));
            agents.push(FleetAgent { client: None, row });
        }
    }
    // Agents known only from their places in queues.
    for (id, (keys, w)) in waiting_for {
        if seen.insert(id.clone()) {
            agents.push(FleetAgent {
                client: None,
                row: AgentRow::waiting(w, keys.iter().cloned().collect()),
            });
        }
    }
    let rank = |s: State| match s {
        State::Alive => 0,
        State::Stalled => 1,
        State::Dead => 2,
    };
    agents.sort_by(|a, b| {
        rank(a.row.state)
            .cmp(&rank(b.row.state))
            .then_with(|| a.row.id.cmp(&b.row.id))
    });
    Ok(agents)
}

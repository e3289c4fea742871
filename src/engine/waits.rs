//! The waits-for graph: who waits for whom, built in one place from the store and
//! consulted by every change that can add a wait (a queue join or re-join, `--wait`, a
//! grant of a key or of paths, a reservation), by `why` and by the outputs.
//!
//! Every place in a queue is a wait: a blocked `--wait` and an agent that queued with
//! `--queue` and went on with other work alike (it has asked for the key, and is served
//! it when its turn comes). A wait is kept by its blockers: the live holder of the key
//! (of every slot, for a key with slots), the agents a free key is reserved for, the live
//! holders of paths that overlap the ones asked for, and the heads of other queues whose
//! reservation holds such paths. A waiter whose reservation stands is not kept from its
//! key, only from paths still in the way. Every blocker must let go for a wait to end,
//! except for a key with slots, where one slot's holder letting go is enough.
//!
//! A change that would close cycles drops passive places on them first (a `--queue`
//! with no blocked `--wait` behind it: [`breaking`]); only a cycle no such drop breaks
//! refuses the change (exit 5).

use std::collections::{HashMap, HashSet};

use super::{Ctx, Judge};
use crate::error::Result;
use crate::paths::PathPattern;
use crate::store::{Guard, Queue, Record, Slot, Store};

/// One agent's wait for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub agent: String,
    pub key: String,
    /// Who keeps it waiting, sorted.
    pub blockers: Vec<String>,
    /// Every blocker must let go (a key and its paths); else one is enough (slots).
    pub all_needed: bool,
    /// A place taken with `--queue` by an agent that went on working, with no blocked
    /// `--wait` process behind it: the cheapest to drop when a change would close a
    /// cycle through it ([`breaking`]).
    pub passive: bool,
}

impl Wait {
    /// Can this wait not end while the agents `in_set` stay where they are?
    fn needs(&self, in_set: impl Fn(&str) -> bool) -> bool {
        if self.all_needed {
            self.blockers.iter().any(|b| in_set(b))
        } else {
            !self.blockers.is_empty() && self.blockers.iter().all(|b| in_set(b))
        }
    }
}

/// A checkout the graph is to see as made: a grant judged before it is written. The
/// taker's place in the key's queue is done with; its record of the key (the paths it
/// held before, when it adds paths) is replaced by this one.
#[derive(Debug, Clone, Copy)]
pub struct Taking<'a> {
    pub agent: &'a str,
    pub key: &'a str,
    pub paths: &'a [String],
}

/// Who waits for whom, as the store shows it now.
#[derive(Debug, Default)]
pub struct Graph {
    /// Sorted by agent, then key.
    pub waits: Vec<Wait>,
}

impl Graph {
    /// The graph of every wait in the store, seen as if `taking` were granted. Under a
    /// guard, a store whose scope may be narrower than the whole project (PostgreSQL's
    /// key scopes) runs the command again under the project's lock: every queue and
    /// holder is judged at once.
    pub fn build(
        ctx: &Ctx,
        store: &dyn Store,
        guard: Option<&Guard>,
        taking: Option<Taking<'_>>,
    ) -> Result<Graph> {
        Graph::build_as(ctx, store, guard, taking, None)
    }

    /// As [`Graph::build`], with `agent`'s wait for `key` (asking for `paths`) in place of
    /// any it has: the graph as it would be if the agent joined the queue, or waited.
    pub fn with_wait(
        ctx: &Ctx,
        store: &dyn Store,
        guard: Option<&Guard>,
        agent: &str,
        key: &str,
        paths: &[String],
    ) -> Result<Graph> {
        Graph::build_as(ctx, store, guard, None, Some((agent, key, paths)))
    }

    /// As [`Graph::build`], with the places in queues `left` (agent, key) seen as left:
    /// no wait and no reservation. How a set of waiters to drop for cycles is weighed
    /// before any of them is taken out.
    pub fn without(
        ctx: &Ctx,
        store: &dyn Store,
        guard: &Guard,
        left: &[(String, String)],
    ) -> Result<Graph> {
        Graph::build_from(ctx, store, Some(guard), None, None, left)
    }

    fn build_as(
        ctx: &Ctx,
        store: &dyn Store,
        guard: Option<&Guard>,
        taking: Option<Taking<'_>>,
        joining: Option<(&str, &str, &[String])>,
    ) -> Result<Graph> {
        Graph::build_from(ctx, store, guard, taking, joining, &[])
    }

    /// As [`Graph::build`], seen with `taking` granted, or with `joining` (agent, key,
    /// paths) waiting, and the places `left` (agent, key) left.
    pub(crate) fn build_from(
        ctx: &Ctx,
        store: &dyn Store,
        guard: Option<&Guard>,
        taking: Option<Taking<'_>>,
        joining: Option<(&str, &str, &[String])>,
        left: &[(String, String)],
    ) -> Result<Graph> {
        if let Some(g) = guard {
            store.whole_project(g)?;
        }
        let mut b = Builder::new(ctx, store, taking)?;
        b.gone.extend(left.iter().cloned());
        let mut waits = Vec::new();
        let mut queues = std::mem::take(&mut b.queues);
        // The joiner's place asks for its new paths: what its reservation, if it has
        // one, holds against others too.
        if let Some((a, k, paths)) = joining
            && let Some(w) = queues
                .iter_mut()
                .filter(|q| q.key == k)
                .flat_map(|q| q.waiters.iter_mut())
                .find(|w| w.agent == a)
        {
            w.paths = paths.to_vec();
        }
        let queues = queues;
        for q in &queues {
            for w in &q.waiters {
                let (a, k) = (w.agent.as_str(), q.key.as_str());
                if b.gone.contains(&(a.to_string(), k.to_string()))
                    || taking.is_some_and(|t| t.agent == a && t.key == k)
                    || joining.is_some_and(|(ja, jk, _)| ja == a && jk == k)
                {
                    continue;
                }
                let mut wait = b.wait(&queues, a, k, &w.paths)?;
                wait.passive = w.pid.is_none();
                waits.push(wait);
            }
        }
        if let Some((a, k, paths)) = joining {
            waits.push(b.wait(&queues, a, k, paths)?);
        }
        let mut graph = Graph { waits };
        graph.sort();
        Ok(graph)
    }

    /// Is `agent`'s place in the queue of `key` a passive one ([`Wait::passive`])?
    pub fn passive(&self, agent: &str, key: &str) -> bool {
        self.waits
            .iter()
            .any(|w| w.agent == agent && w.key == key && w.passive)
    }

    fn sort(&mut self) {
        self.waits
            .sort_by(|a, b| (&a.agent, &a.key).cmp(&(&b.agent, &b.key)));
    }

    /// The cycle `agent`'s wait for `key` is part of, if it is: the wait cannot end
    /// because those it waits for wait, in the end, for `agent` itself. As agent, key,
    /// agent, key, …, starting and ending with `agent`: each agent waits for the key
    /// after it, kept by the agent after that. A wait that leads only into a cycle of
    /// other agents is not part of one ([`Graph::leads_into`]).
    pub fn cycle_of(&self, agent: &str, key: &str) -> Option<Vec<String>> {
        let stuck = self.stuck();
        let w = self
            .waits
            .iter()
            .find(|w| w.agent == agent && w.key == key && w.needs(|b| stuck.contains(b)))?;
        self.back_to(agent, w, &stuck)
    }

    /// A cycle through any wait of `agent`, as [`Graph::cycle_of`] gives it.
    pub fn cycle_through(&self, agent: &str) -> Option<Vec<String>> {
        let stuck = self.stuck();
        self.waits
            .iter()
            .filter(|w| w.agent == agent && w.needs(|b| stuck.contains(b)))
            .find_map(|w| self.back_to(agent, w, &stuck))
    }

    /// The shortest way from `agent`'s wait `first` back to `agent`, through waits that
    /// cannot end and blockers that cannot go on (the first found, in sorted order).
    fn back_to<'g>(
        &'g self,
        agent: &'g str,
        first: &'g Wait,
        stuck: &HashSet<&str>,
    ) -> Option<Vec<String>> {
        // Each agent reached: the agent and key it was reached from.
        let mut from: HashMap<&'g str, (&'g str, &'g str)> = HashMap::new();
        let mut next: std::collections::VecDeque<&'g str> = std::collections::VecDeque::new();
        let step = |w: &'g Wait| {
            w.blockers
                .iter()
                .filter(|b| stuck.contains(b.as_str()))
                .map(move |b| (b.as_str(), w.agent.as_str(), w.key.as_str()))
        };
        let mut found = false;
        let mut pending: Vec<(&'g str, &'g str, &'g str)> = step(first).collect();
        'search: loop {
            for (y, x, k) in pending.drain(..) {
                if from.contains_key(y) {
                    continue;
                }
                from.insert(y, (x, k));
                if y == agent {
                    found = true;
                    break 'search;
                }
                next.push_back(y);
            }
            let Some(x) = next.pop_front() else { break };
            for w in self
                .waits
                .iter()
                .filter(|w| w.agent == x && w.needs(|b| stuck.contains(b)))
            {
                pending.extend(step(w));
            }
        }
        if !found {
            return None;
        }
        let mut out = vec![agent.to_string()];
        let mut at = agent;
        loop {
            let (x, k) = from[at];
            out.push(k.to_string());
            out.push(x.to_string());
            if x == agent {
                break;
            }
            at = x;
        }
        out.reverse();
        Some(out)
    }

    /// The agents that can never go on, whatever anyone outside does: in a cycle of
    /// waits, or waiting (in the end) for one.
    fn stuck(&self) -> HashSet<&str> {
        let mut stuck: HashSet<&str> = self.waits.iter().map(|w| w.agent.as_str()).collect();
        loop {
            let freed: Vec<&str> = stuck
                .iter()
                .copied()
                .filter(|a| {
                    self.waits
                        .iter()
                        .filter(|w| w.agent == *a)
                        .all(|w| !w.needs(|b| stuck.contains(b)))
                })
                .collect();
            if freed.is_empty() {
                return stuck;
            }
            for a in freed {
                stuck.remove(a);
            }
        }
    }

    /// The cycle `agent`'s wait for `key` leads into, when it cannot end because agents
    /// wait for each other further on (a cycle `agent` may or may not be part of), as
    /// agent, key, agent, …, starting and ending with one agent of the cycle.
    pub fn leads_into(&self, agent: &str, key: &str) -> Option<Vec<String>> {
        let stuck = self.stuck();
        let mut w = self
            .waits
            .iter()
            .find(|w| w.agent == agent && w.key == key && w.needs(|b| stuck.contains(b)))?;
        let mut seen: Vec<(String, String)> = vec![(agent.to_string(), key.to_string())];
        loop {
            let next = w.blockers.iter().find(|b| stuck.contains(b.as_str()))?;
            if let Some(i) = seen.iter().position(|(a, _)| a == next) {
                let mut out: Vec<String> = seen[i..]
                    .iter()
                    .flat_map(|(a, k)| [a.clone(), k.clone()])
                    .collect();
                out.push(next.clone());
                return Some(out);
            }
            w = self
                .waits
                .iter()
                .find(|w| w.agent == *next && w.needs(|b| stuck.contains(b)))?;
            seen.push((next.clone(), w.key.clone()));
        }
    }
}

pub use crate::report::Dropped;

/// What a change that adds waits (a grant, a wait joined) does to the cycles of waits.
#[derive(Debug, Default)]
pub struct Breaking {
    /// A cycle the change closes that no passive place breaks: the change is refused.
    pub cycle: Option<Vec<String>>,
    /// The passive places to drop so that the change closes no cycle.
    pub dropped: Vec<Dropped>,
    /// The graph with the change made and those places dropped.
    pub graph: Graph,
}

/// A change judged before it is made: a grant, or a wait joined (agent, key, paths).
pub(crate) type Change<'a> = (Option<Taking<'a>>, Option<Joining<'a>>);

/// A wait joined: agent, key, the paths asked for.
pub(crate) type Joining<'a> = (&'a str, &'a str, &'a [String]);

/// The change (`taking` granted, or `joining` waiting: `request`'s agent and key) and
/// the cycles it would close, as `find` finds them in a graph. Each is broken by
/// dropping a passive place on it ([`Wait::passive`]), the first walked from the
/// requester that is not the request itself; as few as break every one are kept. A
/// cycle that no passive place breaks is the change's own: it is returned, to refuse
/// the change.
pub(crate) fn breaking(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &Guard,
    change: Change<'_>,
    request: (&str, &str),
    find: impl Fn(&Graph) -> Option<Vec<String>>,
) -> Result<Breaking> {
    let (taking, joining) = change;
    let build = |left: &[(String, String)]| {
        Graph::build_from(ctx, store, Some(guard), taking, joining, left)
    };
    let mut left: Vec<(String, String)> = Vec::new();
    // Each round drops one more place of the graph, so this ends.
    let graph = loop {
        let graph = build(&left)?;
        let Some(cycle) = find(&graph) else {
            break graph;
        };
        let passive = places(&cycle).find(|&(a, k)| (a, k) != request && graph.passive(a, k));
        match passive {
            Some((a, k)) => left.push((a.to_string(), k.to_string())),
            None => {
                return Ok(Breaking {
                    cycle: Some(cycle),
                    dropped: Vec::new(),
                    graph,
                });
            }
        }
    };
    let but = |left: &[(String, String)], i: usize| -> Vec<(String, String)> {
        let mut l = left.to_vec();
        l.remove(i);
        l
    };
    // Last dropped first: a place whose cycles all go with the others' stays.
    for i in (0..left.len()).rev() {
        if find(&build(&but(&left, i))?).is_none() {
            left.remove(i);
        }
    }
    let mut dropped = Vec::with_capacity(left.len());
    for i in 0..left.len() {
        let (a, k) = &left[i];
        let without = build(&but(&left, i))?;
        let cycle = find(&without)
            .and_then(|c| from_place(&c, a, k))
            .or_else(|| without.cycle_of(a, k))
            .or_else(|| find(&without));
        if let Some(cycle) = cycle {
            dropped.push(Dropped {
                agent: a.clone(),
                key: k.clone(),
                cycle,
            });
        }
    }
    let graph = if left.is_empty() {
        graph
    } else {
        build(&left)?
    };
    Ok(Breaking {
        cycle: None,
        dropped,
        graph,
    })
}

/// The places (agent, key) of a cycle, in its order.
pub(crate) fn places(cycle: &[String]) -> impl Iterator<Item = (&str, &str)> {
    cycle
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].as_str(), c[1].as_str()))
}

/// `cycle` walked from the place (`agent`, `key`) back to `agent`, if it has that place.
fn from_place(cycle: &[String], agent: &str, key: &str) -> Option<Vec<String>> {
    let n = cycle.len().checked_sub(1)?;
    let i = (0..n)
        .step_by(2)
        .find(|&i| cycle[i] == agent && cycle.get(i + 1).is_some_and(|k| k == key))?;
    let mut out = cycle[i..n].to_vec();
    out.extend_from_slice(&cycle[..i]);
    out.push(agent.to_string());
    Some(out)
}

/// What a graph is built from, read once.
struct Builder<'a> {
    ctx: &'a Ctx,
    store: &'a dyn Store,
    judge: Judge<'a>,
    queues: Vec<Queue>,
    /// Places in queues (agent, key) whose waiter is gone (its `--wait` ended, it is
    /// dead, or its reservation lapsed): no wait, no reservation.
    gone: HashSet<(String, String)>,
    taking: Option<Taking<'a>>,
    /// Live holders of a key, by key.
    holders: HashMap<String, (Vec<String>, bool)>,
}

impl<'a> Builder<'a> {
    fn new(ctx: &'a Ctx, store: &'a dyn Store, taking: Option<Taking<'a>>) -> Result<Self> {
        let queues = store.scan_queues()?;
        let cfg = ctx.config()?;
        let mut gone = HashSet::new();
        for q in &queues {
            for w in &q.waiters {
                // A waiter whose reservation lapsed leaves the queue when it is next
                // settled (`queue::settle`): it waits no more.
                let lapsed = q
                    .reserved_for(&w.agent)
                    .is_some_and(|r| ctx.now() >= r.until);
                if lapsed || crate::liveness::waiter_gone(store, w, &ctx.now(), &cfg)? {
                    gone.insert((w.agent.clone(), q.key.clone()));
                }
            }
        }
        Ok(Builder {
            ctx,
            store,
            judge: Judge::new(ctx, store),
            queues,
            gone,
            taking,
            holders: HashMap::new(),
        })
    }

    /// Does this checkout still keep others out: its lease not over by the skew margin
    /// and its holder not dead?
    fn live(&mut self, r: &Record) -> Result<bool> {
        Ok(!r.breakable(&self.ctx.now()) && !self.judge.holder(r)?.dead())
    }

    /// The live holders of `key` and whether it has slots (seen with `taking`).
    fn holders_of(&mut self, key: &str, q: Option<&Queue>) -> Result<(Vec<String>, bool)> {
        if let Some(h) = self.holders.get(key) {
            return Ok(h.clone());
        }
        let slots = self.store.read_slots(key)?;
        let with_slots = !slots.is_empty() || q.is_some_and(|q| q.slots.is_some());
        let mut out = Vec::new();
        for s in std::iter::once(self.store.read(key)?).chain(slots) {
            if let Slot::Held(r) = s
                && self.live(&r)?
            {
                out.push(r.agent.id);
            }
        }
        if let Some(t) = self.taking.filter(|t| t.key == key) {
            out.push(t.agent.to_string());
        }
        self.holders
            .insert(key.to_string(), (out.clone(), with_slots));
        Ok((out, with_slots))
    }

    /// Is the reservation of `agent` in `q` standing now?
    fn reserved(&self, q: &Queue, agent: &str) -> bool {
        q.reserved_for(agent).is_some_and(|r| {
            self.ctx.now() < r.until && !self.gone.contains(&(agent.to_string(), q.key.clone()))
        })
    }

    /// `agent`'s wait for `key`, asking for `paths`: who keeps it from them.
    fn wait(&mut self, queues: &[Queue], agent: &str, key: &str, paths: &[String]) -> Result<Wait> {
        let q = queues.iter().find(|q| q.key == key);
        let mut out: Vec<String> = Vec::new();
        let (holders, with_slots) = self.holders_of(key, q)?;
        if !q.is_some_and(|q| self.reserved(q, agent)) {
            out.extend(holders.iter().cloned());
            if holders.is_empty() || with_slots {
                for r in q.map(|q| q.reservations.as_slice()).unwrap_or_default() {
                    if q.is_some_and(|q| self.reserved(q, &r.agent)) {
                        out.push(r.agent.clone());
                    }
                }
            }
        }
        if !paths.is_empty() {
            let mine = super::paths::compile(paths);
            let taking = self.taking;
            for o in super::paths::held_overlaps(self.store, agent, key, &mine)? {
                if taking.is_some_and(|t| t.key == o.record.key) {
                    continue;
                }
                if self.live(&o.record)? {
                    out.push(o.record.agent.id.clone());
                }
            }
            if let Some(t) = taking
                && t.key != key
                && t.agent != agent
                && meets(&super::paths::compile(t.paths), &mine)
            {
                out.push(t.agent.to_string());
            }
            for other in queues.iter().filter(|o| o.key != key) {
                for r in &other.reservations {
                    if r.agent == agent || !self.reserved(other, &r.agent) {
                        continue;
                    }
                    if let Some(w) = other.waiters.iter().find(|w| w.agent == r.agent)
                        && meets(&super::paths::compile(&w.paths), &mine)
                    {
                        out.push(r.agent.clone());
                    }
                }
            }
        }
        out.retain(|b| b != agent);
        out.sort();
        out.dedup();
        Ok(Wait {
            agent: agent.to_string(),
            key: key.to_string(),
            blockers: out,
            all_needed: !with_slots,
            passive: false,
        })
    }
}

fn meets(a: &[PathPattern], b: &[PathPattern]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| crate::paths::overlaps(x, y)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(agent: &str, key: &str, blockers: &[&str], all_needed: bool) -> Wait {
        Wait {
            agent: agent.into(),
            key: key.into(),
            blockers: blockers.iter().map(|b| b.to_string()).collect(),
            all_needed,
            passive: true,
        }
    }

    #[test]
    fn a_cycle_is_walked_from_and_back_to_its_agent() {
        let g = Graph {
            waits: vec![
                w("a", "x", &["b"], true),
                w("b", "y", &["c"], true),
                w("c", "z", &["a"], true),
            ],
        };
        assert_eq!(
            g.cycle_of("a", "x").unwrap(),
            ["a", "x", "b", "y", "c", "z", "a"]
        );
        assert_eq!(
            g.cycle_through("c").unwrap(),
            ["c", "z", "a", "x", "b", "y", "c"]
        );
    }

    #[test]
    fn waiting_behind_a_cycle_of_others_is_not_ones_own() {
        let g = Graph {
            waits: vec![
                w("a", "x", &["b"], true),
                w("b", "y", &["c"], true),
                w("c", "z", &["b"], true),
            ],
        };
        assert_eq!(g.cycle_of("a", "x"), None);
        assert_eq!(g.leads_into("a", "x").unwrap(), ["b", "y", "c", "z", "b"]);
        assert_eq!(g.cycle_of("b", "y").unwrap(), ["b", "y", "c", "z", "b"]);
    }

    #[test]
    fn a_cycle_is_walked_again_from_any_of_its_places() {
        let c: Vec<String> = ["m", "k1", "a", "k2", "x", "kx", "m"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            from_place(&c, "x", "kx").unwrap(),
            ["x", "kx", "m", "k1", "a", "k2", "x"]
        );
        assert_eq!(from_place(&c, "m", "k1").unwrap(), c);
        assert_eq!(from_place(&c, "a", "kx"), None);
        let places: Vec<_> = places(&c).collect();
        assert_eq!(places, [("m", "k1"), ("a", "k2"), ("x", "kx")]);
    }

    #[test]
    fn a_key_with_slots_is_a_cycle_only_through_every_holder() {
        let mut g = Graph {
            waits: vec![w("a", "s", &["b", "c"], false), w("b", "x", &["a"], true)],
        };
        assert_eq!(g.cycle_of("a", "s"), None);
        g.waits.push(w("c", "y", &["a"], true));
        let cycle = g.cycle_of("a", "s").unwrap();
        assert_eq!(cycle.first().map(String::as_str), Some("a"));
        assert_eq!(cycle.last().map(String::as_str), Some("a"));
    }
}

//! `/metrics` of `tasklock ui`: the fleet in Prometheus' text format. Gauges are read
//! from the fleet the page's watcher read last; counters and histograms count the audit
//! events the watcher has followed since the server started. Every label has a bounded
//! set of values (event names, agent states, outcomes): never a key or an agent id.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::clock::Time;
use crate::engine::fleet::Fleet;
use crate::liveness::State;
use crate::store::{AuditEvent, Event};

/// The audit events counted by name, in the order they are printed; any other is
/// counted as `other`.
fn event_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = Event::ALL.iter().map(|e| e.as_str()).collect();
    names.sort_unstable();
    names.push("other");
    names
}

/// Bucket bounds in seconds, for how long checkouts are held and waits last: from a
/// second to a working day.
const BOUNDS: [f64; 12] = [
    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
];

#[derive(Default)]
struct Histogram {
    /// Observations at or under each bound (not cumulative; summed when written).
    buckets: [u64; BOUNDS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        let secs = secs.max(0.0);
        if let Some(i) = BOUNDS.iter().position(|b| secs <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, n) in BOUNDS.iter().zip(self.buckets) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// What the page's server has counted since it started.
#[derive(Default)]
pub struct Metrics {
    events: BTreeMap<&'static str, u64>,
    deaths: u64,
    pushes: [u64; 2],
    held: Histogram,
    waited: Histogram,
    /// When each checkout known to be held was granted, by key and token: the fleet read
    /// last, and the grants followed since.
    granted: Known<(String, u64)>,
    /// When each agent joined each queue it is in, by key and agent.
    queued: Known<(String, String)>,
}

/// How long something gone from the fleet is still remembered: the watcher may read the
/// store after a change and follow the audit event that tells of it only a read later.
const REMEMBERED_SECS: i64 = 60;

/// When each of some things began, and when each went from the fleet, if it did.
type Known<K> = HashMap<K, (Time, Option<Time>)>;

/// Keep `known` to what `now_there` has (with when each began, unless known already) and
/// to what went from it less than [`REMEMBERED_SECS`] ago.
fn refresh<K: std::hash::Hash + Eq>(
    known: &mut Known<K>,
    now_there: impl Iterator<Item = (K, Time)>,
    now: Time,
) {
    for v in known.values_mut() {
        v.1.get_or_insert(now);
    }
    for (k, began) in now_there {
        let entry = known.entry(k).or_insert((began, None));
        entry.1 = None;
    }
    known.retain(|_, (_, gone)| gone.is_none_or(|g| (now - g).num_seconds() < REMEMBERED_SECS));
}

impl Metrics {
    /// Count events the watcher followed, oldest first. Call it before [`Metrics::read`]
    /// with the fleet read at the same time: the ends of checkouts that fleet no longer
    /// has are matched with the grants the previous one had.
    pub fn follow(&mut self, events: &[AuditEvent]) {
        for e in events {
            let kind = e.kind();
            *self
                .events
                .entry(kind.map_or("other", Event::as_str))
                .or_default() += 1;
            if let Some(kind) = kind {
                self.follow_one(kind, e);
            }
        }
    }

    fn follow_one(&mut self, kind: Event, e: &AuditEvent) {
        let ended = |m: &mut Metrics| {
            if let Some(t) = e.token
                && let Some((at, _)) = m.granted.remove(&(e.key.clone(), t))
            {
                m.held.observe(seconds(at, e.ts));
            }
        };
        match kind {
            Event::Acquire => {
                if let Some(t) = e.token {
                    self.granted.insert((e.key.clone(), t), (e.ts, None));
                }
                if let Some((at, _)) = self.queued.remove(&(e.key.clone(), e.agent.clone())) {
                    self.waited.observe(seconds(at, e.ts));
                }
            }
            Event::Release | Event::ForceRelease => ended(self),
            Event::AutoRelease => {
                if e.reason.as_deref() == Some("agent_death") {
                    self.deaths += 1;
                }
                ended(self);
            }
            Event::Queue => {
                self.queued
                    .entry((e.key.clone(), e.agent.clone()))
                    .or_insert((e.ts, None));
            }
            Event::Dequeue | Event::Lapse => {
                self.queued.remove(&(e.key.clone(), e.agent.clone()));
            }
            Event::Deadlock if e.reason.as_deref() == Some("dropped") => {
                self.queued.remove(&(e.key.clone(), e.agent.clone()));
            }
            Event::Push => {
                let delivered = e
                    .detail
                    .as_deref()
                    .is_some_and(|d| d.contains("delivered to the session"));
                self.pushes[usize::from(!delivered)] += 1;
            }
            _ => {}
        }
    }

    /// Take in the fleet read: what is held and who waits now. Keeps the bookkeeping to
    /// what the fleet has and what left it in the last minute, so it never grows past
    /// the fleet's size and a minute's changes.
    pub fn read(&mut self, fleet: &Fleet) {
        let held = fleet
            .checkouts
            .iter()
            .map(|c| ((c.view.key.clone(), c.view.token), c.view.acquired_at));
        refresh(&mut self.granted, held, fleet.now);
        let waiting = fleet.queues.iter().flat_map(|(key, q)| {
            let reserved = q.reserved_for.iter().map(|r| &r.agent);
            q.waiters
                .iter()
                .chain(reserved)
                .map(|w| ((key.clone(), w.clone()), fleet.now))
        });
        refresh(&mut self.queued, waiting, fleet.now);
    }

    /// The text format, with the gauges of `fleet` (the last read, if any).
    pub fn render(&self, fleet: Option<&Fleet>) -> String {
        let mut out = String::new();
        gauges(&mut out, fleet);
        let _ = writeln!(
            out,
            "# HELP tasklock_events_total Audit events since this server started, by event.\n# TYPE tasklock_events_total counter"
        );
        for name in event_names() {
            let n = self.events.get(name).copied().unwrap_or(0);
            let _ = writeln!(out, "tasklock_events_total{{event=\"{name}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP tasklock_deaths_total Checkouts ended because their holder died, since this server started.\n# TYPE tasklock_deaths_total counter\ntasklock_deaths_total {}",
            self.deaths
        );
        let _ = writeln!(
            out,
            "# HELP tasklock_deadlocks_total Requests refused, and waiters dropped, because they would close a wait-for cycle, since this server started.\n# TYPE tasklock_deadlocks_total counter\ntasklock_deadlocks_total {}",
            self.events.get("deadlock").copied().unwrap_or(0)
        );
        let _ = writeln!(
            out,
            "# HELP tasklock_notifications_total Messages pushed into agents' sessions since this server started, by outcome.\n# TYPE tasklock_notifications_total counter\ntasklock_notifications_total{{outcome=\"sent\"}} {}\ntasklock_notifications_total{{outcome=\"failed\"}} {}",
            self.pushes[0], self.pushes[1]
        );
        self.held.write(
            &mut out,
            "tasklock_checkout_duration_seconds",
            "How long checkouts that ended were held, from grant to release.",
        );
        self.waited.write(
            &mut out,
            "tasklock_wait_duration_seconds",
            "How long agents waited in a queue before they were granted the key.",
        );
        out
    }
}

fn seconds(from: Time, to: Time) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

fn gauges(out: &mut String, fleet: Option<&Fleet>) {
    let _ = writeln!(
        out,
        "# HELP tasklock_up Whether the last read of the store succeeded.\n# TYPE tasklock_up gauge\ntasklock_up {}",
        u8::from(fleet.is_some())
    );
    let Some(f) = fleet else { return };
    let mut gauge = |name: &str, help: &str, value: usize| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "tasklock_checkouts",
        "Checkouts held now (one per slot).",
        f.checkouts.len(),
    );
    let waiting: usize = f.queues.values().map(|q| q.length).sum();
    gauge("tasklock_waiting", "Places in queues now.", waiting);
    gauge(
        "tasklock_queued_keys",
        "Keys with a queue or a reservation now.",
        f.queues.len(),
    );
    gauge(
        "tasklock_queue_length_max",
        "The longest queue now.",
        f.queues.values().map(|q| q.length).max().unwrap_or(0),
    );
    gauge(
        "tasklock_cycles",
        "Wait-for cycles standing now.",
        f.cycles.len(),
    );
    gauge("tasklock_freezes", "Freezes in force now.", f.freezes.len());
    gauge(
        "tasklock_corrupt_records",
        "Records the store could not read.",
        f.corrupt,
    );
    let _ = writeln!(
        out,
        "# HELP tasklock_agents Agents in view now, by state.\n# TYPE tasklock_agents gauge"
    );
    for (state, label) in [
        (State::Alive, "alive"),
        (State::Stalled, "stalled"),
        (State::Dead, "dead"),
    ] {
        let n = f.agents.iter().filter(|a| a.row.state == state).count();
        let _ = writeln!(out, "tasklock_agents{{state=\"{label}\"}} {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, key: &str, agent: &str, token: Option<u64>, secs: i64) -> AuditEvent {
        AuditEvent {
            ts: chrono::DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap(),
            event: name.into(),
            key: key.into(),
            agent: agent.into(),
            name: None,
            token,
            reason: (name == "auto_release").then(|| "agent_death".into()),
            by: None,
            holder: None,
            detail: None,
            paths: Vec::new(),
        }
    }

    #[test]
    fn what_left_the_fleet_is_remembered_for_a_minute() {
        let t = |s: i64| chrono::DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let mut known: Known<&str> = HashMap::new();
        refresh(&mut known, [("a", t(0)), ("b", t(0))].into_iter(), t(0));
        refresh(&mut known, [("b", t(5))].into_iter(), t(10));
        assert_eq!(known["a"], (t(0), Some(t(10))));
        assert_eq!(known["b"], (t(0), None));
        refresh(&mut known, std::iter::empty(), t(69));
        assert!(known.contains_key("a"));
        refresh(&mut known, std::iter::empty(), t(70));
        assert!(!known.contains_key("a") && known.contains_key("b"));
    }

    #[test]
    fn a_hold_and_a_wait_are_timed_from_their_events() {
        let mut m = Metrics::default();
        m.follow(&[
            event("acquire", "k", "a", Some(1), 0),
            event("queue", "k", "b", None, 10),
            event("auto_release", "k", "a", Some(1), 100),
            event("acquire", "k", "b", Some(2), 130),
            event("surprise", "k", "b", None, 131),
        ]);
        assert_eq!(m.held.count, 1);
        assert_eq!(m.held.sum, 100.0);
        assert_eq!(m.waited.sum, 120.0);
        assert_eq!(m.deaths, 1);
        assert_eq!(m.events["other"], 1);
        let text = m.render(None);
        assert!(text.contains("tasklock_checkout_duration_seconds_bucket{le=\"60\"} 0\n"));
        assert!(text.contains("tasklock_checkout_duration_seconds_bucket{le=\"300\"} 1\n"));
        assert!(text.contains("tasklock_up 0\n"));
    }
}

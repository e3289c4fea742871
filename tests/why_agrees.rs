//! `why KEY` answers with the decision `checkout KEY` would make at that moment: random
//! histories over keys, paths, slots, queues, reservations, freezes, secrets, deaths and
//! a pinned clock, asking `why` and then running `checkout` for the same agent in the
//! same state, find no disagreement; and `why` changes nothing on disk. Then each cause
//! of a disagreement found once, as a fixed test.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;

/// xorshift64*: a small seeded generator, so that a failing history can be replayed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const AGENTS: [&str; 4] = ["a", "b", "c", "d"];
const KEYS: [&str; 4] = ["k1", "k2", "k3", "k4"];
const PATHS: [&str; 4] = ["docs/x.md", "docs/*", "src/a.rs", "src/**"];

/// A lock directory in a git repository, its clock pinned and moved on by the test.
struct World {
    env: Env,
    top: PathBuf,
    minute: i64,
    /// Each agent's registered stand-in process, killed to make it dead.
    procs: BTreeMap<&'static str, AgentProcess>,
}

impl World {
    fn new() -> World {
        let (env, top) = git_env();
        World {
            env,
            top,
            minute: 0,
            procs: BTreeMap::new(),
        }
    }

    fn now(&self) -> String {
        let t = chrono::DateTime::parse_from_rfc3339(T0).unwrap()
            + chrono::Duration::minutes(self.minute);
        t.to_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Run `args` as `agent`, with `secret` as its `TASKLOCK_SECRET` if given.
    fn run(&self, agent: &str, secret: Option<&str>, args: &[&str]) -> Run {
        let mut cmd = base_cmd(&self.now());
        use_store(&mut cmd, &self.env.dir());
        cmd.current_dir(&self.top);
        if let Some(s) = secret {
            cmd.env("TASKLOCK_SECRET", s);
        }
        cmd.arg("--dir").arg(self.env.dir()).args(args);
        cmd.args(["--agent", agent]);
        exec(cmd)
    }
}

/// Did `why` change what the store keeps? On PostgreSQL, opening the store of a project
/// that has none yet makes its empty schema (as every command does): that is no change.
fn changed(before: &BTreeMap<PathBuf, Vec<u8>>, after: &BTreeMap<PathBuf, Vec<u8>>) -> bool {
    before != after && !(on_postgres() && before.is_empty())
}

/// The secret an agent's commands carry: its own, or (now and then) none or a wrong one.
fn secret_of(rng: &mut Rng, agent: &str) -> Option<String> {
    match rng.below(10) {
        0 => None,
        1 => Some("wrong".into()),
        _ => Some(format!("secret-{agent}")),
    }
}

/// One random step of history (its output is not judged: only the pairs are).
fn step(w: &mut World, rng: &mut Rng) {
    let agent = *rng.pick(&AGENTS);
    let key = *rng.pick(&KEYS[..3]);
    let secret = secret_of(rng, agent);
    let s = secret.as_deref();
    let lease = *rng.pick(&["3m", "10m", "30m"]);
    match rng.below(14) {
        0..=2 => {
            w.run(agent, s, &["checkout", key, "--timeout", lease]);
        }
        3..=4 => {
            w.run(agent, s, &["checkout", key, "--queue", "--timeout", lease]);
        }
        5..=6 => {
            let p = *rng.pick(&PATHS);
            let mut args = vec!["checkout", key, "--path", p, "--timeout", lease];
            if rng.chance(50) {
                args.push("--queue");
            }
            w.run(agent, s, &args);
        }
        7 => {
            let n = *rng.pick(&["1", "2", "3"]);
            let mut args = vec!["checkout", "k4", "--slots", n, "--timeout", lease];
            if rng.chance(50) {
                args.push("--queue");
            }
            w.run(agent, s, &args);
        }
        8..=9 => {
            let k = *rng.pick(&KEYS);
            w.run(agent, s, &["release", k]);
        }
        10 => {
            let k = *rng.pick(&KEYS);
            let d = *rng.pick(&["2m", "5m"]);
            w.run(agent, s, &["freeze", k, "--for", d]);
        }
        11 => {
            // An agent with a process of its own, or (once it has one) dying.
            match w.procs.get_mut(agent) {
                Some(p) if rng.chance(60) => p.kill(),
                _ => {
                    let p = AgentProcess::start();
                    w.run(agent, s, &["heartbeat", "--pid", &p.pid()]);
                    w.procs.insert(agent, p);
                }
            }
        }
        12 => {
            w.run(agent, s, &["heartbeat"]);
        }
        _ => {
            w.run(agent, s, &["leave", key]);
        }
    }
}

/// Ask `why`, then check out the same key as the same agent: a disagreement, if any, in
/// words. `why` must leave the store as it was.
fn pair(w: &World, rng: &mut Rng) -> Option<String> {
    let agent = *rng.pick(&AGENTS);
    let key = *rng.pick(&KEYS);
    let secret = secret_of(rng, agent);
    let s = secret.as_deref();
    let mut extra: Vec<&str> = Vec::new();
    if key != "k4" && rng.chance(35) {
        extra.extend(["--path", *rng.pick(&PATHS)]);
    }
    let before = stored(&w.env.dir());
    let mut why_args = vec!["why", key, "--json"];
    why_args.extend(&extra);
    let why = w.run(agent, s, &why_args);
    assert_eq!(why.code, 0, "{}", why.text());
    let after = stored(&w.env.dir());
    if changed(&before, &after) {
        let text =
            |v: Option<&Vec<u8>>| String::from_utf8_lossy(v.map_or(&[][..], |v| v)).into_owned();
        let changed: Vec<String> = after
            .keys()
            .chain(before.keys())
            .filter(|p| before.get(*p) != after.get(*p))
            .map(|p| {
                format!(
                    "{}: {:?} → {:?}",
                    p.display(),
                    text(before.get(p)),
                    text(after.get(p))
                )
            })
            .collect();
        return Some(format!("`why` changed the store: {changed:?}"));
    }
    let j = why.json();
    let mut co_args = vec!["checkout", key, "--json"];
    co_args.extend(&extra);
    let co = w.run(agent, s, &co_args);
    let outcome = if co.code == 0 || (2..=5).contains(&co.code) {
        co.json()["outcome"].as_str().unwrap_or("").to_string()
    } else {
        String::new()
    };
    let can = j["can_checkout"].as_bool().unwrap();
    let state = j["state"].as_str().unwrap().to_string();
    let expected = |state: &str| -> Option<&'static str> {
        Some(match state {
            "frozen" => "frozen",
            "deadlock" => "deadlock",
            "yours" => "already_held",
            _ => return None,
        })
    };
    let disagrees = can != (co.code == 0) || expected(&state).is_some_and(|o| o != outcome);
    disagrees.then(|| {
        format!(
            "{agent} at {}: why {key} {extra:?} (secret {s:?}) said can_checkout={can}, state={state}; checkout exited {} ({outcome})\nwhy: {}\ncheckout: {}",
            w.now(),
            co.code,
            why.stdout.trim(),
            co.stdout.trim()
        )
    })
}

/// One seeded history: how many pairs it asked, and their disagreements.
fn history(seed: u64, steps: usize) -> (usize, Vec<String>) {
    let mut rng = Rng::new(seed);
    let mut w = World::new();
    let mut found = Vec::new();
    let mut pairs = 0;
    for _ in 0..steps {
        w.minute += *rng.pick(&[0, 0, 1, 1, 2, 3, 5]);
        if rng.chance(30) {
            pairs += 1;
            if let Some(d) = pair(&w, &mut rng) {
                found.push(d);
            }
        } else {
            step(&mut w, &mut rng);
        }
    }
    (pairs, found)
}

/// How many histories, from which seed (`WHY_AGREES_SEEDS=FIRST..END` to replay others).
fn seeds() -> std::ops::Range<u64> {
    std::env::var("WHY_AGREES_SEEDS")
        .ok()
        .and_then(|s| {
            let (a, b) = s.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(1..13)
}

#[test]
fn why_and_checkout_never_disagree() {
    let mut all = Vec::new();
    let mut pairs = 0;
    let seeds = seeds();
    for seed in seeds.clone() {
        let (n, found) = history(seed, 80);
        pairs += n;
        all.extend(found.into_iter().map(|d| format!("seed {seed}: {d}")));
    }
    eprintln!(
        "seeds {seeds:?}: {pairs} pairs, {} disagreements",
        all.len()
    );
    assert!(
        all.is_empty(),
        "{} disagreements in {pairs} pairs (replay one with WHY_AGREES_SEEDS=N..N+1):\n\n{}",
        all.len(),
        all.join("\n\n")
    );
}

// ---- Each cause of a disagreement once found, fixed ----

impl World {
    fn at(&mut self, minute: i64) -> &mut Self {
        self.minute = minute;
        self
    }
    /// `args` as `agent` must exit `code`.
    fn expect(&self, agent: &str, secret: Option<&str>, args: &[&str], code: i32) -> Run {
        let r = self.run(agent, secret, args);
        assert_eq!(r.code, code, "{args:?} as {agent}: {}", r.text());
        r
    }
    /// `why` as `agent` (its JSON), then the same checkout, which must exit `code`.
    fn why_then_checkout(
        &self,
        agent: &str,
        secret: Option<&str>,
        key: &str,
        paths: &[&str],
        code: i32,
    ) -> Value {
        let mut extra = Vec::new();
        for p in paths {
            extra.extend(["--path", *p]);
        }
        let before = stored(&self.env.dir());
        let why = self.run(
            agent,
            secret,
            &[&["why", key, "--json"][..], &extra].concat(),
        );
        assert_eq!(why.code, 0, "{}", why.text());
        assert!(
            !changed(&before, &stored(&self.env.dir())),
            "`why` changed the store"
        );
        let j = why.json();
        let co = self.run(
            agent,
            secret,
            &[&["checkout", key, "--json"][..], &extra].concat(),
        );
        assert_eq!(co.code, code, "{}", co.text());
        assert_eq!(
            j["can_checkout"],
            code == 0,
            "why: {}\ncheckout: {}",
            why.stdout,
            co.stdout
        );
        assert_eq!(j["decision"], co.json()["outcome"], "{}", why.stdout);
        j
    }
}

use serde_json::Value;

/// Cause 1: the checkout in the way has ended, but its queue goes first: a checkout
/// hands the key to the head of the queue and is refused.
#[test]
fn an_ended_checkout_goes_to_its_queue_not_to_the_asker() {
    let mut w = World::new();
    w.expect("a", None, &["checkout", "k", "--timeout", "5m"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.at(20);
    let j = w.why_then_checkout("c", None, "k", &[], 2);
    assert_eq!(j["state"], "reserved", "{j}");
    assert_eq!(j["decision"], "conflict");
}

/// Cause 1, one's own lapsed lease: the queue goes first there too.
#[test]
fn ones_own_lapsed_lease_goes_to_the_queue() {
    let mut w = World::new();
    w.expect("a", None, &["checkout", "k", "--timeout", "5m"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.at(20);
    let j = w.why_then_checkout("a", None, "k", &[], 2);
    assert_eq!(j["state"], "reserved", "{j}");
}

/// Cause 2: a reservation that lapsed passes to the next waiter, not to the asker.
#[test]
fn a_lapsed_reservation_passes_to_the_next_waiter() {
    let mut w = World::new();
    w.expect("a", None, &["checkout", "k"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.expect("d", None, &["checkout", "k", "--queue"], 2);
    w.expect("a", None, &["release", "k"], 0);
    w.at(5);
    let j = w.why_then_checkout("c", None, "k", &[], 2);
    assert_eq!(j["state"], "reserved", "{j}");
}

/// Cause 2, a key with slots: a lapsed reservation keeps no slot.
#[test]
fn a_lapsed_reservation_keeps_no_slot() {
    let mut w = World::new();
    w.expect("a", None, &["checkout", "k", "--slots", "2"], 0);
    w.expect("b", None, &["checkout", "k"], 0);
    w.expect("c", None, &["checkout", "k", "--queue"], 2);
    w.expect("b", None, &["release", "k"], 0);
    w.at(5);
    let j = w.why_then_checkout("d", None, "k", &[], 0);
    assert_eq!(j["state"], "free", "{j}");
}

/// Cause 3: paths held by a checkout that has ended go to its queue's head, whose
/// reservation holds them.
#[test]
fn ended_paths_go_to_the_queue_first() {
    let mut w = World::new();
    w.expect(
        "a",
        None,
        &["checkout", "k1", "--path", "docs/x.md", "--timeout", "5m"],
        0,
    );
    w.expect(
        "b",
        None,
        &["checkout", "k1", "--path", "docs/*", "--queue"],
        2,
    );
    w.at(20);
    let j = w.why_then_checkout("c", None, "k2", &["docs/x.md"], 2);
    assert_eq!(j["can_checkout"], false, "{j}");
}

/// Cause 4: one's own checkout, bound to a secret the caller did not give: a checkout
/// is refused (exit 4), and `why` says so.
#[test]
fn a_checkout_bound_to_a_secret_is_not_yours_without_it() {
    let w = World::new();
    w.expect("a", Some("s1"), &["checkout", "k"], 0);
    let j = w.why_then_checkout("a", None, "k", &[], 4);
    assert_eq!(j["state"], "secret_refused", "{j}");
    let j = w.why_then_checkout("a", Some("s1"), "k", &[], 0);
    assert_eq!(j["state"], "yours", "{j}");
}

/// Cause 5: the reservation of an agent whose process is gone keeps nobody out.
#[test]
fn a_dead_agents_reservation_keeps_nobody_out() {
    let w = World::new();
    let mut p = AgentProcess::start();
    w.expect("b", None, &["heartbeat", "--pid", &p.pid()], 0);
    w.expect("a", None, &["checkout", "k"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.expect("a", None, &["release", "k"], 0);
    p.kill();
    let j = w.why_then_checkout("c", None, "k", &[], 0);
    assert_eq!(j["decision"], "granted", "{j}");
}

/// Cause 6: a holder adding paths that an agent it waits for waits for closes a cycle.
/// Its own place in `k3` is passive (`--queue`): `why` says the checkout drops it, and
/// the checkout does (issue 46).
#[test]
fn a_holder_adding_paths_can_close_a_cycle() {
    let w = World::new();
    w.expect("c", None, &["checkout", "k5"], 0);
    w.expect("b", None, &["checkout", "k3"], 0);
    w.expect(
        "b",
        None,
        &["checkout", "k5", "--path", "docs/x.md", "--queue"],
        2,
    );
    w.expect("a", None, &["checkout", "k1"], 0);
    w.expect("a", None, &["checkout", "k3", "--queue"], 2);
    let j = w.why_then_checkout("a", None, "k1", &["docs/x.md"], 0);
    assert_eq!(j["state"], "yours", "{j}");
    assert!(
        j["reasons"].as_array().unwrap().iter().any(|r| r
            .as_str()
            .unwrap()
            .contains("your place in the queue of `k3` (a → `k3` → b → `k5` → a)")),
        "{j}"
    );
}

/// The markdown of the answers that follow the decision where `why`'s own words once
/// judged otherwise: the queue going first, a lapsed reservation, a dead agent's, the
/// holder's secret, a holder adding paths into a cycle.
#[test]
fn the_answers_that_follow_the_decision_read_so() {
    let why = |w: &World, agent: &str, secret: Option<&str>, args: &[&str]| {
        w.expect(agent, secret, &[&["why"][..], args].concat(), 0)
    };
    let mut w = World::new();
    w.expect("a", None, &["checkout", "k", "--timeout", "5m"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.at(20);
    snap!(w.env, "ended_goes_to_the_queue", why(&w, "c", None, &["k"]));

    let mut w = World::new();
    w.expect("a", None, &["checkout", "k"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.expect("d", None, &["checkout", "k", "--queue"], 2);
    w.expect("a", None, &["release", "k"], 0);
    w.at(5);
    snap!(w.env, "lapsed_reservation", why(&w, "c", None, &["k"]));

    let w = World::new();
    let mut p = AgentProcess::start();
    w.expect("b", None, &["heartbeat", "--pid", &p.pid()], 0);
    w.expect("a", None, &["checkout", "k"], 0);
    w.expect("b", None, &["checkout", "k", "--queue"], 2);
    w.expect("a", None, &["release", "k"], 0);
    p.kill();
    snap!(w.env, "dead_agents_reservation", why(&w, "c", None, &["k"]));

    let w = World::new();
    w.expect("a", Some("s1"), &["checkout", "k"], 0);
    snap!(w.env, "secret_refused", why(&w, "a", None, &["k"]));

    let w = World::new();
    w.expect("c", None, &["checkout", "k5"], 0);
    w.expect("b", None, &["checkout", "k3"], 0);
    w.expect(
        "b",
        None,
        &["checkout", "k5", "--path", "docs/x.md", "--queue"],
        2,
    );
    w.expect("a", None, &["checkout", "k1"], 0);
    w.expect("a", None, &["checkout", "k3", "--queue"], 2);
    snap!(
        w.env,
        "holder_adding_paths_deadlock",
        why(&w, "a", None, &["k1", "--path", "docs/x.md"])
    );
}

/// A checkout that would fail (paths asked for with a key with slots: a usage error) is
/// not promised: `why` says it cannot, and what the error would be.
#[test]
fn a_checkout_that_would_fail_is_not_promised() {
    let w = World::new();
    w.expect("a", None, &["checkout", "k4", "--slots", "2"], 0);
    let why = w.expect(
        "b",
        None,
        &["why", "k4", "--path", "docs/x.md", "--json"],
        0,
    );
    let j = why.json();
    assert_eq!(j["can_checkout"], false, "{j}");
    assert!(j["decision"].is_null(), "{j}");
    let last = j["reasons"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_str()
        .unwrap();
    assert!(last.starts_with("A checkout now would fail: "), "{j}");
    w.expect("b", None, &["checkout", "k4", "--path", "docs/x.md"], 64);
}

// Cause 7 (a false cycle through a lapsed reservation) is
// tests/waits.rs::a_lapsed_reservation_of_a_slot_closes_no_cycle.

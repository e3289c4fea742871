//! `why KEY`: plain words on whether this agent can check KEY out now, and why not. The
//! verdict is the checkout's own [`Decision`] (made by `take::decided` on a [`DryRun`] of
//! the store: nothing written), put in words with what the store shows around it.

use crate::clock::{Time, with_relative};
use crate::engine::decide::{Blocked, Decision, Holding, KeyState};
use crate::engine::dry::DryRun;
use crate::engine::slots::Holders;
use crate::engine::take::{Join, Request, decided, with_registered_pid};
use crate::engine::{Ctx, Judge, ReapReason};
use crate::error::{Error, Outcome, Result};
use crate::liveness::{Cause, State};
use crate::report::{Report, WhyNext, WhyReport, WhyState};
use crate::store::{Delivery, Freeze, Queue, Record, Slot, Store};

pub fn run(ctx: &Ctx, key: &str, paths: Vec<String>) -> Result<Report> {
    crate::key::validate(key)?;
    let mut a = Answer::new(ctx.agent_id().ok(), ctx.now());
    if let Some(store) = ctx.existing_store()? {
        a.words(ctx, &*store, key, &paths)?;
    }
    // What `checkout KEY` would decide now: the checkout's own decision, made without
    // acting. Where the words judged otherwise, the decision stands.
    if a.me.is_some()
        && a.state != WhyState::Corrupt
        && let Some(store) = ctx.existing_store()?
    {
        match decision(ctx, &*store, key, &paths) {
            Ok((s, d)) => a.follow(&s, &d),
            Err(e) => a.failed(&e),
        }
    }
    Ok(Report::Why(a.finish(key, paths)))
}

/// What `checkout KEY` (with `paths`) would decide for the caller now, with the key's
/// state it was decided on: made on a [`DryRun`] of the store, so that nothing is
/// written; or the error the checkout would fail with (bad settings, a key with slots
/// asked for paths).
fn decision(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
    paths: &[String],
) -> Result<(KeyState, Decision)> {
    let mut req = Request::new(ctx, None, None, None)?;
    req.paths = paths.to_vec();
    DryRun::new(store).run(|store, guard| {
        let req = with_registered_pid(ctx, store, guard, req)?;
        decided(ctx, store, guard, &req, key, Join::No)
    })
}

/// `why`'s answer as it is made: the words of what the store shows, then the checkout's
/// decision, which stands.
struct Answer {
    me: Option<String>,
    now: Time,
    state: WhyState,
    can: bool,
    reasons: Vec<String>,
    /// Your place in the key's queue, and who holds the key (alive), when known.
    position: Option<usize>,
    holder: Option<String>,
    /// The push of the reservation's message, when the key is reserved.
    delivery: Option<Delivery>,
    /// A freeze covers the key.
    frozen: bool,
    /// Its record was written by a newer tasklock.
    newer: bool,
    /// On a deadlock: the key through whose queue the cycle runs.
    deadlock_via: Option<String>,
    decision: Option<Outcome>,
}

impl Answer {
    fn new(me: Option<String>, now: Time) -> Answer {
        Answer {
            me,
            now,
            state: WhyState::Free,
            can: true,
            reasons: Vec::new(),
            position: None,
            holder: None,
            delivery: None,
            frozen: false,
            newer: false,
            deadlock_via: None,
            decision: None,
        }
    }

    fn is_me(&self, agent: &str) -> bool {
        self.me.as_deref() == Some(agent)
    }

    /// What the store shows of the key, in words.
    fn words(&mut self, ctx: &Ctx, store: &dyn Store, key: &str, paths: &[String]) -> Result<()> {
        if let Some(f) = store.frozen(key, &self.now)? {
            self.frozen_words(&f, key);
        }
        let mut judge = Judge::new(ctx, store);
        let own = store.read(key)?;
        let queue = store.read_queue(key)?;
        let with_slots = Holders::read(store, key, Some(&queue), &own)?;
        if let Some(h) = &with_slots {
            self.slots_words(&mut judge, h, &queue)?;
        }
        match if with_slots.is_some() {
            Slot::Free
        } else {
            own
        } {
            Slot::Corrupt { path, problem } => self.corrupt_words(key, &path, &problem),
            Slot::Held(r) if self.is_me(&r.agent.id) => self.own_words(&mut judge, &r)?,
            Slot::Held(r) => self.held_words(&mut judge, &r)?,
            Slot::Free => {}
        }
        if let Slot::Held(r) = store.read(key)?
            && !r.paths.is_empty()
        {
            self.reasons.push(format!(
                "Its checkout covers the paths {}.",
                code_list(&r.paths)
            ));
        }
        self.path_words(ctx, store, &mut judge, key, paths)?;
        let queue = store.read_queue(key)?;
        self.queue_words(store, &queue)?;
        if let Some(m) = self.me.clone()
            && !self.can
            && matches!(
                self.state,
                WhyState::Held | WhyState::PathsHeld | WhyState::Reserved
            )
        {
            let queued = self.position.is_some();
            let cycle = cycle_reasons(ctx, store, &m, key, paths, queued)?;
            self.reasons.extend(cycle);
        }
        let held = matches!(self.state, WhyState::Held | WhyState::PathsHeld);
        match self.position {
            Some(1) if held => self.reasons.push(
                "You are first in its queue: when it is released, it is reserved for you.".into(),
            ),
            Some(p) if self.state != WhyState::ReservedForYou => self
                .reasons
                .push(format!("You are number {p} in its queue.")),
            _ => {}
        }
        Ok(())
    }

    fn frozen_words(&mut self, f: &Freeze, key: &str) {
        self.can = false;
        self.state = WhyState::Frozen;
        self.frozen = true;
        self.reasons.push(format!(
            "It is frozen by {} until {}{}{}. Nobody can check it out until then.",
            f.by,
            with_relative(&f.until, &self.now),
            if f.pattern != key {
                format!(", by the freeze on `{}`", f.pattern)
            } else {
                String::new()
            },
            f.reason
                .as_deref()
                .map(|r| format!("; the reason given: {r}"))
                .unwrap_or_default()
        ));
    }

    /// A key with slots: the caller's slot, a free one, or every one taken or reserved.
    fn slots_words(&mut self, judge: &mut Judge, h: &Holders, queue: &Queue) -> Result<()> {
        let now = self.now;
        let mut live = Vec::new();
        for r in &h.records {
            if !r.breakable(&now) && !judge.holder(r)?.dead() {
                live.push(r);
            }
        }
        // Yours unless it has ended for you (as `checkout` judges it).
        let mine = match self.me.as_deref().and_then(|m| h.of(m)) {
            Some(r) if judge.own_end(r)?.is_none() => Some(r),
            _ => None,
        };
        let others_reserved = queue
            .reservations
            .iter()
            .filter(|r| !self.is_me(&r.agent))
            .count();
        let held: Vec<String> = live
            .iter()
            .map(|r| match r.slot {
                Some(n) => format!("{} (slot {n}, token {})", r.agent.label(), r.token),
                None => format!("{} (token {})", r.agent.label(), r.token),
            })
            .collect();
        if let Some(r) = mine {
            self.state = WhyState::Yours;
            self.reasons.push(format!(
                "You hold slot {} of its {} (token {}); your lease ends {}. Checking it out again renews it.",
                r.slot.unwrap_or(1),
                h.capacity,
                r.token,
                with_relative(&r.expires_at, &now)
            ));
        } else if live.len() + others_reserved < h.capacity as usize
            || queue
                .reserved_for(self.me.as_deref().unwrap_or_default())
                .is_some()
        {
            self.reasons.push(format!(
                "It has {} slots and {} of them are held{}; one is free for you.",
                h.capacity,
                live.len(),
                if held.is_empty() {
                    String::new()
                } else {
                    format!(": {}", held.join(", "))
                }
            ));
        } else {
            self.can = false;
            self.state = WhyState::Held;
            self.holder = live.first().map(|r| r.agent.id.clone());
            self.reasons.push(if live.len() >= h.capacity as usize {
                format!("All {} of its slots are taken: {}.", h.capacity, held.join(", "))
            } else {
                format!(
                    "{} of its {} slots are taken ({}), and the free ones are reserved for agents ahead of you in its queue.",
                    live.len(),
                    h.capacity,
                    held.join(", ")
                )
            });
        }
        Ok(())
    }

    fn corrupt_words(&mut self, key: &str, path: &std::path::Path, problem: &str) {
        self.can = false;
        self.state = WhyState::Corrupt;
        if crate::error::newer_format(problem) {
            self.newer = true;
            self.reasons.push(format!(
                "Its record at {} was written by a newer tasklock ({problem}).",
                path.display()
            ));
        } else {
            self.reasons.push(format!(
                "Its record at {} is damaged ({problem}), so nobody can check it out. If nobody works on it, `tasklock {}` removes it (audited).",
                path.display(),
                crate::key::Line::new("release").arg(key).flag("--force").render(&[])
            ));
        }
    }

    /// The caller's own checkout, judged as `checkout` would judge it, without ending it
    /// here (a read).
    fn own_words(&mut self, judge: &mut Judge, r: &Record) -> Result<()> {
        let now = self.now;
        let end = judge.own_end(r)?;
        if let Some((ReapReason::AgentDeath, cause)) = end {
            self.state = WhyState::Ended;
            self.reasons.push(format!(
                "You held it (token {}), but {}; the checkout has ended. Checking it out again gives a new token.",
                r.token,
                cause_text(cause)
            ));
        } else if end.is_some() {
            self.reasons.push(format!(
                "You held it, but your lease ran out {}; the checkout is lost. Checking it out again gives a new token.",
                with_relative(&r.expires_at, &now)
            ));
        } else {
            self.state = WhyState::Yours;
            self.reasons.push(format!(
                "You hold it (token {}); your lease ends {}. Checking it out again renews it.",
                r.token,
                with_relative(&r.expires_at, &now)
            ));
        }
        Ok(())
    }

    /// Another agent's checkout: standing, or ended (the next checkout takes it over).
    fn held_words(&mut self, judge: &mut Judge, r: &Record) -> Result<()> {
        let now = self.now;
        let judgement = judge.holder(r)?;
        let who = match &r.agent.name {
            Some(n) => format!("{} ({n})", r.agent.id),
            None => r.agent.id.clone(),
        };
        if r.breakable(&now) {
            self.state = WhyState::Ended;
            self.reasons.push(format!(
                "{who} held it, but the lease ran out {}; the next checkout takes it over.",
                with_relative(&r.expires_at, &now)
            ));
        } else if judgement.dead() {
            let cause = cause_text(judgement.cause);
            self.state = WhyState::Ended;
            self.reasons.push(format!(
                "{who} holds it, but {cause}; the next checkout takes it over."
            ));
        } else {
            self.can = false;
            self.state = WhyState::Held;
            self.holder = Some(who.clone());
            let liveness = match judgement.state {
                State::Stalled => "stalled (no recent heartbeat, but not dead yet)",
                _ => "alive",
            };
            self.reasons.push(format!(
                "{who} holds it (token {}) since {}; it is {liveness}, and its lease ends {}.",
                r.token,
                with_relative(&r.acquired_at, &now),
                with_relative(&r.expires_at, &now)
            ));
            if let Some(reason) = &r.reason {
                self.reasons.push(format!("Their reason: {reason}."));
            }
        }
        Ok(())
    }

    /// The paths asked about: other agents' checkouts (and reservations) that overlap.
    fn path_words(
        &mut self,
        ctx: &Ctx,
        store: &dyn Store,
        judge: &mut Judge,
        key: &str,
        paths: &[String],
    ) -> Result<()> {
        let now = self.now;
        let mine = crate::engine::paths::compile(paths);
        let asker = self.me.clone().unwrap_or_default();
        let open = |s: WhyState| matches!(s, WhyState::Free | WhyState::Ended);
        for o in crate::engine::paths::held_overlaps(store, &asker, key, &mine)? {
            let r = &o.record;
            let who = r.agent.label();
            let meets = format!(
                "`{}` meets `{}` of `{}` (both cover `{}`)",
                o.mine, o.theirs, r.key, o.witness
            );
            if judge.reap_reason(r)?.is_some() {
                self.reasons.push(format!(
                    "Your path {meets}, held by {who}, whose lease is over or who is dead; the next checkout takes it over."
                ));
                continue;
            }
            self.can = false;
            if open(self.state) {
                self.state = WhyState::PathsHeld;
            }
            self.holder.get_or_insert(who.clone());
            self.reasons.push(format!(
                "Your path {meets}, held by {who} (token {}); its lease ends {}.",
                r.token,
                with_relative(&r.expires_at, &now)
            ));
        }
        for o in crate::engine::paths::reserved_overlaps(ctx, store, &asker, key, &mine)? {
            self.can = false;
            if open(self.state) {
                self.state = WhyState::Reserved;
            }
            self.reasons.push(format!(
                "Your path `{}` meets `{}`, reserved for {}, the head of the queue of `{}`, until {}.",
                o.mine,
                o.theirs,
                o.waiter.agent,
                o.queue.key,
                with_relative(&o.view().until, &now)
            ));
        }
        Ok(())
    }

    /// The key's queue: a reservation (for the caller or another, and how its head was
    /// told), and who waits.
    fn queue_words(&mut self, store: &dyn Store, queue: &Queue) -> Result<()> {
        let now = self.now;
        self.position = self.me.as_deref().and_then(|m| queue.position(m));
        if let Some(res) = queue.reservation()
            && res.until > now
            && !matches!(self.state, WhyState::Held | WhyState::PathsHeld)
        {
            if self.is_me(&res.agent) {
                self.state = WhyState::ReservedForYou;
                self.reasons.push(format!(
                    "It is reserved for you, the head of its queue, until {}: check it out now.",
                    with_relative(&res.until, &now)
                ));
            } else {
                self.can = false;
                if matches!(self.state, WhyState::Free | WhyState::Ended) {
                    self.state = WhyState::Reserved;
                }
                self.reasons.push(format!(
                    "It is reserved for {}, the head of its queue, until {}.",
                    res.agent,
                    with_relative(&res.until, &now)
                ));
            }
            let told = match &res.message {
                Some(id) => store.message(&res.agent, id)?,
                None => None,
            };
            if let Some(d) = told.and_then(|m| m.delivery) {
                let who = if self.is_me(&res.agent) {
                    "You were".to_string()
                } else {
                    format!("{} was", res.agent)
                };
                self.reasons.push(told_words(&who, &d, &now));
                self.delivery = Some(d);
            }
        }
        if !queue.waiters.is_empty() {
            let names: Vec<&str> = queue.waiters.iter().map(|w| w.agent.as_str()).collect();
            self.reasons.push(format!(
                "{} waiting in its queue: {}.",
                names.len(),
                names.join(", ")
            ));
        }
        Ok(())
    }

    /// The decision `d`, made on `s`, stands: the state and verdict follow it, with a
    /// reason where the words said otherwise.
    fn follow(&mut self, s: &KeyState, d: &Decision) {
        self.decision = d.outcome();
        match d {
            Decision::Corrupt { path, problem } => {
                return self.failed(&Error::Corrupt {
                    key: s.key.clone(),
                    path: path.clone(),
                    problem: problem.clone(),
                });
            }
            Decision::Grant => {
                let open = [WhyState::Free, WhyState::Ended, WhyState::ReservedForYou];
                if !open.contains(&self.state) {
                    self.reasons.push(
                        "What stood in the way has ended (a lease ran out, a holder or the agent a reservation was for is gone, or a reservation lapsed): a checkout now takes it.".into(),
                    );
                    self.state = if s.took_over.is_some() {
                        WhyState::Ended
                    } else {
                        WhyState::Free
                    };
                }
                self.can = true;
            }
            Decision::Renew(_) => {
                self.state = WhyState::Yours;
                self.can = true;
            }
            Decision::Frozen(..) => {
                self.state = WhyState::Frozen;
                self.can = false;
            }
            Decision::NotYours(_) => {
                self.reasons.push(
                    "Your checkout is bound to a secret you did not give (`TASKLOCK_SECRET`): a checkout would be refused (exit 4).".into(),
                );
                self.state = WhyState::SecretRefused;
                self.can = false;
            }
            Decision::Deadlock(cycle) | Decision::WaitDeadlock(_, cycle) => {
                self.deadlock(cycle);
                self.can = false;
            }
            Decision::Refuse(b) | Decision::Queue(b) => self.refused(s, b),
        }
        if self.can && !s.dropped.is_empty() {
            self.dropping(&s.dropped);
        }
        if !self.can {
            self.unpromise();
        }
    }

    /// A checkout now would drop these passive places in queues, which with it would
    /// close wait-for cycles.
    fn dropping(&mut self, dropped: &[crate::report::Dropped]) {
        let places: Vec<String> = dropped
            .iter()
            .map(|p| {
                let whose = if self.is_me(&p.agent) {
                    "your place".to_string()
                } else {
                    format!("the place of {}", p.agent)
                };
                format!(
                    "{whose} in the queue of `{}` ({})",
                    p.key,
                    cycle_words(&p.cycle)
                )
            })
            .collect();
        self.reasons.push(format!(
            "Taking it now would close a wait-for cycle through passive places in queues (queued with `--queue`, not blocked in a wait): a checkout drops them, and each agent is told: {}.",
            places.join("; ")
        ));
    }

    /// A checkout now would fail with `e`.
    fn failed(&mut self, e: &Error) {
        self.can = false;
        self.reasons.push(format!(
            "A checkout now would fail: {}.",
            e.to_string().trim_end_matches('.')
        ));
    }

    /// A checkout would not be granted: no reason promises one.
    fn unpromise(&mut self) {
        for r in self.reasons.iter_mut() {
            for (promise, instead) in [
                (" Checking it out again renews it.", ""),
                (" Checking it out again gives a new token.", ""),
                ("; the next checkout takes it over.", "."),
            ] {
                if r.ends_with(promise) {
                    *r = format!("{}{instead}", &r[..r.len() - promise.len()]);
                }
            }
        }
    }

    /// Taking it would close `cycle`.
    fn deadlock(&mut self, cycle: &[String]) {
        // A cycle the words found already stands for this one.
        self.reasons
            .retain(|r| !r.starts_with("Taking it now would close"));
        let via = cycle.get(1).cloned().unwrap_or_default();
        self.reasons.push(format!(
            "Taking it now would close a wait-for cycle through your place in the queue of `{via}`: {}. A checkout would be refused (deadlock, exit 5).",
            cycle_words(cycle)
        ));
        self.state = WhyState::Deadlock;
        self.deadlock_via = Some(via);
    }

    /// A checkout would be refused, kept out by `b` (someone holds the key or paths of
    /// it, or it is reserved).
    fn refused(&mut self, s: &KeyState, b: &Blocked) {
        self.can = false;
        if matches!(
            self.state,
            WhyState::Held | WhyState::PathsHeld | WhyState::Reserved
        ) {
            return;
        }
        let me = self.me.clone().unwrap_or_default();
        let reserved = s.queue.reservation().filter(|r| r.agent != me);
        let overlap = match b {
            Blocked::Paths { .. } => s.blockers.first(),
            _ => None,
        };
        self.state = match overlap {
            Some(o) if o.reserved => WhyState::Reserved,
            Some(_) => WhyState::PathsHeld,
            None if reserved.is_some() && !holder_in_the_way(s, b) => WhyState::Reserved,
            None => WhyState::Held,
        };
        self.reasons.push(if let Some(res) = reserved {
            format!(
                "Its queue goes first: a checkout now would find it reserved for {}, the head of its queue, until {}, and be refused.",
                res.agent,
                with_relative(&res.until, &self.now)
            )
        } else if let Some(o) = overlap {
            format!(
                "Your path `{}` meets `{}` of `{}`, {} {}: a checkout now would be refused.",
                o.mine,
                o.theirs,
                o.key,
                if o.reserved {
                    "reserved for"
                } else {
                    "held by"
                },
                o.agent.id
            )
        } else {
            "A checkout now would be refused: it is not free for you.".into()
        });
    }

    /// The answer as it stands, with its advice.
    fn finish(mut self, key: &str, paths: Vec<String>) -> WhyReport {
        // A freeze outranks every other state: nothing else matters until it ends.
        if self.frozen && self.state != WhyState::Corrupt {
            self.state = WhyState::Frozen;
            self.can = false;
        }
        if self.reasons.is_empty() {
            self.reasons
                .push("Nobody holds it, nobody waits for it, and it is not frozen.".into());
        }
        let advice = self.advice();
        let next = crate::render::markdown::why_next(&advice, key, &paths, &Default::default());
        WhyReport {
            command: "why",
            now: self.now,
            key: key.to_string(),
            agent: self.me,
            can_checkout: self.can,
            state: self.state,
            reasons: self.reasons,
            next,
            paths,
            delivery: self.delivery,
            advice,
            decision: self.decision,
        }
    }

    fn advice(&self) -> WhyNext {
        match self.state {
            WhyState::Yours => WhyNext::KeepWorking,
            WhyState::ReservedForYou if self.can => WhyNext::CheckoutReserved,
            _ if self.can => WhyNext::Checkout,
            WhyState::Frozen => WhyNext::Frozen,
            WhyState::Corrupt if self.newer => WhyNext::Upgrade,
            WhyState::Corrupt => WhyNext::Corrupt,
            WhyState::SecretRefused => WhyNext::Secret,
            WhyState::Deadlock => WhyNext::Deadlock {
                queue: self.deadlock_via.clone().unwrap_or_default(),
            },
            // Already waiting: say where, never "queue" again.
            _ => match (self.position, self.holder.clone()) {
                (Some(1), Some(h)) => WhyNext::FirstInLine { holder: h },
                (Some(p), _) => WhyNext::InLine { position: p },
                _ => WhyNext::Queue,
            },
        }
    }
}

/// Does a checkout refused by `b` show whom it found holding the key (its holder, the
/// caller's own checkout waiting for paths, the holders of its slots)?
fn holder_in_the_way(s: &KeyState, b: &Blocked) -> bool {
    match &s.holding {
        Holding::Slots { holders, .. } => !holders.records.is_empty(),
        Holding::Mine(_) => true,
        _ => matches!(b, Blocked::Holder(_)),
    }
}

/// How the head of the queue was told of its reservation.
fn told_words(who: &str, d: &Delivery, now: &Time) -> String {
    if d.delivered && d.via == crate::store::VIA_MONITOR {
        format!(
            "{who} told by the session's monitor (`tasklock inbox --follow`) {}; the reservation runs from then.",
            with_relative(&d.at, now)
        )
    } else if d.delivered {
        format!(
            "{who} told by a push into the session {}; the reservation runs from then.",
            with_relative(&d.at, now)
        )
    } else {
        format!(
            "{who} told through the inbox only, read at the next prompt or tool call: pushing into the session failed {}: {}.",
            with_relative(&d.at, now),
            d.error.as_deref().unwrap_or("unknown")
        )
    }
}

/// What the waits-for graph says of `me` waiting for `key`: its wait (or the one it
/// would join) closes a cycle, or leads into one of other agents.
fn cycle_reasons(
    ctx: &Ctx,
    store: &dyn crate::store::Store,
    me: &str,
    key: &str,
    paths: &[String],
    queued: bool,
) -> Result<Vec<String>> {
    use crate::engine::waits::Graph;
    let graph = if queued {
        Graph::build(ctx, store, None, None)?
    } else {
        Graph::with_wait(ctx, store, None, me, key, paths)?
    };
    let words = cycle_words;
    Ok(match (graph.cycle_of(me, key), graph.leads_into(me, key)) {
        (Some(c), _) if queued => vec![format!(
            "Your place in its queue is part of a wait-for cycle: {}. It cannot end until one of you gives something up.",
            words(&c)
        )],
        (Some(c), _) => match crate::engine::waits::places(&c)
            .find(|&(a, k)| (a, k) != (me, key) && graph.passive(a, k))
        {
            Some((a, k)) => vec![format!(
                "Waiting for it would close a wait-for cycle: {}. Its place of {a} in the queue of `{k}` is passive (queued with `--queue`, not blocked in a wait): `checkout --queue` or `--wait` would drop it (its agent is told) and wait.",
                words(&c)
            )],
            None => vec![format!(
                "Waiting for it would close a wait-for cycle: {}. `checkout --queue` or `--wait` would be refused (deadlock, exit 5).",
                words(&c)
            )],
        },
        (None, Some(c)) => vec![format!(
            "{} behind a wait-for cycle of other agents: {}. It is not yours to break: you keep your place, and your turn comes once one of them gives something up.",
            if queued {
                "You wait"
            } else {
                "Waiting, you would wait"
            },
            words(&c)
        )],
        (None, None) => Vec::new(),
    })
}

/// Why a holder is dead, in words.
fn cause_text(cause: Option<Cause>) -> &'static str {
    match cause {
        Some(Cause::ProcessGone) => "its process is gone",
        Some(Cause::PidReused) => "its pid now belongs to another process",
        Some(Cause::Silent) => "it stopped sending heartbeats",
        Some(Cause::Ended) => "its session ended",
        None => "it is dead",
    }
}

fn code_list(items: &[String]) -> String {
    items
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `why KEY` / `why [KEY] --path PATTERN…`.
pub fn execute(ctx: &Ctx, a: crate::cli::WhyArgs) -> Result<Report> {
    let paths = crate::engine::paths::resolve(ctx, &a.paths)?;
    let key = match a.key {
        Some(k) => k,
        None => crate::key::for_paths(&paths)?,
    };
    run(ctx, &key, paths)
}

/// A wait-for cycle in words: agents and keys (in code) in turn, joined by arrows.
fn cycle_words(cycle: &[String]) -> String {
    cycle
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i % 2 == 1 {
                format!("`{s}`")
            } else {
                s.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

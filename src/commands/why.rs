//! `why KEY`: plain words on whether this agent can check KEY out now, and why not.

use crate::clock::with_relative;
use crate::engine::dry::DryRun;
use crate::engine::take::{Join, Request, attempt, with_registered_pid};
use crate::engine::{Ctx, Judge, ReapReason};
use crate::error::{Outcome, Result};
use crate::liveness::{Cause, State};
use crate::report::{CheckoutReport, Report, WhyNext, WhyReport};
use crate::store::Slot;

pub fn run(ctx: &Ctx, key: &str, paths: Vec<String>) -> Result<Report> {
    crate::key::validate(key)?;
    let me = ctx.agent_id().ok();
    let mut reasons = Vec::new();
    let mut can = true;
    let mut state = "free";
    // Your place in the key's queue, and who holds the key (alive), when known.
    let mut position = None;
    // The push of the reservation's message, when the key is reserved.
    let mut delivery = None;
    let mut holder: Option<String> = None;
    if let Some(store) = ctx.existing_store()? {
        let now = ctx.now;
        if let Some(f) = store.frozen(key, &now)? {
            can = false;
            state = "frozen";
            reasons.push(format!(
                "It is frozen by {} until {}{}{}. Nobody can check it out until then.",
                f.by,
                with_relative(&f.until, &now),
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
        let mut judge = Judge::new(ctx, &*store);
        let own = store.read(key)?;
        let queue = store.read_queue(key)?;
        let with_slots = crate::engine::slots::Holders::read(&*store, key, Some(&queue), &own)?;
        if let Some(h) = &with_slots {
            let mut live = Vec::new();
            for r in &h.records {
                if !r.breakable(&now) && !judge.holder(r)?.dead() {
                    live.push(r);
                }
            }
            // Yours unless it has ended for you (as `checkout` judges it).
            let mine = match me.as_deref().and_then(|m| h.of(m)) {
                Some(r) if judge.own_end(r)?.is_none() => Some(r),
                _ => None,
            };
            let others_reserved = queue
                .reservations
                .iter()
                .filter(|r| Some(r.agent.as_str()) != me.as_deref())
                .count();
            let held: Vec<String> = live
                .iter()
                .map(|r| match r.slot {
                    Some(n) => format!("{} (slot {n}, token {})", r.agent.label(), r.token),
                    None => format!("{} (token {})", r.agent.label(), r.token),
                })
                .collect();
            if let Some(r) = mine {
                state = "yours";
                reasons.push(format!(
                    "You hold slot {} of its {} (token {}); your lease ends {}. Checking it out again renews it.",
                    r.slot.unwrap_or(1),
                    h.capacity,
                    r.token,
                    with_relative(&r.expires_at, &now)
                ));
            } else if live.len() + others_reserved < h.capacity as usize
                || queue
                    .reserved_for(me.as_deref().unwrap_or_default())
                    .is_some()
            {
                reasons.push(format!(
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
                can = false;
                state = "held";
                holder = live.first().map(|r| r.agent.id.clone());
                reasons.push(if live.len() >= h.capacity as usize {
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
        }
        match if with_slots.is_some() {
            Slot::Free
        } else {
            own
        } {
            Slot::Corrupt { path, problem } if crate::error::newer_format(&problem) => {
                can = false;
                state = "corrupt";
                reasons.push(format!(
                    "Its record at {} was written by a newer tasklock ({problem}).",
                    path.display()
                ));
            }
            Slot::Corrupt { path, problem } => {
                can = false;
                state = "corrupt";
                reasons.push(format!(
                    "Its record at {} is damaged ({problem}), so nobody can check it out. If nobody works on it, `tasklock {}` removes it (audited).",
                    path.display(),
                    crate::key::Line::new("release").arg(key).flag("--force").render(&[])
                ));
            }
            Slot::Held(r) if me.as_deref() == Some(r.agent.id.as_str()) => {
                // Judged as `checkout` would judge it, without ending it here (a read).
                let end = judge.own_end(&r)?;
                if let Some((ReapReason::AgentDeath, cause)) = end {
                    state = "ended";
                    reasons.push(format!(
                        "You held it (token {}), but {}; the checkout has ended. Checking it out again gives a new token.",
                        r.token,
                        cause_text(cause)
                    ));
                } else if end.is_some() {
                    reasons.push(format!(
                        "You held it, but your lease ran out {}; the checkout is lost. Checking it out again gives a new token.",
                        with_relative(&r.expires_at, &now)
                    ));
                } else {
                    state = "yours";
                    reasons.push(format!(
                        "You hold it (token {}); your lease ends {}. Checking it out again renews it.",
                        r.token,
                        with_relative(&r.expires_at, &now)
                    ));
                }
            }
            Slot::Held(r) => {
                let judgement = judge.holder(&r)?;
                let who = match &r.agent.name {
                    Some(n) => format!("{} ({n})", r.agent.id),
                    None => r.agent.id.clone(),
                };
                if r.breakable(&now) {
                    state = "ended";
                    reasons.push(format!(
                        "{who} held it, but the lease ran out {}; the next checkout takes it over.",
                        with_relative(&r.expires_at, &now)
                    ));
                } else if judgement.dead() {
                    let cause = cause_text(judgement.cause);
                    state = "ended";
                    reasons.push(format!(
                        "{who} holds it, but {cause}; the next checkout takes it over."
                    ));
                } else {
                    can = false;
                    state = "held";
                    holder = Some(who.clone());
                    let liveness = match judgement.state {
                        State::Stalled => "stalled (no recent heartbeat, but not dead yet)",
                        _ => "alive",
                    };
                    reasons.push(format!(
                        "{who} holds it (token {}) since {}; it is {liveness}, and its lease ends {}.",
                        r.token,
                        with_relative(&r.acquired_at, &now),
                        with_relative(&r.expires_at, &now)
                    ));
                    if let Some(reason) = &r.reason {
                        reasons.push(format!("Their reason: {reason}."));
                    }
                }
            }
            Slot::Free => {}
        }
        if let Slot::Held(r) = store.read(key)?
            && !r.paths.is_empty()
        {
            reasons.push(format!(
                "Its checkout covers the paths {}.",
                code_list(&r.paths)
            ));
        }
        // The paths asked about: other agents' checkouts (and reservations) that overlap.
        let mine = crate::engine::paths::compile(&paths);
        let asker = me.clone().unwrap_or_default();
        for o in crate::engine::paths::held_overlaps(&*store, &asker, key, &mine)? {
            let r = &o.record;
            let who = r.agent.label();
            let meets = format!(
                "`{}` meets `{}` of `{}` (both cover `{}`)",
                o.mine, o.theirs, r.key, o.witness
            );
            if judge.reap_reason(r)?.is_some() {
                reasons.push(format!(
                    "Your path {meets}, held by {who}, whose lease is over or who is dead; the next checkout takes it over."
                ));
                continue;
            }
            can = false;
            if state == "free" || state == "ended" {
                state = "paths_held";
            }
            holder.get_or_insert(who.clone());
            reasons.push(format!(
                "Your path {meets}, held by {who} (token {}); its lease ends {}.",
                r.token,
                with_relative(&r.expires_at, &now)
            ));
        }
        for o in crate::engine::paths::reserved_overlaps(ctx, &*store, &asker, key, &mine)? {
            can = false;
            if state == "free" || state == "ended" {
                state = "reserved";
            }
            reasons.push(format!(
                "Your path `{}` meets `{}`, reserved for {}, the head of the queue of `{}`, until {}.",
                o.mine,
                o.theirs,
                o.waiter.agent,
                o.queue.key,
                with_relative(&o.view().until, &now)
            ));
        }
        let queue = store.read_queue(key)?;
        position = me.as_deref().and_then(|m| queue.position(m));
        if let Some(res) = queue.reservation()
            && res.until > now
            && state != "held"
            && state != "paths_held"
        {
            if me.as_deref() == Some(res.agent.as_str()) {
                state = "reserved_for_you";
                reasons.push(format!(
                    "It is reserved for you, the head of its queue, until {}: check it out now.",
                    with_relative(&res.until, &now)
                ));
            } else {
                can = false;
                if state == "free" || state == "ended" {
                    state = "reserved";
                }
                reasons.push(format!(
                    "It is reserved for {}, the head of its queue, until {}.",
                    res.agent,
                    with_relative(&res.until, &now)
                ));
            }
            // How the head was told.
            let told = match &res.message {
                Some(id) => store.message(&res.agent, id)?,
                None => None,
            };
            if let Some(d) = told.and_then(|m| m.delivery) {
                let who = if me.as_deref() == Some(res.agent.as_str()) {
                    "You were".to_string()
                } else {
                    format!("{} was", res.agent)
                };
                reasons.push(if d.delivered && d.via == crate::store::VIA_MONITOR {
                    format!(
                        "{who} told by the session's monitor (`tasklock inbox --follow`) {}; the reservation runs from then.",
                        with_relative(&d.at, &now)
                    )
                } else if d.delivered {
                    format!(
                        "{who} told by a push into the session {}; the reservation runs from then.",
                        with_relative(&d.at, &now)
                    )
                } else {
                    format!(
                        "{who} told through the inbox only, read at the next prompt or tool call: pushing into the session failed {}: {}.",
                        with_relative(&d.at, &now),
                        d.error.as_deref().unwrap_or("unknown")
                    )
                });
                delivery = Some(d);
            }
        }
        if !queue.waiters.is_empty() {
            let names: Vec<&str> = queue.waiters.iter().map(|w| w.agent.as_str()).collect();
            reasons.push(format!(
                "{} waiting in its queue: {}.",
                names.len(),
                names.join(", ")
            ));
        }
        if let Some(m) = me.as_deref()
            && !can
            && matches!(state, "held" | "paths_held" | "reserved")
        {
            reasons.extend(cycle_reasons(
                ctx,
                &*store,
                m,
                key,
                &paths,
                position.is_some(),
            )?);
        }
        match position {
            Some(1) if state == "held" || state == "paths_held" => reasons.push(
                "You are first in its queue: when it is released, it is reserved for you.".into(),
            ),
            Some(p) if state != "reserved_for_you" => {
                reasons.push(format!("You are number {p} in its queue."))
            }
            _ => {}
        }
    }
    // What `checkout KEY` would decide now: the checkout's own decision, made without
    // acting. Where the words above judged otherwise, the decision stands.
    let mut deadlock_via = None;
    let mut decision = None;
    if me.is_some()
        && state != "corrupt"
        && let Some(store) = ctx.existing_store()?
    {
        match decide(ctx, &*store, key, &paths) {
            Ok(d) => {
                let mut answer = Answer {
                    state,
                    can,
                    reasons: &mut reasons,
                    deadlock_via: &mut deadlock_via,
                };
                answer.follow(&d, me.as_deref().unwrap_or_default());
                (state, can) = (answer.state, answer.can);
                decision = Some(d.outcome);
            }
            Err(e) => {
                can = false;
                reasons.push(format!(
                    "A checkout now would fail: {}.",
                    e.to_string().trim_end_matches('.')
                ));
            }
        }
    }
    // A freeze outranks every other state: nothing else matters until it ends.
    if reasons.iter().any(|r| r.starts_with("It is frozen")) && state != "corrupt" {
        state = "frozen";
        can = false;
    }
    if reasons.is_empty() {
        reasons.push("Nobody holds it, nobody waits for it, and it is not frozen.".into());
    }
    let advice = match state {
        "yours" => WhyNext::KeepWorking,
        "reserved_for_you" if can => WhyNext::CheckoutReserved,
        _ if can => WhyNext::Checkout,
        "frozen" => WhyNext::Frozen,
        "corrupt"
            if reasons
                .iter()
                .any(|r| r.contains("written by a newer tasklock")) =>
        {
            WhyNext::Upgrade
        }
        "corrupt" => WhyNext::Corrupt,
        "secret_refused" => WhyNext::Secret,
        "deadlock" => WhyNext::Deadlock {
            queue: deadlock_via.unwrap_or_default(),
        },
        // Already waiting: say where, never "queue" again.
        _ => match (position, holder) {
            (Some(1), Some(h)) => WhyNext::FirstInLine { holder: h },
            (Some(p), _) => WhyNext::InLine { position: p },
            _ => WhyNext::Queue,
        },
    };
    let next = crate::render::markdown::why_next(&advice, key, &paths, &Default::default());
    Ok(Report::Why(WhyReport {
        command: "why",
        now: ctx.now,
        key: key.to_string(),
        agent: me,
        can_checkout: can,
        state: state.to_string(),
        reasons,
        next,
        paths,
        delivery,
        advice,
        decision,
    }))
}

/// What `checkout KEY` (with `paths`) would decide for the caller now: [`attempt`]'s
/// report, made on a [`DryRun`] of the store, so that nothing is written; or the error
/// the checkout would fail with (bad settings, a key with slots asked for paths).
fn decide(
    ctx: &Ctx,
    store: &dyn crate::store::Store,
    key: &str,
    paths: &[String],
) -> Result<CheckoutReport> {
    let mut req = Request::new(ctx, None, None, None)?;
    req.paths = paths.to_vec();
    DryRun::new(store).run(|store, guard| {
        let req = with_registered_pid(ctx, store, guard, req)?;
        attempt(ctx, store, guard, &req, key, Join::No)
    })
}

/// `why`'s answer as it is being made, to be brought in line with the checkout's
/// decision.
struct Answer<'a> {
    state: &'static str,
    can: bool,
    reasons: &'a mut Vec<String>,
    deadlock_via: &'a mut Option<String>,
}

impl Answer<'_> {
    /// The decision `d` of a checkout by `me` stands: the state and verdict follow it,
    /// with a reason where the words above said otherwise.
    fn follow(&mut self, d: &CheckoutReport, me: &str) {
        match d.outcome {
            Outcome::Granted => {
                if !matches!(self.state, "free" | "ended" | "reserved_for_you") {
                    self.reasons.push(
                        "What stood in the way has ended (a lease ran out, a holder or the agent a reservation was for is gone, or a reservation lapsed): a checkout now takes it.".into(),
                    );
                    self.state = if d.took_over.is_some() {
                        "ended"
                    } else {
                        "free"
                    };
                }
                self.can = true;
            }
            Outcome::AlreadyHeld => {
                self.state = "yours";
                self.can = true;
            }
            Outcome::Frozen => {
                self.state = "frozen";
                self.can = false;
            }
            Outcome::SecretRefused => {
                self.reasons.push(
                    "Your checkout is bound to a secret you did not give (`TASKLOCK_SECRET`): a checkout would be refused (exit 4).".into(),
                );
                self.state = "secret_refused";
                self.can = false;
            }
            Outcome::Deadlock => {
                self.deadlock(&d.cycle);
                self.can = false;
            }
            _ => self.refused(d, me),
        }
        if !self.can {
            self.unpromise();
        }
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
        // A cycle the words above found already stands for this one.
        self.reasons
            .retain(|r| !r.starts_with("Taking it now would close"));
        let via = cycle.get(1).cloned().unwrap_or_default();
        self.reasons.push(format!(
            "Taking it now would close a wait-for cycle through your place in the queue of `{via}`: {}. A checkout would be refused (deadlock, exit 5).",
            cycle_words(cycle)
        ));
        self.state = "deadlock";
        *self.deadlock_via = Some(via);
    }

    /// A checkout would be refused (someone holds it or paths of it, or it is reserved).
    fn refused(&mut self, d: &CheckoutReport, me: &str) {
        self.can = false;
        if matches!(self.state, "held" | "paths_held" | "reserved") {
            return;
        }
        let reserved = d.reserved_for.as_ref().filter(|r| r.agent != me);
        self.state = if let Some(o) = d.overlaps.first() {
            if o.reserved { "reserved" } else { "paths_held" }
        } else if reserved.is_some() && d.holders.is_empty() && d.checkout.is_none() {
            "reserved"
        } else {
            "held"
        };
        if let Some(res) = reserved {
            self.reasons.push(format!(
                "Its queue goes first: a checkout now would find it reserved for {}, the head of its queue, until {}, and be refused.",
                res.agent,
                with_relative(&res.until, &d.now)
            ));
        } else if let Some(o) = d.overlaps.first() {
            self.reasons.push(format!(
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
            ));
        } else {
            self.reasons
                .push("A checkout now would be refused: it is not free for you.".into());
        }
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
        (Some(c), _) => vec![format!(
            "Waiting for it would close a wait-for cycle: {}. `checkout --queue` or `--wait` would be refused (deadlock, exit 5).",
            words(&c)
        )],
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

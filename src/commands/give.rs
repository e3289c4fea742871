//! `give KEY --to AGENT`: the holder hands its checkout to another live agent, for a
//! session that is named only once it has started (Codex's thread id). The receiver gets
//! a new fencing token, the lease from now, and is bound to its own secret; it is told
//! through its inbox.

use std::time::Duration;

use crate::duration::to_chrono;
use crate::engine::{Ctx, Judge, ReapReason, Scope, auto_release, queue, take};
use crate::error::{Error, Outcome, Result};
use crate::identity::Agent;
use crate::report::{CheckoutView, GiveReport, Report};
use crate::store::{AgentEntry, Event, MessageKind, Record, Slot};

pub fn run(ctx: &Ctx, key: &str, to: &str, timeout: Option<Duration>) -> Result<Report> {
    crate::key::validate(key)?;
    let (to, _) =
        crate::identity::resolve_id(Some(to)).map_err(|e| Error::Usage(format!("--to: {e}")))?;
    let me = ctx.agent()?;
    if to == me.id {
        return Err(Error::Usage(format!(
            "--to {to}: that is you; name the agent that is to hold the key"
        )));
    }
    let cfg = ctx.config()?;
    let lease = timeout.unwrap_or(cfg.lease);
    let report = |outcome, checkout: Option<&Record>, given_from: Option<u64>, cycle| {
        Ok(Report::Give(GiveReport {
            command: "give",
            now: ctx.now(),
            key: key.to_string(),
            to: to.clone(),
            outcome,
            checkout: checkout.map(CheckoutView::from),
            previous_token: given_from,
            cycle,
            dropped: Vec::new(),
        }))
    };
    let Some(store) = ctx.existing_store()? else {
        return report(Outcome::NoSuchCheckout, None, None, Vec::new());
    };
    store.transaction(|guard| {
        let giving = Giving {
            scope: Scope::new(ctx, &*store, guard),
            key,
            me: &me,
            to: &to,
        };
        let r = match giving.held()? {
            Ok(r) => r,
            Err((outcome, r)) => return report(outcome, r.as_ref(), None, Vec::new()),
        };
        let entry = match giving.receiver(&r, &cfg)? {
            Ok(entry) => entry,
            Err(outcome) => return report(outcome, Some(&r), None, Vec::new()),
        };
        let mut q = store.read_queue(key)?;
        // The rule a checkout's grant follows: a cycle the receiver's holding would
        // close is broken by dropping passive places on it; one that none breaks
        // refuses the give.
        let b = take::grant_breaks(ctx, &*store, guard, &to, key, &r.paths, &q)?;
        if let Some(cycle) = b.cycle {
            let mut ev = ctx.event(Event::Deadlock, &r);
            ev.holder = Some(to.clone());
            ev.detail = Some(format!("give to {to}: {}", cycle.join(" → ")));
            store.audit(guard, &ev)?;
            return report(Outcome::Deadlock, Some(&r), None, cycle);
        }
        if b.dropped.is_empty() {
            let given = giving.hand_over(&r, &entry, lease, &mut q)?;
            return report(Outcome::Given, Some(&given), Some(r.token), Vec::new());
        }
        queue::announcing(ctx, &*store, guard, || {
            let given = giving.hand_over(&r, &entry, lease, &mut q)?;
            let because = format!("{} gave `{key}` to {to}", me.id);
            for p in &b.dropped {
                queue::drop_place(ctx, &*store, guard, &p.agent, &p.key, &p.cycle, &because)?;
            }
            let mut out = report(Outcome::Given, Some(&given), Some(r.token), Vec::new())?;
            if let Report::Give(g) = &mut out {
                g.dropped = b.dropped;
            }
            Ok(out)
        })
    })
}

/// A give under the scope.
struct Giving<'a> {
    scope: Scope<'a>,
    key: &'a str,
    me: &'a Agent,
    to: &'a str,
}

impl Giving<'_> {
    /// The giver's own live checkout of the key, or the outcome that ends the give (with
    /// the checkout it is about).
    fn held(&self) -> Result<std::result::Result<Record, (Outcome, Option<Record>)>> {
        let (Scope { ctx, store, guard }, me) = (self.scope, &self.me.id);
        let mut judge = Judge::new(ctx, store);
        let r = match crate::engine::slots::read_mine(store, self.key, me)? {
            Slot::Free => return Ok(Err((Outcome::NoSuchCheckout, None))),
            Slot::Corrupt { path, problem } => {
                return Err(Error::Corrupt {
                    key: self.key.to_string(),
                    path,
                    problem,
                });
            }
            Slot::Held(r) if !r.held_by(me) => {
                if let Some(reason) = judge.reap_reason(&r)? {
                    auto_release(ctx, store, guard, &r, Some(me), reason)?;
                    return Ok(Err((Outcome::NoSuchCheckout, None)));
                }
                return Ok(Err((Outcome::NotHolder, Some(r))));
            }
            // A checkout whose process is gone is ended first, whoever asks: it has
            // ended, and there is nothing left to hand over.
            Slot::Held(r) if let Some((ReapReason::AgentDeath, _)) = judge.own_end(&r)? => {
                auto_release(ctx, store, guard, &r, Some(me), ReapReason::AgentDeath)?;
                return Ok(Err((Outcome::LeaseLost, Some(r))));
            }
            Slot::Held(r) => r,
        };
        if crate::engine::holder_refused(ctx, store, guard, &r, "give")?.is_some() {
            return Ok(Err((Outcome::SecretRefused, Some(r))));
        }
        if r.expired_for_holder(&ctx.now()) {
            auto_release(ctx, store, guard, &r, Some(me), ReapReason::Timeout)?;
            return Ok(Err((Outcome::LeaseLost, Some(r))));
        }
        // Refused the way a checkout of the key would be: a freeze keeps new holders out.
        if store.frozen(self.key, &ctx.now())?.is_some() {
            return Ok(Err((Outcome::Frozen, Some(r))));
        }
        Ok(Ok(r))
    }

    /// The receiver: a registered agent that has not ended, is not dead and holds no
    /// slot of the key; else the outcome that refuses the give.
    fn receiver(
        &self,
        r: &Record,
        cfg: &crate::config::Config,
    ) -> Result<std::result::Result<AgentEntry, Outcome>> {
        let (store, now, to) = (self.scope.store, &self.scope.ctx.now(), self.to);
        let Some(entry) = store.read_agent(to)? else {
            return Ok(Err(Outcome::UnknownAgent));
        };
        if crate::liveness::judge_entry(&entry, now, cfg).dead() {
            return Ok(Err(Outcome::AgentDead));
        }
        if r.slot.is_some()
            && store
                .read_slots(self.key)?
                .into_iter()
                .filter_map(Slot::held)
                .any(|s| s.held_by(to) && !s.expired_for_holder(now))
        {
            return Ok(Err(Outcome::ReceiverHolds));
        }
        Ok(Ok(entry))
    }

    /// The checkout written as the receiver's, with a new token and the lease from now;
    /// the queue, the audit log and the receiver told. Returns the new record.
    fn hand_over(
        &self,
        r: &Record,
        entry: &AgentEntry,
        lease: Duration,
        q: &mut crate::store::Queue,
    ) -> Result<Record> {
        let (Scope { ctx, store, guard }, key, to) = (self.scope, self.key, self.to);
        let receiver = Agent {
            id: entry.id.clone(),
            name: entry.name.clone(),
            host: entry.host.clone(),
            boot_id: entry.boot_id.clone(),
            pid_ns: entry.pid_ns.clone(),
            pid: entry.pid,
            pid_start: entry.pid_start,
            parent: entry.parent.clone(),
            user: None,
        };
        // A new holder, a new grant: a fenced resource must tell the receiver's writes
        // from the giver's, so the token is drawn anew (docs/file-format.md).
        let token = store.next_token(guard)?;
        // Bound to the receiver's secret, as its own checkouts are: a Claude Code
        // session's commands carry it (the hooks export it), a Codex thread's do not
        // (Codex lets hooks set no environment for its commands), so a checkout given
        // to a thread is as unbound as the thread's own, or it could never release it.
        let codex = entry
            .reach
            .as_ref()
            .is_some_and(|r| r.via == crate::store::Via::Codex);
        let given = Record {
            token,
            agent: receiver,
            acquired_at: ctx.now(),
            renewed_at: ctx.now(),
            expires_at: ctx.now() + to_chrono(lease),
            owner: if codex { None } else { entry.owner.clone() },
            ..r.clone()
        };
        store.replace(guard, &given)?;
        let done = format!("`{key}` was given to {to}");
        crate::warnings::after_change(
            &format!("{done}, but its queue was not updated"),
            queue::granted(store, guard, q, to),
        );
        let mut ev = ctx.agent_event(Event::Give, key, self.me);
        ev.token = Some(token);
        ev.paths = given.paths.clone();
        ev.holder = Some(to.to_string());
        ev.detail = Some(format!("token {} → {token}", r.token));
        crate::warnings::after_change(
            &format!("{done}, but the audit log was not written"),
            store.audit(guard, &ev),
        );
        let body = format!(
            "{} gave you its checkout (token {token}, lease until {}); it is yours now: release it with `tasklock release` when done",
            self.me.id,
            crate::clock::rfc3339(&given.expires_at)
        );
        crate::warnings::after_change(
            &format!("{done}, but it was not told"),
            self.scope
                .notify(to, Some(&self.me.id), MessageKind::Given, key, &body)
                .map(drop),
        );
        Ok(given)
    }
}

/// `give KEY --to AGENT`.
pub fn execute(ctx: &Ctx, a: crate::cli::GiveArgs) -> Result<Report> {
    run(ctx, &a.key, &a.to, a.timeout)
}

//! The rules of tasklock, the same on every store: who may take a key, when a holder is
//! dead or its lease is over, ending checkouts on a holder's behalf, queues and their
//! handoff, how an ended checkout is remembered for the next holder. Commands parse
//! their arguments, call in here and return a report.
//!
//! The engine imports the stores, `report.rs`, `liveness.rs`, the basic layer, and of the
//! clients only `clients::wake` (pushing a message into a session); never a command or
//! the renderer.

pub mod backlog;
pub mod bind;
pub mod claim;
pub mod decide;
pub mod deliver;
pub mod dry;
pub mod edits;
pub mod fleet;
pub mod notify;
pub mod paths;
pub mod queue;
pub mod slots;
pub mod stamps;
pub mod take;
pub mod waits;
pub mod worktree;

use std::collections::HashMap;
use std::path::PathBuf;

use crate::clock::Time;
use crate::config::Config;
use crate::error::Result;
use crate::identity::{self, Agent};
use crate::liveness::{self, Cause, Judgement};
use crate::report::{AgentView, Previous, Reaped};
use crate::store::{
    AgentEntry, AuditEvent, EndHow, Ended, Event, FileStore, Guard, MessageKind, Note, Record,
    Slot, Store,
};

/// What every command gets: resolved global options and "now".
#[derive(Clone)]
pub struct Ctx {
    pub dir: PathBuf,
    pub now: Time,
    pub agent_flag: Option<String>,
    pub name_flag: Option<String>,
    /// `config.yaml` as read (or why it could not be), at most once per command.
    pub cfg: std::cell::OnceCell<std::result::Result<Config, (PathBuf, String)>>,
}

impl Ctx {
    /// A command's context, the one way to make one: the lock directory, the caller as
    /// the options name it, "now" from the clock, `config.yaml` not read yet.
    pub fn new(dir: PathBuf, agent_flag: Option<String>, name_flag: Option<String>) -> Result<Ctx> {
        Ok(Ctx {
            dir,
            now: crate::clock::now()?,
            agent_flag,
            name_flag,
            cfg: Default::default(),
        })
    }

    /// [`Ctx::new`] for a command that judges time: a PostgreSQL store judges it by the
    /// server's clock, so connect first (the connection serves the whole command) and
    /// take "now" again.
    pub fn connected(
        dir: PathBuf,
        agent_flag: Option<String>,
        name_flag: Option<String>,
    ) -> Result<Ctx> {
        let mut ctx = Ctx::new(dir, agent_flag, name_flag)?;
        if crate::store::pg::open_early(ctx.config().ok().as_ref())? {
            ctx.now = crate::clock::now()?;
        }
        Ok(ctx)
    }

    /// The same context at the current time, with the agent id fixed (long-running commands).
    pub fn at_now(&self, agent_id: &str) -> Result<Ctx> {
        Ok(Ctx {
            now: crate::clock::now()?,
            agent_flag: Some(agent_id.to_string()),
            ..self.clone()
        })
    }

    pub fn agent(&self) -> Result<Agent> {
        identity::current(self.agent_flag.as_deref(), self.name_flag.as_deref())
    }

    pub fn agent_id(&self) -> Result<String> {
        identity::resolve_id(self.agent_flag.as_deref()).map(|(id, _)| id)
    }

    /// The store, created if needed. The settings are read first, so that no command
    /// ever reads `config.yaml` while holding the guard (a slow or hostile file must not
    /// hold up every other agent); the store uses the defaults when the file is bad.
    pub fn open_store(&self) -> Result<Box<dyn Store>> {
        let cfg = self.config().unwrap_or_default();
        if let Some(pg) = crate::store::pg::from_env_or_config(Some(&cfg))? {
            return Ok(pg);
        }
        let store = FileStore::open_or_create(&self.dir)?;
        Store::share_config(&store, &cfg);
        Ok(Box::new(store))
    }

    /// The store if the lock directory exists, with the settings read first (as
    /// [`Ctx::open_store`]).
    pub fn existing_store(&self) -> Result<Option<Box<dyn Store>>> {
        let cfg = self.config().unwrap_or_default();
        if let Some(pg) = crate::store::pg::from_env_or_config(Some(&cfg))? {
            return Ok(Some(pg));
        }
        let Some(store) = FileStore::open_existing(&self.dir)? else {
            return Ok(None);
        };
        Store::share_config(&store, &cfg);
        Ok(Some(Box::new(store)))
    }

    /// `config.yaml`, read at most once per command; a bad file is remembered too, so
    /// it is never read again (under the guard) to give the same error.
    pub fn config(&self) -> Result<Config> {
        let r = self.cfg.get_or_init(|| {
            let c = Config::load(&self.dir).map_err(|e| match e {
                crate::error::Error::Config { path, message } => (path, message),
                other => (self.dir.join(Config::FILE), other.to_string()),
            });
            if c.as_ref().is_ok_and(|c| !c.notify.is_empty()) {
                notify::configured(&self.dir);
            }
            c
        });
        r.clone()
            .map_err(|(path, message)| crate::error::Error::Config { path, message })
    }

    /// An event about a checkout record: its key, holder and token.
    pub fn event(&self, event: Event, record: &Record) -> AuditEvent {
        let mut ev = self.agent_event(event, &record.key, &record.agent);
        ev.token = Some(record.token);
        ev.paths = record.paths.clone();
        ev
    }

    /// An event about `agent` and `key`.
    pub fn agent_event(&self, event: Event, key: &str, agent: &Agent) -> AuditEvent {
        let mut ev = AuditEvent::new(self.now, event, key, &agent.id);
        ev.name = agent.name.clone();
        ev
    }
}

pub use crate::report::ReapReason;

/// Release a record under the guard on the holder's behalf (audited as auto_release).
pub fn auto_release(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &crate::store::Guard,
    record: &Record,
    by: Option<&str>,
    reason: ReapReason,
) -> Result<()> {
    auto_release_for(ctx, store, guard, record, by, reason, None)
}

/// As [`auto_release`]; `taker` is an agent about to take the key itself, which needs
/// no handoff message if it is the head of the queue.
pub fn auto_release_for(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &crate::store::Guard,
    record: &Record,
    by: Option<&str>,
    reason: ReapReason,
    taker: Option<&str>,
) -> Result<()> {
    store.remove(guard, &record.key, record.slot, Some(&record.paths))?;
    worktree::ended(ctx, record);
    // The checkout has ended: what follows is bookkeeping, and its failure a warning
    // (the command that ended it goes on, and never exits 1 with the record gone).
    crate::warnings::after_change(
        &format!(
            "the ended checkout of `{}` was removed, but a later step failed",
            record.key
        ),
        after_auto_release(ctx, store, guard, record, by, reason, taker),
    );
    Ok(())
}

fn after_auto_release(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &crate::store::Guard,
    record: &Record,
    by: Option<&str>,
    reason: ReapReason,
    taker: Option<&str>,
) -> Result<()> {
    let mut ev = ctx.event(Event::AutoRelease, record);
    ev.reason = Some(reason.as_str().into());
    ev.by = by.filter(|b| *b != record.agent.id).map(str::to_string);
    store.audit(guard, &ev)?;
    let cause = match reason {
        ReapReason::AgentDeath => death_cause(ctx, store, record)?,
        _ => None,
    };
    record_end(
        ctx,
        store,
        guard,
        record,
        reason.into(),
        cause,
        ev.by.clone(),
        None,
    )?;
    if let Some(by) = ev.by.as_deref() {
        let (kind, body) = match reason {
            ReapReason::Timeout => (
                MessageKind::LeaseExpired,
                "your lease ran out and the checkout was released; check it out again before more work on it",
            ),
            ReapReason::AgentDeath => (
                MessageKind::AgentDeath,
                "you were judged dead (process gone or heartbeats stopped) and the checkout was released",
            ),
            ReapReason::SessionEnd => (
                MessageKind::SessionEnd,
                "your session ended and the checkout was released",
            ),
            ReapReason::SubagentEnd => (
                MessageKind::SubagentEnd,
                "your subagent stopped and the checkout was released",
            ),
        };
        queue::notify(
            ctx,
            store,
            guard,
            &record.agent.id,
            Some(by),
            kind,
            &record.key,
            body,
        )?;
    }
    queue::after_release(ctx, store, guard, record, taker)
}

/// Why a holder ended as `agent_death` was judged dead, judged again for the record.
fn death_cause(ctx: &Ctx, store: &dyn Store, record: &Record) -> Result<Option<Cause>> {
    let entry = store.read_agent(&record.agent.id)?;
    let cfg = store.config().unwrap_or_default();
    Ok(liveness::judge_record(record, entry.as_ref(), &ctx.now, &cfg).cause)
}

/// A change under way: the command's context, the store and the guard of the scope it
/// holds, which the engine's writers take together instead of one parameter each.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub ctx: &'a Ctx,
    pub store: &'a dyn Store,
    pub guard: &'a Guard,
}

impl<'a> Scope<'a> {
    pub fn new(ctx: &'a Ctx, store: &'a dyn Store, guard: &'a Guard) -> Self {
        Scope { ctx, store, guard }
    }

    /// Remember how a key's checkout ended, for its next holder.
    pub fn record_end(
        &self,
        record: &Record,
        how: EndHow,
        cause: Option<Cause>,
        by: Option<String>,
        note: Option<String>,
    ) -> Result<()> {
        let cause = cause.and_then(|c| {
            serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
        });
        self.store.write_ended(
            self.guard,
            &Ended {
                version: 1,
                key: record.key.clone(),
                agent: record.agent.clone(),
                token: record.token,
                acquired_at: record.acquired_at,
                ended_at: self.ctx.now,
                how,
                cause,
                by,
                note,
            },
        )
    }
}

/// [`Scope::record_end`], for the callers that do not hold a [`Scope`] yet.
#[allow(clippy::too_many_arguments)]
pub fn record_end(
    ctx: &Ctx,
    store: &dyn Store,
    guard: &crate::store::Guard,
    record: &Record,
    how: EndHow,
    cause: Option<Cause>,
    by: Option<String>,
    note: Option<String>,
) -> Result<()> {
    Scope::new(ctx, store, guard).record_end(record, how, cause, by, note)
}

/// A grant of `key`: its fencing token, and what its next holder should know (`None`
/// when nothing is known): the key's ended fact and the tail of its notes.
pub fn grant_token(
    store: &dyn Store,
    g: &Guard,
    key: &str,
) -> Result<(u64, Option<Box<Previous>>)> {
    let (token, (ended, notes)) = store.grant_token(g, key, NOTES_SHOWN)?;
    Ok((token, previous(token, ended, notes)))
}

fn previous(token: u64, ended: Option<Ended>, notes: Vec<Note>) -> Option<Box<Previous>> {
    let ended = ended.filter(|e| e.token < token);
    if ended.is_none() && notes.is_empty() {
        return None;
    }
    Some(Box::new(match ended {
        Some(e) => Previous {
            agent: Some(AgentView {
                id: e.agent.id,
                name: e.agent.name,
                host: e.agent.host,
                pid: e.agent.pid,
                parent: e.agent.parent,
                user: e.agent.user,
            }),
            token: Some(e.token),
            ended_at: Some(e.ended_at),
            ended: Some(e.how),
            cause: e.cause,
            by: e.by,
            note: e.note,
            notes,
        },
        None => Previous {
            agent: None,
            token: None,
            ended_at: None,
            ended: None,
            cause: None,
            by: None,
            note: None,
            notes,
        },
    }))
}

/// Judges holders: lease end, then death, with registry entries and config read once.
pub struct Judge<'a> {
    ctx: &'a Ctx,
    store: &'a dyn Store,
    cfg: Option<Config>,
    entries: HashMap<String, Option<AgentEntry>>,
    /// `entries` holds the whole registry: an id not in it has no entry.
    whole: bool,
    _scope: liveness::Judging,
}

/// Above this many holders to judge, one read of the whole registry costs less than one
/// read per holder.
const REGISTRY_READ_WHOLE: usize = 16;

impl<'a> Judge<'a> {
    pub fn new(ctx: &'a Ctx, store: &'a dyn Store) -> Self {
        Judge {
            ctx,
            store,
            cfg: None,
            entries: HashMap::new(),
            whole: false,
            _scope: liveness::Judging::begin(),
        }
    }

    pub fn config(&mut self) -> Result<&Config> {
        if self.cfg.is_none() {
            self.cfg = Some(self.ctx.config()?);
        }
        Ok(self.cfg.as_ref().expect("just set"))
    }

    /// About to judge the holders of `records`: when they are many, the registry is read
    /// whole, in one read, instead of one entry at a time.
    pub fn expect<'r>(&mut self, records: impl IntoIterator<Item = &'r Record>) -> Result<()> {
        self.expect_agents(records.into_iter().map(|r| r.agent.id.as_str()))
    }

    /// About to judge the agents `ids`: as [`Judge::expect`].
    pub fn expect_agents<'i>(&mut self, ids: impl IntoIterator<Item = &'i str>) -> Result<()> {
        let holders: std::collections::HashSet<&str> = ids.into_iter().collect();
        if !self.whole && holders.len() > REGISTRY_READ_WHOLE {
            self.entries = self
                .store
                .scan_agents()?
                .into_iter()
                .map(|e| (e.id.clone(), Some(e)))
                .collect();
            self.whole = true;
        }
        Ok(())
    }

    pub fn entry(&mut self, id: &str) -> Result<Option<AgentEntry>> {
        if self.whole && !self.entries.contains_key(id) {
            return Ok(None);
        }
        if !self.entries.contains_key(id) {
            let e = self.store.read_agent(id)?;
            self.entries.insert(id.to_string(), e);
        }
        Ok(self.entries[id].clone())
    }

    /// Forget cached entries (after the guard is taken, to judge on fresh data).
    pub fn refresh(&mut self) {
        self.entries.clear();
        self.whole = false;
        self._scope.forget();
    }

    pub fn holder(&mut self, r: &Record) -> Result<Judgement> {
        let entry = self.entry(&r.agent.id)?;
        let now = self.ctx.now;
        let cfg = self.config()?.clone();
        Ok(liveness::judge_record(r, entry.as_ref(), &now, &cfg))
    }

    /// May someone other than the holder end this checkout now, and why?
    pub fn reap_reason(&mut self, r: &Record) -> Result<Option<ReapReason>> {
        Ok(self.reap_cause(r)?.map(|(reason, _)| reason))
    }

    /// As [`Judge::reap_reason`], with the cause of death when the holder is dead.
    pub fn reap_cause(&mut self, r: &Record) -> Result<Option<(ReapReason, Option<Cause>)>> {
        if r.breakable(&self.ctx.now) {
            return Ok(Some((ReapReason::Timeout, None)));
        }
        let j = self.holder(r)?;
        Ok(j.dead().then_some((ReapReason::AgentDeath, j.cause)))
    }

    /// Has the checkout `r` ended for its own agent, asking now: its lease ran out (never
    /// revived), or its process is gone (or its pid reused, or the agent ended)? A
    /// checkout bound to a dead process is dead for everyone, its own agent id included:
    /// renewing never revives it. Only silence is answered by the agent asking.
    pub fn own_end(&mut self, r: &Record) -> Result<Option<(ReapReason, Option<Cause>)>> {
        if r.expired_for_holder(&self.ctx.now) {
            return Ok(Some((ReapReason::Timeout, None)));
        }
        let entry = self.entry(&r.agent.id)?;
        Ok(own_end(r, entry.as_ref(), &self.ctx.now))
    }
}

/// The rule of [`Judge::own_end`], with the holder's registry entry in hand (a beat has
/// it: no read). Silence is not judged, so no setting is read: a release or a note of
/// one's own checkout works with a settings file that cannot be read.
pub fn own_end(
    r: &Record,
    entry: Option<&AgentEntry>,
    now: &Time,
) -> Option<(ReapReason, Option<Cause>)> {
    if r.expired_for_holder(now) {
        return Some((ReapReason::Timeout, None));
    }
    liveness::gone_for_good(&r.agent, entry).map(|cause| (ReapReason::AgentDeath, Some(cause)))
}

/// What the reaper did with one key.
#[allow(clippy::large_enum_variant)]
pub enum Settled {
    /// Its checkout was ended on the holder's behalf.
    Ended {
        record: Record,
        reason: ReapReason,
        cause: Option<Cause>,
    },
    /// Nothing to end (any more): the key as it is now.
    Kept(Slot),
}

/// One checkout: its key, and the slot it holds of a key with slots.
pub type Checkout = (String, Option<u32>);

/// Decides whether a checkout may be ended now, and why.
pub type Rule<'r> =
    dyn FnMut(&Record, &mut Judge) -> Result<Option<(ReapReason, Option<Cause>)>> + 'r;

/// The usual rule: a lease over by more than the skew margin, or a dead holder.
pub fn lapsed(r: &Record, judge: &mut Judge) -> Result<Option<(ReapReason, Option<Cause>)>> {
    judge.reap_cause(r)
}

/// The one reaper. `keys` were judged endable outside the scope (reads are cheap and
/// may be stale); inside it each is read and judged again by `rule`, and ended only if
/// it still may be. `by` is the agent on whose behalf the command acts. Returns, key by
/// key, what was ended and what was kept.
pub fn reap(
    ctx: &Ctx,
    store: &dyn Store,
    judge: &mut Judge,
    keys: Vec<Checkout>,
    by: Option<&str>,
    rule: &mut Rule<'_>,
) -> Result<Vec<(String, Settled)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    store.transaction(|g| reap_in(ctx, store, g, judge, keys, by, rule))
}

/// As [`reap`], inside a scope the caller holds.
pub fn reap_in(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    judge: &mut Judge,
    keys: Vec<Checkout>,
    by: Option<&str>,
    rule: &mut Rule<'_>,
) -> Result<Vec<(String, Settled)>> {
    judge.refresh();
    // The keys it hands on are judged together for cycles (queue::announcing).
    queue::announcing(ctx, store, g, || {
        let mut out = Vec::with_capacity(keys.len());
        for (key, n) in keys {
            let slot = slots::read_at(store, &key, n)?;
            let Slot::Held(r) = &slot else {
                out.push((key, Settled::Kept(slot)));
                continue;
            };
            match rule(r, judge)? {
                Some((reason, cause)) => {
                    auto_release(ctx, store, g, r, by, reason)?;
                    let Slot::Held(record) = slot else {
                        unreachable!("matched above")
                    };
                    out.push((
                        key,
                        Settled::Ended {
                            record,
                            reason,
                            cause,
                        },
                    ));
                }
                None => out.push((key, Settled::Kept(slot))),
            }
        }
        Ok(out)
    })
}

/// The slots still there after a reaping scan, and the checkouts it ended.
pub type Scanned = (Vec<Slot>, Vec<(Record, ReapReason)>);

/// Every slot in the store, with the checkouts that may be ended ended on the way:
/// returns the slots still there (corrupt ones included) and what was ended.
pub fn scan_reaping(
    ctx: &Ctx,
    store: &dyn Store,
    judge: &mut Judge,
    by: Option<&str>,
) -> Result<Scanned> {
    // The slots are kept in the one vector the store read them into: at 10,000 records a
    // second one was a third of `list`'s memory.
    let mut kept = store.scan()?;
    judge.expect(kept.iter().filter_map(Slot::as_held))?;
    let mut candidates = Vec::new();
    let mut ending = Vec::new();
    for (i, slot) in kept.iter().enumerate() {
        if let Slot::Held(r) = slot
            && judge.reap_reason(r)?.is_some()
        {
            candidates.push(r.id());
            ending.push(i);
        }
    }
    if !ending.is_empty() {
        let mut i = 0;
        let mut next = ending.iter().peekable();
        kept.retain(|_| {
            let keep = next.next_if_eq(&&i).is_none();
            i += 1;
            keep
        });
    }
    let mut ended = Vec::new();
    for (_, settled) in reap(ctx, store, judge, candidates, by, &mut lapsed)? {
        match settled {
            Settled::Ended { record, reason, .. } => ended.push((record, reason)),
            Settled::Kept(Slot::Free) => {}
            Settled::Kept(slot) => kept.push(slot),
        }
    }
    Ok((kept, ended))
}

/// Read a key; if its checkout can be ended (lease out, holder dead), end it and report
/// what was ended.
pub fn read_reaping(
    ctx: &Ctx,
    store: &dyn Store,
    key: &str,
    by: Option<&str>,
) -> Result<(Slot, Option<Reaped>)> {
    let mut judge = Judge::new(ctx, store);
    let slot = store.read(key)?;
    let Slot::Held(r) = &slot else {
        return Ok((slot, None));
    };
    if judge.reap_reason(r)?.is_none() {
        return Ok((slot, None));
    }
    let settled = reap(
        ctx,
        store,
        &mut judge,
        vec![(key.to_string(), r.slot)],
        by,
        &mut lapsed,
    )?;
    match settled.into_iter().next().map(|(_, s)| s) {
        Some(Settled::Ended {
            record,
            reason,
            cause,
        }) => {
            let notes = store.last_notes(key, NOTES_SHOWN)?;
            Ok((Slot::Free, Some(Reaped::new(&record, reason, cause, notes))))
        }
        Some(Settled::Kept(slot)) => Ok((slot, None)),
        None => Ok((Slot::Free, None)),
    }
}

/// An agent ended (its session or subagent stopped, its process died): end its checkouts
/// and, with `with_subagents`, those of its subagents, take them out of every queue, and
/// mark them all ended. An entry
/// that already ended keeps the first reason. Returns the keys released.
pub fn end_agent(
    ctx: &Ctx,
    agent_id: &str,
    with_subagents: bool,
    reason: ReapReason,
) -> Result<Vec<String>> {
    let Some(store) = ctx.existing_store()? else {
        return Ok(Vec::new());
    };
    let ends =
        |id: &str| id == agent_id || (with_subagents && identity::is_subagent_of(id, agent_id));
    // Find the keys outside the guard; each is re-read under it before it is changed.
    let mine: Vec<Checkout> = store
        .scan()?
        .into_iter()
        .filter_map(|slot| match slot {
            Slot::Held(r) if ends(&r.agent.id) => Some(r.id()),
            _ => None,
        })
        .collect();
    let mut agents = vec![agent_id.to_string()];
    if with_subagents {
        agents.extend(
            store
                .scan_agents()?
                .into_iter()
                .filter(|e| e.ended_at.is_none() && identity::is_subagent_of(&e.id, agent_id))
                .map(|e| e.id),
        );
    }
    let reason_text = match reason {
        ReapReason::AgentDeath => "process_gone",
        other => other.as_str(),
    };
    let mut judge = Judge::new(ctx, &*store);
    // Its checkouts and places end in one change (queue::announcing).
    store.transaction(|g| {
        queue::announcing(ctx, &*store, g, || {
            let mut rule =
                |r: &Record, _: &mut Judge| Ok(ends(&r.agent.id).then_some((reason, None)));
            let settled = reap_in(ctx, &*store, g, &mut judge, mine, None, &mut rule)?;
            for id in &agents {
                store.lock_agent(g, id, true)?;
                if let Some(mut entry) = store.read_agent(id)?
                    && entry.ended_at.is_none()
                {
                    entry.ended_at = Some(ctx.now);
                    entry.ended_reason = Some(reason_text.into());
                    store.write_agent(g, &entry)?;
                }
            }
            // Nor does it keep a place in a queue, or a reservation, any more.
            for q in store.scan_queues()? {
                for w in &q.waiters {
                    if agents.contains(&w.agent) {
                        queue::leave(ctx, &*store, g, &q.key, &w.agent, "agent ended")?;
                    }
                }
            }
            Ok(settled
                .into_iter()
                .filter_map(|(key, s)| matches!(s, Settled::Ended { .. }).then_some(key))
                .collect())
        })
    })
}

/// Run `f` as a change of the store, first in a scope holding only `locks` (keys, and
/// `agent:ID`; [`Store::begin_scoped`]), beside changes to other keys; when the work turns
/// out to need more, what it did is abandoned (its warnings and pushes too) and it runs
/// again under the whole project's lock ([`Store::transaction`]).
pub fn transaction_scoped<T>(
    store: &dyn Store,
    locks: &[String],
    mut f: impl FnMut(&Guard) -> Result<T>,
) -> Result<T> {
    // Waiting, the scope is always entered; were it not, the project's lock would do.
    escalating(store, || store.begin_scoped(locks, true), |g, _| f(g))
}

/// Run `f` in the scope `begin` enters (`f` is told `true`), and when the work turns out
/// to need more, or `begin` enters none, from the start under the whole project's lock
/// (told `false`); what the first run did is abandoned, its warnings and pushes too.
pub fn escalating<T>(
    store: &dyn Store,
    begin: impl FnOnce() -> Result<Option<Guard>>,
    mut f: impl FnMut(&Guard, bool) -> Result<T>,
) -> Result<T> {
    let warned = crate::warnings::mark();
    let pushes = deliver::mark();
    let scoped = (|| {
        let Some(g) = begin()? else {
            return Err(crate::error::Error::Escalate);
        };
        let v = f(&g, true)?;
        store.commit(g)?;
        Ok(v)
    })();
    match scoped {
        Err(crate::error::Error::Escalate) => {
            crate::warnings::truncate(warned);
            deliver::truncate(pushes);
            store.transaction(|g| f(g, false))
        }
        other => other,
    }
}

pub use crate::store::agent_lock;

/// The locks of a change to `keys` by `agent` (its registry entry too), for
/// [`transaction_scoped`].
pub fn key_locks(keys: &[String], agent: &str) -> Vec<String> {
    let mut locks = keys.to_vec();
    locks.push(agent_lock(agent));
    locks
}

/// How many of a key's notes `status` and a takeover show.
pub const NOTES_SHOWN: usize = 3;

/// The keys `agent_id` holds (expired ones included, so they can be reported as lost).
pub fn held_keys(store: &dyn Store, agent_id: &str) -> Result<Vec<String>> {
    Ok(store
        .held_by(agent_id, false)?
        .into_iter()
        .map(|r| r.key)
        .collect())
}

/// May the caller act as the holder of `r`? A checkout bound to a secret needs the
/// caller's `TASKLOCK_SECRET`; a refusal is audited (event `refused`, reason
/// `no_secret` or `wrong_secret`, detail the command) and returned.
pub fn holder_refused(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    r: &Record,
    command: &str,
) -> Result<Option<crate::secret::Standing>> {
    let standing = crate::secret::standing_for(&r.agent.id, r.owner.as_ref());
    if !standing.refused() {
        return Ok(None);
    }
    let mut ev = ctx.event(Event::Refused, r);
    ev.reason = Some(standing.as_str().into());
    ev.detail = Some(format!("{command} as the holder without its secret"));
    ev.by = Some(crate::identity::UnixUser::current().name);
    store.audit(g, &ev)?;
    Ok(Some(standing))
}

/// May the caller act as the agent `agent` (beat, read its inbox)? An agent bound to a
/// secret (`owner`) needs the caller's; a refusal is audited and returned.
pub fn agent_refused(
    ctx: &Ctx,
    store: &dyn Store,
    g: &Guard,
    agent: &Agent,
    owner: Option<&crate::secret::Proof>,
    command: &str,
) -> Result<Option<crate::secret::Standing>> {
    let standing = crate::secret::standing_for(&agent.id, owner);
    if !standing.refused() {
        return Ok(None);
    }
    let mut ev = ctx.agent_event(Event::Refused, &agent.id, agent);
    ev.reason = Some(standing.as_str().into());
    ev.detail = Some(format!("{command} as the agent without its secret"));
    ev.by = Some(crate::identity::UnixUser::current().name);
    store.audit(g, &ev)?;
    Ok(Some(standing))
}

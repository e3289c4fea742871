//! One module per command family. Commands compute a [`Report`]; they never print.

pub mod checkout;
pub mod list;
pub mod release;
pub mod renew;
pub mod status;
pub mod verify;

use std::path::PathBuf;

use crate::clock::Time;
use crate::config::Config;
use crate::error::Result;
use crate::identity::{self, Agent};
use crate::store::{AuditEvent, FileStore, Record, Slot};

/// What every command gets: resolved global options and "now".
pub struct Ctx {
    pub dir: PathBuf,
    pub now: Time,
    pub agent_flag: Option<String>,
    pub name_flag: Option<String>,
}

impl Ctx {
    pub fn agent(&self) -> Result<Agent> {
        identity::current(self.agent_flag.as_deref(), self.name_flag.as_deref())
    }

    pub fn agent_id(&self) -> Result<String> {
        identity::resolve_id(self.agent_flag.as_deref()).map(|(id, _)| id)
    }

    pub fn config(&self) -> Result<Config> {
        Config::load(&self.dir)
    }

    pub fn event(&self, event: &str, record: &Record) -> AuditEvent {
        AuditEvent {
            ts: self.now,
            event: event.to_string(),
            key: record.key.clone(),
            agent: record.agent.id.clone(),
            name: record.agent.name.clone(),
            token: Some(record.token),
            reason: None,
            by: None,
            holder: None,
            detail: None,
        }
    }
}

/// Release an expired record found under the guard (audited as auto_release, timeout).
pub(crate) fn auto_release(
    ctx: &Ctx,
    store: &FileStore,
    guard: &crate::store::Guard,
    record: &Record,
    by: Option<&str>,
) -> Result<()> {
    store.remove(guard, &record.key)?;
    let mut ev = ctx.event("auto_release", record);
    ev.reason = Some("timeout".into());
    ev.by = by.filter(|b| *b != record.agent.id).map(str::to_string);
    store.audit(guard, &ev)
}

/// Read a key outside the guard; if its lease can be broken, reap it under the guard
/// (re-reading to be sure it is still the same record) and report what was released.
pub(crate) fn read_reaping(
    ctx: &Ctx,
    store: &FileStore,
    key: &str,
    by: Option<&str>,
) -> Result<(Slot, Option<Record>)> {
    let slot = store.read(key)?;
    match &slot {
        Slot::Held(r) if r.breakable(&ctx.now) => {
            let guard = store.lock()?;
            match store.read(key)? {
                Slot::Held(again) if again.token == r.token && again.breakable(&ctx.now) => {
                    auto_release(ctx, store, &guard, &again, by)?;
                    Ok((Slot::Free, Some(again)))
                }
                other => Ok((other, None)),
            }
        }
        _ => Ok((slot, None)),
    }
}

/// The keys `agent_id` holds (expired ones included, so they can be reported as lost).
pub(crate) fn held_keys(store: &FileStore, agent_id: &str) -> Result<Vec<String>> {
    Ok(store
        .scan()?
        .into_iter()
        .filter_map(|(_, slot)| match slot {
            Slot::Held(r) if r.held_by(agent_id) => Some(r.key),
            _ => None,
        })
        .collect())
}

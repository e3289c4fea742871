//! Keys with slots (semaphores): up to N agents hold the key at once, each in a numbered
//! slot of its own with a checkout like any other (its own token, lease, renewals, death
//! release and notes). The count lives with the key while anyone holds a slot or waits
//! for one: in every slot's record, and in its queue. A checkout made before the key had
//! slots (its own record) counts as one of them.

use std::path::PathBuf;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Record, Slot, Store};

pub use crate::key::MAX_SLOTS;

/// Check a slot count given on the command line or in config.yaml.
pub fn validate(n: u32) -> Result<u32> {
    if (1..=MAX_SLOTS).contains(&n) {
        Ok(n)
    } else {
        Err(Error::Usage(format!(
            "--slots takes a number from 1 to {MAX_SLOTS}, not {n}"
        )))
    }
}

/// How many slots config.yaml's `slots:` gives `key`. Never a checkout of paths' own key
/// (`path:…`, made up by `checkout --path`): a key with slots takes no paths.
pub fn configured(cfg: &Config, key: &str) -> Option<u32> {
    if key.starts_with(crate::key::PATH_KEY_PREFIX) {
        return None;
    }
    cfg.slots_for(key)
}

/// The refusal of paths asked for with a key that has slots: the key's holders are
/// counted by slot, and a checkout with paths would be one more beside them.
pub fn no_paths(key: &str, capacity: u32) -> Error {
    Error::Usage(format!(
        "`{key}` is a key with slots ({capacity}), and a key with slots takes no --path; \
         check the paths out on a key of their own (`tasklock checkout --path PATTERN`), \
         or take a slot of `{key}` without --path"
    ))
}

/// Everyone who holds a key with slots now.
#[derive(Debug, Clone)]
pub struct Holders {
    /// The key's own record (a checkout made before it had slots), then the records of
    /// its slots in slot order.
    pub records: Vec<Record>,
    /// A damaged record among them: nobody can take a slot until it is repaired.
    pub corrupt: Option<(PathBuf, String)>,
    /// How many slots the key has now.
    pub capacity: u32,
    /// The count the records and queue keep (None when nothing keeps one yet).
    pub stored: Option<u32>,
}

impl Holders {
    /// The holders of `key` if it has slots: some are held, its queue keeps a count, or
    /// the caller asks for slots (`flag`: `--slots`; `configured`: config.yaml's, see
    /// [`configured`]; more than one). `None` for a key without. `own` is the key's own
    /// record as read. The count is the one asked for with `--slots`, else the one the
    /// key keeps (its holders', its queue's), else config.yaml's, else 1: a plain checkout
    /// never changes the count a key has.
    pub fn read_asked(
        store: &dyn Store,
        key: &str,
        own: &Slot,
        queued: Option<u32>,
        flag: Option<u32>,
        configured: Option<u32>,
    ) -> Result<Option<Holders>> {
        let slots = store.read_slots(key)?;
        let many = |n: Option<u32>| n.is_some_and(|n| n > 1);
        if slots.is_empty() && queued.is_none() && !many(flag) && !many(configured) {
            return Ok(None);
        }
        let mut records = Vec::with_capacity(slots.len() + 1);
        let mut corrupt = None;
        for s in std::iter::once(own.clone()).chain(slots) {
            match s {
                Slot::Held(r) => records.push(r),
                Slot::Corrupt { path, problem } => {
                    corrupt.get_or_insert((path, problem));
                }
                Slot::Free => {}
            }
        }
        // The count the newest grant saw, else the queue's.
        let stored = records
            .iter()
            .filter(|r| r.slot.is_some())
            .max_by_key(|r| r.token)
            .and_then(|r| r.slots)
            .or(queued);
        Ok(Some(Holders {
            capacity: flag.or(stored).or(configured).unwrap_or(1),
            records,
            corrupt,
            stored,
        }))
    }

    /// As [`Holders::read_asked`] with no count asked for, the queue already read.
    pub fn read(
        store: &dyn Store,
        key: &str,
        q: Option<&crate::store::Queue>,
        own: &Slot,
    ) -> Result<Option<Holders>> {
        Self::read_asked(store, key, own, q.and_then(|q| q.slots), None, None)
    }

    /// Slots nobody holds.
    pub fn free(&self) -> usize {
        (self.capacity as usize).saturating_sub(self.records.len())
    }

    /// `agent`'s checkout of the key, if it holds one.
    pub fn of(&self, agent: &str) -> Option<&Record> {
        self.records.iter().find(|r| r.held_by(agent))
    }

    /// The lowest slot number no record uses.
    pub fn next_slot(&self) -> u32 {
        (1..)
            .find(|n| !self.records.iter().any(|r| r.slot == Some(*n)))
            .expect("fewer records than numbers")
    }
}

/// The checkout `agent` holds of `key`: the key's own record, or its slot of a key with
/// slots. Otherwise the key's own record as read (another's, or damaged), or when it
/// has none, the lowest slot's checkout (another's), for the caller to judge.
pub fn read_mine(store: &dyn Store, key: &str, agent: &str) -> Result<Slot> {
    let own = store.read(key)?;
    if matches!(&own, Slot::Held(r) if r.held_by(agent)) {
        return Ok(own);
    }
    let slots = store.read_slots(key)?;
    if let Some(s) = slots
        .iter()
        .find(|s| matches!(s, Slot::Held(r) if r.held_by(agent)))
    {
        return Ok(s.clone());
    }
    if matches!(own, Slot::Free)
        && let Some(s) = slots.into_iter().find(|s| matches!(s, Slot::Held(_)))
    {
        return Ok(s);
    }
    Ok(own)
}

/// The checkout of `key` (`slot`: of that slot of it), as it is now.
pub fn read_at(store: &dyn Store, key: &str, slot: Option<u32>) -> Result<Slot> {
    let Some(n) = slot else {
        return store.read(key);
    };
    Ok(store
        .read_slots(key)?
        .into_iter()
        .find(|s| matches!(s, Slot::Held(r) if r.slot == Some(n)))
        .unwrap_or(Slot::Free))
}

/// Every checkout of `key`: its own record and its slots' (damaged ones included).
pub fn read_all(store: &dyn Store, key: &str) -> Result<Vec<Slot>> {
    let own = store.read(key)?;
    let mut out: Vec<Slot> = std::iter::once(own)
        .filter(|s| !matches!(s, Slot::Free))
        .collect();
    out.extend(store.read_slots(key)?);
    Ok(out)
}

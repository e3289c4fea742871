//! The file store's backlog (see [`crate::store::backlog`]), in `backlog/`:
//!
//! - `state.json`: the next place in line to hand out (`tail`), the lowest place that may
//!   still be pending (`head`), the counts and the earliest recheck (and, as written by
//!   versions before `claimers/`, the claimers, moved out by the next claim);
//! - `claimers/<encoded agent id>`: how many keys the agent holds claimed, one file per
//!   claimer, so that a claim by a new agent writes as much as one by a known one;
//! - `members/<encoded key>`: each key's [`BacklogEntry`] (its place, its claim);
//! - `pending/<seq>`: the keys never claimed since they were added, one file per place,
//!   read from `head` on;
//! - `returned/<seq>`: the keys given back after a claim (few), listed whole.
//!
//! Every operation reads and writes a constant number of files, whatever the length of
//! the backlog, except [`FileStore::backlog_claimed`] (every member; the engine calls it
//! only when nothing is ready and a claim may have lapsed) and skipping places left empty
//! by keys removed before they were claimed. All of it changes under the guard.
//!
//! A change of more than one file is a [`Change`]: its steps are written first, whole, as
//! `tmp/backlog.journal`, then made, then the journal is removed. A process killed
//! between leaves the journal, and the next command to take the guard makes the change
//! again ([`FileStore::backlog_replay`], from the sweep of `tmp/`) before anything reads
//! the backlog under it: every step writes a whole file or removes one, so making it twice
//! is making it once. A change of the backlog is thus made whole or not at all.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read};

use serde::{Deserialize, Serialize};

use super::at::Dir;
use super::registry::read_small;
use super::{FileGuard, FileStore};
use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;
use crate::store::{BacklogClaim, BacklogEntry, BacklogSummary};

const BACKLOG: &str = "backlog";
const STATE: &str = "state.json";
const MEMBERS: &str = "members";
const PENDING: &str = "pending";
const RETURNED: &str = "returned";
const CLAIMERS: &str = "claimers";
/// In `tmp/`: the backlog change being made (see the module's doc).
pub(super) const JOURNAL: &str = "backlog.journal";
/// Keys added by one change at most: a longer `backlog add` is several changes, each
/// made whole, in order (its journal stays small).
const ADD_CHUNK: usize = 512;
/// Larger than any journal a change writes (one of [`ADD_CHUNK`] keys of 512 bytes is
/// under 1 MiB): a bigger file in its place was not written by tasklock, and is not read.
const MAX_JOURNAL: u64 = 64 << 20;

/// Where a step of a [`Change`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Part {
    /// `state.json`.
    State,
    Members,
    Pending,
    Returned,
    Claimers,
}

/// One step: write `data` whole as `name` in `part`, or remove `name` (`data` absent).
#[derive(Debug, Serialize, Deserialize)]
struct Step {
    part: Part,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
}

/// The files one backlog change writes and removes, made together.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Change {
    steps: Vec<Step>,
    /// Places whose `pending/` file this change removes (for [`FileStore::advance_head`]).
    #[serde(skip)]
    unpended: BTreeSet<u64>,
}

impl Change {
    fn write(&mut self, part: Part, name: String, data: String) {
        self.steps.push(Step {
            part,
            name,
            data: Some(data),
        });
    }

    fn remove(&mut self, part: Part, name: String) {
        if part == Part::Pending
            && let Ok(seq) = name.parse()
        {
            self.unpended.insert(seq);
        }
        self.steps.push(Step {
            part,
            name,
            data: None,
        });
    }

    fn member(&mut self, m: &BacklogEntry) -> Result<()> {
        let text = serde_json::to_string(m)
            .map_err(|e| Error::Store(format!("cannot encode a backlog entry: {e}")))?;
        self.write(Part::Members, key::encode(&m.key), text);
        Ok(())
    }

    fn state(&mut self, s: &State) -> Result<()> {
        let text = serde_json::to_string(s)
            .map_err(|e| Error::Store(format!("cannot encode the backlog's state: {e}")))?;
        self.write(Part::State, STATE.to_string(), text);
        Ok(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    head: u64,
    tail: u64,
    ready: u64,
    claimed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recheck: Option<Time>,
    /// Claims per claimer, as versions before `claimers/` kept them; moved there by the
    /// next change of a claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    holders: BTreeMap<String, u64>,
}

/// The backlog's directories, opened (or made) once per operation.
struct Dirs {
    top: Dir,
    members: Dir,
    pending: Dir,
    returned: Dir,
    claimers: Dir,
}

impl FileStore {
    fn backlog_dirs(&self, create: bool) -> Result<Option<Dirs>> {
        let Some(top) = self.sub(BACKLOG, create)? else {
            return Ok(None);
        };
        let sub = |name: &str| -> Result<Option<Dir>> {
            top.sub(name, create)
                .map_err(|e| Error::io(top.join(name), e))
        };
        let (Some(members), Some(pending), Some(returned)) =
            (sub(MEMBERS)?, sub(PENDING)?, sub(RETURNED)?)
        else {
            return Ok(None);
        };
        // Made on first use in a backlog an older version made.
        let claimers = top
            .sub(CLAIMERS, true)
            .map_err(|e| Error::io(top.join(CLAIMERS), e))?
            .expect("created");
        Ok(Some(Dirs {
            top,
            members,
            pending,
            returned,
            claimers,
        }))
    }

    fn backlog_state(&self, d: &Dirs) -> Result<State> {
        match read_small(&d.top, STATE)? {
            None => Ok(State::default()),
            Some(b) => match serde_json::from_slice(&b) {
                Ok(s) => Ok(s),
                // Empty or cut short (a power loss soon after a change: the file is
                // replaced without waiting for its data to reach the disk): everything
                // in it can be counted again from the other files.
                Err(_) => self.backlog_recounted(d),
            },
        }
    }

    /// The state as the backlog's other files give it: the counts of its members, `head`
    /// at the first `pending/` place, `tail` past every place, and a recheck due now (a
    /// claim that finds nothing ready then looks at every claim). Reads every member; only
    /// for a damaged `state.json`.
    fn backlog_recounted(&self, d: &Dirs) -> Result<State> {
        let mut s = State {
            recheck: Some(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH),
            ..State::default()
        };
        for (name, is_dir) in d
            .members
            .entries()
            .map_err(|e| Error::io(d.members.path(), e))?
        {
            let member = (!is_dir)
                .then(|| read_small(&d.members, &name))
                .transpose()?
                .flatten()
                .and_then(|b| serde_json::from_slice::<BacklogEntry>(&b).ok());
            if let Some(m) = member {
                match m.claimed {
                    Some(_) => s.claimed += 1,
                    None => s.ready += 1,
                }
                s.tail = s.tail.max(m.seq + 1);
            }
        }
        let places = |dir: &Dir| -> Result<Vec<u64>> {
            Ok(dir
                .entries()
                .map_err(|e| Error::io(dir.path(), e))?
                .into_iter()
                .filter_map(|(name, _)| name.parse::<u64>().ok())
                .collect())
        };
        let pending = places(&d.pending)?;
        let returned = places(&d.returned)?;
        s.tail = pending
            .iter()
            .chain(&returned)
            .fold(s.tail, |t, p| t.max(p + 1));
        s.head = pending.into_iter().min().unwrap_or(s.tail);
        Ok(s)
    }

    /// Make `c`: through the journal when it has more than one step.
    fn make(&self, g: &FileGuard, d: &Dirs, c: &Change) -> Result<()> {
        let journal = c.steps.len() > 1;
        if journal {
            let bytes = serde_json::to_vec(c)
                .map_err(|e| Error::Store(format!("cannot encode a backlog change: {e}")))?;
            self.publish_replace(g, &bytes, &g.tmp, JOURNAL)?;
        }
        self.make_steps(g, d, &c.steps)?;
        if journal {
            unlink_quiet(&g.tmp, JOURNAL)?;
        }
        Ok(())
    }

    fn make_steps(&self, g: &FileGuard, d: &Dirs, steps: &[Step]) -> Result<()> {
        for st in steps {
            let dir = match st.part {
                Part::State => &d.top,
                Part::Members => &d.members,
                Part::Pending => &d.pending,
                Part::Returned => &d.returned,
                Part::Claimers => &d.claimers,
            };
            match &st.data {
                Some(text) => self.publish_replace(g, text.as_bytes(), dir, &st.name)?,
                None => g.close_later(
                    dir.unlink_open(&st.name)
                        .map_err(|e| Error::io(dir.join(&st.name), e))?,
                ),
            }
        }
        Ok(())
    }

    /// A journal left in `tmp/` by a process killed in the middle of a backlog change:
    /// make that change again, then remove the journal. One that cannot be read was cut
    /// short while it was written, before any of its steps was made: it is removed, as
    /// is one that names a file outside the backlog or is too large to be ours.
    pub(super) fn backlog_replay(&self, g: &FileGuard) -> Result<()> {
        let path = g.tmp.join(JOURNAL);
        let mut bytes = Vec::new();
        match g.tmp.open_regular(JOURNAL) {
            Ok(Some(f)) => {
                f.take(MAX_JOURNAL + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| Error::io(&path, e))?;
            }
            Ok(None) => return Ok(()),
            // A FIFO, socket or link in its place: not ours, removed as the sweep would
            // (a directory stays, as in the sweep).
            Err(_) => {
                let _ = g.tmp.unlink(JOURNAL);
                return Ok(());
            }
        }
        let steps = (bytes.len() as u64 <= MAX_JOURNAL)
            .then(|| serde_json::from_slice::<Change>(&bytes).ok())
            .flatten()
            .map(|c| c.steps)
            .filter(|steps| steps.iter().all(safe_step));
        if let Some(steps) = steps
            && let Some(d) = self.backlog_dirs(true)?
        {
            self.make_steps(g, &d, &steps)?;
        }
        unlink_quiet(&g.tmp, JOURNAL)
    }

    fn member(&self, d: &Dirs, key_name: &str) -> Result<Option<BacklogEntry>> {
        let name = key::encode(key_name);
        Ok(read_small(&d.members, &name)?
            .and_then(|b| serde_json::from_slice::<BacklogEntry>(&b).ok())
            .filter(|m| m.key == key_name))
    }

    /// Add keys at the end of the backlog, in order; a key already in it keeps its place.
    pub fn backlog_add(&self, g: &FileGuard, keys: &[String]) -> Result<usize> {
        let d = self.backlog_dirs(true)?.expect("created");
        let mut s = self.backlog_state(&d)?;
        let mut seen = BTreeSet::new();
        let mut added = 0;
        for chunk in keys.chunks(ADD_CHUNK) {
            let mut c = Change::default();
            for k in chunk {
                if !seen.insert(k.as_str()) || self.member(&d, k)?.is_some() {
                    continue;
                }
                let m = BacklogEntry {
                    key: k.clone(),
                    seq: s.tail,
                    claimed: None,
                };
                c.write(Part::Pending, m.seq.to_string(), k.clone());
                c.member(&m)?;
                s.tail += 1;
                s.ready += 1;
                added += 1;
            }
            if !c.steps.is_empty() {
                c.state(&s)?;
                self.make(g, &d, &c)?;
            }
        }
        Ok(added)
    }

    /// Remove keys from the backlog; returns those that were in it.
    pub fn backlog_remove(&self, g: &FileGuard, keys: &[String]) -> Result<Vec<String>> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(Vec::new());
        };
        let mut s = self.backlog_state(&d)?;
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for chunk in keys.chunks(ADD_CHUNK) {
            let mut c = Change::default();
            let mut counts = Claimers::moved_from(&mut s);
            for k in chunk {
                if !seen.insert(k.as_str()) {
                    continue;
                }
                let Some(m) = self.member(&d, k)? else {
                    continue;
                };
                match &m.claimed {
                    Some(cl) => {
                        s.claimed = s.claimed.saturating_sub(1);
                        counts.add(&d, &cl.agent, -1)?;
                    }
                    None => s.ready = s.ready.saturating_sub(1),
                }
                // Both places, whatever the member says: no entry outlives its member.
                c.remove(Part::Members, key::encode(k));
                c.remove(Part::Pending, m.seq.to_string());
                c.remove(Part::Returned, m.seq.to_string());
                out.push(k.clone());
            }
            counts.write(&mut c);
            if !c.steps.is_empty() {
                self.advance_head(&d, &mut s, &c);
                c.state(&s)?;
                self.make(g, &d, &c)?;
            }
        }
        Ok(out)
    }

    /// Up to `n` ready keys after place `after`, in order.
    pub fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(Vec::new());
        };
        let s = self.backlog_state(&d)?;
        let from = after.map_or(0, |a| a + 1);
        // Given back: few (they come first in line, so they are claimed first), listed
        // whole; only the first `n` are read.
        let mut back: Vec<u64> = d
            .returned
            .entries()
            .map_err(|e| Error::io(d.returned.path(), e))?
            .into_iter()
            .filter(|(_, is_dir)| !is_dir)
            .filter_map(|(name, _)| name.parse::<u64>().ok())
            .filter(|seq| *seq >= from)
            .collect();
        back.sort_unstable();
        let mut out: Vec<BacklogEntry> = Vec::new();
        for seq in back {
            if out.len() == n {
                break;
            }
            if let Some(k) = read_key(&d.returned, &seq.to_string())? {
                out.push(BacklogEntry {
                    key: k,
                    seq,
                    claimed: None,
                });
            }
        }
        // Never claimed: from the head on, up to `n` of them.
        let mut taken = 0;
        let mut seq = s.head.max(from);
        while taken < n && seq < s.tail {
            if let Some(k) = read_key(&d.pending, &seq.to_string())? {
                out.push(BacklogEntry {
                    key: k,
                    seq,
                    claimed: None,
                });
                taken += 1;
            }
            seq += 1;
        }
        out.sort_by_key(|e| e.seq);
        out.truncate(n);
        Ok(out)
    }

    /// Every claimed key, in order.
    pub fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (name, is_dir) in d
            .members
            .entries()
            .map_err(|e| Error::io(d.members.path(), e))?
        {
            if is_dir {
                continue;
            }
            if let Some(m) = read_small(&d.members, &name)?
                .and_then(|b| serde_json::from_slice::<BacklogEntry>(&b).ok())
                .filter(|m| m.claimed.is_some())
            {
                out.push(m);
            }
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    /// Claim a key of the backlog for `claim.agent` (or move its claim); `None` gives it
    /// back, in its old place. A key not in the backlog is left alone.
    pub fn backlog_mark(
        &self,
        g: &FileGuard,
        key_name: &str,
        claim: Option<&BacklogClaim>,
    ) -> Result<()> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(());
        };
        let Some(mut m) = self.member(&d, key_name)? else {
            return Ok(());
        };
        let mut s = self.backlog_state(&d)?;
        let mut c = Change::default();
        let name = m.seq.to_string();
        let mut counts = Claimers::moved_from(&mut s);
        match (&m.claimed, claim) {
            (None, None) => return Ok(()),
            (None, Some(cl)) => {
                c.remove(Part::Pending, name.clone());
                c.remove(Part::Returned, name);
                s.ready = s.ready.saturating_sub(1);
                s.claimed += 1;
                counts.add(&d, &cl.agent, 1)?;
                self.advance_head(&d, &mut s, &c);
            }
            (Some(old), Some(cl)) => {
                if old.agent != cl.agent {
                    counts.add(&d, &old.agent, -1)?;
                    counts.add(&d, &cl.agent, 1)?;
                }
            }
            (Some(old), None) => {
                c.write(Part::Returned, name, key_name.to_string());
                s.claimed = s.claimed.saturating_sub(1);
                s.ready += 1;
                counts.add(&d, &old.agent, -1)?;
            }
        }
        counts.write(&mut c);
        if let Some(cl) = claim {
            s.recheck = Some(match s.recheck {
                Some(r) if r < cl.recheck => r,
                _ => cl.recheck,
            });
        }
        m.claimed = claim.cloned();
        c.member(&m)?;
        c.state(&s)?;
        self.make(g, &d, &c)
    }

    /// The engine looked at every claim: none needs a look before `recheck`.
    pub fn backlog_rechecked(&self, g: &FileGuard, recheck: Option<Time>) -> Result<()> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(());
        };
        let mut s = self.backlog_state(&d)?;
        s.recheck = recheck;
        let mut c = Change::default();
        c.state(&s)?;
        self.make(g, &d, &c)
    }

    pub fn backlog_summary(&self) -> Result<BacklogSummary> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(BacklogSummary::default());
        };
        let s = self.backlog_state(&d)?;
        let mut holders: BTreeSet<String> = s.holders.into_keys().collect();
        for (name, is_dir) in d
            .claimers
            .entries()
            .map_err(|e| Error::io(d.claimers.path(), e))?
        {
            if let Some((_, id)) = (!is_dir)
                .then(|| read_claimer(&d, &name))
                .transpose()?
                .flatten()
            {
                holders.insert(id);
            }
        }
        Ok(BacklogSummary {
            ready: s.ready,
            claimed: s.claimed,
            recheck: if s.claimed > 0 { s.recheck } else { None },
            holders: holders.into_iter().collect(),
        })
    }

    /// A record of `key_name` was removed: a claimed key of the backlog is ready again.
    /// Costs one failed `stat` when the project has no backlog.
    pub(super) fn backlog_after_remove(&self, g: &FileGuard, key_name: &str) -> Result<()> {
        if self.dir.stat(BACKLOG).is_err() {
            return Ok(());
        }
        self.backlog_mark(g, key_name, None)
    }

    /// Move `head` past places whose pending file is gone (claimed out of order, removed),
    /// or goes with `c`.
    fn advance_head(&self, d: &Dirs, s: &mut State, c: &Change) {
        while s.head < s.tail
            && (c.unpended.contains(&s.head) || d.pending.stat(&s.head.to_string()).is_err())
        {
            s.head += 1;
        }
    }
}

/// The claim counts a change of claims touches (`claimers/`), read as it goes, written
/// with the change: a file per claimer, removed at 0.
#[derive(Default)]
struct Claimers(BTreeMap<String, u64>);

impl Claimers {
    /// Start with the counts `state.json` still keeps (written by an older version): they
    /// move to `claimers/` with this change.
    fn moved_from(s: &mut State) -> Claimers {
        Claimers(std::mem::take(&mut s.holders))
    }

    fn add(&mut self, d: &Dirs, agent: &str, by: i64) -> Result<()> {
        if !self.0.contains_key(agent) {
            let n = read_claimer(d, &key::encode(agent))?
                .filter(|(_, id)| id == agent)
                .map_or(0, |(n, _)| n);
            self.0.insert(agent.to_string(), n);
        }
        let n = self.0.get_mut(agent).expect("inserted");
        *n = n.saturating_add_signed(by);
        Ok(())
    }

    fn write(self, c: &mut Change) {
        for (agent, n) in self.0 {
            match n {
                0 => c.remove(Part::Claimers, key::encode(&agent)),
                n => c.write(Part::Claimers, key::encode(&agent), format!("{n}\n{agent}")),
            }
        }
    }
}

/// A claimer's file: its count of claims and its agent id (`N\nID`); `None` when
/// missing or damaged, or when it names another agent than its name encodes.
fn read_claimer(d: &Dirs, name: &str) -> Result<Option<(u64, String)>> {
    let Some(text) = read_small(&d.claimers, name)?.and_then(|b| String::from_utf8(b).ok()) else {
        return Ok(None);
    };
    Ok(text
        .split_once('\n')
        .and_then(|(n, id)| Some((n.parse().ok()?, id.to_string())))
        .filter(|(_, id)| key::encode(id) == name))
}

/// The key written in a place file, `None` when the place is empty.
fn read_key(dir: &Dir, name: &str) -> Result<Option<String>> {
    Ok(read_small(dir, name)?.and_then(|b| String::from_utf8(b).ok()))
}

/// A step of a journal names a file of the backlog, never another path.
fn safe_step(st: &Step) -> bool {
    let n = st.name.as_str();
    let plain = !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\0']);
    plain && (st.part != Part::State || n == STATE)
}

fn unlink_quiet(dir: &Dir, name: &str) -> Result<()> {
    match dir.unlink(name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(dir.join(name), e)),
    }
}

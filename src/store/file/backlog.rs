//! The file store's backlog (see [`crate::store::backlog`]), in `backlog/`:
//!
//! - `state.json`: the next place in line to hand out (`tail`), the lowest place that may
//!   still be pending (`head`), the counts and the earliest recheck (and, as written by
//!   versions before `claimers/`, the claimers, moved out by the next claim);
//! - `claimers/<encoded agent id>`: how many keys the agent holds claimed, one file per
//!   claimer, so that a claim by a new agent writes as much as one by a known one;
//! - `index/<shard>`: the members and their places, `{KEY: PLACE}`, in [`SHARDS`] files
//!   (a key's shard is a hash of it): a bulk add writes each shard once per change, not
//!   a file per key; a key done after a claim keeps its entry, stale, which makes no
//!   member ([`Files::member`]), so that a drain writes no shard, until an add or a
//!   removal writes the shard;
//! - `queue/<chunk>`: the keys never claimed since they were added, `{PLACE: KEY}`, one
//!   file per [`QUEUE_CHUNK`] consecutive places, read from `head` on (a claim at the
//!   head only moves `head`: the places below it are left in its file, unread, until
//!   `head` leaves the file);
//! - `claims/<encoded key>`: a claimed key's [`BacklogEntry`] (its place, its claim), one
//!   file per claim;
//! - `returned/<seq>`: the keys given back after a claim (few), listed whole.
//!
//! Every operation reads and writes a constant number of files, whatever the length of
//! the backlog, except [`FileStore::backlog_claimed`] (every claim; the engine calls it
//! only when nothing is ready and a claim may have lapsed) and skipping chunks left empty
//! by keys removed before they were claimed. A bulk add or remove writes at most
//! [`SHARDS`] index files and one queue file per [`QUEUE_CHUNK`] keys per change of
//! [`ADD_CHUNK`] keys. All of it changes under the guard.
//!
//! A change of more than one file is a [`Change`]: its steps are written first, whole, as
//! `tmp/backlog.journal`, then made, then the journal is removed. A process killed
//! between leaves the journal, and the next command to take the guard makes the change
//! again ([`FileStore::backlog_replay`], from the sweep of `tmp/`) before anything reads
//! the backlog under it. A step writes a whole file, removes one, or sets (or removes)
//! one key of an index shard or one place of a queue chunk, which is made by reading the
//! file, changing that entry and writing the file whole: making a step twice is making it
//! once, so a change is made whole or not at all.
//!
//! Versions before this layout kept a file per key (`members/<encoded key>` and
//! `pending/<seq>`); the first command to take the guard moves such a backlog into this
//! layout ([`FileStore::backlog_migrate`]).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read};

use serde::de::DeserializeOwned;
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
const INDEX: &str = "index";
const QUEUE: &str = "queue";
const CLAIMS: &str = "claims";
const RETURNED: &str = "returned";
const CLAIMERS: &str = "claimers";
/// The layout before `index/`, `queue/` and `claims/`: a file per member, a file per
/// pending place. `pending/` is there until such a backlog is moved (and its leftovers
/// removed), so it is what says that a backlog needs moving.
const OLD_MEMBERS: &str = "members";
const OLD_PENDING: &str = "pending";
/// `members/` once its keys are in the new layout, until it is removed.
const OLD_MOVED: &str = "members.moved";
/// `pending/` seen from the lock directory.
const OLD_PENDING_PATH: &str = "backlog/pending";
/// In `tmp/`: the backlog change being made (see the module's doc).
pub(super) const JOURNAL: &str = "backlog.journal";
/// Files of the index: 200,000 keys are about 200 a shard (8 KiB), read by a claim.
const SHARDS: u64 = 1024;
/// Places per file of `queue/`: a claim at the head rewrites none (see [`Work::take_head`]),
/// a claim out of order or a removal rewrites one.
const QUEUE_CHUNK: u64 = 64;
/// Keys added (or removed) by one change at most, and their bytes: a longer `backlog
/// add` is several changes, each made whole, in order. Each change rewrites the index
/// shards it touches (all of them, past a few thousand keys), so the fewer the better;
/// the bytes keep its journal under [`MAX_JOURNAL`].
const ADD_CHUNK: usize = 131_072;
const ADD_CHUNK_BYTES: usize = 8 << 20;
/// Larger than any journal a change writes (two steps for each key, each escaped at
/// most to twice its bytes, and under 60 bytes of names a step: under 48 MiB): a bigger
/// file in its place was not written by tasklock, and is not read.
const MAX_JOURNAL: u64 = 128 << 20;
/// Larger than any index shard or queue chunk tasklock writes.
const MAX_PART: u64 = 256 << 20;

/// Where a step of a [`Change`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Part {
    /// `state.json`.
    State,
    /// One key of an index shard: `name` the key, `seq` its place (absent: removed).
    Index,
    /// One place of a queue chunk: `name` the place, `data` its key (absent: removed).
    Queue,
    Claims,
    Returned,
    Claimers,
    /// A member file of the layout before `index/` (a journal an older version left).
    Members,
    /// A pending file of the layout before `queue/` (the same).
    Pending,
}

impl Part {
    /// Written by versions before `index/` and `queue/`.
    fn old(self) -> bool {
        matches!(self, Part::Members | Part::Pending)
    }
}

/// One step: write `data` whole as `name` in `part`, or remove `name` (`data` absent);
/// for [`Part::Index`] and [`Part::Queue`] one entry of a file (see [`Part`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    part: Part,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

impl Step {
    fn file(part: Part, name: String, data: Option<String>) -> Step {
        Step {
            part,
            name,
            data,
            seq: None,
        }
    }

    fn index(key: &str, seq: Option<u64>) -> Step {
        Step {
            part: Part::Index,
            name: key.to_string(),
            data: None,
            seq,
        }
    }

    fn queue(seq: u64, key: Option<&str>) -> Step {
        Step::file(Part::Queue, seq.to_string(), key.map(str::to_string))
    }
}

/// The steps of one backlog change, as its journal keeps them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Change {
    steps: Vec<Step>,
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

impl State {
    /// `state.json`'s text.
    fn encode(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| Error::Store(format!("cannot encode the backlog's state: {e}")))
    }
}

/// The backlog's directories, opened (or made) once per operation.
struct Dirs {
    top: Dir,
    index: Dir,
    queue: Dir,
    claims: Dir,
    returned: Dir,
    claimers: Dir,
}

impl Dirs {
    /// A directory of the layout before `index/`, made if missing.
    fn old(&self, name: &str) -> Result<Dir> {
        self.top
            .sub(name, true)
            .map_err(|e| Error::io(self.top.join(name), e))?
            .ok_or_else(|| Error::Store(format!("cannot make {}", self.top.join(name).display())))
    }
}

/// The index shards and queue chunks an operation has read, with its changes made in
/// memory; the changed ones are written whole by [`Files::write`].
#[derive(Default)]
struct Files {
    index: BTreeMap<u64, BTreeMap<String, u64>>,
    queue: BTreeMap<u64, BTreeMap<u64, String>>,
    changed_index: BTreeSet<u64>,
    changed_queue: BTreeSet<u64>,
    /// A change of many keys: the names of `claims/` and `returned/`, listed once, so
    /// that a key without a file there costs no failed open (see [`Files::listed`]).
    bulk: bool,
    listed: Option<Listed>,
}

/// The files of `claims/` and `returned/` when first asked (a change removes some, never
/// makes one: a listed file is read, and may be gone).
struct Listed {
    claims: BTreeSet<String>,
    returned: BTreeSet<String>,
}

/// How a member of the backlog is held (see [`Files::member`]).
enum Held {
    /// At its place in `queue/`, at or after `head`.
    Queued,
    /// In `returned/`, at its place.
    Returned,
    /// Claimed: its `claims/` file.
    Claimed(BacklogEntry),
}

/// A member of the backlog: its place, and how it is held.
struct Member {
    seq: u64,
    held: Held,
}

/// Keys a change has from which it lists `claims/` and `returned/` once rather than
/// opening a file there per key.
const LIST_FROM: usize = 8;

impl Files {
    fn shard(&mut self, d: &Dirs, n: u64) -> Result<&mut BTreeMap<String, u64>> {
        Ok(match self.index.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(read_map(&d.index, &shard_name(n))?),
        })
    }

    fn chunk(&mut self, d: &Dirs, n: u64) -> Result<&mut BTreeMap<u64, String>> {
        Ok(match self.queue.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(read_map(&d.queue, &n.to_string())?),
        })
    }

    /// A member's place.
    fn place_of(&mut self, d: &Dirs, key: &str) -> Result<Option<u64>> {
        Ok(self.shard(d, shard_of(key))?.get(key).copied())
    }

    /// The key pending at place `seq`, if any.
    fn pending_at(&mut self, d: &Dirs, seq: u64) -> Result<Option<&String>> {
        Ok(self.chunk(d, seq / QUEUE_CHUNK)?.get(&seq))
    }

    /// The names in `claims/` and `returned/`, listed on first use.
    fn listed(&mut self, d: &Dirs) -> Result<&Listed> {
        if self.listed.is_none() {
            self.listed = Some(Listed {
                claims: file_names(&d.claims)?.into_iter().collect(),
                returned: file_names(&d.returned)?.into_iter().collect(),
            });
        }
        Ok(self.listed.as_ref().expect("listed"))
    }

    /// The claim of `key_name` in `claims/`, if any.
    fn claim_of(&mut self, d: &Dirs, key_name: &str) -> Result<Option<BacklogEntry>> {
        if self.bulk && !self.listed(d)?.claims.contains(&key::encode(key_name)) {
            return Ok(None);
        }
        read_claim_entry(d, key_name)
    }

    /// The key given back at place `seq` (`returned/`), if any.
    fn returned_at(&mut self, d: &Dirs, seq: u64) -> Result<Option<String>> {
        let name = seq.to_string();
        if self.bulk && !self.listed(d)?.returned.contains(&name) {
            return Ok(None);
        }
        read_key(&d.returned, &name)
    }

    /// Is `key_name` a member of the backlog, and how is it held? The one rule every
    /// change reads membership by: a key is a member while its `claims/` file holds its
    /// claim, or, its index entry giving place S, while its queue file holds it at S at
    /// or after `head`, or `returned/S` holds it. An index entry with none of these is
    /// stale: the key was claimed and then done (`release --done` removes the claim
    /// alone), and is not a member; a change that writes the entry's shard drops it
    /// ([`Files::compact`]). A place is never given twice, and a claimed key has no
    /// other entry (the claim takes it out of the queue, or moves `head` past it, and
    /// removes its `returned/` file), so once its claim is gone nothing holds it.
    fn member(&mut self, d: &Dirs, key_name: &str, head: u64) -> Result<Option<Member>> {
        if let Some(e) = self.claim_of(d, key_name)? {
            return Ok(Some(Member {
                seq: e.seq,
                held: Held::Claimed(e),
            }));
        }
        // The key at `head` (the usual claim) needs no index shard: a queued place at or
        // after `head` holds the key whose entry gives that place (both are written by
        // its add and removed by its removal, and a member is not added again).
        if self.pending_at(d, head)?.is_some_and(|k| k == key_name) {
            return Ok(Some(Member {
                seq: head,
                held: Held::Queued,
            }));
        }
        let Some(seq) = self.place_of(d, key_name)? else {
            return Ok(None);
        };
        let held = if seq >= head && self.pending_at(d, seq)?.is_some_and(|k| k == key_name) {
            Held::Queued
        } else if self.returned_at(d, seq)?.is_some_and(|k| k == key_name) {
            Held::Returned
        } else {
            return Ok(None);
        };
        Ok(Some(Member { seq, held }))
    }

    /// Drop the stale entries (see [`Files::member`]) of the shards about to be
    /// written, as `head` stands after the change: those below `head` (one at or after
    /// it, left by a key claimed out of order and done, waits until `head` passes it,
    /// so that this reads no queue file). The change's own steps are in memory already;
    /// a file it is about to remove is still listed, and keeps its key's entry until a
    /// later change.
    fn compact(&mut self, d: &Dirs, head: u64) -> Result<()> {
        // A shard holds hundreds of keys: list `claims/` and `returned/` once.
        self.bulk = true;
        for n in self.changed_index.clone() {
            let below: Vec<String> = self.index[&n]
                .iter()
                .filter(|(_, seq)| **seq < head)
                .map(|(k, _)| k.clone())
                .collect();
            for k in below {
                if self.member(d, &k, head)?.is_none() {
                    self.index.get_mut(&n).expect("read").remove(&k);
                }
            }
        }
        Ok(())
    }

    /// Make an index or queue step in memory; a file it leaves as it was is not written
    /// (a key removed from the backlog after a claim at the head is in no queue file, or
    /// is below `head` in one, which keeps it).
    fn apply(&mut self, d: &Dirs, st: &Step) -> Result<()> {
        match st.part {
            Part::Index => {
                let n = shard_of(&st.name);
                let shard = self.shard(d, n)?;
                let changed = match st.seq {
                    Some(seq) => shard.insert(st.name.clone(), seq) != Some(seq),
                    None => shard.remove(&st.name).is_some(),
                };
                if changed {
                    self.changed_index.insert(n);
                }
            }
            Part::Queue => {
                let Ok(seq) = st.name.parse::<u64>() else {
                    return Ok(());
                };
                let n = seq / QUEUE_CHUNK;
                let chunk = self.chunk(d, n)?;
                let changed = match &st.data {
                    Some(k) => chunk.insert(seq, k.clone()).as_ref() != Some(k),
                    None => chunk.remove(&seq).is_some(),
                };
                if changed {
                    self.changed_queue.insert(n);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Write the changed files whole (an empty one is removed).
    fn write(&mut self, store: &FileStore, g: &FileGuard, d: &Dirs) -> Result<()> {
        for n in std::mem::take(&mut self.changed_index) {
            write_map(store, g, &d.index, &shard_name(n), &self.index[&n])?;
        }
        for n in std::mem::take(&mut self.changed_queue) {
            write_map(store, g, &d.queue, &n.to_string(), &self.queue[&n])?;
        }
        Ok(())
    }
}

/// One operation's change of the backlog, under the guard: its steps, made in memory as
/// they come (so that the next key sees them), written by [`Work::commit`].
struct Work<'a> {
    store: &'a FileStore,
    g: &'a FileGuard,
    d: Dirs,
    files: Files,
    steps: Vec<Step>,
    /// A place left the queue: `head` may move.
    unqueued: bool,
    /// `head` before this change moved it.
    head_from: Option<u64>,
    /// The index shards this change writes lose their stale entries (an add or a
    /// removal: see [`Files::compact`]).
    compact: bool,
}

impl<'a> Work<'a> {
    fn new(store: &'a FileStore, g: &'a FileGuard, d: Dirs) -> Work<'a> {
        Work {
            store,
            g,
            d,
            files: Files::default(),
            steps: Vec::new(),
            unqueued: false,
            head_from: None,
            compact: false,
        }
    }

    /// A work of `keys` keys at once, by `backlog add` or `remove`: it lists `claims/`
    /// and `returned/` once when they are many, and drops the stale entries of the
    /// shards it writes.
    fn of_keys(store: &'a FileStore, g: &'a FileGuard, d: Dirs, keys: usize) -> Work<'a> {
        let mut w = Work::new(store, g, d);
        w.files.bulk = keys >= LIST_FROM;
        w.compact = true;
        w
    }

    fn step(&mut self, st: Step) -> Result<()> {
        self.files.apply(&self.d, &st)?;
        if st.part == Part::Queue && st.data.is_none() {
            self.unqueued = true;
        }
        self.steps.push(st);
        Ok(())
    }

    fn write(&mut self, part: Part, name: String, data: String) {
        self.steps.push(Step::file(part, name, Some(data)));
    }

    fn remove(&mut self, part: Part, name: String) {
        self.steps.push(Step::file(part, name, None));
    }

    fn claim(&mut self, m: &BacklogEntry) -> Result<()> {
        let text = serde_json::to_string(m)
            .map_err(|e| Error::Store(format!("cannot encode a backlog entry: {e}")))?;
        self.write(Part::Claims, key::encode(&m.key), text);
        Ok(())
    }

    /// Make the steps so far, with `s` (through the journal when there is more than one
    /// step); nothing when there are none.
    fn commit(&mut self, s: &mut State) -> Result<()> {
        if self.steps.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.unqueued) {
            let from = self.head_from.take().unwrap_or(s.head);
            self.advance_head(s)?;
            self.drop_passed(from, s.head)?;
        }
        if self.compact {
            self.files.compact(&self.d, s.head)?;
        }
        self.write(Part::State, STATE.to_string(), s.encode()?);
        let c = Change {
            steps: std::mem::take(&mut self.steps),
        };
        let journal = c.steps.len() > 1;
        if journal {
            let bytes = serde_json::to_vec(&c)
                .map_err(|e| Error::Store(format!("cannot encode a backlog change: {e}")))?;
            self.store
                .publish_replace(self.g, &bytes, &self.g.tmp, JOURNAL)?;
        }
        self.write_out(&c.steps)?;
        if journal {
            unlink_quiet(&self.g.tmp, JOURNAL)?;
        }
        Ok(())
    }

    /// Write the files of `steps`: the shards and chunks they changed (made in memory
    /// already), and the whole files.
    fn write_out(&mut self, steps: &[Step]) -> Result<()> {
        self.files.write(self.store, self.g, &self.d)?;
        for st in steps {
            let old;
            let dir = match st.part {
                Part::Index | Part::Queue => continue,
                Part::State => &self.d.top,
                Part::Claims => &self.d.claims,
                Part::Returned => &self.d.returned,
                Part::Claimers => &self.d.claimers,
                Part::Members => {
                    old = self.d.old(OLD_MEMBERS)?;
                    &old
                }
                Part::Pending => {
                    old = self.d.old(OLD_PENDING)?;
                    &old
                }
            };
            match &st.data {
                Some(text) => self
                    .store
                    .publish_replace(self.g, text.as_bytes(), dir, &st.name)?,
                None => self.g.close_later(
                    dir.unlink_open(&st.name)
                        .map_err(|e| Error::io(dir.join(&st.name), e))?,
                ),
            }
        }
        Ok(())
    }

    /// The place at `head` is claimed: `head` moves past it, and its queue file is not
    /// rewritten (a place below `head` is never read) until `head` leaves the file.
    fn take_head(&mut self, s: &mut State) {
        self.head_from.get_or_insert(s.head);
        s.head += 1;
        self.unqueued = true;
    }

    /// `head` moved from `from` to `to`: the queue files it left behind lose the places
    /// below it (claimed at the head), and are removed.
    fn drop_passed(&mut self, from: u64, to: u64) -> Result<()> {
        for n in from / QUEUE_CHUNK..to / QUEUE_CHUNK {
            let passed: Vec<u64> = self
                .files
                .chunk(&self.d, n)?
                .range(..to)
                .map(|(p, _)| *p)
                .collect();
            for p in passed {
                self.step(Step::queue(p, None))?;
            }
        }
        Ok(())
    }

    /// Move `head` to the first place still queued (as this change leaves the queue).
    fn advance_head(&mut self, s: &mut State) -> Result<()> {
        while s.head < s.tail {
            let n = s.head / QUEUE_CHUNK;
            if let Some(first) = self.files.chunk(&self.d, n)?.range(s.head..).next() {
                s.head = *first.0;
                return Ok(());
            }
            s.head = (n + 1) * QUEUE_CHUNK;
        }
        s.head = s.head.min(s.tail);
        Ok(())
    }
}

impl FileStore {
    fn backlog_dirs(&self, create: bool) -> Result<Option<Dirs>> {
        let Some(top) = self.sub(BACKLOG, create)? else {
            return Ok(None);
        };
        // Made on first use (in a backlog an older version made, too).
        let sub = |name: &str| -> Result<Dir> {
            top.sub(name, true)
                .map_err(|e| Error::io(top.join(name), e))?
                .ok_or_else(|| Error::Store(format!("cannot make {}", top.join(name).display())))
        };
        Ok(Some(Dirs {
            index: sub(INDEX)?,
            queue: sub(QUEUE)?,
            claims: sub(CLAIMS)?,
            returned: sub(RETURNED)?,
            claimers: sub(CLAIMERS)?,
            top,
        }))
    }

    /// As [`FileStore::backlog_dirs`], for a read without the guard: a backlog in the
    /// layout before `index/` is first moved, under the guard (whose sweep moves it; a
    /// command holding the guard has moved it already).
    fn backlog_dirs_read(&self) -> Result<Option<Dirs>> {
        if old_layout(self) {
            drop(self.lock()?);
        }
        self.backlog_dirs(false)
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

    /// The state as the backlog's other files give it: the counts of its members and
    /// claims, `head` at the first queued place, `tail` past every place, and a recheck
    /// due now (a claim that finds nothing ready then looks at every claim). Reads the
    /// whole backlog; only for a damaged `state.json`. Which places below the lost `head`
    /// were claimed at the head is not in the other files: the first queued place whose
    /// key has no claim and no `returned/` file is taken for `head`, so a key claimed at
    /// the head and done since `head` entered its queue file (63 at most) is handed out
    /// again, never lost.
    fn backlog_recounted(&self, d: &Dirs) -> Result<State> {
        let mut s = State {
            recheck: Some(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH),
            ..State::default()
        };
        let mut files = Files {
            bulk: true,
            ..Files::default()
        };
        for name in file_names(&d.index)? {
            let shard: BTreeMap<String, u64> = read_map(&d.index, &name)?;
            s.tail = shard.values().fold(s.tail, |t, p| t.max(p + 1));
        }
        s.claimed = read_claims(d)?.len() as u64;
        let mut chunks: Vec<u64> = file_names(&d.queue)?
            .iter()
            .filter_map(|name| name.parse().ok())
            .collect();
        chunks.sort_unstable();
        let mut queued = Vec::new();
        for n in chunks {
            queued.extend(files.chunk(d, n)?.iter().map(|(p, k)| (*p, k.clone())));
        }
        let mut back = Vec::new();
        for name in file_names(&d.returned)? {
            if let Ok(p) = name.parse::<u64>() {
                back.push(p);
            }
        }
        s.tail = queued
            .iter()
            .map(|(p, _)| *p)
            .chain(back.iter().copied())
            .fold(s.tail, |t, p| t.max(p + 1));
        // `head`: the first queued place whose key has its index entry there, and no
        // claim and no `returned/` file (a place below the lost `head` may hold a key
        // since added again at another place).
        s.head = s.tail;
        for (p, k) in &queued {
            if files.place_of(d, k)? == Some(*p)
                && matches!(files.member(d, k, *p)?, Some(Member { seq, held: Held::Queued }) if seq == *p)
                && files.returned_at(d, *p)?.is_none()
            {
                s.head = *p;
                break;
            }
        }
        // Ready: the members held in the queue or given back, by the rule of members.
        for (p, k) in queued.iter().filter(|(p, _)| *p >= s.head) {
            if matches!(files.member(d, k, s.head)?, Some(Member { seq, held: Held::Queued }) if seq == *p)
            {
                s.ready += 1;
            }
        }
        for p in back {
            if let Some(k) = files.returned_at(d, p)?
                && matches!(files.member(d, &k, s.head)?, Some(Member { seq, held: Held::Returned }) if seq == p)
            {
                s.ready += 1;
            }
        }
        Ok(s)
    }

    /// A journal left in `tmp/` by a process killed in the middle of a backlog change:
    /// make that change again, then remove the journal. One that cannot be read was cut
    /// short while it was written, before any of its steps was made: it is removed, as
    /// is one that names a file outside the backlog or is too large to be ours. Steps of
    /// the layout before `index/` (an older version's journal) are made only in a backlog
    /// still in that layout, which is then moved.
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
        let old = old_layout(self);
        let steps = (bytes.len() as u64 <= MAX_JOURNAL)
            .then(|| serde_json::from_slice::<Change>(&bytes).ok())
            .flatten()
            .map(|c| c.steps)
            .filter(|steps| steps.iter().all(safe_step));
        if let Some(steps) = steps
            && let Some(d) = self.backlog_dirs(true)?
        {
            let mut w = Work::new(self, g, d);
            for st in steps.into_iter().filter(|st| old || !st.part.old()) {
                w.step(st)?;
            }
            let steps = std::mem::take(&mut w.steps);
            w.write_out(&steps)?;
        }
        unlink_quiet(&g.tmp, JOURNAL)
    }

    /// A backlog in the layout before `index/` (a file per key): its members and pending
    /// places are written into `index/`, `queue/` and `claims/` (cleared first: only a
    /// move killed midway leaves files there), then `members/` is renamed, which is the
    /// moment the new layout holds the backlog; then the old files are removed,
    /// `pending/` last. Killed before the rename, the move is made again from the start;
    /// after it, the removal goes on. Under the guard, after any journal is made.
    pub(super) fn backlog_migrate(&self, g: &FileGuard) -> Result<()> {
        if !old_layout(self) {
            return Ok(());
        }
        let mut w = Work::new(self, g, self.backlog_dirs(true)?.expect("made"));
        let top = &w.d.top;
        if let Some(members) = top
            .sub(OLD_MEMBERS, false)
            .map_err(|e| Error::io(top.join(OLD_MEMBERS), e))?
        {
            for dir in [&w.d.index, &w.d.queue, &w.d.claims] {
                remove_files(g, dir)?;
            }
            self.backlog_moved(&mut w, &members)?;
            let top = &w.d.top;
            top.rename(OLD_MEMBERS, top, OLD_MOVED)
                .map_err(|e| Error::io(top.join(OLD_MEMBERS), e))?;
        }
        let top = &w.d.top;
        for name in [OLD_MOVED, OLD_PENDING] {
            if let Some(dir) = top
                .sub(name, false)
                .map_err(|e| Error::io(top.join(name), e))?
            {
                remove_files(g, &dir)?;
                match top.rmdir(name) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(top.join(name), e)),
                }
            }
        }
        Ok(())
    }

    /// Write the members of `members/` and the places of `pending/` (the layout before
    /// `index/`) into `index/`, `queue/` and `claims/`, without a journal: the old files
    /// hold the backlog until `members/` is renamed.
    fn backlog_moved(&self, w: &mut Work, members: &Dir) -> Result<()> {
        for name in file_names(members)? {
            let Some(m) = read_small(members, &name)?
                .and_then(|b| serde_json::from_slice::<BacklogEntry>(&b).ok())
                .filter(|m| key::encode(&m.key) == name)
            else {
                continue;
            };
            w.step(Step::index(&m.key, Some(m.seq)))?;
            if m.claimed.is_some() {
                w.claim(&m)?;
            }
        }
        let pending = w.d.old(OLD_PENDING)?;
        for name in file_names(&pending)? {
            let (Ok(seq), Some(k)) = (name.parse::<u64>(), read_key(&pending, &name)?) else {
                continue;
            };
            // No entry without its member.
            if w.files.place_of(&w.d, &k)? == Some(seq) {
                w.step(Step::queue(seq, Some(&k)))?;
            }
        }
        let steps = std::mem::take(&mut w.steps);
        w.write_out(&steps)
    }

    /// Add keys at the end of the backlog, in order; a key already in it keeps its place.
    pub fn backlog_add(&self, g: &FileGuard, keys: &[String]) -> Result<usize> {
        let d = self.backlog_dirs(true)?.expect("created");
        let mut s = self.backlog_state(&d)?;
        let mut w = Work::of_keys(self, g, d, keys.len());
        let mut added = 0;
        for chunk in changes(keys) {
            for k in chunk {
                // A key done (its index entry stale) is added again, at a new place.
                if w.files.member(&w.d, k, s.head)?.is_some() {
                    continue;
                }
                w.step(Step::index(k, Some(s.tail)))?;
                w.step(Step::queue(s.tail, Some(k)))?;
                s.tail += 1;
                s.ready += 1;
                added += 1;
            }
            w.commit(&mut s)?;
        }
        Ok(added)
    }

    /// Remove keys from the backlog; returns those that were in it. A claimed key
    /// (`release --done`) loses its claim alone: its index entry, left, is stale (see
    /// [`Files::member`]), so that a drain's release writes no index shard.
    pub fn backlog_remove(&self, g: &FileGuard, keys: &[String]) -> Result<Vec<String>> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(Vec::new());
        };
        let mut s = self.backlog_state(&d)?;
        let mut w = Work::of_keys(self, g, d, keys.len());
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for chunk in changes(keys) {
            let mut counts = Claimers::moved_from(&mut s);
            for k in chunk {
                if !seen.insert(k.as_str()) {
                    continue;
                }
                let Some(m) = w.files.member(&w.d, k, s.head)? else {
                    continue;
                };
                match m.held {
                    Held::Claimed(e) => {
                        s.claimed = s.claimed.saturating_sub(1);
                        counts.add(&w.d, &e.claimed.expect("a claim").agent, -1)?;
                        w.remove(Part::Claims, key::encode(k));
                        // Nothing else may hold it, whatever the files say: no entry
                        // outlives its member (a place below `head` is never read).
                        w.remove(Part::Returned, m.seq.to_string());
                        if m.seq >= s.head {
                            w.step(Step::queue(m.seq, None))?;
                        }
                    }
                    Held::Queued => {
                        s.ready = s.ready.saturating_sub(1);
                        w.step(Step::index(k, None))?;
                        w.step(Step::queue(m.seq, None))?;
                    }
                    Held::Returned => {
                        s.ready = s.ready.saturating_sub(1);
                        w.step(Step::index(k, None))?;
                        w.remove(Part::Returned, m.seq.to_string());
                    }
                }
                out.push(k.clone());
            }
            counts.write(&mut w);
            w.commit(&mut s)?;
        }
        Ok(out)
    }

    /// Up to `n` ready keys after place `after`, in order.
    pub fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        let Some(d) = self.backlog_dirs_read()? else {
            return Ok(Vec::new());
        };
        let s = self.backlog_state(&d)?;
        let from = after.map_or(0, |a| a + 1);
        // Given back: few (they come first in line, so they are claimed first), listed
        // whole; only the first `n` are read.
        let mut back: Vec<u64> = file_names(&d.returned)?
            .into_iter()
            .filter_map(|name| name.parse::<u64>().ok())
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
        // Never claimed: from the head on, up to `n` of them, a chunk at a time.
        let mut taken = 0;
        let mut seq = s.head.max(from);
        while taken < n && seq < s.tail {
            let c = seq / QUEUE_CHUNK;
            let chunk: BTreeMap<u64, String> = read_map(&d.queue, &c.to_string())?;
            for (p, k) in chunk.range(seq..).take(n - taken) {
                out.push(BacklogEntry {
                    key: k.clone(),
                    seq: *p,
                    claimed: None,
                });
                taken += 1;
            }
            seq = (c + 1) * QUEUE_CHUNK;
        }
        out.sort_by_key(|e| e.seq);
        out.truncate(n);
        Ok(out)
    }

    /// Every claimed key, in order.
    pub fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        let Some(d) = self.backlog_dirs_read()? else {
            return Ok(Vec::new());
        };
        let mut out = read_claims(&d)?;
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
        let Some(cl) = claim else {
            return self.backlog_give_back(g, d, key_name);
        };
        let mut s = self.backlog_state(&d)?;
        let mut w = Work::new(self, g, d);
        let Some(m) = w.files.member(&w.d, key_name, s.head)? else {
            return Ok(());
        };
        let mut counts = Claimers::moved_from(&mut s);
        match &m.held {
            Held::Claimed(old) => {
                let was = &old.claimed.as_ref().expect("a claim").agent;
                if *was != cl.agent {
                    counts.add(&w.d, was, -1)?;
                    counts.add(&w.d, &cl.agent, 1)?;
                }
            }
            // At the head (the usual claim) `head` moves past it; after it, it leaves
            // its queue file.
            Held::Queued if m.seq == s.head => w.take_head(&mut s),
            Held::Queued => w.step(Step::queue(m.seq, None))?,
            Held::Returned => w.remove(Part::Returned, m.seq.to_string()),
        }
        if !matches!(m.held, Held::Claimed(_)) {
            s.ready = s.ready.saturating_sub(1);
            s.claimed += 1;
            counts.add(&w.d, &cl.agent, 1)?;
        }
        counts.write(&mut w);
        s.recheck = Some(match s.recheck {
            Some(r) if r < cl.recheck => r,
            _ => cl.recheck,
        });
        w.claim(&BacklogEntry {
            key: key_name.to_string(),
            seq: m.seq,
            claimed: Some(cl.clone()),
        })?;
        w.commit(&mut s)
    }

    /// A claimed key is given back: ready again, in its old place (`returned/`).
    fn backlog_give_back(&self, g: &FileGuard, d: Dirs, key_name: &str) -> Result<()> {
        let Some(old) = read_claim_entry(&d, key_name)? else {
            return Ok(());
        };
        let mut s = self.backlog_state(&d)?;
        let mut w = Work::new(self, g, d);
        let mut counts = Claimers::moved_from(&mut s);
        w.remove(Part::Claims, key::encode(key_name));
        w.write(Part::Returned, old.seq.to_string(), key_name.to_string());
        s.claimed = s.claimed.saturating_sub(1);
        s.ready += 1;
        counts.add(&w.d, &old.claimed.expect("a claim").agent, -1)?;
        counts.write(&mut w);
        w.commit(&mut s)
    }

    /// The engine looked at every claim: none needs a look before `recheck`.
    pub fn backlog_rechecked(&self, g: &FileGuard, recheck: Option<Time>) -> Result<()> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(());
        };
        let mut s = self.backlog_state(&d)?;
        s.recheck = recheck;
        self.publish_replace(g, s.encode()?.as_bytes(), &d.top, STATE)
    }

    pub fn backlog_summary(&self, with_holders: bool) -> Result<BacklogSummary> {
        let Some(d) = self.backlog_dirs(false)? else {
            return Ok(BacklogSummary::default());
        };
        let s = self.backlog_state(&d)?;
        let mut holders: BTreeSet<String> = s.holders.into_keys().collect();
        if with_holders {
            for name in file_names(&d.claimers)? {
                if let Some((_, id)) = read_claimer(&d, &name)? {
                    holders.insert(id);
                }
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

    fn write(self, w: &mut Work) {
        for (agent, n) in self.0 {
            match n {
                0 => w.remove(Part::Claimers, key::encode(&agent)),
                n => w.write(Part::Claimers, key::encode(&agent), format!("{n}\n{agent}")),
            }
        }
    }
}

/// `keys` cut into the changes of a bulk add or remove: [`ADD_CHUNK`] keys of
/// [`ADD_CHUNK_BYTES`] at most each (a key longer than that alone).
fn changes(keys: &[String]) -> impl Iterator<Item = &[String]> {
    let mut rest = keys;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len().min(ADD_CHUNK) && (n == 0 || bytes + rest[n].len() <= ADD_CHUNK_BYTES)
        {
            bytes += rest[n].len();
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// Does the backlog keep the layout before `index/` (or its leftovers)?
fn old_layout(store: &FileStore) -> bool {
    store
        .dir
        .stat(OLD_PENDING_PATH)
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
}

/// The index shard of a key: FNV-1a of its bytes, modulo [`SHARDS`].
fn shard_of(key: &str) -> u64 {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h % SHARDS
}

fn shard_name(n: u64) -> String {
    format!("{n:03x}")
}

/// An index shard or queue chunk; empty when absent, and when damaged (cut short by a
/// power loss: its keys read as no member, as a damaged member file did).
fn read_map<K: DeserializeOwned + Ord, V: DeserializeOwned>(
    dir: &Dir,
    name: &str,
) -> Result<BTreeMap<K, V>> {
    let path = dir.join(name);
    let f = match dir.open_regular(name) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(BTreeMap::new()),
        Err(e) => return Err(Error::io(&path, e)),
    };
    // Read in one go at the size the file has (a growing buffer costs a read a doubling).
    let size = f.metadata().map_err(|e| Error::io(&path, e))?.len();
    let mut bytes = Vec::with_capacity(size.min(MAX_PART) as usize + 1);
    f.take(MAX_PART + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(&path, e))?;
    if bytes.len() as u64 > MAX_PART {
        return Err(Error::Store(format!(
            "{} is larger than any file of the backlog tasklock writes",
            path.display()
        )));
    }
    Ok(serde_json::from_slice(&bytes).unwrap_or_default())
}

fn write_map<K: Serialize, V: Serialize>(
    store: &FileStore,
    g: &FileGuard,
    dir: &Dir,
    name: &str,
    map: &BTreeMap<K, V>,
) -> Result<()> {
    if map.is_empty() {
        return unlink_quiet(dir, name);
    }
    let bytes = serde_json::to_vec(map)
        .map_err(|e| Error::Store(format!("cannot encode a file of the backlog: {e}")))?;
    store.publish_replace(g, &bytes, dir, name)
}

/// The names of the files (not directories) in `dir`.
fn file_names(dir: &Dir) -> Result<Vec<String>> {
    Ok(dir
        .entries()
        .map_err(|e| Error::io(dir.path(), e))?
        .into_iter()
        .filter(|(_, is_dir)| !is_dir)
        .map(|(name, _)| name)
        .collect())
}

/// Remove every file of `dir` (directories in it stay).
fn remove_files(g: &FileGuard, dir: &Dir) -> Result<()> {
    for name in file_names(dir)? {
        g.close_later(
            dir.unlink_open(&name)
                .map_err(|e| Error::io(dir.join(&name), e))?,
        );
    }
    Ok(())
}

/// A claimed key's entry in `claims/`; `None` when it is not claimed (or the file is
/// damaged, or names another key).
fn read_claim_entry(d: &Dirs, key_name: &str) -> Result<Option<BacklogEntry>> {
    Ok(read_claim_file(d, &key::encode(key_name))?.filter(|m| m.key == key_name))
}

/// The claim in the file `name` of `claims/`; `None` when missing, damaged, or the claim
/// of another key than its name encodes.
fn read_claim_file(d: &Dirs, name: &str) -> Result<Option<BacklogEntry>> {
    Ok(read_small(&d.claims, name)?
        .and_then(|b| serde_json::from_slice::<BacklogEntry>(&b).ok())
        .filter(|m| m.claimed.is_some() && key::encode(&m.key) == name))
}

/// Every entry of `claims/`.
fn read_claims(d: &Dirs) -> Result<Vec<BacklogEntry>> {
    let mut out = Vec::new();
    for name in file_names(&d.claims)? {
        out.extend(read_claim_file(d, &name)?);
    }
    Ok(out)
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

/// A step of a journal names a file of the backlog (or an entry of one), never another
/// path.
fn safe_step(st: &Step) -> bool {
    let n = st.name.as_str();
    let plain = !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\0']);
    match st.part {
        // A key, not a file name (the shard is a hash of it).
        Part::Index => !n.is_empty(),
        Part::Queue => n.parse::<u64>().is_ok(),
        Part::State => n == STATE,
        _ => plain,
    }
}

/// Remove `name` from `dir` (absent already is fine: [`Dir::unlink`]).
fn unlink_quiet(dir: &Dir, name: &str) -> Result<()> {
    dir.unlink(name).map_err(|e| Error::io(dir.join(name), e))
}

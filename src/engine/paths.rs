//! Path checkouts: a checkout may cover repository paths (`docs/paths.md`) as well as
//! its key. Two checkouts of different agents conflict when some file could be covered
//! by both; this module finds, for patterns or for one file, the checkouts in the way.

use std::path::{Path, PathBuf};

use super::Ctx;
use crate::error::{Error, Result};
use crate::paths::{self, PathPattern};
use crate::report::OverlapView;
use crate::store::{Queue, Record, Slot, Store, Waiter};

/// Another agent's checkout in the way of patterns: which of its patterns meets which of
/// ours, and a path both cover.
#[derive(Debug, Clone)]
pub struct Overlap {
    pub record: Record,
    pub theirs: String,
    pub mine: String,
    pub witness: String,
}

/// A free key held back for the head of its queue, whose paths meet ours.
#[derive(Debug, Clone)]
pub struct ReservedOverlap {
    pub queue: Queue,
    pub waiter: Waiter,
    pub theirs: String,
    pub mine: String,
    pub witness: String,
}

/// The top of the worktree patterns and files are relative to: the caller's git
/// worktree, else the directory that holds the lock directory.
pub fn root(ctx: &Ctx, cwd: &Path) -> PathBuf {
    match paths::roots(cwd) {
        Some(r) => r.worktree,
        None => ctx
            .dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| cwd.to_path_buf()),
    }
}

/// Patterns as typed, in their stored form (normalised, relative to the worktree top),
/// without repeats. Refused (exit 64): `..` or links out of the tree, absolute paths
/// outside it, bad syntax.
pub fn resolve(ctx: &Ctx, inputs: &[String]) -> Result<Vec<String>> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let root = root(ctx, &cwd);
    let mut out: Vec<PathPattern> = Vec::new();
    for input in inputs {
        let p = paths::normalize(&root, &cwd, input)?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out.iter().map(|p| p.as_str().to_string()).collect())
}

/// Stored patterns compiled; a pattern that does not compile (damage, or a newer
/// version's syntax) covers everything, so it is never silently ignored.
pub fn compile(stored: &[String]) -> Vec<PathPattern> {
    stored
        .iter()
        .map(|s| PathPattern::parse(s).unwrap_or_else(|_| everything()))
        .collect()
}

fn everything() -> PathPattern {
    PathPattern::parse("**").expect("`**` is a pattern")
}

/// The first pair of patterns that overlap, with a path both cover.
fn meet(theirs: &[PathPattern], mine: &[PathPattern]) -> Option<(String, String, String)> {
    for t in theirs {
        for m in mine {
            if let Some(w) = paths::overlap_witness(t, m) {
                return Some((t.to_string(), m.to_string(), w));
            }
        }
    }
    None
}

/// Checkouts of other agents (any key but `key`) whose paths overlap `mine`, as held now
/// (their leases and holders not judged).
pub fn held_overlaps(
    store: &dyn Store,
    me: &str,
    key: &str,
    mine: &[PathPattern],
) -> Result<Vec<Overlap>> {
    let mut out = Vec::new();
    if mine.is_empty() {
        return Ok(out);
    }
    let coverage = Coverage::load(store)?;
    let hits = mine.iter().flat_map(|m| coverage.set.overlapping(m));
    for k in coverage.keys_of(hits) {
        if k == key {
            continue;
        }
        // The index may be behind the records: judge the record itself.
        let Slot::Held(record) = store.read(k)? else {
            continue;
        };
        if record.held_by(me) {
            continue;
        }
        if let Some((theirs, m, witness)) = meet(&compile(&record.paths), mine) {
            out.push(Overlap {
                record,
                theirs,
                mine: m,
                witness,
            });
        }
    }
    Ok(out)
}

/// Keys reserved for the head of their queue (not `me`, not `key`'s own queue) whose
/// waiter, alive, asked for paths that overlap `mine`.
pub fn reserved_overlaps(
    ctx: &Ctx,
    store: &dyn Store,
    me: &str,
    key: &str,
    mine: &[PathPattern],
) -> Result<Vec<ReservedOverlap>> {
    Ok(reservations_meeting(ctx, store, me, key, mine)?
        .into_iter()
        .filter_map(|(o, live)| live.then_some(o))
        .collect())
}

/// As [`reserved_overlaps`], those of dead agents too, each with whether its waiter is
/// alive: a dead agent holds nothing, a reservation included, and the caller that meets
/// one under the guard passes it on.
pub fn reservations_meeting(
    ctx: &Ctx,
    store: &dyn Store,
    me: &str,
    key: &str,
    mine: &[PathPattern],
) -> Result<Vec<(ReservedOverlap, bool)>> {
    let mut out = Vec::new();
    if mine.is_empty() {
        return Ok(out);
    }
    for q in store.scan_queues()? {
        if q.key == key {
            continue;
        }
        let Some(res) = q.reservation() else { continue };
        if res.agent == me || ctx.now() >= res.until {
            continue;
        }
        let Some(w) = q.waiters.iter().find(|w| w.agent == res.agent) else {
            continue;
        };
        if let Some((theirs, m, witness)) = meet(&compile(&w.paths), mine) {
            let live = !crate::liveness::waiter_gone(store, w, &ctx.now(), &ctx.config()?)?;
            let waiter = w.clone();
            out.push((
                ReservedOverlap {
                    queue: q,
                    waiter,
                    theirs,
                    mine: m,
                    witness,
                },
                live,
            ));
        }
    }
    Ok(out)
}

/// Every path checkout's patterns, indexed once for many files (the commit guard).
pub struct Coverage {
    set: paths::PatternSet,
    /// The key of each pattern of `set`, by its index there.
    keys: Vec<String>,
}

impl Coverage {
    pub fn load(store: &dyn Store) -> Result<Coverage> {
        let mut set = paths::PatternSet::new();
        let mut keys = Vec::new();
        for (k, stored) in store.path_index()? {
            for p in compile(&stored) {
                let i = set.insert(p);
                if keys.len() <= i {
                    keys.resize(i + 1, String::new());
                }
                keys[i] = k.clone();
            }
        }
        Ok(Coverage { set, keys })
    }

    /// No checkout covers any path.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The keys of the patterns at `indices` of the set, each once, in order.
    fn keys_of(&self, indices: impl Iterator<Item = usize>) -> Vec<&str> {
        let mut keys: Vec<&str> = indices.map(|i| self.keys[i].as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// As [`covering`], from the patterns loaded.
    pub fn covering(&self, store: &dyn Store, file: &str) -> Result<Vec<(Record, String)>> {
        let mut out = Vec::new();
        for k in self.keys_of(self.set.matching(file).into_iter()) {
            let Slot::Held(record) = store.read(k)? else {
                continue;
            };
            if let Some(p) = compile(&record.paths)
                .into_iter()
                .find(|p| paths::matches(p, file))
            {
                out.push((record, p.to_string()));
            }
        }
        Ok(out)
    }
}

/// The checkouts that cover one file (normalised as [`paths::normalize_file`] gives it),
/// of any agent, as held now.
pub fn covering(store: &dyn Store, file: &str) -> Result<Vec<(Record, String)>> {
    Coverage::load(store)?.covering(store, file)
}

impl From<&Overlap> for OverlapView {
    fn from(o: &Overlap) -> Self {
        OverlapView {
            key: o.record.key.clone(),
            agent: crate::report::CheckoutView::from(&o.record).agent,
            token: Some(o.record.token),
            until: o.record.expires_at,
            theirs: o.theirs.clone(),
            mine: o.mine.clone(),
            witness: o.witness.clone(),
            reserved: false,
        }
    }
}

impl ReservedOverlap {
    pub fn view(&self) -> OverlapView {
        let res = self.queue.reservation().expect("a reserved queue");
        let w = &self.waiter;
        OverlapView {
            key: self.queue.key.clone(),
            agent: crate::report::AgentView {
                id: w.agent.clone(),
                name: w.name.clone(),
                host: w.host.clone(),
                pid: None,
                parent: None,
                user: w.user.clone(),
            },
            token: None,
            until: res.until,
            theirs: self.theirs.clone(),
            mine: self.mine.clone(),
            witness: self.witness.clone(),
            reserved: true,
        }
    }
}

//! Reads sent ahead, in the round trip of a key scope's `BEGIN`: after its locks, each
//! key's record, queue and whether it has slot records, the freezes, and for a key with
//! no record a fencing token with the key's history (what a grant asks for next). A
//! claim's `BEGIN` also takes the backlog's next key, and reads it so.
//!
//! Nothing is decided here: the engine asks for these as before and is answered from
//! what was read ([`TxCache::ahead`]). Each statement of one simple query sees what was
//! committed before it began (`READ COMMITTED`), so the reads, sent after the locks, see
//! every change their holders made; no other scope can change them until this one ends
//! (a key's record under its lock, queues and freezes under the project's, held
//! shared). Own writes drop what they change ([`PgStore::forget_ahead`]).
//!
//! A token is drawn ahead only where a grant is likely: a key with no record, no slot
//! records and no queue, while no freeze is stored (whether one covers the key is the
//! engine's to judge); elsewhere the grant draws its own, in a round trip of its own. One
//! drawn ahead and not asked for (the scope only released a key not held, or was
//! refused) is a gap in the sequence, as a rolled-back grant leaves.

use super::*;
use crate::store::{BacklogEntry, History};

/// How many notes are read ahead with a token: at least what a grant shows
/// (`engine::NOTES_SHOWN`); a grant that asks for more reads them itself.
const NOTES_AHEAD: usize = 3;

/// The first column's name of the rows of the reads ahead (and of a claim's take).
const AHEAD: &str = "tasklock_ahead";

/// The transaction-local setting that carries the key a claim took to the statement
/// that reads it (the two are statements of one message; in one transaction, so in one
/// server session behind a pooler in transaction mode too).
const TAKEN: &str = "tasklock.taken";

/// What was read ahead of one key, each part until this transaction writes it.
pub(super) struct KeyAhead {
    pub(super) slot: Option<Slot>,
    pub(super) queue: Option<Queue>,
}

/// What the reads ahead found, kept for the transaction.
#[derive(Default)]
pub(super) struct Ahead {
    pub(super) keys: std::collections::HashMap<String, KeyAhead>,
    /// A token drawn for a key, with the key's history (notes: the last [`NOTES_AHEAD`]).
    pub(super) grants: std::collections::HashMap<String, (u64, History)>,
    /// The backlog's first ready key this claim took (`None` inside: none was ready or
    /// free), until [`PgStore::backlog_take`] asks for it.
    pub(super) taken: Option<Option<BacklogEntry>>,
}

impl PgStore {
    /// The statements that read `keys` ahead (after a scope's locks): none for a scope
    /// of registry entries alone.
    pub(super) fn ahead_sql(&self, keys: &[&str]) -> String {
        if keys.is_empty() {
            return String::new();
        }
        let list: Vec<String> = keys.iter().map(|k| literal(k)).collect();
        self.read_ahead_sql(&format!(
            "SELECT unnest(ARRAY[{}]::text[])",
            list.join(", ")
        ))
    }

    /// A claim's take of the backlog's first ready key whose lock is free
    /// ([`PgStore::backlog_take`]'s statement) and the reads ahead of the key it took.
    pub(super) fn take_ahead_sql(&self) -> String {
        let prefix: String = self
            .key_lock_prefix()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let take = self.sql(&Self::take_sql("-1", &format!("decode('{prefix}', 'hex')")));
        format!(
            "; SELECT '{TAKEN}' AS {AHEAD}, nullif(set_config('{TAKEN}', coalesce(t.key, ''), true), ''), \
             t.seq FROM (SELECT 1) AS one LEFT JOIN ({take}) AS t ON true{}",
            self.read_ahead_sql(&format!(
                "SELECT nullif(current_setting('{TAKEN}', true), '')"
            ))
        )
    }

    /// The statement reading ahead the keys `keys` (a query of one column) gives. The
    /// schema is put in before the keys, which may hold anything.
    fn read_ahead_sql(&self, keys: &str) -> String {
        self.sql(&format!(
            "; WITH k AS (SELECT x.key, r.data::text AS rec FROM ({{keys}}) AS x(key) \
                 LEFT JOIN {{s}}.records r ON r.key = x.key WHERE x.key IS NOT NULL), \
               t AS (SELECT key, nextval('{{s}}.tokens') AS token FROM k WHERE rec IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM {{s}}.slot_records s WHERE s.key = k.key) \
                 AND NOT EXISTS (SELECT 1 FROM {{s}}.queues q WHERE q.key = k.key) \
                 AND NOT EXISTS (SELECT 1 FROM {{s}}.freezes)) \
             SELECT 'key' AS {AHEAD}, k.key, \
                 (EXISTS (SELECT 1 FROM {{s}}.slot_records s WHERE s.key = k.key))::int::bigint, \
                 k.rec, (SELECT q.data::text FROM {{s}}.queues q WHERE q.key = k.key) FROM k \
             UNION ALL SELECT 'freezes', NULL, NULL, NULL, NULL \
             UNION ALL SELECT 'freeze', NULL, NULL, data::text, NULL FROM {{s}}.freezes \
             UNION ALL SELECT 'token', key, token, NULL, NULL FROM t \
             UNION ALL SELECT 'ended', t.key, NULL, e.data::text, NULL \
                 FROM t JOIN {{s}}.ended e ON e.key = t.key \
             UNION ALL SELECT 'note', t.key, n.id, n.data::text, NULL FROM t, LATERAL \
                 (SELECT id, data FROM {{s}}.notes WHERE key = t.key \
                  ORDER BY id DESC LIMIT {NOTES_AHEAD}) AS n"
        ))
        .replace("{keys}", keys)
    }

    /// Keep what the reads ahead in a begin's answer found (`g`: the scope they were
    /// made in; a key it does not hold is not kept).
    pub(super) fn keep_ahead(&self, g: &PgGuard, rows: &[SimpleQueryMessage]) {
        let mut cache = self.conn.cache.borrow_mut();
        let mut freezes: Option<Vec<&str>> = None;
        let mut ended = std::collections::HashMap::new();
        let mut notes: std::collections::HashMap<&str, Vec<(i64, &str)>> = Default::default();
        for r in rows.iter().filter_map(|m| match m {
            SimpleQueryMessage::Row(r) if r.columns().first().map(|c| c.name()) == Some(AHEAD) => {
                Some(r)
            }
            _ => None,
        }) {
            let key = r.get(1);
            let n = r.get(2).and_then(|v| v.parse::<i64>().ok());
            match (r.get(0).unwrap_or(""), key) {
                (TAKEN, key) => {
                    let taken = key.map(|key| {
                        self.hold(g, key);
                        BacklogEntry {
                            key: key.to_string(),
                            seq: n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                            claimed: None,
                        }
                    });
                    cache.ahead.taken = Some(taken);
                }
                ("key", Some(key)) if g.holds(key) => {
                    if n == Some(0) {
                        cache.no_slots.insert(key.to_string());
                    }
                    let slot = r.get(3).map_or(Slot::Free, |d| self.slot(key, d));
                    let queue = r
                        .get(4)
                        .and_then(|d| serde_json::from_str::<Queue>(d).ok())
                        .filter(|q| q.key == key)
                        .unwrap_or_else(|| Queue::empty(key));
                    cache.ahead.keys.insert(
                        key.to_string(),
                        KeyAhead {
                            slot: Some(slot),
                            queue: Some(queue),
                        },
                    );
                }
                ("freezes", _) => freezes = Some(freezes.unwrap_or_default()),
                ("freeze", _) => freezes.get_or_insert_with(Vec::new).extend(r.get(3)),
                ("token", Some(key)) => {
                    if let Some(t) = n.and_then(|n| u64::try_from(n).ok()) {
                        cache
                            .ahead
                            .grants
                            .insert(key.to_string(), (t, (None, Vec::new())));
                    }
                }
                ("ended", Some(key)) => {
                    ended.insert(key, r.get(3).unwrap_or(""));
                }
                ("note", Some(key)) => {
                    if let (Some(id), Some(d)) = (n, r.get(3)) {
                        notes.entry(key).or_default().push((id, d));
                    }
                }
                _ => {}
            }
        }
        if let Some(f) = freezes {
            cache.freezes = Some(super::history::decode_freezes(f));
        }
        for (key, (_, history)) in cache.ahead.grants.iter_mut() {
            let rows = ended
                .get(key.as_str())
                .map(|d| (1, None, *d))
                .into_iter()
                .chain(
                    notes
                        .get(key.as_str())
                        .into_iter()
                        .flatten()
                        .map(|(id, d)| (2, Some(*id), *d)),
                );
            *history = super::history::history_of(key, rows);
        }
    }

    /// What was read ahead of `key` in this transaction, if it still stands.
    pub(super) fn ahead<T>(&self, key: &str, f: impl FnOnce(&KeyAhead) -> Option<T>) -> Option<T> {
        if !self.conn.in_tx.get() {
            return None;
        }
        self.conn.cache.borrow().ahead.keys.get(key).and_then(f)
    }

    /// A token drawn ahead for `key`, with its history of `n` notes, once.
    pub(super) fn grant_ahead(&self, key: &str, n: usize) -> Option<(u64, History)> {
        if !self.conn.in_tx.get() || n > NOTES_AHEAD {
            return None;
        }
        let (token, (ended, mut notes)) = self.conn.cache.borrow_mut().ahead.grants.remove(key)?;
        notes.drain(..notes.len().saturating_sub(n));
        Some((token, (ended, notes)))
    }

    /// The key a claim's begin took, once.
    pub(super) fn taken_ahead(&self) -> Option<Option<BacklogEntry>> {
        if !self.conn.in_tx.get() {
            return None;
        }
        self.conn.cache.borrow_mut().ahead.taken.take()
    }

    /// This transaction writes a record of `key`: what was read of it ahead no longer
    /// stands.
    pub(super) fn forget_record_ahead(&self, key: &str) {
        if let Some(a) = self.conn.cache.borrow_mut().ahead.keys.get_mut(key) {
            a.slot = None;
        }
    }

    /// This transaction writes `key`'s queue.
    pub(super) fn forget_queue_ahead(&self, key: &str) {
        if let Some(a) = self.conn.cache.borrow_mut().ahead.keys.get_mut(key) {
            a.queue = None;
        }
    }
}

//! The records of checkouts: a key's own (`records`) and its slots' (`slot_records`).

use super::*;

/// Where a row stands in a scan: the records of keys before those of slots, then by
/// encoded key (the file store's order), then by slot number.
pub(super) type ScanOrder = (bool, String, Option<i32>);

/// A slot number as stored (`slot_records.slot`, an `integer` from 1); `None` when it
/// cannot be one.
pub(super) fn slot_number(n: u32) -> Option<i32> {
    i32::try_from(n).ok().filter(|n| *n > 0)
}

impl PgStore {
    /// The record of the key itself (never one of its slots': they are rows of
    /// `slot_records`).
    pub fn read(&self, key: &str) -> Result<Slot> {
        if let Some(slot) = self.ahead(key, |a| a.slot.clone()) {
            return Ok(slot);
        }
        let rows = self.rows(
            "read a record",
            "SELECT data::text FROM {s}.records WHERE key = $1",
            &[(&key, Type::TEXT)],
        )?;
        Ok(match rows.first() {
            None => Slot::Free,
            Some(r) => self.slot(key, r.get(0)),
        })
    }

    /// The records of the slots of `key` held now, in slot order, damaged ones included.
    pub fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        if self.conn.in_tx.get() && self.conn.cache.borrow().no_slots.contains(key) {
            return Ok(Vec::new());
        }
        let rows = self.rows(
            "read the records of slots",
            "SELECT slot, data::text FROM {s}.slot_records WHERE key = $1 ORDER BY slot",
            &[(&key, Type::TEXT)],
        )?;
        Ok(rows
            .iter()
            .map(|r| self.judge(key, Some(r.get(0)), r.get(1)))
            .collect())
    }

    /// A row of `records` as the key's slot.
    pub(super) fn slot(&self, key: &str, data: &str) -> Slot {
        self.judge(key, None, data)
    }

    /// A stored record, judged: held when it decodes, has a format this build reads,
    /// names `key`, and names the slot of its row (`slot`: a row of `slot_records`) or,
    /// a row of `records`, no slot. Anything else is damage, named by its row.
    pub(super) fn judge(&self, key: &str, slot: Option<i32>, data: &str) -> Slot {
        let corrupt = |problem: String| Slot::Corrupt {
            path: match slot {
                None => PathBuf::from(format!("{}.records[{key:?}]", self.schema)),
                Some(n) => PathBuf::from(format!("{}.slot_records[{key:?}, {n}]", self.schema)),
            },
            problem,
        };
        match serde_json::from_str::<Record>(data) {
            Ok(r) if r.version > FORMAT_VERSION => corrupt(format!(
                "it has format version {}, newer than this tasklock understands ({FORMAT_VERSION}); upgrade tasklock",
                r.version
            )),
            Ok(r) if r.version == 0 => corrupt("it has no valid format version".into()),
            Ok(r) if r.key != key => corrupt(format!("it names the key {:?}, not {key:?}", r.key)),
            Ok(r) if r.slot.map(i64::from) != slot.map(i64::from) => {
                corrupt(match (slot, r.slot) {
                    (Some(n), Some(s)) => {
                        format!("it is in the place of slot {n} but names slot {s}")
                    }
                    (Some(n), None) => format!("it is in the place of slot {n} but names no slot"),
                    (None, Some(s)) => format!(
                        "it names slot {s}, but it is in the place of the record of the key itself"
                    ),
                    (None, None) => unreachable!("equal"),
                })
            }
            Ok(r) => Slot::Held(r),
            Err(e) => corrupt(format!("not a valid record ({e})")),
        }
    }

    /// Every slot that is not free, in the order of the file store: the records of keys
    /// (by encoded key), then the records of slots (by encoded key, then slot number).
    /// One statement, so one snapshot.
    pub fn scan(&self) -> Result<Vec<Slot>> {
        let rows = self.rows(
            "read the records",
            "SELECT key, NULL::integer, data::text FROM {s}.records \
             UNION ALL SELECT key, slot, data::text FROM {s}.slot_records",
            &[],
        )?;
        Ok(self.in_scan_order(&rows))
    }

    /// Rows of `key, slot, data` as judged slots, in the order of [`PgStore::scan`].
    fn in_scan_order(&self, rows: &[tokio_postgres::Row]) -> Vec<Slot> {
        let mut out: Vec<(ScanOrder, Slot)> = rows
            .iter()
            .map(|r| {
                let key: &str = r.get(0);
                let slot: Option<i32> = r.get(1);
                (
                    (slot.is_some(), crate::key::encode(key), slot),
                    self.judge(key, slot, r.get(2)),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// See [`crate::store::Store::path_index`]: the key and patterns of the records with
    /// paths alone, picked out on the server (a path checkout runs under the project's
    /// lock: it must not read every record of a fleet).
    pub fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        let rows = self.rows(
            "read the records with paths",
            "SELECT key, (data->'paths')::text FROM {s}.records \
             WHERE jsonb_typeof(data->'paths') = 'array' AND data->'paths' <> '[]'::jsonb \
             UNION ALL SELECT key, (data->'paths')::text FROM {s}.slot_records \
             WHERE jsonb_typeof(data->'paths') = 'array' AND data->'paths' <> '[]'::jsonb",
            &[],
        )?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let paths: Vec<String> = serde_json::from_str(r.get(1)).ok()?;
                Some((r.get::<_, String>(0), paths))
            })
            .collect())
    }

    /// See [`crate::store::Store::held_by`]: one statement; `agent = $1` alone is
    /// answered by the `agent` indexes, with subagents by a scan of the rows (the prefix
    /// cannot use an index under every collation), on the server.
    pub fn held_by(&self, agent: &str, subagents: bool) -> Result<Vec<Record>> {
        let prefix = subagents.then(|| format!("{agent}/"));
        let rows = self.rows(
            "read an agent's records",
            "SELECT key, NULL::integer, data::text FROM {s}.records \
             WHERE agent = $1 OR left(agent, length($2)) = $2 \
             UNION ALL SELECT key, slot, data::text FROM {s}.slot_records \
             WHERE agent = $1 OR left(agent, length($2)) = $2",
            &[(&agent, Type::TEXT), (&prefix, Type::TEXT)],
        )?;
        Ok(self
            .in_scan_order(&rows)
            .into_iter()
            .filter_map(Slot::held)
            .filter(|r| r.held_by_or_under(agent, subagents))
            .collect())
    }

    /// The slots and queues of `keys`, in order, in one query: the list is sent as an
    /// array and joined against `records` and `queues` by their primary keys (one key,
    /// the claim of a backlog's: looked up directly, a statement quicker to plan).
    pub fn read_many(&self, g: &PgGuard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        let ahead: Option<Vec<(Slot, Queue)>> = keys
            .iter()
            .map(|k| self.ahead(k, |a| Some((a.slot.clone()?, a.queue.clone()?))))
            .collect();
        if let Some(read) = ahead {
            return Ok(read);
        }
        let has_slots = "EXISTS (SELECT 1 FROM {s}.slot_records s WHERE s.key = t.key)";
        // A claim judges the freezes next: read with the key, kept for the transaction
        // (a freeze is written under the project's lock, which every scope holds shared).
        let with_freezes = keys.len() == 1 && self.conn.cache.borrow().freezes.is_none();
        let rows = match keys {
            [key] => self.rows(
                "read a record and its queue",
                &format!(
                    "SELECT (SELECT data::text FROM {{s}}.records WHERE key = t.key), \
                            (SELECT data::text FROM {{s}}.queues WHERE key = t.key), {has_slots}{} \
                     FROM (SELECT $1::text AS key) AS t",
                    if with_freezes {
                        ", ARRAY(SELECT data::text FROM {s}.freezes)"
                    } else {
                        ""
                    }
                ),
                &[(key, Type::TEXT)],
            )?,
            _ => self.rows(
                "read records and queues",
                &format!(
                    "SELECT r.data::text, q.data::text, {has_slots} \
                     FROM unnest($1::text[]) WITH ORDINALITY AS t(key, n) \
                     LEFT JOIN {{s}}.records r ON r.key = t.key \
                     LEFT JOIN {{s}}.queues q ON q.key = t.key \
                     ORDER BY t.n"
                ),
                &[(&keys, Type::TEXT_ARRAY)],
            )?,
        };
        if rows.len() != keys.len() {
            return Err(Error::Store(format!(
                "PostgreSQL at {}: asked for {} keys, got {} rows",
                self.conn.url,
                keys.len(),
                rows.len()
            )));
        }
        // That a key has no slot records is kept for the transaction (a checkout's look
        // for them) where no other scope can add one: the key's lock is held.
        let mut cache = self.conn.cache.borrow_mut();
        if with_freezes && let Some(row) = rows.first() {
            let freezes: Vec<&str> = row.get(3);
            cache.freezes = Some(super::history::decode_freezes(freezes));
        }
        Ok(keys
            .iter()
            .zip(rows)
            .map(|(k, row)| {
                if !row.get::<_, bool>(2) && g.holds(k) {
                    cache.no_slots.insert(k.clone());
                }
                let slot = match row.get::<_, Option<&str>>(0) {
                    None => Slot::Free,
                    Some(data) => self.slot(k, data),
                };
                let queue = row
                    .get::<_, Option<&str>>(1)
                    .and_then(|d| serde_json::from_str::<Queue>(d).ok())
                    .filter(|q| q.key == *k)
                    .unwrap_or_else(|| Queue::empty(k));
                (slot, queue)
            })
            .collect())
    }

    /// Publish the record of a key, or (`record.slot`) of one slot of it, where there is
    /// none.
    pub fn insert(&self, g: &PgGuard, record: &Record) -> Result<()> {
        let n = self.upsert_record(g, record, false)?;
        if n == 0 {
            let what = match record.slot {
                None => format!("`{}`", record.key),
                Some(s) => format!("slot {s} of `{}`", record.key),
            };
            // A failed step, as a failed statement would be: the commit then keeps nothing.
            self.conn
                .failed
                .borrow_mut()
                .get_or_insert_with(|| format!("the record of {what} exists already"));
            return Err(Error::Store(format!(
                "a record for {what} appeared in {} while this command held the project's lock; is another tool writing there?",
                self.describe()
            )));
        }
        Ok(())
    }

    pub fn replace(&self, g: &PgGuard, record: &Record) -> Result<()> {
        self.upsert_record(g, record, true).map(|_| ())
    }

    /// Write the record of a key (a row of `records`) or of one slot of it (`r.slot`: a
    /// row of `slot_records`); `replace` or only where there is none. The rows written.
    pub(super) fn upsert_record(&self, g: &PgGuard, r: &Record, replace: bool) -> Result<u64> {
        g.changed.set(true);
        self.forget_record_ahead(&r.key);
        if r.slot.is_some() {
            self.conn.cache.borrow_mut().no_slots.remove(&r.key);
        }
        let data = to_json(r, "record")?;
        let token = r.token as i64;
        let expires = rfc3339(&r.expires_at);
        if let Some(n) = r.slot {
            let slot = slot_number(n).ok_or_else(|| {
                Error::Store(format!(
                    "cannot write slot {n} of `{}`: slots are numbered from 1 to {}",
                    r.key,
                    i32::MAX
                ))
            })?;
            let sql = if replace {
                "INSERT INTO {s}.slot_records (key, slot, token, agent, expires_at, data) \
                 VALUES ($1, $2, $3, $4, $5::timestamptz, $6::jsonb) \
                 ON CONFLICT (key, slot) DO UPDATE SET token = excluded.token, \
                 agent = excluded.agent, expires_at = excluded.expires_at, data = excluded.data \
                 RETURNING 1"
            } else {
                "INSERT INTO {s}.slot_records (key, slot, token, agent, expires_at, data) \
                 VALUES ($1, $2, $3, $4, $5::timestamptz, $6::jsonb) \
                 ON CONFLICT (key, slot) DO NOTHING RETURNING 1"
            };
            return self.exec(
                "write the record of a slot",
                sql,
                &[
                    (&r.key, Type::TEXT),
                    (&slot, Type::INT4),
                    (&token, Type::INT8),
                    (&r.agent.id, Type::TEXT),
                    (&expires, Type::TEXT),
                    (&data, Type::TEXT),
                ],
            );
        }
        if !replace {
            // A new record: nothing waits for the answer (the key's lock is held, so no
            // record can be there), so it goes with the next statement on `records`, or
            // the COMMIT. One that is there after all fails that round trip: nothing of
            // the command is kept.
            self.conn.put_off(
                "records",
                format!(
                    "INSERT INTO {}.records (key, token, agent, expires_at, data) \
                 VALUES ({}, {token}, {}, {}::timestamptz, {}::jsonb)",
                    self.schema,
                    super::literal(&r.key),
                    super::literal(&r.agent.id),
                    super::literal(&expires),
                    super::literal(&data),
                ),
            );
            return Ok(1);
        }
        let sql = "INSERT INTO {s}.records (key, token, agent, expires_at, data) \
             VALUES ($1, $2, $3, $4::timestamptz, $5::jsonb) \
             ON CONFLICT (key) DO UPDATE SET token = excluded.token, agent = excluded.agent, \
             expires_at = excluded.expires_at, data = excluded.data RETURNING 1";
        self.exec(
            "write a record",
            sql,
            &[
                (&r.key, Type::TEXT),
                (&token, Type::INT8),
                (&r.agent.id, Type::TEXT),
                (&expires, Type::TEXT),
                (&data, Type::TEXT),
            ],
        )
    }

    /// Remove the record of a key, or (`slot`) of that slot of it; absent is fine.
    pub fn remove(&self, g: &PgGuard, key: &str, slot: Option<u32>) -> Result<()> {
        g.changed.set(true);
        self.forget_record_ahead(key);
        if let Some(n) = slot {
            // A slot out of range was never written.
            let Some(slot) = slot_number(n) else {
                return Ok(());
            };
            // As for a record: a claimed key of the backlog is ready again.
            return self
                .exec(
                    "remove the record of a slot",
                    "WITH d AS (DELETE FROM {s}.slot_records WHERE key = $1 AND slot = $2 RETURNING 1), \
                     b AS (UPDATE {s}.backlog SET agent = NULL, recheck = NULL \
                           WHERE key = $1 AND agent IS NOT NULL AND EXISTS (SELECT 1 FROM d)) \
                     SELECT 1 FROM d",
                    &[(&key, Type::TEXT), (&slot, Type::INT4)],
                )
                .map(|_| ());
        }
        // A claimed key of the backlog is ready again once its record is gone. Nothing
        // waits for the answer: sent with the next statement on either table, or the
        // COMMIT.
        self.conn.put_off_all(
            &["records", "backlog"],
            format!(
                "WITH d AS (DELETE FROM {s}.records WHERE key = {k} RETURNING 1) \
                 UPDATE {s}.backlog SET agent = NULL, recheck = NULL \
                 WHERE key = {k} AND agent IS NOT NULL AND EXISTS (SELECT 1 FROM d)",
                s = self.schema,
                k = super::literal(key),
            ),
        );
        Ok(())
    }
}

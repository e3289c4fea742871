//! What outlives a checkout: how it ended (`ended`), notes (`notes`), and freezes (`freezes`).

use super::*;
use crate::store::History;

/// Rows of `freezes` as read: those that decode (soft state, as [`PgStore::all`] skips
/// the others), by pattern.
pub(super) fn decode_freezes<'a>(data: impl IntoIterator<Item = &'a str>) -> Vec<Freeze> {
    let mut out: Vec<Freeze> = data
        .into_iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    out.sort_by(|a, b| a.pattern.cmp(&b.pattern));
    out
}

impl PgStore {
    pub fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        Ok(self
            .one::<Ended>(
                "read how a checkout ended",
                "SELECT data::text FROM {s}.ended WHERE key = $1",
                &[(&key, Type::TEXT)],
            )?
            .filter(|e| e.key == key))
    }

    pub fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        let n = n as i64;
        let mut notes: Vec<Note> = self.all(
            "read notes",
            "SELECT data::text FROM {s}.notes WHERE key = $1 ORDER BY id DESC LIMIT $2",
            &[(&key, Type::TEXT), (&n, Type::INT8)],
        )?;
        notes.reverse();
        Ok(notes)
    }

    /// [`PgStore::read_ended`] and [`PgStore::last_notes`] in one statement.
    pub fn history(&self, key: &str, n: usize) -> Result<History> {
        let rows = self.rows(
            "read a key's history",
            HISTORY,
            &[(&key, Type::TEXT), (&(n as i64), Type::INT8)],
        )?;
        Ok(history_of(key, kinds(&rows)))
    }

    /// A grant's fencing token and its key's history ([`PgStore::history`]), in one
    /// statement: a claim's round trip less.
    pub fn grant_token(&self, key: &str, n: usize) -> Result<(u64, History)> {
        if let Some(drawn) = self.grant_ahead(key, n) {
            return Ok(drawn);
        }
        let rows = self.rows(
            "take a fencing token and read the key's history",
            &format!("SELECT 0, nextval('{{s}}.tokens'), NULL::text UNION ALL {HISTORY}"),
            &[(&key, Type::TEXT), (&(n as i64), Type::INT8)],
        )?;
        let token = rows
            .iter()
            .find(|r| r.get::<_, i32>(0) == 0)
            .and_then(|r| r.get::<_, Option<i64>>(1))
            .ok_or_else(|| Error::Store("nextval returned nothing".into()))?;
        Ok((token as u64, history_of(key, kinds(&rows))))
    }

    pub fn freezes(&self) -> Result<Vec<Freeze>> {
        let in_tx = self.conn.in_tx.get();
        if in_tx && let Some(f) = &self.conn.cache.borrow().freezes {
            return Ok(f.clone());
        }
        let rows = self.rows(
            "read the freezes",
            "SELECT data::text FROM {s}.freezes",
            &[],
        )?;
        let out = decode_freezes(rows.iter().map(|r| r.get::<_, &str>(0)));
        if in_tx {
            self.conn.cache.borrow_mut().freezes = Some(out.clone());
        }
        Ok(out)
    }

    pub fn frozen(&self, key: &str, now: &Time) -> Result<Option<Freeze>> {
        Ok(self
            .freezes()?
            .into_iter()
            .filter(|f| f.active(now) && f.covers(key))
            .max_by_key(|f| f.until))
    }

    pub fn write_ended(&self, _g: &PgGuard, ended: &Ended) -> Result<()> {
        let data = to_json(ended, "ended checkout")?;
        // Nothing waits for its answer: sent with the next statement on `ended`, or the
        // COMMIT.
        self.conn.put_off(
            "ended",
            format!(
                "INSERT INTO {}.ended (key, token, data) VALUES ({}, {}, {}::jsonb) \
                 ON CONFLICT (key) DO UPDATE SET token = excluded.token, data = excluded.data",
                self.schema,
                literal(&ended.key),
                ended.token as i64,
                literal(&data),
            ),
        );
        Ok(())
    }

    pub fn append_note(&self, _g: &PgGuard, key: &str, note: &Note) -> Result<()> {
        let data = to_json(note, "note")?;
        self.exec(
            "append a note",
            "INSERT INTO {s}.notes (key, data) VALUES ($1, $2::jsonb) RETURNING 1",
            &[(&key, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn write_freeze(&self, g: &PgGuard, f: &Freeze) -> Result<()> {
        g.changed.set(true);
        self.conn.cache.borrow_mut().freezes = None;
        let data = to_json(f, "freeze")?;
        let until = rfc3339(&f.until);
        self.exec(
            "write a freeze",
            "INSERT INTO {s}.freezes (pattern, until, data) VALUES ($1, $2::timestamptz, $3::jsonb) \
             ON CONFLICT (pattern) DO UPDATE SET until = excluded.until, data = excluded.data \
             RETURNING 1",
            &[
                (&f.pattern, Type::TEXT),
                (&until, Type::TEXT),
                (&data, Type::TEXT),
            ],
        )
        .map(|_| ())
    }

    pub fn remove_freeze(&self, g: &PgGuard, pattern: &str) -> Result<Option<Freeze>> {
        g.changed.set(true);
        self.conn.cache.borrow_mut().freezes = None;
        self.one(
            "remove a freeze",
            "DELETE FROM {s}.freezes WHERE pattern = $1 RETURNING data::text",
            &[(&pattern, Type::TEXT)],
        )
    }
}

/// A key's ended fact (kind 1) and its last `$2` notes (kind 2, by id), for key `$1`: as
/// (kind, id, data).
const HISTORY: &str = "SELECT 1, NULL::bigint, data::text FROM {s}.ended WHERE key = $1 \
     UNION ALL \
     (SELECT 2, id, data::text FROM {s}.notes WHERE key = $1 ORDER BY id DESC LIMIT $2)";

/// Rows of [`HISTORY`] as (kind, id, data) (a grant's token row, of no data, left out).
fn kinds(rows: &[tokio_postgres::Row]) -> impl Iterator<Item = (i32, Option<i64>, &str)> {
    rows.iter()
        .filter_map(|r| Some((r.get(0), r.get(1), r.get::<_, Option<&str>>(2)?)))
}

/// The history in rows of [`HISTORY`] (kind, id, data): the notes oldest first.
pub(super) fn history_of<'a>(
    key: &str,
    rows: impl IntoIterator<Item = (i32, Option<i64>, &'a str)>,
) -> History {
    let mut ended = None;
    let mut notes = Vec::new();
    for (kind, id, data) in rows {
        match (kind, id) {
            (1, _) => {
                ended = serde_json::from_str::<Ended>(data)
                    .ok()
                    .filter(|e| e.key == key)
            }
            (2, Some(id)) => notes.extend(serde_json::from_str::<Note>(data).ok().map(|n| (id, n))),
            _ => {}
        }
    }
    notes.sort_by_key(|(id, _)| *id);
    (ended, notes.into_iter().map(|(_, n)| n).collect())
}

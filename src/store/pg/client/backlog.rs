//! The backlog of `checkout --next` (`backlog`): one row per key, its place in line
//! (`seq`) and its claim (`agent`, `recheck`). Partial indexes answer the next ready
//! keys, the earliest recheck and the claimers without reading the whole table.

use super::*;
use crate::store::{BacklogClaim, BacklogEntry, BacklogSummary};

/// A `timestamptz` column as microseconds since the epoch, and back.
fn micros(t: &Time) -> i64 {
    t.timestamp_micros()
}

fn time(us: i64) -> Result<Time> {
    chrono::DateTime::from_timestamp_micros(us)
        .ok_or_else(|| Error::Store(format!("a backlog claim has a time out of range ({us} µs)")))
}

fn entry(r: &tokio_postgres::Row) -> Result<BacklogEntry> {
    let agent: Option<String> = r.get(2);
    let recheck: Option<i64> = r.get(3);
    Ok(BacklogEntry {
        key: r.get(0),
        seq: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
        claimed: match (agent, recheck) {
            (Some(agent), Some(us)) => Some(BacklogClaim {
                agent,
                recheck: time(us)?,
            }),
            _ => None,
        },
    })
}

/// Keys one statement of `backlog add` inserts at most (an array of them is one
/// parameter: bounded, whatever the length of the file).
const ADD_CHUNK: usize = 50_000;

/// Claimers found by index probes before the summary reads the claims in one pass.
const PROBED_CLAIMERS: usize = 64;

const ENTRY: &str = "key, seq, agent, (extract(epoch FROM recheck) * 1000000)::bigint AS recheck";

impl PgStore {
    /// One statement per [`ADD_CHUNK`] keys. The keys already in the backlog are left
    /// out by reading the primary key (no `ON CONFLICT`: its speculative insertion made
    /// 200,000 keys a third slower); the add holds the project's lock, so nothing else
    /// inserts meanwhile, and `keys` come each once ([`crate::key::validate_all`]).
    /// The count comes back as one row, not a row a key.
    pub fn backlog_add(&self, g: &PgGuard, keys: &[String]) -> Result<usize> {
        g.changed.set(true);
        let mut added = 0;
        for chunk in keys.chunks(ADD_CHUNK) {
            let rows = self.rows(
                "add keys to the backlog",
                "WITH added AS (INSERT INTO {s}.backlog (key, seq) \
                 SELECT k, (SELECT coalesce(max(seq), 0) FROM {s}.backlog) + i \
                 FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) \
                 WHERE NOT EXISTS (SELECT 1 FROM {s}.backlog b WHERE b.key = t.k) \
                 RETURNING 1) SELECT count(*) FROM added",
                &[(&chunk, Type::TEXT_ARRAY)],
            )?;
            added += rows.first().map_or(0, |r| r.get::<_, i64>(0)) as usize;
        }
        Ok(added)
    }

    pub fn backlog_remove(&self, g: &PgGuard, keys: &[String]) -> Result<Vec<String>> {
        g.changed.set(true);
        let rows = self.rows(
            "remove keys from the backlog",
            "DELETE FROM {s}.backlog WHERE key = ANY($1::text[]) RETURNING key",
            &[(&keys, Type::TEXT_ARRAY)],
        )?;
        let gone: std::collections::HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
        Ok(keys.iter().filter(|k| gone.contains(*k)).cloned().collect())
    }

    pub fn backlog_ready(&self, after: Option<u64>, n: usize) -> Result<Vec<BacklogEntry>> {
        let after = after.map_or(-1, |a| i64::try_from(a).unwrap_or(i64::MAX));
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {ENTRY} FROM {{s}}.backlog WHERE agent IS NULL AND seq > $1 ORDER BY seq LIMIT $2"
        );
        self.rows(
            "read the backlog",
            &sql,
            &[(&after, Type::INT8), (&n, Type::INT8)],
        )?
        .iter()
        .map(entry)
        .collect()
    }

    /// The first ready key after `after` whose lock is free, taken (by the schema's
    /// function `take_next`: see schema.rs).
    pub fn backlog_take(&self, g: &PgGuard, after: Option<u64>) -> Result<Option<BacklogEntry>> {
        // A claim's begin takes the first one ahead, in its round trip (see ahead.rs).
        if after.is_none()
            && let Some(taken) = self.taken_ahead()
        {
            return Ok(taken);
        }
        let after = after.map_or(-1, |a| i64::try_from(a).unwrap_or(i64::MAX));
        let prefix = self.key_lock_prefix();
        let rows = self.rows(
            "take a key of the backlog",
            "SELECT t_key, t_seq FROM {s}.take_next($1, $2)",
            &[(&after, Type::INT8), (&prefix, Type::BYTEA)],
        )?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let key: String = r.get(0);
        self.hold(g, &key);
        Ok(Some(BacklogEntry {
            key,
            seq: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            claimed: None,
        }))
    }

    pub fn backlog_claimed(&self) -> Result<Vec<BacklogEntry>> {
        let sql = format!("SELECT {ENTRY} FROM {{s}}.backlog WHERE agent IS NOT NULL ORDER BY seq");
        self.rows("read the backlog's claims", &sql, &[])?
            .iter()
            .map(entry)
            .collect()
    }

    pub fn backlog_mark(&self, g: &PgGuard, key: &str, claim: Option<&BacklogClaim>) -> Result<()> {
        g.changed.set(true);
        let agent = claim.map(|c| c.agent.as_str());
        let recheck = claim.map(|c| micros(&c.recheck));
        // Nothing waits for its answer: sent with the next statement, or the COMMIT.
        let recheck = match recheck {
            Some(us) => format!("to_timestamp({us} / 1000000.0)"),
            None => "NULL".into(),
        };
        self.conn.put_off(
            "backlog",
            format!(
                "UPDATE {}.backlog SET agent = {}, recheck = {recheck} WHERE key = {}",
                self.schema,
                agent.map_or_else(|| "NULL".into(), super::literal),
                super::literal(key),
            ),
        );
        Ok(())
    }

    pub fn backlog_summary(&self) -> Result<BacklogSummary> {
        // The claimers: one index probe each while they are few (16 drainers over a
        // million claims); past [`PROBED_CLAIMERS`] (spawn per task: a claimer per claim)
        // one pass over the claims costs less.
        let sql = format!(
            "WITH RECURSIVE h(agent, n) AS ( \
               (SELECT agent, 1 FROM {{s}}.backlog WHERE agent IS NOT NULL ORDER BY agent LIMIT 1) \
               UNION ALL \
               SELECT (SELECT b.agent FROM {{s}}.backlog b WHERE b.agent > h.agent \
                       ORDER BY b.agent LIMIT 1), h.n + 1 \
               FROM h WHERE h.agent IS NOT NULL AND h.n < {PROBED_CLAIMERS}) \
             SELECT count(*) FILTER (WHERE agent IS NULL), \
                    count(*) FILTER (WHERE agent IS NOT NULL), \
                    (extract(epoch FROM min(recheck)) * 1000000)::bigint, \
                    CASE WHEN (SELECT count(agent) FROM h) < {PROBED_CLAIMERS} \
                         THEN ARRAY(SELECT agent FROM h WHERE agent IS NOT NULL) \
                         ELSE ARRAY(SELECT DISTINCT agent FROM {{s}}.backlog \
                                    WHERE agent IS NOT NULL) END \
             FROM {{s}}.backlog"
        );
        let rows = self.rows("count the backlog", &sql, &[])?;
        let r = &rows[0];
        // In one order whichever way they were found (the server's collation aside).
        let mut holders: Vec<String> = r.get(3);
        holders.sort_unstable();
        Ok(BacklogSummary {
            ready: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            claimed: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            recheck: r.get::<_, Option<i64>>(2).map(time).transpose()?,
            holders,
        })
    }
}

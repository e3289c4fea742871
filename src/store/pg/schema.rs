//! tasklock's own versioned schema. Each migration runs once, in order, in one
//! transaction holding the project's advisory lock, and records its number in
//! `schema_version`; a schema newer than this build is refused, never written.
//!
//! Every table keeps the stored type whole as `data jsonb` (the same serde shape as the
//! file store's JSON files), with the columns that are looked up or ordered by beside it.
//!
//! Versions:
//! 1. everything of a key's checkout, queues, inboxes, registry, notes, freezes, audit.
//! 2. `slot_records`: the checkouts of the slots of keys with slots (the file store's
//!    `slots/<key>/<n>`), one row per slot held, apart from `records` so that a build
//!    that knows no slots (and refuses a schema newer than its own) never reads one as
//!    the record of its key. Their tokens come from the same `tokens` sequence.
//! 3. `backlog`: the keys waiting for `checkout --next`, each with its place in line and
//!    its claim; indexed so that the next ready key, the earliest recheck and the
//!    claimers are found without reading the whole backlog.
//! 4. `sweeps`: the time of the last sweep.
//! 5. The reads of a scope's `BEGIN` as functions (`read_ahead`, `take_next`,
//!    `take_ahead`): a statement sent through a pooler in transaction mode is planned
//!    every time, one inside a PL/pgSQL function once per server session, which the
//!    pooler keeps. They read and take locks; nothing in them decides (the engine does).
//! 6. `read_ahead` again, each row it reads looked up by its key: version 5's joins were
//!    planned once per session, while the tables were small, as a scan of all of
//!    `records` (and of `slot_records`), which every claim then paid in full as they grew.
//! 7. `audit.total`: the size of every event so far (by its JSON text), this one included,
//!    indexed, so that keeping the table to its bound reads only the newest row and the
//!    rows it drops; it used to add up the whole table, once every 64 events.

/// The newest schema version this build knows.
pub const CURRENT: i32 = 7;

/// Migration `i + 1` is `MIGRATIONS[i]`; `{s}` stands for the schema name.
pub const MIGRATIONS: &[&str] = &[
    // 1: everything.
    r#"
CREATE SEQUENCE {s}.tokens AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE TABLE {s}.records (
    key text PRIMARY KEY,
    token bigint NOT NULL,
    agent text NOT NULL,
    expires_at timestamptz NOT NULL,
    data jsonb NOT NULL
);
CREATE INDEX records_agent ON {s}.records (agent);
CREATE TABLE {s}.queues (
    key text PRIMARY KEY,
    data jsonb NOT NULL
);
CREATE TABLE {s}.messages (
    agent text NOT NULL,
    id text NOT NULL,
    ts timestamptz NOT NULL,
    read boolean NOT NULL DEFAULT false,
    data jsonb NOT NULL,
    PRIMARY KEY (agent, id)
);
CREATE INDEX messages_unread ON {s}.messages (agent) WHERE NOT read;
CREATE TABLE {s}.agents (
    id text PRIMARY KEY,
    data jsonb NOT NULL
);
CREATE TABLE {s}.ended (
    key text PRIMARY KEY,
    token bigint NOT NULL,
    data jsonb NOT NULL
);
CREATE TABLE {s}.notes (
    id bigserial PRIMARY KEY,
    key text NOT NULL,
    data jsonb NOT NULL
);
CREATE INDEX notes_key ON {s}.notes (key, id);
CREATE TABLE {s}.freezes (
    pattern text PRIMARY KEY,
    until timestamptz NOT NULL,
    data jsonb NOT NULL
);
CREATE TABLE {s}.audit (
    id bigserial PRIMARY KEY,
    ts timestamptz NOT NULL,
    event text NOT NULL,
    key text NOT NULL,
    agent text NOT NULL,
    data jsonb NOT NULL
);
CREATE INDEX audit_key ON {s}.audit (key, id);
"#,
    // 2: the records of the slots of keys with slots.
    r#"
CREATE TABLE {s}.slot_records (
    key text NOT NULL,
    slot integer NOT NULL CHECK (slot > 0),
    token bigint NOT NULL,
    agent text NOT NULL,
    expires_at timestamptz NOT NULL,
    data jsonb NOT NULL,
    PRIMARY KEY (key, slot)
);
CREATE INDEX slot_records_agent ON {s}.slot_records (agent);
"#,
    // 3: the backlog of `checkout --next`.
    r#"
CREATE TABLE {s}.backlog (
    key text PRIMARY KEY,
    seq bigint NOT NULL UNIQUE,
    agent text,
    recheck timestamptz,
    CHECK ((agent IS NULL) = (recheck IS NULL))
);
CREATE INDEX backlog_ready ON {s}.backlog (seq) WHERE agent IS NULL;
CREATE INDEX backlog_recheck ON {s}.backlog (recheck) WHERE agent IS NOT NULL;
CREATE INDEX backlog_agent ON {s}.backlog (agent) WHERE agent IS NOT NULL;
"#,
    // 4: the time of the last sweep.
    r#"
CREATE TABLE {s}.sweeps (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at timestamptz NOT NULL
);
"#,
    // 5: the reads of a scope's BEGIN, as functions ({lock}: the lock id of the key
    // `b.key`, given the prefix `p_prefix`).
    //
    // take_next: the first ready key after `p_after` whose lock is free, taken: the keys
    // are walked in order one at a time, each tried with `pg_try_advisory_xact_lock`,
    // until one is granted, so that no lock is taken but the one used.
    //
    // read_ahead: of each key of `p_keys`, its record, whether it has slot records, its
    // queue; the freezes; and for a key with no record, no slot records and no queue,
    // while no freeze is stored, a fencing token with its ended fact and its last
    // `p_notes` notes. One row each, named by the first column.
    //
    // take_ahead: a claim's take of the first ready key (a row `taken`, the key NULL
    // when none), and the reads ahead of it.
    //
    // Their statements' plans are generic (PostgreSQL 12 and later): by default a
    // statement with parameters is planned anew at every call while a plan for its
    // values looks cheaper than the generic one, which for these it always did (a
    // profile put 21% of the server's CPU a claim there).
    r#"
CREATE FUNCTION {s}.take_next(p_after bigint, p_prefix bytea)
RETURNS TABLE (t_key text, t_seq bigint) LANGUAGE plpgsql AS $tl$
BEGIN
    RETURN QUERY WITH RECURSIVE c(key, seq, got) AS (
        SELECT NULL::text, p_after, false
        UNION ALL
        SELECT b.key, b.seq, pg_try_advisory_xact_lock({lock})
        FROM c, LATERAL (SELECT bl.key, bl.seq FROM {s}.backlog bl
            WHERE bl.agent IS NULL AND bl.seq > c.seq ORDER BY bl.seq LIMIT 1) AS b
        WHERE NOT c.got)
    SELECT c.key, c.seq FROM c WHERE c.got;
END $tl$;
CREATE FUNCTION {s}.read_ahead(p_keys text[], p_notes integer)
RETURNS TABLE (tasklock_ahead text, a_key text, a_n bigint, a_data text, a_queue text)
LANGUAGE plpgsql AS $tl$
BEGIN
    RETURN QUERY WITH k AS (SELECT x.key, r.data::text AS rec FROM unnest(p_keys) AS x(key)
            LEFT JOIN {s}.records r ON r.key = x.key WHERE x.key IS NOT NULL),
        t AS (SELECT k.key, nextval('{s}.tokens') AS token FROM k WHERE k.rec IS NULL
            AND NOT EXISTS (SELECT 1 FROM {s}.slot_records sr WHERE sr.key = k.key)
            AND NOT EXISTS (SELECT 1 FROM {s}.queues q WHERE q.key = k.key)
            AND NOT EXISTS (SELECT 1 FROM {s}.freezes))
    SELECT 'key'::text, k.key,
        (EXISTS (SELECT 1 FROM {s}.slot_records sr WHERE sr.key = k.key))::int::bigint,
        k.rec, (SELECT q.data::text FROM {s}.queues q WHERE q.key = k.key) FROM k
    UNION ALL SELECT 'freezes', NULL, NULL, NULL, NULL
    UNION ALL SELECT 'freeze', NULL, NULL, f.data::text, NULL FROM {s}.freezes f
    UNION ALL SELECT 'token', t.key, t.token, NULL, NULL FROM t
    UNION ALL SELECT 'ended', t.key, NULL, e.data::text, NULL
        FROM t JOIN {s}.ended e ON e.key = t.key
    UNION ALL SELECT 'note', t.key, n.id, n.data::text, NULL FROM t, LATERAL
        (SELECT nt.id, nt.data FROM {s}.notes nt WHERE nt.key = t.key
         ORDER BY nt.id DESC LIMIT p_notes) AS n;
END $tl$;
CREATE FUNCTION {s}.take_ahead(p_prefix bytea, p_notes integer)
RETURNS TABLE (tasklock_ahead text, a_key text, a_n bigint, a_data text, a_queue text)
LANGUAGE plpgsql AS $tl$
DECLARE
    v_key text;
    v_seq bigint;
BEGIN
    SELECT n.t_key, n.t_seq INTO v_key, v_seq FROM {s}.take_next(-1, p_prefix) AS n;
    RETURN QUERY SELECT 'taken'::text, v_key, v_seq, NULL::text, NULL::text;
    RETURN QUERY SELECT * FROM {s}.read_ahead(array_remove(ARRAY[v_key], NULL), p_notes);
END $tl$;
DO $tl$ BEGIN
    IF current_setting('server_version_num')::int >= 120000 THEN
        ALTER FUNCTION {s}.take_next(bigint, bytea) SET plan_cache_mode = force_generic_plan;
        ALTER FUNCTION {s}.read_ahead(text[], integer) SET plan_cache_mode = force_generic_plan;
        ALTER FUNCTION {s}.take_ahead(bytea, integer) SET plan_cache_mode = force_generic_plan;
    END IF;
END $tl$;
"#,
    // 6: read_ahead's rows each found through their table's key, whatever the tables held
    // when a session planned it: a subquery with a LIMIT, or one giving a single value,
    // is never turned into a join or a hashed scan of the whole table. Replacing the
    // function resets its settings, so plan_cache_mode is set again.
    r#"
CREATE OR REPLACE FUNCTION {s}.read_ahead(p_keys text[], p_notes integer)
RETURNS TABLE (tasklock_ahead text, a_key text, a_n bigint, a_data text, a_queue text)
LANGUAGE plpgsql AS $tl$
BEGIN
    RETURN QUERY WITH k AS (SELECT x.key,
            (SELECT r.data::text FROM {s}.records r WHERE r.key = x.key) AS rec,
            (SELECT 1 FROM {s}.slot_records sr WHERE sr.key = x.key LIMIT 1) IS NOT NULL
                AS slots,
            (SELECT q.data::text FROM {s}.queues q WHERE q.key = x.key) AS queue
            FROM unnest(p_keys) AS x(key) WHERE x.key IS NOT NULL),
        t AS (SELECT k.key, nextval('{s}.tokens') AS token FROM k
            WHERE k.rec IS NULL AND NOT k.slots AND k.queue IS NULL
            AND NOT EXISTS (SELECT 1 FROM {s}.freezes))
    SELECT 'key'::text, k.key, k.slots::int::bigint, k.rec, k.queue FROM k
    UNION ALL SELECT 'freezes', NULL, NULL, NULL, NULL
    UNION ALL SELECT 'freeze', NULL, NULL, f.data::text, NULL FROM {s}.freezes f
    UNION ALL SELECT 'token', t.key, t.token, NULL, NULL FROM t
    UNION ALL SELECT 'ended', t.key, NULL, e.data, NULL FROM t, LATERAL
        (SELECT ed.data::text AS data FROM {s}.ended ed WHERE ed.key = t.key LIMIT 1) AS e
    UNION ALL SELECT 'note', t.key, n.id, n.data::text, NULL FROM t, LATERAL
        (SELECT nt.id, nt.data FROM {s}.notes nt WHERE nt.key = t.key
         ORDER BY nt.id DESC LIMIT p_notes) AS n;
END $tl$;
DO $tl$ BEGIN
    IF current_setting('server_version_num')::int >= 120000 THEN
        ALTER FUNCTION {s}.read_ahead(text[], integer) SET plan_cache_mode = force_generic_plan;
    END IF;
END $tl$;
"#,
    // 7: the running size of the audit log, each event's `total` the bytes of every event
    // before it and its own (JSON text, as `data::text` gives it), for the rows there now
    // in their order; new rows are added to it under the audit lock (client/mod.rs).
    r#"
ALTER TABLE {s}.audit ADD COLUMN IF NOT EXISTS total bigint;
UPDATE {s}.audit a SET total = t.total
    FROM (SELECT id, sum(octet_length(data::text)) OVER (ORDER BY id) AS total
          FROM {s}.audit) t
    WHERE a.id = t.id;
ALTER TABLE {s}.audit ALTER COLUMN total SET NOT NULL;
CREATE INDEX IF NOT EXISTS audit_total ON {s}.audit (total);
"#,
];

/// The statements that create the schema and its version table when missing.
pub fn bootstrap(schema: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    tasklock text NOT NULL
);"
    )
}

/// Migration `version` (1-based) for `schema`.
pub fn migration(schema: &str, version: i32) -> String {
    MIGRATIONS[(version - 1) as usize]
        .replace("{s}", schema)
        .replace("{lock}", &super::PgStore::key_lock_sql("b.key", "p_prefix"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_migration_per_version() {
        assert_eq!(super::MIGRATIONS.len(), super::CURRENT as usize);
    }
}

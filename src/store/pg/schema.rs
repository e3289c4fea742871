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

/// The newest schema version this build knows.
pub const CURRENT: i32 = 4;

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
    MIGRATIONS[(version - 1) as usize].replace("{s}", schema)
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_migration_per_version() {
        assert_eq!(super::MIGRATIONS.len(), super::CURRENT as usize);
    }
}

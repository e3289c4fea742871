//! The PostgreSQL store: every checkout, queue, inbox, registry entry, note, freeze and
//! audit event in tables of one schema of a PostgreSQL database, for agents on several
//! machines (or containers) that share no file system.
//!
//! Selected by `TASKLOCK_URL=postgres://…` (it wins over the lock directory) or by
//! `store: postgres://…` in `.locks/config.yaml`; without either, the lock directory is
//! the store and nothing here connects anywhere. The URL may end in `?schema=NAME` (or
//! have it among its parameters) to use a schema other than `tasklock`.
//!
//! - The schema is created and migrated by tasklock itself ([`schema`]), under a
//!   transaction-scoped advisory lock, so concurrent first runs do not race.
//! - The transaction scope is a database transaction holding a transaction-scoped
//!   advisory lock of the project ([`PgStore::begin`]): every change is serial per project
//!   as under the file store's `flock`, and the lock dies with the transaction or the
//!   connection. Nothing is ever held in a session-scoped lock for a checkout.
//! - Times are judged by the server's clock: opening the store reads it and sets
//!   [`crate::clock::set_offset`], so every host sharing the server agrees on leases.
//! - Writes `NOTIFY` inside their transaction; `changes()` and `follow_audit()` `LISTEN`,
//!   with their timeout as the fallback.
//! - Behind a connection pooler in transaction mode (PgBouncer's), every statement works
//!   as it is; what needs a session of its own (a watcher's lock, `LISTEN`) goes to the
//!   session URL (`TASKLOCK_SESSION_URL`, `session_store:`) when there is one.

#[cfg(feature = "postgres")]
mod client;
#[cfg(feature = "postgres")]
pub mod schema;
#[cfg(all(test, feature = "postgres"))]
mod tests;

#[cfg(feature = "postgres")]
pub use client::{PgAuditFollow, PgChanges, PgGuard, PgStore, WatcherLock};

use std::time::Duration;

use crate::config::Config;
use crate::error::{Error, Result};

/// The environment variable that selects the PostgreSQL store.
pub const URL_ENV: &str = "TASKLOCK_URL";
/// Where connections that must keep a session go, when `TASKLOCK_URL` is a pooler in
/// transaction mode: the server itself, or a pooler in session mode.
pub const SESSION_URL_ENV: &str = "TASKLOCK_SESSION_URL";
/// The schema used when the URL names none.
pub const DEFAULT_SCHEMA: &str = "tasklock";
/// How long connecting may take, unless the URL says (`connect_timeout=SECONDS`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Is `s` a URL of the PostgreSQL store?
pub use crate::config::is_url;

/// Where the PostgreSQL store is, when one is selected: `TASKLOCK_URL`, else `store:`
/// in the settings. Connects to nothing. A `TASKLOCK_URL` that is not a PostgreSQL URL
/// is a usage error.
///
/// The session URL comes from the same place as the URL: `TASKLOCK_SESSION_URL` with
/// `TASKLOCK_URL`, `session_store:` with `store:` (so a `TASKLOCK_URL` never pairs with
/// the session URL of another server named in the file).
pub fn selected(cfg: Option<&Config>) -> Result<Option<Target>> {
    let session_env = std::env::var_os(SESSION_URL_ENV)
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().into_owned());
    if let Some(v) = std::env::var_os(URL_ENV).filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy().into_owned();
        if !is_url(&v) {
            return Err(Error::Usage(format!(
                "{URL_ENV} must be a postgres:// or postgresql:// URL (unset it to use the lock directory); it is {}",
                mask(&v)
            )));
        }
        let mut t = Target::parse(&v, URL_ENV)?;
        if let Some(s) = session_env {
            if !is_url(&s) {
                return Err(Error::Usage(format!(
                    "{SESSION_URL_ENV} must be a postgres:// or postgresql:// URL; it is {}",
                    mask(&s)
                )));
            }
            t.set_session(&s, SESSION_URL_ENV)?;
        }
        return Ok(Some(t));
    }
    if session_env.is_some() {
        return Err(Error::Usage(format!(
            "{SESSION_URL_ENV} is set but {URL_ENV} is not: it names where the sessions of {URL_ENV}'s store go (for `store:` in config.yaml, use `session_store:` there)"
        )));
    }
    match cfg.and_then(|c| c.store.as_deref()) {
        Some(url) => {
            let mut t = Target::parse(url, "store: in config.yaml")?;
            if let Some(s) = cfg.and_then(|c| c.session_store.as_deref()) {
                t.set_session(s, "session_store: in config.yaml")?;
            }
            Ok(Some(t))
        }
        None => Ok(None),
    }
}

/// The PostgreSQL store if one is selected ([`selected`]), connected, migrated, and with
/// the command's clock set from the server's; `None` when the lock directory is the store.
/// Server down: an error naming the URL (password masked) within the connect timeout.
#[cfg(feature = "postgres")]
pub fn from_env_or_config(cfg: Option<&Config>) -> Result<Option<Box<dyn crate::store::Store>>> {
    match selected(cfg)? {
        Some(t) => {
            let store = PgStore::open_fresh(&t)?;
            if let Some(c) = cfg {
                store.share_config(c);
            }
            Ok(Some(Box::new(store)))
        }
        None => Ok(None),
    }
}

/// Connect now if a PostgreSQL store is selected (the connection is kept for the
/// command's later `from_env_or_config`), so that the command's "now" can be read from
/// the server's clock: true when it was. Called before a command's `Ctx::now` is taken.
pub fn open_early(cfg: Option<&Config>) -> Result<bool> {
    Ok(from_env_or_config(cfg)?.is_some())
}

/// Built without the `postgres` feature: a selected PostgreSQL store is an error.
#[cfg(not(feature = "postgres"))]
pub fn from_env_or_config(cfg: Option<&Config>) -> Result<Option<Box<dyn crate::store::Store>>> {
    match selected(cfg)? {
        Some(t) => Err(Error::Store(format!(
            "{} selects the PostgreSQL store ({}), but this tasklock was built without it; install the prebuilt binary, which has it (`curl -fsSL https://github.com/tasklock/tasklock/releases/latest/download/install.sh | sh`), or build with `cargo build --release --features postgres` (or `TASKLOCK_FEATURES=postgres ./install.sh`), or unset it to use the lock directory",
            t.source, t.masked
        ))),
        None => Ok(None),
    }
}

/// A PostgreSQL store's address, as selected.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL to connect with (tasklock's own parameters removed).
    pub url: String,
    /// The URL with its password masked: for every message.
    pub masked: String,
    pub schema: String,
    /// What selected it (`TASKLOCK_URL`, `store: in config.yaml`).
    pub source: &'static str,
    /// Where connections that must keep a session go (a watcher's lock, `LISTEN`), when
    /// `url` may be a pooler in transaction mode; `None`: `url` keeps sessions.
    pub session: Option<Box<Target>>,
}

impl Target {
    /// Take tasklock's own `schema=NAME` parameter out of `url`.
    pub fn parse(url: &str, source: &'static str) -> Result<Target> {
        let url = url.trim();
        let masked = mask(url);
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = DEFAULT_SCHEMA.to_string();
        let mut rest = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("schema", v)) => schema = v.to_string(),
                _ if pair.is_empty() => {}
                _ => rest.push(pair),
            }
        }
        valid_schema(&schema).map_err(|why| {
            Error::Usage(format!("{source}: the schema {schema:?} in {masked} {why}"))
        })?;
        let url = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        Ok(Target {
            url,
            masked,
            schema,
            source,
            session: None,
        })
    }

    /// Send what needs a session to `url` (selected by `source`). Its schema is this
    /// target's: a `schema=` of its own must name the same one.
    pub fn set_session(&mut self, url: &str, source: &'static str) -> Result<()> {
        let mut s = Target::parse(url, source)?;
        let named = url
            .split_once('?')
            .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("schema=")));
        if named && s.schema != self.schema {
            return Err(Error::Usage(format!(
                "{source}: {} names the schema {}, but {} names {}; the session URL reaches the same store, so leave `schema=` out of it",
                s.masked, s.schema, self.masked, self.schema
            )));
        }
        s.schema = self.schema.clone();
        self.session = Some(Box::new(s));
        Ok(())
    }
}

/// A schema name tasklock can use unquoted everywhere: lower-case letters, digits and
/// `_`, starting with a letter or `_`, at most 40 bytes (channel names add to it).
pub fn valid_schema(s: &str) -> std::result::Result<(), &'static str> {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    if !first_ok
        || s.len() > 40
        || !s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        || s.starts_with("pg_")
    {
        return Err(
            "is not a usable schema name (lower-case letters, digits and _, at most 40, not starting with a digit or pg_)",
        );
    }
    Ok(())
}

/// `url` with its password (in the user part or a `password=` parameter) replaced by
/// `***`, for messages and logs.
pub fn mask(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    // The user part ends at the last '@' before the path or parameters.
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    match scheme {
        Some(s) => format!("{s}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask("postgres://u:secret@h:5432/db?sslmode=disable"),
            "postgres://u:***@h:5432/db?sslmode=disable"
        );
        assert_eq!(mask("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(mask("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            mask("postgresql://u:p@ss:w@rd@h/db?password=x&schema=s"),
            "postgresql://u:***@h/db?password=***&schema=s"
        );
    }

    #[test]
    fn takes_the_schema_out() {
        let t = Target::parse("postgres://u@h/db?schema=t_1&connect_timeout=2", "x").unwrap();
        assert_eq!(t.schema, "t_1");
        assert_eq!(t.url, "postgres://u@h/db?connect_timeout=2");
        let t = Target::parse("postgres://u@h/db", "x").unwrap();
        assert_eq!(t.schema, "tasklock");
        assert!(Target::parse("postgres://h/db?schema=Bad-Name", "x").is_err());
        assert!(Target::parse("postgres://h/db?schema=pg_catalog", "x").is_err());
    }

    #[test]
    fn a_session_url_shares_the_schema() {
        let mut t = Target::parse("postgres://u@bouncer:6432/db?schema=p1", "x").unwrap();
        t.set_session("postgres://u:pw@db:5432/db?connect_timeout=2", "y")
            .unwrap();
        let s = t.session.as_ref().unwrap();
        assert_eq!(s.schema, "p1");
        assert_eq!(s.url, "postgres://u:pw@db:5432/db?connect_timeout=2");
        assert_eq!(s.masked, "postgres://u:***@db:5432/db?connect_timeout=2");
        assert_eq!(s.source, "y");
        t.set_session("postgres://u@db/db?schema=p1", "y").unwrap();
        let err = t
            .set_session("postgres://u@db/db?schema=p2", "y")
            .unwrap_err()
            .to_string();
        assert!(err.contains("p2") && err.contains("p1"), "{err}");
    }
}

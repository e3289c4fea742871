//! [`PgStore`]: the store's operations over one connection (the sync `postgres` crate).

use std::cell::{Cell, OnceCell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, SimpleQueryMessage};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CONNECT_TIMEOUT, Target, schema};
use crate::clock::Time;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{
    AgentEntry, AuditEvent, Delivery, Ended, FORMAT_VERSION, Freeze, Guard, Held, Message, Note,
    Queue, Record, Slot, Store,
};

/// Watches a blocking wait for the project's lock: when a signal arrives or the
/// command's deadline ([`crate::store::guard_deadline`]) passes, it cancels the query.
struct WaitWatch {
    /// The reason it cancelled, once it has; `done` once the wait ended by itself.
    state: std::sync::Arc<std::sync::Mutex<(bool, Option<&'static str>)>>,
    thread: std::thread::JoinHandle<()>,
}

impl WaitWatch {
    const TICK: Duration = Duration::from_millis(50);

    fn start(token: postgres::CancelToken) -> WaitWatch {
        let state = std::sync::Arc::new(std::sync::Mutex::new((false, None)));
        let seen = state.clone();
        let deadline = crate::store::guard_deadline();
        let thread = std::thread::spawn(move || {
            loop {
                // A lock granted at once is never stopped (as the lock directory's guard,
                // taken when free even past the deadline: `--wait` leaves its queue so).
                std::thread::park_timeout(Self::TICK);
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if s.0 {
                    return;
                }
                let why = if crate::signals::received().is_some() {
                    Some("a signal arrived")
                } else if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    Some("the time to wait ran out")
                } else {
                    None
                };
                if let Some(why) = why {
                    // Decided under the lock, so the waiting side sees it.
                    s.1 = Some(why);
                    drop(s);
                    let _ = token.cancel_query(NoTls);
                    return;
                }
            }
        });
        WaitWatch { state, thread }
    }

    /// The wait ended: why it was stopped, if it was.
    fn finish(self) -> Option<&'static str> {
        let why = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.0 = true;
            s.1
        };
        self.thread.thread().unpark();
        let _ = self.thread.join();
        why
    }
}

/// SQLSTATEs looked at.
const UNDEFINED_TABLE: &str = "42P01";
const INVALID_SCHEMA: &str = "3F000";
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The connection and what the open transaction has seen.
struct Conn {
    client: RefCell<Client>,
    /// The URL, password masked: for every message.
    url: String,
    in_tx: Cell<bool>,
    /// The first statement that failed in the open transaction: PostgreSQL aborts the
    /// transaction there, and COMMIT would silently roll it back.
    failed: RefCell<Option<String>>,
    /// Reads made inside the open transaction that no other process can change before
    /// it ends (every change of the project holds its advisory lock), kept until then.
    cache: RefCell<TxCache>,
}

/// See [`Conn::cache`]. Own writes update or drop what they change.
#[derive(Default)]
struct TxCache {
    agents: std::collections::HashMap<String, Option<AgentEntry>>,
    freezes: Option<Vec<Freeze>>,
}

impl Conn {
    /// The transaction ended (committed or rolled back): forget what it saw.
    fn end_tx(&self) {
        self.in_tx.set(false);
        self.failed.replace(None);
        self.cache.replace(TxCache::default());
    }

    /// Run `f` on the client; a failure is an error naming the server, and marks the open
    /// transaction as failed.
    fn run<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut client = self.client.borrow_mut();
        match f(&mut client) {
            Ok(v) => Ok(v),
            Err(e) => {
                let closed = client.is_closed() || connection_lost(&e);
                drop(client);
                Err(self.fail(what, &e, closed))
            }
        }
    }

    fn fail(&self, what: &str, e: &postgres::Error, closed: bool) -> Error {
        let detail = describe(e);
        if self.in_tx.get() {
            let mut failed = self.failed.borrow_mut();
            if failed.is_none() {
                *failed = Some(format!("{what}: {detail}"));
            }
        }
        if closed {
            let kept = if self.in_tx.get() {
                "; nothing this command changed was kept (its transaction ended with the connection)"
            } else {
                ""
            };
            Error::Store(format!(
                "lost the connection to PostgreSQL at {} while it was to {what} ({detail}){kept}",
                self.url
            ))
        } else {
            Error::Store(format!(
                "PostgreSQL at {}: cannot {what}: {detail}",
                self.url
            ))
        }
    }
}

/// A PostgreSQL error in words: the server's message and SQLSTATE when it sent one.
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({}; {})", db.message(), db.code().code(), d),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => {
            use std::error::Error as _;
            match e.source() {
                Some(s) => format!("{e}: {s}"),
                None => e.to_string(),
            }
        }
    }
}

/// Is this the end of the connection: the socket closed, or the server ending the
/// session (terminated by an administrator, shut down: class 57P, or class 08)?
fn connection_lost(e: &postgres::Error) -> bool {
    e.is_closed() || code(e).is_some_and(|c| c.starts_with("57P") || c.starts_with("08"))
}

fn code(e: &postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// Connection (URL, schema, connection, server version, schema version).
type Opened = (String, String, Rc<Conn>, String, i32);

thread_local! {
    /// The connections this process opened, kept for its lifetime. Never dropped: the
    /// client must not be torn down at exit, after the runtime's own thread-locals are
    /// gone; the kernel closes the socket and the server ends the session.
    static OPEN: std::mem::ManuallyDrop<RefCell<Vec<Opened>>> =
        const { std::mem::ManuallyDrop::new(RefCell::new(Vec::new())) };
}

/// Close the connections this thread keeps (for a process that runs many commands, such
/// as `tasklock mcp`, after each one): the next command connects again.
pub fn close_cached() {
    OPEN.with(|o| o.borrow_mut().clear());
}

/// One PostgreSQL schema: one project's checkouts.
pub struct PgStore {
    conn: Rc<Conn>,
    schema: String,
    /// The transaction-scoped advisory lock that makes every change of this project serial.
    lock_id: i64,
    server_version: String,
    schema_version: i32,
    cfg: OnceCell<Config>,
}

/// Proof of an open transaction holding the project's lock. Dropped without
/// [`PgStore::commit`]: rolled back.
pub struct PgGuard {
    conn: Rc<Conn>,
    done: Cell<bool>,
    changed: Cell<bool>,
    /// Audit events of the transaction, as JSON: written with the COMMIT, in the same
    /// round trip (nothing reads the log inside a scope).
    audit: RefCell<Vec<String>>,
}

impl Drop for PgGuard {
    fn drop(&mut self) {
        if self.done.get() {
            return;
        }
        self.conn.end_tx();
        if let Ok(mut c) = self.conn.client.try_borrow_mut() {
            let _ = c.batch_execute("ROLLBACK");
        }
    }
}

/// A session-scoped advisory lock of one agent's watcher; let go when dropped, or when
/// the watcher's connection ends.
pub struct WatcherLock {
    conn: Rc<Conn>,
    id: i64,
}

impl Drop for WatcherLock {
    fn drop(&mut self) {
        if let Ok(mut c) = self.conn.client.try_borrow_mut() {
            let _ = c.execute("SELECT pg_advisory_unlock($1)", &[&self.id]);
        }
    }
}

/// A 64-bit advisory lock id for `parts` (the first 8 bytes of their SHA-256).
fn lock_id(parts: &[&str]) -> i64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"tasklock");
    for p in parts {
        h.update([0]);
        h.update(p.as_bytes());
    }
    let d = h.finalize();
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Where a row stands in a scan: the records of keys before those of slots, then by
/// encoded key (the file store's order), then by slot number.
type ScanOrder = (bool, String, Option<i32>);

/// A slot number as stored (`slot_records.slot`, an `integer` from 1); `None` when it
/// cannot be one.
fn slot_number(n: u32) -> Option<i32> {
    i32::try_from(n).ok().filter(|n| *n > 0)
}

fn to_json<T: Serialize>(v: &T, what: &str) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Store(format!("cannot encode {what}: {e}")))
}

fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Connect within the connect timeout, whatever the server does (a stopped server
/// accepts TCP connections and never answers: the wait is bounded here too).
fn connect(t: &Target) -> Result<Client> {
    let mut cfg: postgres::Config = t.url.parse().map_err(|e| {
        Error::Usage(format!(
            "{}: {} is not a usable PostgreSQL URL: {e}",
            t.source, t.masked
        ))
    })?;
    let timeout = match cfg.get_connect_timeout() {
        Some(d) => *d,
        None => {
            cfg.connect_timeout(CONNECT_TIMEOUT);
            CONNECT_TIMEOUT
        }
    };
    if cfg.get_application_name().is_none() {
        // Which process a session belongs to, for operators (pg_stat_activity).
        cfg.application_name(&format!("tasklock/{}", std::process::id()));
    }
    let options = match cfg.get_options() {
        Some(o) => format!("{o} -c search_path={}", t.schema),
        None => format!("-c search_path={}", t.schema),
    };
    cfg.options(&options);
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let _ = tx.send(cfg.connect(NoTls));
    });
    let fail = |why: String| {
        Error::Store(format!(
            "cannot connect to PostgreSQL at {} ({}): {why}",
            t.masked, t.source
        ))
    };
    match rx.recv_timeout(timeout + Duration::from_millis(500)) {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(fail(describe(&e))),
        Err(_) => Err(fail(format!(
            "no answer within {}",
            crate::duration::format(timeout)
        ))),
    }
}

impl PgStore {
    /// Connect, create or migrate the schema when needed, and judge time by the
    /// server's clock from now on.
    pub fn open(t: &Target) -> Result<PgStore> {
        // One connection per process and target: a command that opens its store more
        // than once (or early, to read the server's clock) connects once.
        let cached = OPEN.with(|o| {
            o.borrow()
                .iter()
                .find(|c| c.0 == t.url && c.1 == t.schema)
                .map(|c| (c.2.clone(), c.3.clone(), c.4))
        });
        if let Some((conn, server_version, schema_version)) = cached {
            return Ok(PgStore {
                conn,
                schema: t.schema.clone(),
                lock_id: lock_id(&["project", &t.schema]),
                server_version,
                schema_version,
                cfg: OnceCell::new(),
            });
        }
        let store = Self::connect_new(t)?;
        OPEN.with(|o| {
            o.borrow_mut().push((
                t.url.clone(),
                t.schema.clone(),
                store.conn.clone(),
                store.server_version.clone(),
                store.schema_version,
            ))
        });
        Ok(store)
    }

    /// A connection of its own (not the process's shared one): for tests.
    pub(crate) fn connect_new(t: &Target) -> Result<PgStore> {
        let client = connect(t)?;
        let conn = Rc::new(Conn {
            client: RefCell::new(client),
            url: t.masked.clone(),
            in_tx: Cell::new(false),
            failed: RefCell::new(None),
            cache: RefCell::new(TxCache::default()),
        });
        let mut store = PgStore {
            conn,
            schema: t.schema.clone(),
            lock_id: lock_id(&["project", &t.schema]),
            server_version: String::new(),
            schema_version: 0,
            cfg: OnceCell::new(),
        };
        let mut migrated = false;
        loop {
            let before = std::time::SystemTime::now();
            let probe = store.conn.client.borrow_mut().simple_query(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8, \
                 current_setting('server_version'), \
                 (SELECT max(version) FROM schema_version)",
            );
            let after = std::time::SystemTime::now();
            let rows = match probe {
                Ok(rows) => rows,
                Err(e)
                    if !migrated && matches!(code(&e), Some(UNDEFINED_TABLE | INVALID_SCHEMA)) =>
                {
                    store.migrate()?;
                    migrated = true;
                    continue;
                }
                Err(e) => {
                    let closed = store.conn.client.borrow().is_closed() || connection_lost(&e);
                    return Err(store
                        .conn
                        .fail("read its clock and schema version", &e, closed));
                }
            };
            let row = rows
                .iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(r) => Some(r),
                    _ => None,
                })
                .ok_or_else(|| Error::Store(format!("PostgreSQL at {}: no answer", t.masked)))?;
            let server_us: i64 = row.get(0).and_then(|v| v.parse().ok()).unwrap_or(0);
            store.server_version = row.get(1).unwrap_or("").to_string();
            let version: i32 = row.get(2).and_then(|v| v.parse().ok()).unwrap_or(0);
            if version > schema::CURRENT {
                return Err(Error::Store(format!(
                    "the schema {} at {} is at version {version}, newer than this tasklock understands ({}); upgrade tasklock",
                    t.schema,
                    t.masked,
                    schema::CURRENT
                )));
            }
            if version < schema::CURRENT && !migrated {
                store.migrate()?;
                migrated = true;
                continue;
            }
            store.schema_version = version;
            // The server's clock, as of the middle of the round trip.
            let mid = before + after.duration_since(before).unwrap_or_default() / 2;
            let local = chrono::DateTime::<chrono::Utc>::from(mid);
            if let Some(server) = chrono::DateTime::from_timestamp_micros(server_us) {
                crate::clock::set_offset(server - local);
            }
            return Ok(store);
        }
    }

    /// Create the schema, or bring it up to [`schema::CURRENT`], in one transaction under
    /// the project's lock: a concurrent first run waits, then finds it done.
    fn migrate(&self) -> Result<()> {
        let s = &self.schema;
        let g = self
            .begin_inner(Some(Duration::from_secs(60)))?
            .expect("waited");
        self.conn.run("create the schema", |c| {
            c.batch_execute(&schema::bootstrap(s))
        })?;
        let have: i32 = self.conn.run("read the schema version", |c| {
            c.query_one(
                &format!("SELECT coalesce(max(version), 0) FROM {s}.schema_version"),
                &[],
            )
            .map(|r| r.get(0))
        })?;
        for v in (have + 1)..=schema::CURRENT {
            self.conn
                .run(&format!("migrate the schema to version {v}"), |c| {
                    c.batch_execute(&schema::migration(s, v))?;
                    c.execute(
                        &format!(
                            "INSERT INTO {s}.schema_version (version, tasklock) VALUES ($1, $2)"
                        ),
                        &[&v, &env!("CARGO_PKG_VERSION")],
                    )
                })?;
        }
        self.commit(g)
    }

    /// "PostgreSQL at postgres://u:***@host/db, schema tasklock".
    pub fn describe(&self) -> String {
        format!("PostgreSQL at {}, schema {}", self.conn.url, self.schema)
    }

    /// Run `f` on the connection (for checks and tests that need SQL of their own).
    pub fn with_client<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.conn.run(what, f)
    }

    pub fn url(&self) -> &str {
        &self.conn.url
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    pub fn schema_version(&self) -> i32 {
        self.schema_version
    }

    pub fn share_config(&self, cfg: &Config) {
        let _ = self.cfg.set(cfg.clone());
    }

    /// The settings shared by the command (from `config.yaml` when there is a lock
    /// directory), else the defaults.
    pub fn config(&self) -> Result<Config> {
        Ok(self.cfg.get().cloned().unwrap_or_default())
    }

    fn channel(&self, what: &str) -> String {
        format!("{}.{what}", self.schema)
    }

    // ---- helpers ----

    fn rows(
        &self,
        what: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<postgres::Row>> {
        self.conn.run(what, |c| c.query_typed(sql, params))
    }

    fn exec(&self, what: &str, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<u64> {
        self.conn
            .run(what, |c| c.query_typed(sql, params).map(|r| r.len() as u64))
    }

    /// Every `data` of a query, as `T`; rows that do not decode are skipped (soft state,
    /// as the file store skips damaged files).
    fn all<T: DeserializeOwned>(
        &self,
        what: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<T>> {
        Ok(self
            .rows(what, sql, params)?
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(0)).ok())
            .collect())
    }

    fn one<T: DeserializeOwned>(
        &self,
        what: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<T>> {
        Ok(self.all(what, sql, params)?.into_iter().next())
    }

    // ---- Reads: no scope needed ----

    /// The record of the key itself (never one of its slots': they are rows of
    /// `slot_records`).
    pub fn read(&self, key: &str) -> Result<Slot> {
        let rows = self.rows(
            "read a record",
            "SELECT data::text FROM records WHERE key = $1",
            &[(&key, Type::TEXT)],
        )?;
        Ok(match rows.first() {
            None => Slot::Free,
            Some(r) => self.slot(key, r.get(0)),
        })
    }

    /// The records of the slots of `key` held now, in slot order, damaged ones included.
    pub fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        let rows = self.rows(
            "read the records of slots",
            "SELECT slot, data::text FROM slot_records WHERE key = $1 ORDER BY slot",
            &[(&key, Type::TEXT)],
        )?;
        Ok(rows
            .iter()
            .map(|r| self.judge(key, Some(r.get(0)), r.get(1)))
            .collect())
    }

    /// A row of `records` as the key's slot.
    fn slot(&self, key: &str, data: &str) -> Slot {
        self.judge(key, None, data)
    }

    /// A stored record, judged: held when it decodes, has a format this build reads,
    /// names `key`, and names the slot of its row (`slot`: a row of `slot_records`) or,
    /// a row of `records`, no slot. Anything else is damage, named by its row.
    fn judge(&self, key: &str, slot: Option<i32>, data: &str) -> Slot {
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
            "SELECT key, NULL::integer, data::text FROM records \
             UNION ALL SELECT key, slot, data::text FROM slot_records",
            &[],
        )?;
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
        Ok(out.into_iter().map(|(_, s)| s).collect())
    }

    pub fn read_queue(&self, key: &str) -> Result<Queue> {
        Ok(self
            .one::<Queue>(
                "read a queue",
                "SELECT data::text FROM queues WHERE key = $1",
                &[(&key, Type::TEXT)],
            )?
            .filter(|q| q.key == key)
            .unwrap_or_else(|| Queue::empty(key)))
    }

    /// The slots and queues of `keys`, in order, in one query: the list is sent as an
    /// array and joined against `records` and `queues` by their primary keys.
    pub fn read_many(&self, _g: &PgGuard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        let rows = self.rows(
            "read records and queues",
            "SELECT r.data::text, q.data::text \
             FROM unnest($1::text[]) WITH ORDINALITY AS t(key, n) \
             LEFT JOIN records r ON r.key = t.key LEFT JOIN queues q ON q.key = t.key \
             ORDER BY t.n",
            &[(&keys, Type::TEXT_ARRAY)],
        )?;
        if rows.len() != keys.len() {
            return Err(Error::Store(format!(
                "PostgreSQL at {}: asked for {} keys, got {} rows",
                self.conn.url,
                keys.len(),
                rows.len()
            )));
        }
        Ok(keys
            .iter()
            .zip(rows)
            .map(|(k, row)| {
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

    pub fn scan_queues(&self) -> Result<Vec<Queue>> {
        let mut out: Vec<Queue> =
            self.all("read the queues", "SELECT data::text FROM queues", &[])?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    pub fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        let in_tx = self.conn.in_tx.get();
        if in_tx && let Some(e) = self.conn.cache.borrow().agents.get(id) {
            return Ok(e.clone());
        }
        let entry = self
            .one::<AgentEntry>(
                "read an agent",
                "SELECT data::text FROM agents WHERE id = $1",
                &[(&id, Type::TEXT)],
            )?
            .filter(|e| e.id == id);
        if in_tx {
            let mut cache = self.conn.cache.borrow_mut();
            cache.agents.insert(id.to_string(), entry.clone());
        }
        Ok(entry)
    }

    pub fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        let mut out: Vec<AgentEntry> =
            self.all("read the agents", "SELECT data::text FROM agents", &[])?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    pub fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        Ok(self
            .one::<Ended>(
                "read how a checkout ended",
                "SELECT data::text FROM ended WHERE key = $1",
                &[(&key, Type::TEXT)],
            )?
            .filter(|e| e.key == key))
    }

    pub fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        let n = n as i64;
        let mut notes: Vec<Note> = self.all(
            "read notes",
            "SELECT data::text FROM notes WHERE key = $1 ORDER BY id DESC LIMIT $2",
            &[(&key, Type::TEXT), (&n, Type::INT8)],
        )?;
        notes.reverse();
        Ok(notes)
    }

    pub fn freezes(&self) -> Result<Vec<Freeze>> {
        let in_tx = self.conn.in_tx.get();
        if in_tx && let Some(f) = &self.conn.cache.borrow().freezes {
            return Ok(f.clone());
        }
        let mut out: Vec<Freeze> =
            self.all("read the freezes", "SELECT data::text FROM freezes", &[])?;
        out.sort_by(|a, b| a.pattern.cmp(&b.pattern));
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

    pub fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        let mut out: Vec<Message> = self.all(
            "read the inbox",
            "SELECT data::text FROM messages WHERE agent = $1 AND NOT read",
            &[(&agent, Type::TEXT)],
        )?;
        out.sort_by(|a, b| (a.ts, &a.id).cmp(&(b.ts, &b.id)));
        Ok(out)
    }

    /// A message, read or unread; its delivery is a field of its data.
    pub fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        Ok(self
            .all::<Message>(
                "read a message",
                "SELECT data::text FROM messages WHERE agent = $1 AND id = $2",
                &[(&agent, Type::TEXT), (&id, Type::TEXT)],
            )?
            .pop())
    }

    /// Record the push of a message into the data of its row (a message already gone,
    /// read and forgotten, has nothing to record).
    pub fn record_delivery(&self, _g: &PgGuard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        let data = to_json(d, "delivery")?;
        self.exec(
            "record a delivery",
            "UPDATE messages SET data = jsonb_set(data, '{delivery}', $3::jsonb) \
             WHERE agent = $1 AND id = $2 RETURNING 1",
            &[(&agent, Type::TEXT), (&id, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        let n = self.exec(
            "mark a message read",
            "UPDATE messages SET read = true WHERE agent = $1 AND id = $2 AND NOT read RETURNING 1",
            &[(&agent, Type::TEXT), (&id, Type::TEXT)],
        )?;
        Ok(n > 0)
    }

    /// Every event, oldest first; rows that do not decode are counted.
    pub fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        let mut bad = 0;
        let mut after = 0i64;
        // In pages, so a long log is never held whole.
        loop {
            let rows = self.rows(
                "read the audit log",
                "SELECT id, data::text FROM audit WHERE id > $1 ORDER BY id LIMIT 10000",
                &[(&after, Type::INT8)],
            )?;
            let Some(last) = rows.last() else {
                return Ok(bad);
            };
            after = last.get(0);
            for r in &rows {
                match serde_json::from_str(r.get::<_, &str>(1)) {
                    Ok(ev) => each(ev),
                    Err(_) => bad += 1,
                }
            }
        }
    }

    /// Follow the audit log: `LISTEN` first, so nothing committed after this call is
    /// missed.
    pub fn follow_audit(&self) -> Result<PgAuditFollow<'_>> {
        self.listen(&self.channel("audit"))?;
        Ok(PgAuditFollow {
            store: self,
            after: 0,
        })
    }

    /// Wait for changes to records and queues.
    pub fn changes(&self) -> Result<PgChanges<'_>> {
        self.listen(&self.channel("changes"))?;
        Ok(PgChanges { store: self })
    }

    fn listen(&self, channel: &str) -> Result<()> {
        let sql = format!("LISTEN \"{channel}\"");
        self.conn
            .run("listen for changes", |c| c.batch_execute(&sql))
    }

    /// Wait up to `timeout` for a notification; true when one came.
    fn wait_notification(&self, timeout: Duration) -> bool {
        let result = {
            let mut client = self.conn.client.borrow_mut();
            let mut n = client.notifications();
            let got = n.timeout_iter(timeout).next().map(|m| m.is_some());
            // Drain what else came, so the next wait waits.
            if got.is_ok() {
                while let Ok(Some(_)) = n.iter().next() {}
            }
            got
        };
        match result {
            Ok(got) => got,
            Err(_) => {
                // The connection is gone: the next read says so. Do not spin meanwhile.
                std::thread::sleep(timeout.min(Duration::from_millis(100)));
                false
            }
        }
    }

    /// One `heartbeat --watch` per agent: a session-scoped advisory lock, which ends
    /// with the watcher's connection (never a checkout's lock). `None`: another
    /// watcher has it.
    pub fn lock_watcher(&self, agent: &str) -> Result<Option<WatcherLock>> {
        let id = lock_id(&["watcher", &self.schema, agent]);
        let rows = self.rows(
            "lock the agent's watcher",
            "SELECT pg_try_advisory_lock($1)",
            &[(&id, Type::INT8)],
        )?;
        Ok(rows
            .first()
            .is_some_and(|r| r.get::<_, bool>(0))
            .then(|| WatcherLock {
                conn: self.conn.clone(),
                id,
            }))
    }

    // ---- The transaction scope ----

    /// `BEGIN` and the project's transaction-scoped advisory lock: waiting for it up to
    /// `guard_timeout` (`wait`), or `None` at once when another command holds it.
    pub fn begin(&self, wait: bool) -> Result<Option<PgGuard>> {
        let timeout = if wait {
            Some(self.config().unwrap_or_default().guard_timeout)
        } else {
            None
        };
        self.begin_inner(timeout)
    }

    fn begin_inner(&self, wait: Option<Duration>) -> Result<Option<PgGuard>> {
        if self.conn.in_tx.get() {
            return Err(Error::Store(
                "a PostgreSQL transaction was begun inside another (a bug in tasklock)".into(),
            ));
        }
        let sql = match wait {
            Some(t) => format!(
                "BEGIN; SET LOCAL lock_timeout = {}; SELECT pg_advisory_xact_lock({})",
                t.as_millis().max(1),
                self.lock_id
            ),
            None => format!("BEGIN; SELECT pg_try_advisory_xact_lock({})", self.lock_id),
        };
        let mut client = self.conn.client.borrow_mut();
        // A wait can be stopped, as the lock directory's can: by a signal (for the
        // commands that catch them) or the command's own deadline. The lock query blocks,
        // so a thread watches for those and cancels it.
        let watch = wait.map(|_| WaitWatch::start(client.cancel_token()));
        let result = client.simple_query(&sql);
        if let Some(why) = watch.and_then(WaitWatch::finish) {
            // Stopped: whatever the query came to (the lock may have been granted just
            // before the cancel), the scope is not entered.
            let _ = client.batch_execute("ROLLBACK");
            return Err(Error::GuardWaitStopped {
                path: PathBuf::from(format!(
                    "the project in PostgreSQL at {} (schema {})",
                    self.conn.url, self.schema
                )),
                why: why.into(),
            });
        }
        let closed = client.is_closed() || result.as_ref().is_err_and(connection_lost);
        let rows = match result {
            Ok(rows) => rows,
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK");
                drop(client);
                if code(&e) == Some(LOCK_NOT_AVAILABLE) {
                    return Err(Error::Store(format!(
                        "gave up after {} waiting for the project's lock in PostgreSQL at {} (schema {}); another tasklock holds it in a transaction that does not end (see pg_stat_activity); `guard_timeout` in config.yaml sets how long commands wait",
                        crate::duration::format(wait.unwrap_or_default()),
                        self.conn.url,
                        self.schema
                    )));
                }
                return Err(self.conn.fail("begin a transaction", &e, closed));
            }
        };
        drop(client);
        let granted = rows.iter().any(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0) != Some("f"),
            _ => false,
        });
        let guard = PgGuard {
            conn: self.conn.clone(),
            done: Cell::new(false),
            changed: Cell::new(false),
            audit: RefCell::new(Vec::new()),
        };
        self.conn.end_tx();
        self.conn.in_tx.set(true);
        if !granted {
            // Dropping the guard rolls the empty transaction back.
            return Ok(None);
        }
        Ok(Some(guard))
    }

    /// The audit table is bounded as the file store's log is: about `audit_keep + 1` times
    /// `audit_max_size` bytes of events are kept, the oldest dropped first. Looked at
    /// when the ids cross a multiple of [`AUDIT_TRIM_EVERY`] (the look is a scan of the
    /// table), so it may pass the bound by that many events in between.
    fn trim_audit(&self, added: usize) -> String {
        let cfg = self.config().unwrap_or_default();
        let budget = cfg
            .audit_max_size
            .saturating_mul(cfg.audit_keep as u64 + 1)
            .min(i64::MAX as u64);
        format!(
            "DO $trim$ BEGIN \
               IF (SELECT coalesce(max(id), 0) FROM audit) % {every} < {added} THEN \
                 DELETE FROM audit WHERE id <= (\
                   SELECT id FROM (SELECT id, sum(octet_length(data::text)) \
                     OVER (ORDER BY id DESC) AS kept FROM audit) t \
                   WHERE kept > {budget} ORDER BY id DESC LIMIT 1); \
               END IF; \
             END $trim$; ",
            every = AUDIT_TRIM_EVERY,
            added = added.min(AUDIT_TRIM_EVERY as usize),
        )
    }

    /// `COMMIT`, with the notifications of what changed. An error if any statement of
    /// the transaction failed (PostgreSQL would turn the COMMIT into a silent ROLLBACK):
    /// then nothing of it was kept.
    pub fn commit(&self, g: PgGuard) -> Result<()> {
        g.done.set(true);
        let failed = self.conn.failed.replace(None);
        self.conn.end_tx();
        let mut client = self.conn.client.borrow_mut();
        if let Some(first) = failed {
            let _ = client.batch_execute("ROLLBACK");
            return Err(Error::Store(format!(
                "PostgreSQL at {}: a step of this command failed ({first}), so none of its changes were kept",
                self.conn.url
            )));
        }
        // A statement before COMMIT in the same round trip: it fails if the transaction
        // was aborted by anything not seen above, and COMMIT then never runs.
        let mut sql = String::from("SELECT 1; ");
        let events = g.audit.take();
        if !events.is_empty() {
            // One statement for every event, in order (ids follow it), as a dollar-quoted
            // literal whose tag the JSON does not contain.
            let json = format!("[{}]", events.join(","));
            let mut tag = String::from("$tl$");
            let mut n = 0;
            while json.contains(&tag) {
                n += 1;
                tag = format!("$tl{n}$");
            }
            sql.push_str(&format!(
                "INSERT INTO audit (ts, event, key, agent, data) \
                 SELECT (e->>'ts')::timestamptz, e->>'event', e->>'key', e->>'agent', e \
                 FROM jsonb_array_elements({tag}{json}{tag}::jsonb) WITH ORDINALITY AS t(e, n) \
                 ORDER BY n; SELECT pg_notify('{}', ''); ",
                self.channel("audit")
            ));
            sql.push_str(&self.trim_audit(events.len()));
        }
        if g.changed.get() {
            sql.push_str(&format!(
                "SELECT pg_notify('{}', ''); ",
                self.channel("changes")
            ));
        }
        sql.push_str("COMMIT");
        match client.simple_query(&sql) {
            Ok(_) => Ok(()),
            Err(e) => {
                let closed = client.is_closed() || connection_lost(&e);
                let _ = client.batch_execute("ROLLBACK");
                let detail = describe(&e);
                Err(Error::Store(if closed {
                    format!(
                        "lost the connection to PostgreSQL at {} while committing ({detail}); this command's changes may or may not have been kept: check with `tasklock status`",
                        self.conn.url
                    )
                } else {
                    format!(
                        "PostgreSQL at {}: cannot commit ({detail}); none of this command's changes were kept",
                        self.conn.url
                    )
                }))
            }
        }
    }

    // ---- Changes: inside the scope ----

    pub fn next_token(&self, _g: &PgGuard) -> Result<u64> {
        let rows = self.rows("take a fencing token", "SELECT nextval('tokens')", &[])?;
        let t: i64 = rows
            .first()
            .map(|r| r.get(0))
            .ok_or_else(|| Error::Store("nextval returned nothing".into()))?;
        Ok(t as u64)
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
    fn upsert_record(&self, g: &PgGuard, r: &Record, replace: bool) -> Result<u64> {
        g.changed.set(true);
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
                "INSERT INTO slot_records (key, slot, token, agent, expires_at, data) \
                 VALUES ($1, $2, $3, $4, $5::timestamptz, $6::jsonb) \
                 ON CONFLICT (key, slot) DO UPDATE SET token = excluded.token, \
                 agent = excluded.agent, expires_at = excluded.expires_at, data = excluded.data \
                 RETURNING 1"
            } else {
                "INSERT INTO slot_records (key, slot, token, agent, expires_at, data) \
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
        let sql = if replace {
            "INSERT INTO records (key, token, agent, expires_at, data) \
             VALUES ($1, $2, $3, $4::timestamptz, $5::jsonb) \
             ON CONFLICT (key) DO UPDATE SET token = excluded.token, agent = excluded.agent, \
             expires_at = excluded.expires_at, data = excluded.data RETURNING 1"
        } else {
            "INSERT INTO records (key, token, agent, expires_at, data) \
             VALUES ($1, $2, $3, $4::timestamptz, $5::jsonb) \
             ON CONFLICT (key) DO NOTHING RETURNING 1"
        };
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
        if let Some(n) = slot {
            // A slot out of range was never written.
            let Some(slot) = slot_number(n) else {
                return Ok(());
            };
            return self
                .exec(
                    "remove the record of a slot",
                    "DELETE FROM slot_records WHERE key = $1 AND slot = $2 RETURNING 1",
                    &[(&key, Type::TEXT), (&slot, Type::INT4)],
                )
                .map(|_| ());
        }
        self.exec(
            "remove a record",
            "DELETE FROM records WHERE key = $1 RETURNING 1",
            &[(&key, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn audit(&self, g: &PgGuard, ev: &AuditEvent) -> Result<()> {
        g.audit.borrow_mut().push(to_json(ev, "audit event")?);
        Ok(())
    }

    pub fn write_queue(&self, g: &PgGuard, q: &Queue) -> Result<()> {
        g.changed.set(true);
        if q.is_empty() {
            return self
                .exec(
                    "remove a queue",
                    "DELETE FROM queues WHERE key = $1 RETURNING 1",
                    &[(&q.key, Type::TEXT)],
                )
                .map(|_| ());
        }
        let data = to_json(q, "queue")?;
        self.exec(
            "write a queue",
            "INSERT INTO queues (key, data) VALUES ($1, $2::jsonb) \
             ON CONFLICT (key) DO UPDATE SET data = excluded.data RETURNING 1",
            &[(&q.key, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn send(&self, _g: &PgGuard, msg: &Message) -> Result<()> {
        let data = to_json(msg, "message")?;
        let ts = rfc3339(&msg.ts);
        self.exec(
            "deliver a message",
            "INSERT INTO messages (agent, id, ts, data) VALUES ($1, $2, $3::timestamptz, $4::jsonb) \
             ON CONFLICT (agent, id) DO UPDATE SET ts = excluded.ts, data = excluded.data, read = false \
             RETURNING 1",
            &[
                (&msg.to, Type::TEXT),
                (&msg.id, Type::TEXT),
                (&ts, Type::TEXT),
                (&data, Type::TEXT),
            ],
        )
        .map(|_| ())
    }

    pub fn write_agent(&self, _g: &PgGuard, entry: &AgentEntry) -> Result<()> {
        self.conn.cache.borrow_mut().agents.remove(&entry.id);
        let data = to_json(entry, "agent entry")?;
        self.exec(
            "write an agent entry",
            "INSERT INTO agents (id, data) VALUES ($1, $2::jsonb) \
             ON CONFLICT (id) DO UPDATE SET data = excluded.data RETURNING 1",
            &[(&entry.id, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn remove_agent(&self, _g: &PgGuard, id: &str) -> Result<()> {
        self.conn.cache.borrow_mut().agents.remove(id);
        self.exec(
            "remove an agent entry",
            "DELETE FROM agents WHERE id = $1 RETURNING 1",
            &[(&id, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn write_ended(&self, _g: &PgGuard, ended: &Ended) -> Result<()> {
        let data = to_json(ended, "ended checkout")?;
        let token = ended.token as i64;
        self.exec(
            "record how a checkout ended",
            "INSERT INTO ended (key, token, data) VALUES ($1, $2, $3::jsonb) \
             ON CONFLICT (key) DO UPDATE SET token = excluded.token, data = excluded.data RETURNING 1",
            &[
                (&ended.key, Type::TEXT),
                (&token, Type::INT8),
                (&data, Type::TEXT),
            ],
        )
        .map(|_| ())
    }

    pub fn append_note(&self, _g: &PgGuard, key: &str, note: &Note) -> Result<()> {
        let data = to_json(note, "note")?;
        self.exec(
            "append a note",
            "INSERT INTO notes (key, data) VALUES ($1, $2::jsonb) RETURNING 1",
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
            "INSERT INTO freezes (pattern, until, data) VALUES ($1, $2::timestamptz, $3::jsonb) \
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
            "DELETE FROM freezes WHERE pattern = $1 RETURNING data::text",
            &[(&pattern, Type::TEXT)],
        )
    }
}

/// [`PgStore::changes`].
pub struct PgChanges<'a> {
    store: &'a PgStore,
}

impl PgChanges<'_> {
    /// Return when a change was committed, or after `timeout` at the latest.
    pub fn wait(&mut self, timeout: Duration) {
        self.store.wait_notification(timeout);
    }
}

/// How many audit events between two looks at the audit table's size.
pub const AUDIT_TRIM_EVERY: i64 = 64;

/// [`PgStore::follow_audit`].
pub struct PgAuditFollow<'a> {
    store: &'a PgStore,
    after: i64,
}

impl PgAuditFollow<'_> {
    /// Events committed since the last call (all on the first), oldest first, waiting up
    /// to `timeout` for some when there are none yet.
    pub fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>> {
        let events = self.fetch()?;
        if !events.is_empty() {
            return Ok(events);
        }
        if self.store.wait_notification(timeout) {
            return self.fetch();
        }
        Ok(Vec::new())
    }

    fn fetch(&mut self) -> Result<Vec<AuditEvent>> {
        let rows = self.store.rows(
            "read the audit log",
            "SELECT id, data::text FROM audit WHERE id > $1 ORDER BY id",
            &[(&self.after, Type::INT8)],
        )?;
        if let Some(last) = rows.last() {
            self.after = last.get(0);
        }
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(1)).ok())
            .collect())
    }
}

impl crate::store::Changes for PgChanges<'_> {
    fn wait(&mut self, timeout: Duration) {
        PgChanges::wait(self, timeout)
    }
}

impl crate::store::AuditFollow for PgAuditFollow<'_> {
    fn next(&mut self, timeout: Duration) -> Result<Vec<AuditEvent>> {
        PgAuditFollow::next(self, timeout)
    }
}

/// The store's part of a [`Guard`]: a [`PgGuard`].
fn pg(g: &Guard) -> &PgGuard {
    g.get::<PgGuard>()
}

impl Store for PgStore {
    fn describe(&self) -> String {
        PgStore::describe(self)
    }
    fn share_config(&self, cfg: &Config) {
        PgStore::share_config(self, cfg)
    }
    fn config(&self) -> Result<Config> {
        PgStore::config(self)
    }
    fn read(&self, key: &str) -> Result<Slot> {
        PgStore::read(self, key)
    }
    fn read_slots(&self, key: &str) -> Result<Vec<Slot>> {
        PgStore::read_slots(self, key)
    }
    fn scan(&self) -> Result<Vec<Slot>> {
        PgStore::scan(self)
    }
    fn read_queue(&self, key: &str) -> Result<Queue> {
        PgStore::read_queue(self, key)
    }
    fn read_many(&self, g: &Guard, keys: &[String]) -> Result<Vec<(Slot, Queue)>> {
        PgStore::read_many(self, pg(g), keys)
    }
    fn scan_queues(&self) -> Result<Vec<Queue>> {
        PgStore::scan_queues(self)
    }
    fn read_agent(&self, id: &str) -> Result<Option<AgentEntry>> {
        PgStore::read_agent(self, id)
    }
    fn scan_agents(&self) -> Result<Vec<AgentEntry>> {
        PgStore::scan_agents(self)
    }
    fn read_ended(&self, key: &str) -> Result<Option<Ended>> {
        PgStore::read_ended(self, key)
    }
    fn last_notes(&self, key: &str, n: usize) -> Result<Vec<Note>> {
        PgStore::last_notes(self, key, n)
    }
    fn freezes(&self) -> Result<Vec<Freeze>> {
        PgStore::freezes(self)
    }
    fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        PgStore::unread(self, agent)
    }
    fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        PgStore::mark_read(self, agent, id)
    }
    fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        PgStore::message(self, agent, id)
    }
    fn audit_events(&self, each: &mut dyn FnMut(AuditEvent)) -> Result<usize> {
        PgStore::audit_events(self, each)
    }
    fn follow_audit(&self) -> Result<Box<dyn crate::store::AuditFollow + '_>> {
        Ok(Box::new(PgStore::follow_audit(self)?))
    }
    fn changes(&self) -> Result<Box<dyn crate::store::Changes + '_>> {
        Ok(Box::new(PgStore::changes(self)?))
    }
    fn lock_watcher(&self, agent: &str) -> Result<Option<Held>> {
        Ok(PgStore::lock_watcher(self, agent)?.map(|l| Box::new(l) as Held))
    }
    fn begin(&self, wait: bool) -> Result<Option<Guard>> {
        Ok(PgStore::begin(self, wait)?.map(Guard::new))
    }
    fn commit(&self, g: Guard) -> Result<()> {
        PgStore::commit(self, g.into_inner::<PgGuard>())
    }
    fn next_token(&self, g: &Guard) -> Result<u64> {
        PgStore::next_token(self, pg(g))
    }
    fn insert(&self, g: &Guard, record: &Record) -> Result<()> {
        PgStore::insert(self, pg(g), record)
    }
    fn replace(&self, g: &Guard, record: &Record) -> Result<()> {
        PgStore::replace(self, pg(g), record)
    }
    fn remove(
        &self,
        g: &Guard,
        key: &str,
        slot: Option<u32>,
        _paths: Option<&[String]>,
    ) -> Result<()> {
        PgStore::remove(self, pg(g), key, slot)
    }
    fn audit(&self, g: &Guard, event: &AuditEvent) -> Result<()> {
        PgStore::audit(self, pg(g), event)
    }
    fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()> {
        PgStore::write_queue(self, pg(g), q)
    }
    fn send(&self, g: &Guard, msg: &Message) -> Result<()> {
        PgStore::send(self, pg(g), msg)
    }
    fn record_delivery(&self, g: &Guard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        PgStore::record_delivery(self, pg(g), agent, id, d)
    }
    fn write_agent(&self, g: &Guard, entry: &AgentEntry) -> Result<()> {
        PgStore::write_agent(self, pg(g), entry)
    }
    fn remove_agent(&self, g: &Guard, id: &str) -> Result<()> {
        PgStore::remove_agent(self, pg(g), id)
    }
    fn write_ended(&self, g: &Guard, ended: &Ended) -> Result<()> {
        PgStore::write_ended(self, pg(g), ended)
    }
    fn append_note(&self, g: &Guard, key: &str, note: &Note) -> Result<()> {
        PgStore::append_note(self, pg(g), key, note)
    }
    fn write_freeze(&self, g: &Guard, f: &Freeze) -> Result<()> {
        PgStore::write_freeze(self, pg(g), f)
    }
    fn remove_freeze(&self, g: &Guard, pattern: &str) -> Result<Option<Freeze>> {
        PgStore::remove_freeze(self, pg(g), pattern)
    }
}

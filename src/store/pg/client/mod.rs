//! [`PgStore`]: the store's operations over one connection (tokio-postgres, driven on the
//! command's own thread: `blocking.rs`).
//!
//! This file holds the connection, opening a schema (and migrating it), the helpers every
//! query uses, and the transaction scope (`begin`, `commit`, the fencing counter). The
//! tables each have a file of their own: `records.rs` (keys and slots), `queues.rs`,
//! `registry.rs` (agents, watcher locks), `inbox.rs`, `history.rs` (ended checkouts,
//! notes, freezes), `audit.rs`, `changes.rs` (LISTEN/NOTIFY); `store.rs` answers the
//! [`Store`] trait with them.

use std::cell::{Cell, OnceCell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::types::{ToSql, Type};

use super::{CONNECT_TIMEOUT, Target, schema};
use crate::clock::Time;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::AGENT_LOCK_PREFIX;
use crate::store::{
    AgentEntry, AuditEvent, Delivery, Ended, FORMAT_VERSION, Freeze, Guard, Held, Message, Note,
    Queue, Record, Slot, Store,
};
pub use blocking::Client;

mod ahead;
mod audit;
mod backlog;
mod blocking;
mod changes;
mod history;
mod inbox;
mod queues;
mod records;
mod registry;
mod store;

pub use audit::PgAuditFollow;
pub use changes::PgChanges;

/// Watches a blocking wait for the project's lock: when a signal arrives or the
/// command's deadline ([`crate::store::guard_deadline`]) passes, it cancels the query.
///
/// The cancel is `pg_cancel_backend` on a connection of its own, of the session that
/// runs the query marked with this wait's tag, not the protocol's cancel request: the
/// client (tokio-postgres) closes that request's socket without waiting for the server to
/// answer, which makes PgBouncer 1.18 (Debian 12's) exit with "FATAL ... disconnect_client():
/// bad client state: 0" (PgBouncer issue 801, fixed in later releases), taking every
/// client of the pooler down with it.
struct WaitWatch {
    /// The reason it cancelled, once it has; `done` once the wait ended by itself.
    state: std::sync::Arc<std::sync::Mutex<(bool, Option<&'static str>)>>,
    thread: std::thread::JoinHandle<()>,
}

impl WaitWatch {
    const TICK: Duration = Duration::from_millis(50);

    fn start(target: Target, tag: String) -> WaitWatch {
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
                    cancel_tagged(&target, &tag);
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

/// A tag that marks one statement as this wait's (in a comment at its start), for
/// [`cancel_tagged`] to find it in `pg_stat_activity`: unique to this process and call.
fn wait_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "tasklock-wait-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Cancel the statement tagged `tag` wherever it runs (on a pooler in transaction mode,
/// whichever server session it was given), over a new connection. Best effort: when it
/// cannot connect, the wait ends at its lock timeout instead.
fn cancel_tagged(target: &Target, tag: &str) {
    if let Ok(mut c) = connect(target, &session_name()) {
        let _ = c.simple_query(&format!(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE '/* {tag} */%'"
        ));
    }
}

/// Does `sql` name the table `table` (as `schema.table`, which every statement writes)?
fn names_table(sql: &str, table: &str) -> bool {
    sql.match_indices(table).any(|(i, _)| {
        sql[..i].ends_with('.')
            && !sql[i + table.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Was every lock of a begin's answer granted (a try gives `f` for one that is busy)?
fn all_granted(rows: &[SimpleQueryMessage]) -> bool {
    // A lock's answer is a row of one column (the entries read after are of two).
    let mut answers = rows.iter().filter_map(|m| match m {
        SimpleQueryMessage::Row(r) if r.len() == 1 => Some(r.get(0) != Some("f")),
        _ => None,
    });
    answers
        .next()
        .is_some_and(|first| first && answers.all(|a| a))
}

/// SQLSTATEs looked at.
const UNDEFINED_TABLE: &str = "42P01";
const INVALID_SCHEMA: &str = "3F000";
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The connection and what the open transaction has seen.
struct Conn {
    client: RefCell<Client>,
    /// Where it connected (for connections of its own, such as a wait's cancel).
    target: Target,
    /// The server session (`pg_backend_pid()`) it was given when it connected. A later
    /// statement that runs in another one went through a pooler in transaction mode,
    /// which keeps nothing of a session: then what needs one is refused or done without.
    pid: Cell<i32>,
    /// The URL, password masked: for every message.
    url: String,
    in_tx: Cell<bool>,
    /// The first statement that failed in the open transaction: PostgreSQL aborts the
    /// transaction there, and COMMIT would silently roll it back.
    failed: RefCell<Option<String>>,
    /// When it last sent anything: a connection kept idle for longer is looked at again
    /// before it is used ([`PgStore::open`]).
    used: Cell<std::time::Instant>,
    /// Reads made inside the open transaction that no other process can change before
    /// it ends (every change of the project holds its advisory lock), kept until then.
    cache: RefCell<TxCache>,
    /// Writes of the open transaction whose answer nothing waits for, each with its
    /// table, put off until a statement names that table, or the COMMIT
    /// ([`Conn::put_off`]).
    put_off: RefCell<Vec<(Vec<&'static str>, String)>>,
    /// Connected, and the server's clock, its version, the schema's version and the
    /// server session not read yet: the first `BEGIN` reads them, or the first other
    /// statement is preceded by their read ([`PgStore::ensure_looked`]).
    fresh: Cell<bool>,
    /// The server's version and the schema's, as last read.
    server_version: RefCell<String>,
    schema_version: Cell<i32>,
}

/// See [`Conn::cache`]. Own writes update or drop what they change.
#[derive(Default)]
struct TxCache {
    agents: std::collections::HashMap<String, Option<AgentEntry>>,
    freezes: Option<Vec<Freeze>>,
    /// Keys seen to have no slot records, under a lock that keeps them so.
    no_slots: std::collections::HashSet<String>,
    /// What was read ahead with the BEGIN (ahead.rs).
    ahead: ahead::Ahead,
}

impl Conn {
    fn new(client: Client, t: &Target) -> Conn {
        Conn {
            client: RefCell::new(client),
            target: t.clone(),
            pid: Cell::new(0),
            url: t.masked.clone(),
            in_tx: Cell::new(false),
            failed: RefCell::new(None),
            cache: RefCell::new(TxCache::default()),
            used: Cell::new(std::time::Instant::now()),
            put_off: RefCell::new(Vec::new()),
            fresh: Cell::new(false),
            server_version: RefCell::new(String::new()),
            schema_version: Cell::new(0),
        }
    }

    /// Send `sql` (literals only: see [`literal`]), a write to `table`, before the next
    /// statement that names that table, or else with the COMMIT, in its round trip. Its
    /// failure is that statement's (or the commit's), and rolls the whole transaction
    /// back. Nothing else can depend on it: tables are tied by no key or trigger.
    fn put_off(&self, table: &'static str, sql: String) {
        self.put_off_all(&[table], sql);
    }

    /// [`Conn::put_off`] for a write to several tables (sent before a statement that
    /// names any of them).
    fn put_off_all(&self, tables: &[&'static str], sql: String) {
        self.put_off.borrow_mut().push((tables.to_vec(), sql));
    }

    /// The writes put off, as statements to send first (emptied).
    fn take_put_off(&self) -> String {
        let mut out = String::new();
        for (_, s) in self.put_off.borrow_mut().drain(..) {
            out.push_str(&s);
            out.push_str("; ");
        }
        out
    }

    /// The writes put off that must go before `sql`: all of them (in order) when it
    /// names the table of any, else none yet.
    fn put_off_before(&self, sql: &str) -> String {
        let due = self
            .put_off
            .borrow()
            .iter()
            .any(|(tables, _)| tables.iter().any(|t| names_table(sql, t)));
        if due {
            self.take_put_off()
        } else {
            String::new()
        }
    }

    /// The transaction ended (committed or rolled back): forget what it saw.
    fn end_tx(&self) {
        self.in_tx.set(false);
        self.failed.replace(None);
        self.put_off.borrow_mut().clear();
        self.cache.replace(TxCache::default());
    }

    /// Run `f` on the client; a failure is an error naming the server, and marks the open
    /// transaction as failed.
    fn run<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let first = self.take_put_off();
        self.run_after(what, first, f)
    }

    /// As [`Conn::run`] for the statement `sql`, which is sent after only the writes put
    /// off that it may read ([`Conn::put_off_before`]).
    fn run_sql<T>(
        &self,
        what: &str,
        sql: &str,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let first = self.put_off_before(sql);
        self.run_after(what, first, f)
    }

    /// Send `first` (writes put off), then run `f`.
    fn run_after<T>(
        &self,
        what: &str,
        first: String,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let mut client = self.client.borrow_mut();
        self.used.set(std::time::Instant::now());
        let (what, result) = match first.is_empty() {
            true => (what, f(&mut client)),
            false => match client.batch_execute(&first) {
                Ok(()) => (what, f(&mut client)),
                Err(e) => ("write what it changed", Err(e)),
            },
        };
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                let closed = client.is_closed() || connection_lost(&e);
                drop(client);
                Err(self.fail(what, &e, closed))
            }
        }
    }

    fn fail(&self, what: &str, e: &tokio_postgres::Error, closed: bool) -> Error {
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
fn describe(e: &tokio_postgres::Error) -> String {
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
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || code(e).is_some_and(|c| c.starts_with("57P") || c.starts_with("08"))
}

fn code(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// Connection (URL, schema, connection).
type Opened = (String, String, Rc<Conn>);
/// A connection to a session URL (URL, schema, connection).
type Session = (String, String, Rc<Conn>);

thread_local! {
    /// The connections this process opened, kept for its lifetime. Never dropped: the
    /// client must not be torn down at exit, after the runtime's own thread-locals are
    /// gone; the kernel closes the socket and the server ends the session.
    static OPEN: std::mem::ManuallyDrop<RefCell<Vec<Opened>>> =
        const { std::mem::ManuallyDrop::new(RefCell::new(Vec::new())) };
    /// The connections to session URLs ([`PgStore::session_conn`]), by URL and schema;
    /// kept as [`OPEN`]'s are.
    static SESSIONS: std::mem::ManuallyDrop<RefCell<Vec<Session>>> =
        const { std::mem::ManuallyDrop::new(RefCell::new(Vec::new())) };
}

/// One PostgreSQL schema: one project's checkouts.
pub struct PgStore {
    conn: Rc<Conn>,
    /// Where what needs a session goes ([`Target::session`]); `None`: `conn`'s URL.
    session: Option<Target>,
    /// The connection to `session`, once opened: the process's ([`SESSIONS`]), or this
    /// store's own for one made for tests.
    session_conn: OnceCell<Rc<Conn>>,
    shares_sessions: bool,
    schema: String,
    /// The transaction-scoped advisory lock that makes every change of this project serial.
    lock_id: i64,
    cfg: OnceCell<Config>,
}

/// Proof of an open transaction holding the project's lock. Dropped without
/// [`PgStore::commit`]: rolled back.
pub struct PgGuard {
    conn: Rc<Conn>,
    done: Cell<bool>,
    changed: Cell<bool>,
    /// A scope of some locks only ([`PgStore::begin_scoped`]): the keys (and `agent:ID`s)
    /// it may change (a claim's grows as it takes keys). `None`: the whole project's lock.
    scope: Option<RefCell<Vec<String>>>,
    /// A change outside the scope was refused: the commit refuses too.
    escalated: Cell<bool>,
    /// Audit events of the transaction, as JSON: written with the COMMIT, in the same
    /// round trip (nothing reads the log inside a scope).
    audit: RefCell<Vec<String>>,
}

impl PgGuard {
    /// Does the scope hold `lock` (a key, or `agent:ID`)? The project's scope holds all.
    pub(super) fn holds(&self, lock: &str) -> bool {
        match &self.scope {
            None => true,
            Some(locks) => locks.borrow().iter().any(|k| k == lock),
        }
    }
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
            let _ = c.query_typed("SELECT pg_advisory_unlock($1)", &[(&self.id, Type::INT8)]);
        }
    }
}

/// A 64-bit advisory lock id for `parts`: the first 8 bytes of the SHA-256 of
/// [`lock_bytes`].
fn lock_id(parts: &[&str]) -> i64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(lock_bytes(parts));
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// What a lock id hashes: `tasklock`, then each part after a zero byte.
fn lock_bytes(parts: &[&str]) -> Vec<u8> {
    let mut b = b"tasklock".to_vec();
    for p in parts {
        b.push(0);
        b.extend_from_slice(p.as_bytes());
    }
    b
}

#[cfg(test)]
pub(crate) fn lock_id_for_tests(parts: &[&str]) -> i64 {
    lock_id(parts)
}

#[cfg(test)]
pub(crate) fn connect_for_tests(t: &Target) -> Result<Client> {
    connect(t, &session_name())
}

/// The `application_name` of a command's connection to a store behind a pooler (one with
/// a session URL): one name for all, because a pooler in transaction mode sends `SET
/// application_name` whenever it gives a server session to a client with another name,
/// which with a name per process is nearly every transaction (a quarter of the
/// statements of a fleet's beats).
const STORE_SESSION: &str = "tasklock";

/// The `application_name` of a connection straight to the server (the store without a
/// session URL, or the session URL itself): the process's, for operators.
fn session_name() -> String {
    format!("tasklock/{}", std::process::id())
}

/// `text` as a literal for a statement sent without parameters: dollar-quoted, with a
/// tag `text` does not contain (so nothing in it is read as SQL, whatever the server's
/// `standard_conforming_strings`).
fn literal(text: &str) -> String {
    let mut n = 0;
    loop {
        let tag = match n {
            0 => "$tl$".to_string(),
            n => format!("$tl{n}$"),
        };
        // The tag must first appear where it closes the literal (text ending in `$tl`
        // would close it early).
        let body = format!("{text}{tag}");
        if body.find(&tag) == Some(text.len()) {
            return format!("{tag}{body}");
        }
        n += 1;
    }
}

fn to_json<T: Serialize>(v: &T, what: &str) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Store(format!("cannot encode {what}: {e}")))
}

fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Connect within the connect timeout, whatever the server does (a stopped server
/// accepts TCP connections and never answers: the wait is bounded here too).
///
/// `name` is the session's `application_name` unless the URL sets one.
fn connect(t: &Target, name: &str) -> Result<Client> {
    let mut cfg: tokio_postgres::Config = t.url.parse().map_err(|e| {
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
        cfg.application_name(name);
    }
    // No `options` startup parameter (it used to set `search_path`): a pooler such as
    // PgBouncer refuses it, and in transaction mode would not keep it for the session
    // anyway. Every statement names its schema instead (`{s}.records`, see `sql`).
    let fail = |why: String| {
        Error::Store(format!(
            "cannot connect to PostgreSQL at {} ({}): {why}",
            t.masked, t.source
        ))
    };
    // The connect timeout bounds each TCP connect; this, a little longer, the whole
    // exchange (so a refused or unreachable address still says why).
    match Client::connect(&cfg, timeout + Duration::from_millis(500)) {
        Ok(c) => Ok(c),
        Err(blocking::ConnectError::Postgres(e)) => Err(fail(describe(&e))),
        Err(blocking::ConnectError::Runtime(e)) => Err(fail(e.to_string())),
        Err(blocking::ConnectError::TimedOut) => Err(fail(format!(
            "no answer within {}",
            crate::duration::format(timeout)
        ))),
    }
}

impl PgStore {
    /// Connect, create or migrate the schema when needed, and judge time by the
    /// server's clock from now on.
    pub fn open(t: &Target) -> Result<PgStore> {
        let store = Self::open_fresh(t)?;
        store.ensure_looked()?;
        Ok(store)
    }

    /// [`PgStore::open`], leaving what it reads of the server (its clock, the schema's
    /// version) to the first exchange that needs it: a scope's `BEGIN` reads them in its
    /// own round trip, any other statement after one of their own, and
    /// [`crate::clock::now`] asks for them if it is called before either.
    pub fn open_fresh(t: &Target) -> Result<PgStore> {
        // One connection per process and target: a command that opens its store more
        // than once (or early, to read the server's clock) connects once.
        let cached = OPEN.with(|o| {
            o.borrow()
                .iter()
                .find(|c| c.0 == t.url && c.1 == t.schema)
                .map(|c| c.2.clone())
        });
        if let Some(conn) = cached {
            let store = Self::on(conn, t);
            // Used a moment ago (the same command opening its store again), inside a
            // transaction, or not looked at yet: as it is. Idle for longer (a
            // long-running process between commands): looked at again, which also reads
            // the clock anew; one that was closed meanwhile (a server restarted, a
            // session ended) is replaced.
            if store.conn.in_tx.get()
                || store.conn.fresh.get()
                || store.conn.used.get().elapsed() < LOOK_AGAIN_AFTER
                || store.look(true).is_ok()
            {
                return Ok(store);
            }
            let dead = store.conn.clone();
            OPEN.with(|o| o.borrow_mut().retain(|c| !Rc::ptr_eq(&c.2, &dead)));
        }
        let mut store = Self::on(Rc::new(Conn::new(Self::connect_client(t)?, t)), t);
        store.shares_sessions = true;
        store.conn.fresh.set(true);
        crate::clock::set_pending(Self::ask_clock);
        OPEN.with(|o| {
            o.borrow_mut()
                .push((t.url.clone(), t.schema.clone(), store.conn.clone()))
        });
        Ok(store)
    }

    /// The process's connections not looked at yet are looked at now (what
    /// [`crate::clock::now`] asks when "now" is wanted before the store's first exchange).
    /// One that fails stays unlooked: its next statement looks again and says why.
    fn ask_clock() {
        let fresh: Vec<Rc<Conn>> = OPEN.with(|o| {
            o.borrow()
                .iter()
                .filter(|c| c.2.fresh.get())
                .map(|c| c.2.clone())
                .collect()
        });
        for conn in fresh {
            let t = conn.target.clone();
            let _ = Self::on(conn, &t).ensure_looked();
        }
    }

    /// A store of the schema `t` names, on `conn`.
    fn on(conn: Rc<Conn>, t: &Target) -> PgStore {
        PgStore {
            conn,
            session: t.session.as_deref().cloned(),
            session_conn: OnceCell::new(),
            shares_sessions: true,
            schema: t.schema.clone(),
            lock_id: lock_id(&["project", &t.schema]),
            cfg: OnceCell::new(),
        }
    }

    /// A new client for `t`, named as a command's connection to it.
    fn connect_client(t: &Target) -> Result<Client> {
        let name = match t.session {
            Some(_) => STORE_SESSION.to_string(),
            None => session_name(),
        };
        connect(t, &name)
    }

    /// A connection of its own (not the process's shared one), looked at: for tests.
    #[cfg(test)]
    pub(crate) fn connect_new(t: &Target) -> Result<PgStore> {
        let mut store = Self::on(Rc::new(Conn::new(Self::connect_client(t)?, t)), t);
        store.shares_sessions = false;
        store.conn.fresh.set(true);
        store.ensure_looked()?;
        Ok(store)
    }

    /// Look at the server (its clock, the schema) unless this connection has been: with
    /// a round trip of its own, creating or migrating the schema when needed. One that
    /// fails leaves the connection unlooked, so that the next statement fails so too.
    pub(super) fn ensure_looked(&self) -> Result<()> {
        if !self.conn.fresh.replace(false) {
            return Ok(());
        }
        let looked = (|| {
            let mut migrated = false;
            while !self.look(migrated)? {
                self.migrate()?;
                migrated = true;
            }
            Ok(())
        })();
        if looked.is_err() {
            self.conn.fresh.set(true);
        }
        looked
    }

    /// The statement that reads the server's clock, its version, the schema's version
    /// and the server session, in a row whose first column is [`LOOK`].
    fn look_sql(&self) -> String {
        format!(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8 AS {LOOK}, \
             current_setting('server_version'), \
             (SELECT max(version) FROM {}.schema_version), pg_backend_pid()",
            self.schema
        )
    }

    /// Read the server's clock (the command's "now" from here on), its version, the
    /// schema's version and the server session. `Ok(false)`: the schema is missing or
    /// older than this build, and not `migrated` yet.
    fn look(&self, migrated: bool) -> Result<bool> {
        let before = std::time::SystemTime::now();
        let probe = self.conn.client.borrow_mut().simple_query(&self.look_sql());
        let after = std::time::SystemTime::now();
        self.conn.used.set(std::time::Instant::now());
        let rows = match probe {
            Ok(rows) => rows,
            Err(e) if !migrated && matches!(code(&e), Some(UNDEFINED_TABLE | INVALID_SCHEMA)) => {
                return Ok(false);
            }
            Err(e) => {
                let closed = self.conn.client.borrow().is_closed() || connection_lost(&e);
                return Err(self
                    .conn
                    .fail("read its clock and schema version", &e, closed));
            }
        };
        self.looked(&rows, before, after, migrated)
    }

    /// Take what [`PgStore::look_sql`]'s row in `rows` says, its statement sent at
    /// `before` and answered at `after`: as [`PgStore::look`].
    fn looked(
        &self,
        rows: &[SimpleQueryMessage],
        before: std::time::SystemTime,
        after: std::time::SystemTime,
        migrated: bool,
    ) -> Result<bool> {
        let row = rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(r)
                    if r.columns().first().map(|c| c.name()) == Some(LOOK) =>
                {
                    Some(r)
                }
                _ => None,
            })
            .ok_or_else(|| Error::Store(format!("PostgreSQL at {}: no answer", self.conn.url)))?;
        let server_us: i64 = row.get(0).and_then(|v| v.parse().ok()).unwrap_or(0);
        *self.conn.server_version.borrow_mut() = row.get(1).unwrap_or("").to_string();
        let version: i32 = row.get(2).and_then(|v| v.parse().ok()).unwrap_or(0);
        if version > schema::CURRENT {
            return Err(Error::Store(format!(
                "the schema {} at {} is at version {version}, newer than this tasklock understands ({}); upgrade tasklock",
                self.schema,
                self.conn.url,
                schema::CURRENT
            )));
        }
        if version < schema::CURRENT && !migrated {
            return Ok(false);
        }
        self.conn.schema_version.set(version);
        self.conn
            .pid
            .set(row.get(3).and_then(|v| v.parse().ok()).unwrap_or(0));
        // The server's clock, as of the middle of the round trip.
        let mid = before + after.duration_since(before).unwrap_or_default() / 2;
        let local = chrono::DateTime::<chrono::Utc>::from(mid);
        if let Some(server) = chrono::DateTime::from_timestamp_micros(server_us) {
            crate::clock::set_offset(server - local);
        }
        Ok(true)
    }

    /// Create the schema, or bring it up to [`schema::CURRENT`], in one transaction under
    /// the project's lock: a concurrent first run waits, then finds it done.
    fn migrate(&self) -> Result<()> {
        let s = &self.schema;
        let g = self
            .begin_inner(Some(Duration::from_secs(60)), None, false)?
            .expect("waited");
        // Waiting for an advisory lock does not make the server session read the catalog
        // changes committed meanwhile (a lock on a table does): without this first read of
        // `pg_namespace`, a session that waited while another first run created the schema
        // can still think it missing, and fail creating it again (duplicate key). Seen with
        // PgBouncer, whose server sessions are warm and start at once.
        self.conn.run("create the schema", |c| {
            c.batch_execute(&format!(
                "SELECT FROM pg_catalog.pg_namespace LIMIT 0; {}",
                schema::bootstrap(s)
            ))
        })?;
        let have: i32 = self.conn.run("read the schema version", |c| {
            c.query_typed_one(
                &format!("SELECT coalesce(max(version), 0) FROM {s}.schema_version"),
                &[],
            )
            .map(|r| r.get(0))
        })?;
        for v in (have + 1)..=schema::CURRENT {
            self.conn
                .run(&format!("migrate the schema to version {v}"), |c| {
                    c.batch_execute(&schema::migration(s, v))?;
                    c.query_typed(
                        &format!(
                            "INSERT INTO {s}.schema_version (version, tasklock) VALUES ($1, $2)"
                        ),
                        &[(&v, Type::INT4), (&env!("CARGO_PKG_VERSION"), Type::TEXT)],
                    )
                })?;
        }
        self.commit(g)
    }

    /// The connection for what needs a session of its own (a watcher's lock, `LISTEN`):
    /// one to the session URL when there is one (opened on first use, kept for the
    /// process), else the store's own.
    fn session_conn(&self) -> Result<Rc<Conn>> {
        // The schema is made, and this connection's server session found, by the look.
        self.ensure_looked()?;
        let Some(t) = &self.session else {
            return Ok(self.conn.clone());
        };
        if let Some(conn) = self.session_conn.get() {
            return Ok(conn.clone());
        }
        let cached = SESSIONS.with(|s| {
            s.borrow()
                .iter()
                .find(|c| self.shares_sessions && c.0 == t.url && c.1 == t.schema)
                .map(|c| c.2.clone())
        });
        if let Some(conn) = cached {
            let _ = self.session_conn.set(conn.clone());
            return Ok(conn);
        }
        let conn = Rc::new(Conn::new(connect(t, &session_name())?, t));
        let rows = conn.run("reach tasklock's schema", |c| {
            c.simple_query(&format!(
                "SELECT pg_backend_pid(), to_regclass('{}.schema_version') IS NOT NULL",
                t.schema
            ))
        })?;
        let row = rows.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        });
        if row.and_then(|r| r.get(1)) != Some("t") {
            return Err(Error::Store(format!(
                "{} ({}) has no schema {}, which {} ({}) keeps: the session URL must reach the same database",
                t.masked, t.source, t.schema, self.conn.url, self.conn.target.source
            )));
        }
        conn.pid.set(
            row.and_then(|r| r.get(0))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        );
        if self.shares_sessions {
            SESSIONS.with(|s| {
                s.borrow_mut()
                    .push((t.url.clone(), t.schema.clone(), conn.clone()))
            });
        }
        let _ = self.session_conn.set(conn.clone());
        Ok(conn)
    }

    /// `conn`'s statements reach different server sessions, so `what` (which needs one)
    /// cannot be done there.
    fn not_a_session(&self, conn: &Conn, what: &str) -> Error {
        let fix = match &self.session {
            None => format!(
                "set {} (or `session_store:` beside `store:` in config.yaml) to a URL that keeps a session: the server itself, or a pooler in session mode",
                super::SESSION_URL_ENV
            ),
            Some(t) => format!(
                "{} must keep a session: the server itself, or a pooler in session mode",
                t.source
            ),
        };
        Error::Store(format!(
            "PostgreSQL at {} ({}): {what}, which needs a session of its own, but statements sent there run in different server sessions (a connection pooler in transaction mode, such as PgBouncer's); {fix} (docs/postgres.md, \"Behind a connection pooler\")",
            conn.url, conn.target.source
        ))
    }

    /// "PostgreSQL at postgres://u:***@host/db, schema tasklock".
    pub fn describe(&self) -> String {
        format!("PostgreSQL at {}, schema {}", self.conn.url, self.schema)
    }

    /// Run `f` on the connection (for checks and tests that need SQL of their own).
    pub fn with_client<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        self.ensure_looked()?;
        self.conn.run(what, f)
    }

    pub fn url(&self) -> &str {
        &self.conn.url
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server session this store's connection was given when it connected.
    #[cfg(test)]
    pub(crate) fn backend_pid(&self) -> i32 {
        self.conn.pid.get()
    }

    pub fn server_version(&self) -> String {
        self.conn.server_version.borrow().clone()
    }

    pub fn schema_version(&self) -> i32 {
        self.conn.schema_version.get()
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

    /// `sql` with `{s}` standing for this store's schema. Every statement names its
    /// tables so (`{s}.records`): nothing depends on the session's `search_path`, which a
    /// connection pooler in transaction mode does not keep.
    pub(crate) fn sql(&self, sql: &str) -> String {
        sql.replace("{s}", &self.schema)
    }

    /// Rows of one statement, sent unnamed (`query_typed`: Parse, Bind, Execute and Sync
    /// in one round trip), so nothing of it outlives the statement on the server session:
    /// a pooler in transaction mode may give the next statement another one.
    fn rows(
        &self,
        what: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        self.ensure_looked()?;
        let sql = self.sql(sql);
        self.conn
            .run_sql(what, &sql, |c| c.query_typed(&sql, params))
    }

    fn exec(&self, what: &str, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<u64> {
        self.ensure_looked()?;
        let sql = self.sql(sql);
        self.conn.run_sql(what, &sql, |c| {
            c.query_typed(&sql, params).map(|r| r.len() as u64)
        })
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

    /// `BEGIN` and the project's transaction-scoped advisory lock: waiting for it up to
    /// `guard_timeout` (`wait`), or `None` at once when another command holds it.
    pub fn begin(&self, wait: bool) -> Result<Option<PgGuard>> {
        self.begin_inner(self.lock_wait(wait), None, false)
    }

    /// How long a begin waits for its locks: `guard_timeout`, or not at all.
    fn lock_wait(&self, wait: bool) -> Option<Duration> {
        wait.then(|| self.config().unwrap_or_default().guard_timeout)
    }

    /// A transaction holding the project's lock shared (beside every other such one; a
    /// change of the whole project waits for them all) and the lock of each of `locks`
    /// exclusively, taken in one order so that two scopes never wait for each other.
    pub fn begin_scoped(&self, locks: &[String], wait: bool) -> Result<Option<PgGuard>> {
        self.begin_inner(self.lock_wait(wait), Some(locks), false)
    }

    /// A key scope for a claim from the backlog: the project's lock shared and `locks`,
    /// waiting for them; [`PgStore::backlog_take`] adds the keys it takes.
    pub fn begin_claim(&self, locks: &[String]) -> Result<Option<PgGuard>> {
        self.begin_inner(self.lock_wait(true), Some(locks), true)
    }

    /// Add a key whose lock this scope has just taken to what it may change.
    pub(super) fn hold(&self, g: &PgGuard, key: &str) {
        if let Some(locks) = &g.scope {
            locks.borrow_mut().push(key.to_string());
        }
    }

    /// The SQL expression of [`PgStore::key_lock`] for the key in `column`, given
    /// [`PgStore::key_lock_prefix`] as the bytea parameter `param`: the lock id computed
    /// by the server, for locks taken in a query that picks its keys.
    pub(in crate::store::pg) fn key_lock_sql(column: &str, param: &str) -> String {
        format!(
            "('x' || encode(substring(sha256({param}::bytea || convert_to({column}, 'UTF8')) \
             FROM 1 FOR 8), 'hex'))::bit(64)::bigint"
        )
    }

    /// What [`PgStore::key_lock`] hashes before a key's name (its last part, empty).
    pub(super) fn key_lock_prefix(&self) -> Vec<u8> {
        lock_bytes(&["key", &self.schema, ""])
    }

    /// The advisory lock of one key (or `agent:ID`) of this project.
    pub(super) fn key_lock(&self, name: &str) -> i64 {
        lock_id(&["key", &self.schema, name])
    }

    /// See [`crate::store::Store::lock_agent`]: in a project scope, the lock of the
    /// agent's registry entry, which a beat holds while it changes the entry (and no
    /// project lock); its cached entry is forgotten, so that the next read is fresh.
    pub fn lock_agent(&self, g: &PgGuard, id: &str, wait: bool) -> Result<bool> {
        if g.scope.is_some() {
            // A key scope holds the entries it may change from its start.
            return Ok(true);
        }
        let lock = self.key_lock(&crate::store::agent_lock(id));
        self.conn.cache.borrow_mut().agents.remove(id);
        let sql = if wait {
            "SELECT true FROM (SELECT pg_advisory_xact_lock($1)) AS l"
        } else {
            "SELECT pg_try_advisory_xact_lock($1)"
        };
        let rows = self.rows(
            "lock an agent's registry entry",
            sql,
            &[(&lock, Type::INT8)],
        )?;
        Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0)))
    }

    /// May a scope change what `lock` guards? A whole-project scope may change anything;
    /// one of some locks only what they guard (and `paths_ok`: no record with paths,
    /// which other keys' checkouts are judged against). A refusal marks the scope, so that
    /// its commit refuses too, and the work runs again under the project's lock.
    pub(super) fn allow(&self, g: &PgGuard, lock: Option<&str>, paths_ok: bool) -> Result<()> {
        match &g.scope {
            None => Ok(()),
            Some(_) if g.escalated.get() => Err(Error::Escalate),
            Some(_) if paths_ok && lock.is_some_and(|l| g.holds(l)) => Ok(()),
            Some(_) => {
                g.escalated.set(true);
                Err(Error::Escalate)
            }
        }
    }

    fn begin_inner(
        &self,
        wait: Option<Duration>,
        scope: Option<&[String]>,
        claim: bool,
    ) -> Result<Option<PgGuard>> {
        if self.conn.in_tx.get() {
            return Err(Error::Store(
                "a PostgreSQL transaction was begun inside another (a bug in tasklock)".into(),
            ));
        }
        // The registry entries whose locks the scope holds are read in the same round trip,
        // after the locks (each statement sees what was committed before it began), and
        // kept for the transaction: no one changes an entry without its lock.
        let agents: Vec<&str> = scope
            .unwrap_or_default()
            .iter()
            .filter_map(|l| l.strip_prefix(AGENT_LOCK_PREFIX))
            .collect();
        let locks = |try_: &str| self.lock_sql(scope, &agents, claim, try_);
        // A connection not looked at yet reads the server's clock and the schema's
        // version right after this BEGIN, in its round trip.
        let looking = self.conn.fresh.replace(false);
        let look = match looking {
            true => format!("; {}", self.look_sql()),
            false => String::new(),
        };
        let mut client = self.conn.client.borrow_mut();
        // A wait can be stopped, as the lock directory's can: by a signal (for the
        // commands that catch them) or the command's own deadline. The lock query blocks,
        // so a thread watches for those and cancels it, found by its tag. Locks that are
        // free (nearly always) are taken first without waiting, and without that thread;
        // only when one is busy is that transaction let go and the wait begun.
        let before = std::time::SystemTime::now();
        let first = client.simple_query(&format!("BEGIN{look}{}", locks("try_")));
        if looking {
            let seen = match &first {
                Ok(rows) => self.looked(rows, before, std::time::SystemTime::now(), false),
                Err(_) => Ok(false),
            };
            if !matches!(seen, Ok(true)) {
                // No schema yet, an older or a newer one, or no answer: nothing of this
                // transaction is kept; looked at on its own (migrating, or saying why
                // not), then begun again.
                let _ = client.batch_execute("ROLLBACK");
                drop(client);
                self.conn.fresh.set(true);
                seen?;
                self.ensure_looked()?;
                return self.begin_inner(wait, scope, claim);
            }
        }
        let (sql, watch) = match wait {
            Some(t) => {
                if let Ok(rows) = &first
                    && all_granted(rows)
                {
                    drop(client);
                    return Ok(Some(self.entered(scope, &agents, rows)));
                }
                let tag = wait_tag();
                // Whatever the tries came to, their transaction is let go first.
                let sql = format!(
                    "/* {tag} */ ROLLBACK; BEGIN; SET LOCAL lock_timeout = {}{}",
                    t.as_millis().max(1),
                    locks("")
                );
                let target = self
                    .session
                    .clone()
                    .unwrap_or_else(|| self.conn.target.clone());
                (Some(sql), Some(WaitWatch::start(target, tag)))
            }
            None => (None, None),
        };
        let result = match sql {
            Some(sql) => client.simple_query(&sql),
            None => first,
        };
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
                return Err(self.begin_failed(&e, wait, closed));
            }
        };
        drop(client);
        let granted = all_granted(&rows);
        let guard = self.entered(scope, &agents, &rows);
        if !granted {
            // Dropping the guard rolls the empty transaction back.
            return Ok(None);
        }
        Ok(Some(guard))
    }

    /// Why a scope's `BEGIN` (with its locks) failed, `wait` the time it could wait.
    fn begin_failed(
        &self,
        e: &tokio_postgres::Error,
        wait: Option<Duration>,
        closed: bool,
    ) -> Error {
        if code(e) == Some(LOCK_NOT_AVAILABLE) {
            return Error::Store(format!(
                "gave up after {} waiting for the project's lock in PostgreSQL at {} (schema {}); another tasklock holds it in a transaction that does not end (see pg_stat_activity); `guard_timeout` in config.yaml sets how long commands wait",
                crate::duration::format(wait.unwrap_or_default()),
                self.conn.url,
                self.schema
            ));
        }
        self.conn.fail("begin a transaction", e, closed)
    }

    /// The SQL that takes a scope's locks, waited for (`try_` empty) or tried (`try_`:
    /// `f` for a lock that is busy), and reads the registry entries of `agents`.
    fn lock_sql(
        &self,
        scope: Option<&[String]>,
        agents: &[&str],
        claim: bool,
        try_: &str,
    ) -> String {
        let mut sql = String::new();
        match scope {
            None => sql.push_str(&format!(
                "; SELECT pg_{try_}advisory_xact_lock({})",
                self.lock_id
            )),
            Some(locks) => {
                let mut ids: Vec<i64> = locks.iter().map(|l| self.key_lock(l)).collect();
                ids.sort_unstable();
                ids.dedup();
                // A scope of registry entries alone takes no project lock: project
                // scopes take the lock of each entry they change (`lock_agent`).
                // A claim's keys come later: it holds the project shared from the start.
                let agents_only = !claim
                    && !locks.is_empty()
                    && locks.iter().all(|l| l.starts_with(AGENT_LOCK_PREFIX));
                if !agents_only {
                    sql.push_str(&format!(
                        "; SELECT pg_{try_}advisory_xact_lock_shared({})",
                        self.lock_id
                    ));
                }
                for id in ids {
                    sql.push_str(&format!("; SELECT pg_{try_}advisory_xact_lock({id})"));
                }
            }
        }
        for id in agents {
            sql.push_str(&format!(
                "; SELECT id, data::text FROM {}.agents WHERE id = {}",
                self.schema,
                literal(id)
            ));
        }
        // What the scope's work reads first, read after its locks (ahead.rs).
        match scope {
            Some(_) if claim => sql.push_str(&self.take_ahead_sql()),
            Some(locks) => {
                let keys: Vec<&str> = locks
                    .iter()
                    .map(String::as_str)
                    .filter(|l| !l.starts_with(AGENT_LOCK_PREFIX))
                    .collect();
                sql.push_str(&self.ahead_sql(&keys));
            }
            None => {}
        }
        sql
    }

    /// The guard of the transaction just begun, holding `scope`'s locks (or the project's),
    /// with the entries of `agents` its answer (`rows`) read.
    fn entered(
        &self,
        scope: Option<&[String]>,
        agents: &[&str],
        rows: &[SimpleQueryMessage],
    ) -> PgGuard {
        let guard = PgGuard {
            conn: self.conn.clone(),
            done: Cell::new(false),
            changed: Cell::new(false),
            scope: scope.map(|l| RefCell::new(l.to_vec())),
            escalated: Cell::new(false),
            audit: RefCell::new(Vec::new()),
        };
        self.conn.end_tx();
        self.conn.in_tx.set(true);
        let mut cache = self.conn.cache.borrow_mut();
        for id in agents {
            cache.agents.insert(id.to_string(), None);
        }
        for m in rows {
            if let SimpleQueryMessage::Row(r) = m
                && r.len() == 2
                && let (Some(id), Some(data)) = (r.get(0), r.get(1))
            {
                // One that does not decode counts as none, as `read_agent` reads it.
                let entry = serde_json::from_str::<AgentEntry>(data)
                    .ok()
                    .filter(|e| e.id == id);
                cache.agents.insert(id.to_string(), entry);
            }
        }
        drop(cache);
        self.keep_ahead(&guard, rows);
        guard
    }

    /// The audit table is bounded as the file store's log is: about `audit_keep + 1` times
    /// `audit_max_size` bytes of events are kept, the oldest dropped first. Looked at
    /// when the ids cross a multiple of [`AUDIT_TRIM_EVERY`], so it may pass the bound by
    /// that many events in between. The look reads the newest event's running total and,
    /// through the index on `total`, the newest event that falls outside the bound (two
    /// index lookups, whatever the table holds); only when there is one does a second
    /// statement drop it and everything older, with the cut as a literal, so that the
    /// server plans it for the few rows below it.
    fn trim_audit(&self, client: &mut Client) -> std::result::Result<(), tokio_postgres::Error> {
        let cfg = self.config().unwrap_or_default();
        let budget = cfg
            .audit_max_size
            .saturating_mul(cfg.audit_keep as u64 + 1)
            .min(i64::MAX as u64);
        self.trim_audit_with(client, budget)
    }

    /// [`PgStore::trim_audit`] to `budget` bytes.
    pub(super) fn trim_audit_with(
        &self,
        client: &mut Client,
        budget: u64,
    ) -> std::result::Result<(), tokio_postgres::Error> {
        let rows = client.simple_query(&self.audit_cut_sql(budget))?;
        let cut = rows.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).and_then(|t| t.parse::<i64>().ok()),
            _ => None,
        });
        if let Some(cut) = cut {
            client.batch_execute(&self.audit_drop_sql(cut))?;
        }
        Ok(())
    }

    /// The running total of the newest event that `budget` bytes of newer events leave
    /// out, if any (see [`PgStore::trim_audit`]).
    pub(super) fn audit_cut_sql(&self, budget: u64) -> String {
        format!(
            "SELECT a.total FROM {s}.audit a WHERE a.total <= \
               (SELECT n.total FROM {s}.audit n ORDER BY n.id DESC LIMIT 1) - {budget} \
             ORDER BY a.total DESC LIMIT 1",
            s = self.schema,
        )
    }

    /// Drop the events up to the one whose running total is `cut`.
    pub(super) fn audit_drop_sql(&self, cut: i64) -> String {
        format!("DELETE FROM {}.audit WHERE total <= {cut}", self.schema)
    }

    /// `COMMIT`, with the notifications of what changed. An error if any statement of
    /// the transaction failed (PostgreSQL would turn the COMMIT into a silent ROLLBACK):
    /// then nothing of it was kept.
    pub fn commit(&self, g: PgGuard) -> Result<()> {
        g.done.set(true);
        let failed = self.conn.failed.replace(None);
        let put_off = self.conn.take_put_off();
        self.conn.end_tx();
        let mut client = self.conn.client.borrow_mut();
        if g.escalated.get() {
            let _ = client.batch_execute("ROLLBACK");
            return Err(Error::Escalate);
        }
        if let Some(first) = failed {
            let _ = client.batch_execute("ROLLBACK");
            return Err(Error::Store(format!(
                "PostgreSQL at {}: a step of this command failed ({first}), so none of its changes were kept",
                self.conn.url
            )));
        }
        // A statement before COMMIT in the same round trip: it fails if the transaction
        // was aborted by anything not seen above, and COMMIT then never runs. The writes
        // put off come first.
        let mut sql = put_off;
        sql.push_str("SELECT 1; ");
        let events = g.audit.take();
        if !events.is_empty() {
            // Scopes of some keys (or of registry entries alone, which take no project
            // lock) commit side by side with each other and with a whole-project one:
            // their events are numbered one commit at a time, so that a reader following
            // the log (ids ascending) never sees a later id before an earlier one commits,
            // and each event's running total follows the one committed before it.
            sql.push_str(&format!(
                "SELECT pg_advisory_xact_lock({}); ",
                lock_id(&["audit", &self.schema])
            ));
        }
        if !events.is_empty() {
            // One statement for every event, in order (ids follow it), as a dollar-quoted
            // literal whose tag the JSON does not contain.
            let json = literal(&format!("[{}]", events.join(",")));
            sql.push_str(&format!(
                "INSERT INTO {s}.audit (ts, event, key, agent, data, total) \
                 SELECT (e->>'ts')::timestamptz, e->>'event', e->>'key', e->>'agent', e, \
                   coalesce((SELECT p.total FROM {s}.audit p ORDER BY p.id DESC LIMIT 1), 0) \
                   + sum(octet_length(e::text)) OVER (ORDER BY n) \
                 FROM jsonb_array_elements({json}::jsonb) WITH ORDINALITY AS t(e, n) \
                 ORDER BY n RETURNING id AS {AUDIT_ID}; SELECT pg_notify('{}', ''); ",
                self.channel("audit"),
                s = self.schema,
            ));
        }
        if g.changed.get() {
            sql.push_str(&format!(
                "SELECT pg_notify('{}', ''); ",
                self.channel("changes")
            ));
        }
        sql.push_str("COMMIT");
        match client.simple_query(&sql) {
            Ok(answers) => {
                // The ids of the events: when they cross a multiple of AUDIT_TRIM_EVERY, a
                // look at the table's size, in statements of their own (planned only then).
                let newest = answers
                    .iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) if r.columns()[0].name() == AUDIT_ID => {
                            r.get(0).and_then(|id| id.parse::<i64>().ok())
                        }
                        _ => None,
                    })
                    .max();
                let added = events.len().min(AUDIT_TRIM_EVERY as usize) as i64;
                if newest.is_some_and(|id| id % AUDIT_TRIM_EVERY < added)
                    && let Err(e) = self.trim_audit(&mut client)
                {
                    crate::warnings::warn(format!(
                        "the audit table in PostgreSQL at {} was not trimmed to its bound ({}); the next look will",
                        self.conn.url,
                        describe(&e)
                    ));
                }
                Ok(())
            }
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

    pub fn next_token(&self, _g: &PgGuard) -> Result<u64> {
        let rows = self.rows("take a fencing token", "SELECT nextval('{s}.tokens')", &[])?;
        let t: i64 = rows
            .first()
            .map(|r| r.get(0))
            .ok_or_else(|| Error::Store("nextval returned nothing".into()))?;
        Ok(t as u64)
    }
}

/// A kept connection idle for this long is looked at before it is used again.
const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// How many audit events between two looks at the audit table's size.
pub const AUDIT_TRIM_EVERY: i64 = 64;

/// The column name of the ids of the events a commit adds.
const AUDIT_ID: &str = "tasklock_audit_id";

/// The first column's name of the row that reads the server's clock and the schema's
/// version ([`PgStore::look_sql`]).
const LOOK: &str = "tasklock_look";

/// The store's part of a [`Guard`]: a [`PgGuard`].
fn pg(g: &Guard) -> &PgGuard {
    g.get::<PgGuard>()
}

#[cfg(test)]
mod put_off_tests {
    use super::names_table;

    #[test]
    fn a_statement_names_a_table_only_as_schema_dot_table() {
        assert!(names_table(
            "SELECT 1 FROM s.records WHERE key = $1",
            "records"
        ));
        assert!(names_table("INSERT INTO s.agents(id) VALUES (1)", "agents"));
        assert!(names_table("DELETE FROM s.backlog", "backlog"));
        assert!(!names_table("SELECT 1 FROM s.slot_records", "records"));
        assert!(!names_table("SELECT 1 FROM s.records_old", "records"));
        assert!(!names_table("SELECT agents FROM s.queues", "agents"));
        assert!(names_table(
            "SELECT 1 FROM s.slot_records, s.records r",
            "records"
        ));
    }
}

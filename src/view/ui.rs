//! `tasklock ui`: the fleet, live, in a browser page served by tasklock itself.
//!
//! One watcher of the store (as `tasklock top` has) keeps one snapshot of the fleet and
//! tells each open page's event stream when it changes; the stream sends its page only
//! what the page shows (the counts, and the rows of each table the page's filter, sort
//! and page select, cut from the snapshot by the server), so a fleet of thousands never
//! crosses to the page whole. The page, its script and its style are inside the binary;
//! server.rs serves them (hyper). It is a door into the project, so: it listens on
//! loopback unless told otherwise; every request for the store needs the random token
//! printed in the URL's fragment (kept by the page in its tab's sessionStorage and sent
//! to this server alone: no cookie, which a browser sends to every port of the host); on
//! loopback the Host header must name this server (no DNS rebinding); no response allows
//! another origin; a change (force-release, freeze) is a POST from the page itself (its
//! Origin, a JSON body and the token in a header), made only where the person who
//! started it could make it from the command line, with the key after `--`; and the
//! Content Security Policy allows no inline script. Keys, reasons, notes and names are
//! other agents' text: the page sets them as text, the timeline escapes them.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::server::{self, Admit, Request, Response};
use super::timeline;
use super::{EVENTS_KEPT, REFRESH, context, recent_events, store_of};
use crate::cli::Global;
use crate::clock::{self, Time};
use crate::engine::fleet::{self, Fleet, FleetAgent, FleetCheckout};
use crate::error::{Error, Result};
use crate::store::AuditEvent;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// An unchanged fleet is sent to the pages again this often, for the leases' countdown.
const RESEND: Duration = Duration::from_secs(5);

#[derive(clap::Parser, Debug)]
#[command(
    name = "tasklock ui",
    about = "The fleet, live, in the browser: a page served by tasklock on loopback"
)]
pub struct Args {
    #[command(flatten)]
    pub global: Global,
    /// The port to listen on (0: any free one)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The address to listen on: loopback unless told otherwise (0.0.0.0: every address;
    /// the token is still needed, under any host name)
    #[arg(long, default_value = "127.0.0.1")]
    pub listen: IpAddr,
    /// Look only: no force-release or freeze from the page
    #[arg(long)]
    pub read_only: bool,
    /// Do not try to open a browser
    #[arg(long)]
    pub no_open: bool,
    /// Write the timeline as an SVG file and exit (no server)
    #[arg(long, value_name = "FILE", conflicts_with = "html")]
    pub svg: Option<std::path::PathBuf>,
    /// Write the timeline as one HTML file (the picture and where the time went; no
    /// script, nothing fetched) and exit (no server)
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
    /// The timeline's window for --svg and --html (without it: from the first thing
    /// shown, at most a day back, to now)
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
    pub since: Option<Duration>,
    /// The timeline's rows for --svg and --html: one per key, or one per agent
    #[arg(long, value_enum, default_value = "key")]
    pub by: timeline::By,
}

pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    super::run(args, "ui", |a: Args| match (&a.svg, &a.html) {
        (Some(path), _) => write_picture(&a, path, false),
        (_, Some(path)) => write_picture(&a, path, true),
        _ => serve(&a),
    })
}

/// `--since`: the last stretch of that length; none, the window fitted to the data.
fn window(since: Option<Duration>) -> timeline::Window {
    match since {
        Some(d) => timeline::Window::Last(crate::duration::to_chrono(d).num_seconds().max(1)),
        None => timeline::Window::Fit,
    }
}

/// `--svg FILE` or `--html FILE`: the timeline written, no server.
fn write_picture(a: &Args, path: &std::path::Path, html: bool) -> Result<()> {
    let ctx = context(&a.global)?;
    let store = store_of(&ctx)?;
    let fleet = fleet::snapshot(&ctx, &*store)?;
    let events: Vec<AuditEvent> = recent_events(&*store)?.into();
    let t = timeline::build_window(&events, Some(&fleet), window(a.since), ctx.now(), a.by);
    let text = if html {
        timeline::html(&t, &fleet.store)
    } else {
        timeline::svg(&t)
    };
    std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    println!("{}", path.display());
    Ok(())
}

/// What every connection shares.
struct Shared {
    token: String,
    port: u16,
    listen: IpAddr,
    global: Global,
    can_act: std::result::Result<(), String>,
    /// What the watcher read last: one snapshot of the fleet, never a serialized copy of
    /// it. Each answer serializes only the rows it sends.
    state: Mutex<Option<Arc<Snapshot>>>,
    /// The version of the last snapshot: the watcher tells the open event streams that a
    /// new one is there, and each draws its own page's view of it.
    versions: tokio::sync::watch::Sender<u64>,
    /// The last timeline drawn for another window or by agent, with the snapshot version,
    /// window and rows it was drawn for: open pages ask every two seconds.
    drawn: Mutex<Option<Drawn>>,
    /// What `/metrics` counts: the events the watcher followed, the durations they show.
    metrics: Mutex<super::metrics::Metrics>,
}

/// A timeline drawn: for which snapshot version, window and rows, and the SVG.
type Drawn = ((u64, timeline::Window, timeline::By), Arc<String>);

/// The fleet as the watcher read it last, with the events kept and what the page shows
/// beside the tables.
struct Snapshot {
    /// Counts the watcher's reads that changed something: a page asks again with it.
    version: u64,
    now: Time,
    /// The last fleet read (kept when a later read failed).
    fleet: Option<Arc<Fleet>>,
    error: Option<String>,
    /// The last `EVENTS_KEPT` audit events, oldest first.
    events: Arc<VecDeque<AuditEvent>>,
    counts: Counts,
    /// The timeline by key fitted to what happened, as the page first shows it.
    timeline: timeline::Timeline,
    /// Where the time went in that timeline's window.
    time: Value,
}

#[derive(Default, serde::Serialize)]
struct Counts {
    checkouts: usize,
    agents: usize,
    dead: usize,
    /// Places in queues.
    waiting: usize,
    waits: usize,
    cycles: usize,
    freezes: usize,
    corrupt: usize,
}

impl Counts {
    fn of(f: &Fleet) -> Counts {
        Counts {
            checkouts: f.checkouts.len(),
            agents: f.agents.len(),
            dead: f
                .agents
                .iter()
                .filter(|a| a.row.state == crate::liveness::State::Dead)
                .count(),
            waiting: f.queues.values().map(|q| q.length).sum(),
            waits: f.waits.len(),
            cycles: f.cycles.len(),
            freezes: f.freezes.len(),
            corrupt: f.corrupt,
        }
    }
}

impl Shared {
    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The page's token: `TASKLOCK_UI_TOKEN` when set (so that a Prometheus scrape, or a
/// bookmark, keeps working across restarts), else a random one.
fn token() -> Result<String> {
    match std::env::var("TASKLOCK_UI_TOKEN") {
        Ok(t) if !t.is_empty() => {
            let fits = t.len() >= 32
                && t.len() <= 256
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if fits {
                Ok(t)
            } else {
                Err(Error::Usage(
                    "TASKLOCK_UI_TOKEN: 32 to 256 letters, digits, `-` or `_` (for example `openssl rand -hex 24`)".into(),
                ))
            }
        }
        _ => random_token(),
    }
}

fn random_token() -> Result<String> {
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io("/dev/urandom", e))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn serve(a: &Args) -> Result<()> {
    // glibc gives each thread that allocates an arena of its own and keeps what it freed;
    // each of the server's threads would keep a fleet's worth.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let ctx = context(&a.global)?;
    let store = store_of(&ctx)?;
    let events = recent_events(&*store)?;
    drop(store);
    let listener = TcpListener::bind(SocketAddr::new(a.listen, a.port))
        .map_err(|e| Error::Usage(format!("cannot listen on {}:{}: {e}", a.listen, a.port)))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::Store(format!("cannot read the listening address: {e}")))?
        .port();
    let server = server::Server::new(listener)?;
    let shared = Arc::new(Shared {
        token: token()?,
        port,
        listen: a.listen,
        global: a.global.clone(),
        can_act: super::may_act(a.read_only, &a.global, &ctx),
        state: Mutex::new(None),
        versions: tokio::sync::watch::Sender::new(0),
        drawn: Mutex::new(None),
        metrics: Mutex::new(Default::default()),
    });
    let host = match a.listen {
        IpAddr::V6(ip) if !ip.is_unspecified() => format!("[{ip}]"),
        IpAddr::V4(ip) if !ip.is_unspecified() => ip.to_string(),
        _ => "127.0.0.1".into(),
    };
    // The token is in the fragment, which the browser never sends: the page keeps it in
    // its tab's sessionStorage (this origin's only, port included) and sends it to this
    // server alone.
    let url = format!("http://{host}:{port}/#token={}", shared.token);
    println!("tasklock ui: {url}");
    if !a.listen.is_loopback() {
        eprintln!(
            "tasklock ui: listening on {} beyond this machine, under any name it is reached by (replace 127.0.0.1 in the URL); anyone who can reach it still needs the token",
            a.listen
        );
    }
    let _ = std::io::stdout().flush();
    if !a.no_open {
        open_browser(&url);
    }
    {
        let shared = shared.clone();
        std::thread::spawn(move || watch(shared, events));
    }
    server.serve(shared)
}

fn open_browser(url: &str) {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let _ = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// A fingerprint of the fleet apart from its time: an unchanged fleet is not sent again
/// every second. Hashed as it serializes, so no copy of it is made.
fn fingerprint(f: &Fleet) -> u64 {
    use std::hash::Hasher;
    struct HashWriter(std::collections::hash_map::DefaultHasher);
    impl Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(Default::default());
    let _ = serde_json::to_writer(
        &mut w,
        &(
            &f.store,
            &f.checkouts,
            &f.agents,
            &f.queues,
            &f.waits,
            &f.cycles,
            &f.freezes,
            f.corrupt,
        ),
    );
    w.0.finish()
}

/// The one watcher of the store, however many pages are open.
fn watch(shared: Arc<Shared>, events: VecDeque<AuditEvent>) {
    let run = || -> Result<()> {
        let ctx = context(&shared.global)?;
        let store = store_of(&ctx)?;
        let mut follow = store.follow_audit()?;
        let _ = follow.next(Duration::ZERO)?;
        let mut changes = store.changes()?;
        let mut events = Arc::new(events);
        let mut version = 0u64;
        // The fleet the pages were sent last, apart from the time: an unchanged fleet is
        // sent again only every RESEND (for the leases' countdown), not every second.
        let mut sent: Option<(u64, std::time::Instant)> = None;
        loop {
            ctx.set_now(clock::now()?);
            // The events first: the fleet read after them has every change they tell of
            // that is in place (the file store appends an event just before its change
            // is: the next read, which that change wakes, shows it).
            let new = follow.next(Duration::ZERO).unwrap_or_default();
            let read = fleet::snapshot(&ctx, &*store);
            let print = read.as_ref().ok().map(fingerprint);
            if let (Some(p), Some((last, at))) = (print, &sent)
                && new.is_empty()
                && p == *last
                && at.elapsed() < RESEND
            {
                drop(read);
                changes.wait(REFRESH);
                continue;
            }
            sent = print.map(|p| (p, std::time::Instant::now()));
            {
                let mut m = shared.metrics.lock().unwrap_or_else(|p| p.into_inner());
                m.follow(&new);
                if let Ok(f) = &read {
                    m.read(f);
                }
            }
            if !new.is_empty() {
                let kept = Arc::make_mut(&mut events);
                for e in new {
                    if kept.len() == EVENTS_KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(e);
                }
            }
            let (fleet, error) = match read {
                Ok(f) => (Some(Arc::new(f)), None),
                Err(e) => (
                    shared.snapshot().and_then(|s| s.fleet.clone()),
                    Some(e.to_string()),
                ),
            };
            version += 1;
            let hour: Vec<AuditEvent> = events.iter().cloned().collect();
            let t = timeline::build_window(
                &hour,
                fleet.as_deref(),
                timeline::Window::Fit,
                ctx.now(),
                timeline::By::Key,
            );
            drop(hour);
            let snap = Snapshot {
                version,
                now: ctx.now(),
                counts: fleet.as_deref().map(Counts::of).unwrap_or_default(),
                time: time_spent(&t),
                timeline: t,
                fleet,
                error,
                events: events.clone(),
            };
            *shared.state.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(snap));
            shared.versions.send_replace(version);
            changes.wait(REFRESH);
        }
    };
    if let Err(e) = run() {
        let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let last = st.take();
        *st = Some(Arc::new(Snapshot {
            version: last.as_ref().map_or(0, |s| s.version) + 1,
            now: clock::now().unwrap_or_else(|_| chrono::Utc::now()),
            fleet: last.as_ref().and_then(|s| s.fleet.clone()),
            error: Some(e.to_string()),
            events: last.as_ref().map(|s| s.events.clone()).unwrap_or_default(),
            counts: last
                .as_ref()
                .and_then(|s| s.fleet.as_deref())
                .map(Counts::of)
                .unwrap_or_default(),
            time: last.as_ref().map(|s| s.time.clone()).unwrap_or(Value::Null),
            timeline: match last {
                Some(s) => s.timeline.clone(),
                None => timeline::build(&[], None, Time::default(), Time::default()),
            },
        }));
    }
}

/// Agents shown in "where the time went": the busiest.
const TIME_AGENTS: usize = 20;

/// Where the time went in the timeline's window: the ten most contended keys, the busiest
/// agents (the most time first), and the window.
fn time_spent(t: &timeline::Timeline) -> Value {
    let mut contended: Vec<&timeline::KeyRow> = t.rows.iter().collect();
    contended.sort_by(|a, b| {
        (b.contention, b.waited_secs)
            .cmp(&(a.contention, a.waited_secs))
            .then(a.key.cmp(&b.key))
    });
    contended.truncate(10);
    // The timeline sorts them, the most time first.
    let agents = &t.agent_time[..t.agent_time.len().min(TIME_AGENTS)];
    json!({
        "start": t.start,
        "end": t.end,
        "keys": contended.iter().map(|r| json!({
            "key": r.key, "held_secs": r.held_secs, "waited_secs": r.waited_secs,
            "contention": r.contention,
        })).collect::<Vec<_>>(),
        "agents": agents.iter().map(|a| json!({
            "id": a.id, "held_secs": a.held_secs, "waited_secs": a.waited_secs,
            "colour": t.colour(&a.id),
        })).collect::<Vec<_>>(),
    })
}

/// Rows a table sends when the page asks for no other number, and the most it may ask.
const PAGE_ROWS: usize = 100;
const MAX_ROWS: usize = 1000;

/// The tables a page shows, each filtered, sorted and cut to a page by the server.
const TABLES: [&str; 4] = ["checkouts", "agents", "waits", "events"];

fn sorts_of(table: &str) -> &'static [&'static str] {
    match table {
        "checkouts" => &[
            "key", "holder", "token", "held", "lease", "slot", "paths", "queue", "worktree",
            "reason",
        ],
        "agents" => &["state", "agent", "beat", "holds", "waits", "status"],
        _ => &[],
    }
}

/// What one page shows of one table.
#[derive(Clone, Debug, PartialEq)]
struct Cut {
    /// A column, `-` before it for the other way round; empty: the table's own order.
    sort: String,
    offset: usize,
    limit: usize,
}

/// What a page shows: one filter for every table, and each table's sort and page.
#[derive(Clone, Debug)]
struct View {
    /// Lower case; empty: everything.
    filter: String,
    cuts: [Cut; 4],
}

impl View {
    /// From the query: `filter`, and `TABLE.sort`, `TABLE.offset`, `TABLE.limit`.
    fn parse(req: &Request) -> std::result::Result<View, String> {
        let mut cuts = TABLES.map(|_| Cut {
            sort: String::new(),
            offset: 0,
            limit: PAGE_ROWS,
        });
        for (i, t) in TABLES.iter().enumerate() {
            cuts[i] = Cut::parse(req, t, &format!("{t}."))?;
        }
        Ok(View {
            filter: req.param("filter").unwrap_or_default().to_lowercase(),
            cuts,
        })
    }
}

impl Cut {
    fn parse(req: &Request, table: &str, prefix: &str) -> std::result::Result<Cut, String> {
        let number = |name: &str, default: usize| -> std::result::Result<usize, String> {
            match req.param(&format!("{prefix}{name}")) {
                None => Ok(default),
                Some(v) => v
                    .parse::<usize>()
                    .map_err(|_| format!("{prefix}{name}: not a number: {v:?}")),
            }
        };
        let limit = number("limit", PAGE_ROWS)?;
        if limit > MAX_ROWS {
            return Err(format!(
                "{prefix}limit: at most {MAX_ROWS} rows at a time (offset pages on)"
            ));
        }
        let sort = req.param(&format!("{prefix}sort")).unwrap_or_default();
        let column = sort.strip_prefix('-').unwrap_or(&sort);
        if !sort.is_empty() && !sorts_of(table).contains(&column) {
            let known = sorts_of(table);
            return Err(if known.is_empty() {
                format!("{prefix}sort: {table} keep their own order")
            } else {
                format!(
                    "{prefix}sort: {table} sort by {} (`-` before it for the other way)",
                    known.join(", ")
                )
            });
        }
        Ok(Cut {
            sort,
            offset: number("offset", 0)?,
            limit,
        })
    }
}

fn has(filter: &str, field: &str) -> bool {
    filter.is_empty() || field.to_lowercase().contains(filter)
}

/// One table of a page: how many rows there are, how many the filter kept, and the rows
/// of the page asked for.
#[derive(serde::Serialize)]
struct Part<'a, T: serde::Serialize> {
    total: usize,
    matched: usize,
    offset: usize,
    limit: usize,
    sort: &'a str,
    rows: Vec<T>,
}

/// A row with its agent's colour (the timeline's).
#[derive(serde::Serialize)]
struct Coloured<'a, T: serde::Serialize> {
    #[serde(flatten)]
    row: &'a T,
    colour: String,
}

/// An event as the page shows it: the event, and its sentence ([`crate::render::events::sentence`],
/// the words `top` and the webhooks use).
#[derive(serde::Serialize)]
struct Told<'a> {
    #[serde(flatten)]
    event: &'a AuditEvent,
    text: String,
    /// The kind a webhook would be told it as ([`crate::engine::notify::kind_of`]): the
    /// page tells the desktop of these.
    #[serde(skip_serializing_if = "Option::is_none")]
    notify: Option<crate::config::NotifyKind>,
}

impl<'a> Told<'a> {
    fn of(event: &'a AuditEvent) -> Told<'a> {
        Told {
            event,
            text: crate::render::events::sentence(event),
            notify: crate::engine::notify::kind_of(event),
        }
    }
}

fn cut<'a, T, R: serde::Serialize>(
    total: usize,
    mut rows: Vec<&'a T>,
    c: &'a Cut,
    order: impl Fn(&str, &T, &T) -> std::cmp::Ordering,
    tie: impl Fn(&T, &T) -> std::cmp::Ordering,
    out: impl Fn(&'a T) -> R,
) -> Part<'a, R> {
    if !c.sort.is_empty() {
        let (column, back) = match c.sort.strip_prefix('-') {
            Some(col) => (col, true),
            None => (c.sort.as_str(), false),
        };
        // The other way round is the column's; ties keep the table's own order.
        rows.sort_by(|a, b| {
            let o = order(column, a, b);
            if back { o.reverse() } else { o }.then_with(|| tie(a, b))
        });
    }
    Part {
        total,
        matched: rows.len(),
        offset: c.offset,
        limit: c.limit,
        sort: &c.sort,
        rows: rows
            .into_iter()
            .skip(c.offset)
            .take(c.limit)
            .map(out)
            .collect(),
    }
}

fn checkout_order(column: &str, a: &FleetCheckout, b: &FleetCheckout) -> std::cmp::Ordering {
    let (x, y) = (&a.view, &b.view);
    match column {
        "holder" => x.agent.id.cmp(&y.agent.id),
        "token" => x.token.cmp(&y.token),
        // Shortest held first.
        "held" => y.acquired_at.cmp(&x.acquired_at),
        // Least left first.
        "lease" => x.expires_at.cmp(&y.expires_at),
        "queue" => a.queued.cmp(&b.queued),
        "slot" => x.slot.cmp(&y.slot),
        "paths" => x.paths.cmp(&y.paths),
        // None last: a checkout with a worktree before one without.
        "worktree" => match (&x.worktree, &y.worktree) {
            (Some(p), Some(q)) => p.path.cmp(&q.path),
            (p, q) => q.is_some().cmp(&p.is_some()),
        },
        // None last: a checkout with a reason before one without.
        "reason" => match (&x.reason, &y.reason) {
            (Some(p), Some(q)) => p.cmp(q),
            (p, q) => q.is_some().cmp(&p.is_some()),
        },
        _ => checkout_tie(a, b),
    }
}

fn checkout_tie(a: &FleetCheckout, b: &FleetCheckout) -> std::cmp::Ordering {
    (&a.view.key, a.view.slot).cmp(&(&b.view.key, b.view.slot))
}

fn agent_order(column: &str, a: &FleetAgent, b: &FleetAgent) -> std::cmp::Ordering {
    let rank = |s: crate::liveness::State| s as u8;
    let (x, y) = (&a.row, &b.row);
    match column {
        "state" => rank(x.state).cmp(&rank(y.state)),
        // The latest beat first; never last.
        "beat" => match (x.last_heartbeat, y.last_heartbeat) {
            (Some(p), Some(q)) => q.cmp(&p),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        },
        "holds" => x.checkouts.len().cmp(&y.checkouts.len()),
        "waits" => a.waiting_for().len().cmp(&b.waiting_for().len()),
        "status" => match (&x.status, &y.status) {
            (Some(p), Some(q)) => p.cmp(q),
            (p, q) => q.is_some().cmp(&p.is_some()),
        },
        _ => x.id.cmp(&y.id),
    }
}

fn agent_tie(a: &FleetAgent, b: &FleetAgent) -> std::cmp::Ordering {
    let rank = |s: crate::liveness::State| s as u8;
    rank(a.row.state)
        .cmp(&rank(b.row.state))
        .then_with(|| a.row.id.cmp(&b.row.id))
}

/// One table of the snapshot as the view asks for it, as JSON.
fn table(snap: &Snapshot, view: &View, which: usize) -> Value {
    let f = &view.filter;
    let c = &view.cuts[which];
    let (checkouts, agents, waits) = match snap.fleet.as_deref() {
        Some(fl) => (&fl.checkouts[..], &fl.agents[..], &fl.waits[..]),
        None => (&[][..], &[][..], &[][..]),
    };
    let v = match TABLES[which] {
        "checkouts" => serde_json::to_value(cut(
            checkouts.len(),
            checkouts
                .iter()
                .filter(|c| {
                    has(f, &c.view.key)
                        || has(f, &c.view.agent.id)
                        || c.view.agent.name.as_deref().is_some_and(|n| has(f, n))
                })
                .collect(),
            c,
            checkout_order,
            checkout_tie,
            |r| Coloured {
                row: r,
                colour: snap.timeline.colour(&r.view.agent.id),
            },
        )),
        "agents" => serde_json::to_value(cut(
            agents.len(),
            agents
                .iter()
                .filter(|a| {
                    has(f, &a.row.id)
                        || a.row.name.as_deref().is_some_and(|n| has(f, n))
                        || a.row.checkouts.iter().any(|k| has(f, k))
                })
                .collect(),
            c,
            agent_order,
            agent_tie,
            |r| Coloured {
                row: r,
                colour: snap.timeline.colour(&r.row.id),
            },
        )),
        "waits" => serde_json::to_value(cut(
            waits.len(),
            waits
                .iter()
                .filter(|w| has(f, &w.waiter) || has(f, &w.key) || has(f, &w.blocker))
                .collect(),
            c,
            |_, _, _| std::cmp::Ordering::Equal,
            |_, _| std::cmp::Ordering::Equal,
            |w| w,
        )),
        _ => serde_json::to_value(cut(
            snap.events.len(),
            snap.events
                .iter()
                .rev()
                .filter(|e| has(f, &e.key) || has(f, &e.agent) || has(f, &e.event))
                .collect(),
            c,
            |_, _, _| std::cmp::Ordering::Equal,
            |_, _| std::cmp::Ordering::Equal,
            Told::of,
        )),
    };
    v.unwrap_or_default()
}

/// What a page is sent: the counts, each table as the page's view cuts it, the
/// deadlocks and freezes, where the time went, and whether it may act.
fn document(snap: &Snapshot, view: &View, shared: &Shared) -> String {
    let fl = snap.fleet.as_deref();
    let mut doc = json!({
        "version": snap.version,
        "now": snap.now,
        "store": fl.map(|f| f.store.as_str()),
        "error": snap.error,
        "filter": view.filter,
        "counts": snap.counts,
        "cycles": fl.map(|f| f.cycles.as_slice()).unwrap_or_default(),
        "freezes": fl.map(|f| f.freezes.as_slice()).unwrap_or_default(),
        "time": snap.time,
        "can_act": shared.can_act.as_ref().err(),
    });
    for (i, t) in TABLES.iter().enumerate() {
        doc[*t] = table(snap, view, i);
    }
    doc.to_string()
}

/// Headers every response carries: nothing cached, nothing framed, nothing sniffed,
/// and only this page's own script and style.
const SECURITY: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-resource-policy", "same-origin"),
    ("cache-control", "no-store"),
];

/// Equal, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Shared {
    /// On loopback, the Host header names this server (127.0.0.1, localhost or [::1] and
    /// its port): anything else is a page of another site reached through DNS
    /// rebinding. Listening beyond loopback, the server is reached by whatever name the
    /// network gives it: any Host, and the token guards it as everywhere.
    fn host_ok(&self, req: &Request) -> bool {
        if !self.listen.is_loopback() {
            return true;
        }
        let Some(host) = req.header("host") else {
            return false;
        };
        let port = self.port;
        [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            match self.listen {
                IpAddr::V6(ip) => format!("[{ip}]:{port}"),
                IpAddr::V4(ip) => format!("{ip}:{port}"),
            },
        ]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(host))
    }

    /// The token, in the header the page's script sends, or (for what a script cannot
    /// give headers: the event stream, the picture) in the query.
    fn authorised(&self, req: &Request) -> bool {
        req.header("x-tasklock-token")
            .or_else(|| {
                req.header("authorization")
                    .and_then(|a| a.strip_prefix("Bearer "))
            })
            .map(str::to_string)
            .or_else(|| req.param("token"))
            .is_some_and(|t| same(&t, &self.token))
    }
}

/// The page's own files: nothing of the store, so no token (the page has it in its URL's
/// fragment, which the browser never sends).
fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" => Some(("text/html; charset=utf-8", INDEX)),
        "/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => None,
    }
}

impl server::App for Shared {
    fn admit(&self, req: &Request) -> Admit {
        if !self.host_ok(req) {
            return Admit::Refuse(Response::text(
                403,
                "unknown Host: this server answers only to its own address",
            ));
        }
        if req.method == "GET" && asset(&req.path).is_some() {
            return Admit::Public;
        }
        if !self.authorised(req) {
            return Admit::Refuse(Response::text(
                403,
                "this page needs its token: open the URL `tasklock ui` printed (http://…/#token=…)",
            ));
        }
        Admit::Trusted
    }

    fn answer(self: Arc<Self>, req: Request) -> Response {
        if req.method == "GET"
            && let Some((ctype, body)) = asset(&req.path)
        {
            return Response::new(200, ctype, body);
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/api/fleet") => fleet_part(&self, &req),
            ("GET", "/timeline.svg") => picture(&self, &req),
            ("GET", "/timeline.html") => picture_page(&self, &req),
            ("GET", "/events") => match View::parse(&req) {
                Ok(view) => stream(self, view),
                Err(e) => Response::text(400, &e),
            },
            ("GET", "/api/key") => key_part(&self, &req),
            ("GET", "/metrics") => metrics(&self),
            ("POST", "/api/release") | ("POST", "/api/freeze") => change(&self, &req),
            ("GET" | "POST", _) => Response::text(404, "no such page"),
            _ => Response::text(405, "only GET, and POST from the page"),
        }
    }

    fn decorate(&self, headers: &mut hyper::HeaderMap) {
        for (k, v) in SECURITY {
            headers.insert(k, hyper::header::HeaderValue::from_static(v));
        }
    }
}

/// `/metrics`: Prometheus' text format (see `view::metrics`).
fn metrics(shared: &Shared) -> Response {
    let snap = shared.snapshot();
    let fleet = snap.as_ref().and_then(|s| s.fleet.as_deref());
    let text = shared
        .metrics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .render(fleet);
    Response::new(200, "text/plain; version=0.0.4; charset=utf-8", text)
}

/// `/api/fleet`: the page's view of the snapshot, or one table of it.
fn fleet_part(shared: &Shared, req: &Request) -> Response {
    let Some(snap) = shared.snapshot() else {
        return Response::text(503, "reading the store…");
    };
    let body = match req.param("table") {
        None => match View::parse(req) {
            Ok(view) => document(&snap, &view, shared),
            Err(e) => return Response::text(400, &e),
        },
        Some(t) => {
            let Some(which) = TABLES.iter().position(|x| *x == t) else {
                return Response::text(400, &format!("table: one of {}", TABLES.join(", ")));
            };
            let cut = match Cut::parse(req, &t, "") {
                Ok(c) => c,
                Err(e) => return Response::text(400, &e),
            };
            let mut view = match View::parse(req) {
                Ok(v) => v,
                Err(e) => return Response::text(400, &e),
            };
            view.cuts[which] = cut;
            let mut part = table(&snap, &view, which);
            part["version"] = json!(snap.version);
            part["now"] = json!(snap.now);
            part["table"] = json!(t);
            part["filter"] = json!(view.filter);
            part.to_string()
        }
    };
    Response::new(200, "application/json", body)
}

/// `/timeline.svg`: fitted to what happened, by key, as drawn with the snapshot; or the
/// last `since` seconds (`since=all`, or none: fitted), by key or by agent.
/// A timeline's `since` and `by` as a request asks for them.
fn picture_asked(req: &Request) -> std::result::Result<(timeline::Window, timeline::By), Response> {
    let window = match req.param("since").as_deref() {
        None | Some("all") => timeline::Window::Fit,
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (60..=7 * 86_400).contains(&n) => timeline::Window::Last(n),
            _ => return Err(Response::text(400, "since: seconds, 60 to 604800, or all")),
        },
    };
    let by = match req.param("by").as_deref() {
        None | Some("key") => timeline::By::Key,
        Some("agent") => timeline::By::Agent,
        Some(_) => return Err(Response::text(400, "by: key or agent")),
    };
    Ok((window, by))
}

/// `/timeline.html`: the timeline as one HTML file (`ui --html`), to save.
fn picture_page(shared: &Shared, req: &Request) -> Response {
    let (window, by) = match picture_asked(req) {
        Ok(asked) => asked,
        Err(r) => return r,
    };
    let Some(snap) = shared.snapshot() else {
        return Response::text(503, "reading the store…");
    };
    let events: Vec<AuditEvent> = snap.events.iter().cloned().collect();
    let t = timeline::build_window(&events, snap.fleet.as_deref(), window, snap.now, by);
    let store = snap.fleet.as_ref().map_or("", |f| f.store.as_str());
    Response::new(
        200,
        "text/html; charset=utf-8",
        timeline::html(&t, store).into_bytes(),
    )
    .with(
        "content-disposition",
        "attachment; filename=\"tasklock-timeline.html\"",
    )
}

fn picture(shared: &Shared, req: &Request) -> Response {
    let (window, by) = match picture_asked(req) {
        Ok(asked) => asked,
        Err(r) => return r,
    };
    let Some(snap) = shared.snapshot() else {
        return Response::text(503, "reading the store…");
    };
    let svg = if window == timeline::Window::Fit && by == timeline::By::Key {
        Arc::new(timeline::svg(&snap.timeline))
    } else {
        let want = (snap.version, window, by);
        let mut drawn = shared.drawn.lock().unwrap_or_else(|p| p.into_inner());
        match &*drawn {
            Some((at, svg)) if *at == want => svg.clone(),
            _ => {
                let events: Vec<AuditEvent> = snap.events.iter().cloned().collect();
                let t =
                    timeline::build_window(&events, snap.fleet.as_deref(), window, snap.now, by);
                let svg = Arc::new(timeline::svg(&t));
                *drawn = Some((want, svg.clone()));
                svg
            }
        }
    };
    let r = Response::new(200, "image/svg+xml", svg.as_bytes().to_vec());
    if req.param("download").is_some() {
        r.with(
            "content-disposition",
            "attachment; filename=\"tasklock-timeline.svg\"",
        )
    } else {
        r
    }
}

/// `/api/key`: one key in detail.
fn key_part(shared: &Shared, req: &Request) -> Response {
    let Some(key) = req.param("key").filter(|k| !k.is_empty()) else {
        return Response::text(400, "which key? /api/key?key=KEY");
    };
    let (notes, why) = super::key_detail(&shared.global, &key);
    let snap = shared.snapshot();
    let history: Vec<Told> = snap
        .as_ref()
        .map(|s| {
            s.events
                .iter()
                .rev()
                .filter(|e| e.key == key)
                .take(20)
                .map(Told::of)
                .collect()
        })
        .unwrap_or_default();
    let body = json!({
        "key": key,
        "why": why,
        "notes": notes.as_ref().ok(),
        "notes_error": notes.as_ref().err(),
        "history": history,
    })
    .to_string();
    Response::new(200, "application/json", body)
}

/// How long a stream says nothing before it says it is still there.
const STILL_HERE: Duration = Duration::from_secs(15);

/// Server-sent events: the page's view of the current snapshot at once, then of each new
/// one. The view (filter, sorts, pages) is the stream's own: a page that changes it opens
/// another stream. One event is drawn at a time, when the page took the last: a page
/// that reads slowly holds no queue of them.
fn stream(shared: Arc<Shared>, view: View) -> Response {
    let (tx, body) = server::events();
    let mut versions = shared.versions.subscribe();
    tokio::spawn(async move {
        let mut sent = 0;
        loop {
            if let Some(snap) = shared.snapshot()
                && snap.version != sent
            {
                sent = snap.version;
                let (sh, v) = (shared.clone(), view.clone());
                let Ok(doc) = tokio::task::spawn_blocking(move || document(&snap, &v, &sh)).await
                else {
                    return;
                };
                if tx
                    .send(format!("event: fleet\ndata: {doc}\n\n").into())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            tokio::select! {
                changed = versions.changed() => if changed.is_err() { return },
                _ = tx.closed() => return,
                _ = tokio::time::sleep(STILL_HERE) => {
                    if tx.send(": still here\n\n".into()).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response {
        body,
        ..Response::new(200, "text/event-stream", "")
    }
}

/// A change asked for by the page: only from the page itself, only where allowed.
fn change(shared: &Shared, req: &Request) -> Response {
    let own = req
        .header("host")
        .map(|h| format!("http://{h}"))
        .unwrap_or_default();
    if req.header("origin") != Some(own.as_str()) {
        return Response::text(403, "changes are made from the page itself (Origin)");
    }
    if !req
        .header("x-tasklock-token")
        .is_some_and(|t| same(t, &shared.token))
    {
        return Response::text(403, "changes need the page's token");
    }
    if !req
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return Response::text(415, "changes are JSON");
    }
    if let Err(why) = &shared.can_act {
        let body = json!({"ok": false, "message": format!("read-only: {why}")}).to_string();
        return Response::new(403, "application/json", body);
    }
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return Response::text(400, &format!("not JSON: {e}")),
    };
    let Some(key) = body.get("key").and_then(Value::as_str) else {
        return Response::text(400, "no key");
    };
    // Each option one word (`--for=…`): what the page sent is a value, never an option.
    let (command, options) = if req.path == "/api/release" {
        (
            "release",
            vec![
                "--force".to_string(),
                "--note=force-released from tasklock ui".into(),
            ],
        )
    } else {
        let Some(dur) = body.get("for").and_then(Value::as_str) else {
            return Response::text(400, "freeze needs \"for\": a duration");
        };
        (
            "freeze",
            vec![
                format!("--for={dur}"),
                "--reason=frozen from tasklock ui".into(),
            ],
        )
    };
    let (ok, message) = super::act_on(&shared.global, command, &options, key);
    let body = json!({"ok": ok, "message": message}).to_string();
    Response::new(if ok { 200 } else { 409 }, "application/json", body)
}

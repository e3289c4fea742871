//! `tasklock ui`: the fleet, live, in a browser page served by tasklock itself.
//!
//! One watcher of the store (as `tasklock top` has) turns every change into one JSON
//! document, sent to each open page as a server-sent event; the page, its script and its
//! style are inside the binary. It is a door into the project, so: it listens on loopback
//! unless told otherwise; every request needs the random token printed in the URL (then
//! kept in a cookie that scripts cannot read); the Host header must name this server (no
//! DNS rebinding); no response allows another origin; a change (force-release, freeze) is
//! a POST from the page itself (its Origin, a JSON body and the token in a header), made
//! only where the person who started it could make it from the command line; and the
//! Content Security Policy allows no inline script. Keys, reasons, notes and names are
//! other agents' text: the page sets them as text, the timeline escapes them.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::timeline;
use super::{EVENTS_KEPT, REFRESH, context, recent_events, store_of};
use crate::cli::Global;
use crate::clock::{self, Time};
use crate::engine::fleet::{self, Fleet};
use crate::error::{Error, Result};
use crate::store::AuditEvent;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

const COOKIE: &str = "tasklock_ui";
/// Requests bigger than this are refused: the page's own are tiny.
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 16 * 1024;
/// Events sent to a page with each change (newest first).
const EVENTS_SENT: usize = 200;
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
    /// The address to listen on: loopback unless told otherwise
    #[arg(long, default_value = "127.0.0.1")]
    pub listen: IpAddr,
    /// Look only: no force-release or freeze from the page
    #[arg(long)]
    pub read_only: bool,
    /// Do not try to open a browser
    #[arg(long)]
    pub no_open: bool,
    /// Write the timeline as an SVG file and exit (no server)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
    /// The timeline's window for --svg
    #[arg(long, value_name = "DUR", default_value = "1h", value_parser = crate::duration::parse)]
    pub since: Duration,
}

pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    super::run(args, "ui", |a: Args| match &a.svg {
        Some(path) => write_svg(&a, path),
        None => serve(&a),
    })
}

fn window(since: Duration, now: Time) -> Time {
    now - crate::duration::to_chrono(since)
}

fn write_svg(a: &Args, path: &std::path::Path) -> Result<()> {
    let ctx = context(&a.global)?;
    let store = store_of(&ctx)?;
    let fleet = fleet::snapshot(&ctx, &*store)?;
    let events: Vec<AuditEvent> = recent_events(&*store)?.into();
    let t = timeline::build(&events, Some(&fleet), window(a.since, ctx.now), ctx.now);
    std::fs::write(path, timeline::svg(&t)).map_err(|e| Error::io(path, e))?;
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
    state: Mutex<State>,
    /// One sender per open event stream.
    streams: Mutex<Vec<Sender<Arc<String>>>>,
}

#[derive(Default)]
struct State {
    fleet: Option<Fleet>,
    events: VecDeque<AuditEvent>,
    /// The last document sent, for a page that connects now.
    last: Option<Arc<String>>,
    error: Option<String>,
}

fn random_token() -> Result<String> {
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io("/dev/urandom", e))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn serve(a: &Args) -> Result<()> {
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
    let shared = Arc::new(Shared {
        token: random_token()?,
        port,
        listen: a.listen,
        global: a.global.clone(),
        can_act: super::may_act(a.read_only, &a.global, &ctx),
        state: Mutex::new(State {
            events,
            ..State::default()
        }),
        streams: Mutex::new(Vec::new()),
    });
    let host = match a.listen {
        IpAddr::V6(ip) if !ip.is_unspecified() => format!("[{ip}]"),
        IpAddr::V4(ip) if !ip.is_unspecified() => ip.to_string(),
        _ => "127.0.0.1".into(),
    };
    let url = format!("http://{host}:{port}/?token={}", shared.token);
    println!("tasklock ui: {url}");
    if !a.listen.is_loopback() {
        eprintln!(
            "tasklock ui: listening on {} beyond this machine; anyone who can reach it still needs the token",
            a.listen
        );
    }
    let _ = std::io::stdout().flush();
    if !a.no_open {
        open_browser(&url);
    }
    {
        let shared = shared.clone();
        std::thread::spawn(move || watch(shared));
    }
    crate::signals::install();
    listener
        .set_nonblocking(false)
        .map_err(|e| Error::Store(format!("cannot listen: {e}")))?;
    for conn in listener.incoming() {
        if crate::signals::received().is_some() {
            break;
        }
        let Ok(conn) = conn else { continue };
        let shared = shared.clone();
        std::thread::spawn(move || {
            let _ = handle(&shared, conn);
        });
    }
    Ok(())
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

/// The one watcher of the store, however many pages are open.
fn watch(shared: Arc<Shared>) {
    let run = || -> Result<()> {
        let mut ctx = context(&shared.global)?;
        let store = store_of(&ctx)?;
        let mut follow = store.follow_audit()?;
        let _ = follow.next(Duration::ZERO)?;
        let mut changes = store.changes()?;
        // What the pages were sent last, apart from the time: an unchanged fleet is sent
        // again only every RESEND (for the leases' countdown), not every second.
        let mut sent: Option<(String, std::time::Instant)> = None;
        loop {
            ctx.now = clock::now()?;
            let snapshot = fleet::snapshot(&ctx, &*store);
            let new = follow.next(Duration::ZERO).unwrap_or_default();
            let same_as_sent = match (&snapshot, &sent) {
                (Ok(f), Some((last, at))) if new.is_empty() && at.elapsed() < RESEND => {
                    let mut timeless = f.clone();
                    timeless.now = Time::default();
                    serde_json::to_string(&timeless).is_ok_and(|s| s == *last)
                }
                _ => false,
            };
            if same_as_sent {
                changes.wait(REFRESH);
                continue;
            }
            if let Ok(f) = &snapshot {
                let mut timeless = f.clone();
                timeless.now = Time::default();
                sent = serde_json::to_string(&timeless)
                    .ok()
                    .map(|s| (s, std::time::Instant::now()));
            }
            let doc = {
                let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                for e in new {
                    if st.events.len() == EVENTS_KEPT {
                        st.events.pop_front();
                    }
                    st.events.push_back(e);
                }
                match snapshot {
                    Ok(f) => {
                        st.fleet = Some(f);
                        st.error = None;
                    }
                    Err(e) => st.error = Some(e.to_string()),
                }
                let doc = Arc::new(document(&st, &shared, ctx.now).to_string());
                st.last = Some(doc.clone());
                doc
            };
            shared
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|tx| tx.send(doc.clone()).is_ok());
            changes.wait(REFRESH);
        }
    };
    if let Err(e) = run() {
        shared.state.lock().unwrap_or_else(|p| p.into_inner()).error = Some(e.to_string());
    }
}

/// What a page is sent: the fleet, the newest events, where the time went in the last
/// hour, and whether it may act.
fn document(st: &State, shared: &Shared, now: Time) -> Value {
    let events: Vec<AuditEvent> = st.events.iter().cloned().collect();
    let t = timeline::build(
        &events,
        st.fleet.as_ref(),
        now - chrono::Duration::hours(1),
        now,
    );
    let mut contended: Vec<&timeline::KeyRow> = t.rows.iter().collect();
    contended.sort_by(|a, b| {
        (b.contention, b.waited_secs)
            .cmp(&(a.contention, a.waited_secs))
            .then(a.key.cmp(&b.key))
    });
    contended.truncate(10);
    json!({
        "now": now,
        "fleet": st.fleet,
        "error": st.error,
        "events": events.iter().rev().take(EVENTS_SENT).collect::<Vec<_>>(),
        "time": {
            "keys": contended.iter().map(|r| json!({
                "key": r.key, "held_secs": r.held_secs, "waited_secs": r.waited_secs,
                "contention": r.contention,
            })).collect::<Vec<_>>(),
            "agents": t.agent_time,
        },
        "colours": t.agents,
        "can_act": shared.can_act.as_ref().err(),
    })
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
    }
    fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?.split(';').find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn read_request(conn: &mut TcpStream) -> std::io::Result<Option<Request>> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut head = Vec::new();
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.by_ref().take(MAX_HEAD as u64).read_line(&mut line)?;
        if n == 0 {
            return Ok(None);
        }
        head.push(n);
        if head.iter().sum::<usize>() > MAX_HEAD {
            return Ok(None);
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let Some(first) = lines.first() else {
        return Ok(None);
    };
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.clone(), String::new()),
    };
    let headers: Vec<(String, String)> = lines[1..]
        .iter()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    if len > MAX_BODY {
        return Ok(None);
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    Ok(Some(Request {
        method,
        path,
        query,
        headers,
        body,
    }))
}

/// Headers every response carries: nothing cached, nothing framed, nothing sniffed,
/// and only this page's own script and style.
const SECURITY: &str = "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\nCross-Origin-Resource-Policy: same-origin\r\nCache-Control: no-store\r\n";

fn respond(
    conn: &mut TcpStream,
    status: &str,
    ctype: &str,
    extra: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{SECURITY}{extra}Connection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}

fn text(conn: &mut TcpStream, status: &str, msg: &str) -> std::io::Result<()> {
    respond(
        conn,
        status,
        "text/plain; charset=utf-8",
        "",
        format!("{msg}\n").as_bytes(),
    )
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Shared {
    /// The Host header names this server: loopback (or the address it listens on) and
    /// its port. Anything else is a page of another site reached through DNS rebinding.
    fn host_ok(&self, req: &Request) -> bool {
        let Some(host) = req.header("host") else {
            return false;
        };
        let port = self.port;
        let mut ok = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        if !self.listen.is_unspecified() {
            ok.push(match self.listen {
                IpAddr::V6(ip) => format!("[{ip}]:{port}"),
                IpAddr::V4(ip) => format!("{ip}:{port}"),
            });
        }
        ok.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    fn authorised(&self, req: &Request) -> bool {
        req.cookie(COOKIE).is_some_and(|c| same(c, &self.token))
    }
}

fn handle(shared: &Shared, mut conn: TcpStream) -> std::io::Result<()> {
    let Some(req) = read_request(&mut conn)? else {
        return text(&mut conn, "400 Bad Request", "bad request");
    };
    if !shared.host_ok(&req) {
        return text(
            &mut conn,
            "403 Forbidden",
            "unknown Host: this server answers only to its own address",
        );
    }
    // The URL printed at start: its token becomes a cookie, and the token leaves the URL.
    if req.method == "GET"
        && req.path == "/"
        && let Some(t) = req.param("token")
    {
        if same(&t, &shared.token) {
            let cookie = format!(
                "Set-Cookie: {COOKIE}={}; HttpOnly; SameSite=Strict; Path=/\r\nLocation: /\r\n",
                shared.token
            );
            return respond(&mut conn, "303 See Other", "text/plain", &cookie, b"");
        }
        return text(
            &mut conn,
            "403 Forbidden",
            "wrong token: use the URL `tasklock ui` printed",
        );
    }
    if !shared.authorised(&req) {
        return text(
            &mut conn,
            "403 Forbidden",
            "this page needs its token: open the URL `tasklock ui` printed (http://…/?token=…)",
        );
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") => {
            let page = INDEX.replace("{{CSRF}}", &shared.token);
            respond(
                &mut conn,
                "200 OK",
                "text/html; charset=utf-8",
                "",
                page.as_bytes(),
            )
        }
        ("GET", "/app.js") => respond(
            &mut conn,
            "200 OK",
            "text/javascript; charset=utf-8",
            "",
            APP_JS.as_bytes(),
        ),
        ("GET", "/app.css") => respond(
            &mut conn,
            "200 OK",
            "text/css; charset=utf-8",
            "",
            APP_CSS.as_bytes(),
        ),
        ("GET", "/api/fleet") => {
            let doc = shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last
                .clone();
            match doc {
                Some(d) => respond(&mut conn, "200 OK", "application/json", "", d.as_bytes()),
                None => text(&mut conn, "503 Service Unavailable", "reading the store…"),
            }
        }
        ("GET", "/timeline.svg") => {
            let since = req
                .param("since")
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|s| (60..=7 * 86_400).contains(s))
                .unwrap_or(3600);
            let (events, fleet) = {
                let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                (
                    st.events.iter().cloned().collect::<Vec<_>>(),
                    st.fleet.clone(),
                )
            };
            let now = clock::now().unwrap_or_else(|_| chrono::Utc::now());
            let t = timeline::build(
                &events,
                fleet.as_ref(),
                now - chrono::Duration::seconds(since),
                now,
            );
            let disposition = if req.param("download").is_some() {
                "Content-Disposition: attachment; filename=\"tasklock-timeline.svg\"\r\n"
            } else {
                ""
            };
            respond(
                &mut conn,
                "200 OK",
                "image/svg+xml",
                disposition,
                timeline::svg(&t).as_bytes(),
            )
        }
        ("GET", "/events") => stream(shared, conn),
        ("GET", "/api/key") => {
            let Some(key) = req.param("key").filter(|k| !k.is_empty()) else {
                return text(&mut conn, "400 Bad Request", "which key? /api/key?key=KEY");
            };
            let (notes, why) = super::key_detail(&shared.global, &key);
            let history: Vec<AuditEvent> = {
                let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                st.events
                    .iter()
                    .rev()
                    .filter(|e| e.key == key)
                    .take(20)
                    .cloned()
                    .collect()
            };
            let body = json!({
                "key": key,
                "why": why,
                "notes": notes.as_ref().ok(),
                "notes_error": notes.as_ref().err(),
                "history": history,
            })
            .to_string();
            respond(&mut conn, "200 OK", "application/json", "", body.as_bytes())
        }
        ("POST", "/api/release") | ("POST", "/api/freeze") => change(shared, &mut conn, &req),
        ("GET" | "POST", _) => text(&mut conn, "404 Not Found", "no such page"),
        _ => text(
            &mut conn,
            "405 Method Not Allowed",
            "only GET, and POST from the page",
        ),
    }
}

/// Server-sent events: the current document at once, then one at each change.
fn stream(shared: &Shared, mut conn: TcpStream) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<Arc<String>>();
    let first = shared
        .state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .last
        .clone();
    shared
        .streams
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(tx);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{SECURITY}Connection: keep-alive\r\n\r\n"
    );
    conn.write_all(head.as_bytes())?;
    if let Some(doc) = first {
        write!(conn, "event: fleet\ndata: {doc}\n\n")?;
        conn.flush()?;
    }
    loop {
        match rx.recv_timeout(Duration::from_secs(15)) {
            Ok(mut doc) => {
                // Only the newest of a burst.
                while let Ok(d) = rx.try_recv() {
                    doc = d;
                }
                write!(conn, "event: fleet\ndata: {doc}\n\n")?;
            }
            Err(RecvTimeoutError::Timeout) => conn.write_all(b": still here\n\n")?,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        conn.flush()?;
    }
}

/// A change asked for by the page: only from the page itself, only where allowed.
fn change(shared: &Shared, conn: &mut TcpStream, req: &Request) -> std::io::Result<()> {
    let own = req
        .header("host")
        .map(|h| format!("http://{h}"))
        .unwrap_or_default();
    if req.header("origin") != Some(own.as_str()) {
        return text(
            conn,
            "403 Forbidden",
            "changes are made from the page itself (Origin)",
        );
    }
    if !req
        .header("x-tasklock-token")
        .is_some_and(|t| same(t, &shared.token))
    {
        return text(conn, "403 Forbidden", "changes need the page's token");
    }
    if !req
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return text(conn, "415 Unsupported Media Type", "changes are JSON");
    }
    if let Err(why) = &shared.can_act {
        let body = json!({"ok": false, "message": format!("read-only: {why}")}).to_string();
        return respond(
            conn,
            "403 Forbidden",
            "application/json",
            "",
            body.as_bytes(),
        );
    }
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return text(conn, "400 Bad Request", &format!("not JSON: {e}")),
    };
    let Some(key) = body.get("key").and_then(Value::as_str) else {
        return text(conn, "400 Bad Request", "no key");
    };
    let args = if req.path == "/api/release" {
        vec![
            "release".to_string(),
            key.to_string(),
            "--force".into(),
            "--note".into(),
            "force-released from tasklock ui".into(),
        ]
    } else {
        let Some(dur) = body.get("for").and_then(Value::as_str) else {
            return text(conn, "400 Bad Request", "freeze needs \"for\": a duration");
        };
        vec![
            "freeze".to_string(),
            key.to_string(),
            "--for".into(),
            dur.to_string(),
            "--reason".into(),
            "frozen from tasklock ui".into(),
        ]
    };
    let (ok, message) = super::act(&shared.global, args);
    let body = json!({"ok": ok, "message": message}).to_string();
    respond(
        conn,
        if ok { "200 OK" } else { "409 Conflict" },
        "application/json",
        "",
        body.as_bytes(),
    )
}

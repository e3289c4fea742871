//! The HTTP server under `tasklock ui`: hyper's HTTP/1 (a maintained parser), on a small
//! tokio runtime, with the page's own rules put on top by an [`App`].
//!
//! What it bounds: connections are tasks, not threads, and at most [`max_connections`]
//! are open at once (below the descriptor limit, so accept never fails for want of one
//! and never spins). When the cap is reached, a new connection closes the oldest one
//! that has not yet sent a request with the token: idle or trickling connections cannot
//! shut out the person with the token. A request's head must arrive within
//! [`HEAD_TIMEOUT`] and its body within [`BODY_TIMEOUT`]; the app's work runs on a
//! bounded pool of blocking threads. SIGINT, SIGTERM and SIGHUP end the server at once,
//! whatever the connections are doing.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, mpsc};

use crate::error::{Error, Result};

/// A request's head (line and headers) must arrive within this.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's body must arrive within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bodies bigger than this are refused: the page's own are tiny.
const MAX_BODY: usize = 16 * 1024;
/// The most connections open at once, whatever the descriptor limit allows.
const MOST_CONNECTIONS: u64 = 1024;
/// Descriptors kept for the store, the watcher and the runtime.
const SPARE_DESCRIPTORS: u64 = 64;
/// Threads that run the app's answers (which read the store, or run a command).
const ANSWER_THREADS: usize = 8;

/// A response body: whole, or a stream of server-sent events.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A request as the app sees it: the body read whole (at most [`MAX_BODY`] bytes).
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter, percent-decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| percent_decode(v))
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

/// A response: its status, type, extra headers and body.
pub struct Response {
    pub status: u16,
    pub ctype: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
    /// Close the connection after it (refusals: a caller without the token keeps no
    /// connection open).
    pub close: bool,
}

impl Response {
    pub fn new(status: u16, ctype: &'static str, body: impl Into<Bytes>) -> Response {
        Response {
            status,
            ctype,
            headers: Vec::new(),
            body: Full::new(body.into()).boxed(),
            close: false,
        }
    }

    pub fn text(status: u16, msg: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", format!("{msg}\n"))
    }

    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    pub fn closing(mut self) -> Response {
        self.close = true;
        self
    }
}

/// A stream of events: what the app sends into `tx` (the returned sender), as the body.
/// The sender's `closed()` resolves when the page went away.
pub fn events() -> (mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = mpsc::channel(1);
    (tx, Events(rx).boxed())
}

struct Events(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// What the app says of a request before its body is read.
pub enum Admit {
    /// It carries the token: its connection is kept when the cap is reached.
    Trusted,
    /// Asks for nothing of the store (the page's own files).
    Public,
    Refuse(Response),
}

/// The page's rules and answers.
pub trait App: Send + Sync + 'static {
    /// Judge a request by its head (Host, token).
    fn admit(&self, req: &Request) -> Admit;
    /// Answer an admitted request; runs on a blocking thread (it may read the store or
    /// run a command). Headers every answer carries are added by [`App::decorate`].
    fn answer(self: Arc<Self>, req: Request) -> Response;
    /// Headers every answer carries.
    fn decorate(&self, headers: &mut hyper::HeaderMap);
}

/// The most connections open at once: [`MOST_CONNECTIONS`], or fewer when the
/// descriptor limit is lower.
pub fn max_connections() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    // rlim_t is not u64 on every platform.
    #[allow(clippy::unnecessary_cast)]
    let soft = if ok { lim.rlim_cur as u64 } else { 1024 };
    soft.saturating_sub(SPARE_DESCRIPTORS)
        .clamp(16, MOST_CONNECTIONS)
}

/// The open connections, oldest first: whether each sent the token, and how to close it.
#[derive(Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, (Arc<AtomicBool>, Arc<Notify>)>,
}

impl Connections {
    /// Close the oldest connection that has not shown the token; false: there is none.
    fn close_oldest_stranger(&mut self) -> bool {
        let found = self
            .open
            .iter()
            .find(|(_, (trusted, _))| !trusted.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match found.and_then(|id| self.open.remove(&id)) {
            Some((_, stop)) => {
                stop.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A server ready to serve: its runtime, its listener, and SIGINT, SIGTERM and SIGHUP
/// caught from now on.
pub struct Server {
    rt: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
    signals: Vec<tokio::signal::unix::Signal>,
}

impl Server {
    pub fn new(listener: std::net::TcpListener) -> Result<Server> {
        use tokio::signal::unix::{SignalKind, signal};
        // One thread for the connections (each answer runs on the blocking pool): the
        // multi-threaded scheduler would, through Cargo's feature unification, be linked
        // into `tasklock` itself with the PostgreSQL client's runtime, and cost every
        // command its start-up.
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(ANSWER_THREADS)
            .thread_name("tasklock-ui")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::Store(format!("cannot start the server: {e}")))?;
        let _in = rt.enter();
        let cannot = |e: std::io::Error| Error::Store(format!("cannot listen: {e}"));
        listener.set_nonblocking(true).map_err(cannot)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(cannot)?;
        let mut signals = Vec::new();
        for kind in [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ] {
            signals.push(
                signal(kind).map_err(|e| Error::Store(format!("cannot catch signals: {e}")))?,
            );
        }
        drop(_in);
        Ok(Server {
            rt,
            listener,
            signals,
        })
    }

    /// Serve `app` until a signal comes.
    pub fn serve(self, app: Arc<dyn App>) -> Result<()> {
        let Server {
            rt,
            listener,
            mut signals,
        } = self;
        let served = rt.block_on(accept(listener, &mut signals, app));
        // Streams and answers under way end with the process.
        rt.shutdown_background();
        served
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    signals: &mut [tokio::signal::unix::Signal],
    app: Arc<dyn App>,
) -> Result<()> {
    let [int, term, hup] = signals else {
        unreachable!("three signals")
    };
    let cap = max_connections();
    let conns = Arc::new(Mutex::new(Connections::default()));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = hup.recv() => return Ok(()),
        };
        let lock = || conns.lock().unwrap_or_else(|p| p.into_inner());
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(_) => {
                // Out of descriptors (or another passing failure): make room, and do not
                // ask again at once (the connection waiting would wake this loop again
                // and again).
                if !lock().close_oldest_stranger() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                continue;
            }
        };
        let (id, trusted, stop) = {
            let mut c = lock();
            if c.open.len() as u64 >= cap && !c.close_oldest_stranger() {
                // Every connection open showed the token: this one waits its turn.
                drop(tcp);
                continue;
            }
            let id = c.next;
            c.next += 1;
            let entry = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
            c.open.insert(id, entry.clone());
            (id, entry.0, entry.1)
        };
        let app = app.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            connection(tcp, app, trusted, stop).await;
            conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .open
                .remove(&id);
        });
    }
}

/// One connection, until it closes, times out, or is closed to make room.
async fn connection(
    tcp: tokio::net::TcpStream,
    app: Arc<dyn App>,
    trusted: Arc<AtomicBool>,
    stop: Arc<Notify>,
) {
    let service = hyper::service::service_fn(move |req| {
        let app = app.clone();
        let trusted = trusted.clone();
        async move { Ok::<_, Infallible>(exchange(app, trusted, req).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(tcp), service);
    tokio::select! {
        _ = served => {}
        _ = stop.notified() => {}
    }
}

/// One request and its answer.
async fn exchange(
    app: Arc<dyn App>,
    trusted: Arc<AtomicBool>,
    req: hyper::Request<Incoming>,
) -> hyper::Response<Body> {
    let (parts, body) = req.into_parts();
    let mut r = Request {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
    };
    let answer = match app.admit(&r) {
        Admit::Refuse(resp) => resp.closing(),
        admitted => {
            if matches!(admitted, Admit::Trusted) {
                trusted.store(true, Ordering::Relaxed);
            }
            let read = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect());
            match read.await {
                Ok(Ok(b)) => {
                    r.body = b.to_bytes().to_vec();
                    let app2 = app.clone();
                    tokio::task::spawn_blocking(move || app2.answer(r))
                        .await
                        .unwrap_or_else(|_| Response::text(500, "the answer failed"))
                }
                Ok(Err(_)) => Response::text(413, "too big a body").closing(),
                Err(_) => Response::text(408, "the body did not arrive in time").closing(),
            }
        }
    };
    let mut out = hyper::Response::new(answer.body);
    *out.status_mut() = hyper::StatusCode::from_u16(answer.status)
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let h = out.headers_mut();
    app.decorate(h);
    let mut put = |k: &str, v: &str| {
        if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            hyper::header::HeaderValue::from_str(v),
        ) {
            h.insert(k, v);
        }
    };
    put("content-type", answer.ctype);
    for (k, v) in &answer.headers {
        put(k, v);
    }
    if answer.close {
        put("connection", "close");
    }
    out
}

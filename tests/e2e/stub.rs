//! What every client's model stub shares: a loopback HTTP/1.1 server that answers each
//! request with a [`Reply`] from the client's own protocol code, and, for the stubs that
//! serve many sessions at once (Codex, Gemini CLI, OpenCode), [`ModelStub`]: what they
//! record (requests, each call's output by session) and the holds tests use to line
//! sessions up. Only the wire format (what a request carries, how a tool call is written)
//! differs per client and lives in its own module.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a stub holds back an answer at a hold point at most.
pub const HOLD_LIMIT: Duration = Duration::from_secs(120);

pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let mut req = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            req.body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let length = req
            .header("content-length")
            .map_or(Ok(0), str::parse)
            .ok()?;
        req.body.resize(length, 0);
        r.read_exact(&mut req.body).ok()?;
    }
    Some(req)
}

/// A stub's answer to one request, and a note for its log.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub note: String,
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>, note: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: body.into(),
            note: note.into(),
        }
    }

    pub fn sse(body: impl Into<Vec<u8>>, note: impl Into<String>) -> Reply {
        Reply {
            status: 200,
            content_type: "text/event-stream",
            body: body.into(),
            note: note.into(),
        }
    }
}

/// A stub's state, which keeps a log of the requests it answered.
pub trait Logged {
    fn log_line(&self, line: String);
}

/// Serve every connection to `listener` on a thread of its own: each request is answered
/// with what `answer` makes of it, with the stub's shared state and its script, and logged.
pub fn serve_loopback<S, T>(
    listener: TcpListener,
    state: Arc<S>,
    script: T,
    answer: fn(&Request, &S, &T) -> Reply,
) where
    S: Logged + Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let state = Arc::clone(&state);
            let script = Arc::clone(&script);
            std::thread::spawn(move || serve(stream, &*state, &*script, answer));
        }
    });
}

fn serve<S: Logged, T>(
    stream: TcpStream,
    state: &S,
    script: &T,
    answer: fn(&Request, &S, &T) -> Reply,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader) {
        let reply = answer(&req, state, script);
        state.log_line(format!(
            "{} {} ({} bytes) -> {} {}",
            req.method,
            req.path,
            req.body.len(),
            reply.status,
            reply.note
        ));
        let reason = match reply.status {
            200 => "OK",
            400 => "Bad Request",
            _ => "Not Found",
        };
        let head = format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\nrequest-id: req_e2e\r\nconnection: keep-alive\r\n\r\n",
            reply.status,
            reply.content_type,
            reply.body.len()
        );
        let mut bytes = head.into_bytes();
        if req.method != "HEAD" {
            bytes.extend_from_slice(&reply.body);
        }
        if writer
            .write_all(&bytes)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return;
        }
    }
}

/// What a stub serving many sessions saw, with what its client adds (`more`).
#[derive(Default)]
pub struct Seen<X> {
    /// One line per request.
    pub log: Vec<String>,
    /// Request bodies, as received.
    pub bodies: Vec<String>,
    /// The output of each call, by session and call id, as first sent.
    pub outputs: BTreeMap<String, BTreeMap<String, String>>,
    /// Set by [`ModelStub::release`]: answer held requests at once.
    pub released: bool,
    /// Set by [`ModelStub::go`].
    pub go: bool,
    pub more: X,
}

pub type Shared<X> = (Mutex<Seen<X>>, Condvar);

impl<X> Logged for Shared<X> {
    fn log_line(&self, line: String) {
        self.0.lock().unwrap().log.push(line);
    }
}

/// A stub model serving many sessions at once; `X` is what its client records besides
/// what every stub does.
pub struct ModelStub<X> {
    addr: SocketAddr,
    /// The path of the API below the server's address (`/v1`).
    base: &'static str,
    pub state: Arc<Shared<X>>,
}

impl<X: Default + Send + 'static> ModelStub<X> {
    /// Start serving on a loopback port, each request answered by `answer`.
    pub fn serve<T: Send + Sync + 'static>(
        base: &'static str,
        script: T,
        answer: fn(&Request, &Shared<X>, &T) -> Reply,
    ) -> ModelStub<X> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        serve_loopback(listener, Arc::clone(&state), script, answer);
        ModelStub { addr, base, state }
    }
}

impl<X> ModelStub<X> {
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, self.base)
    }

    /// Let held requests go on.
    pub fn release(&self) {
        self.state.0.lock().unwrap().released = true;
        self.state.1.notify_all();
    }

    /// Let sessions held until the test says so make their first step.
    pub fn go(&self) {
        self.state.0.lock().unwrap().go = true;
        self.state.1.notify_all();
    }

    /// Wait until `n` sessions have sent the output of `call`; false on timeout.
    pub fn wait_outputs(&self, call: impl ToString, n: usize, timeout: Duration) -> bool {
        let call = call.to_string();
        let (lock, cvar) = &*self.state;
        let (_guard, result) = cvar
            .wait_timeout_while(lock.lock().unwrap(), timeout, |s| {
                sessions_with(s, &call) < n
            })
            .unwrap();
        !result.timed_out()
    }

    /// Outputs of `call` by session.
    pub fn outputs_of(&self, call: impl ToString) -> BTreeMap<String, String> {
        let call = call.to_string();
        self.state
            .0
            .lock()
            .unwrap()
            .outputs
            .iter()
            .filter_map(|(s, o)| Some((s.clone(), o.get(&call)?.clone())))
            .collect()
    }

    pub fn log(&self) -> String {
        self.state.0.lock().unwrap().log.join("\n")
    }

    pub fn any_body_contains(&self, needle: &str) -> bool {
        self.state
            .0
            .lock()
            .unwrap()
            .bodies
            .iter()
            .any(|b| b.contains(needle))
    }
}

fn sessions_with<X>(seen: &Seen<X>, call: &str) -> usize {
    seen.outputs
        .values()
        .filter(|o| o.contains_key(call))
        .count()
}

/// Record a request of `session`: its body and the call outputs it carries (the first
/// output of each call is kept), then wake whoever waits for outputs.
pub fn record<X>(
    state: &Shared<X>,
    session: &str,
    body: &[u8],
    outputs: &BTreeMap<String, String>,
    more: impl FnOnce(&mut X),
) {
    {
        let mut s = state.0.lock().unwrap();
        s.bodies.push(String::from_utf8_lossy(body).into_owned());
        let seen = s.outputs.entry(session.to_string()).or_default();
        for (k, v) in outputs {
            seen.entry(k.clone()).or_insert_with(|| v.clone());
        }
        more(&mut s.more);
    }
    state.1.notify_all();
}

/// Hold back an answer until `sessions` sessions have sent the output of `call`, or the
/// stub is released, or [`HOLD_LIMIT`] passes; a note for the log.
pub fn hold<X>(state: &Shared<X>, call: &str, sessions: usize) -> String {
    let started = Instant::now();
    let _unused = state
        .1
        .wait_timeout_while(state.0.lock().unwrap(), HOLD_LIMIT, |s| {
            !s.released && sessions_with(s, call) < sessions
        })
        .unwrap();
    format!(" (held {:?})", started.elapsed())
}

/// Hold back an answer until [`ModelStub::go`], or [`HOLD_LIMIT`]; a note for the log.
pub fn wait_for_go<X>(state: &Shared<X>) -> String {
    let started = Instant::now();
    let _unused = state
        .1
        .wait_timeout_while(state.0.lock().unwrap(), HOLD_LIMIT, |s| !s.go)
        .unwrap();
    format!(" (waited {:?} for go)", started.elapsed())
}

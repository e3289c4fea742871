//! The real Gemini CLI (installed from npm into `target/e2e/gemini`), a loopback stub of the
//! Gemini API (`streamGenerateContent`), and a runner for headless `gemini -p` sessions.
//! See docs/e2e.md.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{npm_install, read_request};

/// The Gemini CLI release these tests were written and checked against.
pub const GEMINI_VERSION: &str = "0.61.0";

/// The model the sessions ask for: naming one skips Gemini CLI's model router (a side
/// request that classifies the prompt).
pub const GEMINI_MODEL: &str = "gemini-2.5-flash";

/// The stub model's final answer.
pub const GEMINI_FINAL_TEXT: &str = "E2E-GEMINI-DONE";

/// How long a stub holds back its answer at a [`GeminiScript::hold_after`] point at most.
const HOLD_LIMIT: Duration = Duration::from_secs(120);

/// The `gemini` launcher of the npm package at `GEMINI_VERSION`, installed on first use.
pub fn gemini() -> PathBuf {
    static GEMINI: OnceLock<PathBuf> = OnceLock::new();
    GEMINI.get_or_init(install_gemini).clone()
}

fn install_gemini() -> PathBuf {
    npm_install(
        "gemini",
        "@google/gemini-cli",
        GEMINI_VERSION,
        "the Gemini CLI",
        find_gemini,
        "node_modules/@google/gemini-cli/package.json does not name that version",
    )
}

/// The launcher, if it is there at the pinned version (`gemini --version` takes seconds:
/// the package's manifest says it).
fn find_gemini(prefix: &Path) -> Option<PathBuf> {
    let bin = prefix.join("node_modules/.bin/gemini");
    let manifest = prefix.join("node_modules/@google/gemini-cli/package.json");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(manifest).ok()?).ok()?;
    (bin.exists() && manifest["version"] == GEMINI_VERSION).then_some(bin)
}

// ---------------------------------------------------------------------------------------
// Stub of the Gemini API
// ---------------------------------------------------------------------------------------

/// What the stub model does in every session it serves: make the tool calls of `steps`
/// one per turn (`run_shell_command`, `write_file`…), then answer `GEMINI_FINAL_TEXT`.
#[derive(Clone, Default)]
pub struct GeminiScript {
    /// `(tool, args)`.
    pub steps: Vec<(String, Value)>,
    /// Hold back the answer that follows the result of `steps[i]` until every one of
    /// `sessions` sessions has sent that result, or until [`GeminiStub::release`].
    pub hold_after: Option<usize>,
    pub sessions: usize,
    /// Hold back the first answer of every session until [`GeminiStub::go`]: the session
    /// starts up meanwhile (most of its time), and acts only when the test says so.
    pub wait_for_go: bool,
}

impl GeminiScript {
    /// A `run_shell_command` step.
    pub fn shell(command: &str) -> (String, Value) {
        ("run_shell_command".into(), json!({ "command": command }))
    }
}

#[derive(Default)]
pub struct GeminiStubState {
    /// One line per request.
    pub log: Vec<String>,
    /// The result of each step (the `functionResponse.response` Gemini CLI sent, as JSON
    /// text), by session (the agent id SessionStart's context named) and step.
    pub outputs: BTreeMap<String, BTreeMap<usize, String>>,
    /// Set by [`GeminiStub::release`]: answer held requests at once.
    pub released: bool,
    /// Request bodies, as received.
    pub bodies: Vec<String>,
    /// Set by [`GeminiStub::go`].
    pub go: bool,
}

pub struct GeminiStub {
    addr: SocketAddr,
    pub state: Arc<(Mutex<GeminiStubState>, Condvar)>,
}

impl GeminiStub {
    pub fn start(script: GeminiScript) -> GeminiStub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((Mutex::new(GeminiStubState::default()), Condvar::new()));
        super::serve_loopback(listener, Arc::clone(&state), script, serve);
        GeminiStub { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Let held requests go on.
    pub fn release(&self) {
        self.state.0.lock().unwrap().released = true;
        self.state.1.notify_all();
    }

    /// Let sessions held by [`GeminiScript::wait_for_go`] make their first step.
    pub fn go(&self) {
        self.state.0.lock().unwrap().go = true;
        self.state.1.notify_all();
    }

    /// Wait until `n` sessions have sent the result of step `i`; false on timeout.
    pub fn wait_outputs(&self, i: usize, n: usize, timeout: Duration) -> bool {
        let (lock, cvar) = &*self.state;
        let (_guard, result) = cvar
            .wait_timeout_while(lock.lock().unwrap(), timeout, |s| {
                s.outputs.values().filter(|o| o.contains_key(&i)).count() < n
            })
            .unwrap();
        !result.timed_out()
    }

    /// Results of step `i` by session.
    pub fn outputs_of(&self, i: usize) -> BTreeMap<String, String> {
        self.state
            .0
            .lock()
            .unwrap()
            .outputs
            .iter()
            .filter_map(|(s, o)| Some((s.clone(), o.get(&i)?.clone())))
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

fn serve(stream: TcpStream, state: &(Mutex<GeminiStubState>, Condvar), script: &GeminiScript) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader) {
        let (status, content_type, body, note) = if req.method == "POST"
            && req.path.contains(":streamGenerateContent")
        {
            stream_generate(&req.body, state, script)
        } else if req.method == "POST" && req.path.contains(":generateContent") {
            // A side request (a summary, a classification): a short text answer.
            let v = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "{}"}]}, "finishReason": "STOP"}]});
            (
                200,
                "application/json",
                v.to_string().into_bytes(),
                "side request".into(),
            )
        } else if req.path.contains(":countTokens") {
            (
                200,
                "application/json",
                br#"{"totalTokens":1}"#.to_vec(),
                String::new(),
            )
        } else {
            (
                404,
                "application/json",
                br#"{"error":{"code":404,"message":"not in the e2e stub"}}"#.to_vec(),
                "404".to_string(),
            )
        };
        state.0.lock().unwrap().log.push(format!(
            "{} {} ({} bytes) -> {status} {note}",
            req.method,
            req.path,
            req.body.len()
        ));
        let head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n",
            if status == 200 { "OK" } else { "Not Found" },
            body.len()
        );
        let mut reply = head.into_bytes();
        reply.extend_from_slice(&body);
        if writer
            .write_all(&reply)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return;
        }
    }
}

/// The agent id SessionStart's context names (`this session is agent `ID``), which
/// Gemini CLI puts in the session's first user message: how the stub tells sessions apart.
fn session_of(req: &Value) -> Option<String> {
    const MARK: &str = "this session is agent `";
    req["contents"].as_array()?.iter().find_map(|c| {
        c["parts"].as_array()?.iter().find_map(|p| {
            let text = p["text"].as_str()?;
            let rest = &text[text.find(MARK)? + MARK.len()..];
            Some(rest[..rest.find('`')?].to_string())
        })
    })
}

/// Answer a streamGenerateContent request (`?alt=sse`) with one server-sent event: the
/// next step's function call, or the final text.
fn stream_generate(
    body: &[u8],
    state: &(Mutex<GeminiStubState>, Condvar),
    script: &GeminiScript,
) -> (u16, &'static str, Vec<u8>, String) {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return (
            400,
            "application/json",
            br#"{"error":{"code":400,"message":"e2e stub: body is not JSON"}}"#.to_vec(),
            "bad JSON".into(),
        );
    };
    let session = session_of(&req).unwrap_or_else(|| "unknown".into());
    let results: Vec<String> = req["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| Some(p.get("functionResponse")?["response"].to_string()))
        .collect();
    {
        let mut s = state.0.lock().unwrap();
        s.bodies.push(String::from_utf8_lossy(body).into_owned());
        let seen = s.outputs.entry(session.clone()).or_default();
        for (i, r) in results.iter().enumerate() {
            seen.entry(i).or_insert_with(|| r.clone());
        }
    }
    state.1.notify_all();
    let next = results.len();
    let mut note = String::new();
    if script.wait_for_go && next == 0 {
        let (lock, cvar) = state;
        let started = Instant::now();
        let _unused = cvar
            .wait_timeout_while(lock.lock().unwrap(), HOLD_LIMIT, |s| !s.go)
            .unwrap();
        note = format!(" (waited {:?} for go)", started.elapsed());
    }
    if let Some(i) = script.hold_after
        && next == i + 1
    {
        let (lock, cvar) = state;
        let started = Instant::now();
        let _unused = cvar
            .wait_timeout_while(lock.lock().unwrap(), HOLD_LIMIT, |s| {
                !s.released
                    && s.outputs.values().filter(|o| o.contains_key(&i)).count() < script.sessions
            })
            .unwrap();
        note = format!(" (held {:?})", started.elapsed());
    }
    let part = match script.steps.get(next) {
        Some((tool, args)) => {
            note = format!("step {next} ({tool}) for {session}{note}");
            json!({ "functionCall": { "name": tool, "args": args } })
        }
        None => {
            note = format!("final text for {session}{note}");
            json!({ "text": GEMINI_FINAL_TEXT })
        }
    };
    let event = json!({
        "candidates": [{ "content": { "role": "model", "parts": [part] }, "finishReason": "STOP" }],
        "usageMetadata": { "promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2 },
    });
    (
        200,
        "text/event-stream",
        format!("data: {event}\r\n\r\n").into_bytes(),
        note,
    )
}

// ---------------------------------------------------------------------------------------
// A session
// ---------------------------------------------------------------------------------------

/// A home for one session: `~/.gemini/settings.json` choosing API-key auth (so that
/// `GOOGLE_GEMINI_BASE_URL` points it at the stub) with updates, usage statistics and
/// telemetry off.
pub fn gemini_home(home: &Path) {
    let dir = home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({
        "security": { "auth": { "selectedType": "gemini-api-key" } },
        "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
    });
    std::fs::write(dir.join("settings.json"), format!("{settings:#}\n")).unwrap();
}

/// `gemini -p PROMPT --yolo -o json` in the project, through the npm launcher: an empty
/// environment apart from PATH (tasklock under test first), the session's HOME and TMPDIR,
/// the stub as the API and the project trusted (`GEMINI_CLI_TRUST_WORKSPACE`: Gemini CLI
/// reads a project's `.gemini/settings.json` only in a trusted folder).
pub fn gemini_cmd(home: &Path, project: &Path, stub: &GeminiStub, prompt: &str) -> Command {
    let mut cmd = gemini_bare(home, project, stub);
    cmd.args(["-m", GEMINI_MODEL, "--yolo", "-o", "json", "-p", prompt]);
    cmd
}

/// `gemini` with the environment of [`gemini_cmd`] and no arguments.
pub fn gemini_bare(home: &Path, project: &Path, stub: &GeminiStub) -> Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(gemini());
    cmd.env_clear()
        .env("PATH", super::path_with_tasklock())
        .env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("LANG", "C.UTF-8")
        .env("GEMINI_API_KEY", "e2e-stub-key")
        .env("GOOGLE_GEMINI_BASE_URL", stub.base_url())
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .current_dir(project);
    cmd
}

/// The Gemini CLI process that runs the session (and its hooks): the child `node` the
/// launcher starts (it relaunches itself with more memory); waits up to `timeout`.
pub fn inner_gemini_pid(launcher: u32, timeout: Duration) -> Option<u32> {
    let started = Instant::now();
    loop {
        let children = Command::new("pgrep")
            .args(["-P", &launcher.to_string(), "-x", "node"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if let Some(child) = children.split_whitespace().find_map(|c| c.parse().ok()) {
            return Some(child);
        }
        if started.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The session id of a finished `gemini -o json` run.
pub fn session_id(stdout: &str) -> Option<String> {
    let v: Value = serde_json::from_str(stdout.trim()).ok()?;
    v["session_id"].as_str().map(str::to_string)
}

/// Its final answer.
pub fn response(stdout: &str) -> Option<String> {
    let v: Value = serde_json::from_str(stdout.trim()).ok()?;
    v["response"].as_str().map(str::to_string)
}

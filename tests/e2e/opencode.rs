//! The real OpenCode CLI (installed from npm into `target/e2e/opencode`), a loopback stub
//! of an OpenAI-compatible Chat Completions API (a custom provider in the project's
//! `opencode.json`), and runners for `opencode run` and `opencode serve`. See docs/e2e.md.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use super::stub::{ModelStub, Reply, Request, Shared, hold, record};
use super::{COMMAND_TIMEOUT, Running, npm_install, path_with_tasklock};

/// The OpenCode release these tests were written and checked against.
pub const OPENCODE_VERSION: &str = "1.18.33";

/// The stub model's final answer.
pub const OPENCODE_FINAL_TEXT: &str = "E2E-OPENCODE-DONE";

/// What starts a turn nobody typed: tasklock's pushed text begins with it.
pub const WAKE_MARKER: &str = "[tasklock]";

/// The `opencode` binary of the npm package at `OPENCODE_VERSION`, installed on first use.
pub fn opencode() -> PathBuf {
    static OPENCODE: OnceLock<PathBuf> = OnceLock::new();
    OPENCODE
        .get_or_init(|| {
            npm_install(
                "opencode",
                "opencode-ai",
                OPENCODE_VERSION,
                "the OpenCode CLI",
                find_opencode,
                "node_modules/.bin/opencode does not report that version",
            )
        })
        .clone()
}

fn find_opencode(prefix: &Path) -> Option<PathBuf> {
    let bin = prefix.join("node_modules/.bin/opencode");
    if !bin.exists() {
        return None;
    }
    let home = tempfile::tempdir().ok()?;
    let mut cmd = Command::new(&bin);
    cmd.arg("--version").env("HOME", home.path());
    let out = Running::spawn(cmd, "opencode --version").wait(COMMAND_TIMEOUT);
    (out.status.success() && out.stdout.trim() == OPENCODE_VERSION).then_some(bin)
}

/// One step of the stub model: a `bash` command, or a call of another tool with its
/// arguments (`edit`, `write`, …).
#[derive(Clone, Debug)]
pub enum Step {
    Bash(String),
    Tool(String, Value),
}

impl From<&str> for Step {
    fn from(c: &str) -> Step {
        Step::Bash(c.to_string())
    }
}

/// What the stub model does in every session it serves: run `steps` one per request
/// (tool call ids `call_0`, `call_1`, …), then answer `OPENCODE_FINAL_TEXT`. A turn whose
/// new user text carries [`WAKE_MARKER`] runs `wake` (call `call_wake`), then answers.
#[derive(Clone, Default)]
pub struct OpenCodeScript {
    pub steps: Vec<Step>,
    /// Hold back the answer that follows the output of `steps[i]` until `sessions`
    /// sessions have sent that output, or until [`OpenCodeStub::release`].
    pub hold_after: Option<usize>,
    pub sessions: usize,
    pub wake: Option<String>,
}

/// What the OpenCode stub records besides what every stub does.
#[derive(Default)]
pub struct OpenCode {
    /// The system prompt of each session's first request with tools.
    pub system: BTreeMap<String, String>,
}

/// The stub of the Chat Completions API: sessions are told apart by the `x-session-id`
/// header; outputs are by call id (`call_0`, …, `call_wake`).
pub type OpenCodeStub = ModelStub<OpenCode>;

impl ModelStub<OpenCode> {
    pub fn start(script: OpenCodeScript) -> OpenCodeStub {
        ModelStub::serve("/v1", script, route)
    }

    pub fn system_of(&self, session: &str) -> Option<String> {
        self.state
            .0
            .lock()
            .unwrap()
            .more
            .system
            .get(session)
            .cloned()
    }
}

fn route(req: &Request, state: &Shared<OpenCode>, script: &OpenCodeScript) -> Reply {
    let session = req.header("x-session-id").unwrap_or_default();
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let (chunks, note) = if req.path.ends_with("/chat/completions") {
        answer(session, &req.body, &body, state, script)
    } else {
        (Vec::new(), "not served".to_string())
    };
    let mut sse = String::new();
    for c in chunks {
        sse.push_str(&format!("data: {c}\n\n"));
    }
    sse.push_str("data: [DONE]\n\n");
    Reply::sse(sse, format!("[{session}] {note}"))
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1, "model": "stub",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
    .to_string()
}

fn text_answer(text: &str) -> Vec<String> {
    vec![
        chunk(json!({"role": "assistant", "content": text}), None),
        chunk(json!({}), Some("stop")),
    ]
}

fn call(id: &str, step: &Step) -> Vec<String> {
    let (name, args) = match step {
        Step::Bash(c) => (
            "bash".to_string(),
            json!({"command": c, "description": "e2e step"}),
        ),
        Step::Tool(name, args) => (name.clone(), args.clone()),
    };
    vec![
        chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
}

fn answer(
    session: &str,
    raw: &[u8],
    body: &Value,
    state: &Shared<OpenCode>,
    script: &OpenCodeScript,
) -> (Vec<String>, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if !has_tools {
        // The title of the session, or another side request.
        return (text_answer("e2e session"), "side request".into());
    }
    let mut outputs = BTreeMap::new();
    for m in &messages {
        if m["role"] == "tool"
            && let Some(id) = m["tool_call_id"].as_str()
        {
            outputs.insert(id.to_string(), text_of(&m["content"]));
        }
    }
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let system: String = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| text_of(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    record(state, session, raw, &outputs, |o| {
        o.system.entry(session.to_string()).or_insert(system);
    });
    // A turn nobody typed.
    if last["role"] == "user"
        && text_of(&last["content"]).contains(WAKE_MARKER)
        && let Some(cmd) = &script.wake
    {
        return (
            call("call_wake", &Step::Bash(cmd.clone())),
            "wake call".into(),
        );
    }
    if last["role"] == "tool" && last["tool_call_id"] == "call_wake" {
        return (text_answer(OPENCODE_FINAL_TEXT), "final after wake".into());
    }
    let done = (0..)
        .take_while(|i| outputs.contains_key(&format!("call_{i}")))
        .count();
    if last["role"] == "user" && done > 0 {
        // A later prompt in a session that already ran its steps.
        return (text_answer(OPENCODE_FINAL_TEXT), "final".into());
    }
    if let Some(h) = script.hold_after
        && done == h + 1
    {
        hold(state, &format!("call_{h}"), script.sessions);
    }
    match script.steps.get(done) {
        Some(step) => (call(&format!("call_{done}"), step), format!("call_{done}")),
        None => (text_answer(OPENCODE_FINAL_TEXT), "final".into()),
    }
}

/// The project's `opencode.json`: the stub as the only provider and model, every tool
/// allowed, nothing shared, no LSP or formatter downloads.
pub fn write_config(project: &Path, stub: &OpenCodeStub) {
    std::fs::write(
        project.join("opencode.json"),
        serde_json::to_string_pretty(&config_json(stub)).unwrap(),
    )
    .unwrap();
}

/// That configuration.
pub fn config_json(stub: &OpenCodeStub) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"stub": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "e2e stub",
            "options": {"baseURL": stub.base_url(), "apiKey": "e2e"},
            "models": {"m": {"name": "m", "tool_call": true}},
        }},
        "model": "stub/m",
        "small_model": "stub/m",
        "permission": "allow",
        "autoupdate": false,
        "share": "disabled",
        "lsp": false,
        "formatter": false,
    })
}

/// An `opencode` command isolated from the machine: an empty environment apart from PATH
/// (tasklock under test first), its own HOME (config, data, cache), no model list fetch
/// and no update check.
pub fn opencode_cmd(home: &Path, project: &Path) -> Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(opencode());
    cmd.env_clear()
        .env("PATH", path_with_tasklock())
        .env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("LANG", "C.UTF-8")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .current_dir(project);
    cmd
}

/// `opencode run --format json PROMPT` in the project.
pub fn run_cmd(home: &Path, project: &Path, prompt: &str) -> Command {
    let mut cmd = opencode_cmd(home, project);
    cmd.args(["run", "--format", "json", prompt]);
    cmd
}

/// The session id `opencode run --format json` printed.
pub fn session_id(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        v["sessionID"].as_str().map(str::to_string)
    })
}

/// A free loopback port (for `opencode serve --port`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `POST path` with a JSON body to the server on `port`: the status and the body.
pub fn post(
    port: u16,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let body = body.to_string();
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(timeout))?;
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    // Read until the body is whole: the server may keep the connection open.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let (head, body) = loop {
        let n = conn.read(&mut buf)?;
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let lower = head.to_ascii_lowercase();
            let length = lower.lines().find_map(|l| {
                l.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            let whole = match length {
                Some(len) => rest.len() >= len,
                None if lower.contains("transfer-encoding: chunked") => rest.ends_with("0\r\n\r\n"),
                None => n == 0,
            };
            if whole || n == 0 {
                break (head.to_string(), rest.to_string());
            }
        } else if n == 0 {
            break (text, String::new());
        }
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body))
}

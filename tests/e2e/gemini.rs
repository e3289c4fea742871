//! The real Gemini CLI (installed from npm into `target/e2e/gemini`), a loopback stub of the
//! Gemini API (`streamGenerateContent`), and a runner for headless `gemini -p` sessions.
//! See docs/e2e.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::npm_install;
use super::stub::{ModelStub, Reply, Request, Shared, hold, record, wait_for_go};

/// The Gemini CLI release these tests were written and checked against.
pub const GEMINI_VERSION: &str = "0.61.0";

/// The model the sessions ask for: naming one skips Gemini CLI's model router (a side
/// request that classifies the prompt).
pub const GEMINI_MODEL: &str = "gemini-2.5-flash";

/// The stub model's final answer.
pub const GEMINI_FINAL_TEXT: &str = "E2E-GEMINI-DONE";

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

/// The stub of the Gemini API: sessions are told apart by the agent id SessionStart's
/// context names; outputs are by step (`0`, `1`, …: the `functionResponse.response`
/// Gemini CLI sent, as JSON text).
pub type GeminiStub = ModelStub<Gemini>;

/// Gemini CLI's stub records nothing more than every stub does.
#[derive(Default)]
pub struct Gemini;

impl ModelStub<Gemini> {
    pub fn start(script: GeminiScript) -> GeminiStub {
        ModelStub::serve("", script, route)
    }
}

fn route(req: &Request, state: &Shared<Gemini>, script: &GeminiScript) -> Reply {
    if req.method == "POST" && req.path.contains(":streamGenerateContent") {
        stream_generate(&req.body, state, script)
    } else if req.method == "POST" && req.path.contains(":generateContent") {
        // A side request (a summary, a classification): a short text answer.
        let v = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "{}"}]}, "finishReason": "STOP"}]});
        Reply::json(200, v.to_string(), "side request")
    } else if req.path.contains(":countTokens") {
        Reply::json(200, br#"{"totalTokens":1}"#.to_vec(), "")
    } else {
        Reply::json(
            404,
            br#"{"error":{"code":404,"message":"not in the e2e stub"}}"#.to_vec(),
            "404",
        )
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
fn stream_generate(body: &[u8], state: &Shared<Gemini>, script: &GeminiScript) -> Reply {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Reply::json(
            400,
            br#"{"error":{"code":400,"message":"e2e stub: body is not JSON"}}"#.to_vec(),
            "bad JSON",
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
    let outputs = results
        .iter()
        .enumerate()
        .map(|(i, r)| (i.to_string(), r.clone()))
        .collect();
    record(state, &session, body, &outputs, |_| {});
    let next = results.len();
    let mut note = String::new();
    if script.wait_for_go && next == 0 {
        note = wait_for_go(state);
    }
    if let Some(i) = script.hold_after
        && next == i + 1
    {
        note = hold(state, &i.to_string(), script.sessions);
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
    Reply::sse(format!("data: {event}\r\n\r\n"), note)
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

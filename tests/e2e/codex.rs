//! The real Codex CLI (installed from npm into `target/e2e/codex`), a loopback stub of the
//! OpenAI Responses API, and a runner for `codex exec` sessions. See docs/e2e.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::stub::{ModelStub, Reply, Request, Shared, hold, record};
use super::{COMMAND_TIMEOUT, Running, npm_install, tasklock_bin};

/// The Codex CLI release these tests were written and checked against.
pub const CODEX_VERSION: &str = "0.169.0";

/// The stub model's final answer.
pub const CODEX_FINAL_TEXT: &str = "E2E-CODEX-DONE";

/// The `codex` launcher of the npm package at `CODEX_VERSION`, installed on first use.
pub fn codex() -> PathBuf {
    static CODEX: OnceLock<PathBuf> = OnceLock::new();
    CODEX.get_or_init(install_codex).clone()
}

fn install_codex() -> PathBuf {
    npm_install(
        "codex",
        "@openai/codex",
        CODEX_VERSION,
        "the Codex CLI",
        find_codex,
        "node_modules/.bin/codex does not report that version",
    )
}

/// The launcher, if it is there and reports the pinned version.
fn find_codex(prefix: &Path) -> Option<PathBuf> {
    let bin = prefix.join("node_modules/.bin/codex");
    if !bin.exists() {
        return None;
    }
    let home = tempfile::tempdir().ok()?;
    let mut cmd = Command::new(&bin);
    cmd.arg("--version").env("HOME", home.path());
    let out = Running::spawn(cmd, "codex --version").wait(COMMAND_TIMEOUT);
    (out.status.success() && out.stdout.trim() == format!("codex-cli {CODEX_VERSION}"))
        .then_some(bin)
}

// ---------------------------------------------------------------------------------------
// Stub of the Responses API
// ---------------------------------------------------------------------------------------

/// What the stub model does in every session it serves: run `commands` one per turn
/// (`exec_command` calls `call_0`, `call_1`, …), then answer `CODEX_FINAL_TEXT`. A command
/// made by [`super::Script::tool_call`] calls a tool instead: `mcp__tasklock/checkout`
/// is the function `checkout` of the namespace `mcp__tasklock`, as Codex offers the tools
/// of the MCP server `tasklock`.
#[derive(Clone, Default)]
pub struct CodexScript {
    pub commands: Vec<String>,
    /// Hold back the answer that follows the output of `commands[i]` until every one of
    /// `sessions` sessions has sent that output, or until [`CodexStub::release`].
    pub hold_after: Option<usize>,
    pub sessions: usize,
    /// Think this long before each answer that follows a command's output.
    pub pause: Duration,
    /// `(marker, command)`: in a turn whose user input carries `marker` (a message queued
    /// into the session from outside), run `command` (call `call_wake`), then answer.
    pub wake: Option<(String, String)>,
}

/// What the Codex stub records besides what every stub does.
#[derive(Default)]
pub struct Codex {
    /// The `tools` array of each session's first request, as Codex offered them.
    pub tools: BTreeMap<String, Value>,
}

/// The stub of the Responses API: sessions are told apart by `prompt_cache_key`, the
/// thread id; outputs are by call id (`call_0`, …).
pub type CodexStub = ModelStub<Codex>;

impl ModelStub<Codex> {
    pub fn start(script: CodexScript) -> CodexStub {
        ModelStub::serve("/v1", script, route)
    }

    /// The tools Codex offered each session (its first request's `tools`).
    pub fn tools(&self) -> BTreeMap<String, Value> {
        self.state.0.lock().unwrap().more.tools.clone()
    }
}

fn route(req: &Request, state: &Shared<Codex>, script: &CodexScript) -> Reply {
    match (req.method.as_str(), req.route()) {
        ("POST", "/v1/responses") => responses(&req.body, state, script),
        _ => Reply::json(
            404,
            br#"{"error":{"message":"not in the e2e stub"}}"#.to_vec(),
            "404",
        ),
    }
}

/// Answer POST /v1/responses with server-sent events: the next `exec_command` call of
/// the script, or the final message.
fn responses(body: &[u8], state: &Shared<Codex>, script: &CodexScript) -> Reply {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Reply::json(
            400,
            br#"{"error":{"message":"e2e stub: body is not JSON"}}"#.to_vec(),
            "bad JSON",
        );
    };
    let session = req["prompt_cache_key"]
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let outputs: BTreeMap<String, String> = req["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
        .filter_map(|i| {
            let output = match &i["output"] {
                Value::String(s) => s.clone(),
                // An MCP tool's result: content items (`input_text`…), one a line.
                Value::Array(items) => items
                    .iter()
                    .map(|item| match item["text"].as_str() {
                        Some(t) => t.to_string(),
                        None => item.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => other.to_string(),
            };
            Some((i["call_id"].as_str()?.to_string(), output))
        })
        .collect();
    record(state, &session, body, &outputs, |c| {
        c.tools
            .entry(session.clone())
            .or_insert_with(|| req["tools"].clone());
    });
    let next = (0..script.commands.len()).find(|j| !outputs.contains_key(&format!("call_{j}")));
    if !outputs.is_empty() {
        std::thread::sleep(script.pause);
    }
    let mut note = String::new();
    if let Some(i) = script.hold_after
        && next.map_or(script.commands.len(), |j| j) == i + 1
    {
        note = hold(state, &format!("call_{i}"), script.sessions);
    }
    // A side request of the session (the TUI's title for the thread) offers no shell: it
    // gets the final message, not a step of the script.
    let offers_shell = req["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "exec_command"));
    if !offers_shell {
        let note = format!("final message (no exec_command offered) for {session}");
        return Reply::sse(sse(&final_message()), note);
    }
    let woken = script
        .wake
        .as_ref()
        .filter(|(marker, _)| user_says(&req, marker));
    if let Some((_, command)) = woken {
        let item = if outputs.contains_key("call_wake") {
            final_message()
        } else {
            json!({
                "type": "function_call",
                "id": "fc_wake",
                "call_id": "call_wake",
                "name": "exec_command",
                "arguments": json!({"cmd": command}).to_string(),
            })
        };
        let note = if item["type"] == "message" {
            format!("final message for {session} (wake turn)")
        } else {
            format!("exec_command call_wake for {session}")
        };
        return Reply::sse(sse(&item), note);
    }
    let item = match next {
        Some(j) if custom_step(&script.commands[j]).is_some() => {
            let (name, input) = custom_step(&script.commands[j]).unwrap();
            json!({
                "type": "custom_tool_call",
                "id": format!("ctc_{j}"),
                "call_id": format!("call_{j}"),
                "name": name,
                "input": input,
            })
        }
        Some(j) if super::tool_step(&script.commands[j]).is_some() => {
            let (name, input) = super::tool_step(&script.commands[j]).unwrap();
            let mut item = json!({
                "type": "function_call",
                "id": format!("fc_{j}"),
                "call_id": format!("call_{j}"),
                "arguments": input.to_string(),
            });
            match name.split_once('/') {
                Some((namespace, name)) => {
                    item["namespace"] = json!(namespace);
                    item["name"] = json!(name);
                }
                None => item["name"] = json!(name),
            }
            item
        }
        Some(j) => json!({
            "type": "function_call",
            "id": format!("fc_{j}"),
            "call_id": format!("call_{j}"),
            "name": "exec_command",
            "arguments": json!({"cmd": script.commands[j]}).to_string(),
        }),
        None => final_message(),
    };
    let note = match next {
        Some(j) => format!("exec_command call_{j} for {session}{note}"),
        None => format!("final message for {session}{note}"),
    };
    Reply::sse(sse(&item), note)
}

/// Marks a step made by [`custom_call`].
const CUSTOM_STEP: &str = "e2e-codex-custom-tool:";

/// A step of [`CodexScript::commands`] that calls the freeform (custom) tool `name` with
/// `input` as its raw text: `apply_patch` with a patch, as Codex offers it to models whose
/// metadata says `apply_patch_tool_type: freeform`.
pub fn custom_call(name: &str, input: &str) -> String {
    format!("{CUSTOM_STEP}{name} {input}")
}

fn custom_step(step: &str) -> Option<(&str, &str)> {
    step.strip_prefix(CUSTOM_STEP)?.split_once(' ')
}

fn final_message() -> Value {
    json!({
        "type": "message",
        "id": "msg_e2e",
        "role": "assistant",
        "content": [{"type": "output_text", "text": CODEX_FINAL_TEXT}],
    })
}

/// Does a user message of the request's input carry `marker`?
fn user_says(req: &Value, marker: &str) -> bool {
    req["input"].as_array().into_iter().flatten().any(|i| {
        i["role"] == "user"
            && i["content"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["text"].as_str().is_some_and(|t| t.contains(marker)))
    })
}

/// One answer as server-sent events.
fn sse(item: &Value) -> Vec<u8> {
    let events = [
        json!({"type": "response.created", "response": {"id": "resp_e2e"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_e2e", "usage": {
            "input_tokens": 100, "input_tokens_details": null, "output_tokens": 20,
            "output_tokens_details": null, "total_tokens": 120}}}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect::<String>()
        .into_bytes()
}

// ---------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------

/// A home for one Codex session: `CODEX_HOME` (`home/.codex`) with the stub as the model
/// provider and `project` trusted (Codex reads a project's `.codex/hooks.json` only then),
/// and a login profile that puts the tasklock under test on PATH (Codex runs commands
/// through `bash -lc`, and the system profile resets PATH).
pub fn codex_home(home: &Path, project: &Path, stub: &CodexStub) {
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let project = project.canonicalize().expect("the project exists");
    let config = format!(
        r#"model = "gpt-e2e-stub"
model_provider = "stub"

[model_providers.stub]
name = "e2e stub"
base_url = "{}"
wire_api = "responses"
env_key = "E2E_STUB_API_KEY"

[projects."{}"]
trust_level = "trusted"

# The session's TMPDIR (private) is writable, not the machine's /tmp: Codex's sandbox
# protects `.git` under each writable root, and for a root without one it puts an empty
# `/tmp/.git` in place while a command runs (left behind when Codex is killed), which
# makes every directory under /tmp look like part of a repository.
[sandbox_workspace_write]
exclude_slash_tmp = true
"#,
        stub.base_url(),
        project.display()
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let bin_dir = tasklock_bin().parent().unwrap().to_path_buf();
    std::fs::write(
        home.join(".bash_profile"),
        format!(
            "export PATH='{}':\"$PATH\"\n",
            bin_dir.to_string_lossy().replace('\'', r"'\''")
        ),
    )
    .unwrap();
}

/// Make Codex offer its `apply_patch` tool to the stub model, as it does to OpenAI's
/// coding models: a model catalog (`model_catalog_json`) that describes `gpt-e2e-stub`
/// with `apply_patch_tool_type: freeform` (Codex 0.169 gives a model it does not know no
/// `apply_patch`). The stub calls it with [`custom_call`]; its PreToolUse hook gets the
/// patch in `tool_input.command`.
pub fn offer_apply_patch(home: &Path) {
    let codex_home = home.join(".codex");
    let catalog = codex_home.join("models.json");
    let model = json!({
        "slug": "gpt-e2e-stub",
        "display_name": "e2e stub",
        "base_instructions": "You are the e2e stub model.",
        "apply_patch_tool_type": "freeform",
        "shell_type": "unified_exec",
        "supported_reasoning_levels": [],
        "visibility": "list",
        "supported_in_api": true,
        "priority": 1,
        "support_verbosity": false,
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "experimental_supported_tools": [],
    });
    std::fs::write(&catalog, json!({ "models": [model] }).to_string()).unwrap();
    let config = codex_home.join("config.toml");
    let text = std::fs::read_to_string(&config).expect("codex_home wrote config.toml");
    // A top-level key: before the first table.
    let line = format!(
        "model_catalog_json = {}\n",
        Value::String(catalog.display().to_string())
    );
    std::fs::write(&config, format!("{line}{text}")).unwrap();
}

/// `codex exec` in `project`, isolated from the machine: an empty environment apart from
/// PATH (tasklock under test first, for the hooks), a temporary HOME and TMPDIR, and the
/// stub's dummy key. Hooks run without a persisted trust review
/// (`--dangerously-bypass-hook-trust`); commands run in Codex's `workspace-write` sandbox.
pub fn codex_cmd(home: &Path, project: &Path, prompt: &str) -> Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(codex());
    cmd.env_clear()
        .env("PATH", super::path_with_tasklock())
        .env("HOME", home)
        .env("CODEX_HOME", home.join(".codex"))
        .env("TMPDIR", &tmp)
        .env("LANG", "C.UTF-8")
        .env("E2E_STUB_API_KEY", "sk-e2e-dummy-key")
        .current_dir(project)
        .args([
            "exec",
            "--json",
            "--dangerously-bypass-hook-trust",
            "-s",
            "workspace-write",
            prompt,
        ]);
    cmd
}

/// The native `codex` process started by the npm launcher `launcher` (its child), which
/// runs the hooks; waits up to `timeout` for it to appear.
pub fn native_codex_pid(launcher: u32, timeout: Duration) -> Option<u32> {
    let started = Instant::now();
    loop {
        // `pgrep -P PARENT -x NAME`: the same on Linux and macOS.
        let children = std::process::Command::new("pgrep")
            .args(["-P", &launcher.to_string(), "-x", "codex"])
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

/// The thread id of a finished `codex exec --json` run (its `thread.started` event).
pub fn thread_id(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str().map(str::to_string))
}

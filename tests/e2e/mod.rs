//! End-to-end support: the real Claude Code CLI (installed from npm into `target/e2e/node`),
//! the `skills-ref` validator (installed from PyPI into `target/e2e/venv`), a loopback stub
//! of the Anthropic Messages API, and a runner for one headless Claude Code session
//! (`interactive`: one interactive session in tmux).
//!
//! Nothing here is skipped: a missing `npm`, `python3` or `git` fails the test that needs it,
//! with a message saying what to install. See docs/e2e.md.
#![allow(dead_code)]

pub mod codex;
pub mod codex_tui;
pub mod gemini;
pub mod interactive;
pub mod mcp;
pub mod opencode;
pub mod stub;
pub mod teams;

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

/// The Claude Code release these tests were written and checked against.
pub const CLAUDE_CODE_VERSION: &str = "2.1.330";
/// The Agent Skills reference validator (`agentskills` command) from PyPI.
pub const SKILLS_REF_VERSION: &str = "0.1.1";

/// Generous limits: the first run downloads about 175 MB from npm.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(180);
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long processes left in the group of a finished command may still run (the hooks'
/// own timeout is 10 s).
const STRAGGLER_GRACE: Duration = Duration::from_secs(15);

/// The stub model's final answer.
pub const FINAL_TEXT: &str = "E2E-DONE: e2e-task is checked out.";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/e2e` (next to `target/tmp`, so it follows `CARGO_TARGET_DIR`).
pub fn e2e_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().expect("target/tmp has a parent").join("e2e");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

pub fn tasklock_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tasklock"))
}

/// `PATH` with the tasklock under test first: the hooks call `tasklock` by name.
pub fn path_with_tasklock() -> String {
    let bin_dir = tasklock_bin()
        .parent()
        .expect("binary has a directory")
        .to_path_buf();
    let rest = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    format!("{}:{rest}", bin_dir.display())
}

// ---------------------------------------------------------------------------------------
// Running commands with a time limit
// ---------------------------------------------------------------------------------------

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn text(&self) -> String {
        format!(
            "status: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// A child in its own process group; the whole group is killed when this is dropped
/// (test failure, timeout), so no Claude Code or hook process outlives the test.
pub struct Running {
    child: Child,
    pgid: i32,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
    started: Instant,
    what: String,
}

impl Running {
    pub fn spawn(mut cmd: Command, what: &str) -> Running {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
        let pgid = child.id() as i32;
        let mut so = child.stdout.take().expect("piped");
        let mut se = child.stderr.take().expect("piped");
        let out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            v
        });
        let err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = se.read_to_end(&mut v);
            v
        });
        Running {
            child,
            pgid,
            out: Some(out),
            err: Some(err),
            started: Instant::now(),
            what: what.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the exit; after `timeout` kill the process group and panic.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if self.started.elapsed() > timeout => {
                    self.kill_group();
                    let _ = self.child.wait();
                    let (stdout, stderr) = self.collect();
                    panic!(
                        "{} did not finish within {timeout:?}; killed its process group.\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                        self.what
                    );
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
        };
        let elapsed = self.started.elapsed();
        // Give what it left behind (a hook still finishing) time to end, then kill the
        // rest: it would hold the pipes open.
        let grace = Instant::now();
        // SAFETY: signal 0 only checks whether a process of the group exists.
        while unsafe { libc::kill(-self.pgid, 0) } == 0 && grace.elapsed() < STRAGGLER_GRACE {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_group();
        let (stdout, stderr) = self.collect();
        Output {
            status,
            stdout,
            stderr,
            elapsed,
        }
    }

    fn kill_group(&self) {
        // SAFETY: kill has no memory-safety preconditions; ESRCH (group gone) is fine.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
    }

    fn collect(&mut self) -> (String, String) {
        let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            h.map(|h| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned())
                .unwrap_or_default()
        };
        (join(self.out.take()), join(self.err.take()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_group();
            let _ = self.child.wait();
        }
    }
}

pub fn run(cmd: Command, what: &str, timeout: Duration) -> Output {
    Running::spawn(cmd, what).wait(timeout)
}

/// Run and panic (with all output) unless it exits 0.
pub fn run_ok(cmd: Command, what: &str, timeout: Duration) -> Output {
    let out = run(cmd, what, timeout);
    assert!(out.status.success(), "{what} failed\n{}", out.text());
    out
}

/// The program must be on PATH; otherwise fail with what to install.
fn require_tool(program: &str, why: &str) {
    let found = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match found {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`{program} --version` failed ({s}); {why}"),
        Err(e) => panic!("`{program}` is not available ({e}); {why}"),
    }
}

/// An exclusive lock on a file under target/e2e, so that concurrent test threads and
/// cargo processes install only once. Released when the file is dropped.
fn install_lock(name: &str) -> File {
    let path = e2e_dir().join(name);
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // SAFETY: a valid open descriptor; flock has no other preconditions.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    f
}

// ---------------------------------------------------------------------------------------
// Installing the tools
// ---------------------------------------------------------------------------------------

/// The Claude Code CLI at `CLAUDE_CODE_VERSION`, installed from npm on first use.
pub fn claude() -> PathBuf {
    static CLAUDE: OnceLock<PathBuf> = OnceLock::new();
    CLAUDE.get_or_init(install_claude).clone()
}

fn install_claude() -> PathBuf {
    npm_install(
        "node",
        "@anthropic-ai/claude-code",
        CLAUDE_CODE_VERSION,
        "the Claude Code CLI",
        find_claude,
        "no working `claude` binary reporting that version was found (tried \
         node_modules/.bin/claude and the platform package \
         node_modules/@anthropic-ai/claude-code-*/claude)",
    )
}

/// Install `package@version` with npm into `target/e2e/<dir>` on first use, under the
/// file lock `<dir>.lock` (parallel tests install once), and return what `find` finds
/// there: it must check the installed version, so a stale install is replaced. `what` names
/// the tool in messages; `missing` says what `find` did not find.
pub fn npm_install<T>(
    dir: &str,
    package: &str,
    version: &str,
    what: &str,
    find: fn(&Path) -> Option<T>,
    missing: &str,
) -> T {
    let _lock = install_lock(&format!("{dir}.lock"));
    let prefix = e2e_dir().join(dir);
    if let Some(found) = find(&prefix) {
        return found;
    }
    require_tool(
        "npm",
        &format!(
            "the end-to-end tests install {what} with npm; install Node.js and npm (see docs/e2e.md)"
        ),
    );
    let started = Instant::now();
    eprintln!(
        "e2e: installing {package}@{version} into {} (first run only)",
        prefix.display()
    );
    std::fs::create_dir_all(&prefix).unwrap();
    let mut cmd = Command::new("npm");
    cmd.args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .arg(format!("{package}@{version}"));
    run_ok(cmd, &format!("npm install {package}"), INSTALL_TIMEOUT);
    eprintln!("e2e: npm install of {package} took {:?}", started.elapsed());
    find(&prefix).unwrap_or_else(|| {
        panic!(
            "npm installed {package}@{version} into {}, but {missing}. Remove the directory \
             and run again; see docs/e2e.md",
            prefix.display()
        )
    })
}

/// The installed binary, if it is there and reports the pinned version. The npm package's
/// postinstall links the native binary over `bin/claude.exe`; when install scripts did not
/// run, the platform package's binary is used directly.
fn find_claude(prefix: &Path) -> Option<PathBuf> {
    find_claude_at(prefix, CLAUDE_CODE_VERSION)
}

/// The oldest Claude Code release still in wide use that the plugin manifest must
/// validate on without warnings.
pub const CLAUDE_CODE_OLDEST: &str = "2.1.197";

/// The Claude Code CLI at `CLAUDE_CODE_OLDEST`, installed from npm on first use.
pub fn claude_oldest() -> PathBuf {
    static CLAUDE: OnceLock<PathBuf> = OnceLock::new();
    CLAUDE
        .get_or_init(|| {
            npm_install(
                "node-oldest",
                "@anthropic-ai/claude-code",
                CLAUDE_CODE_OLDEST,
                "the oldest supported Claude Code CLI",
                |prefix| find_claude_at(prefix, CLAUDE_CODE_OLDEST),
                "no working `claude` binary reporting that version was found",
            )
        })
        .clone()
}

fn find_claude_at(prefix: &Path, version: &str) -> Option<PathBuf> {
    let modules = prefix.join("node_modules");
    let manifest =
        std::fs::read_to_string(modules.join("@anthropic-ai/claude-code/package.json")).ok()?;
    let manifest: Value = serde_json::from_str(&manifest).ok()?;
    if manifest["version"] != version {
        return None;
    }
    let mut candidates = vec![modules.join(".bin/claude")];
    if let Ok(entries) = std::fs::read_dir(modules.join("@anthropic-ai")) {
        let mut platform: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("claude-code-"))
            })
            .map(|p| p.join("claude"))
            .collect();
        platform.sort();
        candidates.extend(platform);
    }
    let home = tempfile::tempdir().ok()?;
    candidates.into_iter().find(|bin| {
        let mut cmd = Command::new(bin);
        cmd.arg("--version")
            .env("HOME", home.path())
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        if !bin.is_file() {
            return false;
        }
        let r = Running::spawn(cmd, "claude --version");
        let out = r.wait(COMMAND_TIMEOUT);
        out.status.success() && out.stdout.trim_start().starts_with(version)
    })
}

/// `agentskills` from the PyPI package `skills-ref`, in a venv under target/e2e.
pub fn agentskills() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(install_agentskills).clone()
}

fn install_agentskills() -> PathBuf {
    let _lock = install_lock("venv.lock");
    let venv = e2e_dir().join("venv");
    let bin = venv.join("bin/agentskills");
    // A venv whose interpreter is gone (the Python it was made from was removed or
    // moved) cannot even start the script: that is "not installed", not a failure.
    let version_ok = |bin: &Path| {
        Command::new(bin)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|out| {
                out.status.success()
                    && String::from_utf8_lossy(&out.stdout).contains(SKILLS_REF_VERSION)
            })
    };
    if bin.is_file() && version_ok(&bin) {
        return bin;
    }
    let started = Instant::now();
    if !venv.join("bin/python").exists() {
        require_tool(
            "python3",
            "the skill validation test installs the PyPI package skills-ref into a venv; install Python 3 with the venv module (see docs/e2e.md)",
        );
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv"]).arg(&venv);
        run_ok(cmd, "python3 -m venv target/e2e/venv", INSTALL_TIMEOUT);
    }
    eprintln!(
        "e2e: installing skills-ref=={SKILLS_REF_VERSION} into {}",
        venv.display()
    );
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
    ])
    .arg(format!("skills-ref=={SKILLS_REF_VERSION}"));
    let out = run(cmd, "pip install skills-ref", INSTALL_TIMEOUT);
    assert!(
        out.status.success(),
        "pip install skills-ref=={SKILLS_REF_VERSION} failed (a broken venv? remove {} and run again)\n{}",
        venv.display(),
        out.text()
    );
    eprintln!("e2e: pip install took {:?}", started.elapsed());
    assert!(
        bin.is_file() && version_ok(&bin),
        "skills-ref installed, but {} is missing or does not report version {SKILLS_REF_VERSION}",
        bin.display()
    );
    bin
}

// ---------------------------------------------------------------------------------------
// Stub of the Anthropic Messages API
// ---------------------------------------------------------------------------------------

/// What the stub saw.
#[derive(Default)]
pub struct StubState {
    /// One line per request: method, path and what was answered.
    pub log: Vec<String>,
    /// Bodies of the POST /v1/messages requests, as received.
    pub bodies: Vec<String>,
    /// When each of `bodies` arrived (same order).
    pub arrived: Vec<Instant>,
    /// POST /v1/messages requests being answered right now.
    pub in_flight: usize,
    /// The last answer to the main conversation (Bash offered, not a subagent): when it
    /// was sent and whether it ended the turn (`end_turn`) rather than calling a tool.
    pub last_main: Option<(SystemTime, bool)>,
    /// The first `tool_result` block sent back for each of the stub's tool calls, by id.
    pub results: std::collections::BTreeMap<String, Value>,
}

/// What the stub model does in a session.
#[derive(Clone, Default)]
pub struct Script {
    /// Bash commands the session runs, one per turn, in this order (tool ids `main-0`, …).
    /// A step made by [`Script::tool_call`] calls another tool (an MCP tool) instead.
    pub main: Vec<String>,
    /// Subagents started after `main`, all in one message (one `Agent` tool call each, ids
    /// `agent-0`, …); each runs its Bash commands in order (ids `sub0-0`, `sub0-1`, …).
    pub subagents: Vec<Vec<String>>,
    /// Sleep this long before answering the request that carries the result of `main[i]`.
    pub pause_after: Option<(usize, Duration)>,
    /// Steps triggered by text, in the main conversation: `(trigger, Bash command)`. When
    /// what is new since the model last spoke (the user and system messages after the last
    /// assistant message, their text but not tool results) contains `trigger`, and step
    /// `i` (tool id `text-i`) has not run yet, the model runs its command; after the result
    /// it goes on as before (the next `main` step or `FINAL_TEXT`). For turns nobody typed:
    /// a message written to the session's messaging socket.
    pub on_text: Vec<(String, String)>,
}

impl Script {
    /// A step of `main` that calls tool `name` (`mcp__tasklock__checkout`) with `input`.
    pub fn tool_call(name: &str, input: Value) -> String {
        format!("{TOOL_STEP}{name} {input}")
    }

    pub fn bash(commands: &[&str]) -> Script {
        Script {
            main: commands.iter().map(|c| c.to_string()).collect(),
            ..Script::default()
        }
    }
}

/// A loopback HTTP/1.1 server answering like the Messages API. The model it plays runs
/// its [`Script`] when offered tools, then gives `FINAL_TEXT`. Every other request gets a
/// short text answer.
pub struct Stub {
    addr: SocketAddr,
    pub state: Arc<Mutex<StubState>>,
}

impl Stub {
    /// A model that runs one Bash command.
    pub fn start(tool_command: &str) -> Stub {
        Stub::script(Script::bash(&[tool_command]))
    }

    pub fn script(script: Script) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(StubState::default()));
        stub::serve_loopback(listener, Arc::clone(&state), script, route);
        Stub { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        self.state.lock().unwrap().log.join("\n")
    }

    /// The tool result for the stub's call `id`, if it came back.
    pub fn result(&self, id: &str) -> Option<Value> {
        self.state.lock().unwrap().results.get(id).cloned()
    }

    /// Wait until a POST /v1/messages request whose body contains `text` has arrived and
    /// return when the first such request arrived; `None` after `timeout`. The body is raw
    /// JSON: `text` must look the same JSON-escaped (no quotes, backslashes or non-ASCII).
    pub fn wait_for_request(&self, text: &str, timeout: Duration) -> Option<Instant> {
        self.wait_for_request_from(0, text, timeout)
    }

    /// As [`Stub::wait_for_request`], among the requests from number `first` on (see
    /// [`Stub::requests`]).
    pub fn wait_for_request_from(
        &self,
        first: usize,
        text: &str,
        timeout: Duration,
    ) -> Option<Instant> {
        wait_for_body(&self.state, first, text, timeout)
    }

    /// How many POST /v1/messages requests arrived so far.
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().bodies.len()
    }

    /// Wait until the tool result for the stub's call `id` came back; `None` after `timeout`.
    pub fn wait_for_result(&self, id: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(result) = self.result(id) {
                return Some(result);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every tool result, for failure messages.
    pub fn results_text(&self) -> String {
        self.state
            .lock()
            .unwrap()
            .results
            .iter()
            .map(|(id, v)| format!("{id}: {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// When the first request from number `first` on whose body contains `text` arrived,
/// waiting up to `timeout` for it.
pub fn wait_for_body(
    state: &Mutex<StubState>,
    first: usize,
    text: &str,
    timeout: Duration,
) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let s = state.lock().unwrap();
            if let Some(i) = (first..s.bodies.len()).find(|&i| s.bodies[i].contains(text)) {
                return Some(s.arrived[i]);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The text of a tool result, whether Claude Code sent a string or text blocks.
pub fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

impl stub::Logged for Mutex<StubState> {
    fn log_line(&self, line: String) {
        self.lock().unwrap().log.push(line);
    }
}

fn route(req: &stub::Request, state: &Mutex<StubState>, script: &Script) -> stub::Reply {
    match (req.method.as_str(), req.route()) {
        ("POST", "/v1/messages") => {
            let (status, content_type, body, note) = messages(&req.body, state, script);
            stub::Reply {
                status,
                content_type,
                body,
                note,
            }
        }
        ("POST", "/v1/messages/count_tokens") => stub::Reply::json(
            200,
            br#"{"input_tokens":100}"#.to_vec(),
            "token count",
        ),
        ("HEAD", _) => stub::Reply {
            status: 200,
            content_type: "text/plain",
            body: Vec::new(),
            note: "empty 200".into(),
        },
        _ => stub::Reply::json(
            404,
            br#"{"type":"error","error":{"type":"not_found_error","message":"not in the e2e stub"}}"#
                .to_vec(),
            "404",
        ),
    }
}

/// How a `main` step that is a tool call rather than a Bash command starts.
const TOOL_STEP: &str = "@tool:";

/// The tool name and input of a step made by [`Script::tool_call`].
pub fn tool_step(step: &str) -> Option<(&str, Value)> {
    let (name, input) = step.strip_prefix(TOOL_STEP)?.split_once(' ')?;
    Some((name, serde_json::from_str(input).ok()?))
}

/// Marks the prompt of subagent `i`, so the stub knows whose request it answers.
fn subagent_marker(i: usize) -> String {
    format!("E2E-SUBAGENT-{i}:")
}

/// The text that is new to the model: the user and system messages after the last
/// assistant message, their string content or text blocks (not tool results).
fn fresh_text(messages: &[Value]) -> String {
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .map_or(0, |i| i + 1);
    let mut text = String::new();
    for m in &messages[start..] {
        match &m["content"] {
            Value::String(s) => text.push_str(s),
            Value::Array(blocks) => {
                for b in blocks.iter().filter(|b| b["type"] == "text") {
                    text.push_str(b["text"].as_str().unwrap_or_default());
                    text.push('\n');
                }
            }
            _ => {}
        }
        text.push('\n');
    }
    text
}

/// The `on_text` step the newest messages trigger, if it has not run yet.
fn text_step(
    messages: &[Value],
    script: &Script,
    seen: &std::collections::BTreeSet<String>,
) -> Option<usize> {
    if script.on_text.is_empty() {
        return None;
    }
    let fresh = fresh_text(messages);
    (0..script.on_text.len())
        .find(|&i| !seen.contains(&format!("text-{i}")) && fresh.contains(&script.on_text[i].0))
}

/// Answer POST /v1/messages; returns (status, content type, body, log note).
fn messages(
    body: &[u8],
    state: &Mutex<StubState>,
    script: &Script,
) -> (u16, &'static str, Vec<u8>, String) {
    let req: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return (
                400,
                "application/json",
                json!({"type":"error","error":{"type":"invalid_request_error","message":format!("e2e stub: body is not JSON: {e}")}})
                    .to_string()
                    .into_bytes(),
                "bad JSON".into(),
            );
        }
    };
    let arrived = Instant::now();
    {
        let mut s = state.lock().unwrap();
        s.bodies.push(String::from_utf8_lossy(body).into_owned());
        s.arrived.push(arrived);
        s.in_flight += 1;
    }
    let offers = |name: &str| {
        req["tools"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| t["name"] == name))
    };
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    // Results of the stub's own calls in this conversation, by id.
    let mut seen = std::collections::BTreeSet::new();
    {
        let mut s = state.lock().unwrap();
        for block in messages
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
        {
            let id = block["tool_use_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            seen.insert(id.clone());
            s.results.entry(id).or_insert_with(|| block.clone());
        }
    }
    // Whose conversation: a subagent's starts with its marker.
    let first = messages
        .first()
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let who = (0..script.subagents.len()).find(|&i| first.contains(&subagent_marker(i)));
    let bash = |id: String, command: &str| {
        if let Some((name, input)) = tool_step(command) {
            return json!({"type": "tool_use", "id": id, "name": name, "input": input});
        }
        json!({
            "type": "tool_use",
            "id": id,
            "name": "Bash",
            "input": {"command": command, "description": "tasklock (e2e)"}
        })
    };
    let (content, stop, note): (Vec<Value>, &str, String) = match who {
        Some(i) => {
            match (0..script.subagents[i].len()).find(|&j| !seen.contains(&format!("sub{i}-{j}"))) {
                Some(j) if offers("Bash") => (
                    vec![bash(format!("sub{i}-{j}"), &script.subagents[i][j])],
                    "tool_use",
                    format!("subagent {i}: Bash {j}"),
                ),
                _ => (
                    vec![json!({"type": "text", "text": format!("subagent {i} done")})],
                    "end_turn",
                    format!("subagent {i}: final text"),
                ),
            }
        }
        None if !offers("Bash") => (
            vec![json!({"type": "text", "text": "ok"})],
            "end_turn",
            "plain text (no Bash tool offered)".into(),
        ),
        None if text_step(&messages, script, &seen).is_some() => {
            let i = text_step(&messages, script, &seen).expect("just found");
            (
                vec![bash(format!("text-{i}"), &script.on_text[i].1)],
                "tool_use",
                format!("Bash text-{i} (on {:?})", script.on_text[i].0),
            )
        }
        None => {
            let next = (0..script.main.len()).find(|&j| !seen.contains(&format!("main-{j}")));
            if let Some((after, pause)) = script.pause_after
                && next.map_or(script.main.len(), |j| j) == after + 1
                && seen.contains(&format!("main-{after}"))
                && !state
                    .lock()
                    .unwrap()
                    .log
                    .iter()
                    .any(|l| l.contains("paused"))
            {
                state
                    .lock()
                    .unwrap()
                    .log
                    .push(format!("paused {pause:?} after main-{after}"));
                std::thread::sleep(pause);
            }
            match next {
                Some(j) => (
                    vec![bash(format!("main-{j}"), &script.main[j])],
                    "tool_use",
                    format!("Bash main-{j}"),
                ),
                None if !script.subagents.is_empty()
                    && offers("Agent")
                    && !seen.contains("agent-0") =>
                {
                    let calls = (0..script.subagents.len())
                        .map(|i| {
                            json!({
                                "type": "tool_use",
                                "id": format!("agent-{i}"),
                                "name": "Agent",
                                "input": {
                                    "description": format!("e2e subagent {i}"),
                                    "prompt": format!("{} run your tasklock commands", subagent_marker(i)),
                                    "subagent_type": "general-purpose"
                                }
                            })
                        })
                        .collect();
                    (calls, "tool_use", "Agent tool calls".into())
                }
                None => (
                    vec![json!({"type": "text", "text": FINAL_TEXT})],
                    "end_turn",
                    "final text".into(),
                ),
            }
        }
    };
    let stream = req["stream"].as_bool().unwrap_or(false);
    {
        let mut s = state.lock().unwrap();
        s.in_flight -= 1;
        if who.is_none() && offers("Bash") {
            s.last_main = Some((SystemTime::now(), stop == "end_turn"));
        }
    }
    let note = format!(
        "{note} (stream={stream}, tools={}, messages={})",
        req["tools"].as_array().map_or(0, Vec::len),
        req["messages"].as_array().map_or(0, Vec::len)
    );
    let model = req["model"].as_str().unwrap_or("claude-e2e-stub");
    let message = json!({
        "id": "msg_e2e",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20}
    });
    if !stream {
        return (
            200,
            "application/json",
            message.to_string().into_bytes(),
            note,
        );
    }
    (200, "text/event-stream", sse(&message).into_bytes(), note)
}

/// The Messages API streaming events for a complete message.
fn sse(message: &Value) -> String {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![json!({"type": "message_start", "message": start})];
    for (index, block) in message["content"].as_array().unwrap().iter().enumerate() {
        let (empty, delta) = if block["type"] == "tool_use" {
            (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            )
        };
        events.push(json!({"type": "content_block_start", "index": index, "content_block": empty}));
        events.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}
    }));
    events.push(json!({"type": "message_stop"}));
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Projects and sessions
// ---------------------------------------------------------------------------------------

/// A new random UUID (version 4), for `--session-id`.
pub fn uuid() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Start time of a process, the same value tasklock records as `pid_start`.
pub fn start_time(pid: u32) -> Option<u64> {
    tasklock::os::start_time(pid)
}

/// A throwaway git repository in `parent/project`.
pub fn git_project(parent: &Path) -> PathBuf {
    require_tool(
        "git",
        "the end-to-end tests create a throwaway git repository",
    );
    let project = parent.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut cmd = Command::new("git");
    cmd.args(["init", "-q"])
        .current_dir(&project)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    run_ok(cmd, "git init", COMMAND_TIMEOUT);
    project
}

/// `tasklock init` in the project, with no identity from the environment.
pub fn tasklock_init(project: &Path) -> Output {
    let mut cmd = Command::new(tasklock_bin());
    // Every client the end-to-end tests run, whatever is on PATH.
    cmd.args(["init", "--client", "claude,codex,gemini,opencode"])
        .current_dir(project)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_AGENT_NAME")
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    run_ok(cmd, "tasklock init", COMMAND_TIMEOUT)
}

/// A `claude` command isolated from the machine: an empty environment apart from PATH
/// (tasklock under test first), a temporary HOME and TMPDIR, the stub as the API, and
/// no auto-update, telemetry or other non-essential traffic.
pub fn claude_cmd(home: &Path, api: Option<&Stub>) -> Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(claude());
    cmd.env_clear()
        .env("PATH", path_with_tasklock())
        .env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("CLAUDE_CODE_TMPDIR", &tmp)
        .env("LANG", "C.UTF-8")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL", "1");
    if let Some(stub) = api {
        cmd.env("ANTHROPIC_BASE_URL", stub.base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-e2e-dummy-key");
    }
    cmd
}

pub struct Session {
    pub id: String,
    /// The pid of the `claude` process this test spawned.
    pub pid: u32,
    /// Its start time, read from /proc right after the spawn.
    pub pid_start: Option<u64>,
    pub out: Output,
    /// The `--output-format json` result.
    pub result: Value,
}

/// Run one headless session in `project` that is allowed to run `tasklock` commands.
pub fn run_session(home: &Path, project: &Path, stub: &Stub, prompt: &str) -> Session {
    let mut cmd = claude_cmd(home, Some(stub));
    // An untrusted directory: Claude Code ignores the project's permissions, so pass the
    // rules `tasklock init` writes, as the README tells headless users to.
    cmd.arg("--allowedTools").args(allowed_rules());
    session(cmd, project, prompt)
}

/// As [`run_session`], with more arguments for `claude` (`--allowedTools Edit`, …).
pub fn run_session_with(
    home: &Path,
    project: &Path,
    stub: &Stub,
    prompt: &str,
    extra: &[&str],
) -> Session {
    let mut cmd = claude_cmd(home, Some(stub));
    cmd.arg("--allowedTools").args(allowed_rules()).args(extra);
    session(cmd, project, prompt)
}

/// A session in a project its user trusted (as after answering Claude Code's trust
/// dialog): the permissions are exactly what `.claude/settings.json` says.
pub fn run_trusted_session(home: &Path, project: &Path, stub: &Stub, prompt: &str) -> Session {
    trust(home, project);
    session(claude_cmd(home, Some(stub)), project, prompt)
}

/// Mark `project` trusted in `home/.claude.json`, as the trust dialog does.
pub fn trust(home: &Path, project: &Path) {
    let path = home.join(".claude.json");
    let mut doc: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    let project = project.canonicalize().expect("the project exists");
    doc["projects"][project.to_string_lossy().as_ref()]["hasTrustDialogAccepted"] = json!(true);
    std::fs::write(&path, doc.to_string()).expect("write .claude.json");
}

/// The permission rules `tasklock init` writes.
pub fn allowed_rules() -> Vec<String> {
    let template: Value =
        serde_json::from_str(include_str!("../../templates/claude-settings.json")).unwrap();
    template["permissions"]["allow"]
        .as_array()
        .expect("the template allows rules")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Did Claude Code refuse to run a command (rather than run it)?
pub fn refused(result_text: &str) -> bool {
    [
        "requires approval",
        "needs approval",
        "can't be checked",
        "has been denied",
    ]
    .iter()
    .any(|n| result_text.contains(n))
}

pub fn session(mut cmd: Command, project: &Path, prompt: &str) -> Session {
    let id = uuid();
    cmd.current_dir(project)
        .args(["-p", prompt, "--session-id", &id, "--output-format", "json"]);
    let running = Running::spawn(cmd, "claude -p (e2e session)");
    let pid = running.pid();
    // The child is not reaped before `wait`, so this works even if it already exited.
    let pid_start = start_time(pid);
    let out = running.wait(SESSION_TIMEOUT);
    let context = || out.text();
    assert!(out.status.success(), "claude -p failed\n{}", context());
    let result: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "claude --output-format json printed no JSON result ({e})\n{}",
            context()
        )
    });
    Session {
        id,
        pid,
        pid_start,
        out,
        result,
    }
}

pub fn audit(locks: &Path) -> Vec<Value> {
    std::fs::read_to_string(locks.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

/// Everything one session must leave behind when tasklock's hooks ran in it: registered
/// with the session id and the Claude Code pid, the checkout made under that identity,
/// heartbeats after the tool call, and the checkout released by SessionEnd.
pub fn assert_session_lifecycle(session: &Session, project: &Path, stub: &Stub) {
    let locks = project.join(".locks");
    let sid = &session.id;
    let audit = audit(&locks);
    let agent_path = locks.join("agents").join(sid);
    let agent_text = std::fs::read_to_string(&agent_path).unwrap_or_default();
    let context = format!(
        "{}\n--- API requests seen by the stub\n{}\n--- audit.jsonl\n{}\n--- {}\n{agent_text}",
        session.out.text(),
        stub.log(),
        audit
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        agent_path.display()
    );

    // The session ran to the end: tool call, tool result, final answer.
    assert_eq!(
        session.result["session_id"], *sid,
        "the result is for another session\n{context}"
    );
    assert_eq!(
        session.result["result"], FINAL_TEXT,
        "the session did not end with the stub's final answer\n{context}"
    );
    assert_eq!(
        session.result["permission_denials"],
        json!([]),
        "Claude Code denied a tool call\n{context}"
    );
    let result = stub.result("main-0").unwrap_or_else(|| {
        panic!("the stub never got the tool_result of its Bash call\n{context}")
    });
    // Claude Code marks a non-zero exit as an error: exit 0 means the checkout was granted.
    let result_text = result["content"].to_string();
    assert!(
        result["is_error"] != json!(true) && result_text.contains("e2e-task"),
        "`tasklock checkout e2e-task` did not succeed in the session: {result}\n{context}"
    );

    // SessionStart's additionalContext reached the model.
    let marker = format!("this session is agent `{sid}`");
    assert!(
        stub.state
            .lock()
            .unwrap()
            .bodies
            .iter()
            .any(|b| b.contains(&marker)),
        "no request to the model carried the SessionStart context {marker:?}\n{context}"
    );

    // SessionStart registered the agent: id = session id, pid = the claude process.
    let agent: Value = serde_json::from_str(&agent_text).unwrap_or_else(|e| {
        panic!(
            "SessionStart did not register the agent: {} is missing or not JSON ({e})\n{context}",
            agent_path.display()
        )
    });
    assert_eq!(agent["id"], *sid, "{context}");
    assert_eq!(agent["status"], "session started", "{context}");
    assert_eq!(
        agent["pid"],
        json!(session.pid),
        "the registered pid is not the claude process the test spawned ({})\n{context}",
        session.pid
    );
    assert_eq!(
        agent["pid_start"],
        json!(
            session
                .pid_start
                .expect("read the start time of the claude process")
        ),
        "the registered pid_start is not the start time of the claude process\n{context}"
    );

    // The checkout was made under the session's identity.
    let acquire = audit
        .iter()
        .find(|e| e["event"] == "acquire" && e["key"] == "e2e-task")
        .unwrap_or_else(|| panic!("no acquire of e2e-task in audit.jsonl\n{context}"));
    assert_eq!(
        acquire["agent"], *sid,
        "e2e-task was checked out by another identity\n{context}"
    );

    // PostToolUse beat after the tool ran. SessionStart and UserPromptSubmit beat before
    // the model is asked, so a heartbeat at or after the acquire is PostToolUse's.
    let beats = agent["heartbeats"].as_u64().unwrap_or(0);
    assert!(
        beats >= 2,
        "expected at least 2 heartbeats (SessionStart, PostToolUse), found {beats}\n{context}"
    );
    let last = agent["last_heartbeat"].as_str().unwrap_or_default();
    let acquired = acquire["ts"].as_str().unwrap_or_default();
    assert!(
        time(last) >= time(acquired),
        "the last heartbeat ({last}) is before the checkout ({acquired}): PostToolUse did not beat\n{context}"
    );

    // SessionEnd released the checkout and ended the agent.
    let release = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "e2e-task")
        .unwrap_or_else(|| panic!("no auto_release of e2e-task in audit.jsonl\n{context}"));
    assert_eq!(release["agent"], *sid, "{context}");
    assert_eq!(release["reason"], "session_end", "{context}");
    assert_eq!(agent["ended_reason"], "session_end", "{context}");
    assert!(
        !locks.join("keys/e2e-task").exists(),
        "the record of e2e-task is still there\n{context}"
    );
    let mut cmd = Command::new(tasklock_bin());
    cmd.args(["status", "e2e-task", "--json", "--dir"])
        .arg(&locks)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    let status = run_ok(cmd, "tasklock status e2e-task", COMMAND_TIMEOUT);
    let status: Value = serde_json::from_str(&status.stdout).expect("status --json");
    assert_eq!(
        status["outcome"], "free",
        "e2e-task is not free after the session\n{context}"
    );
}

/// RFC 3339 UTC timestamps as written by tasklock, comparable as instants.
fn time(ts: &str) -> chrono::DateTime<chrono::Utc> {
    ts.parse()
        .unwrap_or_else(|e| panic!("not an RFC 3339 time {ts:?}: {e}"))
}

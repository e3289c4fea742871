//! Agent teams with the real Claude Code CLI: a lead session in tmux, started with
//! `CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1` and `--teammate-mode tmux` as Claude Code's
//! docs say, whose teammates are `claude` processes of their own in panes of the same tmux
//! server; and a stub model that plays the lead and each teammate.
//!
//! What Claude Code 2.1.330 needs for it (docs/e2e.md):
//! - an interactive session: `claude -p` makes no team (teammates are refused);
//! - the panes get the tmux server's environment, not the lead's, so the server itself is
//!   started with exactly the session's environment (the stub's address, the home);
//! - its Task tools (`TaskCreate`, `TaskUpdate`) are off for a model it does not know, as
//!   the stub's is: `CLAUDE_CODE_ENABLE_TODO_TOOLS=1` turns them on.
//!
//! The stub: the lead creates task #1 and spawns the teammates (`Agent` with a `name`),
//! each teammate's first request carries its marker (`E2E-MATE-i:`), and each teammate
//! runs its [`MateStep`]s. A step may wait at a gate: its answer is held until the test
//! (or every teammate reaching that step) opens it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::interactive::{answer_first_run_dialogs, descendants, require_tmux, shell_quote, tmux};
use super::stub::{self, Reply, Request};
use super::{claude, claude_cmd};

/// The task the lead creates.
pub const TASK_SUBJECT: &str = "fix the parser";
const MATE_MARKER: &str = "E2E-MATE-";

/// What a teammate's model does at one step.
#[derive(Clone, Debug)]
pub struct MateStep {
    /// The `TaskUpdate` input.
    pub update: Value,
    /// Hold the answer until the gate opens: `All` when every teammate is at a gated
    /// step, `Test` when the test calls [`TeamStub::open`].
    pub gate: Gate,
    /// Run only if the previous step's result was not an error.
    pub if_granted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    None,
    All,
    Test,
}

/// What the stub saw.
#[derive(Default)]
pub struct Seen {
    pub log: Vec<String>,
    /// The first `tool_result` for each of the stub's calls, by id (`mate0-0`, …).
    pub results: BTreeMap<String, Value>,
    /// Teammates waiting at a gate, by gate.
    waiting: BTreeMap<String, BTreeSet<usize>>,
    /// Gates opened by the test.
    opened: BTreeSet<usize>,
}

type State = (Mutex<Seen>, Condvar);

impl stub::Logged for State {
    fn log_line(&self, line: String) {
        self.0.lock().unwrap().log.push(line);
    }
}

struct Script {
    mates: Vec<Vec<MateStep>>,
    /// How many teammates have a step at `Gate::All`.
    at_all: usize,
}

/// The stub model of a team.
pub struct TeamStub {
    addr: std::net::SocketAddr,
    pub state: Arc<State>,
}

impl TeamStub {
    pub fn start(mates: Vec<Vec<MateStep>>) -> TeamStub {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state: Arc<State> = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let at_all = mates
            .iter()
            .filter(|steps| steps.iter().any(|s| s.gate == Gate::All))
            .count();
        stub::serve_loopback(
            listener,
            Arc::clone(&state),
            Script { mates, at_all },
            answer,
        );
        TeamStub { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Let teammate `mate`'s gated step go on.
    pub fn open(&self, mate: usize) {
        self.state.0.lock().unwrap().opened.insert(mate);
        self.state.1.notify_all();
    }

    /// The result of call `id`, waiting up to `timeout`.
    pub fn wait_for_result(&self, id: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let mut seen = self.state.0.lock().unwrap();
        loop {
            if let Some(r) = seen.results.get(id) {
                return Some(r.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            seen = self.state.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// Everything it saw, for failure messages.
    pub fn dump(&self) -> String {
        let s = self.state.0.lock().unwrap();
        let results: Vec<String> = s.results.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!(
            "--- stub requests\n{}\n--- tool results\n{}",
            s.log.join("\n"),
            results.join("\n")
        )
    }
}

fn answer(req: &Request, state: &State, script: &Script) -> Reply {
    match (req.method.as_str(), req.route()) {
        ("POST", "/v1/messages") => messages(req, state, script),
        ("POST", "/v1/messages/count_tokens") => {
            Reply::json(200, br#"{"input_tokens":100}"#.to_vec(), "token count")
        }
        ("HEAD", _) => Reply::json(200, Vec::new(), "empty 200"),
        _ => Reply::json(404, br#"{"type":"error","error":{"type":"not_found_error","message":"not in the e2e stub"}}"#.to_vec(), "404"),
    }
}

/// The stub's calls in this conversation that have a result, recorded in `state`.
fn results(messages: &[Value], state: &State) -> BTreeMap<String, Value> {
    let mut found = BTreeMap::new();
    for b in messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
    {
        found.insert(
            b["tool_use_id"].as_str().unwrap_or_default().to_string(),
            b.clone(),
        );
    }
    let mut s = state.0.lock().unwrap();
    for (id, r) in &found {
        s.results.entry(id.clone()).or_insert_with(|| r.clone());
    }
    drop(s);
    state.1.notify_all();
    found
}

fn messages(req: &Request, state: &State, script: &Script) -> Reply {
    let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
        return Reply::json(400, b"{}".to_vec(), "bad JSON");
    };
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let seen = results(&messages, state);
    let offered = |name: &str| {
        body["tools"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| t["name"] == name))
    };
    let first = messages
        .first()
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let who = (0..script.mates.len()).find(|i| first.contains(&format!("{MATE_MARKER}{i}:")));
    let (content, note) = if !offered("Bash") {
        (vec![text("ok")], "plain text".to_string())
    } else {
        match who {
            None => lead(&seen, script.mates.len()),
            Some(i) => mate(i, script, &seen, state),
        }
    };
    let stop = if content.iter().any(|c| c["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let message = json!({
        "id": "msg_e2e", "type": "message", "role": "assistant",
        "model": body["model"].as_str().unwrap_or("claude-e2e-stub"),
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20}
    });
    if body["stream"].as_bool().unwrap_or(false) {
        Reply::sse(super::sse(&message).into_bytes(), note)
    } else {
        Reply::json(200, message.to_string().into_bytes(), note)
    }
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn call(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// The lead: create the task, then spawn every teammate at once.
fn lead(seen: &BTreeMap<String, Value>, mates: usize) -> (Vec<Value>, String) {
    if !seen.contains_key("lead-task") {
        let input = json!({"subject": TASK_SUBJECT, "description": "e2e task"});
        return (
            vec![call("lead-task", "TaskCreate", input)],
            "lead: TaskCreate".into(),
        );
    }
    if !seen.contains_key("lead-spawn-0") {
        let calls = (0..mates)
            .map(|i| {
                let input = json!({
                    "description": format!("mate {i}"),
                    "prompt": format!("{MATE_MARKER}{i}: claim task 1"),
                    "name": format!("mate{i}"),
                    "subagent_type": "general-purpose",
                });
                call(&format!("lead-spawn-{i}"), "Agent", input)
            })
            .collect();
        return (calls, "lead: spawn the teammates".into());
    }
    (vec![text("lead done")], "lead: final text".into())
}

/// Teammate `i`: its next step, held at its gate.
fn mate(
    i: usize,
    script: &Script,
    seen: &BTreeMap<String, Value>,
    state: &State,
) -> (Vec<Value>, String) {
    let steps = &script.mates[i];
    let Some(j) = (0..steps.len()).find(|j| !seen.contains_key(&format!("mate{i}-{j}"))) else {
        return (
            vec![text(&format!("mate{i} done"))],
            format!("mate{i}: final text"),
        );
    };
    let step = &steps[j];
    if step.if_granted && j > 0 && seen[&format!("mate{i}-{}", j - 1)]["is_error"] == true {
        return (
            vec![text(&format!("mate{i} refused"))],
            format!("mate{i}: refused, stops"),
        );
    }
    hold(i, step.gate, script.at_all, state);
    let id = format!("mate{i}-{j}");
    (
        vec![call(&id, "TaskUpdate", step.update.clone())],
        format!("mate{i}: TaskUpdate {j}"),
    )
}

/// Wait at the gate (at most [`stub::HOLD_LIMIT`]); `Gate::All` opens when `at_all`
/// teammates wait at it.
fn hold(i: usize, gate: Gate, at_all: usize, state: &State) {
    let deadline = Instant::now() + stub::HOLD_LIMIT;
    let mut s = state.0.lock().unwrap();
    let key = format!("{gate:?}");
    s.waiting.entry(key.clone()).or_default().insert(i);
    state.1.notify_all();
    loop {
        let open = match gate {
            Gate::None => true,
            Gate::Test => s.opened.contains(&i),
            Gate::All => s.waiting[&key].len() >= at_all,
        };
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return;
        };
        if open {
            return;
        }
        s = state.1.wait_timeout(s, left).unwrap().0;
    }
}

// ---------------------------------------------------------------------------------------
// The lead session in tmux
// ---------------------------------------------------------------------------------------

/// The lead `claude` in a tmux server of its own, started with exactly the session's
/// environment (which its teammates' panes then get). Dropping it kills every process of
/// the server's panes, then the server.
pub struct Team {
    home: PathBuf,
    socket: PathBuf,
}

impl Team {
    pub fn start(home: &Path, project: &Path, stub: &TeamStub) -> Team {
        require_tmux();
        answer_first_run_dialogs(home, project);
        let mut cmd = claude_cmd(home, None);
        cmd.env("ANTHROPIC_BASE_URL", stub.base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-e2e-dummy-key")
            .env("CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS", "1")
            .env("CLAUDE_CODE_ENABLE_TODO_TOOLS", "1")
            .env("TERM", "xterm-256color");
        let (launcher, conf) = super::interactive::tmux_launcher(
            home,
            "lead.sh",
            &format!(
                "exec {} --permission-mode default --teammate-mode tmux",
                shell_quote(&claude().to_string_lossy())
            ),
        );
        let team = Team {
            home: home.to_path_buf(),
            socket: home.join("tmux.sock"),
        };
        let mut server = std::process::Command::new("tmux");
        server.env_clear();
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                server.env(k, v);
            }
        }
        server
            .arg("-S")
            .arg(&team.socket)
            .arg("-f")
            .arg(&conf)
            .args([
                "new-session",
                "-d",
                "-s",
                "lead",
                "-x",
                "200",
                "-y",
                "50",
                "-c",
            ])
            .arg(project)
            .arg(&launcher);
        let out = server.output().expect("run tmux");
        assert!(out.status.success(), "tmux new-session: {out:?}");
        team
    }

    fn screen(&self) -> String {
        tmux(&self.socket, &["capture-pane", "-p", "-J", "-t", "lead"]).unwrap_or_default()
    }

    /// Every pane's screen, for failure messages.
    pub fn screens(&self) -> String {
        let panes =
            tmux(&self.socket, &["list-panes", "-a", "-F", "#{pane_id}"]).unwrap_or_default();
        panes
            .lines()
            .map(|p| {
                let s =
                    tmux(&self.socket, &["capture-pane", "-p", "-J", "-t", p]).unwrap_or_default();
                format!("--- pane {p}\n{}", s.trim_end())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Type the prompt once the input box is drawn, pressing Enter again while the text
    /// still waits in it.
    pub fn type_prompt(&self, text: &str, stub: &TeamStub) {
        let ready = Instant::now() + Duration::from_secs(60);
        while !self.screen().contains('❯') && Instant::now() < ready {
            std::thread::sleep(Duration::from_millis(200));
        }
        tmux(&self.socket, &["send-keys", "-t", "lead", "-l", text]).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tmux(&self.socket, &["send-keys", "-t", "lead", "Enter"]).unwrap();
            if stub
                .wait_for_result("lead-task", Duration::from_secs(10))
                .is_some()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the lead never created the task\n{}\n{}",
                self.screens(),
                stub.dump()
            );
            let input = self.screen();
            if !input
                .lines()
                .any(|l| l.trim_start().starts_with('❯') && l.contains(text))
            {
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    }

    /// The team's name (`~/.claude/teams/NAME`), once there is one.
    pub fn team_name(&self) -> String {
        let dir = self.home.join(".claude/teams");
        let entries: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            entries.len(),
            1,
            "one team in {}: {entries:?}",
            dir.display()
        );
        entries[0].clone()
    }

    /// The `claude` process of teammate `name`: the one started with `--agent-name NAME
    /// --team-name TEAM`.
    pub fn teammate_pid(&self, name: &str) -> Option<u32> {
        let team = self.team_name();
        let want = |argv: &[String], flag: &str, value: &str| {
            argv.windows(2).any(|w| w[0] == flag && w[1] == value)
        };
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_claude = argv.first().is_some_and(|a| a.contains("claude"));
            (is_claude && want(&argv, "--agent-name", name) && want(&argv, "--team-name", &team))
                .then_some(pid)
        })
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        // Claude Code outlives its pane's hangup: kill the server's every descendant (the
        // lead, the teammates and what they started) and their groups, then the server.
        let server = tmux(
            &self.socket,
            &["display-message", "-p", "-t", "lead", "#{pid}"],
        )
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok());
        if let Some(server) = server {
            for (pid, pgid) in descendants(server) {
                // SAFETY: kill has no memory-safety preconditions; ESRCH is fine.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                    libc::kill(-(pgid as i32), libc::SIGKILL);
                }
            }
        }
        let _ = tmux(&self.socket, &["kill-server"]);
        if let Some(server) = server {
            // SAFETY: as above.
            unsafe {
                libc::kill(server as i32, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

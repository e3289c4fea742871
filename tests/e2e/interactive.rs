//! An interactive Claude Code session (the TUI, not `claude -p`) that can sit really
//! idle: it runs inside a detached tmux session on a tmux server of its own, is typed
//! into with `tmux send-keys`, and is watched through its sessions file
//! (`~/.claude/sessions/<pid>.json`) and the stub's requests.
//!
//! The messaging socket Claude Code binds for every session is in the sessions file
//! (`messagingSocketPath`): a line written to it starts a turn in an idle session, which
//! is what [`InteractiveSession::socket`] is for.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::{Stub, StubState, claude_cmd, uuid, wait_for_body};

/// The dummy API key `claude_cmd` passes; Claude Code asks once whether to use a key from
/// the environment, remembering the answer by the key's last 20 characters.
const API_KEY: &str = "sk-ant-e2e-dummy-key";
/// The tmux session's name, on the session's own tmux server.
const TMUX_SESSION: &str = "claude";

/// `claude` in a detached tmux session on a tmux server of its own (socket in the
/// session's HOME). Dropping it kills the tmux server and the claude process group, also
/// when the test panics.
pub struct InteractiveSession {
    home: PathBuf,
    tmux_socket: PathBuf,
    session_id: String,
    stub: Arc<Mutex<StubState>>,
    /// The claude process, once found (pane pid).
    pane_pid: Option<u32>,
}

impl InteractiveSession {
    /// Start `claude` interactively in `project` with the environment of
    /// `claude_cmd(home, Some(stub))` and `extra_args`. It gets `--session-id` (a fresh
    /// one unless `extra_args` has one) and `--permission-mode default` unless
    /// `extra_args` says otherwise: a fresh install's auto mode cannot reach its safety
    /// classifier through the stub and would ask before every tool call. Pass allow rules
    /// (`--allowedTools Bash`) for the commands the stub runs. The first-run dialogs
    /// (onboarding, the API key, trusting `project`) are answered in `home/.claude.json`.
    pub fn start(home: &Path, project: &Path, stub: &Stub, extra_args: &[&str]) -> Self {
        require_tmux();
        answer_first_run_dialogs(home, project);
        let mut args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        let session_id = match args.iter().position(|a| a == "--session-id") {
            Some(i) => args
                .get(i + 1)
                .expect("--session-id needs a value")
                .to_string(),
            None => {
                let id = uuid();
                args.extend(["--session-id".to_string(), id.clone()]);
                id
            }
        };
        if !args.iter().any(|a| a.starts_with("--permission-mode")) {
            args.extend(["--permission-mode".into(), "default".into()]);
        }

        // A launcher script: `env -i` with exactly claude_cmd's environment, so nothing of
        // the tmux server's environment reaches claude.
        let mut cmd = claude_cmd(home, Some(stub));
        cmd.args(&args);
        let mut line = String::from("exec env -i");
        for (key, value) in cmd.get_envs() {
            if let Some(value) = value {
                line.push(' ');
                line.push_str(&shell_quote(&format!(
                    "{}={}",
                    key.to_string_lossy(),
                    value.to_string_lossy()
                )));
            }
        }
        line.push_str(" TERM=xterm-256color ");
        line.push_str(&shell_quote(&cmd.get_program().to_string_lossy()));
        for arg in cmd.get_args() {
            line.push(' ');
            line.push_str(&shell_quote(&arg.to_string_lossy()));
        }
        let launcher = home.join("claude-in-tmux.sh");
        std::fs::write(&launcher, format!("#!/bin/sh\n{line}\n")).expect("write the launcher");
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
        // The pane stays after claude exits, so its last screen can still be captured.
        let conf = home.join("tmux.conf");
        std::fs::write(
            &conf,
            "set -g remain-on-exit on\nset -g history-limit 10000\n",
        )
        .expect("write tmux.conf");

        let session = InteractiveSession {
            home: home.to_path_buf(),
            tmux_socket: home.join("tmux.sock"),
            session_id,
            stub: Arc::clone(&stub.state),
            pane_pid: None,
        };
        let project = project.to_string_lossy().into_owned();
        let launcher = launcher.to_string_lossy().into_owned();
        let conf = conf.to_string_lossy().into_owned();
        session.tmux_ok(&[
            "-f",
            &conf,
            "new-session",
            "-d",
            "-s",
            TMUX_SESSION,
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            &project,
            &launcher,
        ]);
        let mut session = session;
        let pid = session
            .tmux_ok(&["display-message", "-p", "-t", TMUX_SESSION, "#{pane_pid}"])
            .trim()
            .parse()
            .expect("tmux prints the pane's pid");
        session.pane_pid = Some(pid);
        session
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The session's entry in `~/.claude/sessions/`, waiting up to `timeout` for it.
    pub fn sessions_file(&self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(entry) = self.find_sessions_file() {
                return entry;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "no entry for session {} in {} after {timeout:?}",
                    self.session_id,
                    self.home.join(".claude/sessions").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn find_sessions_file(&self) -> Option<Value> {
        let dir = self.home.join(".claude/sessions");
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|t| serde_json::from_str::<Value>(&t).ok())
            .find(|v| v["sessionId"] == self.session_id.as_str())
    }

    /// The claude process (from its sessions file; it is also the tmux pane's process).
    pub fn pid(&self) -> u32 {
        let entry = self.sessions_file(Duration::from_secs(60));
        entry["pid"].as_u64().expect("the sessions file has a pid") as u32
    }

    /// The session's messaging socket (`messagingSocketPath`), waiting up to 60 s for the
    /// session to list it and for the socket to exist.
    pub fn socket(&self) -> PathBuf {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(path) = self
                .find_sessions_file()
                .and_then(|e| e["messagingSocketPath"].as_str().map(PathBuf::from))
                && path.exists()
            {
                return path;
            }
            if Instant::now() >= deadline {
                self.fail("the session listed no messaging socket within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Type `text` into the prompt and press Enter; returns once the stub has the request
    /// carrying it (Enter is pressed again every 10 s while the text is still in the input
    /// box, e.g. when the TUI was still starting). `text` must be plain (see
    /// [`Stub::wait_for_request`]) and fit on one line of the input box.
    pub fn type_prompt(&self, text: &str) {
        // Ready for input: it registered itself, and the input box is drawn.
        self.sessions_file(Duration::from_secs(60));
        let ready = Instant::now() + Duration::from_secs(20);
        while !self.screen().contains('❯') && Instant::now() < ready {
            std::thread::sleep(Duration::from_millis(100));
        }
        let first = self.stub_requests();
        self.tmux_ok(&["send-keys", "-t", TMUX_SESSION, "-l", text]);
        std::thread::sleep(Duration::from_millis(300));
        let deadline = Instant::now() + Duration::from_secs(60);
        self.tmux_ok(&["send-keys", "-t", TMUX_SESSION, "Enter"]);
        loop {
            if wait_for_body(&self.stub, first, text, Duration::from_secs(10)).is_some() {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "the prompt {text:?} did not reach the stub within 60 s"
                ));
            }
            // Enter again only while the text still waits in the input box: an Enter
            // that reached a dialog instead would answer it.
            if self.input_line().contains(text) {
                self.tmux_ok(&["send-keys", "-t", TMUX_SESSION, "Enter"]);
            }
        }
    }

    /// The input box's line: the last one starting with `❯`.
    fn input_line(&self) -> String {
        self.screen()
            .lines()
            .rfind(|l| l.trim_start().starts_with('❯'))
            .unwrap_or_default()
            .to_string()
    }

    /// Wait until the session is idle after its turn: its sessions file says `idle`, set
    /// after the stub's last answer to the main conversation, that answer ended the turn,
    /// no request is being answered, and that still holds half a second later.
    pub fn wait_idle(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut since: Option<(Instant, usize)> = None;
        loop {
            let idle = self.is_idle();
            let requests = self.stub_requests();
            since = match (idle, since) {
                (true, Some((t, n))) if n == requests => {
                    if t.elapsed() >= Duration::from_millis(500) {
                        return;
                    }
                    Some((t, n))
                }
                (true, _) => Some((Instant::now(), requests)),
                (false, _) => None,
            };
            if Instant::now() >= deadline {
                self.fail(&format!("the session was not idle within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn is_idle(&self) -> bool {
        let Some(entry) = self.find_sessions_file() else {
            return false;
        };
        let (in_flight, last_main) = {
            let s = self.stub.lock().unwrap();
            (s.in_flight, s.last_main)
        };
        let Some((answered, true)) = last_main else {
            return false;
        };
        let answered_ms = answered
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        // `shell`: idle, with a background command or a plugin's monitor still running.
        in_flight == 0
            && (entry["status"] == "idle" || entry["status"] == "shell")
            && entry["statusUpdatedAt"]
                .as_u64()
                .is_some_and(|t| t >= answered_ms)
    }

    /// Write one line to the session's messaging socket, as another process would: a user
    /// message with `content`, carrying `session_id`. Returns when the write was done.
    pub fn write_to_socket(&self, content: &str, session_id: &str) -> Instant {
        let line = json!({
            "type": "user",
            "message": {"role": "user", "content": content},
            "session_id": session_id,
        });
        write_line(&self.socket(), &line)
    }

    /// What the pane shows now (for failure messages).
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", TMUX_SESSION])
            .map(|out| out.trim_end().to_string())
            .unwrap_or_else(|e| format!("(no screen: {e})"))
    }

    /// Panic with what the pane shows and what the stub saw.
    pub fn fail(&self, what: &str) -> ! {
        let (log, results) = {
            let s = self.stub.lock().unwrap();
            (
                s.log.join("\n"),
                s.results
                    .iter()
                    .map(|(id, v)| format!("{id}: {v}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        };
        panic!(
            "{what}\n--- screen\n{}\n--- sessions file\n{}\n--- stub requests\n{log}\n--- tool results\n{results}",
            self.screen(),
            self.find_sessions_file()
                .map_or("(none)".into(), |v| v.to_string()),
        )
    }

    fn stub_requests(&self) -> usize {
        self.stub.lock().unwrap().bodies.len()
    }

    fn tmux(&self, args: &[&str]) -> Result<String, String> {
        tmux(&self.tmux_socket, args)
    }

    fn tmux_ok(&self, args: &[&str]) -> String {
        self.tmux(args).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for InteractiveSession {
    fn drop(&mut self) {
        // Claude Code runs each Bash command in a session of its own, so killing claude's
        // process group is not enough: kill every descendant and its process group, before
        // the tmux server's hangup can make claude start its SessionEnd hooks.
        end_tmux(&self.tmux_socket, self.pane_pid);
    }
}

/// Run tmux against the server of `socket`; its output, or why it failed.
pub(super) fn tmux(socket: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .env_remove("TMUX")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tmux: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "tmux {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// End a test's tmux server and everything its pane started: the pane's process, every
/// descendant and each one's process group (all made by the agent under test, never
/// ours), then the server and its socket.
pub(super) fn end_tmux(socket: &Path, pane_pid: Option<u32>) {
    if let Some(pid) = pane_pid {
        let mut doomed = descendants(pid);
        doomed.push((pid, pid));
        for (pid, pgid) in doomed {
            // SAFETY: kill has no memory-safety preconditions; ESRCH (gone) is fine.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::kill(-(pgid as i32), libc::SIGKILL);
            }
        }
    }
    let _ = tmux(socket, &["kill-server"]);
    let _ = std::fs::remove_file(socket);
}

/// Every live descendant of `root` (children, their children, …) as (pid, process group).
pub fn descendants(root: u32) -> Vec<(u32, u32)> {
    // (pid, parent, group) of every process.
    let procs: Vec<(u32, u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    // After "pid (comm) state": ppid, pgrp.
                    let mut rest = stat.get(stat.rfind(')')? + 2..)?.split_whitespace();
                    let _state = rest.next()?;
                    let ppid = rest.next()?.parse().ok()?;
                    let pgrp = rest.next()?.parse().ok()?;
                    Some((pid, ppid, pgrp))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for &(pid, ppid, pgrp) in &procs {
            if ppid == parent && !found.iter().any(|&(p, _)| p == pid) {
                found.push((pid, pgrp));
                parents.push(pid);
            }
        }
    }
    found
}

/// Connect to a Claude Code messaging socket, write `line` and a newline, half-close and
/// wait for the session to close the connection (it writes nothing back). Returns when
/// the line was written.
pub fn write_line(socket: &Path, line: &Value) -> Instant {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let mut stream = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()));
    let text = format!("{line}\n");
    stream
        .write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write to {}: {e}", socket.display()));
    let written = Instant::now();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    written
}

/// Pre-answer the dialogs a fresh HOME shows before the prompt: onboarding (theme), using
/// the API key from the environment, and trusting `project`. Merged into
/// `home/.claude.json`.
pub fn answer_first_run_dialogs(home: &Path, project: &Path) {
    let path = home.join(".claude.json");
    let mut doc: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    doc["hasCompletedOnboarding"] = json!(true);
    doc["lastOnboardingVersion"] = json!(super::CLAUDE_CODE_VERSION);
    doc["theme"] = json!("dark");
    doc["customApiKeyResponses"] = json!({
        "approved": [&API_KEY[API_KEY.len() - 20..]],
        "rejected": [],
    });
    let project = project.canonicalize().expect("the project exists");
    let entry = &mut doc["projects"][project.to_string_lossy().as_ref()];
    entry["hasTrustDialogAccepted"] = json!(true);
    entry["hasCompletedProjectOnboarding"] = json!(true);
    std::fs::write(&path, doc.to_string()).expect("write .claude.json");
}

/// tmux must be installed (CI's `.ci/run` installs it).
pub(super) fn require_tmux() {
    let found = Command::new("tmux")
        .arg("-V")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "`tmux` is not available; the interactive Claude Code tests run the CLI inside \
         tmux: install it (apt-get install tmux; see docs/e2e.md)"
    );
}

/// `s` quoted for sh.
pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// In `home`: the shell script `name` running `body` (its lines after `#!/bin/sh`), and a
/// tmux configuration that keeps a pane whose program ended and its scroll-back; their
/// paths. For the sessions the tests start in a tmux server of their own.
pub fn tmux_launcher(home: &Path, name: &str, body: &str) -> (PathBuf, PathBuf) {
    let launcher = home.join(name);
    std::fs::write(&launcher, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = home.join("tmux.conf");
    std::fs::write(
        &conf,
        "set -g remain-on-exit on\nset -g history-limit 10000\n",
    )
    .unwrap();
    (launcher, conf)
}

//! An interactive Codex session (the TUI, not `codex exec`) that can sit really idle: it
//! runs in a detached tmux session on a tmux server of its own, with the environment of
//! [`super::codex::codex_cmd`] (a fresh `CODEX_HOME`, the loopback stub as its model), and
//! is watched through the stub's requests. What tasklock's push into Codex relies on: an
//! idle TUI starts a turn with a message `codex queue` put in its queue.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::codex::{CodexStub, codex};
use super::interactive::{end_tmux, require_tmux, shell_quote, tmux};

const TMUX_SESSION: &str = "codex";

/// `codex PROMPT` in a detached tmux session. Dropping it kills the tmux server and every
/// process of the session, also when the test panics.
pub struct CodexTui {
    tmux_socket: PathBuf,
    pane_pid: u32,
}

impl CodexTui {
    /// Start the TUI in `project` with `home` (set up by [`super::codex::codex_home`]),
    /// hooks run without a trust review, commands in the `workspace-write` sandbox, and
    /// `prompt` as the first turn's input.
    pub fn start(home: &Path, project: &Path, prompt: &str) -> CodexTui {
        require_tmux();
        let tmp = home.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let env = [
            ("PATH", super::path_with_tasklock()),
            ("HOME", home.to_string_lossy().into_owned()),
            (
                "CODEX_HOME",
                home.join(".codex").to_string_lossy().into_owned(),
            ),
            ("TMPDIR", tmp.to_string_lossy().into_owned()),
            ("LANG", "C.UTF-8".into()),
            ("TERM", "xterm-256color".into()),
            ("E2E_STUB_API_KEY", "sk-e2e-dummy-key".into()),
        ];
        let mut line = String::from("exec env -i");
        for (k, v) in env {
            line.push(' ');
            line.push_str(&shell_quote(&format!("{k}={v}")));
        }
        for arg in [
            codex().to_string_lossy().as_ref(),
            "--dangerously-bypass-hook-trust",
            "-s",
            "workspace-write",
            prompt,
        ] {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        let (launcher, conf) = super::interactive::tmux_launcher(home, "codex-in-tmux.sh", &line);
        let mut tui = CodexTui {
            tmux_socket: home.join("tmux.sock"),
            pane_pid: 0,
        };
        tui.tmux_ok(&[
            "-f",
            &conf.to_string_lossy(),
            "new-session",
            "-d",
            "-s",
            TMUX_SESSION,
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            &project.to_string_lossy(),
            &launcher.to_string_lossy(),
        ]);
        tui.pane_pid = tui
            .tmux_ok(&["display-message", "-p", "-t", TMUX_SESSION, "#{pane_pid}"])
            .trim()
            .parse()
            .expect("tmux prints the pane's pid");
        tui
    }

    /// Wait until the stub has answered a turn's final message for `thread` `n` times,
    /// no request came for a second after, and the TUI shows its prompt: idle.
    pub fn wait_idle(&self, stub: &CodexStub, thread: &str, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let finals = || {
            stub.log()
                .lines()
                .filter(|l| l.contains(&format!("final message for {thread}")))
                .count()
        };
        loop {
            if finals() >= n {
                let before = stub.log().lines().count();
                std::thread::sleep(Duration::from_secs(1));
                if stub.log().lines().count() == before {
                    return;
                }
            }
            if Instant::now() >= deadline {
                self.fail(
                    stub,
                    &format!("the session was not idle within {timeout:?}"),
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the pane shows now.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", TMUX_SESSION])
            .map(|out| out.trim_end().to_string())
            .unwrap_or_else(|e| format!("(no screen: {e})"))
    }

    /// Panic with what the pane shows and what the stub saw.
    pub fn fail(&self, stub: &CodexStub, what: &str) -> ! {
        panic!(
            "{what}\n--- screen\n{}\n--- stub requests\n{}",
            self.screen(),
            stub.log()
        )
    }

    fn tmux(&self, args: &[&str]) -> Result<String, String> {
        tmux(&self.tmux_socket, args)
    }

    fn tmux_ok(&self, args: &[&str]) -> String {
        self.tmux(args).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for CodexTui {
    fn drop(&mut self) {
        end_tmux(
            &self.tmux_socket,
            (self.pane_pid != 0).then_some(self.pane_pid),
        );
    }
}

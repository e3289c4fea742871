//! A terminal for the tests of interactive commands: a shell script in a detached tmux
//! session on a tmux server of its own (its socket in a temp dir), read with
//! `capture-pane` and typed into with `send-keys`. Dropping it kills the server.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const SESSION: &str = "t";

pub struct Tmux {
    socket: PathBuf,
    _home: tempfile::TempDir,
}

impl Tmux {
    /// `sh -c SCRIPT` in a `cols`×`rows` terminal.
    pub fn start(script: &str, cols: u16, rows: u16) -> Tmux {
        let ok = Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .status();
        assert!(
            ok.is_ok_and(|s| s.success()),
            "`tmux` is not available: interactive commands are tested in tmux (apt-get install tmux)"
        );
        let home = tempfile::tempdir().unwrap();
        let t = Tmux {
            socket: home.path().join("tmux.sock"),
            _home: home,
        };
        t.ok(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "sh",
            "-c",
            script,
        ]);
        t
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn screen(&self) -> String {
        self.ok(&["capture-pane", "-p", "-t", SESSION])
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.ok(&["send-keys", "-t", SESSION, k]);
        }
    }

    /// The pid of the shell running the script.
    pub fn shell_pid(&self) -> u32 {
        let pids = self.ok(&["list-panes", "-t", SESSION, "-F", "#{pane_pid}"]);
        pids.trim().parse().expect("a pane pid")
    }

    /// Wait (at most 10 s: a guard against a hang) until the screen satisfies `ok`; the
    /// screen then.
    pub fn until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never saw {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(40));
        }
    }

    pub fn shows(&self, text: &str) -> String {
        self.until(text, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

//! Shared helpers for the integration tests: run the real binary in a temp lock
//! directory with the clock pinned, and snapshot its output.
#![allow(dead_code, unused_macros)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

pub const T0: &str = "2026-01-01T00:00:00Z";
pub const T5M: &str = "2026-01-01T00:05:00Z";
pub const T1H: &str = "2026-01-01T01:00:00Z";

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
    pub fn text(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub now: String,
}

impl Env {
    pub fn new() -> Env {
        Env {
            tmp: tempfile::tempdir().unwrap(),
            now: T0.into(),
        }
    }
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join(".locks")
    }
    pub fn at(&mut self, now: &str) -> &mut Self {
        self.now = now.into();
        self
    }
    /// Run as `agent` (None: no identity at all) with `--dir` set.
    pub fn run(&self, agent: Option<&str>, args: &[&str]) -> Run {
        let mut cmd = base_cmd(&self.now);
        cmd.arg("--dir").arg(self.dir()).args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        exec(cmd)
    }
    pub fn ok(&self, agent: &str, args: &[&str]) -> Run {
        let r = self.run(Some(agent), args);
        assert_eq!(r.code, 0, "{args:?} failed: {}", r.text());
        r
    }
}

pub fn base_cmd(now: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    cmd.env("TASKLOCK_NOW", now)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_AGENT_NAME")
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .stdin(Stdio::null());
    cmd
}

pub fn exec(mut cmd: Command) -> Run {
    let out = cmd.output().expect("run tasklock");
    Run {
        code: out.status.code().expect("exited normally"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[macro_export]
macro_rules! snap {
    ($env:expr, $name:expr, $run:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(
            &regex_escape(&$env.tmp.path().display().to_string()),
            "[TMP]",
        );
        settings.add_filter(
            &format!(
                r"\b{}\b",
                $crate::common::regex_escape(&$crate::common::host())
            ),
            "[HOST]",
        );
        // The Unix user tasklock records (whoever runs the tests).
        settings.add_filter(r#"\{\s*"name":\s*"[^"]*",\s*"uid":\s*\d+\s*\}"#, "[USER]");
        settings.bind(|| insta::assert_snapshot!($name, $run.text()));
    }};
}

pub fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub fn record_path(dir: &Path, encoded: &str) -> PathBuf {
    dir.join("keys").join(encoded)
}

pub fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

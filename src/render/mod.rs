//! Turning reports and errors into text. Commands never print.

pub mod markdown;

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::{Error, shell_quote};
use crate::report::Report;

/// How tasklock was called, as far as the commands it suggests need it: a `Next:` hint
/// must run as printed, so the `--dir` and `--agent` the caller gave by flag (and the
/// command `run` ran) are carried into every suggested command line.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// `--dir PATH`, when given.
    pub dir: Option<PathBuf>,
    /// `--agent ID`, when given.
    pub agent: Option<String>,
    /// `run`'s command, after `--`.
    pub cmd: Vec<OsString>,
}

impl Invocation {
    /// `tasklock SUB --dir PATH --agent ID`; SUB is already shell-quoted.
    pub fn line(&self, sub: &str) -> String {
        let mut s = format!("tasklock {sub}");
        if let Some(d) = &self.dir {
            s.push_str(" --dir ");
            s.push_str(&shell_quote(&d.to_string_lossy()));
        }
        if let Some(a) = &self.agent {
            s.push_str(" --agent ");
            s.push_str(&shell_quote(a));
        }
        s
    }

    /// [`Invocation::line`] as an inline code span.
    pub fn code(&self, sub: &str) -> String {
        markdown::code(&self.line(sub))
    }

    /// `tasklock ARGS KEY …` as a code span, KEY shell-quoted.
    pub fn cmd(&self, args: &str, key: &str) -> String {
        self.code(&format!("{args} {}", shell_quote(key)))
    }

    /// The same flags without `--agent`: for a command meant for another agent.
    pub fn without_agent(&self) -> Invocation {
        Invocation {
            agent: None,
            ..self.clone()
        }
    }

    /// `tasklock run KEY --wait … -- CMD` as a code span, with the command `run` was given.
    pub fn run_wait(&self, key: &str) -> String {
        let cmd = if self.cmd.is_empty() {
            "CMD".to_string()
        } else {
            self.cmd
                .iter()
                .map(|a| shell_word(&a.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        markdown::code(&format!(
            "{} -- {cmd}",
            self.line(&format!("run {} --wait", shell_quote(key)))
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

/// A word for a shell: quoted when needed. Unlike a key, it may start with `-`.
fn shell_word(s: &str) -> String {
    match s.strip_prefix('-') {
        Some(rest) if !rest.is_empty() && shell_quote(rest) == rest => s.to_string(),
        _ => shell_quote(s),
    }
}

pub fn report(r: &Report, format: Format, inv: &Invocation) -> String {
    match format {
        Format::Markdown => markdown::report(r, inv),
        // The audit log is JSON lines: one event per line, like the file itself.
        Format::Json => match r {
            Report::Audit(a) => a
                .events
                .iter()
                .map(|e| json_line(&serde_json::to_value(e).unwrap_or_default()))
                .collect(),
            _ => {
                let mut s = r.to_json();
                s.push('\n');
                s
            }
        },
    }
}

/// Errors: JSON goes to stdout (one object, like every other result); markdown to stderr.
pub fn error(e: &Error, format: Format, inv: &Invocation) -> String {
    match format {
        Format::Markdown => {
            let mut s = format!("Error: {e}\n");
            if let Some(h) = e.hint_for(inv) {
                s.push_str(&format!("\nNext: {h}\n"));
            }
            s
        }
        Format::Json => json_line(&error_json(
            e.kind(),
            &e.to_string(),
            e.hint_for(inv),
            e.exit_code(),
        )),
    }
}

pub fn error_json(kind: &str, message: &str, hint: Option<String>, code: i32) -> serde_json::Value {
    serde_json::json!({
        "error": { "kind": kind, "message": message, "hint": hint, "exit_code": code }
    })
}

pub fn json_line(v: &serde_json::Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

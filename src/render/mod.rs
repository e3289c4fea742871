//! Turning reports and errors into text. Commands never print. The renderer imports
//! reports and the types they carry (store records, liveness states) and the basic
//! layer; it decides nothing and calls neither the engine nor a store.

pub mod events;
pub mod markdown;
pub mod table;

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::{Error, shell_quote};
use crate::key::Line;
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
    /// For the MCP server: suggest tool calls (`checkout {"key":"K","queue":true}`)
    /// instead of command lines, which the session could not run as its agent.
    pub tools: bool,
    /// The caller has no identity (no `--agent`, none in the environment, not a
    /// terminal): a hint meant for a holder names it with `--agent`, or it could not run.
    pub anonymous: bool,
}

impl Invocation {
    /// `tasklock SUB --dir PATH --agent ID`; SUB is words of tasklock's own (a command
    /// naming a key or a path is a [`Line`]).
    pub fn line(&self, sub: &str) -> String {
        self.command(&Line::new(sub))
    }

    /// `tasklock LINE --dir PATH --agent ID`, or the MCP tool call that does the same.
    pub fn command(&self, line: &Line) -> String {
        if self.tools
            && let Some(call) = tool_call(&line.render(&[]))
        {
            return call;
        }
        let dir = self.dir.as_ref().map(|d| d.to_string_lossy().into_owned());
        let mut globals = Vec::new();
        if let Some(d) = &dir {
            globals.push(("--dir", d.as_str()));
        }
        if let Some(a) = &self.agent {
            globals.push(("--agent", a.as_str()));
        }
        format!("tasklock {}", line.render(&globals))
    }

    /// [`Invocation::line`] as an inline code span.
    pub fn code(&self, sub: &str) -> String {
        markdown::code(&self.line(sub))
    }

    /// [`Invocation::command`] as an inline code span.
    pub fn code_of(&self, line: &Line) -> String {
        markdown::code(&self.command(line))
    }

    /// `tasklock ARGS KEY …` as a code span.
    pub fn cmd(&self, args: &str, key: &str) -> String {
        self.code_of(&Line::new(args).arg(key))
    }

    /// The flags for a command the holder `agent` runs: its `--agent` when the caller
    /// has no identity of its own.
    pub fn for_holder(&self, agent: &str) -> Invocation {
        Invocation {
            agent: match &self.agent {
                None if self.anonymous => Some(agent.to_string()),
                given => given.clone(),
            },
            ..self.clone()
        }
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
            self.command(&Line::new("run").arg(key).flag("--wait"))
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For agents (and pipes): the default.
    Markdown,
    Json,
    /// For a person at a terminal (src/render/table/).
    Table(Screen),
}

/// The terminal a table is printed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Screen {
    /// Its width in columns.
    pub width: usize,
    /// How far local time is ahead of UTC, in seconds.
    pub utc_offset: i32,
}

impl Format {
    /// Markdown or JSON, for outputs a table is not made for (streams of lines).
    pub fn text_or_json(self) -> Format {
        match self {
            Format::Table(_) => Format::Markdown,
            f => f,
        }
    }
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
        Format::Table(screen) => table::report(r, inv, &screen),
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

/// What the user should do about an error, when there is something to say, with
/// suggested commands carrying the caller's `--dir`/`--agent`.
pub fn error_hint(e: &Error, inv: &Invocation) -> Option<String> {
    use crate::error::{UPGRADE, newer_format};
    match e {
        Error::Corrupt { problem, .. } if newer_format(problem) => Some(UPGRADE.into()),
        Error::Corrupt { key, .. } => Some(format!(
            "inspect the file; if nobody is working on `{key}`, remove it with {} (audited).",
            inv.code_of(&Line::new("release").arg(key).flag("--force"))
        )),
        Error::Config { path, .. } if path.ends_with("config.yaml") => {
            Some("fix the file, or delete it to use the defaults.".to_string())
        }
        Error::Config { .. } => {
            Some("fix the file; tasklock does not change a file it cannot read.".to_string())
        }
        Error::LockDir { hint, .. } => Some(hint.clone()),
        Error::SecretRefused { .. } => Some(
            "run it in that agent's own session (its hooks set TASKLOCK_SECRET); another agent cannot act for it".into(),
        ),
        _ => None,
    }
}

/// Errors: JSON goes to stdout (one object, like every other result); markdown to stderr.
pub fn error(e: &Error, format: Format, inv: &Invocation) -> String {
    match format {
        Format::Markdown | Format::Table(_) => {
            let mut s = error_line(&e.to_string());
            if let Some(h) = error_hint(e, inv) {
                s.push_str(&format!("\nNext: {h}\n"));
            }
            s
        }
        Format::Json => json_line(&error_json(
            e.kind(),
            &e.to_string(),
            error_hint(e, inv),
            e.exit_code(),
        )),
    }
}

/// An error for people and agents, in clap's style (clap's own usage errors cannot
/// change): `error: MESSAGE`.
pub fn error_line(message: &str) -> String {
    format!("error: {message}\n")
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

/// A suggested command as the MCP tool call that does the same (`None` when no tool
/// does: the command line is suggested then).
fn tool_call(sub: &str) -> Option<String> {
    use serde_json::{Map, Value, json};
    let words = crate::error::shell_split(sub)?;
    let (tool, rest) = words.split_first()?;
    let mut args = Map::new();
    let mut positional = Vec::new();
    let mut any = false;
    let mut it = rest.iter();
    while let Some(word) = it.next() {
        // `--path=-b`: a value that begins with `-` is joined to its option.
        let (w, joined) = match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_string())),
            _ => (word.as_str(), None),
        };
        let mut value = || joined.clone().or_else(|| it.next().cloned());
        match w {
            "--queue" | "--all" | "--mine" | "--peek" => {
                args.insert(w[2..].into(), Value::Bool(true));
            }
            "--wait" if tool == "checkout" => {
                args.insert("wait_seconds".into(), json!(90));
            }
            "--any" => any = true,
            "--path" => {
                let p = value()?;
                args.entry("paths")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()?
                    .push(json!(p));
            }
            "--token" => {
                args.insert("token".into(), json!(value()?.parse::<u64>().ok()?));
            }
            "--note" | "--timeout" | "--reason" => {
                args.insert(w[2..].into(), json!(value()?));
            }
            "--" if joined.is_none() => positional.extend(it.by_ref().cloned()),
            f if f.starts_with('-') => return None,
            p => positional.push(p.to_string()),
        }
    }
    // The key (or keys) first, as a person would write the call.
    let mut call = Map::new();
    match tool.as_str() {
        "checkout" if any => {
            call.insert("any".into(), json!(positional));
        }
        "release" | "renew" => {
            if !positional.is_empty() {
                call.insert("keys".into(), json!(positional));
            }
        }
        "note" => {
            let [key, text] = positional.as_slice() else {
                return None;
            };
            call.insert("key".into(), json!(key));
            call.insert("text".into(), json!(text));
        }
        "checkout" | "status" | "verify" | "why" => match positional.as_slice() {
            [] => {}
            [key] => {
                call.insert("key".into(), json!(key));
            }
            _ => return None,
        },
        "list" | "inbox" | "agents" if positional.is_empty() => {}
        _ => return None,
    }
    call.extend(args);
    let args = call;
    Some(format!("{tool} {}", Value::Object(args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_become_the_tool_calls_that_do_the_same() {
        let t = |s: &str| tool_call(s);
        assert_eq!(
            t("checkout 'path:src/*' --path 'src/*' --queue").as_deref(),
            Some(r#"checkout {"key":"path:src/*","paths":["src/*"],"queue":true}"#)
        );
        assert_eq!(
            t("checkout --path 'it'\\''s' --wait").as_deref(),
            Some(r#"checkout {"paths":["it's"],"wait_seconds":90}"#)
        );
        assert_eq!(
            t("release task-1").as_deref(),
            Some(r#"release {"keys":["task-1"]}"#)
        );
        assert_eq!(
            t("verify 'a b' --token 7").as_deref(),
            Some(r#"verify {"key":"a b","token":7}"#)
        );
        assert_eq!(t("inbox").as_deref(), Some("inbox {}"));
        // No tool does these: the command line stays.
        assert_eq!(t("release K --force"), None);
        assert_eq!(t("heartbeat --pid PID"), None);
        assert_eq!(t("unfreeze 'deploy://*'"), None);
        let inv = Invocation {
            agent: Some("mcp-x".into()),
            tools: true,
            ..Default::default()
        };
        assert_eq!(inv.line("status K"), r#"status {"key":"K"}"#);
        assert_eq!(inv.line("init"), "tasklock init --agent mcp-x");
        // A key or a path that begins with `-` stays a key or a path.
        let queue = Line::new("checkout").arg("--all").flag("--queue");
        assert_eq!(
            inv.command(&queue),
            r#"checkout {"key":"--all","queue":true}"#
        );
        let paths = Line::new("checkout").opt("--path", "-b").flag("--wait");
        assert_eq!(
            inv.command(&paths),
            r#"checkout {"paths":["-b"],"wait_seconds":90}"#
        );
        let verify = Line::new("verify").arg("-x").opt("--token", "7");
        assert_eq!(inv.command(&verify), r#"verify {"key":"-x","token":7}"#);
    }
}

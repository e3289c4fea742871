//! The views of the fleet: `tasklock top` (the terminal) and `tasklock ui` (a page in the
//! browser). They are the binary `tasklock-view`, beside `tasklock`, so that the commands
//! agents run on every tool call never load their terminal or HTTP code. Both are built
//! on `engine::fleet::snapshot`, read with no lock taken and nothing written, and woken by
//! the store's own change signal.

pub mod desktop;
mod metrics;
pub mod palette;
mod server;
pub mod timeline;
pub mod top;
pub mod ui;

use std::collections::VecDeque;
use std::time::Duration;

use crate::cli::Global;
use crate::engine::Ctx;
use crate::error::{EXIT_USAGE, Error, Result};
use crate::store::{AuditEvent, Store};

/// The binary `tasklock top` and `tasklock ui` run, beside `tasklock`.
pub const BINARY: &str = "tasklock-view";

/// How many audit events a view keeps.
const EVENTS_KEPT: usize = 2000;
/// Leases run down and heartbeats age without the store changing: a fresh look at
/// least this often.
const REFRESH: Duration = Duration::from_secs(1);

/// `tasklock-view top …` or `tasklock-view ui …`.
pub fn main(mut args: Vec<std::ffi::OsString>) -> i32 {
    let which = args.get(1).and_then(|a| a.to_str()).map(str::to_string);
    match which.as_deref() {
        Some(v @ ("top" | "ui")) => {
            // Parsed as `tasklock top …` / `tasklock ui …`.
            let first = std::ffi::OsString::from(format!("tasklock {v}"));
            args.splice(0..2, [first]);
            if v == "top" {
                top::main(args)
            } else {
                ui::main(args)
            }
        }
        _ => {
            eprintln!("tasklock-view: run it as `tasklock top` or `tasklock ui`");
            EXIT_USAGE
        }
    }
}

/// Parse `args` as `A`, run `f` with them, and turn the outcome into an exit code: usage
/// errors 64, others as the commands map them, each said as `tasklock WORD: …`.
fn run<A: clap::Parser>(
    args: Vec<std::ffi::OsString>,
    word: &str,
    f: impl FnOnce(A) -> Result<()>,
) -> i32 {
    let a = match A::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                EXIT_USAGE
            } else {
                crate::error::EXIT_OK
            };
        }
    };
    match f(a) {
        Ok(()) => crate::error::EXIT_OK,
        Err(e) => {
            eprintln!("tasklock {word}: {e}");
            e.exit_code()
        }
    }
}

fn context(global: &Global) -> Result<Ctx> {
    let dir = crate::discover::discover(global.dir.as_deref())?.for_reading()?;
    Ctx::connected(dir, global.agent.clone(), global.name.clone())
}

fn store_of(ctx: &Ctx) -> Result<Box<dyn Store>> {
    ctx.existing_store()?.ok_or_else(|| {
        Error::Usage(format!(
            "no lock directory at {} yet: nothing to show (`tasklock init` sets one up)",
            ctx.dir.display()
        ))
    })
}

/// The last `EVENTS_KEPT` events of the audit log, oldest first.
fn recent_events(store: &dyn Store) -> Result<VecDeque<AuditEvent>> {
    let mut events = VecDeque::new();
    store.audit_events(&mut |e| {
        if events.len() == EVENTS_KEPT {
            events.pop_front();
        }
        events.push_back(e);
    })?;
    Ok(events)
}

/// Force-release and freeze are for a person at the terminal that started the view (or
/// a caller holding the operator secret), never for an agent's identity, and never when
/// read-only. The commands judge again when they run.
fn may_act(read_only: bool, global: &Global, ctx: &Ctx) -> std::result::Result<(), String> {
    use std::io::IsTerminal;
    if read_only {
        return Err("--read-only".into());
    }
    let operator = crate::secret::is_operator(
        ctx.config()
            .ok()
            .and_then(|c| c.operator_secret_sha256)
            .as_deref(),
    );
    match crate::identity::resolve_id(global.agent.as_deref()) {
        _ if operator => Ok(()),
        Ok((_, crate::identity::Source::UserAtHost)) if std::io::stdin().is_terminal() => Ok(()),
        Ok((id, _)) => Err(format!("started as agent {id}")),
        Err(_) => Err("no person at a terminal".into()),
    }
}

/// What the views show of one key besides the fleet: how its last checkout ended and its
/// notes for the next holder (or why they could not be read), and what `tasklock why KEY`
/// says of it ([`why_lines`]).
fn key_detail(
    global: &Global,
    key: &str,
) -> (std::result::Result<Vec<String>, String>, Vec<String>) {
    let notes = context(global)
        .and_then(|ctx| {
            let store = store_of(&ctx)?;
            let (ended, notes) = store.history(key, 10)?;
            let mut out: Vec<String> = Vec::new();
            if let Some(e) = ended {
                out.push(format!(
                    "last checkout ended {} ({})",
                    e.ended_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    serde_json::to_value(e.how)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ));
            }
            out.extend(
                notes
                    .into_iter()
                    .map(|n| format!("{} {}: {}", n.ts.format("%H:%M:%S"), n.agent, n.text)),
            );
            Ok(out)
        })
        .map_err(|e| e.to_string());
    (notes, why_lines(global, key))
}

/// What `tasklock why KEY` answers the view's agent, as lines without markup: the verdict
/// with its state and the checkout's decision, each reason, the advice. Read from the
/// typed answer (it reads and writes nothing), never from its markdown.
fn why_lines(global: &Global, key: &str) -> Vec<String> {
    let _ = crate::warnings::take();
    let key = crate::key::normalize(key);
    let answer = context(global).and_then(|ctx| crate::commands::why::run(&ctx, &key, Vec::new()));
    let mut lines = match answer {
        Ok(crate::report::Report::Why(w)) => {
            let inv = crate::render::Invocation {
                dir: global.dir.clone(),
                agent: global.agent.clone(),
                cmd: Vec::new(),
                tools: false,
                anonymous: false,
            };
            let verdict = match (w.can_checkout, w.state) {
                (_, crate::report::WhyState::Yours) => "It is yours",
                (true, _) => "You can check it out now",
                (false, _) => "You cannot check it out now",
            };
            let decided = w
                .decision
                .and_then(|d| serde_json::to_value(d).ok())
                .and_then(|v| v.as_str().map(|d| format!("; a checkout now: {d}")))
                .unwrap_or_default();
            let mut lines = vec![format!("{verdict} ({}{decided}).", w.state.as_str())];
            lines.extend(w.reasons.iter().map(|r| format!("- {r}")));
            let next = crate::render::markdown::why_next(&w.advice, &w.key, &w.paths, &inv);
            lines.push(format!("Next: {next}"));
            lines
        }
        Ok(_) => Vec::new(),
        Err(e) => vec![format!("Error: {e}")],
    };
    lines.extend(
        crate::warnings::take()
            .iter()
            .map(|w| format!("Warning: {w}")),
    );
    lines
        .iter()
        .map(|l| l.replace('`', "").trim().to_string())
        .filter(|l| !l.is_empty())
        .take(12)
        .collect()
}

/// The command line of `tasklock COMMAND` with the view's `--dir` and `--agent`, the
/// `options` (each one word, `--name=value`), and `key` last, after `--`: a key is other
/// agents' text, and one that begins with `-` (`--all`, `-x`) must never be read as an
/// option.
fn argv(global: &Global, command: &str, options: &[String], key: &str) -> Vec<String> {
    let mut argv: Vec<String> = vec!["tasklock".into()];
    if let Some(d) = &global.dir {
        argv.push(format!("--dir={}", d.display()));
    }
    if let Some(a) = &global.agent {
        argv.push(format!("--agent={a}"));
    }
    argv.push(command.into());
    argv.extend(options.iter().cloned());
    argv.push("--".into());
    argv.push(key.into());
    argv
}

/// Run `tasklock COMMAND OPTIONS -- KEY` as the person who started the view: under the
/// command's own rules, audited as the command is. The first line of what it says, and
/// whether it succeeded.
fn act_on(global: &Global, command: &str, options: &[String], key: &str) -> (bool, String) {
    outcome(argv(global, command, options, key))
}

fn outcome(argv: Vec<String>) -> (bool, String) {
    let called = crate::call(argv);
    crate::engine::deliver::flush();
    let first = called.markdown.lines().next().unwrap_or("").to_string();
    if called.exit_code == 0 {
        (true, first)
    } else {
        (
            false,
            format!("refused (exit {}): {first}", called.exit_code),
        )
    }
}

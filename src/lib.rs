//! tasklock: atomic task checkouts for coding agents working side by side.

pub mod argv;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod commands;
pub mod config;
pub mod demo;
pub mod discover;
pub mod dispatch;
pub mod duration;
pub mod engine;
pub mod error;
pub mod identity;
pub mod key;
pub mod liveness;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod os;
pub mod pack;
pub mod paths;
pub mod render;
pub mod report;
pub mod secret;
pub mod signals;
pub mod store;
#[cfg(feature = "view")]
pub mod view;
pub mod warnings;

use std::ffi::OsString;
use std::io::Write;

use clap::error::ErrorKind;

use cli::{Command, FormatArg};
use commands::Ctx;
use dispatch::{execute, first_paragraph, parse_args};
use error::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use render::Format;

pub use dispatch::{Called, MCP_BINARY, VIEW_BINARY, VIEW_MISSING, call};

/// Run tasklock with these arguments; returns the process exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let code = run_command(args.into_iter().map(Into::into).collect());
    // Once the command's changes stand (and its output is out), push the inbox messages it
    // wrote into the sessions that can be reached.
    engine::deliver::flush();
    // Worktrees of checkouts it ended for others (death, lease, session end): removed
    // where that loses nothing.
    engine::worktree::flush();
    // And, where `notify:` asks for it, have the events it wrote told to webhooks.
    engine::notify::flush();
    code
}

fn run_command(args: Vec<OsString>) -> i32 {
    let cli = match parse_args(&args) {
        Ok(cli) => cli,
        Err(e)
            if subcommand(&args) == Some("hook")
                && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
        {
            // Hooks never break the agent, not even when called wrongly.
            let first = e.render().to_string();
            emit_stderr(&format!(
                "tasklock hook: {}\n",
                first_paragraph(&first).unwrap_or("bad arguments")
            ));
            return EXIT_OK;
        }
        Err(e) => return usage_error(e, sniff_json(&args)),
    };
    let inv = render::Invocation {
        dir: cli.global.dir.clone(),
        agent: cli.global.agent.clone(),
        cmd: match &cli.command {
            Command::Run(a) => a.cmd.clone(),
            _ => Vec::new(),
        },
        tools: false,
        anonymous: cli.global.agent.is_none() && identity::resolve_id(None).is_err(),
    };
    let global = &cli.global;
    match &cli.command {
        Command::Hook(cli::HookArgs { event }) => return hook(global, event.as_deref()),
        Command::Mcp => return mcp_server(global),
        Command::Top(a) => return view(global, "top", a),
        Command::Ui(a) => return view(global, "ui", a),
        Command::Demo(a) => return demo::run(global, a),
        Command::NotifyDrain => return notify_drain(global),
        _ => {}
    }
    // After the hooks, which print Claude Code's format whatever TASKLOCK_FORMAT says.
    let format = match global.output_format() {
        Ok(f) => f,
        Err(msg) => {
            emit_stderr(&render::error(
                &error::Error::Usage(msg),
                Format::Markdown,
                &inv,
            ));
            return EXIT_USAGE;
        }
    };
    match &cli.command {
        Command::Audit(a @ cli::AuditArgs { follow: true, .. }) => {
            return followed(follow_audit(global, a, format.text_or_json()), &inv);
        }
        Command::Inbox(cli::InboxArgs { follow: true, .. }) => {
            return followed(follow_inbox(global, format.text_or_json()), &inv);
        }
        _ => {}
    }
    let result = execute(cli);
    print_answer(result, format, &inv)
}

/// `tasklock hook EVENT`. Hooks never break the agent: failures go to stderr and the exit
/// code is 0, but for an event whose answer the client cannot go on without
/// ([`commands::hook::must_answer`]).
fn hook(global: &cli::Global, event: Option<&str>) -> i32 {
    let Some(event) = event else {
        emit_stderr(HOOK_NO_EVENT);
        return EXIT_OK;
    };
    match commands::hook::run(
        global.dir.clone(),
        global.agent.clone(),
        global.name.clone(),
        event,
    ) {
        Ok(Some(out)) => emit_stdout(&out),
        Ok(None) => {}
        Err(e) => {
            let next = render::error_hint(&e, &render::Invocation::default())
                .map(|h| format!("Next: {h}\n"))
                .unwrap_or_default();
            emit_stderr(&format!("tasklock hook {event}: {e}\n{next}"));
            if commands::hook::must_answer(event) {
                return e.exit_code();
            }
        }
    }
    EXIT_OK
}

/// `audit --follow`: the log's events as they come, until interrupted.
fn follow_audit(global: &cli::Global, a: &cli::AuditArgs, format: Format) -> error::Result<()> {
    let filter = commands::audit::Filter {
        since: a.since,
        key: a.key.clone(),
        agent: global.agent.clone(),
        limit: a.limit,
    };
    let dir = discover::read_dir(global.dir.as_deref())?;
    // --agent filters the log here; it does not name the caller.
    let ctx = Ctx::connected(dir, None, None)?;
    commands::audit::follow(&ctx, &filter, format, &mut std::io::stdout())
}

/// `inbox --follow`: the caller's messages as they come, with a context made again for
/// each round.
fn follow_inbox(global: &cli::Global, format: Format) -> error::Result<()> {
    let mut open = || -> error::Result<Ctx> {
        let dir = discover::read_dir(global.dir.as_deref())?;
        Ctx::connected(dir, global.agent.clone(), global.name.clone())
    };
    commands::inbox::follow(&mut open, format, &mut std::io::stdout())
}

/// The exit of a following command; its error in markdown on stderr.
fn followed(result: error::Result<()>, inv: &render::Invocation) -> i32 {
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            emit_stderr(&render::error(&e, Format::Markdown, inv));
            e.exit_code()
        }
    }
}

/// Print a command's report (or error) with the warnings its steps left; its exit code.
fn print_answer(
    result: error::Result<report::Report>,
    format: Format,
    inv: &render::Invocation,
) -> i32 {
    match result {
        Ok(report) => {
            let warnings = warnings::take();
            let mut text = render::report(&report, format, inv);
            if format == Format::Json
                && !warnings.is_empty()
                && !matches!(report, report::Report::Audit(_))
            {
                text = warnings::into_json(&text, &warnings);
            }
            for w in &warnings {
                emit_stderr(&format!("tasklock: warning: {w}\n"));
            }
            // `run` leaves stdout to the command it ran.
            if matches!(report, report::Report::Run(_)) {
                emit_stderr(&text);
            } else {
                emit_stdout(&text);
            }
            report.exit_code()
        }
        Err(e) => {
            for w in warnings::take() {
                emit_stderr(&format!("tasklock: warning: {w}\n"));
            }
            let text = render::error(&e, format, inv);
            match format {
                Format::Json => emit_stdout(&text),
                Format::Markdown | Format::Table(_) => emit_stderr(&text),
            }
            e.exit_code()
        }
    }
}

/// `tasklock notify-drain`, started detached by a command whose configuration has
/// `notify:`: nobody reads what it says, so failures go to `doctor` through its records.
fn notify_drain(global: &cli::Global) -> i32 {
    let result = discover::read_dir(global.dir.as_deref())
        .and_then(|dir| Ctx::new(dir, None, None))
        .and_then(|ctx| engine::notify::drain(&ctx));
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => e.exit_code(),
    }
}

/// `tasklock mcp`: run the server, the binary `tasklock-mcp` beside this one, in this
/// process (so the client's child is still the server). A binary of its own, so that
/// the other commands do not pay at start-up for its async runtime and SDK.
fn mcp_server(global: &cli::Global) -> i32 {
    exec_beside(
        MCP_BINARY,
        "mcp",
        global,
        &[],
        "the MCP server is the binary tasklock-mcp, installed beside tasklock by install.sh (and built with the default `mcp` feature)",
    )
}

/// `tasklock top` and `tasklock ui`: the views, the binary `tasklock-view` beside this one,
/// for the same reason (their terminal and HTTP code stay out of the commands agents run
/// on every tool call).
fn view(global: &cli::Global, word: &str, a: &cli::ViewArgs) -> i32 {
    let mut extra: Vec<OsString> = a.args.clone();
    if global.json || global.format == Some(FormatArg::Json) {
        extra.push("--json".into());
    }
    exec_beside(VIEW_BINARY, word, global, &extra, VIEW_MISSING)
}

/// Replace this process with `binary` (beside this one), passing the global options on.
fn exec_beside(
    binary: &str,
    word: &str,
    global: &cli::Global,
    extra: &[OsString],
    what: &str,
) -> i32 {
    use std::os::unix::process::CommandExt;
    let path = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(binary),
        Err(e) => {
            emit_stderr(&format!(
                "tasklock {word}: cannot find this binary's path: {e}\n"
            ));
            return EXIT_ERROR;
        }
    };
    let mut cmd = std::process::Command::new(&path);
    // Seen as `tasklock WORD …` in process listings.
    cmd.arg0(
        std::env::args_os()
            .next()
            .unwrap_or_else(|| "tasklock".into()),
    )
    .arg(word);
    if let Some(d) = &global.dir {
        cmd.arg("--dir").arg(d);
    }
    if let Some(a) = &global.agent {
        cmd.arg("--agent").arg(a);
    }
    if let Some(n) = &global.name {
        cmd.arg("--name").arg(n);
    }
    cmd.args(extra);
    let err = cmd.exec();
    emit_stderr(&format!(
        "tasklock {word}: cannot start {} ({err}): {what}\n",
        path.display()
    ));
    EXIT_ERROR
}

/// `tasklock-mcp [mcp] [--dir PATH] [--agent ID] [--name NAME]`: serve MCP on stdio.
#[cfg(feature = "mcp")]
pub fn mcp_main<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // `tasklock mcp` passes its own name on; the word `mcp` may follow it.
    if args.get(1).is_some_and(|a| a == "mcp") {
        args.remove(1);
    }
    #[derive(clap::Parser)]
    #[command(
        name = "tasklock-mcp",
        about = "The tasklock MCP server (run by `tasklock mcp`)"
    )]
    struct Args {
        #[command(flatten)]
        global: cli::Global,
    }
    match <Args as clap::Parser>::try_parse_from(args) {
        Ok(a) => mcp::serve(a.global.dir, a.global.agent, a.global.name),
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() { EXIT_USAGE } else { EXIT_OK }
        }
    }
}

const HOOK_NO_EVENT: &str = "tasklock hook: no event given (expected session-start, user-prompt-submit, pre-tool-use, post-tool-use, subagent-start, subagent-stop or session-end); nothing done\n";

/// The subcommand named on the command line, skipping global options and their values.
fn subcommand(args: &[OsString]) -> Option<&str> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_str()?;
        if matches!(a, "--dir" | "--agent" | "--name" | "--format") {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// clap errors: help and version succeed; everything else is a usage error (64, never 2).
fn usage_error(e: clap::Error, json: bool) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            emit_stdout(&e.to_string());
            EXIT_OK
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            emit_stderr(&e.render().to_string());
            EXIT_USAGE
        }
        _ => {
            if json {
                let msg = e.render().to_string();
                // The whole first paragraph, so a missing argument is named.
                let first = first_paragraph(&msg)
                    .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| "usage error".into());
                let v = render::error_json("usage", &first, Some(msg.clone()), EXIT_USAGE);
                emit_stdout(&render::json_line(&v));
            } else {
                emit_stderr(&e.render().to_string());
            }
            EXIT_USAGE
        }
    }
}

fn sniff_json(args: &[OsString]) -> bool {
    args.iter().any(|a| a == "--json" || a == "--format=json")
        || args
            .windows(2)
            .any(|w| w[0] == "--format" && w[1] == "json")
}

fn emit_stdout(s: &str) {
    // A closed pipe (`tasklock list | head -1`) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}

fn emit_stderr(s: &str) {
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

/// For main: a last line of defence that turns a panic into exit 1 with a message.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("tasklock: internal error (this is a bug, please report it): {info}");
        std::process::exit(EXIT_ERROR);
    }));
}

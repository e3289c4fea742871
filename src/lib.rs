//! tasklock: atomic task checkouts for coding agents working side by side.

pub mod argv;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod commands;
pub mod config;
pub mod demo;
pub mod discover;
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

use clap::Parser;
use clap::error::ErrorKind;

use cli::{Cli, Command, FormatArg};
use commands::Ctx;
use error::{EXIT_ERROR, EXIT_OK, EXIT_USAGE, Error};
use render::Format;

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
    if let Command::Hook(cli::HookArgs { event }) = &cli.command {
        // Hooks never break the agent: failures go to stderr and the exit code is 0.
        let Some(event) = event else {
            emit_stderr(HOOK_NO_EVENT);
            return EXIT_OK;
        };
        match commands::hook::run(
            cli.global.dir.clone(),
            cli.global.agent.clone(),
            cli.global.name.clone(),
            event,
        ) {
            Ok(Some(out)) => emit_stdout(&out),
            Ok(None) => {}
            Err(e) => {
                let next = render::error_hint(&e, &render::Invocation::default())
                    .map(|h| format!("Next: {h}\n"))
                    .unwrap_or_default();
                emit_stderr(&format!("tasklock hook {event}: {e}\n{next}"));
            }
        }
        return EXIT_OK;
    }
    if let Command::Mcp = &cli.command {
        return mcp_server(&cli.global);
    }
    if let Command::Top(a) = &cli.command {
        return view(&cli.global, "top", a);
    }
    if let Command::Ui(a) = &cli.command {
        return view(&cli.global, "ui", a);
    }
    if let Command::Demo(a) = &cli.command {
        return demo::run(&cli.global, a);
    }
    if let Command::NotifyDrain = &cli.command {
        return notify_drain(&cli.global);
    }
    // After the hooks, which print Claude Code's format whatever TASKLOCK_FORMAT says.
    let format = match cli.global.output_format() {
        Ok(f) => f,
        Err(msg) => {
            emit_stderr(&render::error(&Error::Usage(msg), Format::Markdown, &inv));
            return EXIT_USAGE;
        }
    };
    if let Command::Audit(cli::AuditArgs {
        since,
        key,
        limit,
        follow: true,
    }) = &cli.command
    {
        let filter = commands::audit::Filter {
            since: *since,
            key: key.clone(),
            agent: cli.global.agent.clone(),
            limit: *limit,
        };
        let result = discover::read_dir(cli.global.dir.as_deref()).and_then(|dir| {
            let mut ctx = Ctx {
                dir,
                now: clock::now()?,
                agent_flag: None,
                name_flag: None,
                cfg: Default::default(),
            };
            if store::pg::open_early(ctx.config().ok().as_ref())? {
                ctx.now = clock::now()?;
            }
            commands::audit::follow(&ctx, &filter, format.text_or_json(), &mut std::io::stdout())
        });
        return match result {
            Ok(()) => EXIT_OK,
            Err(e) => {
                emit_stderr(&render::error(&e, Format::Markdown, &inv));
                e.exit_code()
            }
        };
    }
    if let Command::Inbox(cli::InboxArgs { follow: true, .. }) = &cli.command {
        let global = &cli.global;
        let mut open = || -> error::Result<Ctx> {
            let dir = discover::read_dir(global.dir.as_deref())?;
            let mut ctx = Ctx {
                dir,
                now: clock::now()?,
                agent_flag: global.agent.clone(),
                name_flag: global.name.clone(),
                cfg: Default::default(),
            };
            if store::pg::open_early(ctx.config().ok().as_ref())? {
                ctx.now = clock::now()?;
            }
            Ok(ctx)
        };
        let result =
            commands::inbox::follow(&mut open, format.text_or_json(), &mut std::io::stdout());
        return match result {
            Ok(()) => EXIT_OK,
            Err(e) => {
                emit_stderr(&render::error(&e, Format::Markdown, &inv));
                e.exit_code()
            }
        };
    }
    match execute(cli) {
        Ok(report) => {
            let warnings = warnings::take();
            let mut text = render::report(&report, format, &inv);
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
            let text = render::error(&e, format, &inv);
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
    let result = discover::read_dir(global.dir.as_deref()).and_then(|dir| {
        let ctx = Ctx {
            dir,
            now: clock::now()?,
            agent_flag: None,
            name_flag: None,
            cfg: Default::default(),
        };
        engine::notify::drain(&ctx)
    });
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => e.exit_code(),
    }
}

fn execute(cli: Cli) -> Result<report::Report, Error> {
    // For `audit`, --agent filters the log instead of naming the caller.
    let audit_agent = cli.global.agent.clone();
    let flag = cli.global.dir.as_deref();
    // `setup` is about the user's agents, not a project: no lock directory.
    if let Command::Setup(args) = cli.command {
        return commands::setup::run(clock::now()?, args);
    }
    let discovery = match &cli.command {
        Command::Init(_) => None,
        _ => Some(discover::discover(flag)?),
    };
    let dir = match (&cli.command, discovery.clone()) {
        (_, None) => discover::init_dir(flag)?,
        (Command::Doctor, Some(d)) => d.dir(),
        (cmd, Some(d)) if creates_store(cmd) => d.for_store()?,
        (_, Some(d)) => d.for_reading()?,
    };
    let mut ctx = Ctx {
        dir,
        now: clock::now()?,
        agent_flag: cli.global.agent,
        name_flag: cli.global.name,
        cfg: Default::default(),
    };
    // A PostgreSQL store judges time by the server's clock: connect first (the
    // connection serves the whole command), then take "now" again. `doctor` reports a
    // server that cannot be reached instead of failing on it.
    if !matches!(cli.command, Command::Doctor | Command::Init(_))
        && store::pg::open_early(ctx.config().ok().as_ref())?
    {
        ctx.now = clock::now()?;
    }
    match normalize_keys(cli.command) {
        Command::Checkout(a) => commands::checkout::execute(&ctx, a),
        Command::Release(a) => commands::release::execute(&ctx, a),
        Command::Leave(a) => commands::release::execute_leave(&ctx, a),
        Command::Renew(a) => commands::renew::execute(&ctx, a),
        Command::Status(a) => commands::status::execute(&ctx, a),
        Command::List(a) => commands::list::execute(&ctx, a),
        Command::Verify(a) => commands::verify::execute(&ctx, a),
        Command::Heartbeat(a) if !a.watch => commands::heartbeat::execute(&ctx, a),
        Command::Heartbeat(a) => commands::watch::execute(&ctx, a),
        Command::Agents(a) => commands::agents::execute(&ctx, a),
        Command::Inbox(a) => commands::inbox::execute(&ctx, a),
        Command::Init(a) => commands::init::execute(&ctx, a),
        Command::Hook(_)
        | Command::Mcp
        | Command::Top(_)
        | Command::Ui(_)
        | Command::Demo(_)
        | Command::NotifyDrain
        | Command::Setup(_) => {
            unreachable!("handled before")
        }
        Command::Freeze(a) => commands::freeze::execute(&ctx, a),
        Command::Unfreeze(a) => commands::freeze::execute_unfreeze(&ctx, a),
        Command::GuardCommit => commands::guard::run(&ctx),
        Command::Stage(a) => commands::stage::execute(&ctx, a),
        Command::Why(a) => commands::why::execute(&ctx, a),
        Command::Doctor => commands::doctor::run(&ctx, discovery.as_ref()),
        Command::Audit(a) => commands::audit::execute(&ctx, a, audit_agent),
        Command::Note(a) => commands::note::execute(&ctx, a),
        Command::Give(a) => commands::give::execute(&ctx, a),
        Command::Run(a) => commands::run::execute(&ctx, a),
        Command::Backlog(a) => commands::backlog::execute(&ctx, a),
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

/// The views' binary (`tasklock top`, `tasklock ui`, `tasklock demo`), beside `tasklock`.
pub const VIEW_BINARY: &str = "tasklock-view";

/// What to say when the views' binary cannot be started.
pub const VIEW_MISSING: &str = "the views are the binary tasklock-view, installed beside tasklock by install.sh (and built with the default `view` feature)";

/// The MCP server's binary, beside `tasklock`.
pub const MCP_BINARY: &str = "tasklock-mcp";

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

/// What one command did, rendered both ways: the markdown the CLI prints, and the object
/// `--json` prints (with `warnings` when a step after the change failed).
#[derive(Debug, Clone)]
pub struct Called {
    pub exit_code: i32,
    pub markdown: String,
    pub json: serde_json::Value,
    /// For an error (rather than a report with a non-zero exit): its kind, as in the JSON.
    pub error_kind: Option<String>,
}

/// Run one command as `tasklock ARGS…` would (`args[0]` is the program name), without
/// printing: parse, execute and render it both ways. For the MCP server, which offers the
/// commands as tools; `hook`, `run`, `mcp` and `audit --follow` are not for this path.
pub fn call<I, T>(args: I) -> Called
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match parse_args(&args) {
        Ok(cli)
            if !matches!(
                cli.command,
                Command::Hook(_)
                    | Command::Run(_)
                    | Command::Mcp
                    | Command::Demo(_)
                    | Command::Audit(cli::AuditArgs { follow: true, .. })
                    | Command::Inbox(cli::InboxArgs { follow: true, .. })
            ) =>
        {
            cli
        }
        Ok(_) => {
            let msg = "this command cannot be called here";
            return Called {
                exit_code: EXIT_USAGE,
                markdown: render::error_line(msg),
                json: render::error_json("usage", msg, None, EXIT_USAGE),
                error_kind: Some("usage".into()),
            };
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let first = first_paragraph(&rendered)
                .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|| "usage error".into());
            return Called {
                exit_code: EXIT_USAGE,
                markdown: render::error_line(&first),
                json: render::error_json("usage", &first, None, EXIT_USAGE),
                error_kind: Some("usage".into()),
            };
        }
    };
    let inv = render::Invocation {
        dir: cli.global.dir.clone(),
        agent: cli.global.agent.clone(),
        cmd: Vec::new(),
        tools: true,
        anonymous: false,
    };
    let _ = warnings::take();
    let result = execute(cli);
    let (exit_code, mut markdown, json, error_kind) = match result {
        Ok(report) => (
            report.exit_code(),
            render::report(&report, Format::Markdown, &inv),
            render::report(&report, Format::Json, &inv),
            None,
        ),
        Err(e) => (
            e.exit_code(),
            render::error(&e, Format::Markdown, &inv),
            render::error(&e, Format::Json, &inv),
            Some(e.kind().to_string()),
        ),
    };
    let warnings = warnings::take();
    for w in &warnings {
        markdown.push_str(&format!("\nWarning: {w}\n"));
    }
    let mut json: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|_| serde_json::Value::String(json));
    if let (serde_json::Value::Object(map), false) = (&mut json, warnings.is_empty()) {
        map.insert("warnings".into(), serde_json::json!(warnings));
    }
    Called {
        exit_code,
        markdown,
        json,
        error_kind,
    }
}

/// The command line as clap reads it: the most frequent ones without building clap's
/// command tree ([`argv`]), every other one, and every error, by clap.
fn parse_args(args: &[OsString]) -> Result<Cli, clap::Error> {
    match argv::parse(args) {
        Some(cli) => Ok(cli),
        None => Cli::try_parse_from(args),
    }
}

/// Commands that create the lock directory when it does not exist. Without a lock
/// directory to find they refuse (exit 64) instead of creating one where other agents
/// would not look; the others answer as for an empty lock directory.
fn creates_store(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Checkout(_)
            | Command::Heartbeat(_)
            | Command::Freeze(_)
            | Command::Run(_)
            | Command::Backlog(cli::BacklogArgs {
                action: Some(cli::BacklogAction::Add(_))
            })
    )
}

/// Every key on the command line in NFC, so each spelling of a key names the same lock
/// (see [`key::normalize`]). `checkout --wait KEY`'s key may still sit in `wait`.
fn normalize_keys(mut command: Command) -> Command {
    let one = |k: &mut String| *k = key::normalize(k);
    match &mut command {
        Command::Checkout(cli::CheckoutArgs { keys, wait, .. }) => {
            keys.iter_mut().for_each(one);
            if let Some(Some(w)) = wait {
                one(w);
            }
        }
        Command::Release(cli::ReleaseArgs { keys, .. })
        | Command::Renew(cli::RenewArgs { keys, .. })
        | Command::Leave(cli::LeaveArgs { keys, .. })
        | Command::Backlog(cli::BacklogArgs {
            action:
                Some(
                    cli::BacklogAction::Add(cli::BacklogAddArgs { keys, .. })
                    | cli::BacklogAction::Remove(cli::BacklogRemoveArgs { keys, .. }),
                ),
        }) => keys.iter_mut().for_each(one),
        Command::Status(cli::StatusArgs { key })
        | Command::Verify(cli::VerifyArgs { key, .. })
        | Command::Note(cli::NoteArgs { key, .. })
        | Command::Give(cli::GiveArgs { key, .. })
        | Command::Freeze(cli::FreezeArgs { key, .. })
        | Command::Unfreeze(cli::UnfreezeArgs { key })
        | Command::Why(cli::WhyArgs { key: Some(key), .. }) => one(key),
        Command::Audit(cli::AuditArgs { key: Some(k), .. }) => one(k),
        Command::Run(cli::RunArgs { key, wait, .. }) => {
            if let Some(k) = key {
                one(k);
            }
            if let Some(Some(w)) = wait {
                one(w);
            }
        }
        _ => {}
    }
    command
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

/// The first paragraph of a clap error, on one line, without the `error: ` prefix:
/// "the following required arguments were not provided: <KEY>...".
fn first_paragraph(rendered: &str) -> Option<&str> {
    rendered
        .split("\n\n")
        .next()
        .map(|p| p.trim().trim_start_matches("error: "))
        .filter(|p| !p.is_empty())
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

//! One command line to one report: parse it (the frequent ones by [`crate::argv`], the
//! rest by clap), find the lock directory, make the command's context and run the
//! command. The CLI (`lib.rs`) prints what comes back; the MCP server, the views and the
//! demo run their commands through [`call`], which renders it both ways instead, so that
//! none of them can drift from the CLI. Below them all and above the commands: nothing
//! here prints.

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{self, Cli, Command};
use crate::engine::Ctx;
use crate::error::{EXIT_USAGE, Error};
use crate::render::{self, Format};
use crate::{argv, clock, commands, discover, key, report, warnings};

pub fn execute(cli: Cli) -> Result<report::Report, Error> {
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
    let (agent, name) = (cli.global.agent, cli.global.name);
    // `doctor` reports a server that cannot be reached instead of failing on it.
    let ctx = if matches!(cli.command, Command::Doctor | Command::Init(_)) {
        Ctx::new(dir, agent, name)?
    } else {
        Ctx::connected(dir, agent, name)?
    };
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
        Command::Worktrees(a) => commands::worktrees::execute(&ctx, a),
        Command::Why(a) => commands::why::execute(&ctx, a),
        Command::Doctor => commands::doctor::run(&ctx, discovery.as_ref()),
        Command::Audit(a) => commands::audit::execute(&ctx, a, audit_agent),
        Command::Note(a) => commands::note::execute(&ctx, a),
        Command::Give(a) => commands::give::execute(&ctx, a),
        Command::Run(a) => commands::run::execute(&ctx, a),
        Command::Backlog(a) => commands::backlog::execute(&ctx, a),
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
                    | Command::NotifyDrain
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
pub fn parse_args(args: &[OsString]) -> Result<Cli, clap::Error> {
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

/// The first paragraph of a clap error, on one line, without the `error: ` prefix:
/// "the following required arguments were not provided: <KEY>...".
pub fn first_paragraph(rendered: &str) -> Option<&str> {
    rendered
        .split("\n\n")
        .next()
        .map(|p| p.trim().trim_start_matches("error: "))
        .filter(|p| !p.is_empty())
}

/// The views' binary (`tasklock top`, `tasklock ui`, `tasklock demo`), beside `tasklock`.
pub const VIEW_BINARY: &str = "tasklock-view";

/// What to say when the views' binary cannot be started.
pub const VIEW_MISSING: &str = "the views are the binary tasklock-view, installed beside tasklock by install.sh (and built with the default `view` feature)";

/// The MCP server's binary, beside `tasklock`.
pub const MCP_BINARY: &str = "tasklock-mcp";

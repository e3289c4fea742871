//! Command-line types, and which output format the global options (and the terminal)
//! choose; no other logic.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::render::{Format, Screen};

#[derive(Debug, Parser)]
#[command(
    name = "tasklock",
    version,
    about = "Atomic task checkouts for coding agents working side by side",
    after_help = "Exit codes: 0 ok, 1 error, 2 held by another agent (or reserved, or frozen), \
                  3 no such checkout, 4 not the holder / lease lost, 5 deadlock, 64 usage error."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct Global {
    /// Output format (default: TASKLOCK_FORMAT, else `table` for a person at a terminal,
    /// `md` for agents and pipes)
    #[arg(long, global = true, value_enum)]
    pub format: Option<FormatArg>,
    /// Short for --format json
    #[arg(long, global = true)]
    pub json: bool,
    /// The lock directory (default: discovered; see the README)
    #[arg(long, global = true, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Agent id (default: TASKLOCK_AGENT, then CLAUDE_CODE_SESSION_ID, CODEX_THREAD_ID, GEMINI_SESSION_ID, OPENCODE_SESSION_ID)
    #[arg(long, global = true, value_name = "ID")]
    pub agent: Option<String>,
    /// Human label shown beside the agent id (default: TASKLOCK_AGENT_NAME)
    #[arg(long, global = true, value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Md,
    Json,
    Table,
}

impl Global {
    /// The output format: `--json` or `--format`, else `TASKLOCK_FORMAT`, else a table when
    /// stdout is a terminal and no agent client runs this command
    /// ([`crate::identity::agent_environment`]), markdown otherwise.
    pub fn output_format(&self) -> Result<Format, String> {
        let given = if self.json {
            Some(FormatArg::Json)
        } else {
            self.format
        };
        let chosen = match given {
            Some(f) => f,
            None => match std::env::var("TASKLOCK_FORMAT")
                .ok()
                .filter(|v| !v.is_empty())
            {
                Some(v) => FormatArg::from_str(&v, false).map_err(|_| {
                    format!("TASKLOCK_FORMAT={v:?} is not an output format: md, json or table")
                })?,
                None if std::io::stdout().is_terminal()
                    && crate::identity::agent_environment().is_none() =>
                {
                    FormatArg::Table
                }
                None => FormatArg::Md,
            },
        };
        Ok(match chosen {
            FormatArg::Md => Format::Markdown,
            FormatArg::Json => Format::Json,
            FormatArg::Table => Format::Table(screen()),
        })
    }
}

/// The terminal on stdout: its width (else `COLUMNS`, else 80) and the local time zone.
fn screen() -> Screen {
    let width = crate::os::terminal_width()
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.trim().parse().ok())
                .filter(|&c: &usize| c > 0)
        })
        .unwrap_or(80);
    let now = crate::clock::now()
        .map(|t| t.timestamp())
        .unwrap_or_default();
    Screen {
        width,
        utc_offset: crate::os::utc_offset(now).unwrap_or(0),
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s)
}

fn slots(s: &str) -> Result<u32, String> {
    let max = crate::key::MAX_SLOTS;
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a number of slots from 1 to {max}")),
    }
}

pub use crate::config::MIN_WATCH_INTERVAL;

fn watch_interval(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d < MIN_WATCH_INTERVAL {
        return Err(format!(
            "{s:?} is too short; the interval between beats is at least 1s"
        ));
    }
    Ok(d)
}

// Each subcommand's arguments are built only when that subcommand runs (`defer`): a
// command then builds one argument list instead of all of them, a tenth of its start-up
// (docs/performance.md). So the argument structs below carry plain comments, not doc
// comments: a deferred struct's doc comment would replace the subcommand's help line.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Atomically take KEY (re-checkout by the holder renews the lease)
    Checkout(CheckoutArgs),
    /// Release checkouts you hold
    Release(ReleaseArgs),
    /// Leave the queues of keys you wait for (a reservation held for you passes on)
    Leave(LeaveArgs),
    /// Extend the lease of checkouts you hold
    Renew(RenewArgs),
    /// One key in detail
    Status(StatusArgs),
    /// Table of active checkouts
    List(ListArgs),
    /// Exit 0 only if this agent still holds KEY under fencing token N
    Verify(VerifyArgs),
    /// Record that this agent is alive; renews the leases it holds
    Heartbeat(HeartbeatArgs),
    /// Table of known agents: alive, stalled or dead
    Agents(AgentsArgs),
    /// This agent's unread notifications (marked read unless --peek)
    Inbox(InboxArgs),
    /// Set up a project: lock directory, Claude Code hooks, agent instructions
    Init(InitArgs),
    /// Install the skills this binary carries for Claude Code (~/.claude/skills) and link
    /// them for Codex (~/.agents/skills)
    Setup(SetupArgs),
    /// Entry point for Claude Code and Codex hooks; reads the hook's JSON on stdin
    Hook(HookArgs),
    /// Block every checkout of KEY (or of a prefix: `deploy://*`) for a while
    Freeze(FreezeArgs),
    /// End a freeze early
    Unfreeze(UnfreezeArgs),
    /// Explain in plain words why KEY (and paths) can or cannot be checked out now
    Why(WhyArgs),
    /// The append-only event log (newest last); --agent filters by agent here
    Audit(AuditArgs),
    /// Check the setup: directory, file system, clock, identity, records, skills, hooks
    Doctor,
    /// Git pre-commit guard: refuse a commit of files another agent has checked out, or
    /// that you edited under a checkout you lost
    GuardCommit,
    /// Stage (`git add`) exactly the files you edited last, as the edit hook recorded them
    Stage(StageArgs),
    /// The git worktrees made by `checkout --worktree`: their checkout (or that it ended)
    /// and what they hold; --clean removes ended ones that hold nothing of value
    Worktrees(WorktreesArgs),
    /// The fleet, live, in the terminal: checkouts, agents, waits, freezes and events as
    /// they change (`tasklock top --help` for its options)
    #[command(disable_help_flag = true)]
    Top(ViewArgs),
    /// The fleet, live, in the browser: a page served on loopback, with a timeline
    /// (`tasklock ui --help` for its options)
    #[command(disable_help_flag = true)]
    Ui(ViewArgs),
    /// Try tasklock without any agent: a simulated fleet, live in `tasklock top` (q ends it)
    ///
    /// Simulated agents take issues from a backlog, add paths, queue, hand off, die (their
    /// checkouts released by tasklock's death detection) and meet a freeze, through real
    /// commands in a throwaway lock directory under TMPDIR, shown live in `tasklock top`
    /// (q ends it) or, with --ui, in the browser (`tasklock ui` prints its URL; Ctrl-C
    /// ends it). Your own lock directory is never used; when the demo ends, every process
    /// it started has ended and its directory is removed.
    Demo(DemoArgs),
    /// Tell the events `notify:` asks for to its webhooks (started by other commands)
    #[command(name = "notify-drain", hide = true)]
    NotifyDrain,
    /// MCP server on stdin/stdout: the checkout tools for MCP clients (one server = one agent)
    Mcp,
    /// Append a checkpoint to KEY's history (holder only)
    Note(NoteArgs),
    /// Hand a checkout you hold to another live agent (a new token; it is told)
    Give(GiveArgs),
    /// Check out KEY, run CMD renewing the lease, release when it ends (a KEY you hold stays held)
    Run(RunArgs),
    /// The project's backlog of keys for `checkout --next`: show it, add keys, remove keys
    Backlog(BacklogArgs),
}

/// The arguments of `backlog`.
#[derive(Debug, Args)]
pub struct BacklogArgs {
    #[command(subcommand)]
    pub action: Option<BacklogAction>,
}

#[derive(Debug, clap::Subcommand)]
pub enum BacklogAction {
    /// Show the counts, the next keys in line and the claims (the default)
    Show,
    /// Add keys at the end, in order; a key already in the backlog keeps its place
    Add(BacklogAddArgs),
    /// Remove keys from the backlog (claimed or not; a checkout of one stays as it is)
    Remove(BacklogRemoveArgs),
}

/// The arguments of `backlog add`.
#[derive(Debug, Args)]
pub struct BacklogAddArgs {
    #[arg(value_name = "KEY", required_unless_present = "file")]
    pub keys: Vec<String>,
    /// Read the keys from FILE, one a line (`-`: standard input; at most 16 MiB); blank
    /// lines and lines starting with `#` are skipped
    #[arg(long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
}

/// The arguments of `backlog remove`.
#[derive(Debug, Args)]
pub struct BacklogRemoveArgs {
    #[arg(value_name = "KEY", required_unless_present = "file")]
    pub keys: Vec<String>,
    /// Read the keys from FILE, one a line, as `backlog add --file` does
    #[arg(long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
}

// The arguments of `checkout`.
#[derive(Debug, Args)]
pub struct CheckoutArgs {
    /// The key; with --any, several keys in order of preference
    #[arg(required_unless_present_any = ["wait", "paths", "next", "worktree"], value_name = "KEY")]
    pub keys: Vec<String>,
    /// Also take these repository paths (a file, a tree, or a glob: `src/parser/**`),
    /// with KEY or alone; all or nothing. Repeat for several.
    #[arg(long = "path", value_name = "PATTERN", conflicts_with = "any")]
    pub paths: Vec<String>,
    /// Lease length (default from config.yaml: 30m)
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub timeout: Option<Duration>,
    /// Why you are taking it; shown to others
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub reason: Option<String>,
    /// If held, join KEY's queue and return at once (exit 2 with your position)
    #[arg(long, conflicts_with_all = ["wait", "any"])]
    pub queue: bool,
    /// If held, queue and block until granted, or until DUR passes (exit 2 then)
    #[arg(long, value_name = "DUR", num_args = 0..=1, conflicts_with = "any")]
    pub wait: Option<Option<String>>,
    /// Take the first free key of the list
    #[arg(long)]
    pub any: bool,
    /// Let up to N agents hold KEY at once, each in a slot of its own (default: the
    /// count the key keeps, else `slots:` in config.yaml, else 1)
    #[arg(long, value_name = "N", value_parser = slots, conflicts_with_all = ["paths", "any"])]
    pub slots: Option<u32>,
    /// Claim the first key of the project's backlog that can be taken (see `tasklock
    /// backlog`); exit 2 when every key is claimed, 3 when the backlog is empty
    #[arg(long, conflicts_with_all = ["keys", "paths", "any", "queue", "wait", "slots"])]
    pub next: bool,
    /// Register PID as this agent's long-lived process with the checkout, in the same
    /// step (as `heartbeat --pid` does): when it dies, the agent's checkouts are released
    #[arg(long, value_name = "PID", conflicts_with = "wait")]
    pub pid: Option<u32>,
    /// Once granted, make a git worktree for the work, at PATH or (without one) at
    /// `.worktrees/<key-slug>`, on branch `tasklock/<key-slug>` (config.yaml: `worktrees:`);
    /// its release removes it only when that loses nothing
    #[arg(long, value_name = "PATH", num_args = 0..=1, conflicts_with_all = ["any", "next", "queue", "slots"])]
    pub worktree: Option<Option<PathBuf>>,
}

// The arguments of `worktrees`.
#[derive(Debug, Args)]
pub struct WorktreesArgs {
    /// Remove each worktree whose checkout has ended and that holds nothing of value (no
    /// change, no commit on no other branch nor remote); list what was kept and why
    #[arg(long)]
    pub clean: bool,
}

// The arguments of `release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[arg(
        required_unless_present = "all",
        conflicts_with = "all",
        value_name = "KEY"
    )]
    pub keys: Vec<String>,
    /// Release everything this agent holds, and leave every queue it waits in
    #[arg(long)]
    pub all: bool,
    /// Release even if another agent holds it, or the record is corrupt (audited)
    #[arg(long)]
    pub force: bool,
    /// A note for the audit log and whoever comes next
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub note: Option<String>,
    /// The work is finished: also remove the key from the project's backlog (without it,
    /// a key claimed with `checkout --next` goes back to the backlog in its old place)
    #[arg(long, conflicts_with = "force")]
    pub done: bool,
}

// The arguments of `leave`.
#[derive(Debug, Args)]
pub struct LeaveArgs {
    #[arg(
        required_unless_present = "all",
        conflicts_with = "all",
        value_name = "KEY"
    )]
    pub keys: Vec<String>,
    /// Leave every queue this agent waits in
    #[arg(long)]
    pub all: bool,
}

// The arguments of `renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    #[arg(
        required_unless_present = "all",
        conflicts_with = "all",
        value_name = "KEY"
    )]
    pub keys: Vec<String>,
    /// Renew everything this agent holds
    #[arg(long)]
    pub all: bool,
    /// New lease length from now (default: the lease keeps its own length)
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub timeout: Option<Duration>,
}

// The arguments of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    pub key: String,
}

// The arguments of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this agent's checkouts
    #[arg(long)]
    pub mine: bool,
}

// The arguments of `verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    pub key: String,
    #[arg(long, value_name = "N")]
    pub token: u64,
}

// The arguments of `heartbeat`.
#[derive(Debug, Args)]
pub struct HeartbeatArgs {
    /// A short free text shown in `tasklock agents`
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub status: Option<String>,
    /// The agent's long-lived process; when it dies, its checkouts are released
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Keep beating until PID dies (then release its checkouts) or SIGTERM; without
    /// --pid, PID is the Claude Code process (CLAUDE_PID) or the one that started
    /// the calling shell
    #[arg(long)]
    pub watch: bool,
    /// Time between beats with --watch, at least 1s (default from config.yaml: 60s)
    #[arg(long, value_parser = watch_interval, value_name = "DUR", requires = "watch")]
    pub interval: Option<Duration>,
    /// With --watch: start the watcher in the background and return at once
    #[arg(long, requires = "watch")]
    pub detach: bool,
    /// Internal: the watcher was started by --detach, which beat already
    #[arg(long, hide = true, requires = "watch")]
    pub after_beat: bool,
}

// The arguments of `agents`.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Every agent in the registry, not only live and recently ended ones
    #[arg(long)]
    pub all: bool,
}

// The arguments of `inbox`.
#[derive(Debug, Args)]
pub struct InboxArgs {
    /// Leave the messages unread
    #[arg(long)]
    pub peek: bool,
    /// Keep running: print each message no push delivered, one line each, as it arrives
    /// (for a Claude Code plugin's monitor); ends with the session that started it
    #[arg(long, conflicts_with = "peek")]
    pub follow: bool,
}

// The arguments of `init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Show what would change without changing anything
    #[arg(long)]
    pub dry_run: bool,
    /// Share the lock directory with a Unix group (default: your primary group):
    /// group GROUP, mode 2770, files 0660. Without it the lock directory is private.
    #[arg(long, value_name = "GROUP", num_args = 0..=1, default_missing_value = "")]
    pub shared: Option<String>,
    /// Also install the git pre-commit guard (`tasklock guard-commit`), beside an
    /// existing pre-commit hook or husky
    #[arg(long)]
    pub git_hook: bool,
    /// Also set up Cursor (.cursor/rules/tasklock.mdc, .cursor/mcp.json); done anyway
    /// when the project has a .cursor directory
    #[arg(long)]
    pub cursor: bool,
    /// The clients to set up: claude, codex, gemini, opencode, cursor (comma-separated;
    /// default: those whose folder the project has or whose command is on PATH, else claude)
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub client: Vec<String>,
}

// The arguments of `setup`.
#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Put the skills here instead of ~/.claude/skills
    #[arg(long, value_name = "DIR")]
    pub skills_dir: Option<std::path::PathBuf>,
    /// Link them here instead of ~/.agents/skills
    #[arg(long, value_name = "DIR")]
    pub agents_dir: Option<std::path::PathBuf>,
    /// Do not link the skills for Codex and other agents
    #[arg(long)]
    pub no_agents: bool,
    /// Replace skill files and links that are not this version's
    #[arg(long)]
    pub force: bool,
    /// Show what would change without changing anything
    #[arg(long)]
    pub dry_run: bool,
    /// Remove the skills and links setup installed (listed in its receipt), and nothing else
    #[arg(long, conflicts_with_all = ["force", "skills_dir", "agents_dir", "no_agents"])]
    pub uninstall: bool,
}

// The arguments of `hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// session-start, user-prompt-submit, pre-tool-use, post-tool-use, stop, subagent-start,
    /// subagent-stop or session-end
    pub event: Option<String>,
}

// The arguments of `freeze`.
#[derive(Debug, Args)]
pub struct FreezeArgs {
    /// A key, or a prefix ending in `*`
    pub key: String,
    /// How long the freeze lasts; it ends by itself
    #[arg(long = "for", value_parser = duration, value_name = "DUR", required = true)]
    pub for_: Duration,
    /// Why; shown to everyone refused
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub reason: Option<String>,
}

// The arguments of `unfreeze`.
#[derive(Debug, Args)]
pub struct UnfreezeArgs {
    pub key: String,
}

// The arguments of `why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    #[arg(required_unless_present = "paths", value_name = "KEY")]
    pub key: Option<String>,
    /// Also ask about these repository paths, as `checkout --path` would take them
    #[arg(long = "path", value_name = "PATTERN")]
    pub paths: Vec<String>,
}

// The arguments of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only events from the last DUR
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub since: Option<Duration>,
    /// Only events of this key
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Show at most N events, the most recent (0: all)
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
    /// Keep printing new events until interrupted
    #[arg(long)]
    pub follow: bool,
}

// The arguments of `stage`.
#[derive(Debug, Args)]
pub struct StageArgs {
    /// List the files without staging them
    #[arg(long)]
    pub dry_run: bool,
}

// The arguments of `note`.
#[derive(Debug, Args)]
pub struct NoteArgs {
    pub key: String,
    /// The note, one line (it may start with `-`)
    #[arg(allow_hyphen_values = true)]
    pub text: String,
}

// The arguments of `give`.
#[derive(Debug, Args)]
pub struct GiveArgs {
    pub key: String,
    /// The agent that is to hold KEY: registered, not ended, not dead
    #[arg(long, value_name = "AGENT")]
    pub to: String,
    /// The receiver's lease, from now (default from config.yaml: 30m)
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub timeout: Option<Duration>,
}

// The arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The key (may also follow --wait: `run --wait KEY -- CMD`)
    #[arg(required_unless_present = "wait", value_name = "KEY")]
    pub key: Option<String>,
    /// Lease length (default from config.yaml: 30m); renewed in the background
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub timeout: Option<Duration>,
    /// Why you are taking it; shown to others
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub reason: Option<String>,
    /// If held, queue and block until granted (or DUR passes: exit 2 without running CMD)
    #[arg(long, value_name = "DUR", num_args = 0..=1)]
    pub wait: Option<Option<String>>,
    /// Let up to N agents hold KEY at once, each in a slot of its own
    #[arg(long, value_name = "N", value_parser = slots)]
    pub slots: Option<u32>,
    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<std::ffi::OsString>,
}

// The arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Show the fleet in the browser: start `tasklock ui` on the demo's lock directory
    /// (it prints the page's URL) instead of `tasklock top`
    #[arg(long)]
    pub ui: bool,
}

/// `tasklock top` and `tasklock ui`: their options go to the views' binary as they are.
#[derive(Args, Debug)]
pub struct ViewArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "OPTIONS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

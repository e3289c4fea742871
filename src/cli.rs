//! Command-line types only; no logic.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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

#[derive(Debug, Args)]
pub struct Global {
    /// Output format
    #[arg(long, global = true, value_enum)]
    pub format: Option<FormatArg>,
    /// Short for --format json
    #[arg(long, global = true)]
    pub json: bool,
    /// The lock directory (default: discovered; see the README)
    #[arg(long, global = true, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Agent id (default: TASKLOCK_AGENT, then CLAUDE_CODE_SESSION_ID, then CODEX_THREAD_ID)
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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Atomically take KEY (re-checkout by the holder renews the lease)
    Checkout {
        /// The key; with --any, several keys in order of preference
        #[arg(required_unless_present_any = ["wait", "paths"], value_name = "KEY")]
        keys: Vec<String>,
        /// Also take these repository paths (a file, a tree, or a glob: `src/parser/**`),
        /// with KEY or alone; all or nothing. Repeat for several.
        #[arg(long = "path", value_name = "PATTERN", conflicts_with = "any")]
        paths: Vec<String>,
        /// Lease length (default from config.yaml: 30m)
        #[arg(long, value_parser = duration, value_name = "DUR")]
        timeout: Option<Duration>,
        /// Why you are taking it; shown to others
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        reason: Option<String>,
        /// If held, join KEY's queue and return at once (exit 2 with your position)
        #[arg(long, conflicts_with_all = ["wait", "any"])]
        queue: bool,
        /// If held, queue and block until granted, or until DUR passes (exit 2 then)
        #[arg(long, value_name = "DUR", num_args = 0..=1, conflicts_with = "any")]
        wait: Option<Option<String>>,
        /// Take the first free key of the list
        #[arg(long)]
        any: bool,
        /// Let up to N agents hold KEY at once, each in a slot of its own (default: the
        /// count the key keeps, else `slots:` in config.yaml, else 1)
        #[arg(long, value_name = "N", value_parser = slots, conflicts_with_all = ["paths", "any"])]
        slots: Option<u32>,
    },
    /// Release checkouts you hold
    Release {
        #[arg(
            required_unless_present = "all",
            conflicts_with = "all",
            value_name = "KEY"
        )]
        keys: Vec<String>,
        /// Release everything this agent holds, and leave every queue it waits in
        #[arg(long)]
        all: bool,
        /// Release even if another agent holds it, or the record is corrupt (audited)
        #[arg(long)]
        force: bool,
        /// A note for the audit log and whoever comes next
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        note: Option<String>,
    },
    /// Leave the queues of keys you wait for (a reservation held for you passes on)
    Leave {
        #[arg(
            required_unless_present = "all",
            conflicts_with = "all",
            value_name = "KEY"
        )]
        keys: Vec<String>,
        /// Leave every queue this agent waits in
        #[arg(long)]
        all: bool,
    },
    /// Extend the lease of checkouts you hold
    Renew {
        #[arg(
            required_unless_present = "all",
            conflicts_with = "all",
            value_name = "KEY"
        )]
        keys: Vec<String>,
        /// Renew everything this agent holds
        #[arg(long)]
        all: bool,
        /// New lease length from now (default: the lease keeps its own length)
        #[arg(long, value_parser = duration, value_name = "DUR")]
        timeout: Option<Duration>,
    },
    /// One key in detail
    Status { key: String },
    /// Table of active checkouts
    List {
        /// Only this agent's checkouts
        #[arg(long)]
        mine: bool,
    },
    /// Exit 0 only if this agent still holds KEY under fencing token N
    Verify {
        key: String,
        #[arg(long, value_name = "N")]
        token: u64,
    },
    /// Record that this agent is alive; renews the leases it holds
    Heartbeat {
        /// A short free text shown in `tasklock agents`
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        status: Option<String>,
        /// The agent's long-lived process; when it dies, its checkouts are released
        #[arg(long, value_name = "PID")]
        pid: Option<u32>,
        /// Keep beating until PID dies (then release its checkouts) or SIGTERM; without
        /// --pid, PID is the Claude Code process (CLAUDE_PID) or the one that started
        /// the calling shell
        #[arg(long)]
        watch: bool,
        /// Time between beats with --watch, at least 1s (default from config.yaml: 60s)
        #[arg(long, value_parser = watch_interval, value_name = "DUR", requires = "watch")]
        interval: Option<Duration>,
        /// With --watch: start the watcher in the background and return at once
        #[arg(long, requires = "watch")]
        detach: bool,
        /// Internal: the watcher was started by --detach, which beat already
        #[arg(long, hide = true, requires = "watch")]
        after_beat: bool,
    },
    /// Table of known agents: alive, stalled or dead
    Agents {
        /// Every agent in the registry, not only live and recently ended ones
        #[arg(long)]
        all: bool,
    },
    /// This agent's unread notifications (marked read unless --peek)
    Inbox {
        /// Leave the messages unread
        #[arg(long)]
        peek: bool,
    },
    /// Set up a project: lock directory, Claude Code hooks, agent instructions
    Init {
        /// Show what would change without changing anything
        #[arg(long)]
        dry_run: bool,
        /// Share the lock directory with a Unix group (default: your primary group):
        /// group GROUP, mode 2770, files 0660. Without it the lock directory is private.
        #[arg(long, value_name = "GROUP", num_args = 0..=1, default_missing_value = "")]
        shared: Option<String>,
        /// Also install the git pre-commit guard (`tasklock guard-commit`), beside an
        /// existing pre-commit hook or husky
        #[arg(long)]
        git_hook: bool,
    },
    /// Install the skills this binary carries for Claude Code (~/.claude/skills) and link
    /// them for Codex (~/.agents/skills)
    Setup {
        /// Put the skills here instead of ~/.claude/skills
        #[arg(long, value_name = "DIR")]
        skills_dir: Option<std::path::PathBuf>,
        /// Link them here instead of ~/.agents/skills
        #[arg(long, value_name = "DIR")]
        agents_dir: Option<std::path::PathBuf>,
        /// Do not link the skills for Codex and other agents
        #[arg(long)]
        no_agents: bool,
        /// Replace skill files and links that are not this version's
        #[arg(long)]
        force: bool,
        /// Show what would change without changing anything
        #[arg(long)]
        dry_run: bool,
    },
    /// Entry point for Claude Code and Codex hooks; reads the hook's JSON on stdin
    Hook {
        /// session-start, user-prompt-submit, pre-tool-use, post-tool-use, stop, subagent-start,
        /// subagent-stop or session-end
        event: Option<String>,
    },
    /// Block every checkout of KEY (or of a prefix: `deploy://*`) for a while
    Freeze {
        /// A key, or a prefix ending in `*`
        key: String,
        /// How long the freeze lasts; it ends by itself
        #[arg(long = "for", value_parser = duration, value_name = "DUR", required = true)]
        for_: Duration,
        /// Why; shown to everyone refused
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        reason: Option<String>,
    },
    /// End a freeze early
    Unfreeze { key: String },
    /// Explain in plain words why KEY (and paths) can or cannot be checked out now
    Why {
        #[arg(required_unless_present = "paths", value_name = "KEY")]
        key: Option<String>,
        /// Also ask about these repository paths, as `checkout --path` would take them
        #[arg(long = "path", value_name = "PATTERN")]
        paths: Vec<String>,
    },
    /// The append-only event log (newest last); --agent filters by agent here
    Audit {
        /// Only events from the last DUR
        #[arg(long, value_parser = duration, value_name = "DUR")]
        since: Option<Duration>,
        /// Only events of this key
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// Show at most N events, the most recent (0: all)
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        /// Keep printing new events until interrupted
        #[arg(long)]
        follow: bool,
    },
    /// Check the setup: directory, file system, clock, identity, records, skills, hooks
    Doctor,
    /// Git pre-commit guard: refuse a commit of files another agent has checked out, or
    /// that you edited under a checkout you lost
    GuardCommit,
    /// Stage (`git add`) exactly the files you edited last, as the edit hook recorded them
    Stage {
        /// List the files without staging them
        #[arg(long)]
        dry_run: bool,
    },
    /// MCP server on stdin/stdout: the checkout tools for MCP clients (one server = one agent)
    Mcp,
    /// Append a checkpoint to KEY's history (holder only)
    Note {
        key: String,
        /// The note, one line (it may start with `-`)
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Check out KEY, run CMD renewing the lease, release when it ends
    Run {
        /// The key (may also follow --wait: `run --wait KEY -- CMD`)
        #[arg(required_unless_present = "wait", value_name = "KEY")]
        key: Option<String>,
        /// Lease length (default from config.yaml: 30m); renewed in the background
        #[arg(long, value_parser = duration, value_name = "DUR")]
        timeout: Option<Duration>,
        /// Why you are taking it; shown to others
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        reason: Option<String>,
        /// If held, queue and block until granted (or DUR passes: exit 2 without running CMD)
        #[arg(long, value_name = "DUR", num_args = 0..=1)]
        wait: Option<Option<String>>,
        /// Let up to N agents hold KEY at once, each in a slot of its own
        #[arg(long, value_name = "N", value_parser = slots)]
        slots: Option<u32>,
        /// The command and its arguments, after `--`
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<std::ffi::OsString>,
    },
}

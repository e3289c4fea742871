//! `.locks/config.yaml`: every setting has a default, and a missing file is fine.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub lease: Duration,
    pub heartbeat_interval: Duration,
    /// A heartbeat looks at every other agent's checkouts (a sweep) at most this often in
    /// the project; zero: on every beat.
    pub sweep_interval: Duration,
    pub stalled_after: Duration,
    pub dead_after: Duration,
    pub handoff_grace: Duration,
    /// Automatic renewals (heartbeats, the session watcher) stop this long after a grant.
    pub max_hold: Duration,
    /// `audit.jsonl` is rotated when it would grow past this many bytes.
    pub audit_max_size: u64,
    /// How many rotated audit files (`audit.jsonl.1` …) are kept.
    pub audit_keep: usize,
    /// A dead agent's registry entry is removed this long after its last sign of life
    /// (when it holds nothing).
    pub agent_retention: Duration,
    /// How long a command waits for the `.guard` lock before giving up.
    pub guard_timeout: Duration,
    /// SHA-256 (hex) of the operator secret: a caller with `TASKLOCK_OPERATOR_SECRET`
    /// set to it may `release --force` a live holder's checkout.
    pub operator_secret_sha256: Option<String>,
    /// `store: postgres://…`: keep everything in PostgreSQL instead of the lock
    /// directory (`TASKLOCK_URL` wins over it). `None`: the lock directory.
    pub store: Option<String>,
    /// `session_store: postgres://…`, with `store:`: where connections that must keep a
    /// session go when `store:` is a pooler in transaction mode (docs/postgres.md).
    pub session_store: Option<String>,
    /// What the edit hook does when an agent edits a file another live agent's
    /// checkout covers.
    pub enforce: Enforce,
    /// The edit hook checks out (`path:<file>`) an unclaimed file the agent edits.
    pub auto_checkout: bool,
    /// `slots:`, keys with slots: a key (or a prefix ending in `*`) and how many agents
    /// may hold it at once. The first entry that covers a key applies.
    pub slots: Vec<(String, u32)>,
    /// `notify:`, webhooks told of deaths, deadlocks, handoffs and the like.
    pub notify: Vec<NotifyTarget>,
    /// `worktrees:`, where `checkout --worktree` makes a worktree and how it names its
    /// branch.
    pub worktrees: WorktreeSettings,
}

/// `worktrees: {dir: .worktrees, branch: "tasklock/{key}"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeSettings {
    /// The directory a checkout's worktree is made in (as `<dir>/<key-slug>`), relative
    /// to the top of the repository's main worktree unless absolute.
    pub dir: String,
    /// The branch's name; `{key}` stands for the key's slug.
    pub branch: String,
}

impl Default for WorktreeSettings {
    fn default() -> Self {
        WorktreeSettings {
            dir: ".worktrees".into(),
            branch: "tasklock/{key}".into(),
        }
    }
}

/// `enforce:`, what the edit hook (PreToolUse on Edit, Write, MultiEdit, NotebookEdit)
/// does with an edit of a file that another live agent has checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enforce {
    /// Refuse the edit, naming the holder (the default).
    #[default]
    Deny,
    /// Allow it, with a warning to the model and the user.
    Warn,
    /// Allow it and say nothing.
    Off,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease: Duration::from_secs(30 * 60),
            heartbeat_interval: Duration::from_secs(60),
            sweep_interval: Duration::from_secs(10),
            stalled_after: Duration::from_secs(3 * 60),
            dead_after: Duration::from_secs(10 * 60),
            handoff_grace: Duration::from_secs(2 * 60),
            max_hold: Duration::from_secs(8 * 3600),
            audit_max_size: 10 << 20,
            audit_keep: 3,
            agent_retention: Duration::from_secs(24 * 3600),
            guard_timeout: Duration::from_secs(60),
            operator_secret_sha256: None,
            store: None,
            session_store: None,
            enforce: Enforce::Deny,
            auto_checkout: false,
            slots: Vec::new(),
            notify: Vec::new(),
            worktrees: WorktreeSettings::default(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    lease: Option<String>,
    heartbeat_interval: Option<String>,
    sweep_interval: Option<String>,
    stalled_after: Option<String>,
    dead_after: Option<String>,
    handoff_grace: Option<String>,
    max_hold: Option<String>,
    audit_max_size: Option<String>,
    audit_keep: Option<usize>,
    agent_retention: Option<String>,
    guard_timeout: Option<String>,
    operator_secret_sha256: Option<String>,
    store: Option<String>,
    session_store: Option<String>,
    enforce: Option<String>,
    auto_checkout: Option<bool>,
    slots: Option<Vec<SlotsEntry>>,
    notify: Option<Vec<RawNotify>>,
    worktrees: Option<RawWorktrees>,
}

/// `worktrees:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorktrees {
    dir: Option<String>,
    branch: Option<String>,
}

/// One entry of `slots:`: `- key: cargo-build` / `slots: 3`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SlotsEntry {
    key: String,
    slots: u32,
}

/// `worktrees:`: a directory that is not empty, a branch name with `{key}` in it.
fn parse_worktrees(w: RawWorktrees) -> std::result::Result<WorktreeSettings, String> {
    let mut out = WorktreeSettings::default();
    if let Some(dir) = w.dir {
        let dir = dir.trim();
        if dir.is_empty() || dir.chars().any(char::is_control) {
            return Err(
                "worktrees.dir: a directory (relative to the repository's top, or absolute)".into(),
            );
        }
        out.dir = dir.to_string();
    }
    if let Some(branch) = w.branch {
        let branch = branch.trim();
        if !branch.contains("{key}") || branch.chars().any(char::is_control) {
            return Err(
                "worktrees.branch: a branch name with `{key}` in it (`tasklock/{key}`)".into(),
            );
        }
        out.branch = branch.to_string();
    }
    Ok(out)
}

/// The shortest `heartbeat --watch --interval`: below it the watcher only burns CPU.
pub const MIN_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Is this a PostgreSQL URL (`store:`, `TASKLOCK_URL`)?
pub fn is_url(s: &str) -> bool {
    let s = s.trim();
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

impl Config {
    /// How many slots `slots:` gives `key`, if an entry covers it.
    pub fn slots_for(&self, key: &str) -> Option<u32> {
        self.slots
            .iter()
            .find(|(pattern, _)| match pattern.strip_suffix('*') {
                Some(prefix) => key.starts_with(prefix),
                None => pattern == key,
            })
            .map(|(_, n)| *n)
    }

    pub const FILE: &'static str = "config.yaml";
    /// A bigger `config.yaml` is refused unread: the real one is a few lines.
    pub const MAX_BYTES: u64 = 64 * 1024;
    /// Deeper nesting is refused before parsing: the settings are a flat mapping.
    pub const MAX_DEPTH: usize = 32;

    /// Load `config.yaml` from the lock directory; defaults when absent.
    ///
    /// Anyone who can write to the lock directory can put a file there, so the file is
    /// read defensively: never through a symbolic link (its target may be a secret that
    /// an error would echo), never a FIFO or device (opened non-blocking, refused at
    /// once), at most [`Config::MAX_BYTES`], and rejected before parsing when it nests
    /// deeper than [`Config::MAX_DEPTH`] (the YAML parser is slow on deep nesting).
    /// Every failure is an [`Error::Config`] naming the file, never quoting its content.
    pub fn load(lock_dir: &Path) -> Result<Config> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let path = lock_dir.join(Self::FILE);
        let fail = |message: String| Error::Config {
            path: path.clone(),
            message,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path);
        let file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            // The lock directory is not a directory: the store says so more clearly.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(Config::default()),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(fail(
                    "it is a symbolic link; tasklock reads config.yaml only as a regular file in the lock directory, never through a link".into(),
                ));
            }
            Err(e) => return Err(fail(format!("cannot open it: {e}"))),
        };
        let meta = file
            .metadata()
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if !meta.is_file() {
            return Err(fail(
                "it is not a regular file (a FIFO, device or directory was put there); config.yaml must be a regular file".into(),
            ));
        }
        let too_big = |n: u64| {
            fail(format!(
                "it is {n} bytes, over the {} KiB limit for config.yaml",
                Self::MAX_BYTES >> 10
            ))
        };
        if meta.len() > Self::MAX_BYTES {
            return Err(too_big(meta.len()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(Self::MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if bytes.len() as u64 > Self::MAX_BYTES {
            return Err(too_big(bytes.len() as u64));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            fail(format!(
                "it is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        })?;
        check_nesting(&text).map_err(fail)?;
        Self::parse(&text).map_err(fail)
    }

    pub fn parse(text: &str) -> std::result::Result<Config, String> {
        let mut raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_norway::from_str::<Option<RawConfig>>(text)
                .map_err(|e| yaml_error(&e))?
                .unwrap_or_default()
        };
        let mut c = Config::default();
        c.set_durations(&mut raw)?;
        if let Some(size) = raw.audit_max_size.take() {
            c.audit_max_size = parse_size(&size).map_err(|e| format!("audit_max_size: {e}"))?;
        }
        if let Some(keep) = raw.audit_keep {
            if keep > 100 {
                return Err("audit_keep: at most 100 rotated files".into());
            }
            c.audit_keep = keep;
        }
        if let Some(h) = raw.operator_secret_sha256.take() {
            let h = h.trim().to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(
                    "operator_secret_sha256: 64 hex digits (printf %s \"$SECRET\" | sha256sum)"
                        .into(),
                );
            }
            c.operator_secret_sha256 = Some(h);
        }
        c.set_stores(&mut raw)?;
        for e in raw.slots.take().unwrap_or_default() {
            let key = crate::key::normalize(e.key.trim());
            let bare = key.strip_suffix('*').unwrap_or(&key);
            if !bare.is_empty() {
                crate::key::validate(bare).map_err(|err| format!("slots: {err}"))?;
            }
            if e.slots == 0 || e.slots > crate::key::MAX_SLOTS {
                return Err(format!(
                    "slots: `{key}` takes a number of slots from 1 to {}, not {}",
                    crate::key::MAX_SLOTS,
                    e.slots
                ));
            }
            c.slots.push((key, e.slots));
        }
        if let Some(e) = raw.enforce {
            c.enforce = match e.trim() {
                "deny" => Enforce::Deny,
                "warn" => Enforce::Warn,
                "off" => Enforce::Off,
                _ => return Err("enforce: one of deny, warn, off".into()),
            };
        }
        if let Some(a) = raw.auto_checkout {
            c.auto_checkout = a;
        }
        c.notify = parse_notify(raw.notify.unwrap_or_default())?;
        if let Some(w) = raw.worktrees.take() {
            c.worktrees = parse_worktrees(w)?;
        }
        if c.stalled_after > c.dead_after {
            return Err("stalled_after must not be longer than dead_after".into());
        }
        Ok(c)
    }

    /// The settings that are durations, each checked as it is read.
    fn set_durations(&mut self, raw: &mut RawConfig) -> std::result::Result<(), String> {
        let set = |slot: &mut Duration,
                   name: &str,
                   v: Option<String>|
         -> std::result::Result<(), String> {
            if let Some(v) = v {
                *slot = crate::duration::parse(&v).map_err(|e| format!("{name}: {e}"))?;
            }
            Ok(())
        };
        set(&mut self.lease, "lease", raw.lease.take())?;
        set(
            &mut self.heartbeat_interval,
            "heartbeat_interval",
            raw.heartbeat_interval.take(),
        )?;
        if let Some(v) = raw.sweep_interval.take() {
            // Zero is allowed here alone: every beat sweeps.
            self.sweep_interval =
                crate::duration::parse_or_zero(&v).map_err(|e| format!("sweep_interval: {e}"))?;
        }
        set(
            &mut self.stalled_after,
            "stalled_after",
            raw.stalled_after.take(),
        )?;
        set(&mut self.dead_after, "dead_after", raw.dead_after.take())?;
        set(
            &mut self.handoff_grace,
            "handoff_grace",
            raw.handoff_grace.take(),
        )?;
        set(&mut self.max_hold, "max_hold", raw.max_hold.take())?;
        set(
            &mut self.agent_retention,
            "agent_retention",
            raw.agent_retention.take(),
        )?;
        set(
            &mut self.guard_timeout,
            "guard_timeout",
            raw.guard_timeout.take(),
        )?;
        if self.heartbeat_interval < MIN_WATCH_INTERVAL {
            return Err("heartbeat_interval: at least 1s".into());
        }
        Ok(())
    }

    /// `store:` and `session_store:`, the PostgreSQL URLs.
    fn set_stores(&mut self, raw: &mut RawConfig) -> std::result::Result<(), String> {
        if let Some(store) = raw
            .store
            .take()
            .filter(|s| !s.trim().is_empty() && s.trim() != "file")
        {
            if !is_url(&store) {
                return Err(
                    "store: a postgres:// or postgresql:// URL (or `file` for the lock directory)"
                        .into(),
                );
            }
            self.store = Some(store.trim().to_string());
        }
        if let Some(session) = raw.session_store.take().filter(|s| !s.trim().is_empty()) {
            if !is_url(&session) {
                return Err("session_store: a postgres:// or postgresql:// URL".into());
            }
            if self.store.is_none() {
                return Err(
                    "session_store: goes with store: (where the sessions of that store go)".into(),
                );
            }
            self.session_store = Some(session.trim().to_string());
        }
        Ok(())
    }
}

const SETTINGS: &str = "lease, heartbeat_interval, sweep_interval, stalled_after, dead_after, handoff_grace, max_hold, audit_max_size, audit_keep, agent_retention, guard_timeout, store, session_store, enforce, auto_checkout, slots, notify";

/// A YAML error in words that never quote the file: the parser's own messages can
/// (`invalid type: string "…"`), and config.yaml may be a link to, or a copy of, a
/// secret. Only the position, and an unknown setting's name when it looks like one.
fn yaml_error(e: &serde_norway::Error) -> String {
    let at = e
        .location()
        .map(|l| format!(" at line {} column {}", l.line(), l.column()))
        .unwrap_or_default();
    let full = e.to_string();
    if let Some((path, rest)) = full.split_once(": unknown field `")
        && let Some(section) = ["slots", "notify"].iter().find(|s| path.starts_with(*s))
    {
        let name = rest.split('`').next().unwrap_or("");
        let plausible = !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let named = if plausible {
            format!(" `{name}`")
        } else {
            String::new()
        };
        let takes = if *section == "slots" {
            "key, slots"
        } else {
            "url, on, format"
        };
        return format!("unknown setting{named} in `{section}`{at}; an entry there takes {takes}");
    }
    if let Some(rest) = full.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or("");
        let plausible = !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let named = if plausible {
            format!(" `{name}`")
        } else {
            String::new()
        };
        return format!("unknown setting{named}{at}; the settings are {SETTINGS}");
    }
    let what = if full.starts_with("duplicate field") {
        "a setting is given twice"
    } else if full.starts_with("invalid type") || full.starts_with("invalid value") {
        "a value of the wrong kind; write each setting as `name: value` on its own line"
    } else if full.contains("recursion limit") {
        "it nests too deeply; write each setting as `name: value` on its own line"
    } else {
        "not valid YAML; write each setting as `name: value` on its own line"
    };
    format!("{what}{at}")
}

/// Refuse text that nests deeper than [`Config::MAX_DEPTH`] before the YAML parser sees
/// it: flow collections (`[[[…`, `{a: {b: …`), compact block sequences on one line
/// (`- - - …`) and deep indentation. Quoted text and comments do not count.
fn check_nesting(text: &str) -> std::result::Result<(), String> {
    let deep = |n: usize| {
        format!(
            "it nests {n} levels deep, over the limit of {}; config.yaml is a flat list of `name: value` settings",
            Config::MAX_DEPTH
        )
    };
    let mut flow = 0usize;
    let mut quote: Option<char> = None;
    for line in text.lines() {
        // `prev` starts as a blank: a line starts like after whitespace.
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if quote.is_none() && flow == 0 {
            // Block nesting: indentation and indicators (`- `, `? `) that open a level.
            let mut levels = indent / 2;
            let mut rest = &line.as_bytes()[indent..];
            while let [b'-' | b'?' | b':', tail @ ..] = rest
                && (tail.is_empty() || tail[0] == b' ' || tail[0] == b'\t')
            {
                levels += 1;
                rest = tail.trim_ascii_start();
            }
            if levels > Config::MAX_DEPTH {
                return Err(deep(levels));
            }
        }
        let mut prev = ' ';
        for c in line.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '#' if prev == ' ' || prev == '\t' => break,
                    // A quote opens a quoted scalar only where a scalar starts; in
                    // `don't` it is text. Quoted scalars may span lines.
                    '"' | '\''
                        if matches!(prev, ' ' | '\t' | '[' | '{' | ',' | ':' | '-' | '?') =>
                    {
                        quote = Some(c)
                    }
                    '[' | '{' => {
                        flow += 1;
                        if flow > Config::MAX_DEPTH {
                            return Err(deep(flow));
                        }
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
        }
    }
    Ok(())
}

/// Sizes like `10MiB`, `512KiB`, `1GiB` or a plain number of bytes.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; write it like 10MiB or 512KiB"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?}; use KiB, MiB or GiB")),
    };
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if v < 1024 {
        return Err(format!("{s:?} is too small; at least 1KiB"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(
            Config::parse("# only a comment\n").unwrap(),
            Config::default()
        );
        let c = Config::parse("lease: 1h\nhandoff_grace: 30s\n").unwrap();
        assert_eq!(c.lease, Duration::from_secs(3600));
        assert_eq!(c.handoff_grace, Duration::from_secs(30));
    }

    #[test]
    fn a_session_store_goes_with_a_store() {
        let c = Config::parse(
            "store: postgres://u@bouncer:6432/db\nsession_store: postgres://u@db:5432/db\n",
        )
        .unwrap();
        assert_eq!(c.session_store.as_deref(), Some("postgres://u@db:5432/db"));
        let e = Config::parse("session_store: postgres://u@db/db\n").unwrap_err();
        assert!(e.contains("goes with store:"), "{e}");
        let e = Config::parse("store: postgres://h/db\nsession_store: db:5432\n").unwrap_err();
        assert!(e.contains("session_store: a postgres://"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10MiB").unwrap(), 10 << 20);
        assert_eq!(parse_size("2KiB").unwrap(), 2048);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12").is_err());
        assert!(parse_size("5 parsecs").is_err());
        let c = Config::parse("audit_max_size: 1MiB\naudit_keep: 5\n").unwrap();
        assert_eq!((c.audit_max_size, c.audit_keep), (1 << 20, 5));
    }

    #[test]
    fn errors_name_the_line() {
        let e = Config::parse("lease: 1h\nleese: 2h\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = Config::parse("lease: [\n").unwrap_err();
        assert!(e.contains("line"), "{e}");
        let e = Config::parse("lease: soon\n").unwrap_err();
        assert!(e.contains("lease"), "{e}");
        let e = Config::parse("heartbeat_interval: 10ms\n").unwrap_err();
        assert!(e.contains("heartbeat_interval"), "{e}");
    }

    #[test]
    fn sweep_interval_may_be_zero() {
        assert_eq!(Config::default().sweep_interval, Duration::from_secs(10));
        for (text, want) in [
            ("sweep_interval: 30s\n", Duration::from_secs(30)),
            ("sweep_interval: 0s\n", Duration::ZERO),
            ("sweep_interval: 0\n", Duration::ZERO),
            ("sweep_interval: 00m\n", Duration::ZERO),
        ] {
            assert_eq!(Config::parse(text).unwrap().sweep_interval, want, "{text}");
        }
        for bad in [
            "sweep_interval: soon\n",
            "sweep_interval: 0x\n",
            "sweep_interval: s\n",
        ] {
            let e = Config::parse(bad).unwrap_err();
            assert!(e.contains("sweep_interval"), "{bad}: {e}");
        }
    }

    #[test]
    fn retention_and_guard_timeout() {
        let d = Config::default();
        assert_eq!(d.agent_retention, Duration::from_secs(24 * 3600));
        assert_eq!(d.guard_timeout, Duration::from_secs(60));
        let c = Config::parse("agent_retention: 2h\nguard_timeout: 5s\n").unwrap();
        assert_eq!(c.agent_retention, Duration::from_secs(7200));
        assert_eq!(c.guard_timeout, Duration::from_secs(5));
        assert!(Config::parse("guard_timeout: soon\n").is_err());
    }

    #[test]
    fn enforce_and_auto_checkout() {
        let d = Config::default();
        assert_eq!((d.enforce, d.auto_checkout), (Enforce::Deny, false));
        for (text, want) in [
            ("enforce: deny\n", Enforce::Deny),
            ("enforce: warn\n", Enforce::Warn),
            ("enforce: off\n", Enforce::Off),
        ] {
            assert_eq!(Config::parse(text).unwrap().enforce, want, "{text}");
        }
        assert!(
            Config::parse("auto_checkout: true\n")
                .unwrap()
                .auto_checkout
        );
        assert!(
            !Config::parse("auto_checkout: false\n")
                .unwrap()
                .auto_checkout
        );
        let e = Config::parse("enforce: maybe\n").unwrap_err();
        assert!(e.contains("deny, warn, off"), "{e}");
        assert!(Config::parse("auto_checkout: sometimes\n").is_err());
    }
}

// ---------------------------------------------------------------------------------------
// `notify:`: webhooks told of events (engine::notify sends them)
// ---------------------------------------------------------------------------------------

/// One entry of `notify:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyTarget {
    pub url: String,
    /// The kinds of events told (all of them when `on:` is left out).
    pub on: Vec<NotifyKind>,
    pub form: NotifyForm,
}

/// What is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyKind {
    /// A checkout ended because its holder died.
    Death,
    /// A checkout ended because its lease ran out.
    Expired,
    /// A request refused, or a waiter dropped, for a wait-for cycle.
    Deadlock,
    /// A freed key reserved for the head of its queue.
    Handoff,
    /// A reservation that ran out and passed on.
    Lapse,
    /// A live holder's checkout force-released.
    ForceRelease,
    Freeze,
    Unfreeze,
}

const KINDS: [(&str, NotifyKind); 8] = [
    ("death", NotifyKind::Death),
    ("expired", NotifyKind::Expired),
    ("deadlock", NotifyKind::Deadlock),
    ("handoff", NotifyKind::Handoff),
    ("lapse", NotifyKind::Lapse),
    ("force_release", NotifyKind::ForceRelease),
    ("freeze", NotifyKind::Freeze),
    ("unfreeze", NotifyKind::Unfreeze),
];

/// The body sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyForm {
    /// The event as a JSON object (docs/json.md, "notify").
    Json,
    /// `{"text": …}`, as Slack's (and Mattermost's, Discord's `/slack`) incoming webhooks take.
    Slack,
    /// The sentence as plain text with a `Title` header, as ntfy takes it.
    Ntfy,
}

/// `notify:` as written in `config.yaml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNotify {
    url: String,
    on: Option<Vec<String>>,
    format: Option<String>,
}

/// Check `notify:`; the message names the entry at fault.
fn parse_notify(raw: Vec<RawNotify>) -> std::result::Result<Vec<NotifyTarget>, String> {
    raw.into_iter()
        .map(|r| {
            let url = r.url.trim().to_string();
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(' ') {
                return Err(format!(
                    "notify: `url` must be an http:// or https:// URL, not {:?}",
                    notify_mask(&url)
                ));
            }
            let on = match r.on {
                None => KINDS.iter().map(|(_, k)| *k).collect(),
                Some(names) => names
                    .iter()
                    .map(|n| {
                        KINDS
                            .iter()
                            .find(|(w, _)| *w == n.trim())
                            .map(|(_, k)| *k)
                            .ok_or_else(|| {
                                let all: Vec<&str> = KINDS.iter().map(|(w, _)| *w).collect();
                                format!("notify: `on` takes {}, not {n:?}", all.join(", "))
                            })
                    })
                    .collect::<std::result::Result<Vec<NotifyKind>, String>>()?,
            };
            let form = match r.format.as_deref().map(str::trim) {
                None | Some("json") => NotifyForm::Json,
                Some("slack") => NotifyForm::Slack,
                Some("ntfy") => NotifyForm::Ntfy,
                Some(f) => {
                    return Err(format!(
                        "notify: `format` is json, slack or ntfy, not {f:?}"
                    ));
                }
            };
            Ok(NotifyTarget { url, on, form })
        })
        .collect()
}

/// The URL without what may be a secret in it (a Slack webhook's path is one): for
/// messages and the failures `doctor` shows.
pub fn notify_mask(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or(host);
    format!("{scheme}://{host}/…")
}

//! Every failure of a command, and the one place where outcomes become exit codes.
//!
//! The exit codes are public API; `docs/exit-codes.md` documents them.

use std::path::PathBuf;

/// Success.
pub const EXIT_OK: i32 = 0;
/// I/O failure, corrupt store, anything unexpected.
pub const EXIT_ERROR: i32 = 1;
/// Held by another agent (or reserved, or frozen).
pub const EXIT_HELD: i32 = 2;
/// No such checkout.
pub const EXIT_NO_SUCH_CHECKOUT: i32 = 3;
/// Not the holder, stale token, or lease lost.
pub const EXIT_NOT_HOLDER: i32 = 4;
/// Queueing would close a wait-for cycle.
pub const EXIT_DEADLOCK: i32 = 5;
/// Usage error: bad flag, bad key, bad duration, no identity.
pub const EXIT_USAGE: i32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt lock record for `{key}` at {path}: {problem}")]
    Corrupt {
        key: String,
        path: PathBuf,
        problem: String,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{0}")]
    Store(String),
    /// No usable lock directory: none found, or one owned by another user (exit 64).
    #[error("{message}")]
    LockDir { message: String, hint: String },
    /// Stopped waiting for the lock directory's guard: a signal arrived, or the caller's
    /// own deadline (`checkout --wait DUR`) passed first.
    #[error("stopped waiting for the lock on {path}: {why}")]
    GuardWaitStopped { path: PathBuf, why: String },
    /// The caller names an agent bound to a secret it did not give (exit 4).
    #[error(
        "not the holder: agent `{agent}` is bound to its own secret, and {}",
        if *.wrong { "this command gave another one (TASKLOCK_SECRET)" } else { "this command gave none (TASKLOCK_SECRET is not set)" }
    )]
    SecretRefused { agent: String, wrong: bool },
    /// A change in a scope that holds only some keys' locks touched something else: the
    /// scope is abandoned and the command runs again under the project's lock
    /// ([`crate::store::Store::begin_scoped`]). Never reaches the user.
    #[error("a change needed the whole project's lock (retried under it)")]
    Escalate,
    /// `checkout --worktree`: the worktree could not be made (not in a git repository, its
    /// path taken, its branch checked out elsewhere, git refused); the checkout it was
    /// for was given back (exit 64).
    #[error("{0}")]
    Worktree(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The exit code for this error; the only place error codes are chosen.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::LockDir { .. } | Error::Worktree(_) => EXIT_USAGE,
            Error::SecretRefused { .. } => EXIT_NOT_HOLDER,
            Error::Io { .. }
            | Error::Corrupt { .. }
            | Error::Config { .. }
            | Error::Store(_)
            | Error::GuardWaitStopped { .. }
            | Error::Escalate => EXIT_ERROR,
        }
    }

    /// A short machine-readable name for the JSON error object.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Usage(_) => "usage",
            Error::Io { .. } => "io",
            Error::Corrupt { .. } => "corrupt",
            Error::Config { .. } => "config",
            Error::Store(_) => "store",
            Error::LockDir { .. } => "lock_dir",
            Error::GuardWaitStopped { .. } => "interrupted",
            Error::SecretRefused { .. } => "secret_refused",
            Error::Escalate => "internal",
            Error::Worktree(_) => "worktree",
        }
    }
}

/// Outcome of one key in a command; decides the exit code of a successful run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Granted,
    /// A checkout by the agent that already held the key: the same checkout, extended.
    AlreadyHeld,
    Renewed,
    Released,
    ForceReleased,
    Valid,
    Noted,
    Free,
    Held,
    Conflict,
    Frozen,
    Deadlock,
    /// `checkout --wait`: the waiting agent's registered process is gone; it stopped
    /// waiting and left the queue.
    AgentGone,
    NoSuchCheckout,
    NotHolder,
    /// The caller names the holder, but the checkout (or agent) is bound to a secret
    /// the caller did not give.
    SecretRefused,
    StaleToken,
    LeaseLost,
    Corrupt,
    /// `leave`, or `release` of a key one only waited for: out of its queue now.
    LeftQueue,
    /// `leave` of a key whose queue the agent is not in.
    NotQueued,
    /// `checkout --next` with nothing in the backlog: every key was done or removed.
    BacklogEmpty,
    /// `give`: the checkout is the receiver's now.
    Given,
    /// `give`: the receiver is not a registered agent.
    UnknownAgent,
    /// `give`: the receiver has ended or is dead.
    AgentDead,
    /// `give` of a slot: the receiver already holds a slot of the key.
    ReceiverHolds,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Granted
            | Outcome::AlreadyHeld
            | Outcome::Renewed
            | Outcome::Released
            | Outcome::ForceReleased
            | Outcome::Valid
            | Outcome::Noted
            | Outcome::Free
            | Outcome::Held
            | Outcome::LeftQueue
            | Outcome::Given => EXIT_OK,
            Outcome::Conflict | Outcome::Frozen | Outcome::AgentGone | Outcome::ReceiverHolds => {
                EXIT_HELD
            }
            Outcome::Deadlock => EXIT_DEADLOCK,
            Outcome::NoSuchCheckout
            | Outcome::NotQueued
            | Outcome::BacklogEmpty
            | Outcome::UnknownAgent
            | Outcome::AgentDead => EXIT_NO_SUCH_CHECKOUT,
            Outcome::NotHolder
            | Outcome::SecretRefused
            | Outcome::StaleToken
            | Outcome::LeaseLost => EXIT_NOT_HOLDER,
            Outcome::Corrupt => EXIT_ERROR,
        }
    }
}

/// The advice for a record written by a newer tasklock: it is not damage.
pub const UPGRADE: &str = "upgrade tasklock: this record was written by a newer version, which other agents may be using right now; do not remove it.";

/// Is this corrupt-record problem a format version newer than this tasklock reads?
pub fn newer_format(problem: &str) -> bool {
    problem.contains("newer than this tasklock understands")
}

/// Characters that make text display as something it is not (`key::deceptive`, which
/// keys and patterns refuse): bidi embeddings and overrides (U+202A–U+202E), bidi
/// isolates (U+2066–U+2069), zero-width space and joiners (U+200B–U+200D) and the
/// zero-width no-break space (U+FEFF).
pub fn deceptive(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200D}' | '\u{FEFF}')
}

/// Quote a string for a POSIX shell command line when it needs quoting. One holding a
/// control or deceptive character (a file name can) is written `$'…'` with those
/// characters escaped, as bash, zsh and ksh read it, so that it shows what it is and is
/// still the same name when run.
pub fn shell_quote(s: &str) -> String {
    if s.chars().any(|c| c.is_control() || deceptive(c)) {
        let mut out = String::from("$'");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() && (c as u32) < 0x80 => {
                    out.push_str(&format!("\\x{:02x}", c as u32));
                }
                c if c.is_control() || deceptive(c) => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                c => out.push(c),
            }
        }
        out.push('\'');
        return out;
    }
    let plain = !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b':' | b'@' | b'#' | b'+' | b'=' | b','
                )
        })
        && !s.starts_with('#')
        && !s.starts_with('-');
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Split a command line into words as a shell would for plain commands: whitespace
/// separates; single quotes, double quotes and a backslash outside them group (and go
/// away). Reads what [`shell_quote`] writes (`'it'\''s'`). `None` for an unterminated
/// quote or a trailing backslash.
pub fn shell_split(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' | '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        q if q == c => break,
                        inner => cur.push(inner),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Some(words)
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod split_tests {
    use super::{shell_quote, shell_split};

    #[test]
    fn names_with_hidden_characters_are_quoted_so_bash_reads_them_back() {
        for name in ["a\tb", "new\nline", "\u{202e}txt.rs", "it's\u{7}\\x"] {
            let quoted = shell_quote(name);
            assert!(quoted.starts_with("$'"), "{quoted}");
            assert!(
                !quoted
                    .chars()
                    .any(|c| c.is_control() || super::deceptive(c)),
                "{quoted:?}"
            );
            let out = std::process::Command::new("bash")
                .args(["-c", &format!("printf %s {quoted}")])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), name, "{quoted}");
        }
    }

    #[test]
    fn shell_split_reads_what_shell_quote_writes() {
        let words = [
            "plain",
            "it's",
            "a b",
            "",
            "-x",
            "$HOME",
            "\"q\"",
            "back\\slash",
        ];
        let line = words.map(shell_quote).join(" ");
        assert_eq!(shell_split(&line).unwrap(), words);
        assert_eq!(
            shell_split(r#""$HOME/bin/tasklock" hook  post-tool-use"#).unwrap(),
            ["$HOME/bin/tasklock", "hook", "post-tool-use"]
        );
        assert_eq!(shell_split("'open"), None);
        assert_eq!(shell_split("trailing\\"), None);
    }
}

//! Ownership proof: a checkout or an agent bound to a secret can be acted on only by a
//! caller that has the secret.
//!
//! The caller's secret comes from `TASKLOCK_SECRET` (the Claude Code and Codex hooks put
//! one there for each session). Records and registry entries keep a [`Proof`]: a random
//! salt and SHA-256(salt ‖ secret), never the secret itself, so the lock directory stays
//! readable by everyone who shares it without revealing one.

use std::io::Read;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The environment variable that carries the caller's secret.
pub const ENV: &str = "TASKLOCK_SECRET";
/// The environment variable that carries the operator secret (for `--force`).
pub const OPERATOR_ENV: &str = "TASKLOCK_OPERATOR_SECRET";

/// What is stored in place of a secret.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Proof {
    /// 16 random bytes, hex.
    pub salt: String,
    /// SHA-256 of the salt's bytes followed by the secret's, hex.
    pub sha256: String,
}

impl Proof {
    /// A proof of `secret` with a fresh salt.
    pub fn of(secret: &str) -> Result<Proof> {
        let salt = hex(&random_bytes(16)?);
        let sha256 = digest(&salt, secret);
        Ok(Proof { salt, sha256 })
    }

    /// Does `secret` match? (Compared in constant time.)
    pub fn admits(&self, secret: &str) -> bool {
        same(
            digest(&self.salt, secret).as_bytes(),
            self.sha256.as_bytes(),
        )
    }
}

/// How a caller stands towards a checkout or agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not bound to a secret (made without one, or before secrets existed): anyone who
    /// names the agent may act for it, as before.
    Unbound,
    /// Bound, and the caller has the secret.
    Proven,
    /// Bound, and the caller has no secret.
    NoSecret,
    /// Bound, and the caller's secret is another.
    WrongSecret,
}

impl Standing {
    pub fn refused(self) -> bool {
        matches!(self, Standing::NoSecret | Standing::WrongSecret)
    }

    /// For the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Unbound => "unbound",
            Standing::Proven => "proven",
            Standing::NoSecret => "no_secret",
            Standing::WrongSecret => "wrong_secret",
        }
    }
}

/// How the caller (with `secret`) stands towards something bound by `owner`.
pub fn standing(owner: Option<&Proof>, secret: Option<&str>) -> Standing {
    match (owner, secret) {
        (None, _) => Standing::Unbound,
        (Some(_), None) => Standing::NoSecret,
        (Some(p), Some(s)) if p.admits(s) => Standing::Proven,
        (Some(_), Some(_)) => Standing::WrongSecret,
    }
}

/// A secret this process made for itself (a hook that starts a session) or the agent
/// this process proved to be by being its process's child (a hook of that session).
static SESSION: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
static PROVEN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The environment variable that names a file holding the caller's secret (used when
/// `TASKLOCK_SECRET` is unset or empty): how a Gemini CLI session's shell commands get
/// theirs, since nothing there can set their environment (the Gemini CLI adapter).
pub const FILE_ENV: &str = "TASKLOCK_SECRET_FILE";

/// The most of a secret file read.
const MAX_FILE_BYTES: u64 = 4096;

/// The caller's secret: one this process was given by [`use_secret`], else
/// `TASKLOCK_SECRET`, else the content of the file `TASKLOCK_SECRET_FILE` names (a final
/// newline dropped; a file that cannot be read gives none); an empty value counts as none.
pub fn caller() -> Option<String> {
    let own = SESSION.lock().unwrap_or_else(|e| e.into_inner()).clone();
    own.or_else(|| std::env::var(ENV).ok().filter(|s| !s.is_empty()))
        .or_else(from_file)
}

fn from_file() -> Option<String> {
    let path = std::env::var_os(FILE_ENV).filter(|p| !p.is_empty())?;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text.trim_end_matches(['\n', '\r']).to_string()).filter(|s| !s.is_empty())
}

/// From now on this process acts with `secret` (a session-start hook that made one).
pub fn use_secret(secret: &str) {
    *SESSION.lock().unwrap_or_else(|e| e.into_inner()) = Some(secret.to_string());
}

/// From now on this process acts as `agent` (and its subagents) without a secret: a hook
/// proved to run for that session by being a child of the session's own process.
pub fn prove_as(agent: &str) {
    *PROVEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(agent.to_string());
}

/// How the caller stands towards `agent`, bound by `owner`: a process proven to act for
/// the agent (or its session) is proven whatever its secret.
pub fn standing_for(agent: &str, owner: Option<&Proof>) -> Standing {
    let proven = PROVEN.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if owner.is_some()
        && proven
            .as_deref()
            .is_some_and(|p| p == agent || crate::identity::is_subagent_of(agent, p))
    {
        return Standing::Proven;
    }
    standing(owner, caller().as_deref())
}

/// A new secret: 32 random bytes, hex.
pub fn generate() -> Result<String> {
    Ok(hex(&random_bytes(32)?))
}

/// Does the caller hold the project's operator secret? `configured` is the SHA-256 (hex)
/// of the operator secret from config.yaml (`operator_secret_sha256`).
pub fn is_operator(configured: Option<&str>) -> bool {
    let (Some(want), Some(given)) = (configured, std::env::var(OPERATOR_ENV).ok()) else {
        return false;
    };
    if given.is_empty() {
        return false;
    }
    let got = hex(&Sha256::digest(given.as_bytes()));
    same(got.as_bytes(), want.trim().to_ascii_lowercase().as_bytes())
}

fn digest(salt: &str, secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(secret.as_bytes());
    hex(&h.finalize())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::io("/dev/urandom", e))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_admits_its_secret_only() {
        let p = Proof::of("s3cret").unwrap();
        assert!(p.admits("s3cret"));
        assert!(!p.admits("s3cret "));
        assert!(!p.admits(""));
        assert!(!p.sha256.contains("s3cret"));
        let q = Proof::of("s3cret").unwrap();
        assert_ne!(p.salt, q.salt, "every proof has its own salt");
        assert_ne!(p.sha256, q.sha256);
    }

    #[test]
    fn standing_covers_every_case() {
        let p = Proof::of("a").unwrap();
        assert_eq!(standing(None, None), Standing::Unbound);
        assert_eq!(standing(None, Some("x")), Standing::Unbound);
        assert_eq!(standing(Some(&p), None), Standing::NoSecret);
        assert_eq!(standing(Some(&p), Some("b")), Standing::WrongSecret);
        assert_eq!(standing(Some(&p), Some("a")), Standing::Proven);
    }
}

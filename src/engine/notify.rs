//! `notify:` in `config.yaml`: the events people want to hear of (a holder's death, a
//! lease run out, a deadlock, a handoff, a freeze) told to webhooks, with no daemon.
//!
//! The command that writes such an event does not send it: that would hold the command up
//! behind a slow or dead endpoint. At its end it starts, detached, one drainer
//! (`tasklock notify-drain`) unless one is running; the drainer reads the audit log, POSTs
//! each event not told yet, and stays a few seconds for more. Which events were told is
//! kept in the lock directory under the drainer's lock, so each is told once however
//! many commands notice it and however many drainers they start.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::Time;
use crate::config::{
    NotifyForm as Form, NotifyKind as Kind, NotifyTarget as Target, notify_mask as mask,
};
use crate::render::events::sentence;
use crate::store::{AuditEvent, Event};

/// What an audit event is, told: none for the events nobody asked to hear of.
pub fn kind_of(e: &AuditEvent) -> Option<Kind> {
    Some(match (e.kind()?, e.reason.as_deref()) {
        (Event::AutoRelease, Some("agent_death")) => Kind::Death,
        (Event::AutoRelease, Some("timeout")) => Kind::Expired,
        (Event::Deadlock, _) => Kind::Deadlock,
        (Event::Handoff, _) => Kind::Handoff,
        (Event::Lapse, _) => Kind::Lapse,
        (Event::ForceRelease, _) if e.token.is_some() => Kind::ForceRelease,
        (Event::Freeze, _) => Kind::Freeze,
        (Event::Unfreeze, _) => Kind::Unfreeze,
        _ => return None,
    })
}

/// The JSON object of an event told (docs/json.md, "notify").
pub fn payload(kind: Kind, e: &AuditEvent, store: &str) -> Value {
    json!({
        "kind": kind,
        "text": sentence(e),
        "event": e,
        "store": store,
    })
}

// ---------------------------------------------------------------------------------------
// After a command: start the drainer when there may be something to tell
// ---------------------------------------------------------------------------------------

thread_local! {
    /// The lock directory of a command whose configuration has `notify:`.
    static CONFIGURED: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Called when a command has read a configuration with `notify:` in it.
pub fn configured(dir: &Path) {
    CONFIGURED.with(|c| *c.borrow_mut() = Some(dir.to_path_buf()));
}

/// At the end of a command: if its configuration has `notify:` and the audit log grew
/// since the drainer last looked, start a drainer unless one is running. Costs a `stat`
/// and a lock attempt; never waits.
pub fn flush() {
    let Some(dir) = CONFIGURED.with(|c| c.borrow_mut().take()) else {
        return;
    };
    if std::env::var_os("TASKLOCK_NOTIFY_DRAINER").is_some() || !may_have_news(&dir) {
        return;
    }
    let Ok(lock) = open_lock(&dir) else { return };
    if !try_lock(&lock) {
        return; // A drainer runs: it looks again before it ends.
    }
    drop(lock);
    spawn_drainer(&dir);
}

fn notify_dir(dir: &Path) -> PathBuf {
    dir.join("notify")
}

/// The audit log's size and change time as a drainer last read it, against now: on the
/// PostgreSQL store there is no file to look at, so always.
fn may_have_news(dir: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(dir.join("audit.jsonl")) else {
        return true;
    };
    let seen = std::fs::read_to_string(notify_dir(dir).join("seen")).unwrap_or_default();
    seen.trim() != stamp(&meta)
}

fn stamp(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{} {} {}", meta.ino(), meta.len(), meta.mtime_nsec())
}

fn open_lock(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let d = notify_dir(dir);
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    OpenOptions::new()
        .mode(0o600)
        .create(true)
        .truncate(false)
        .write(true)
        .open(d.join("drain.lock"))
}

fn try_lock(f: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function's caller owns.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn spawn_drainer(dir: &Path) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(format!("--dir={}", dir.display()))
        .arg("notify-drain")
        .env("TASKLOCK_NOTIFY_DRAINER", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe; the drainer leaves the command's session and
    // process group, so a signal to the agent's command line does not stop it halfway.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let _ = cmd.spawn();
}

// ---------------------------------------------------------------------------------------
// The drainer
// ---------------------------------------------------------------------------------------

/// How long the drainer stays for more events after the last.
const IDLE: Duration = Duration::from_secs(5);
/// Events older than this when the drainer first sees them are not told (they were told,
/// or nobody ran a command for that long).
const WINDOW_SECS: i64 = 600;
/// Tries per event and endpoint, and the wait before each retry.
const BACKOFF: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Failures kept for `doctor`.
const FAILURES_KEPT: usize = 50;

/// Events told in the last [`WINDOW_SECS`], by a digest of each: kept in the lock
/// directory, under the drainer's lock.
#[derive(Default, Serialize, Deserialize)]
struct Told {
    told: BTreeMap<String, Time>,
}

/// One failure, as `doctor` shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Failure {
    pub ts: Time,
    pub url: String,
    pub kind: Kind,
    pub key: String,
    pub error: String,
}

/// `tasklock notify-drain`: tell what there is to tell, stay [`IDLE`] for more, end.
pub fn drain(ctx: &crate::engine::Ctx) -> crate::error::Result<()> {
    let cfg = ctx.config()?;
    if cfg.notify.is_empty() {
        return Ok(());
    }
    let dir = ctx.dir.clone();
    let lock = open_lock(&dir).map_err(|e| crate::error::Error::io(notify_dir(&dir), e))?;
    if !try_lock(&lock) {
        return Ok(());
    }
    let Some(store) = ctx.existing_store()? else {
        return Ok(());
    };
    let describe = store.describe();
    let mut follow = store.follow_audit()?;
    let mut lock = Some(lock);
    let mut last = Instant::now();
    loop {
        let events = follow.next(Duration::from_millis(500))?;
        if lock.is_none() {
            // Gone quiet, the lock was let go, and then more came: tell it only if no
            // other drainer took over meanwhile.
            if !events.iter().any(|e| kind_of(e).is_some()) {
                return Ok(());
            }
            let again =
                open_lock(&dir).map_err(|e| crate::error::Error::io(notify_dir(&dir), e))?;
            if !try_lock(&again) {
                return Ok(());
            }
            lock = Some(again);
        }
        if tell(&dir, &cfg.notify, &describe, events)? {
            last = Instant::now();
        }
        if last.elapsed() >= IDLE {
            if let Ok(meta) = std::fs::metadata(dir.join("audit.jsonl")) {
                let _ = write_private(&notify_dir(&dir).join("seen"), stamp(&meta).as_bytes());
            }
            // A command that wrote an event while this drainer held the lock started no
            // other drainer: let go, then look once more before going.
            lock = None;
        }
    }
}

/// Tell the events of `events` that are to be told and were not yet, under the
/// drainer's lock; whether there was any.
fn tell(
    dir: &Path,
    targets: &[Target],
    describe: &str,
    events: Vec<AuditEvent>,
) -> crate::error::Result<bool> {
    let now = crate::clock::now()?;
    let mut told = read_told(dir);
    told.told
        .retain(|_, at| (now - *at).num_seconds() < WINDOW_SECS);
    let mut any = false;
    for e in events {
        let Some(kind) = kind_of(&e) else { continue };
        let digest = digest(&e);
        if (now - e.ts).num_seconds() >= WINDOW_SECS || told.told.contains_key(&digest) {
            continue;
        }
        any = true;
        for t in targets.iter().filter(|t| t.on.contains(&kind)) {
            if let Err(error) = send_with_retries(t, kind, &e, describe) {
                record_failure(dir, t, kind, &e, error);
            }
        }
        told.told.insert(digest, e.ts);
        write_told(dir, &told);
    }
    Ok(any)
}

fn digest(e: &AuditEvent) -> String {
    use sha2::Digest;
    let text = serde_json::to_string(e).unwrap_or_default();
    let d = sha2::Sha256::digest(text.as_bytes());
    d.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// Write a file only its user can read: what was told, and the failures, say what
/// happened in the project.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

fn read_told(dir: &Path) -> Told {
    std::fs::read(notify_dir(dir).join("told.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_told(dir: &Path, told: &Told) {
    let d = notify_dir(dir);
    let tmp = d.join("told.json.tmp");
    if let Ok(text) = serde_json::to_vec(told)
        && write_private(&tmp, &text).is_ok()
    {
        let _ = std::fs::rename(&tmp, d.join("told.json"));
    }
}

fn record_failure(dir: &Path, t: &Target, kind: Kind, e: &AuditEvent, error: String) {
    let path = notify_dir(dir).join("failures.jsonl");
    let mut kept: Vec<String> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let f = Failure {
        ts: e.ts,
        url: mask(&t.url),
        kind,
        key: e.key.clone(),
        error,
    };
    if let Ok(line) = serde_json::to_string(&f) {
        kept.push(line);
    }
    let start = kept.len().saturating_sub(FAILURES_KEPT);
    let _ = write_private(&path, (kept[start..].join("\n") + "\n").as_bytes());
}

/// The failures kept, oldest first: for `doctor`.
pub fn failures(dir: &Path) -> Vec<Failure> {
    std::fs::read_to_string(notify_dir(dir).join("failures.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn send_with_retries(t: &Target, kind: Kind, e: &AuditEvent, store: &str) -> Result<(), String> {
    let mut result = send(t, kind, e, store);
    for wait in BACKOFF {
        if result.is_ok() {
            break;
        }
        std::thread::sleep(wait);
        result = send(t, kind, e, store);
    }
    result
}

fn send(t: &Target, kind: Kind, e: &AuditEvent, store: &str) -> Result<(), String> {
    let (body, headers): (Vec<u8>, Vec<(&str, String)>) = match t.form {
        Form::Json => (
            payload(kind, e, store).to_string().into_bytes(),
            vec![("Content-Type", "application/json".into())],
        ),
        Form::Slack => (
            json!({ "text": format!("tasklock: {}", sentence(e)) })
                .to_string()
                .into_bytes(),
            vec![("Content-Type", "application/json".into())],
        ),
        Form::Ntfy => (
            sentence(e).into_bytes(),
            vec![
                ("Content-Type", "text/plain; charset=utf-8".into()),
                (
                    "Title",
                    format!(
                        "tasklock: {}",
                        serde_json::to_value(kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    ),
                ),
                ("Tags", "lock".into()),
            ],
        ),
    };
    if let Some(rest) = t.url.strip_prefix("http://") {
        post_http(rest, &body, &headers)
    } else {
        post_with_curl(&t.url, &body, &headers)
    }
}

/// POST over plain HTTP/1.1 with the standard library: `rest` is the URL after `http://`.
fn post_http(rest: &str, body: &[u8], headers: &[(&str, String)]) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {authority}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    let _ = s.set_read_timeout(Some(TIMEOUT));
    let _ = s.set_write_timeout(Some(TIMEOUT));
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: tasklock/{}\r\nContent-Length: {}\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .map_err(|e| format!("sending to {authority}: {e}"))?;
    let mut answer = [0u8; 64];
    let n = s
        .read(&mut answer)
        .map_err(|e| format!("no answer from {authority}: {e}"))?;
    let line = String::from_utf8_lossy(&answer[..n]);
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer from {authority}"))?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(format!("{authority} answered {status}"))
    }
}

/// POST over HTTPS with `curl`, which brings the system's certificates.
fn post_with_curl(url: &str, body: &[u8], headers: &[(&str, String)]) -> Result<(), String> {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-fsS", "-o", "/dev/null", "--max-time", "5", "-X", "POST"]);
    for (k, v) in headers {
        cmd.arg("-H").arg(format!("{k}: {v}"));
    }
    cmd.args(["--data-binary", "@-", "--"])
        .arg(url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("https needs curl, which could not be started: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body);
    }
    let out = child.wait_with_output().map_err(|e| format!("curl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let why = String::from_utf8_lossy(&out.stderr).replace(url, &mask(url));
        Err(format!("curl: {}", why.trim()))
    }
}

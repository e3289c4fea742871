//! `doctor`: check the setup and say what to fix.

use std::path::{Path, PathBuf};

use super::Ctx;
use crate::error::Result;
use crate::identity::{self, Source};
use crate::report::{Check, DoctorReport, Report};
use crate::store::{FileStore, Slot};

/// File systems where flock is unreliable or not shared between machines.
const NETWORK_FS: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE (sshfs and the like)"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9P"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4741_4653, "GlusterFS"),
    (0x5346_414F, "AFS"),
];

pub fn run(ctx: &Ctx) -> Result<Report> {
    let mut checks = Vec::new();
    let dir = &ctx.dir;
    let exists = dir.is_dir();

    // Lock directory.
    let symlink = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
    checks.push(if !exists && dir.exists() {
        fail(
            "lock directory",
            format!("{} exists but is not a directory", dir.display()),
            Some("move it away; tasklock needs a directory there".into()),
        )
    } else if !exists {
        ok(
            "lock directory",
            format!(
                "{} does not exist yet; the first checkout creates it",
                dir.display()
            ),
        )
    } else if symlink {
        warn(
            "lock directory",
            format!("{} is a symlink", dir.display()),
            Some(
                "fine if intended; make sure every agent resolves it to the same local directory"
                    .into(),
            ),
        )
    } else {
        ok("lock directory", dir.display().to_string())
    });
    if exists {
        let probe = dir.join(format!(".doctor-{}", std::process::id()));
        let writable = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map(|_| {
                let _ = std::fs::remove_file(&probe);
            });
        checks.push(match writable {
            Ok(()) => ok("writable", "can create files in the lock directory".into()),
            Err(e) => fail(
                "writable",
                format!("cannot create files there: {e}"),
                Some("fix the directory's permissions".into()),
            ),
        });
    }

    // File system.
    let fs_dir = existing_ancestor(dir);
    checks.push(match fs_type(&fs_dir) {
        Some(t) => match NETWORK_FS.iter().find(|(m, _)| *m == t) {
            Some((_, name)) => warn(
                "file system",
                format!("{} is on {name}: flock is unreliable there and locks may not be seen by every machine", fs_dir.display()),
                Some("keep the lock directory on a local file system (--dir or TASKLOCK_DIR)".into()),
            ),
            None => ok("file system", format!("local (type {t:#x})")),
        },
        None => warn("file system", "could not read the file-system type".into(), None),
    });

    // Settings.
    checks.push(match ctx.config() {
        Ok(_) if dir.join("config.yaml").exists() => ok("settings", "config.yaml is valid".into()),
        Ok(_) => ok("settings", "no config.yaml; defaults apply".into()),
        Err(e) => fail(
            "settings",
            e.to_string(),
            Some("fix the file or delete it to use the defaults".into()),
        ),
    });

    // Identity.
    checks.push(match identity::resolve_id(ctx.agent_flag.as_deref()) {
        Ok((id, Source::UserAtHost)) => warn(
            "identity",
            format!("falling back to {id} (USER@HOSTNAME): agents run as one user would share it and both win"),
            Some("give each agent its own id: TASKLOCK_AGENT, --agent, or Claude Code's session (tasklock init)".into()),
        ),
        Ok((id, source)) => ok("identity", format!("{id} (from {})", match source {
            Source::Flag => "--agent",
            Source::Env => "TASKLOCK_AGENT",
            Source::ClaudeSession => "CLAUDE_CODE_SESSION_ID",
            Source::UserAtHost => "USER@HOSTNAME",
        })),
        Err(_) => warn(
            "identity",
            "no agent identity: commands that act for an agent exit 64".into(),
            Some("set TASKLOCK_AGENT or pass --agent".into()),
        ),
    });

    // Records, clock and debris.
    if let Some(store) = FileStore::open_existing(dir).ok().flatten() {
        let scan = store.scan()?;
        let mut newest = None;
        let mut corrupt = Vec::new();
        let mut held = 0;
        for (_, slot) in &scan {
            match slot {
                Slot::Held(r) => {
                    held += 1;
                    newest = newest.max(Some(r.renewed_at.max(r.acquired_at)));
                }
                Slot::Corrupt { path, problem } => {
                    corrupt.push(format!("{} ({problem})", path.display()))
                }
                Slot::Free => {}
            }
        }
        checks.push(if corrupt.is_empty() {
            ok(
                "records",
                format!(
                    "{held} checkout{} readable",
                    if held == 1 { "" } else { "s" }
                ),
            )
        } else {
            fail(
                "records",
                format!("{} corrupt: {}", corrupt.len(), corrupt.join("; ")),
                Some("inspect each; `tasklock release KEY --force` removes one (audited)".into()),
            )
        });
        for a in store.scan_agents()? {
            newest = newest.max(a.last_heartbeat);
        }
        checks.push(match newest {
            Some(t) if t > ctx.now + chrono::Duration::seconds(5) => warn(
                "clock",
                format!(
                    "the newest record is from {}, {} ahead of this clock: the clock jumped backwards, or another machine's clock is ahead",
                    crate::clock::rfc3339(&t),
                    crate::duration::humanize((t - ctx.now).num_seconds().unsigned_abs())
                ),
                Some("sync clocks (NTP); leases are judged by wall-clock time".into()),
            ),
            _ => ok("clock", "no record is from the future".into()),
        });
        let debris = std::fs::read_dir(dir.join("tmp"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
                    .count()
            })
            .unwrap_or(0);
        checks.push(if debris == 0 {
            ok("temp files", "none left over".into())
        } else {
            warn(
                "temp files",
                format!("{debris} left by interrupted commands"),
                Some("harmless: the next checkout or release sweeps them".into()),
            )
        });
    }

    // Skills and hooks.
    checks.push(skills_check());
    checks.push(hooks_check());

    let healthy = !checks.iter().any(|c| c.status == "fail");
    Ok(Report::Doctor(DoctorReport {
        command: "doctor",
        now: ctx.now,
        lock_dir: dir.display().to_string(),
        healthy,
        checks,
    }))
}

fn check(name: &str, status: &str, detail: String, fix: Option<String>) -> Check {
    Check {
        name: name.into(),
        status: status.into(),
        detail,
        fix,
    }
}

fn ok(name: &str, detail: String) -> Check {
    check(name, "ok", detail, None)
}

fn warn(name: &str, detail: String, fix: Option<String>) -> Check {
    check(name, "warn", detail, fix)
}

fn fail(name: &str, detail: String, fix: Option<String>) -> Check {
    check(name, "fail", detail, fix)
}

fn existing_ancestor(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

/// The file-system magic of `dir`. `TASKLOCK_FAKE_FSTYPE` (hex like `0x6969`) overrides
/// it, so the network check can be tested without mounting NFS.
fn fs_type(dir: &Path) -> Option<i64> {
    if let Ok(fake) = std::env::var("TASKLOCK_FAKE_FSTYPE") {
        let t = fake.trim();
        return match t.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16).ok(),
            None => t.parse().ok(),
        };
    }
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statfs is a valid out-parameter; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (rc == 0).then_some(st.f_type as i64)
}

const SKILLS: [&str; 3] = ["checkout", "heartbeat", "checkouts"];

fn skills_check() -> Check {
    let version = env!("CARGO_PKG_VERSION");
    let mut roots = vec![PathBuf::from(".claude/skills")];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".claude/skills"));
    }
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for name in SKILLS {
        let found = roots
            .iter()
            .map(|r| r.join(name).join("SKILL.md"))
            .find_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)));
        match found {
            None => missing.push(name),
            Some((p, text)) => {
                // The version is in the frontmatter's metadata.
                let v = text
                    .lines()
                    .skip(1)
                    .take_while(|l| l.trim() != "---")
                    .find_map(|l| l.trim().strip_prefix("version:"))
                    .map(|v| v.trim().trim_matches('"').to_string());
                if v.as_deref() != Some(version) {
                    stale.push(format!(
                        "{} ({})",
                        p.display(),
                        v.unwrap_or_else(|| "no version".into())
                    ));
                }
            }
        }
    }
    if !missing.is_empty() {
        warn(
            "skills",
            format!("not installed: {}", missing.join(", ")),
            Some("run ./install.sh from a tasklock checkout (or install.sh --project)".into()),
        )
    } else if !stale.is_empty() {
        warn(
            "skills",
            format!(
                "from another version than this binary ({version}): {}",
                stale.join(", ")
            ),
            Some("reinstall with ./install.sh".into()),
        )
    } else {
        ok(
            "skills",
            format!("checkout, heartbeat, checkouts at version {version}"),
        )
    }
}

fn hooks_check() -> Check {
    let cwd = std::env::current_dir().unwrap_or_default();
    let root = cwd
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(&cwd)
        .to_path_buf();
    let settings = root.join(".claude/settings.json");
    let text = std::fs::read_to_string(&settings).unwrap_or_default();
    let missing: Vec<&str> = super::hook::EVENTS
        .iter()
        .filter(|e| !text.contains(&format!("tasklock hook {e}")))
        .copied()
        .collect();
    if missing.is_empty() {
        ok(
            "hooks",
            format!("{} wires all four hooks", settings.display()),
        )
    } else {
        warn(
            "hooks",
            format!("{} lacks: {}", settings.display(), missing.join(", ")),
            Some("run `tasklock init` in the project".into()),
        )
    }
}

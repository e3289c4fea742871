//! `doctor`: check the setup and say what to fix.

use std::path::{Path, PathBuf};

use crate::discover::{self, Discovery};
use crate::engine::Ctx;
use crate::error::{Error, Result};
use crate::identity::{self, Source};
use crate::report::{Check, DoctorReport, Report};
use crate::store::Slot;

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

pub fn run(ctx: &Ctx, discovery: Option<&Discovery>) -> Result<Report> {
    let dir = &ctx.dir;
    // A foreign lock directory is reported, never written to or read as records.
    let foreign = matches!(discovery, Some(Discovery::Foreign { .. }));
    let mut checks = lock_dir_checks(dir, discovery);
    checks.push(fs_check(dir));
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
    // The PostgreSQL store, when one is selected: connection, server and schema.
    checks.extend(postgres_checks(ctx.config().ok().as_ref()));
    checks.extend(notify_check(ctx));
    checks.push(identity_check(ctx));
    if let Some(store) = crate::store::FileStore::open_existing(dir)
        .ok()
        .flatten()
        .filter(|_| !foreign)
    {
        checks.extend(records_checks(ctx, &store)?);
    }
    if !foreign {
        checks.extend(worktrees_check(ctx));
    }

    // Skills, hooks, permissions, and what is loaded twice.
    let project = project_root();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let channel = channel();
    checks.push(skills_check(&project, home.as_deref(), channel));
    checks.push(hooks_check(&project));
    checks.extend(gemini_hooks_check(&project, home.as_deref()));
    checks.push(permissions_check(&project));
    checks.push(duplicates_check(&project, home.as_deref(), channel));

    let healthy = !checks.iter().any(|c| c.status == "fail");
    Ok(Report::Doctor(DoctorReport {
        command: "doctor",
        now: ctx.now,
        lock_dir: dir.display().to_string(),
        healthy,
        checks,
    }))
}

/// The worktrees `checkout --worktree` made whose checkout has ended (leftovers), with
/// what each holds and the command that removes them safely. None when there are none
/// to speak of (or they cannot be read).
fn worktrees_check(ctx: &Ctx) -> Option<Check> {
    let (_, rows) = super::worktrees::rows(ctx, false).ok()?;
    if rows.is_empty() {
        return None;
    }
    let left: Vec<_> = rows.iter().filter(|r| r.checkout.is_none()).collect();
    if left.is_empty() {
        return Some(ok(
            "worktrees",
            format!(
                "{} worktree{} made by tasklock, each with its checkout",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    let each = left
        .iter()
        .map(|r| {
            format!(
                "{} of `{}` ({})",
                if r.worktree.path.is_empty() {
                    format!("branch {}", r.worktree.branch)
                } else {
                    r.worktree.path.clone()
                },
                r.key,
                r.state.words()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(warn(
        "worktrees",
        format!(
            "{} left over, their checkout ended: {each}",
            if left.len() == 1 { "1 worktree".to_string() } else { format!("{} worktrees", left.len()) }
        ),
        Some("run `tasklock worktrees --clean`: it removes those that hold nothing of value (no change, every commit also on another branch or a remote) and says why it keeps the others; commit, merge or push their work first".into()),
    ))
}

/// `notify:`, when set: the webhooks, and the failures to tell them of the last day.
fn notify_check(ctx: &Ctx) -> Option<Check> {
    let cfg = ctx.config().ok()?;
    if cfg.notify.is_empty() {
        return None;
    }
    let hooks = match cfg.notify.len() {
        1 => "1 webhook".to_string(),
        n => format!("{n} webhooks"),
    };
    let recent: Vec<_> = crate::engine::notify::failures(&ctx.dir)
        .into_iter()
        .filter(|f| (ctx.now - f.ts).num_hours() < 24)
        .collect();
    Some(match recent.last() {
        None => ok("notify", format!("{hooks}; no failure in the last day")),
        Some(last) => warn(
            "notify",
            format!(
                "{hooks}; {} failure(s) to tell one in the last day, the last at {} ({}, {} of `{}`): {}",
                recent.len(),
                last.ts.format("%Y-%m-%dT%H:%M:%SZ"),
                last.url,
                serde_json::to_value(last.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                last.key,
                last.error
            ),
            Some(format!(
                "check that the endpoint is up and takes a POST; the failures are kept in {}",
                ctx.dir.join("notify/failures.jsonl").display()
            )),
        ),
    })
}

/// The lock directory: found, a directory, whose, writable, shared or not.
fn lock_dir_checks(dir: &Path, discovery: Option<&Discovery>) -> Vec<Check> {
    let mut checks = Vec::new();
    let exists = dir.is_dir();
    let foreign = matches!(discovery, Some(Discovery::Foreign { .. }));
    let missing = matches!(discovery, Some(Discovery::Missing { .. })) && !exists;
    if let Some(Discovery::Missing { cwd }) = discovery.filter(|_| missing) {
        checks.push(fail(
            "lock directory",
            format!(
                "none: {} is not in a git repository and has no .locks/ above it; checkout, heartbeat, freeze and run exit 64 here",
                cwd.display()
            ),
            Some("run `tasklock init` at the project root, so every agent started below it finds the same .locks/".into()),
        ));
    }

    // Lock directory.
    let symlink = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
    let found = if missing {
        None
    } else if !exists && dir.exists() {
        Some(fail(
            "lock directory",
            format!("{} exists but is not a directory", dir.display()),
            Some("move it away; tasklock needs a directory there".into()),
        ))
    } else if !exists {
        Some(ok(
            "lock directory",
            format!(
                "{} does not exist yet; the first checkout creates it",
                dir.display()
            ),
        ))
    } else if symlink {
        Some(warn(
            "lock directory",
            format!("{} is a symlink", dir.display()),
            Some(
                "fine if intended; make sure every agent resolves it to the same local directory"
                    .into(),
            ),
        ))
    } else {
        Some(ok("lock directory", dir.display().to_string()))
    };
    checks.extend(found);
    if exists {
        checks.extend(owner_check(dir, discovery));
    }
    if exists && !foreign {
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

    if exists && !foreign {
        checks.push(sharing_check(dir));
    }

    checks
}

/// The file system under the lock directory: local, or one where flock is unreliable.
fn fs_check(dir: &Path) -> Check {
    let fs_dir = existing_ancestor(dir);
    match fs_type(&fs_dir) {
        Some(t) => match NETWORK_FS.iter().find(|(m, _)| *m == t) {
            Some((_, name)) => warn(
                "file system",
                format!(
                    "{} is on {name}: flock is unreliable there and locks may not be seen by every machine",
                    fs_dir.display()
                ),
                Some(
                    "keep the lock directory on a local file system (--dir or TASKLOCK_DIR)".into(),
                ),
            ),
            None => ok("file system", format!("local (type {t:#x})")),
        },
        None => warn(
            "file system",
            "could not read the file-system type".into(),
            None,
        ),
    }
}

/// Who this command would act as, and where that came from.
fn identity_check(ctx: &Ctx) -> Check {
    match identity::resolve_id(ctx.agent_flag.as_deref()) {
        Ok((id, Source::UserAtHost)) => warn(
            "identity",
            format!("falling back to {id} (USER@HOSTNAME): agents run as one user would share it and both win"),
            Some("give each agent its own id: TASKLOCK_AGENT, --agent, or the Claude Code session or Codex thread (tasklock init)".into()),
        ),
        Ok((id, source)) => ok("identity", format!("{id} (from {})", match source {
            Source::Flag => "--agent",
            Source::Env => "TASKLOCK_AGENT",
            Source::ClaudeSession => "CLAUDE_CODE_SESSION_ID",
            Source::CodexThread => "CODEX_THREAD_ID",
            Source::GeminiSession => "GEMINI_SESSION_ID",
            Source::OpenCodeSession => "OPENCODE_SESSION_ID",
            Source::UserAtHost => "USER@HOSTNAME",
        })),
        Err(_) => warn(
            "identity",
            "no agent identity: commands that act for an agent exit 64".into(),
            Some("set TASKLOCK_AGENT or pass --agent".into()),
        ),
    }
}

/// The records (readable or corrupt), the clock against them, temp files left over, and
/// a guard held for too long.
fn records_checks(ctx: &Ctx, store: &crate::store::FileStore) -> Result<Vec<Check>> {
    let dir = &ctx.dir;
    let mut checks = Vec::new();
    let scan = store.scan()?;
    let mut newest = None;
    let mut corrupt = Vec::new();
    let mut held = 0;
    for slot in &scan {
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
    // Shown only when someone holds the guard: every change waits for it, and a
    // holder still there a second later is stuck (stopped, hung), not busy.
    if crate::store::guard_held(dir).is_some() {
        std::thread::sleep(std::time::Duration::from_secs(1));
        if let Some(holder) = crate::store::guard_held(dir) {
            checks.push(warn(
                "guard",
                format!(
                    "the lock on {} is {holder}, for over a second: every change waits for it (up to guard_timeout, then exit 1)",
                    dir.join(".guard").display()
                ),
                Some("let that process go on (kill -CONT PID if it was stopped) or end it".into()),
            ));
        }
    }
    Ok(checks)
}

/// Private or shared with a group, and the files whose modes do not fit that.
fn sharing_check(dir: &Path) -> Check {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return warn(
            "sharing",
            "cannot read the lock directory's mode".into(),
            None,
        );
    };
    let shared = crate::store::at::is_shared_mode(meta.mode());
    let group = crate::store::sharing::group_name(meta.gid());
    let mode = if shared {
        format!("shared with group {group} (setgid, group-writable): files 0660, directories 2770")
    } else {
        "private to its owner: files 0600, directories 0700".to_string()
    };
    let world = meta.mode() & 0o007 != 0;
    let mut bad = crate::store::sharing::mismatched(dir, shared, meta.gid());
    let open_root = if shared {
        world
    } else {
        meta.mode() & 0o077 != 0
    };
    if open_root {
        bad.insert(
            0,
            format!("{} itself ({:04o})", dir.display(), meta.mode() & 0o7777),
        );
    }
    if bad.is_empty() {
        return ok("sharing", mode);
    }
    const SHOWN: usize = 5;
    let more = bad.len().saturating_sub(SHOWN);
    let mut list = bad.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    let (problem, fix) = if shared {
        (
            "not usable by every member of the group",
            format!(
                "run `tasklock init --shared {group}` as their owner or root, or `chgrp {group}` and `chmod g+rw` them"
            ),
        )
    } else {
        (
            "readable or writable by other users (from an older tasklock or a wide umask)",
            "`chmod go-rwx` them (tasklock creates new ones private), or share the directory on purpose with `tasklock init --shared GROUP`".to_string(),
        )
    };
    warn("sharing", format!("{mode}; {problem}: {list}"), Some(fix))
}

/// A lock directory owned by another user (not root): why tasklock uses it, or refuses
/// it. Nothing when it is the caller's or root's.
fn owner_check(dir: &Path, discovery: Option<&Discovery>) -> Option<Check> {
    let uid = discover::foreign_owner(dir)?;
    let who = discover::user_name(uid);
    let name = dir.display();
    Some(match discovery {
        Some(d @ Discovery::Foreign { .. }) => {
            let Error::LockDir { hint, .. } = d.refusal() else {
                unreachable!("a foreign lock directory is refused with a LockDir error")
            };
            fail(
                "owner",
                format!(
                    "{name} belongs to {who}, not to you or root: that user could decide who gets which key, so every command refuses it (exit 64)"
                ),
                Some(hint),
            )
        }
        Some(Discovery::Found {
            source: source @ (discover::Source::Flag | discover::Source::Env),
            ..
        }) => warn(
            "owner",
            format!(
                "{name} belongs to {who}; used because {} names it, and that user can decide who gets which key",
                if *source == discover::Source::Flag {
                    "--dir"
                } else {
                    "TASKLOCK_DIR"
                }
            ),
            Some(
                "fine for a shared setup you trust; otherwise use a lock directory of your own"
                    .into(),
            ),
        ),
        _ => warn(
            "owner",
            format!(
                "{name} belongs to {who}; used because {} names it",
                discover::SHARED_ENV
            ),
            Some("fine for a shared setup you trust".into()),
        ),
    })
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

/// The git worktree containing the working directory (where `.git` is), else it.
fn project_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(&cwd)
        .to_path_buf()
}

/// How the running binary was installed, judged by where it lives: what the fixes name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    /// The npm package (`npm install -g tasklock`, `npx tasklock`): under `node_modules/`.
    Npm,
    /// The Claude Code plugin's own copy, which its launcher downloads into
    /// `${XDG_DATA_HOME:-~/.local/share}/tasklock/plugin/`.
    Plugin,
    /// `cargo install`: in `${CARGO_HOME:-~/.cargo}/bin`.
    Cargo,
    /// The release script, install.sh: in `${XDG_BIN_HOME:-~/.local/bin}`, or wherever its
    /// receipt says it put it (`--prefix`).
    Script,
    /// Anything else, such as a build in a checkout.
    Unknown,
}

/// The channel of the running binary.
fn channel() -> Channel {
    let Ok(exe) = std::env::current_exe() else {
        return Channel::Unknown;
    };
    let env = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME").unwrap_or_default();
    let data = env("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local/share"));
    let receipt =
        std::fs::read_to_string(data.join("tasklock/install-receipt")).unwrap_or_default();
    if exe.components().any(|c| c.as_os_str() == "node_modules") {
        Channel::Npm
    } else if exe.starts_with(data.join("tasklock/plugin")) {
        Channel::Plugin
    } else if exe.starts_with(
        env("CARGO_HOME")
            .unwrap_or_else(|| home.join(".cargo"))
            .join("bin"),
    ) {
        Channel::Cargo
    } else if exe.parent() == Some(&env("XDG_BIN_HOME").unwrap_or_else(|| home.join(".local/bin")))
        || receipt
            .lines()
            .any(|l| l.ends_with(&*exe.to_string_lossy()))
    {
        Channel::Script
    } else {
        Channel::Unknown
    }
}

impl Channel {
    /// How to install the skills this binary carries, when none are.
    fn install_skills(self) -> &'static str {
        match self {
            Channel::Npm => {
                "run `tasklock setup`: the npm package brings the binary, and the binary its skills"
            }
            Channel::Cargo => {
                "run `tasklock setup`: `cargo install` brings the binary, and the binary its skills"
            }
            Channel::Plugin => {
                "the Claude Code plugin loads its own skills: make sure it is enabled (`/plugin`); or run `tasklock setup` to install them for every client"
            }
            Channel::Script => {
                "run the install script again (it installs the skills), or `tasklock setup`"
            }
            Channel::Unknown => {
                "run ./install.sh from a tasklock checkout (or install.sh --project)"
            }
        }
    }

    /// How to bring the binary and its skills to one version.
    fn update(self) -> &'static str {
        match self {
            Channel::Npm => {
                "`npm install -g tasklock@latest && tasklock setup --force` (or `npx tasklock@latest setup --force`)"
            }
            Channel::Cargo => "`cargo install tasklock --locked --force && tasklock setup --force`",
            Channel::Plugin => {
                "update the tasklock plugin in Claude Code (`/plugin`): its launcher brings the binary of its version; then `tasklock setup --force`"
            }
            Channel::Script => {
                "run the install script again: `curl -fsSL https://github.com/tasklock/tasklock/releases/latest/download/install.sh | sh`"
            }
            Channel::Unknown => "reinstall with ./install.sh",
        }
    }
}

fn skills_check(project: &Path, home: Option<&Path>, channel: Channel) -> Check {
    let version = env!("CARGO_PKG_VERSION");
    let mut roots = vec![project.join(".claude/skills")];
    if let Some(home) = home {
        roots.push(home.join(".claude/skills"));
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
            Some(channel.install_skills().into()),
        )
    } else if !stale.is_empty() {
        warn(
            "skills",
            format!(
                "from another version than this binary ({version}): {}",
                stale.join(", ")
            ),
            Some(channel.update().into()),
        )
    } else {
        ok(
            "skills",
            format!("checkout, heartbeat, checkouts at version {version}"),
        )
    }
}

/// A JSON settings file; `None` when absent or not JSON.
fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The project's Claude Code settings files that exist: shared, then local.
fn project_settings(project: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    ["settings.json", "settings.local.json"]
        .iter()
        .map(|f| project.join(".claude").join(f))
        .filter_map(|p| read_json(&p).map(|v| (p, v)))
        .collect()
}

/// The matchers of the hook groups of `event` that run `tasklock hook HOOK_EVENT`
/// (`None`: no matcher).
fn tasklock_groups(
    settings: &serde_json::Value,
    event: &str,
    hook_event: &str,
) -> Vec<Option<String>> {
    settings["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| {
            g["hooks"].as_array().is_some_and(|hs| {
                hs.iter().any(|h| {
                    h["command"].as_str().is_some_and(|c| {
                        crate::clients::hooks_json::calls_tasklock_hook(c, hook_event)
                    })
                })
            })
        })
        .map(|g| g["matcher"].as_str().map(str::to_string))
        .collect()
}

/// The project's Gemini CLI hooks (`.gemini/settings.json`), when it has that file: each
/// of tasklock's events wired, the edit gate and the shell among BeforeTool's tools.
fn gemini_hooks_check(project: &Path, home: Option<&Path>) -> Option<Check> {
    use crate::clients::hooks_json::{GEMINI_HOOK_EVENTS, covers};
    let path = project.join(".gemini/settings.json");
    if !path.exists() {
        return None;
    }
    // The extension carries the same hooks: with both, Gemini CLI runs each twice.
    let extension = home.map(|h| h.join(".gemini/extensions/tasklock/hooks/hooks.json"));
    if let Some(ext) = extension.filter(|e| e.is_file())
        && let Some(v) = read_json(&path)
        && GEMINI_HOOK_EVENTS
            .iter()
            .any(|(event, hook_event)| !tasklock_groups(&v, event, hook_event).is_empty())
    {
        return Some(warn(
            "gemini hooks",
            format!(
                "the tasklock extension ({}) is installed and {} also wires tasklock's hooks: Gemini CLI runs each hook twice",
                ext.parent().and_then(Path::parent).unwrap_or(&ext).display(),
                path.display()
            ),
            Some("use the extension or `tasklock init`'s hooks, not both: `gemini extensions uninstall tasklock`, or remove the tasklock hooks from the project's .gemini/settings.json".into()),
        ));
    }
    let Some(v) = read_json(&path) else {
        return Some(warn(
            "gemini hooks",
            format!(
                "{} is not valid JSON: Gemini CLI ignores it",
                path.display()
            ),
            Some("fix it, then run `tasklock init`".into()),
        ));
    };
    let mut missing = Vec::new();
    for (event, hook_event) in GEMINI_HOOK_EVENTS {
        let matchers = tasklock_groups(&v, event, hook_event);
        let tools = crate::clients::gemini::BEFORE_TOOL_MATCHER;
        if matchers.is_empty() {
            missing.push(format!("{event} ({hook_event})"));
        } else if event == "BeforeTool"
            && !matchers.iter().any(|m| {
                covers(
                    &m.as_deref().map_or(serde_json::Value::Null, Into::into),
                    &tools.into(),
                )
            })
        {
            missing.push(format!("BeforeTool for {tools}"));
        }
    }
    Some(if missing.is_empty() {
        ok(
            "gemini hooks",
            format!(
                "{} wires all {} of tasklock's Gemini CLI hooks",
                path.display(),
                GEMINI_HOOK_EVENTS.len()
            ),
        )
    } else {
        warn(
            "gemini hooks",
            format!("{} lacks: {}", path.display(), missing.join(", ")),
            Some("run `tasklock init` in the project".into()),
        )
    })
}

fn hooks_check(project: &Path) -> Check {
    let settings = project.join(".claude/settings.json");
    let files = project_settings(project);
    let mut missing = Vec::new();
    let mut narrow = Vec::new();
    for (event, hook_event) in crate::clients::hooks_json::HOOK_EVENTS {
        let matchers: Vec<Option<String>> = files
            .iter()
            .flat_map(|(_, v)| tasklock_groups(v, event, hook_event))
            .collect();
        if matchers.is_empty() {
            missing.push(hook_event.to_string());
        } else if event == "PreToolUse" {
            let tools = [
                (
                    super::edit_gate::EDIT_MATCHER,
                    "the edit hook that enforces path checkouts",
                ),
                (
                    crate::clients::claude_tasks::TASK_UPDATE_MATCHER,
                    "claims on Claude Code's task list",
                ),
            ];
            for (tool, what) in tools {
                let covered = matchers.iter().any(|m| {
                    crate::clients::hooks_json::covers(
                        &m.as_deref().map_or(serde_json::Value::Null, Into::into),
                        &tool.into(),
                    )
                });
                if !covered {
                    missing.push(format!("pre-tool-use for {tool} ({what})"));
                }
            }
        } else if event == "PostToolUse"
            && !matchers
                .iter()
                .any(|m| matches!(m.as_deref(), None | Some("") | Some("*")))
        {
            narrow.extend(matchers.into_iter().flatten());
        }
    }
    if !missing.is_empty() {
        warn(
            "hooks",
            format!("{} lacks: {}", settings.display(), missing.join(", ")),
            Some("run `tasklock init` in the project".into()),
        )
    } else if !narrow.is_empty() {
        warn(
            "hooks",
            format!(
                "the PostToolUse hook runs tasklock only after tools matching {}, so the session stops beating while it uses other tools",
                narrow
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(format!(
                "set its \"matcher\" to \"*\" in {}",
                settings.display()
            )),
        )
    } else {
        ok(
            "hooks",
            format!(
                "{} wires all {} of tasklock's hooks ({})",
                settings.display(),
                crate::clients::hooks_json::HOOK_EVENTS.len(),
                crate::clients::hooks_json::HOOK_EVENTS
                    .map(|(event, _)| event)
                    .join(", ")
            ),
        )
    }
}

/// Warn about rules that pre-approve `tasklock run`, which runs any command.
fn permissions_check(project: &Path) -> Check {
    let mut found = Vec::new();
    for (path, v) in project_settings(project) {
        for rule in v["permissions"]["allow"].as_array().into_iter().flatten() {
            if let Some(r) = rule.as_str()
                && crate::clients::hooks_json::RUN_RULES.contains(&r)
            {
                found.push(format!("{r} in {}", path.display()));
            }
        }
    }
    if found.is_empty() {
        ok(
            "permissions",
            "no rule pre-approves `tasklock run` (which runs any command)".into(),
        )
    } else {
        warn(
            "permissions",
            format!(
                "{} pre-approves `tasklock run KEY -- CMD`, so any command at all",
                found.join("; ")
            ),
            Some(
                "remove the rule; `tasklock init` allows each subcommand but run, init and hook instead"
                    .into(),
            ),
        )
    }
}

/// The tasklock plugins Claude Code loads for this user: enabled in `enabledPlugins`, or
/// installed (`plugins/installed_plugins.json`) and not disabled there.
fn tasklock_plugins(home: &Path) -> Vec<String> {
    let settings = read_json(&home.join(".claude/settings.json"));
    let enabled = settings
        .as_ref()
        .and_then(|s| s["enabledPlugins"].as_object().cloned())
        .unwrap_or_default();
    let installed = read_json(&home.join(".claude/plugins/installed_plugins.json"));
    let installed = installed
        .as_ref()
        .and_then(|i| i["plugins"].as_object().cloned())
        .unwrap_or_default();
    let mut out: Vec<String> = enabled
        .iter()
        .filter(|(k, v)| k.starts_with("tasklock@") && v.as_bool() == Some(true))
        .map(|(k, _)| k.clone())
        .collect();
    for k in installed.keys() {
        if k.starts_with("tasklock@")
            && enabled.get(k).and_then(|v| v.as_bool()) != Some(false)
            && !out.contains(k)
        {
            out.push(k.clone());
        }
    }
    out
}

/// Skills installed both for the user and in the project are listed twice in the
/// model's context; the plugin plus `init`'s hooks run every hook twice.
fn duplicates_check(project: &Path, home: Option<&Path>, channel: Channel) -> Check {
    let Some(home) = home else {
        return ok("duplicates", "no HOME, nothing to compare".into());
    };
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let user_skills = home.join(".claude/skills");
    let project_skills = project.join(".claude/skills");
    let twice: Vec<&str> = SKILLS
        .iter()
        .filter(|n| {
            user_skills.join(n).join("SKILL.md").is_file()
                && project_skills.join(n).join("SKILL.md").is_file()
        })
        .copied()
        .collect();
    if !twice.is_empty() && user_skills != project_skills {
        problems.push(format!(
            "skills {} are in both {} and {}: the model sees each twice",
            twice.join(", "),
            user_skills.display(),
            project_skills.display()
        ));
        fixes.push(match channel {
            Channel::Script | Channel::Unknown => "keep one copy: `./install.sh --uninstall` removes the global one, or delete the project's",
            _ => "keep one copy: `tasklock setup --uninstall` removes the global one, or delete the project's",
        });
    }
    let plugins = tasklock_plugins(home);
    let hooked = project_settings(project).iter().any(|(_, v)| {
        crate::clients::hooks_json::HOOK_EVENTS
            .iter()
            .any(|(event, hook_event)| !tasklock_groups(v, event, hook_event).is_empty())
    });
    if !plugins.is_empty() && hooked {
        problems.push(format!(
            "the plugin {} is enabled and {} also wires tasklock's hooks: Claude Code runs each hook twice",
            plugins.join(", "),
            project.join(".claude").display()
        ));
        fixes.push("use the plugin or `tasklock init`'s hooks, not both: `/plugin disable` it, or remove the tasklock hooks from the project's settings");
    }
    if problems.is_empty() {
        ok("duplicates", "skills and hooks are each loaded once".into())
    } else {
        warn("duplicates", problems.join("; "), Some(fixes.join("; ")))
    }
}

/// `doctor`'s checks of the PostgreSQL store, when one is selected (none otherwise):
/// can it be reached, which server, which schema version.
fn postgres_checks(cfg: Option<&crate::config::Config>) -> Vec<Check> {
    let check = |status: &str, detail: String, fix: Option<&str>| Check {
        name: "store".into(),
        status: status.into(),
        detail,
        fix: fix.map(str::to_string),
    };
    let t = match crate::store::pg::selected(cfg) {
        Ok(Some(t)) => t,
        Ok(None) => return Vec::new(),
        Err(e) => {
            return vec![check(
                "fail",
                e.to_string(),
                Some("fix TASKLOCK_URL or `store:` in config.yaml"),
            )];
        }
    };
    #[cfg(feature = "postgres")]
    {
        match crate::store::pg::PgStore::open(&t) {
            Ok(s) => {
                let skew = crate::clock::offset().unwrap_or_default();
                let mut out = vec![check(
                    "ok",
                    format!(
                        "PostgreSQL {} at {} ({}), schema {} at version {}",
                        s.server_version(),
                        t.masked,
                        t.source,
                        t.schema,
                        s.schema_version()
                    ),
                    None,
                )];
                let ms = skew.num_milliseconds().abs();
                if ms > 2000 {
                    out.push(Check {
                        name: "clock".into(),
                        status: "warn".into(),
                        detail: format!(
                            "this machine's clock is {}s {} the PostgreSQL server's; tasklock judges leases by the server's clock",
                            ms / 1000,
                            if skew.num_milliseconds() > 0 { "behind" } else { "ahead of" }
                        ),
                        fix: Some("sync the clocks (NTP) so people reading times are not confused".into()),
                    });
                }
                out
            }
            Err(e) => vec![check(
                "fail",
                e.to_string(),
                Some(
                    "start the server or fix the URL; unset TASKLOCK_URL (and `store:`) to use the lock directory",
                ),
            )],
        }
    }
    #[cfg(not(feature = "postgres"))]
    vec![check(
        "fail",
        format!(
            "{} selects PostgreSQL ({}), but this tasklock was built without it",
            t.source, t.masked
        ),
        Some("rebuild with `--features postgres`"),
    )]
}

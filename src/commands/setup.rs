//! `tasklock setup`: install the skills this binary carries for Claude Code
//! (`~/.claude/skills/NAME/SKILL.md`) and link them for Codex and the other agents that
//! read `~/.agents/skills` (OpenCode and Cursor read the first). Files it did not write
//! are never overwritten without `--force`; a skill directory that is a link is left
//! alone.
//!
//! Every file, link and directory it creates is listed in a receipt,
//! `${XDG_DATA_HOME:-~/.local/share}/tasklock/setup-receipt.json`, as install.sh keeps
//! one; `setup --uninstall` removes what the receipt lists and nothing else: a file only
//! while it has the content setup wrote, a link only while it points where setup pointed
//! it, a directory only when empty.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::Time;
use crate::error::{Error, Result};
use crate::report::{Change, Report, SetupReport};

pub use crate::cli::SetupArgs;

/// One path of the receipt.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// `file`, `link` or `dir`.
    kind: String,
    path: PathBuf,
    /// A file's SHA-256 as setup wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    /// Where a link points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Receipt {
    entries: Vec<Entry>,
}

impl Receipt {
    /// Add or replace the entry for `e.path`.
    fn record(&mut self, e: Entry) {
        match self.entries.iter_mut().find(|o| o.path == e.path) {
            Some(o) => *o = e,
            None => self.entries.push(e),
        }
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// `${XDG_DATA_HOME:-$HOME/.local/share}/tasklock/setup-receipt.json`.
fn receipt_path() -> Result<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .or_else(|| home().map(|h| h.join(".local/share")))
        .ok_or_else(|| {
            Error::Usage(
                "HOME is not set (or not absolute), nor XDG_DATA_HOME: setup keeps its receipt there".into(),
            )
        })?;
    Ok(data.join("tasklock/setup-receipt.json"))
}

fn read_receipt(path: &Path) -> Result<Receipt> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: format!("not a receipt of tasklock setup: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Receipt::default()),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn write_receipt(path: &Path, receipt: &Receipt) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut text = serde_json::to_string_pretty(receipt).unwrap_or_default();
    text.push('\n');
    let tmp = dir.join(format!(".setup-receipt.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn run(now: Time, args: SetupArgs) -> Result<Report> {
    if args.uninstall {
        return uninstall(now, &args);
    }
    let home = home();
    let dir = |given: &Option<PathBuf>, under: &str| -> Result<PathBuf> {
        match (given, &home) {
            (Some(d), _) => Ok(absolute(d)),
            (None, Some(h)) => Ok(h.join(under)),
            (None, None) => Err(Error::Usage(
                "HOME is not set (or not absolute): give --skills-dir and --agents-dir".into(),
            )),
        }
    };
    let skills_dir = dir(&args.skills_dir, ".claude/skills")?;
    let agents_dir = if args.no_agents {
        None
    } else {
        Some(dir(&args.agents_dir, ".agents/skills")?)
    };
    let receipt_at = receipt_path()?;
    let mut receipt = read_receipt(&receipt_at)?;
    let before = receipt.entries.len();
    let mut wrote = false;
    let mut changes = Vec::new();
    for skill in crate::pack::SKILLS {
        let skill_dir = skills_dir.join(skill.name);
        let c = install_skill(&skill_dir, skill.text, &args, &mut receipt)?;
        wrote |= c.action == "created" || c.action == "updated";
        changes.push(c);
        if let Some(agents) = &agents_dir {
            let c = link_skill(&agents.join(skill.name), &skill_dir, &args, &mut receipt)?;
            wrote |= c.action == "created" || c.action == "updated";
            changes.push(c);
        }
    }
    if !args.dry_run && (wrote || receipt.entries.len() != before) {
        write_receipt(&receipt_at, &receipt)?;
    }
    Ok(Report::Setup(SetupReport {
        command: "setup",
        now,
        version: env!("CARGO_PKG_VERSION"),
        dry_run: args.dry_run,
        uninstall: false,
        receipt: Some(receipt_at.display().to_string()),
        changes,
    }))
}

/// `setup --uninstall`: what the receipt lists, newest first, then the receipt itself.
fn uninstall(now: Time, args: &SetupArgs) -> Result<Report> {
    let receipt_at = receipt_path()?;
    let receipt = read_receipt(&receipt_at)?;
    let mut changes = Vec::new();
    for e in receipt.entries.iter().rev() {
        let (action, what) = match e.kind.as_str() {
            "file" => match std::fs::read(&e.path) {
                Ok(bytes) if e.sha256.as_deref() == Some(&sha256(&bytes)) => {
                    if !args.dry_run {
                        std::fs::remove_file(&e.path).map_err(|err| Error::io(&e.path, err))?;
                    }
                    ("removed", "skill".to_string())
                }
                Ok(_) => ("kept", "changed since setup wrote it: yours now".into()),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(Error::io(&e.path, err)),
            },
            "link" => match std::fs::read_link(&e.path) {
                Ok(to) if Some(&to) == e.target.as_ref() => {
                    if !args.dry_run {
                        std::fs::remove_file(&e.path).map_err(|err| Error::io(&e.path, err))?;
                    }
                    ("removed", format!("-> {}", to.display()))
                }
                Ok(to) => (
                    "kept",
                    format!("points to {} now, not where setup pointed it", to.display()),
                ),
                Err(_) if e.path.symlink_metadata().is_ok() => {
                    ("kept", "no longer a link setup made".into())
                }
                Err(_) => continue,
            },
            "dir" => {
                let empty = match std::fs::read_dir(&e.path) {
                    Ok(mut d) => {
                        // In a dry run, what setup removes first is still there.
                        d.all(|x| {
                            x.map(|x| {
                                args.dry_run && receipt.entries.iter().any(|o| o.path == x.path())
                            })
                            .unwrap_or(false)
                        })
                    }
                    Err(_) => continue,
                };
                if !empty {
                    (
                        "kept",
                        "directory: holds files setup did not write".to_string(),
                    )
                } else {
                    if !args.dry_run {
                        std::fs::remove_dir(&e.path).map_err(|err| Error::io(&e.path, err))?;
                    }
                    ("removed", "directory".to_string())
                }
            }
            _ => ("kept", format!("unknown kind {:?} in the receipt", e.kind)),
        };
        changes.push(change(&e.path, action, &what));
    }
    if !args.dry_run {
        match std::fs::remove_file(&receipt_at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&receipt_at, e)),
        }
        // …and its directory, when nothing else (install.sh's receipt) is in it.
        if let Some(dir) = receipt_at.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
    Ok(Report::Setup(SetupReport {
        command: "setup",
        now,
        version: env!("CARGO_PKG_VERSION"),
        dry_run: args.dry_run,
        uninstall: true,
        receipt: Some(receipt_at.display().to_string()),
        changes,
    }))
}

/// Create `dir` and its missing parents, each recorded in the receipt.
fn create_dirs(dir: &Path, receipt: &mut Receipt) -> Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while d.symlink_metadata().is_err() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for m in missing.into_iter().rev() {
        receipt.record(Entry {
            kind: "dir".into(),
            path: m,
            sha256: None,
            target: None,
        });
    }
    Ok(())
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

fn change(path: &Path, action: &str, what: &str) -> Change {
    Change {
        path: path.display().to_string(),
        action: action.into(),
        what: what.into(),
    }
}

/// `DIR/SKILL.md`: created, replaced only with `--force`, or left as it is.
fn install_skill(
    dir: &Path,
    text: &str,
    args: &SetupArgs,
    receipt: &mut Receipt,
) -> Result<Change> {
    let file = dir.join("SKILL.md");
    if dir.is_symlink() {
        return Ok(change(dir, "kept", "a link to elsewhere; left as it is"));
    }
    let action = match std::fs::read(&file) {
        Ok(have) if have == text.as_bytes() => {
            // This version's skill, whoever wrote it: setup's to remove from now on.
            if !args.dry_run {
                receipt.record(Entry {
                    kind: "file".into(),
                    path: file.clone(),
                    sha256: Some(sha256(text.as_bytes())),
                    target: None,
                });
            }
            return Ok(change(&file, "unchanged", ""));
        }
        Ok(_) if !args.force => {
            return Ok(change(
                &file,
                "kept",
                "differs from this version's skill (edited, or another version's); --force replaces it",
            ));
        }
        Ok(_) => "updated",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "created",
        Err(e) => return Err(Error::io(&file, e)),
    };
    if !args.dry_run {
        create_dirs(dir, receipt)?;
        let tmp = dir.join(format!(".SKILL.md.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| Error::io(&file, e))?;
        receipt.record(Entry {
            kind: "file".into(),
            path: file.clone(),
            sha256: Some(sha256(text.as_bytes())),
            target: None,
        });
    }
    Ok(change(
        &file,
        action,
        &format!("skill, tasklock {}", env!("CARGO_PKG_VERSION")),
    ))
}

/// `LINK -> TARGET`: created, pointed again only with `--force`, or left as it is.
fn link_skill(
    link: &Path,
    target: &Path,
    args: &SetupArgs,
    receipt: &mut Receipt,
) -> Result<Change> {
    let what = format!("-> {}", target.display());
    let action = match std::fs::read_link(link) {
        Ok(to) if to == target => {
            if !args.dry_run {
                receipt.record(Entry {
                    kind: "link".into(),
                    path: link.to_path_buf(),
                    sha256: None,
                    target: Some(target.to_path_buf()),
                });
            }
            return Ok(change(link, "unchanged", &what));
        }
        Ok(to) if !args.force => {
            return Ok(change(
                link,
                "kept",
                &format!("points to {}; --force points it here", to.display()),
            ));
        }
        Ok(_) => "updated",
        Err(_) if link.symlink_metadata().is_ok() => {
            return Ok(change(
                link,
                "kept",
                "exists and is not a link; left as it is",
            ));
        }
        Err(_) => "created",
    };
    if !args.dry_run {
        if let Some(parent) = link.parent() {
            create_dirs(parent, receipt)?;
        }
        let tmp = link.with_file_name(format!(
            ".{}.{}.tmp",
            link.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, link).map_err(|e| Error::io(link, e))?;
        receipt.record(Entry {
            kind: "link".into(),
            path: link.to_path_buf(),
            sha256: None,
            target: Some(target.to_path_buf()),
        });
    }
    Ok(change(link, action, &what))
}

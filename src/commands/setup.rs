//! `tasklock setup`: install the skills this binary carries for Claude Code
//! (`~/.claude/skills/NAME/SKILL.md`) and link them for Codex and the other agents that
//! read `~/.agents/skills` (OpenCode and Cursor read the first). Files it did not write
//! are never overwritten without `--force`; a skill directory that is a link is left
//! alone.

use std::path::{Path, PathBuf};

use crate::clock::Time;
use crate::error::{Error, Result};
use crate::report::{Change, Report, SetupReport};

pub use crate::cli::SetupArgs;

pub fn run(now: Time, args: SetupArgs) -> Result<Report> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
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
    let mut changes = Vec::new();
    for skill in crate::pack::SKILLS {
        let skill_dir = skills_dir.join(skill.name);
        changes.push(install_skill(&skill_dir, skill.text, &args)?);
        if let Some(agents) = &agents_dir {
            changes.push(link_skill(&agents.join(skill.name), &skill_dir, &args)?);
        }
    }
    Ok(Report::Setup(SetupReport {
        command: "setup",
        now,
        version: env!("CARGO_PKG_VERSION"),
        dry_run: args.dry_run,
        changes,
    }))
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
fn install_skill(dir: &Path, text: &str, args: &SetupArgs) -> Result<Change> {
    let file = dir.join("SKILL.md");
    if dir.is_symlink() {
        return Ok(change(dir, "kept", "a link to elsewhere; left as it is"));
    }
    let action = match std::fs::read(&file) {
        Ok(have) if have == text.as_bytes() => return Ok(change(&file, "unchanged", "")),
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
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = dir.join(format!(".SKILL.md.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| Error::io(&file, e))?;
    }
    Ok(change(
        &file,
        action,
        &format!("skill, tasklock {}", env!("CARGO_PKG_VERSION")),
    ))
}

/// `LINK -> TARGET`: created, pointed again only with `--force`, or left as it is.
fn link_skill(link: &Path, target: &Path, args: &SetupArgs) -> Result<Change> {
    let what = format!("-> {}", target.display());
    let action = match std::fs::read_link(link) {
        Ok(to) if to == target => return Ok(change(link, "unchanged", &what)),
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
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let tmp = link.with_file_name(format!(
            ".{}.{}.tmp",
            link.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, link).map_err(|e| Error::io(link, e))?;
    }
    Ok(change(link, action, &what))
}

//! `tasklock init`: set up a project for Claude Code (and other agents).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Ctx;
use crate::error::{Error, Result};
use crate::report::{Change, InitReport, Report};
use crate::store::FileStore;

const SETTINGS_TEMPLATE: &str = include_str!("../../templates/claude-settings.json");
const INSTRUCTIONS: &str = include_str!("../../templates/instructions.md");
const CONFIG_TEMPLATE: &str = include_str!("../../templates/config.yaml");
const MARKER: &str = "<!-- tasklock:begin -->";

pub fn run(ctx: &Ctx, dry_run: bool) -> Result<Report> {
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let project = project_root(&cwd);
    let mut changes = Vec::new();

    // Read settings.json first: if it cannot be read, nothing is changed at all.
    let settings = project.join(".claude").join("settings.json");
    let (existing, mut doc) = match std::fs::read_to_string(&settings) {
        Ok(text) => {
            let doc: Value = serde_json::from_str(&text).map_err(|e| Error::Config {
                path: settings.clone(),
                message: format!("not valid JSON ({e}); fix it and run `tasklock init` again"),
            })?;
            if !doc.is_object() {
                return Err(Error::Config {
                    path: settings.clone(),
                    message: "the top level is not a JSON object".into(),
                });
            }
            (Some(text), doc)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (None, Value::Object(Default::default()))
        }
        Err(e) => return Err(Error::io(&settings, e)),
    };
    // The lock directory, its .gitignore and a commented config.
    let lock_dir = ctx.dir.clone();
    let had_dir = lock_dir.join(".gitignore").is_file();
    if !dry_run {
        FileStore::open_or_create(&lock_dir)?;
    }
    changes.push(change(
        &lock_dir,
        if had_dir { "unchanged" } else { "created" },
        "lock directory with a .gitignore of *",
    ));
    let config = lock_dir.join("config.yaml");
    if config.exists() {
        changes.push(change(&config, "unchanged", "settings (kept as they are)"));
    } else {
        if !dry_run {
            write_new(&config, CONFIG_TEMPLATE)?;
        }
        changes.push(change(&config, "created", "commented default settings"));
    }

    // Claude Code hooks and the permission to run tasklock, merged into settings.json.
    let added = merge_settings(&mut doc);
    if added.is_empty() {
        changes.push(change(&settings, "unchanged", "hooks already wired"));
    } else {
        if !dry_run {
            std::fs::create_dir_all(settings.parent().expect("has a parent"))
                .map_err(|e| Error::io(&settings, e))?;
            let mut text = serde_json::to_string_pretty(&doc).expect("a JSON value serializes");
            text.push('\n');
            write_atomic(&settings, &text)?;
        }
        let action = if existing.is_some() {
            "updated"
        } else {
            "created"
        };
        changes.push(change(
            &settings,
            action,
            &format!("added {}", added.join(", ")),
        ));
    }

    // The coordination protocol for the agents' instructions.
    for (file, always) in [("CLAUDE.md", true), ("AGENTS.md", false)] {
        let path = project.join(file);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&path, e)),
        };
        match text {
            Some(t) if t.contains(MARKER) => changes.push(change(
                &path,
                "unchanged",
                "coordination instructions present",
            )),
            Some(t) => {
                if !dry_run {
                    let sep = if t.is_empty() || t.ends_with("\n\n") {
                        ""
                    } else if t.ends_with('\n') {
                        "\n"
                    } else {
                        "\n\n"
                    };
                    write_atomic(&path, &format!("{t}{sep}{INSTRUCTIONS}"))?;
                }
                changes.push(change(
                    &path,
                    "updated",
                    "appended coordination instructions",
                ));
            }
            None if always => {
                if !dry_run {
                    write_new(&path, INSTRUCTIONS)?;
                }
                changes.push(change(&path, "created", "coordination instructions"));
            }
            None => {}
        }
    }

    Ok(Report::Init(InitReport {
        command: "init",
        now: ctx.now,
        dry_run,
        project: project.display().to_string(),
        changes,
    }))
}

fn change(path: &Path, action: &str, what: &str) -> Change {
    Change {
        path: path.display().to_string(),
        action: action.to_string(),
        what: what.to_string(),
    }
}

/// The worktree containing `cwd` (where `.git` is), else `cwd`.
fn project_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// Add our hooks and permission where missing; returns what was added.
fn merge_settings(doc: &mut Value) -> Vec<String> {
    let template: Value = serde_json::from_str(SETTINGS_TEMPLATE).expect("the template is JSON");
    let mut added = Vec::new();
    let root = doc.as_object_mut().expect("checked to be an object");
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Default::default()));
    if !hooks.is_object() {
        *hooks = Value::Object(Default::default());
    }
    let hooks = hooks.as_object_mut().expect("an object");
    for (event, groups) in template["hooks"].as_object().expect("template hooks") {
        let command = groups[0]["hooks"][0]["command"]
            .as_str()
            .expect("a command");
        let list = hooks
            .entry(event.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        let list = list.as_array_mut().expect("an array");
        let present = list.iter().any(|g| {
            g["hooks"]
                .as_array()
                .is_some_and(|hs| hs.iter().any(|h| h["command"].as_str() == Some(command)))
        });
        if !present {
            list.push(groups[0].clone());
            added.push(format!("{event} hook"));
        }
    }
    let perms = root
        .entry("permissions")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(perms) = perms.as_object_mut() {
        let allow = perms
            .entry("allow")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(allow) = allow.as_array_mut() {
            for rule in template["permissions"]["allow"].as_array().expect("rules") {
                if !allow.contains(rule) {
                    allow.push(rule.clone());
                    added.push(format!("permission {}", rule.as_str().unwrap_or_default()));
                }
            }
        }
    }
    added
}

fn write_new(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Replace a file whole, keeping its permissions.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension(format!("tasklock-{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

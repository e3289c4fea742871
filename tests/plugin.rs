//! The Claude Code plugin (`.claude-plugin/`) and the skills, checked with the real tools:
//! `claude plugin validate --strict`, the Agent Skills reference validator, and an install
//! through Claude Code's own plugin commands followed by a session that runs its hooks.
//!
//! The first run installs the CLI from npm and skills-ref from PyPI (see docs/e2e.md).

mod e2e;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use e2e::{
    COMMAND_TIMEOUT, Stub, agentskills, assert_session_lifecycle, claude_cmd, git_project,
    repo_root, run, run_ok, run_session,
};

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Older 2.1 releases still in use must not warn either (2.1.197 warned about an
/// unknown `network` field).
#[test]
fn plugin_validates_strictly_on_the_oldest_supported_claude_code() {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(e2e::claude_oldest());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args(["plugin", "validate", "--strict", "."])
        .current_dir(repo_root());
    let out = run(
        cmd,
        "claude (oldest) plugin validate --strict .",
        COMMAND_TIMEOUT,
    );
    assert!(
        out.status.success() && !out.text().contains("warning"),
        "`claude plugin validate --strict .` with Claude Code {} failed or warned\n{}",
        e2e::CLAUDE_CODE_OLDEST,
        out.text()
    );
}

#[test]
fn plugin_validates_strictly() {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = claude_cmd(home.path(), None);
    cmd.args(["plugin", "validate", "--strict", "."])
        .current_dir(repo_root());
    let out = run(cmd, "claude plugin validate --strict .", COMMAND_TIMEOUT);
    assert!(
        out.status.success(),
        "`claude plugin validate --strict .` failed in {}\n{}",
        repo_root().display(),
        out.text()
    );

    // What the validator says the plugin provides: the skills and the four hooks.
    let mut cmd = claude_cmd(home.path(), None);
    cmd.args(["plugin", "validate", "--strict", "--json", "."])
        .current_dir(repo_root());
    let out = run_ok(
        cmd,
        "claude plugin validate --strict --json .",
        COMMAND_TIMEOUT,
    );
    let report: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("validate --json printed no JSON ({e})\n{}", out.text()));
    let skills: Vec<&str> = report["provides"]["skills"]
        .as_array()
        .expect("provides.skills")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for dir in skill_dirs() {
        let name = format!("tasklock:{}", dir.file_name().unwrap().to_str().unwrap());
        assert!(
            skills.contains(&name.as_str()),
            "the plugin does not provide {name}: {skills:?}"
        );
    }
    let hooks = report["provides"]["hooks"].to_string();
    for event in [
        "session-start",
        "user-prompt-submit",
        "post-tool-use",
        "session-end",
    ] {
        assert!(
            hooks.contains(&format!("tasklock hook {event}")),
            "the plugin does not provide the {event} hook: {hooks}"
        );
    }
}

#[test]
fn plugin_manifest_matches_the_crate_and_the_init_template() {
    let root = repo_root();
    let plugin = read_json(&root.join(".claude-plugin/plugin.json"));
    assert_eq!(plugin["name"], "tasklock");
    assert_eq!(
        plugin["version"],
        env!("CARGO_PKG_VERSION"),
        "bump .claude-plugin/plugin.json with Cargo.toml"
    );
    // The plugin's hooks are the ones `tasklock init` writes into .claude/settings.json.
    let template = read_json(&root.join("templates/claude-settings.json"));
    assert_eq!(
        plugin["hooks"], template["hooks"],
        "the hooks of .claude-plugin/plugin.json and templates/claude-settings.json differ"
    );
    let market = read_json(&root.join(".claude-plugin/marketplace.json"));
    let entries = market["plugins"].as_array().expect("marketplace plugins");
    assert!(
        entries
            .iter()
            .any(|p| p["name"] == "tasklock" && p["source"] == "./"),
        "marketplace.json does not list the tasklock plugin at ./: {market}"
    );
}

fn skill_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(repo_root().join("skills"))
        .expect("read skills/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("SKILL.md").is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no skills/*/SKILL.md found");
    dirs
}

#[test]
fn skills_validate_with_agentskills() {
    let bin = agentskills();
    let mut failures = Vec::new();
    for dir in skill_dirs() {
        let rel = dir.strip_prefix(repo_root()).unwrap().to_path_buf();
        let mut cmd = Command::new(&bin);
        cmd.arg("validate").arg(&rel).current_dir(repo_root());
        let out = run(cmd, "agentskills validate", COMMAND_TIMEOUT);
        if !out.status.success() {
            failures.push(format!(
                "agentskills validate {}\n{}",
                rel.display(),
                out.text()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Copy the repository as a clone would have it: without target/ and .git/. Installing
/// from a local directory copies the whole directory into the plugin cache.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if from == repo_root() && (name == "target" || name == ".git") {
            continue;
        }
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else if ty.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

#[test]
fn plugin_installs_from_its_marketplace_and_its_hooks_run() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let source = tmp.path().join("tasklock");
    copy_tree(&repo_root(), &source);

    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "marketplace", "add"])
        .arg(&source)
        .current_dir(tmp.path());
    run_ok(cmd, "claude plugin marketplace add", COMMAND_TIMEOUT);
    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "install", "tasklock@tasklock"])
        .current_dir(tmp.path());
    run_ok(
        cmd,
        "claude plugin install tasklock@tasklock",
        COMMAND_TIMEOUT,
    );
    let installed = read_json(&home.join(".claude/plugins/installed_plugins.json"));
    let entry = &installed["plugins"]["tasklock@tasklock"][0];
    assert_eq!(
        entry["version"],
        env!("CARGO_PKG_VERSION"),
        "installed_plugins.json: {installed}"
    );

    // A project without `tasklock init`: only the plugin's hooks can do the work.
    let project = git_project(tmp.path());
    assert!(!project.join(".claude").exists());
    let stub = Stub::start("tasklock checkout e2e-task");
    let session = run_session(
        &home,
        &project,
        &stub,
        "Check out the task e2e-task with tasklock, then stop.",
    );
    eprintln!(
        "e2e: plugin session took {:?}; stub saw:\n{}",
        session.out.elapsed,
        stub.log()
    );
    assert_session_lifecycle(&session, &project, &stub);
}

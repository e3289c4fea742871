//! The Claude Code plugin (`.claude-plugin/`) and the skills, checked with the real tools:
//! `claude plugin validate --strict`, the Agent Skills reference validator, and an install
//! through Claude Code's own plugin commands followed by a session that runs its hooks.
//!
//! The first run installs the CLI from npm and skills-ref from PyPI (see docs/e2e.md).

mod e2e;
mod release;

use std::path::{Path, PathBuf};
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
            hooks.contains(&format!("/bin/tasklock\\\" hook {event}")),
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
    // The plugin's hooks are the ones `tasklock init` writes into .claude/settings.json,
    // run through the plugin's launcher (bin/tasklock), which finds or brings the binary.
    let template = std::fs::read_to_string(root.join("templates/claude-settings.json"))
        .unwrap()
        .replace(
            "\"command\": \"tasklock hook",
            "\"command\": \"\\\"${CLAUDE_PLUGIN_ROOT}/bin/tasklock\\\" hook",
        );
    let template: Value = serde_json::from_str(&template).unwrap();
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

/// Install the plugin from a marketplace at a copy of the repository, as a user would:
/// `claude plugin marketplace add` and `claude plugin install`. Returns Claude Code's HOME.
fn install_plugin(tmp: &Path) -> PathBuf {
    let home = tmp.join("home");
    let source = tmp.join("tasklock");
    copy_tree(&repo_root(), &source);

    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "marketplace", "add"])
        .arg(&source)
        .current_dir(tmp);
    run_ok(cmd, "claude plugin marketplace add", COMMAND_TIMEOUT);
    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "install", "tasklock@tasklock"])
        .current_dir(tmp);
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
    home
}

#[test]
fn plugin_installs_from_its_marketplace_and_its_hooks_run() {
    let tmp = tempfile::tempdir().unwrap();
    let home = install_plugin(tmp.path());

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
    // tasklock was on PATH: the plugin used it and downloaded nothing.
    assert!(
        !home.join(".local/share/tasklock/plugin").exists(),
        "the plugin downloaded a binary though tasklock was on PATH"
    );
}

/// A user with no tasklock anywhere: the plugin's launcher downloads the release archive
/// for this platform (here from a release served on loopback), verifies it, and runs it;
/// the hooks and the model's own `tasklock` commands both work in the first session.
#[test]
fn plugin_brings_the_binary_when_none_is_installed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = install_plugin(tmp.path());
    let (dir, _archive, packed) = release::dir(&tmp.path().join("dist"), &e2e::tasklock_bin());
    let url = release::serve(dir);

    let system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for d in system_path.split(':') {
        assert!(
            !Path::new(d).join("tasklock").exists(),
            "{d}/tasklock exists: this test needs a PATH without tasklock"
        );
    }
    let project = git_project(tmp.path());
    let stub = Stub::start("tasklock checkout e2e-task");
    let mut cmd = claude_cmd(&home, Some(&stub));
    cmd.env("PATH", system_path)
        .env("TASKLOCK_RELEASE_URL", &url)
        .arg("--allowedTools")
        .args(e2e::allowed_rules());
    let session = e2e::session(
        cmd,
        &project,
        "Check out the task e2e-task with tasklock, then stop.",
    );
    assert_session_lifecycle(&session, &project, &stub);
    let own = home.join(".local/share/tasklock/plugin/bin/tasklock");
    let got = std::fs::read(&own)
        .unwrap_or_else(|e| panic!("the plugin did not install {}: {e}", own.display()));
    assert!(
        got == std::fs::read(&packed).unwrap(),
        "{} is not the binary of the release archive",
        own.display()
    );
}

/// A download that fails (here: no release at the URL) says how to install tasklock by
/// hand and exits 127; nothing half-installed is left to be run the next time.
#[test]
fn the_plugin_launcher_fails_clearly_without_a_release() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let url = release::serve(empty);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("sh")
        .arg(repo_root().join("bin/tasklock"))
        .arg("--version")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("TMPDIR", tmp.path())
        .env("TASKLOCK_RELEASE_URL", &url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("could not download tasklock") && err.contains("install.sh | sh"),
        "{err}"
    );
    let own = home.join(".local/share/tasklock/plugin/bin");
    assert!(!own.join("tasklock").exists());
    assert!(
        !own.join(".downloading").exists(),
        "the download lock was left behind"
    );
}

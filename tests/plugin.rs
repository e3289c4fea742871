//! The Claude Code plugin (`plugins/claude/`, listed by the marketplace
//! `.claude-plugin/marketplace.json`) and the skills, checked with the real tools:
//! `claude plugin validate --strict`, the Agent Skills reference validator, and installs
//! through Claude Code's own plugin commands (from a clone, and from a git URL) followed by
//! a session that runs its hooks.
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
        .args(["plugin", "validate", "--strict", "plugins/claude"])
        .current_dir(repo_root());
    let out = run(
        cmd,
        "claude (oldest) plugin validate --strict plugins/claude",
        COMMAND_TIMEOUT,
    );
    assert!(
        out.status.success() && !out.text().contains("warning"),
        "`claude plugin validate --strict plugins/claude` with Claude Code {} failed or warned\n{}",
        e2e::CLAUDE_CODE_OLDEST,
        out.text()
    );
}

#[test]
fn plugin_validates_strictly() {
    let home = tempfile::tempdir().unwrap();
    // The marketplace at the root, and the plugin it lists.
    for target in [".", "plugins/claude"] {
        let mut cmd = claude_cmd(home.path(), None);
        cmd.args(["plugin", "validate", "--strict", target])
            .current_dir(repo_root());
        let out = run(
            cmd,
            &format!("claude plugin validate --strict {target}"),
            COMMAND_TIMEOUT,
        );
        assert!(
            out.status.success(),
            "`claude plugin validate --strict {target}` failed in {}\n{}",
            repo_root().display(),
            out.text()
        );
    }

    // What the validator says the plugin provides: the skills and the hooks.
    let mut cmd = claude_cmd(home.path(), None);
    cmd.args(["plugin", "validate", "--strict", "--json", "plugins/claude"])
        .current_dir(repo_root());
    let out = run_ok(
        cmd,
        "claude plugin validate --strict --json plugins/claude",
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
    let plugin = read_json(&root.join("plugins/claude/.claude-plugin/plugin.json"));
    assert_eq!(plugin["name"], "tasklock");
    assert_eq!(
        plugin["version"],
        env!("CARGO_PKG_VERSION"),
        "bump plugins/claude/.claude-plugin/plugin.json with Cargo.toml"
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
        "the hooks of plugins/claude/.claude-plugin/plugin.json and templates/claude-settings.json differ"
    );
    let market = read_json(&root.join(".claude-plugin/marketplace.json"));
    let entries = market["plugins"].as_array().expect("marketplace plugins");
    assert!(
        entries
            .iter()
            .any(|p| p["name"] == "tasklock" && p["source"] == "./plugins/claude"),
        "marketplace.json does not list the tasklock plugin at ./plugins/claude: {market}"
    );
    assert!(
        !root.join(".claude-plugin/plugin.json").exists(),
        "the repository's root is no plugin: Claude Code would copy all of it"
    );
}

/// The plugin's monitor (docs/wake.md) runs the session's `inbox --follow` through the
/// launcher, from the file Claude Code reads when plugin.json names none (so that
/// plugin.json stays valid for Claude Code versions that know no monitors).
#[test]
fn plugin_declares_the_inbox_monitor() {
    let root = repo_root();
    let plugin = read_json(&root.join("plugins/claude/.claude-plugin/plugin.json"));
    assert!(plugin.get("monitors").is_none(), "{plugin}");
    let monitors = read_json(&root.join("plugins/claude/monitors/monitors.json"));
    assert_eq!(
        monitors,
        serde_json::json!([{
            "name": "inbox",
            "command": "\"${CLAUDE_PLUGIN_ROOT}/bin/tasklock\" inbox --follow",
            "description": "tasklock inbox",
            "when": "always"
        }])
    );
}

/// The plugin's copies of the skills, install.sh (its launcher downloads with it) and the
/// licences are the sources'; `scripts/claude-plugin.sh` writes them.
#[test]
fn plugin_copies_are_the_sources() {
    let root = repo_root();
    let plugin = root.join("plugins/claude");
    let mut pairs = vec![
        (root.join("install.sh"), plugin.join("install.sh")),
        (root.join("LICENSE-MIT"), plugin.join("LICENSE-MIT")),
        (root.join("LICENSE-APACHE"), plugin.join("LICENSE-APACHE")),
    ];
    for dir in skill_dirs() {
        let name = dir.file_name().unwrap().to_owned();
        pairs.push((
            dir.join("SKILL.md"),
            plugin.join("skills").join(name).join("SKILL.md"),
        ));
    }
    let copied: usize = std::fs::read_dir(plugin.join("skills")).unwrap().count();
    assert_eq!(
        copied,
        skill_dirs().len(),
        "plugins/claude/skills: run scripts/claude-plugin.sh"
    );
    for (source, copy) in pairs {
        assert!(
            std::fs::read(&source).unwrap() == std::fs::read(&copy).unwrap_or_default(),
            "{} is not {}: run scripts/claude-plugin.sh and commit",
            copy.display(),
            source.display()
        );
    }
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

/// Copy the repository's files as a clone has them (without .git/ and target/), plus what
/// a clone that has been used holds: a build directory and a lock directory, large.
fn used_clone(to: &Path) {
    copy_tree(&repo_root(), to);
    for dir in ["target/debug", ".locks"] {
        std::fs::create_dir_all(to.join(dir)).unwrap();
        std::fs::write(to.join(dir).join("big"), vec![7u8; 16 << 20]).unwrap();
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if from == repo_root() && (name == "target" || name == ".git" || name == ".locks") {
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

/// The bytes of the files under `dir` (links not followed).
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            total += tree_size(&entry.path());
        } else if ty.is_file() {
            total += entry.metadata().unwrap().len();
        }
    }
    total
}

/// What `claude plugin install` copied into the plugin cache: the plugin's own directory,
/// small, and nothing of the repository around it.
fn assert_only_the_plugin_was_copied(home: &Path) {
    let cache = home.join(".claude/plugins/cache");
    let size = tree_size(&cache);
    eprintln!("plugin cache: {size} bytes");
    assert!(size < 2 << 20, "{} holds {size} bytes", cache.display());
    let installed = cache
        .join("tasklock/tasklock")
        .join(env!("CARGO_PKG_VERSION"));
    for want in [".claude-plugin/plugin.json", "bin/tasklock", "install.sh"] {
        assert!(
            installed.join(want).is_file(),
            "{want} not in {}",
            installed.display()
        );
    }
    for unwanted in ["Cargo.toml", "src", "target", ".locks"] {
        assert!(!installed.join(unwanted).exists(), "{unwanted} copied");
    }
}

/// Install the plugin from a marketplace at a used clone of the repository, as a user
/// would: `claude plugin marketplace add PATH` and `claude plugin install`. Returns Claude
/// Code's HOME.
fn install_plugin(tmp: &Path) -> PathBuf {
    let home = tmp.join("home");
    let source = tmp.join("tasklock");
    used_clone(&source);

    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "marketplace", "add"])
        .arg(&source)
        .current_dir(tmp);
    run_ok(cmd, "claude plugin marketplace add", COMMAND_TIMEOUT);
    plugin_install(&home, tmp);
    assert_only_the_plugin_was_copied(&home);
    home
}

/// `claude plugin install tasklock@tasklock`, and its record.
fn plugin_install(home: &Path, tmp: &Path) {
    let mut cmd = claude_cmd(home, None);
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
}

/// From a git URL, as the README says (`claude plugin marketplace add tasklock/tasklock`):
/// git, told by the HOME's config to fetch GitHub's URL from a local repository of this
/// tree, so nothing leaves the machine. Only the plugin's directory lands in the cache.
#[test]
fn plugin_installs_from_a_git_url_and_copies_only_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    used_clone(&repo);
    std::fs::write(repo.join(".gitignore"), "/target/\n/.locks/\n").unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "tasklock"]);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    git(
        &home,
        &[
            "config",
            "--file",
            ".gitconfig",
            &format!("url.file://{}.insteadOf", repo.display()),
            "https://github.com/tasklock/tasklock.git",
        ],
    );
    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "marketplace", "add", "tasklock/tasklock"])
        .current_dir(tmp.path());
    run_ok(
        cmd,
        "claude plugin marketplace add tasklock/tasklock",
        COMMAND_TIMEOUT,
    );
    plugin_install(&home, tmp.path());
    assert_only_the_plugin_was_copied(&home);

    // The uninstall the README gives.
    let mut cmd = claude_cmd(&home, None);
    cmd.args(["plugin", "uninstall", "tasklock@tasklock"])
        .current_dir(tmp.path());
    run_ok(
        cmd,
        "claude plugin uninstall tasklock@tasklock",
        COMMAND_TIMEOUT,
    );
    let installed = read_json(&home.join(".claude/plugins/installed_plugins.json"));
    assert!(
        installed["plugins"].get("tasklock@tasklock").is_none(),
        "{installed}"
    );
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
        .arg(repo_root().join("plugins/claude/bin/tasklock"))
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

/// The launcher's download runs install.sh with --no-receipt: the plugin's binary stays out
/// of install.sh's receipt, so `install.sh --uninstall` (of the user's own install) never
/// removes it, and the launcher runs the archive's binary.
#[test]
fn the_plugin_launcher_keeps_its_download_out_of_the_receipt() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _archive, packed) = release::dir(&tmp.path().join("dist"), &e2e::tasklock_bin());
    let url = release::serve(dir);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("sh")
        .arg(repo_root().join("plugins/claude/bin/tasklock"))
        .arg("--version")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("TMPDIR", tmp.path())
        .env("TASKLOCK_RELEASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tasklock {}", env!("CARGO_PKG_VERSION"))
    );
    let own = home.join(".local/share/tasklock/plugin/bin/tasklock");
    assert!(std::fs::read(&own).unwrap() == std::fs::read(&packed).unwrap());
    let receipt = home.join(".local/share/tasklock/install-receipt");
    assert!(
        !receipt.exists(),
        "the plugin's download is in install.sh's receipt: {}",
        std::fs::read_to_string(&receipt).unwrap_or_default()
    );
}

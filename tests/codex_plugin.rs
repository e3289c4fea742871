//! The Codex plugin (`plugins/codex`, offered by `.agents/plugins/marketplace.json`): its
//! copies of the skills and hooks are the sources' own, and the real Codex CLI installs it
//! from the repository as a marketplace, after which its hooks run in a session of a
//! project that `tasklock init` never touched.

mod e2e;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use e2e::codex::{CodexScript, CodexStub, codex_cmd, codex_home, thread_id};
use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, git_project, repo_root, run_ok};

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .filter(|e| e.path().join("SKILL.md").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// The plugin's files are copies (Codex drops links when it installs a plugin): they must
/// be the sources' (`sh scripts/codex-plugin.sh` writes them).
#[test]
fn the_codex_plugin_holds_this_versions_skills_and_hooks() {
    let root = repo_root();
    let plugin = root.join("plugins/codex");
    assert_eq!(names(&plugin.join("skills")), names(&root.join("skills")));
    for name in names(&root.join("skills")) {
        assert!(
            read(&plugin.join("skills").join(&name).join("SKILL.md"))
                == read(&root.join("skills").join(&name).join("SKILL.md")),
            "plugins/codex/skills/{name} is stale: run sh scripts/codex-plugin.sh"
        );
    }
    assert!(
        read(&plugin.join("hooks.json")) == read(&root.join("templates/codex-hooks.json")),
        "plugins/codex/hooks.json is stale: run sh scripts/codex-plugin.sh"
    );
    let manifest: Value =
        serde_json::from_slice(&read(&plugin.join(".codex-plugin/plugin.json"))).unwrap();
    assert_eq!(manifest["name"], "tasklock");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["skills"], "./skills/");
    assert_eq!(manifest["hooks"], "./hooks.json");
    let market: Value =
        serde_json::from_slice(&read(&root.join(".agents/plugins/marketplace.json"))).unwrap();
    assert_eq!(market["plugins"][0]["source"]["path"], "./plugins/codex");
}

#[test]
fn codex_installs_the_plugin_from_the_repository_and_its_hooks_run() {
    let codex = e2e::codex::codex();
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    assert!(
        !project.join(".codex").exists(),
        "no project hooks: only the plugin's"
    );
    let stub = CodexStub::start(CodexScript {
        commands: vec!["tasklock checkout plugin-task".into()],
        hold_after: None,
        sessions: 1,
        pause: Duration::ZERO,
        ..CodexScript::default()
    });
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    codex_home(&home, &project, &stub);
    let codex_in = |args: &[&str]| {
        let mut cmd = std::process::Command::new(&codex);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", home.join(".codex"))
            .args(args);
        run_ok(cmd, &format!("codex {}", args.join(" ")), COMMAND_TIMEOUT)
    };
    let root = repo_root();
    codex_in(&["plugin", "marketplace", "add", root.to_str().unwrap()]);
    let out = codex_in(&["plugin", "add", "tasklock@tasklock"]);
    assert!(
        out.stdout.contains("Added plugin `tasklock`"),
        "{}",
        out.text()
    );
    // What Codex installed is the plugin directory, skills and hooks included.
    let cache = home.join(".codex/plugins/cache/tasklock/tasklock");
    let installed = std::fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("no plugin cache at {} ({e})", cache.display()))
        .flatten()
        .next()
        .expect("one installed version")
        .path();
    for name in names(&root.join("skills")) {
        assert!(
            read(&installed.join("skills").join(&name).join("SKILL.md"))
                == read(&root.join("skills").join(&name).join("SKILL.md")),
            "{name}"
        );
    }
    let list = codex_in(&["plugin", "list"]);
    assert!(
        list.stdout
            .lines()
            .any(|l| l.starts_with("tasklock@tasklock") && !l.contains("not installed")),
        "{}",
        list.text()
    );

    // A session in a project without `tasklock init`: the plugin's hooks register it.
    let running = Running::spawn(
        codex_cmd(&home, &project, "Check out the task with tasklock."),
        "codex exec (plugin)",
    );
    let out = running.wait(SESSION_TIMEOUT);
    let context = format!("{}\n--- stub\n{}", out.text(), stub.log());
    assert!(out.status.success(), "{context}");
    let thread = thread_id(&out.stdout).expect("codex exec --json names its thread");
    let entry = project.join(".locks/agents").join(&thread);
    assert!(
        entry.is_file(),
        "the plugin's SessionStart hook registered no agent {thread}\n{context}"
    );
    let mut cmd = std::process::Command::new(e2e::tasklock_bin());
    cmd.args(["audit", "--json", "--limit", "0", "--dir"])
        .arg(project.join(".locks"));
    let audit = run_ok(cmd, "tasklock audit", COMMAND_TIMEOUT);
    assert!(
        audit
            .stdout
            .lines()
            .any(|l| l.contains("\"event\":\"acquire\"") && l.contains(&thread)),
        "the checkout was made as the session's thread\n{}\n{context}",
        audit.stdout
    );
}

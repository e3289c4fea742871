//! `tasklock setup`: the skills the binary carries, installed for Claude Code and linked
//! for Codex, through the real binary in a fresh HOME.

#[macro_use]
mod common;

use std::path::Path;

use common::*;

fn setup(home: &Path, args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    cmd.env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .arg("setup")
        .args(args);
    exec(cmd)
}

fn repo_skills() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("skills"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().join("SKILL.md").is_file())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path().join("SKILL.md")).unwrap(),
                )
            })
            .collect();
    out.sort();
    out
}

#[test]
fn the_binary_carries_every_skill_of_the_repository() {
    let mut carried: Vec<(String, Vec<u8>)> = tasklock::pack::SKILLS
        .iter()
        .map(|s| (s.name.to_string(), s.text.as_bytes().to_vec()))
        .collect();
    carried.sort();
    assert_eq!(carried, repo_skills(), "src/pack.rs lists skills/ exactly");
}

#[test]
fn setup_installs_the_skills_and_links_them_then_has_nothing_to_do() {
    let env = Env::new();
    let home = env.tmp.path();
    let r = setup(home, &["--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "dry_run", r);
    assert!(!home.join(".claude").exists(), "a dry run writes nothing");
    let r = setup(home, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "fresh", r);
    for (name, text) in repo_skills() {
        let file = home.join(".claude/skills").join(&name).join("SKILL.md");
        assert_eq!(std::fs::read(&file).unwrap(), text, "{name}");
        let link = home.join(".agents/skills").join(&name);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            home.join(".claude/skills").join(&name)
        );
    }
    let r = setup(home, &["--json"]);
    assert_eq!(r.code, 0);
    let j = r.json();
    assert_eq!(j["command"], "setup");
    assert_eq!(j["version"], env!("CARGO_PKG_VERSION"));
    let actions: Vec<&str> = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.len(), 2 * repo_skills().len());
    assert!(actions.iter().all(|a| *a == "unchanged"), "{j}");
}

#[test]
fn setup_keeps_what_is_not_its_own_unless_forced_and_a_dry_run_changes_nothing() {
    let env = Env::new();
    let home = env.tmp.path();
    let skill = home.join(".claude/skills/checkout/SKILL.md");
    std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
    std::fs::write(&skill, "my own checkout skill\n").unwrap();
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir_all(home.join(".agents/skills")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, home.join(".agents/skills/heartbeat")).unwrap();

    let r = setup(home, &["--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["dry_run"], true);
    assert!(
        !home.join(".claude/skills/checkouts").exists(),
        "a dry run writes nothing"
    );

    let r = setup(home, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "kept", r);
    assert_eq!(
        std::fs::read_to_string(&skill).unwrap(),
        "my own checkout skill\n"
    );
    assert_eq!(
        std::fs::read_link(home.join(".agents/skills/heartbeat")).unwrap(),
        elsewhere
    );

    let j = setup(home, &["--force", "--json"]).json();
    let action = |path: &Path| {
        j["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path.display().to_string())
            .map(|c| c["action"].as_str().unwrap().to_string())
    };
    assert_eq!(action(&skill).as_deref(), Some("updated"), "{j}");
    assert_eq!(
        std::fs::read(&skill).unwrap(),
        repo_skills()
            .into_iter()
            .find(|(n, _)| n == "checkout")
            .unwrap()
            .1
    );
    assert_eq!(
        std::fs::read_link(home.join(".agents/skills/heartbeat")).unwrap(),
        home.join(".claude/skills/heartbeat")
    );

    // --no-agents leaves the links alone; without HOME the directories must be given.
    let r = setup(home, &["--no-agents", "--json"]);
    assert_eq!(
        r.json()["changes"].as_array().unwrap().len(),
        repo_skills().len()
    );
    let mut cmd = base_cmd(T0);
    cmd.env_remove("HOME").arg("setup");
    let r = exec(cmd);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("--skills-dir"), "{}", r.text());
}

/// Every path under `root` (links not followed), relative, sorted.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// `setup --uninstall` removes what the receipt lists (the skills, the links and the
/// directories setup made) and nothing a user wrote: their own skill, a file they put in
/// a skill's directory, a skill they edited. A HOME that had none of it is left as it was.
#[test]
fn setup_uninstall_removes_exactly_what_setup_wrote() {
    let env = Env::new();
    let home = env.tmp.path();
    std::fs::create_dir_all(home.join("work")).unwrap();
    std::fs::write(home.join("work/notes"), "mine\n").unwrap();
    let before = listing(home);

    let r = setup(home, &[]);
    assert_eq!(r.code, 0, "{}", r.text());
    let receipt = home.join(".local/share/tasklock/setup-receipt.json");
    let listed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(
        listed["entries"].as_array().unwrap().len(),
        // the skills and links, their directories, and .claude, .claude/skills, .agents,
        // .agents/skills
        3 * repo_skills().len() + 4,
        "{listed}"
    );
    // A second run changes nothing, the receipt included.
    let kept_receipt = std::fs::read(&receipt).unwrap();
    assert_eq!(setup(home, &[]).code, 0);
    assert_eq!(std::fs::read(&receipt).unwrap(), kept_receipt);

    // What the user adds and edits afterwards is theirs.
    let own = home.join(".claude/skills/my-own/SKILL.md");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, "my own skill\n").unwrap();
    std::fs::write(home.join(".claude/skills/checkout/notes.md"), "notes\n").unwrap();
    let edited = home.join(".claude/skills/heartbeat/SKILL.md");
    std::fs::write(&edited, "edited\n").unwrap();

    let after_setup = listing(home);
    let r = setup(home, &["--uninstall", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "uninstall_dry_run", r);
    assert_eq!(listing(home), after_setup, "a dry run changes nothing");

    let r = setup(home, &["--uninstall"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "uninstall", r);
    assert!(!receipt.exists(), "the receipt is gone");
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "my own skill\n");
    assert_eq!(std::fs::read_to_string(&edited).unwrap(), "edited\n");
    assert!(home.join(".claude/skills/checkout/notes.md").is_file());
    assert!(!home.join(".claude/skills/checkout/SKILL.md").exists());
    assert!(!home.join(".claude/skills/checkouts").exists());
    assert!(
        !home.join(".agents").exists(),
        "the links and their directories"
    );

    assert!(
        !home.join(".local/share/tasklock").exists(),
        "the receipt's directory, empty"
    );

    // Nothing left to do, said so; in JSON too. Removing the user's files leaves HOME as
    // it was before setup (but for ~/.local/share, which setup did not list).
    let r = setup(home, &["--uninstall", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["uninstall"], true);
    assert_eq!(j["changes"].as_array().unwrap().len(), 0, "{j}");
    std::fs::remove_dir_all(home.join(".claude")).unwrap();
    let mut left = listing(home);
    left.retain(|p| p != ".local" && p != ".local/share");
    assert_eq!(left, before);
}

#[test]
fn setup_uninstall_conflicts_with_install_flags() {
    let env = Env::new();
    let r = setup(env.tmp.path(), &["--uninstall", "--force"]);
    assert_eq!(r.code, 64, "{}", r.text());
}

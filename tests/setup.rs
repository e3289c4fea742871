//! `tasklock setup`: the skills the binary carries, installed for Claude Code and linked
//! for Codex, through the real binary in a fresh HOME.

#[macro_use]
mod common;

use std::path::Path;

use common::*;

fn setup(home: &Path, args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    cmd.env("HOME", home).arg("setup").args(args);
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

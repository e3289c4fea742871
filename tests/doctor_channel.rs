//! `doctor`'s fixes name the channel the binary came from (npm, the install script,
//! `cargo install`, the Claude Code plugin), judged by where the running binary lives:
//! the real binary, linked into each channel's layout.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// The binary at `dest`: a hard link (a copy where the file systems differ).
fn place(dest: &Path) -> PathBuf {
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let bin = env!("CARGO_BIN_EXE_tasklock");
    if std::fs::hard_link(bin, dest).is_err() {
        std::fs::copy(bin, dest).unwrap();
    }
    dest.to_path_buf()
}

/// The check `name` of `doctor --json`, run as `exe` with HOME `home`.
fn check(e: &Env, exe: &Path, home: &Path, name: &str) -> Value {
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut cmd = Command::new(exe);
    cmd.env("TASKLOCK_NOW", &e.now)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_BIN_HOME")
        .env_remove("CARGO_HOME")
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .current_dir(&project)
        .args(["--dir"])
        .arg(e.dir())
        .args(["doctor", "--json", "--agent", "a"])
        .stdin(std::process::Stdio::null());
    let r = exec(cmd);
    let j = r.json();
    j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {}", r.text()))
        .clone()
}

/// Skills of another version than the binary's, in HOME.
fn old_skills(home: &Path) {
    for name in ["checkout", "heartbeat", "checkouts"] {
        let dir = home.join(".claude/skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: x\nmetadata:\n  version: 0.0.1\n---\n",
        )
        .unwrap();
    }
}

#[test]
fn doctor_names_the_channel_the_binary_came_from() {
    let e = Env::new();
    let t = e.tmp.path();
    // (where the binary lives, words the fix for missing skills says, for old skills)
    let home = t.join("home");
    let cases: [(PathBuf, &str, &str); 6] = [
        (
            home.join("prefix/lib/node_modules/tasklock/bin/tasklock"),
            "the npm package brings the binary",
            "npm install -g tasklock@latest",
        ),
        (
            home.join("prefix/lib/node_modules/@tasklock/linux-x64/bin/tasklock"),
            "the npm package brings the binary",
            "npm install -g tasklock@latest",
        ),
        (
            home.join(".cargo/bin/tasklock"),
            "`cargo install` brings the binary",
            "cargo install tasklock --locked --force",
        ),
        (
            home.join(".local/bin/tasklock"),
            "run the install script again",
            "install.sh | sh",
        ),
        (
            home.join(".local/share/tasklock/plugin/bin/tasklock"),
            "the Claude Code plugin loads its own skills",
            "update the tasklock plugin in Claude Code",
        ),
        // Built in a checkout: the script of that checkout.
        (
            PathBuf::from(env!("CARGO_BIN_EXE_tasklock")),
            "run ./install.sh from a tasklock checkout",
            "reinstall with ./install.sh",
        ),
    ];
    for (exe, missing, stale) in cases {
        let exe = if exe.starts_with(&home) {
            place(&exe)
        } else {
            exe
        };
        let _ = std::fs::remove_dir_all(home.join(".claude"));
        let c = check(&e, &exe, &home, "skills");
        assert_eq!(c["status"], "warn", "{c}");
        let fix = c["fix"].as_str().unwrap();
        assert!(fix.contains(missing), "{}: {fix}", exe.display());
        assert!(
            !fix.contains("./install.sh") || missing.contains("./install.sh"),
            "{fix}"
        );
        old_skills(&home);
        let c = check(&e, &exe, &home, "skills");
        let fix = c["fix"].as_str().unwrap();
        assert!(fix.contains(stale), "{}: {fix}", exe.display());
    }
}

#[test]
fn doctor_knows_the_install_script_by_its_receipt_wherever_it_put_the_binary() {
    let e = Env::new();
    let home = e.tmp.path().join("home");
    let exe = place(&home.join("opt/tools/bin/tasklock"));
    let receipt = home.join(".local/share/tasklock/install-receipt");
    std::fs::create_dir_all(receipt.parent().unwrap()).unwrap();
    std::fs::write(
        &receipt,
        format!("# tasklock install receipt\nbin\t1.2\t{}\n", exe.display()),
    )
    .unwrap();
    let c = check(&e, &exe, &home, "skills");
    let fix = c["fix"].as_str().unwrap();
    assert!(fix.contains("run the install script again"), "{fix}");
    // Without the receipt, nothing says how it came.
    std::fs::remove_file(&receipt).unwrap();
    let c = check(&e, &exe, &home, "skills");
    let fix = c["fix"].as_str().unwrap();
    assert!(
        fix.contains("./install.sh from a tasklock checkout"),
        "{fix}"
    );
}

#[test]
fn doctor_says_how_to_remove_skills_installed_twice_by_the_channel() {
    let e = Env::new();
    let home = e.tmp.path().join("home");
    let exe = place(&home.join("prefix/lib/node_modules/tasklock/bin/tasklock"));
    // The same skills in HOME and in the project.
    for root in [home.clone(), home.join("project")] {
        for name in ["checkout", "heartbeat", "checkouts"] {
            let dir = root.join(".claude/skills").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("SKILL.md"), "---\nname: x\n---\n").unwrap();
        }
    }
    let c = check(&e, &exe, &home, "duplicates");
    assert_eq!(c["status"], "warn", "{c}");
    let fix = c["fix"].as_str().unwrap();
    assert!(fix.contains("`tasklock setup --uninstall`"), "{fix}");
    assert!(!fix.contains("install.sh"), "{fix}");
}

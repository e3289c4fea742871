//! The npm channel: `scripts/npm.sh` packs the main package and this platform's binary
//! package; both tarballs are installed with `npm install -g` into a fresh prefix and
//! HOME, offline, with no cargo on PATH, and the installed `tasklock` checks a task out.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_tasklock");

/// The directory of `node` (and `npm`) on PATH, or `None` (said) where there is none:
/// only allowed outside CI.
fn node_dir() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .find(|d| d.join("npm").is_file() && d.join("node").is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tests/npm.rs needs node and npm on PATH"
        );
        eprintln!("skipped: no node and npm on PATH");
    }
    found
}

/// Pack the npm packages from a stripped copy of the binary under test; returns the
/// main tarball and the platform tarball.
fn pack(tmp: &Path) -> (PathBuf, PathBuf) {
    let built = tmp.join("built");
    std::fs::create_dir_all(&built).unwrap();
    let bin = built.join("tasklock");
    std::fs::copy(BIN, &bin).unwrap();
    assert!(Command::new("strip").arg(&bin).status().unwrap().success());
    let out = Command::new("sh")
        .arg(Path::new(REPO).join("scripts/npm.sh"))
        .arg(tmp.join("packages"))
        .env("TASKLOCK_DIST_BINARY", &bin)
        .env("TMPDIR", tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npm.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    let version = env!("CARGO_PKG_VERSION");
    let main = listed
        .iter()
        .find(|p| p.ends_with(format!("tasklock-{version}.tgz")))
        .expect("the main package")
        .clone();
    let platform = listed
        .iter()
        .find(|p| *p != &main)
        .expect("the platform package")
        .clone();
    (main, platform)
}

/// `npm install -g` of the tarballs into `prefix`, offline, HOME fresh, no cargo.
fn npm_install(node: &Path, tmp: &Path, prefix: &Path, tarballs: &[&Path], extra: &[&str]) {
    let home = tmp.join(format!(
        "home-{}",
        prefix.file_name().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&home).unwrap();
    let path = format!("{}:/usr/bin:/bin", node.display());
    assert!(
        !std::env::split_paths(&path).any(|d| d.join("cargo").exists()),
        "cargo on {path}"
    );
    let out = Command::new(node.join("npm"))
        .args([
            "install",
            "-g",
            "--offline",
            "--no-audit",
            "--no-fund",
            "--prefix",
        ])
        .arg(prefix)
        .args(extra)
        .args(tarballs)
        .env_clear()
        .env("HOME", &home)
        .env("PATH", &path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npm install: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A first checkout through the installed command, in a fresh git repository.
fn first_checkout(node: &Path, tmp: &Path, tasklock: &Path) {
    let project = tmp.join(format!("project-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&project).unwrap();
    assert!(
        Command::new("git")
            .args(["init", "-q"])
            .current_dir(&project)
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new(tasklock)
        .args(["checkout", "demo-task", "--agent", "demo", "--json"])
        .current_dir(&project)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", node.display()))
        .env("HOME", tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "granted", "{j}");
}

#[test]
fn npm_install_brings_the_prebuilt_binary_and_it_runs() {
    let Some(node) = node_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (main, platform) = pack(tmp.path());

    // With install scripts (the default): npm's link runs the native binary itself.
    let prefix = tmp.path().join("prefix");
    npm_install(&node, tmp.path(), &prefix, &[&platform, &main], &[]);
    let tasklock = prefix.join("bin/tasklock");
    let real = std::fs::canonicalize(&tasklock).unwrap();
    let head = std::fs::read(&real).unwrap();
    assert!(
        !head.starts_with(b"#!"),
        "the launcher was replaced by the binary: {}",
        real.display()
    );
    first_checkout(&node, tmp.path(), &tasklock);

    // With install scripts skipped, the Node launcher runs the same binary.
    let prefix = tmp.path().join("prefix-no-scripts");
    npm_install(
        &node,
        tmp.path(),
        &prefix,
        &[&platform, &main],
        &["--ignore-scripts"],
    );
    let tasklock = prefix.join("bin/tasklock");
    let head = std::fs::read(std::fs::canonicalize(&tasklock).unwrap()).unwrap();
    assert!(head.starts_with(b"#!/usr/bin/env node"), "the launcher");
    first_checkout(&node, tmp.path(), &tasklock);
}

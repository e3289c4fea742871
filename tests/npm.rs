//! The npm channel: `scripts/npm.sh` packs the main package and this platform's binary
//! package from the release archive `scripts/dist.sh` wrote; both tarballs are installed
//! with `npm install -g` into a fresh prefix and HOME, offline, with no cargo on PATH
//! (with install scripts and without), and the installed `tasklock` checks a task out.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod e2e;
mod release;

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

/// The release archive of the binary under test (`scripts/dist.sh`), and the npm packages
/// `scripts/npm.sh` packs from it; returns the main tarball, the platform tarball and the
/// archive's own `tasklock`, unpacked.
fn pack(tmp: &Path) -> (PathBuf, PathBuf, Vec<u8>) {
    let (dir, archive, _) = release::dir(&tmp.join("dist"), Path::new(BIN));
    let out = Command::new("sh")
        .arg(Path::new(REPO).join("scripts/npm.sh"))
        .arg("--archive")
        .arg(dir.join(&archive))
        .arg(tmp.join("packages"))
        .env("TMPDIR", tmp.join("dist/tmp"))
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
    let unpacked = tmp.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(dir.join(&archive))
        .current_dir(&unpacked)
        .status()
        .unwrap();
    assert!(st.success());
    let binary = std::fs::read(
        unpacked
            .join(archive.trim_end_matches(".tar.gz"))
            .join("tasklock"),
    )
    .unwrap();
    (main, platform, binary)
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

/// A first checkout through the installed command, in a fresh git repository, with PATH
/// `path`.
fn first_checkout(path: &str, tmp: &Path, tasklock: &Path) {
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
        .env("PATH", path)
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

/// A PATH of `sh` alone: in npm's global layout the sh launcher runs no other program
/// (no node, no readlink) before it execs the binary.
fn path_without_node(tmp: &Path) -> PathBuf {
    let shims = tmp.join("shims-no-node");
    std::fs::create_dir_all(&shims).unwrap();
    let sh = ["/usr/bin/sh", "/bin/sh"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("sh in /usr/bin or /bin");
    let link = shims.join("sh");
    if !link.exists() {
        std::os::unix::fs::symlink(sh, link).unwrap();
    }
    shims
}

#[test]
fn npm_install_brings_the_archives_binary_and_it_runs() {
    let Some(node) = node_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (main, platform, archived) = pack(tmp.path());

    // With install scripts (the default): npm's link runs the native binary itself, the
    // very bytes of the release archive.
    let prefix = tmp.path().join("prefix");
    npm_install(&node, tmp.path(), &prefix, &[&platform, &main], &[]);
    let tasklock = prefix.join("bin/tasklock");
    let real = std::fs::canonicalize(&tasklock).unwrap();
    assert!(
        std::fs::read(&real).unwrap() == archived,
        "{} is not the release archive's binary",
        real.display()
    );
    first_checkout(
        &format!("{}:/usr/bin:/bin", node.display()),
        tmp.path(),
        &tasklock,
    );

    // With install scripts skipped, a sh launcher execs the platform package's binary,
    // the archive's too, with no Node on PATH.
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
    assert!(head.starts_with(b"#!/bin/sh"), "the sh launcher");
    let plat = std::fs::read_dir(prefix.join("lib/node_modules/@tasklock"))
        .unwrap()
        .flatten()
        .next()
        .expect("the platform package")
        .path();
    assert!(
        std::fs::read(plat.join("bin/tasklock")).unwrap() == archived,
        "the platform package's binary is not the release archive's"
    );
    let shims = path_without_node(tmp.path());
    first_checkout(&shims.display().to_string(), tmp.path(), &tasklock);

    // The uninstall the README gives for npm: `tasklock setup --uninstall`, then `npm
    // uninstall -g tasklock`; nothing of tasklock is left in HOME or the prefix.
    let home = tmp.path().join("user-home");
    std::fs::create_dir_all(&home).unwrap();
    for args in [&["setup"][..], &["setup", "--uninstall"]] {
        let out = Command::new(&tasklock)
            .args(args)
            .env_clear()
            .env("PATH", &shims)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tasklock {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(node.join("npm"))
        .args(["uninstall", "-g", "--prefix"])
        .arg(&prefix)
        .arg("tasklock")
        .env_clear()
        .env("HOME", &home)
        .env("PATH", format!("{}:/usr/bin:/bin", node.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!tasklock.exists() && !tasklock.is_symlink(), "bin/tasklock");
    let left: Vec<_> = walk(&home)
        .into_iter()
        .filter(|p| !p.starts_with(home.join(".npm")) && !p.ends_with(".local/share"))
        .filter(|p| *p != home.join(".local"))
        .collect();
    assert!(left.is_empty(), "left in HOME: {left:?}");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// The release workflow builds each platform's binary once (scripts/dist.sh, every store,
/// static non-PIE on Linux) and packs the npm platform package from that archive; npm.sh
/// builds nothing of its own.
#[test]
fn the_release_packs_npm_from_the_archive_it_built() {
    let read = |p: &str| std::fs::read_to_string(Path::new(REPO).join(p)).unwrap();
    let workflow = read(".github/workflows/release.yml");
    let npm_runs: Vec<&str> = workflow
        .lines()
        .filter(|l| l.contains("run: ") && l.contains("scripts/npm.sh"))
        .collect();
    assert_eq!(
        npm_runs.iter().map(|l| l.trim()).collect::<Vec<_>>(),
        [
            "- run: sh scripts/npm.sh --archive dist/tasklock-${{ matrix.target }}.tar.gz dist/npm",
            "- run: sh scripts/npm.sh --main-only dist/npm",
        ],
        "{workflow}"
    );
    assert!(
        workflow.contains("TASKLOCK_DIST_TARGET=${{ matrix.target }} sh scripts/dist.sh dist"),
        "{workflow}"
    );
    let npm = read("scripts/npm.sh");
    assert!(!npm.contains("cargo "), "npm.sh builds nothing itself");
    let dist = read("scripts/dist.sh");
    assert!(
        dist.contains("cargo build --release --locked --features postgres")
            && dist.contains("-C target-feature=+crt-static -C relocation-model=static"),
        "dist.sh builds the release binary: every store, static non-PIE"
    );
}

/// The README, followed the way a new user would on a clean machine: `npm install -g
/// tasklock && tasklock setup` from the packed tarballs into a fresh prefix and HOME (no
/// cargo, nothing of this checkout on PATH), `tasklock init` in a new git project, then a
/// real Claude Code session (stub model) whose user types `/checkout e2e-task`: the skill
/// `setup` installed reaches the model, and the checkout it runs, through the hooks `init`
/// wrote, is the session's own.
#[test]
fn a_new_user_follows_the_readme_from_npm_to_a_checkout_in_claude_code() {
    let Some(node) = node_dir() else { return };
    let claude = e2e::claude();
    let tmp = tempfile::tempdir().unwrap();
    let (main, platform, _) = pack(tmp.path());
    let prefix = tmp.path().join("prefix");
    npm_install(&node, tmp.path(), &prefix, &[&platform, &main], &[]);
    let home = tmp.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        prefix.join("bin").display(),
        node.display()
    );
    let user = |args: &[&str], dir: &Path| {
        let out = Command::new("tasklock")
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tasklock {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    user(&["setup"], &home);
    assert!(
        home.join(".claude/skills/checkout/SKILL.md").is_file(),
        "`tasklock setup` installed no /checkout skill"
    );
    let project = e2e::git_project(tmp.path());
    user(&["init"], &project);

    let stub = e2e::Stub::start("tasklock checkout e2e-task");
    let mut cmd = e2e::claude_cmd(&home, Some(&stub));
    cmd.env("PATH", &path);
    assert!(claude.is_file(), "{}", claude.display());
    e2e::trust(&home, &project);
    let session = e2e::session(cmd, &project, "/checkout e2e-task");
    e2e::assert_session_lifecycle(&session, &project, &stub);
    let bodies = stub.state.lock().unwrap().bodies.clone();
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("Checkout: one agent per task")),
        "the /checkout skill never reached the model\n{}",
        stub.log()
    );
}

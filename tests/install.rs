//! `install.sh` run for real in a throwaway HOME (with a space in its path): what it
//! installs, that a second run changes nothing, `--dry-run`, the directory flags,
//! `--project`, `--uninstall` and its receipt, and its errors. The build is skipped with
//! `TASKLOCK_INSTALL_BINARY`, pointed at the binary cargo built for these tests; when the
//! script is piped into `sh` to build from source, it clones `TASKLOCK_REPO` for real and
//! runs a stand-in `cargo` that records its arguments and yields that binary (a release
//! build with LTO takes minutes on 2 cores). Release archives are made from it with
//! `scripts/dist.sh` and served on loopback, with no cargo on PATH.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

mod release;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_tasklock");

// ---------------------------------------------------------------- helpers

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn text(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A temporary HOME, "tasklock home XXXX" so its path has a space.
struct Home {
    tmp: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let tmp = tempfile::Builder::new()
            .prefix("tasklock home ")
            .tempdir()
            .unwrap();
        Home { tmp }
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn join(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }

    /// `sh install.sh ARGS` from the repository root with this HOME and no XDG_* set.
    fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_with(Path::new("sh"), &[], args)
    }

    /// `SHELL SHELL_ARGS install.sh ARGS`, otherwise as `cmd`.
    fn cmd_with(&self, shell: &Path, shell_args: &[&str], args: &[&str]) -> Command {
        let mut cmd = Command::new(shell);
        cmd.args(shell_args)
            .arg(Path::new(REPO).join("install.sh"))
            .args(args)
            .current_dir(REPO)
            .env("HOME", self.path())
            .env("TASKLOCK_INSTALL_BINARY", BIN)
            .stdin(Stdio::null());
        for var in [
            "XDG_BIN_HOME",
            "XDG_DATA_HOME",
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "XDG_CACHE_HOME",
            "TASKLOCK_DIR",
            "TASKLOCK_AGENT",
            "TASKLOCK_AGENT_NAME",
            "CLAUDE_CODE_SESSION_ID",
            "CODEX_THREAD_ID",
            "CARGO_TARGET_DIR",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> Out {
        exec(self.cmd(args))
    }

    fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args);
        assert_eq!(out.code, 0, "install.sh {args:?} failed:\n{}", out.text());
        out
    }

    fn tree(&self) -> Tree {
        tree(self.path())
    }
}

fn exec(mut cmd: Command) -> Out {
    let out = cmd.output().expect("run sh install.sh");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Everything under a directory: relative path -> what it is. Links are not followed.
/// Files are compared by length and hash so that a failed assertion stays readable.
#[derive(Debug, PartialEq, Eq, Clone)]
enum Node {
    Dir,
    File { len: usize, hash: u64 },
    Link(PathBuf),
}

fn file_node(bytes: &[u8]) -> Node {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Node::File {
        len: bytes.len(),
        hash: h.finish(),
    }
}

type Tree = BTreeMap<String, Node>;

fn tree(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Node::Link(fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                out.insert(rel, Node::Dir);
                walk(root, &path, out);
            } else {
                out.insert(rel, file_node(&fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

fn paths(tree: &Tree) -> BTreeSet<String> {
    tree.keys().cloned().collect()
}

/// The skills this checkout ships: directories under skills/ with a SKILL.md.
fn repo_skills() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(Path::new(REPO).join("skills"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("SKILL.md").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for expected in ["checkout", "checkouts", "heartbeat"] {
        assert!(names.iter().any(|n| n == expected), "skills/: {names:?}");
    }
    names
}

fn repo_skill(name: &str) -> Vec<u8> {
    fs::read(Path::new(REPO).join("skills").join(name).join("SKILL.md")).unwrap()
}

/// Every path a default install creates in an empty HOME, and nothing else.
fn default_layout() -> BTreeSet<String> {
    let mut want: BTreeSet<String> = [
        ".local",
        ".local/bin",
        ".local/bin/tasklock",
        ".local/bin/tasklock-mcp",
        ".local/bin/tasklock-view",
        ".local/share",
        ".local/share/tasklock",
        ".local/share/tasklock/install-receipt",
        ".claude",
        ".claude/skills",
        ".agents",
        ".agents/skills",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for name in repo_skills() {
        want.insert(format!(".claude/skills/{name}"));
        want.insert(format!(".claude/skills/{name}/SKILL.md"));
        want.insert(format!(".agents/skills/{name}"));
    }
    want
}

/// The receipt's paths of installed files and links (directories left out).
fn receipt_paths(home: &Home) -> BTreeSet<PathBuf> {
    let text = fs::read_to_string(home.join(".local/share/tasklock/install-receipt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let kind = f.next().unwrap();
            let _sum = f.next().expect("a checksum field");
            let path = f.next().expect("a path field");
            (kind != "dir").then(|| PathBuf::from(path))
        })
        .collect()
}

fn version_of(bin: &Path) -> String {
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert!(out.status.success(), "{} --version failed", bin.display());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn find_on(path: &OsString, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------- install

#[test]
fn fresh_install_puts_binary_skills_and_links_in_place() {
    let home = Home::new();
    assert!(home.path().display().to_string().contains(' '));
    let out = home.ok(&[]);

    let bin = home.join(".local/bin/tasklock");
    let mode = fs::metadata(&bin).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "binary mode {mode:o}");
    assert_eq!(fs::read(&bin).unwrap(), fs::read(BIN).unwrap());
    assert_eq!(
        version_of(&bin),
        format!("tasklock {}", env!("CARGO_PKG_VERSION"))
    );

    let skills = repo_skills();
    for name in &skills {
        let skill = home.join(".claude/skills").join(name);
        assert_eq!(
            fs::read(skill.join("SKILL.md")).unwrap(),
            repo_skill(name),
            "{name}"
        );
        let link = home.join(".agents/skills").join(name);
        assert_eq!(fs::read_link(&link).unwrap(), skill, "{name} link target");
        assert_eq!(
            fs::read(link.join("SKILL.md")).unwrap(),
            repo_skill(name),
            "{name} through the link"
        );
    }

    // The MCP server's binary, beside it: `tasklock mcp` runs it.
    let mcp = home.join(".local/bin/tasklock-mcp");
    assert_eq!(
        fs::read(&mcp).unwrap(),
        fs::read(env!("CARGO_BIN_EXE_tasklock-mcp")).unwrap()
    );
    // The views' binary, beside it: `tasklock top` and `tasklock ui` run it.
    assert_eq!(
        fs::read(home.join(".local/bin/tasklock-view")).unwrap(),
        fs::read(env!("CARGO_BIN_EXE_tasklock-view")).unwrap()
    );
    let once = std::process::Command::new(&bin)
        .args(["top", "--once", "--dir"])
        .arg(home.join("no-such-project/.locks"))
        .current_dir(home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&once.stderr).contains("tasklock top:"),
        "the installed tasklock did not reach tasklock-view: {}",
        String::from_utf8_lossy(&once.stderr)
    );
    // With no client on stdin, the installed server starts and finds no handshake.
    let served = std::process::Command::new(&bin)
        .arg("mcp")
        .current_dir(home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&served.stderr);
    assert!(
        said.contains("did not complete the handshake") && !said.contains("cannot start"),
        "the installed `tasklock mcp` runs the installed server: {said}"
    );

    // Nothing else anywhere in HOME.
    assert_eq!(paths(&home.tree()), default_layout());

    // The receipt lists every installed file and link.
    let mut want: BTreeSet<PathBuf> = BTreeSet::from([
        bin.clone(),
        mcp.clone(),
        home.join(".local/bin/tasklock-view"),
    ]);
    for name in &skills {
        want.insert(home.join(".claude/skills").join(name).join("SKILL.md"));
        want.insert(home.join(".agents/skills").join(name));
    }
    assert_eq!(receipt_paths(&home), want);

    assert!(out.stdout.contains("installed"), "{}", out.text());
    assert!(
        out.stdout.contains("not on your PATH"),
        "PATH hint: {}",
        out.text()
    );
    // How to give MCP clients the server: `init` for Codex, a line for the others.
    let mcp = out
        .stdout
        .lines()
        .find(|l| l.contains("MCP clients:"))
        .unwrap_or_else(|| panic!("no MCP setup line: {}", out.text()));
    for needle in [
        "`tasklock init`",
        ".codex/config.toml",
        "`claude mcp add tasklock -- tasklock mcp`",
        r#"{"mcpServers": {"tasklock": {"command": "tasklock", "args": ["mcp"]}}}"#,
    ] {
        assert!(mcp.contains(needle), "{needle} in: {mcp}");
    }
}

#[test]
fn second_run_is_idempotent_and_says_so() {
    let home = Home::new();
    home.ok(&[]);
    let before = home.tree();
    let bin = home.join(".local/bin/tasklock");
    let inode = fs::metadata(&bin).unwrap().ino();

    let out = home.ok(&[]);
    assert!(
        out.stdout.contains("nothing changed"),
        "says so: {}",
        out.text()
    );
    assert!(!out.stdout.contains("installed "), "{}", out.text());
    assert_eq!(home.tree(), before, "same files, links and receipt");
    assert_eq!(
        fs::metadata(&bin).unwrap().ino(),
        inode,
        "an unchanged binary is not rewritten"
    );
}

#[test]
fn upgrade_replaces_the_binary_atomically() {
    let home = Home::new();
    home.ok(&[]);
    let bin = home.join(".local/bin/tasklock");
    let old = fs::read(&bin).unwrap();
    let inode = fs::metadata(&bin).unwrap().ino();
    // A process still running the old binary keeps seeing the old file.
    let held = fs::File::open(&bin).unwrap();

    let newer = home.join("newer tasklock");
    let mut bytes = old.clone();
    bytes.extend_from_slice(b"\n# a newer build\n");
    fs::write(&newer, &bytes).unwrap();
    fs::set_permissions(&newer, fs::Permissions::from_mode(0o755)).unwrap();

    let mut cmd = home.cmd(&[]);
    cmd.env("TASKLOCK_INSTALL_BINARY", &newer);
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(out.stdout.contains("replaced"), "{}", out.text());
    assert_eq!(fs::read(&bin).unwrap(), bytes);
    assert_ne!(
        fs::metadata(&bin).unwrap().ino(),
        inode,
        "renamed into place"
    );
    let mut seen = Vec::new();
    std::io::Read::read_to_end(&mut &held, &mut seen).unwrap();
    assert_eq!(seen, old, "the old file was not written in place");
    let mut left: Vec<_> = fs::read_dir(home.join(".local/bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["tasklock", "tasklock-mcp", "tasklock-view"],
        "no temporary file left behind"
    );

    // The receipt follows the upgrade: uninstall removes the newer binary.
    home.ok(&["--uninstall"]);
    assert!(!bin.exists());
}

#[test]
fn dry_run_changes_nothing() {
    let home = Home::new();
    let out = home.ok(&["--dry-run"]);
    assert!(home.tree().is_empty(), "{:?}", home.tree());
    assert!(out.stdout.contains("would install"), "{}", out.text());
    assert!(
        out.stdout
            .contains(&home.join(".local/bin/tasklock").display().to_string()),
        "names the binary: {}",
        out.text()
    );

    // Installed, then one skill deleted: a dry run reports it and still changes nothing.
    home.ok(&[]);
    fs::remove_file(home.join(".claude/skills/heartbeat/SKILL.md")).unwrap();
    let before = home.tree();
    let out = home.ok(&["--dry-run"]);
    assert!(
        out.stdout.contains("heartbeat/SKILL.md"),
        "plans the missing skill: {}",
        out.text()
    );
    assert_eq!(home.tree(), before);

    let out = home.ok(&["--uninstall", "--dry-run"]);
    assert!(out.stdout.contains("would remove"), "{}", out.text());
    assert_eq!(home.tree(), before, "uninstall --dry-run changes nothing");
}

/// A `cargo` that "builds" by copying `FAKE_BUILD_OUTPUT` to where cargo would put the
/// binary (honouring `--target` and `CARGO_TARGET_DIR`), and logs its arguments.
fn fake_cargo(dir: &Path) -> OsString {
    fs::create_dir_all(dir).unwrap();
    let script = dir.join("cargo");
    fs::write(
        &script,
        r#"#!/bin/sh
printf '%s\n' "$*" >>"$FAKE_CARGO_LOG"
out=$CARGO_TARGET_DIR
while [ $# -gt 0 ]; do
    case $1 in --target) out=$out/$2; shift ;; esac
    shift
done
mkdir -p "$out/release"
cp "$FAKE_BUILD_OUTPUT" "$out/release/tasklock"
"#,
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = OsString::from(dir);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

#[test]
fn dry_run_builds_and_compares_the_binary() {
    let home = Home::new();
    home.ok(&[]);
    let bin = home.join(".local/bin/tasklock");
    let work = tempfile::tempdir().unwrap();
    let path = fake_cargo(&work.path().join("shims"));
    let log = work.path().join("cargo.log");
    let target = work.path().join("target");
    let dry = |output: &Path| {
        let mut cmd = home.cmd(&["--dry-run"]);
        cmd.env_remove("TASKLOCK_INSTALL_BINARY")
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target)
            .env("FAKE_CARGO_LOG", &log)
            .env("FAKE_BUILD_OUTPUT", output);
        exec(cmd)
    };
    let before = home.tree();

    // The same build as installed: unchanged, and it says it built.
    let out = dry(Path::new(BIN));
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(
        out.stdout.contains("cargo build --release --locked"),
        "{}",
        out.text()
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.ends_with(&bin.display().to_string()))
        .unwrap_or_else(|| panic!("no line for the binary: {}", out.text()));
    assert!(line.trim_start().starts_with("unchanged"), "{line}");
    assert!(!out.stdout.contains("would replace"), "{}", out.text());
    assert!(
        fs::read_to_string(&log)
            .unwrap()
            .contains("build --release --locked"),
        "cargo was run"
    );

    // Another build: would replace it; nothing installed changes.
    let newer = work.path().join("newer");
    let mut bytes = fs::read(BIN).unwrap();
    bytes.extend_from_slice(b"\n# a newer build\n");
    fs::write(&newer, &bytes).unwrap();
    fs::set_permissions(&newer, fs::Permissions::from_mode(0o755)).unwrap();
    let out = dry(&newer);
    assert_eq!(out.code, 0, "{}", out.text());
    let line = out
        .stdout
        .lines()
        .find(|l| l.ends_with(&bin.display().to_string()))
        .unwrap();
    assert!(line.trim_start().starts_with("would replace"), "{line}");
    assert!(
        out.stdout.contains("Dry run: 1 to change"),
        "{}",
        out.text()
    );
    assert_eq!(home.tree(), before, "a dry run changed the install");
    assert_eq!(fs::read(&bin).unwrap(), fs::read(BIN).unwrap());
}

/// A git repository at `path`, with `home` as HOME for git.
fn git_project(home: &Home, path: &Path) {
    fs::create_dir_all(path).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(path)
        .env("HOME", home.path())
        .status()
        .expect("git");
    assert!(git.success());
}

#[test]
fn warns_when_skills_or_hooks_would_load_twice() {
    let home = Home::new();
    let project = home.join("proj");
    git_project(&home, &project);
    let warned = |out: &Out, needle: &str| {
        assert_eq!(out.code, 0, "{}", out.text());
        out.stderr.contains(needle)
    };

    // Global first: no warning. Then --project: the skills are in both places.
    let out = home.ok(&[]);
    assert!(!out.stderr.contains("twice"), "{}", out.text());
    let mut cmd = home.cmd(&["--project"]);
    cmd.current_dir(&project);
    let out = exec(cmd);
    assert!(
        warned(&out, "also installed for your user")
            && out.stderr.contains("checkout, checkouts, heartbeat")
            && out.stderr.contains("lists each twice"),
        "{}",
        out.text()
    );

    // A global install from inside that project warns the other way round.
    let mut cmd = home.cmd(&[]);
    cmd.current_dir(project.join(".claude"));
    let out = exec(cmd);
    assert!(warned(&out, "also in this project's"), "{}", out.text());
    // Not from elsewhere.
    let out = home.ok(&[]);
    assert!(!out.stderr.contains("twice"), "{}", out.text());

    // The plugin enabled for the user: hooks twice with --project, skills twice globally.
    fs::write(
        home.join(".claude/settings.json"),
        r#"{"enabledPlugins": {"tasklock@tasklock": true}}"#,
    )
    .unwrap();
    let mut cmd = home.cmd(&["--project", "--dry-run"]);
    cmd.current_dir(&project);
    let out = exec(cmd);
    assert!(
        warned(&out, "tasklock plugin is enabled") && out.stderr.contains("each hook twice"),
        "{}",
        out.text()
    );
    let out = home.ok(&["--dry-run"]);
    assert!(
        out.stderr.contains("tasklock plugin is enabled")
            && out.stderr.contains("brings the same skills"),
        "{}",
        out.text()
    );
    // Disabled: no plugin warning, even when installed.
    fs::write(
        home.join(".claude/settings.json"),
        r#"{"enabledPlugins": {"tasklock@tasklock": false}}"#,
    )
    .unwrap();
    fs::create_dir_all(home.join(".claude/plugins")).unwrap();
    fs::write(
        home.join(".claude/plugins/installed_plugins.json"),
        r#"{"version": 2, "plugins": {"tasklock@tasklock": [{"scope": "user"}]}}"#,
    )
    .unwrap();
    let out = home.ok(&["--dry-run"]);
    assert!(!out.stderr.contains("plugin"), "{}", out.text());
    // Installed and not disabled: enabled.
    fs::remove_file(home.join(".claude/settings.json")).unwrap();
    let out = home.ok(&["--dry-run"]);
    assert!(
        out.stderr.contains("tasklock plugin is enabled"),
        "{}",
        out.text()
    );
}

#[test]
fn prefix_and_skills_dir_are_honoured() {
    let home = Home::new();
    let bindir = home.join("my bin");
    let skills_dir = home.join("my skills");
    home.ok(&[
        "--prefix",
        bindir.to_str().unwrap(),
        "--skills-dir",
        skills_dir.to_str().unwrap(),
    ]);
    assert!(version_of(&bindir.join("tasklock")).starts_with("tasklock "));
    for name in repo_skills() {
        let skill = skills_dir.join(&name);
        assert_eq!(fs::read(skill.join("SKILL.md")).unwrap(), repo_skill(&name));
        assert_eq!(
            fs::read_link(home.join(".agents/skills").join(&name)).unwrap(),
            skill
        );
    }
    assert!(
        !home.join(".local/bin").exists(),
        "default bin dir untouched"
    );
    assert!(
        !home.join(".claude").exists(),
        "default skills dir untouched"
    );

    // XDG_BIN_HOME is the default bin dir when set; --agents-dir moves the links.
    let home = Home::new();
    let xdg = home.join("xdg bin");
    let agents = home.join("agent skills");
    let mut cmd = home.cmd(&["--agents-dir", agents.to_str().unwrap()]);
    cmd.env("XDG_BIN_HOME", &xdg);
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(xdg.join("tasklock").is_file());
    assert!(!home.join(".local/bin").exists());
    assert_eq!(
        fs::read_link(agents.join("checkout")).unwrap(),
        home.join(".claude/skills/checkout")
    );
    assert!(!home.join(".agents").exists());
}

#[test]
fn a_skill_linked_by_hand_is_left_alone() {
    let home = Home::new();
    // Someone linked the skill to their own copy: installing must not write through it.
    let own = home.join("my copy/checkout");
    fs::create_dir_all(&own).unwrap();
    fs::write(own.join("SKILL.md"), "my version\n").unwrap();
    fs::create_dir_all(home.join(".claude/skills")).unwrap();
    let link = home.join(".claude/skills/checkout");
    std::os::unix::fs::symlink(&own, &link).unwrap();
    let before = home.tree();

    let out = home.ok(&[]);
    assert!(out.stdout.contains("left as it is"), "{}", out.text());
    assert_eq!(
        fs::read_to_string(own.join("SKILL.md")).unwrap(),
        "my version\n"
    );
    assert_eq!(fs::read_link(&link).unwrap(), own);
    assert!(!receipt_paths(&home).iter().any(|p| p.starts_with(&link)));
    home.ok(&["--uninstall"]);
    assert_eq!(home.tree(), before);
}

#[test]
fn path_hint_only_when_the_bin_dir_is_not_on_path() {
    let home = Home::new();
    let bindir = home.join(".local/bin");
    let mut path = OsString::from(&bindir);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let mut cmd = home.cmd(&[]);
    cmd.env("PATH", path);
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(!out.stdout.contains("not on your PATH"), "{}", out.text());
}

#[test]
fn no_agents_skips_the_links() {
    let home = Home::new();
    home.ok(&["--no-agents"]);
    assert!(!home.join(".agents").exists(), "{:?}", home.tree());
    for name in repo_skills() {
        assert!(
            home.join(".claude/skills")
                .join(name)
                .join("SKILL.md")
                .is_file()
        );
    }
    assert!(home.join(".local/bin/tasklock").is_file());
}

#[test]
fn project_installs_skills_here_and_wires_settings() {
    let home = Home::new();
    let project = home.join("my project");
    fs::create_dir(&project).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .env("HOME", home.path())
        .status()
        .expect("git");
    assert!(git.success());

    let mut cmd = home.cmd(&["--project"]);
    cmd.current_dir(&project);
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());

    let bin = home.join(".local/bin/tasklock");
    assert!(bin.is_file());
    assert!(
        out.stdout.contains(&format!("{} init", bin.display())),
        "init run with the installed binary: {}",
        out.text()
    );
    for name in repo_skills() {
        let skill = project.join(".claude/skills").join(&name);
        assert_eq!(fs::read(skill.join("SKILL.md")).unwrap(), repo_skill(&name));
        let link = project.join(".agents/skills").join(&name);
        assert!(fs::read_link(&link).unwrap().is_relative());
        assert_eq!(fs::read(link.join("SKILL.md")).unwrap(), repo_skill(&name));
    }
    assert!(!home.join(".claude").exists(), "global skills untouched");
    assert!(!home.join(".agents").exists(), "global links untouched");

    let settings: Value =
        serde_json::from_str(&fs::read_to_string(project.join(".claude/settings.json")).unwrap())
            .unwrap();
    let commands: Vec<&str> = settings["hooks"]["SessionStart"]
        .as_array()
        .expect("SessionStart hooks")
        .iter()
        .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
        .filter_map(|h| h["command"].as_str())
        .collect();
    assert!(
        commands.contains(&"tasklock hook session-start"),
        "{settings:#}"
    );
    assert!(project.join("CLAUDE.md").is_file());

    // Uninstall takes the skills back out and leaves what `tasklock init` wrote.
    home.ok(&["--uninstall"]);
    assert!(!project.join(".claude/skills").exists());
    assert!(!project.join(".agents").exists());
    assert!(project.join(".claude/settings.json").is_file());
    assert!(project.join("CLAUDE.md").is_file());
    assert!(!bin.exists());
}

// ---------------------------------------------------------------- uninstall

#[test]
fn uninstall_removes_exactly_what_was_installed() {
    let home = Home::new();
    // The user's own things beside where tasklock goes.
    let mine = home.join(".claude/skills/mine");
    fs::create_dir_all(&mine).unwrap();
    fs::write(mine.join("SKILL.md"), "my own skill\n").unwrap();
    fs::create_dir_all(home.join(".local/bin")).unwrap();
    fs::write(home.join(".local/bin/other-tool"), "#!/bin/sh\n").unwrap();
    let before = home.tree();

    home.ok(&[]);
    assert!(home.join(".local/bin/tasklock").is_file());
    let out = home.ok(&["--uninstall"]);
    assert_eq!(home.tree(), before, "back as it was:\n{}", out.text());
    assert!(!home.join(".local/share/tasklock").exists(), "receipt gone");

    let out = home.ok(&["--uninstall"]);
    assert!(
        out.stdout.contains("Nothing to uninstall"),
        "{}",
        out.text()
    );
    assert_eq!(home.tree(), before);
}

#[test]
fn uninstall_keeps_a_skill_edited_since_install() {
    let home = Home::new();
    home.ok(&[]);
    let edited = home.join(".claude/skills/checkout/SKILL.md");
    let mut text = fs::read_to_string(&edited).unwrap();
    text.push_str("\nMy own notes.\n");
    fs::write(&edited, &text).unwrap();

    let out = home.ok(&["--uninstall"]);
    assert_eq!(fs::read_to_string(&edited).unwrap(), text, "kept as edited");
    assert!(
        out.stdout.contains("kept") && out.stdout.contains(&edited.display().to_string()),
        "says it is kept: {}",
        out.text()
    );
    let mut want: BTreeSet<String> = [
        ".claude",
        ".claude/skills",
        ".claude/skills/checkout",
        ".claude/skills/checkout/SKILL.md",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(paths(&home.tree()), want, "everything else removed");

    // A reinstall does not overwrite the edit either, unless forced.
    let out = home.ok(&["--no-agents"]);
    assert!(out.stdout.contains("kept"), "{}", out.text());
    assert_eq!(fs::read_to_string(&edited).unwrap(), text);
    home.ok(&["--no-agents", "--force"]);
    assert_eq!(fs::read(&edited).unwrap(), repo_skill("checkout"));
    home.ok(&["--uninstall"]);
    // The directories were there before this second install, so they stay.
    want.remove(".claude/skills/checkout/SKILL.md");
    assert_eq!(paths(&home.tree()), want);
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_flags_are_usage_errors_and_help_is_not() {
    let home = Home::new();
    let out = home.run(&["--bogus"]);
    assert_eq!(out.code, 64, "{}", out.text());
    assert!(out.stderr.contains("--bogus"), "{}", out.text());
    let out = home.run(&["--prefix"]);
    assert_eq!(out.code, 64, "{}", out.text());
    let out = home.run(&["--uninstall", "--no-agents"]);
    assert_eq!(out.code, 64, "{}", out.text());
    let out = home.run(&["--from-source", "--download"]);
    assert_eq!(out.code, 64, "{}", out.text());
    assert!(out.stderr.contains("give one"), "{}", out.text());
    let out = home.run(&["--binary-only", "--project"]);
    assert_eq!(out.code, 64, "{}", out.text());
    assert!(out.stderr.contains("installs no skills"), "{}", out.text());
    assert!(home.tree().is_empty(), "{:?}", home.tree());

    let out = home.run(&["--help"]);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(out.stdout.contains("--uninstall"), "{}", out.text());
    assert!(home.tree().is_empty());
}

/// PATH without cargo: directories holding it are replaced by a directory of links to
/// everything else in them.
fn path_without_cargo(home: &Home) -> OsString {
    let shims = home.join("shims");
    fs::create_dir_all(&shims).unwrap();
    let mut dirs = Vec::new();
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if dir.join("cargo").exists() {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                let link = shims.join(&name);
                if name != "cargo" && !link.exists() {
                    std::os::unix::fs::symlink(entry.path(), link).unwrap();
                }
            }
        } else {
            dirs.push(dir);
        }
    }
    dirs.push(shims.clone());
    let path = std::env::join_paths(dirs).unwrap();
    assert_eq!(find_on(&path, "cargo"), None, "cargo still on {path:?}");
    path
}

#[test]
fn missing_cargo_is_a_clear_error() {
    let home = Home::new();
    let path = path_without_cargo(&home);
    let sh = find_on(&path, "sh").expect("sh on PATH");
    let before = home.tree();

    let mut cmd = home.cmd_with(&sh, &[], &[]);
    cmd.env_remove("TASKLOCK_INSTALL_BINARY").env("PATH", &path);
    let out = exec(cmd);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("rustup.rs")
            && out.stderr.contains("cargo")
            && out.stderr.contains(&format!("run sh {REPO}/install.sh")),
        "{}",
        out.text()
    );
    assert_eq!(home.tree(), before, "nothing installed");
}

// ---------------------------------------------------------------- other shells

/// The whole cycle under every POSIX shell at hand, not only the system `sh`.
#[test]
fn install_and_uninstall_under_dash_and_bash() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut ran = 0;
    for (shell, shell_args) in [("dash", &[][..]), ("bash", &["--posix"])] {
        let Some(shell) = find_on(&path, shell) else {
            eprintln!("{shell} not found; skipped");
            continue;
        };
        let home = Home::new();
        for args in [&[][..], &[], &["--uninstall"]] {
            let out = exec(home.cmd_with(&shell, shell_args, args));
            assert_eq!(out.code, 0, "{} {args:?}: {}", shell.display(), out.text());
        }
        assert!(
            home.tree().is_empty(),
            "{}: {:?}",
            shell.display(),
            home.tree()
        );
        ran += 1;
    }
    assert!(ran > 0, "neither dash nor bash found");
}

// ---------------------------------------------------------------- without a checkout

/// `curl -fsSL …/install.sh | sh` as a user runs it: the script on sh's stdin, started in a
/// directory that is no checkout, with a HOME, XDG_BIN_HOME and TMPDIR of its own.
/// TASKLOCK_REPO points at `origin`; `cargo` is the stand-in of `fake_cargo`, its calls
/// logged in HOME/cargo.log.
fn piped(home: &Home, origin: &str, extra: &[(&str, &str)]) -> (Out, std::time::Duration) {
    let tmpdir = home.join("tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    let target = home.join("target");
    let path = fake_cargo(&home.join("fake-cargo"));
    // Not `sh install.sh`: `sh` alone, reading the script from stdin.
    let mut cmd = shell_as_for_install(home, Path::new("sh"));
    cmd.current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env_remove("TASKLOCK_RELEASE_URL")
        .env("TASKLOCK_FROM_SOURCE", "1")
        .env("TASKLOCK_REPO", origin)
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("TMPDIR", &tmpdir)
        .env("CARGO_TARGET_DIR", &target)
        .env("PATH", &path)
        .env("FAKE_CARGO_LOG", home.join("cargo.log"))
        .env("FAKE_BUILD_OUTPUT", BIN);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let started = std::time::Instant::now();
    let out = feed_install_sh(cmd);
    (out, started.elapsed())
}

/// Run `cmd` (a shell) with install.sh on its standard input, as `curl … | sh` does.
fn feed_install_sh(mut cmd: Command) -> Out {
    use std::io::Write;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(Path::new(REPO).join("install.sh")).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `SHELL` with the environment `home.cmd_with` gives install.sh.
fn shell_as_for_install(home: &Home, shell: &Path) -> Command {
    let template = home.cmd_with(shell, &[], &[]);
    let mut c = Command::new(shell);
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// A clone of this repository (its committed HEAD), as the server would have it.
fn origin_clone(home: &Home) -> PathBuf {
    let origin = home.join("origin");
    let st = Command::new("git")
        .args(["clone", "-q", "--no-hardlinks", REPO])
        .arg(&origin)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .status()
        .expect("git is needed for this test");
    assert!(st.success(), "git clone {REPO}");
    tag_release(&origin);
    origin
}

/// Tag HEAD of `repo` as this version's release (`vVERSION`), which install.sh clones
/// when it builds from source.
fn tag_release(repo: &Path) {
    let st = Command::new("git")
        .args(["tag", &format!("v{}", env!("CARGO_PKG_VERSION"))])
        .current_dir(repo)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .status()
        .unwrap();
    assert!(st.success(), "git tag in {}", repo.display());
}

#[test]
fn piped_into_sh_it_clones_builds_installs_and_cleans_up() {
    let home = Home::new();
    let origin = origin_clone(&home);
    let url = format!("file://{}", origin.display());
    let (out, took) = piped(&home, &url, &[]);
    eprintln!("install.sh | sh (clone and build) took {took:?}");
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(
        out.stdout.contains(&format!(
            "Fetching: git clone --depth 1 --branch v{} {url}",
            env!("CARGO_PKG_VERSION")
        )) && out.stdout.contains("cargo build --release --locked"),
        "{}",
        out.text()
    );

    let builds = fs::read_to_string(home.join("cargo.log")).unwrap();
    assert!(
        builds.starts_with("build --release --locked"),
        "cargo ran: {builds}"
    );
    let bin = home.join("bin/tasklock");
    assert_eq!(
        version_of(&bin),
        format!("tasklock {}", env!("CARGO_PKG_VERSION"))
    );
    for name in repo_skills() {
        let skill = home.join(".claude/skills").join(&name).join("SKILL.md");
        assert_eq!(
            fs::read(&skill).unwrap(),
            repo_skill(&name),
            "{name}: the built binary's skill"
        );
        assert!(
            home.join(".agents/skills").join(&name).is_symlink(),
            "{name}"
        );
    }
    // The temporary clone is gone, and nothing else was left in TMPDIR.
    let left: Vec<_> = fs::read_dir(home.join("tmp")).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");

    // The receipt makes it uninstallable like any other install (this time from the
    // checkout's script).
    let out = home.ok(&["--uninstall"]);
    assert!(!bin.exists(), "{}", out.text());
}

#[test]
fn piped_into_sh_a_bad_repository_fails_clearly_and_cleans_up() {
    let home = Home::new();
    let missing = home.join("no such repo");
    let (out, _) = piped(&home, &format!("file://{}", missing.display()), &[]);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("git clone of file://") && out.stderr.contains("TASKLOCK_REPO"),
        "{}",
        out.text()
    );
    // A repository that is not tasklock's.
    let other = home.join("other");
    fs::create_dir_all(&other).unwrap();
    for args in [
        &["init", "-q"][..],
        &["commit", "-q", "--allow-empty", "-m", "x"],
    ] {
        let st = Command::new("git")
            .args(args)
            .current_dir(&other)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap();
        assert!(st.success());
    }
    tag_release(&other);
    let (out, _) = piped(&home, &format!("file://{}", other.display()), &[]);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("is not a tasklock repository"),
        "{}",
        out.text()
    );
    let left: Vec<_> = fs::read_dir(home.join("tmp")).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert!(!home.join("bin").exists(), "nothing installed");
}

// ---------------------------------------------------------------- release archives

/// A release directory made from the binary under test (see `release::dir`), in `home`.
fn release_dir(home: &Home) -> (PathBuf, String, PathBuf) {
    release::dir(home.path(), Path::new(BIN))
}

/// `sh` reading install.sh on stdin (as `curl … | sh`), with the release at `url`, no
/// cargo on PATH and nothing to clone.
fn piped_release(home: &Home, url: &str) -> Out {
    let path = path_without_cargo(home);
    let sh = find_on(&path, "sh").expect("sh on PATH");
    fs::create_dir_all(home.join("tmp")).unwrap();
    let mut cmd = shell_as_for_install(home, &sh);
    cmd.current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env_remove("TASKLOCK_FROM_SOURCE")
        .env("TASKLOCK_RELEASE_URL", url)
        .env("TASKLOCK_REPO", home.join("no repository here"))
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("TMPDIR", home.join("tmp"))
        .env("PATH", &path);
    feed_install_sh(cmd)
}

#[test]
fn piped_into_sh_it_installs_the_release_archive_without_a_toolchain() {
    let home = Home::new();
    let (dir, archive, built) = release_dir(&home);
    let url = release::serve(dir);
    let started = std::time::Instant::now();
    let out = piped_release(&home, &url);
    eprintln!(
        "install from a release archive took {:?}",
        started.elapsed()
    );
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(
        out.stdout
            .contains(&format!("Downloading: {url}/{archive}"))
            && out.stdout.contains("Verified: SHA-256"),
        "{}",
        out.text()
    );
    let bin = home.join("bin/tasklock");
    let (got, want) = (fs::read(&bin).unwrap(), fs::read(&built).unwrap());
    assert!(
        got == want,
        "the archive's binary: {} bytes installed, {} packed",
        got.len(),
        want.len()
    );
    for name in repo_skills() {
        let skill = home.join(".claude/skills").join(&name).join("SKILL.md");
        assert_eq!(fs::read(&skill).unwrap(), repo_skill(&name), "{name}");
    }
    // It runs: a first checkout through the installed command.
    let project = home.join("project");
    fs::create_dir_all(&project).unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(st.success());
    let run = Command::new(&bin)
        .args(["checkout", "demo-task", "--agent", "demo", "--json"])
        .current_dir(&project)
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(j["outcome"], "granted", "{j}");
    // The download is gone from TMPDIR; the receipt makes it uninstallable.
    let left: Vec<_> = fs::read_dir(home.join("tmp")).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert!(receipt_paths(&home).contains(&bin));

    // The uninstall the README gives for a piped install: `… | sh -s -- --uninstall`.
    let path = path_without_cargo(&home);
    let sh = find_on(&path, "sh").expect("sh on PATH");
    let mut cmd = shell_as_for_install(&home, &sh);
    cmd.args(["-s", "--", "--uninstall"])
        .current_dir(home.path())
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("PATH", &path);
    let out = feed_install_sh(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(!bin.exists(), "{}", out.text());
    assert!(!home.join(".claude/skills").exists(), "{}", out.text());
    assert!(!home.join(".local/share/tasklock/install-receipt").exists());
}

#[test]
fn a_tampered_archive_or_a_wrong_checksum_installs_nothing() {
    let home = Home::new();
    let (dir, archive, _) = release_dir(&home);
    // One byte of the archive changed after its sum was taken.
    let mut bytes = fs::read(dir.join(&archive)).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    fs::write(dir.join(&archive), bytes).unwrap();
    let url = release::serve(dir.clone());
    let before = home.tree();
    let out = piped_release(&home, &url);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("does not match") && out.stderr.contains("nothing was installed"),
        "{}",
        out.text()
    );
    assert!(!home.join("bin").exists(), "no binary: {}", out.text());
    assert!(!home.join(".claude").exists(), "no skills");
    assert!(
        !home.join(".local/share/tasklock/install-receipt").exists(),
        "no receipt"
    );
    let mut after = home.tree();
    after.retain(|p, _| !p.starts_with("shims") && !p.starts_with("tmp"));
    let mut before = before;
    before.retain(|p, _| !p.starts_with("shims") && !p.starts_with("tmp"));
    assert_eq!(after, before, "nothing else written");
    let left: Vec<_> = fs::read_dir(home.join("tmp")).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");

    // A sum file that holds no sum is refused as well.
    fs::write(dir.join(format!("{archive}.sha256")), "not a sum\n").unwrap();
    let out = piped_release(&home, &url);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(out.stderr.contains("no SHA-256 sum"), "{}", out.text());
    assert!(!home.join("bin").exists());
}

/// No release at the URL: refused, nothing built or installed, and the message says what
/// to run next in the words of a piped install (`curl … | sh -s -- --from-source`).
#[test]
fn no_release_at_the_url_is_refused_with_what_to_run_next() {
    let home = Home::new();
    let empty = home.join("empty-release");
    fs::create_dir_all(&empty).unwrap();
    let url = release::serve(empty);
    let out = piped_release(&home, &url);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("no release archive for")
            && out.stderr.contains("nothing was installed")
            && out.stderr.contains("TASKLOCK_RELEASE_URL")
            && out.stderr.contains(&format!(
                "releases/download/v{}/install.sh | sh -s -- --from-source",
                env!("CARGO_PKG_VERSION")
            )),
        "{}",
        out.text()
    );
    assert!(!home.join("bin").exists());
}

/// The archive is there but its checksum is not: refused as unverifiable, even with cargo
/// at hand (which is not run: no build of another version instead), from a pipe and from
/// a file, each told what to run in its own words.
#[test]
fn a_missing_checksum_is_refused_and_nothing_else_is_installed() {
    let home = Home::new();
    let (dir, archive, _) = release_dir(&home);
    fs::remove_file(dir.join(format!("{archive}.sha256"))).unwrap();
    let url = release::serve(dir);
    let log = home.join("cargo.log");
    let path = fake_cargo(&home.join("fake-cargo"));

    let mut cmd = shell_as_for_install(&home, Path::new("sh"));
    cmd.current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env_remove("TASKLOCK_FROM_SOURCE")
        .env("TASKLOCK_RELEASE_URL", &url)
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("FAKE_CARGO_LOG", &log)
        .env("PATH", &path);
    let out = feed_install_sh(cmd);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr
            .contains(&format!("the checksum {url}/{archive}.sha256 is missing"))
            && out.stderr.contains("nothing was installed")
            && out.stderr.contains("| sh -s -- --from-source"),
        "{}",
        out.text()
    );

    // From a file outside a checkout: the same refusal, worded for that file.
    let script = home.join("dl/install.sh");
    fs::create_dir_all(script.parent().unwrap()).unwrap();
    fs::copy(Path::new(REPO).join("install.sh"), &script).unwrap();
    let mut cmd = shell_as_for_install(&home, Path::new("sh"));
    cmd.arg(&script)
        .current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env_remove("TASKLOCK_FROM_SOURCE")
        .env("TASKLOCK_RELEASE_URL", &url)
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("FAKE_CARGO_LOG", &log)
        .env("PATH", &path)
        .stdin(Stdio::null());
    let out = exec(cmd);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stderr.contains("is missing")
            && out
                .stderr
                .contains(&format!("sh '{}' --from-source", script.display())),
        "{}",
        out.text()
    );
    assert!(
        !log.exists(),
        "cargo was run: {:?}",
        fs::read_to_string(&log)
    );
    assert!(!home.join("bin").exists(), "nothing installed");
    assert!(!home.join(".claude").exists(), "no skills");
    assert!(!home.join(".local/share/tasklock/install-receipt").exists());
}

/// A platform no archive is made for builds from source; with no cargo, the refusal
/// says so and what to run next, piped.
#[test]
fn an_unknown_platform_without_cargo_is_told_what_to_run() {
    let home = Home::new();
    let path = path_without_cargo(&home);
    let uname = home.join("uname-shim");
    fs::create_dir_all(&uname).unwrap();
    fs::write(
        uname.join("uname"),
        "#!/bin/sh\ncase $1 in -s) echo Plan9 ;; -m) echo mips ;; *) echo Plan9 ;; esac\n",
    )
    .unwrap();
    fs::set_permissions(uname.join("uname"), fs::Permissions::from_mode(0o755)).unwrap();
    let mut joined = uname.into_os_string();
    joined.push(":");
    joined.push(&path);
    let sh = find_on(&path, "sh").expect("sh on PATH");
    let mut cmd = shell_as_for_install(&home, &sh);
    cmd.current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env_remove("TASKLOCK_FROM_SOURCE")
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("PATH", &joined);
    let out = feed_install_sh(cmd);
    assert_eq!(out.code, 1, "{}", out.text());
    assert!(
        out.stdout
            .contains("No release archive is made for this platform (Plan9 mips)")
            && out.stderr.contains("cargo not found")
            && out.stderr.contains("install.sh | sh")
            && !out.stderr.contains("./install.sh"),
        "{}",
        out.text()
    );
    assert!(!home.join("bin").exists());
}

/// install.sh installs its own release: its version is the crate's.
#[test]
fn install_sh_belongs_to_this_version() {
    let text = fs::read_to_string(Path::new(REPO).join("install.sh")).unwrap();
    assert!(
        text.lines()
            .any(|l| l == format!("tasklock_version={}", env!("CARGO_PKG_VERSION"))),
        "set tasklock_version in install.sh to Cargo.toml's version"
    );
}

#[test]
fn an_unpacked_release_archive_installs_its_own_binary() {
    let home = Home::new();
    let (dir, archive, built) = release_dir(&home);
    let unpacked = home.join("unpacked");
    fs::create_dir_all(&unpacked).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(dir.join(&archive))
        .current_dir(&unpacked)
        .status()
        .unwrap();
    assert!(st.success());
    let top = unpacked.join(archive.trim_end_matches(".tar.gz"));
    let path = path_without_cargo(&home);
    let sh = find_on(&path, "sh").expect("sh on PATH");
    let mut cmd = shell_as_for_install(&home, &sh);
    cmd.arg(top.join("install.sh"))
        .current_dir(home.path())
        .env_remove("TASKLOCK_INSTALL_BINARY")
        .env("XDG_BIN_HOME", home.join("bin"))
        .env("PATH", &path)
        .stdin(Stdio::null());
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    assert!(
        !out.stdout.contains("Downloading") && !out.stdout.contains("Building"),
        "neither downloads nor builds: {}",
        out.text()
    );
    let (got, want) = (
        fs::read(home.join("bin/tasklock")).unwrap(),
        fs::read(&built).unwrap(),
    );
    assert!(got == want, "the archive's own binary");
    for name in repo_skills() {
        let skill = home.join(".claude/skills").join(&name).join("SKILL.md");
        assert_eq!(fs::read(&skill).unwrap(), repo_skill(&name), "{name}");
    }
}

/// The skills installed are the ones the binary carries (written out by `tasklock
/// setup`), not whatever lies beside the script: so every channel installs one pack.
#[test]
fn the_skills_installed_are_the_binarys_own() {
    let home = Home::new();
    let fake = home.join("checkout");
    fs::create_dir_all(fake.join("skills/checkout")).unwrap();
    fs::copy(Path::new(REPO).join("install.sh"), fake.join("install.sh")).unwrap();
    fs::copy(Path::new(REPO).join("Cargo.toml"), fake.join("Cargo.toml")).unwrap();
    fs::write(
        fake.join("skills/checkout/SKILL.md"),
        "an older checkout skill\n",
    )
    .unwrap();
    let mut cmd = home.cmd(&[]);
    let mut c = Command::new("sh");
    c.arg(fake.join("install.sh"));
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    cmd = c;
    cmd.current_dir(home.path()).stdin(Stdio::null());
    let out = exec(cmd);
    assert_eq!(out.code, 0, "{}", out.text());
    for name in repo_skills() {
        let skill = home.join(".claude/skills").join(&name).join("SKILL.md");
        assert_eq!(fs::read(&skill).unwrap(), repo_skill(&name), "{name}");
    }
}

/// The archive carries the licence files, and two archives made from one commit and one
/// binary are the same bytes, whatever the umask and temporary directory (fixed times,
/// modes and owners, sorted members, `gzip -n`).
#[test]
fn archives_carry_the_licences_and_are_reproducible() {
    let home = Home::new();
    let (dir, archive, built) = release_dir(&home);
    let again = home.join("again");
    fs::create_dir_all(home.join("tmp2")).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec sh \"$0\" \"$1\"")
        .arg(Path::new(REPO).join("scripts/dist.sh"))
        .arg(&again)
        .env("TASKLOCK_DIST_BINARY", &built)
        .env("TMPDIR", home.join("tmp2"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, b) = (
        fs::read(dir.join(&archive)).unwrap(),
        fs::read(again.join(&archive)).unwrap(),
    );
    assert!(a == b, "two archives of one commit differ");
    assert_eq!(
        fs::read(dir.join(format!("{archive}.sha256"))).unwrap(),
        fs::read(again.join(format!("{archive}.sha256"))).unwrap()
    );

    let list = Command::new("tar")
        .args(["--numeric-owner", "-tvzf"])
        .arg(dir.join(&archive))
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    let top = archive.trim_end_matches(".tar.gz");
    for line in list.lines() {
        assert!(line.contains(" 0/0 "), "owner not 0/0: {line}");
    }
    let unpacked = home.join("unpacked");
    fs::create_dir_all(&unpacked).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(dir.join(&archive))
        .current_dir(&unpacked)
        .status()
        .unwrap();
    assert!(st.success());
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let want = fs::read(Path::new(REPO).join(licence)).unwrap();
        assert!(
            String::from_utf8_lossy(&want).contains("tasklock contributors"),
            "{licence}"
        );
        assert_eq!(
            fs::read(unpacked.join(top).join(licence)).ok(),
            Some(want),
            "{licence} in the archive:\n{list}"
        );
    }
}

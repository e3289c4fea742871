//! Shared helpers for the integration tests: run the real binary in a temp lock
//! directory with the clock pinned, and snapshot its output.
#![allow(dead_code, unused_macros, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

#[cfg(unix)]
pub mod browser;
pub mod mcp;
pub mod strace;
pub mod svg;
pub mod tmux;

pub const T0: &str = "2026-01-01T00:00:00Z";
pub const T5M: &str = "2026-01-01T00:05:00Z";
pub const T1H: &str = "2026-01-01T01:00:00Z";

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Run `cmd` with `input` on its standard input (a hook's JSON, as a client gives it).
    pub fn with_stdin(cmd: &mut Command, input: &str) -> Run {
        use std::io::Write;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A command may exit before it reads everything: that is its answer, not ours.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
    pub fn text(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub now: String,
    /// Commands run with the operator secret (see [`Env::as_operator`]).
    pub operator: bool,
}

/// The operator secret of [`Env::as_operator`], and its SHA-256.
pub const OPERATOR_SECRET: &str = "tasklock-test-operator";
pub const OPERATOR_SHA256: &str =
    "1a98515847ba6d96e7280341c3dd27ae82ee70638a3038b24a6058d0b77aed3f";

impl Env {
    pub fn new() -> Env {
        Env {
            tmp: tempfile::tempdir().unwrap(),
            now: T0.into(),
            operator: false,
        }
    }
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join(".locks")
    }
    /// Configure an operator secret for the lock directory and run every later command
    /// with it: the caller may then `release --force` a live holder's checkout.
    pub fn as_operator(&mut self) -> &mut Self {
        self.configure(&format!("operator_secret_sha256: {OPERATOR_SHA256}\n"));
        self.operator = true;
        self
    }
    /// Add lines to the lock directory's config.yaml (made if missing).
    pub fn configure(&self, lines: &str) -> &Self {
        use std::io::Write;
        std::fs::create_dir_all(self.dir()).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir().join("config.yaml"))
            .unwrap()
            .write_all(lines.as_bytes())
            .unwrap();
        self
    }
    pub fn at(&mut self, now: &str) -> &mut Self {
        self.now = now.into();
        self
    }
    /// Run as `agent` (None: no identity at all) with `--dir` set.
    pub fn run(&self, agent: Option<&str>, args: &[&str]) -> Run {
        let mut cmd = base_cmd(&self.now);
        use_store(&mut cmd, &self.dir());
        if self.operator {
            cmd.env("TASKLOCK_OPERATOR_SECRET", OPERATOR_SECRET);
        }
        cmd.arg("--dir").arg(self.dir()).args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        exec(cmd)
    }
    /// As [`Env::run`], with extra environment variables.
    pub fn run_env(&self, agent: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = base_cmd(&self.now);
        use_store(&mut cmd, &self.dir());
        cmd.envs(env.iter().copied());
        cmd.arg("--dir").arg(self.dir()).args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        exec(cmd)
    }
    /// As [`Env::run`], in the directory `cwd` (paths are judged from there).
    pub fn run_in(&self, cwd: &Path, agent: Option<&str>, args: &[&str]) -> Run {
        let mut cmd = base_cmd(&self.now);
        use_store(&mut cmd, &self.dir());
        cmd.current_dir(cwd);
        cmd.arg("--dir").arg(self.dir()).args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        exec(cmd)
    }
    /// As [`Env::run`], with the real clock: for commands beside a process that reads
    /// it (the live views, a server).
    pub fn run_now(&self, agent: Option<&str>, args: &[&str]) -> Run {
        let mut cmd = base_cmd(&self.now);
        cmd.env_remove("TASKLOCK_NOW");
        use_store(&mut cmd, &self.dir());
        cmd.arg("--dir").arg(self.dir()).args(args);
        if let Some(a) = agent {
            cmd.args(["--agent", a]);
        }
        exec(cmd)
    }
    pub fn ok(&self, agent: &str, args: &[&str]) -> Run {
        let r = self.run(Some(agent), args);
        assert_eq!(r.code, 0, "{args:?} failed: {}", r.text());
        r
    }
}

/// Run git in `dir` as a fixed author, with no input; its stdout. Fails the test if git does.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// An [`Env`] whose temp dir is a fresh git repository with `src/a` and `src/b`; returns
/// it and the repository's top (where its lock directory is).
pub fn git_env() -> (Env, PathBuf) {
    let env = Env::new();
    let top = env.tmp.path().to_path_buf();
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&top)
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::create_dir_all(top.join("src/a")).unwrap();
    std::fs::create_dir_all(top.join("src/b")).unwrap();
    (env, top)
}

/// [`git_env`] with one commit (a `README`) on the branch `main`: what a worktree is made
/// from.
#[allow(dead_code)]
pub fn git_repo() -> (Env, PathBuf) {
    let (e, top) = git_env();
    git(&top, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    std::fs::write(top.join("README"), "hello\n").unwrap();
    git(&top, &["add", "README"]);
    git(&top, &["commit", "-q", "-m", "init"]);
    (e, top)
}

/// The layout where a client and the kernel reach different files through one name
/// (issue 45): in the repository `top`, the file `src/a.rs`, a directory `a/b`, the links
/// `l -> a/b` and `ln -> src`, and no `nx`. `l/../src/a.rs` is `a/src/a.rs` to the kernel
/// but `src/a.rs` to a client that applies `..` to the text; so is `nx/../ln/a.rs`.
/// Returns the names of `src/a.rs` to try, relative to `top`, plus one absolute.
#[allow(dead_code)]
pub fn dotdot_layout(top: &Path) -> Vec<String> {
    std::fs::create_dir_all(top.join("src")).unwrap();
    std::fs::create_dir_all(top.join("a/b")).unwrap();
    std::fs::write(top.join("src/a.rs"), "a\n").unwrap();
    std::os::unix::fs::symlink("a/b", top.join("l")).unwrap();
    std::os::unix::fs::symlink("src", top.join("ln")).unwrap();
    vec![
        "l/../src/a.rs".into(),
        "nx/../ln/a.rs".into(),
        "src/../src/a.rs".into(),
        format!("{}/l/../src/a.rs", top.display()),
    ]
}

pub fn base_cmd(now: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    cmd.env("TASKLOCK_NOW", now)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_AGENT_NAME")
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_FORMAT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CLAUDE_CODE_MESSAGING_SOCKET")
        .env_remove("CODEX_THREAD_ID")
        .env_remove("OPENCODE_SESSION_ID")
        .env_remove("TASKLOCK_SECRET")
        .env_remove("TASKLOCK_OPERATOR_SECRET")
        .env_remove("TASKLOCK_URL")
        .env_remove("TASKLOCK_SESSION_URL")
        .stdin(Stdio::null());
    cmd
}

/// Do this test's commands run against PostgreSQL? In the `pg` test target
/// (tests/pg.rs, which includes the behaviour-defining test files), or in any test
/// target run with `TASKLOCK_TEST_STORE=postgres`. Either needs `TASKLOCK_TEST_PG_URL`.
pub fn on_postgres() -> bool {
    env!("CARGO_CRATE_NAME") == "pg"
        || std::env::var("TASKLOCK_TEST_STORE").is_ok_and(|v| v == "postgres")
}

/// The store of the lock directory `dir` for this test: on PostgreSQL, a schema of its
/// own named after `dir` (so every test, and every lock directory of a test, starts
/// empty, and tasklock creates the schema on first use). `None` on the file store.
pub fn pg_url_for(dir: &Path) -> Option<String> {
    if !on_postgres() {
        return None;
    }
    let base = std::env::var("TASKLOCK_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .expect(
            "tests on PostgreSQL need TASKLOCK_TEST_PG_URL (see README: .ci/run starts a server)",
        );
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}schema=t_{:016x}", h.finish()))
}

/// The session URL of the commands on PostgreSQL: `TASKLOCK_TEST_PG_SESSION_URL`, for a
/// run of the suites through a pooler in transaction mode (`TASKLOCK_TEST_PG_URL` the
/// pooler, this the server; docs/postgres.md, "Behind a connection pooler").
pub fn pg_session_url() -> Option<String> {
    if !on_postgres() {
        return None;
    }
    std::env::var("TASKLOCK_TEST_PG_SESSION_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Point `cmd` at the store of the lock directory `dir` ([`pg_url_for`]).
pub fn use_store(cmd: &mut Command, dir: &Path) {
    match pg_url_for(dir) {
        Some(url) => cmd.env("TASKLOCK_URL", url),
        None => cmd.env_remove("TASKLOCK_URL"),
    };
    match pg_session_url() {
        Some(url) => cmd.env("TASKLOCK_SESSION_URL", url),
        None => cmd.env_remove("TASKLOCK_SESSION_URL"),
    };
    if portable_os() {
        cmd.env("TASKLOCK_PORTABLE_OS", "1");
    }
}

/// Do this test's commands run the OS layer macOS runs (src/os/portable.rs)? In the
/// `portable_os` test target (tests/portable_os.rs), which includes the liveness, wait,
/// queue and death-release suites, or with `TASKLOCK_TEST_OS=portable`. Needs the
/// `portable-os` feature on Linux.
pub fn portable_os() -> bool {
    env!("CARGO_CRATE_NAME") == "portable_os"
        || std::env::var("TASKLOCK_TEST_OS").is_ok_and(|v| v == "portable")
}

/// For tests of the file store's own layout (files, modes, rotation, debris): true
/// when this run is on PostgreSQL, where the test does not apply and returns early.
pub fn file_store_only(test: &str) -> bool {
    if on_postgres() {
        eprintln!("{test}: a file-store test, not run on PostgreSQL");
        return true;
    }
    false
}

pub fn exec(mut cmd: Command) -> Run {
    let out = cmd.output().expect("run tasklock");
    Run {
        code: out.status.code().expect("exited normally"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `cmd` run by `sh -c 'ulimit -n FILES; exec PROGRAM ARGS…'`: with its environment and
/// directory, at most `files` open descriptors.
pub fn exec_with_open_files(cmd: Command, files: u32) -> Run {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        sh.current_dir(d);
    }
    exec(sh)
}

/// This host's name, as tasklock records it.
pub fn host() -> String {
    tasklock::identity::hostname()
}

/// Snapshot a run (textual scope: `#[macro_use] mod common;`, so that tests/pg.rs can
/// include several test files, each with its own `common`).
macro_rules! snap {
    ($env:expr, $name:expr, $run:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(
            &regex_escape(&$env.tmp.path().display().to_string()),
            "[TMP]",
        );
        settings.add_filter(
            &format!(
                r"\b{}\b",
                $crate::common::regex_escape(&$crate::common::host())
            ),
            "[HOST]",
        );
        // The Unix user tasklock records (whoever runs the tests).
        settings.add_filter(r#"\{\s*"name":\s*"[^"]*",\s*"uid":\s*\d+\s*\}"#, "[USER]");
        // Named after the test file, not the module path, so that the same file run
        // inside tests/pg.rs (module `pg::ops`) checks the same snapshots.
        settings.set_prepend_module_to_snapshot(false);
        let file = module_path!().rsplit("::").next().unwrap();
        let name = format!("{file}__{}", $name);
        settings.bind(|| insta::assert_snapshot!(name, $run.text()));
    }};
}

pub fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub fn record_path(dir: &Path, encoded: &str) -> PathBuf {
    dir.join("keys").join(encoded)
}

pub fn audit(dir: &Path) -> Vec<Value> {
    if on_postgres() {
        // The same events, through the command (the store is not a file).
        let mut cmd = base_cmd(T0);
        use_store(&mut cmd, dir);
        cmd.arg("--dir")
            .arg(dir)
            .args(["audit", "--json", "--limit", "0"]);
        let r = exec(cmd);
        assert_eq!(r.code, 0, "audit: {}", r.text());
        return r
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect();
    }
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

/// A real unprivileged Unix user (and, when asked, a group of its own) made for a test
/// and removed again on drop. Needs root, as CI has; without it the test fails saying so.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// The extra group (name, gid), when asked for.
    pub group: Option<(String, u32)>,
}

/// Run `f` until it succeeds: useradd, groupadd and userdel refuse while another process
/// (another test) holds /etc/passwd's lock.
fn retry_passwd(what: &str, mut f: impl FnMut() -> std::process::Output) {
    let mut last = String::new();
    for _ in 0..50 {
        let out = f();
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("cannot {what} (these tests run as root and need useradd/groupadd): {last}");
}

fn id_of(flag: &str, name: &str) -> u32 {
    let out = Command::new("id").arg(flag).arg(name).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("`id {flag} {name}`: {e}"))
}

impl TestUser {
    /// `PROGRAM`, run as this user (`setpriv`, no supplementary groups); add its
    /// arguments to the command.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .arg(program);
        cmd
    }

    /// A new user named `PREFIX-<unique>`, with a group of its own when `with_group`; or
    /// `None`, said on stderr, where one cannot be made: that needs root on Linux
    /// (useradd, setpriv). On Linux as root (as CI runs) it is always made, so no test is
    /// skipped there.
    pub fn create_or_skip(prefix: &str, with_group: bool) -> Option<TestUser> {
        // SAFETY: geteuid has no preconditions.
        if cfg!(target_os = "linux") && unsafe { libc::geteuid() } == 0 {
            return Some(TestUser::create(prefix, with_group));
        }
        eprintln!(
            "skipped: this test makes another Unix user, which needs root on Linux (useradd, setpriv)"
        );
        None
    }

    /// A new user named `PREFIX-<unique>`, with a group of its own when `with_group`.
    pub fn create(prefix: &str, with_group: bool) -> TestUser {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("{prefix}-{:x}{:x}", std::process::id(), nanos % 0xfffff);
        retry_passwd(&format!("create the test user {name}"), || {
            Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(&name)
                .output()
                .unwrap_or_else(|e| panic!("cannot run useradd to create a test user: {e}"))
        });
        let group = with_group.then(|| {
            let g = format!("{name}g");
            retry_passwd(&format!("create the test group {g}"), || {
                Command::new("groupadd")
                    .args(["--system"])
                    .arg(&g)
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run groupadd: {e}"))
            });
            let gid = std::fs::read_to_string("/etc/group")
                .unwrap()
                .lines()
                .find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f[0] == g).then(|| f[2].parse::<u32>().unwrap())
                })
                .expect("the new group is in /etc/group");
            (g, gid)
        });
        let user = TestUser {
            uid: id_of("-u", &name),
            gid: id_of("-g", &name),
            name,
            group,
        };
        assert_ne!(user.uid, 0, "the test user must not be root");
        user
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let name = self.name.clone();
        let gone = |o: std::process::Output| o.status.success();
        for _ in 0..50 {
            if Command::new("userdel").arg(&name).output().is_ok_and(gone) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if let Some((g, _)) = &self.group {
            for _ in 0..50 {
                if Command::new("groupdel").arg(g).output().is_ok_and(gone) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Does some process hold a flock on `path` (a file or directory) right now? Tried with a
/// non-blocking exclusive lock, let go at once when it was free. The unlock is explicit:
/// a child another test thread is forking may share the descriptor until it execs, and
/// would keep a lock that is only dropped. A missing path is free.
pub fn flocked(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    // SAFETY: a valid descriptor; flock has no other preconditions.
    unsafe {
        if libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 {
            libc::flock(f.as_raw_fd(), libc::LOCK_UN);
            false
        } else {
            true
        }
    }
}

/// The schema of the lock directory `dir` on PostgreSQL ([`pg_url_for`]).
pub fn pg_schema(dir: &Path) -> String {
    let url = pg_url_for(dir).expect("on PostgreSQL");
    url.rsplit("schema=").next().unwrap().to_string()
}

/// Run SQL in the schema of `dir` with `psql`; its unaligned, tuples-only output.
pub fn psql(dir: &Path, sql: &str) -> String {
    let base = std::env::var("TASKLOCK_TEST_PG_URL").expect("TASKLOCK_TEST_PG_URL");
    let out = Command::new("psql")
        .arg(&base)
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!("SET search_path TO {}; {sql}", pg_schema(dir)))
        .stdin(Stdio::null())
        .output()
        .expect("run psql (the PostgreSQL client)");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A SQL string literal.
pub fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// What the store keeps of an agent (`Agent`) or a key's checkout (`Record`), as JSON:
/// for tests that fake what another host or boot wrote. Simple names only (the file
/// store's file name is the id).
#[derive(Clone, Copy)]
pub enum Stored<'a> {
    Agent(&'a str),
    Record(&'a str),
}

impl Stored<'_> {
    fn file(&self, dir: &Path) -> PathBuf {
        match self {
            Stored::Agent(id) => dir.join("agents").join(tasklock::key::encode(id)),
            Stored::Record(key) => dir.join("keys").join(tasklock::key::encode(key)),
        }
    }
    fn row(&self) -> (&'static str, &'static str, String) {
        match self {
            Stored::Agent(id) => ("agents", "id", sql_text(id)),
            Stored::Record(key) => ("records", "key", sql_text(key)),
        }
    }

    /// Is it there? (Not yet, while the schema that will hold it is still being made.)
    pub fn exists(&self, dir: &Path) -> bool {
        if on_postgres() {
            let (table, col, id) = self.row();
            let schema = pg_schema(dir);
            let made = psql(
                dir,
                &format!("SELECT to_regclass('{schema}.{table}') IS NOT NULL"),
            );
            return made.trim() == "t"
                && psql(
                    dir,
                    &format!("SELECT count(*) FROM {table} WHERE {col} = {id}"),
                )
                .trim()
                    == "1";
        }
        self.file(dir).exists()
    }

    /// What is stored, as the text the store keeps.
    pub fn raw(&self, dir: &Path) -> String {
        if on_postgres() {
            let (table, col, id) = self.row();
            return psql(
                dir,
                &format!("SELECT data::text FROM {table} WHERE {col} = {id}"),
            );
        }
        std::fs::read_to_string(self.file(dir)).unwrap()
    }

    /// What is stored, as JSON.
    pub fn read(&self, dir: &Path) -> Value {
        serde_json::from_str(self.raw(dir).trim()).expect("stored JSON")
    }

    /// Change it in place.
    pub fn edit(&self, dir: &Path, f: impl FnOnce(&mut Value)) {
        if on_postgres() {
            let (table, col, id) = self.row();
            let text = psql(
                dir,
                &format!("SELECT data::text FROM {table} WHERE {col} = {id}"),
            );
            let mut v: Value = serde_json::from_str(text.trim()).expect("stored JSON");
            f(&mut v);
            let json = sql_text(&serde_json::to_string(&v).unwrap());
            psql(
                dir,
                &format!("UPDATE {table} SET data = {json}::jsonb WHERE {col} = {id}"),
            );
            return;
        }
        let path = self.file(dir);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

/// Is a transaction scope of `dir`'s store held right now (by any process on the file
/// store; on PostgreSQL, by the tasklock process `pid`, whose connection is named after
/// it)? For tests that stop a process and must not stop it inside the scope.
pub fn scope_held(dir: &Path, pid: u32) -> bool {
    if on_postgres() {
        let state = psql(
            dir,
            &format!(
                "SELECT coalesce(string_agg(state, ','), '') FROM pg_stat_activity WHERE application_name = 'tasklock/{pid}'"
            ),
        );
        return state
            .trim()
            .split(',')
            .any(|s| s != "idle" && !s.is_empty());
    }
    flocked(&dir.join(".guard")) || flocked(dir)
}

/// A stand-in for an agent's long-lived process (`sleep 600`), to register with
/// `heartbeat --pid`; killed (and reaped, so its pid is gone, not a zombie) on drop.
pub struct AgentProcess(std::process::Child);

impl AgentProcess {
    pub fn start() -> AgentProcess {
        AgentProcess(Command::new("sleep").arg("600").spawn().unwrap())
    }
    pub fn pid(&self) -> String {
        self.0.id().to_string()
    }
    /// Kill it now (`kill -9`), reaped.
    pub fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait for every named child to exit successfully (failing the test with its stderr if
/// one does not), within `limit` in all.
pub fn wait_all_ok(children: Vec<(String, std::process::Child)>, limit: std::time::Duration) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    for (name, mut c) in children {
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = c.stderr.take() {
                    e.read_to_string(&mut err).unwrap();
                }
                assert!(st.success(), "{name} failed: {err}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} still running after {limit:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// A log of `enter NANOS WHO` / `leave NANOS WHO` lines written by commands run under a
/// lock, in time order (a leave before an enter at the same instant: it came first).
pub fn inside_log(path: &Path) -> Vec<(u128, bool, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut events: Vec<(u128, bool, String)> = text
        .lines()
        .map(|l| {
            let mut w = l.split(' ');
            let enter = w.next().unwrap() == "enter";
            let t = w.next().unwrap().parse().unwrap();
            (t, enter, w.next().unwrap().to_string())
        })
        .collect();
    events.sort_by_key(|(t, enter, _)| (*t, *enter));
    events
}

/// Every file under `dir` with its contents.
pub fn files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// Everything the store keeps: on the file store every file under the lock directory
/// with its contents; on PostgreSQL every table of its schema (a digest of its rows in
/// order) and the token sequence.
pub fn stored(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    if !on_postgres() {
        return files(dir);
    }
    let tables = psql(
        dir,
        "SELECT table_name || ' ' || md5(query_to_xml(format('SELECT * FROM %I.%I t ORDER BY t::text', \
         table_schema, table_name), true, false, '')::text) FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1; SELECT last_value FROM pg_sequences \
         WHERE schemaname = current_schema() AND sequencename = 'tokens'",
    );
    if tables.trim().is_empty() {
        // No schema yet: nothing stored.
        return std::collections::BTreeMap::new();
    }
    std::collections::BTreeMap::from([(PathBuf::from("schema"), tables.into_bytes())])
}

/// Write, in the lock directory `dir`, a backlog in the layout before `backlog/index/` (a
/// file a key in `members/`, a file a pending place in `pending/`, claims in the members
/// and counted in `state.json`): `keys` from place 0 on, `claimed` (key, agent) among
/// them, `returned` given back.
pub fn old_backlog_layout(dir: &Path, keys: &[&str], claimed: &[(&str, &str)], returned: &[&str]) {
    let b = dir.join("backlog");
    for sub in ["members", "pending", "returned", "claimers"] {
        std::fs::create_dir_all(b.join(sub)).unwrap();
    }
    let (mut ready, mut holders) = (0, serde_json::Map::new());
    for (seq, k) in keys.iter().enumerate() {
        let mut m = serde_json::json!({"key": k, "seq": seq});
        if let Some((_, agent)) = claimed.iter().find(|(c, _)| c == k) {
            m["claimed"] = serde_json::json!({"agent": agent, "recheck": "2026-01-01T01:00:00Z"});
            let n = holders.get(*agent).and_then(Value::as_u64).unwrap_or(0);
            holders.insert(agent.to_string(), (n + 1).into());
        } else {
            let dir = if returned.contains(k) {
                "returned"
            } else {
                "pending"
            };
            std::fs::write(b.join(dir).join(seq.to_string()), k).unwrap();
            ready += 1;
        }
        std::fs::write(b.join("members").join(k), m.to_string()).unwrap();
    }
    let state = serde_json::json!({"head": 0, "tail": keys.len(), "ready": ready,
        "claimed": claimed.len(), "recheck": "2026-01-01T01:00:00Z", "holders": holders});
    std::fs::write(b.join("state.json"), state.to_string()).unwrap();
}

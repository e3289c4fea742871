//! Real attacking processes against the lock directory: directories swapped for
//! symlinks, `.guard` deleted, FIFOs and sockets planted, records another user cannot
//! read. Whatever happens under `.locks`, tasklock never writes outside it, never hands
//! a token out twice and never hangs.

#[macro_use]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

fn cmd(e: &Env, agent: &str, args: &[&str]) -> Command {
    let mut c = base_cmd(&e.now);
    c.arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", agent])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Every file (relative path → content) under `dir`, recursively.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let p = entry.path();
            let t = entry.file_type().unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if t.is_dir() {
                out.insert(rel.join(""), b"<dir>".to_vec());
                stack.push(p);
            } else if t.is_symlink() {
                out.insert(rel, b"<symlink>".to_vec());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Run `c`, killing it if it has not ended within `limit`; returns (exit code, stderr)
/// or panics naming what hung.
fn run_bounded(mut c: Command, limit: Duration, what: &str) -> (i32, String, String) {
    let mut child = c.spawn().unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let code = status
                .code()
                .unwrap_or_else(|| panic!("{what}: killed by a signal"));
            return (
                code,
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

const SUBDIRS: [&str; 8] = [
    "tmp", "keys", "agents", "notes", "queues", "inbox", "ended", "watchers",
];

#[test]
fn directories_swapped_for_symlinks_never_let_a_write_or_delete_leave_the_lock_directory() {
    let e = Env::new();
    let agents = ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"];
    // Every subdirectory exists (so the swapper has something to swap).
    for a in agents {
        e.ok(a, &["checkout", &format!("warm-{a}")]);
        e.ok(a, &["heartbeat"]);
        e.ok(a, &["note", &format!("warm-{a}"), "started"]);
        e.ok(a, &["release", &format!("warm-{a}")]);
    }
    e.ok("a1", &["checkout", "shared"]);
    assert_eq!(
        e.run(Some("a2"), &["checkout", "shared", "--queue"]).code,
        2
    );
    e.ok("a1", &["release", "shared"]);
    e.ok("a2", &["checkout", "shared"]);
    e.ok("a2", &["release", "shared"]);
    std::fs::create_dir_all(e.dir().join("watchers")).unwrap();
    std::fs::create_dir_all(e.dir().join("inbox")).unwrap();

    // The victim: files named like everything tasklock writes, and more.
    let victim = e.tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let mut names: Vec<String> = vec!["precious.txt".into(), "counter".into()];
    for i in 0..128 {
        names.push(format!("k{i}"));
        names.push(format!("k{i}.jsonl"));
        names.push(format!("k{i}.json"));
    }
    for a in agents {
        names.push(a.into());
        names.push(format!("warm-{a}.jsonl"));
    }
    for pid in 0..2000 {
        names.push(format!("{pid}.tmp"));
    }
    for n in &names {
        std::fs::write(victim.join(n), format!("canary {n}")).unwrap();
    }
    std::fs::create_dir(victim.join("read")).unwrap();
    std::fs::write(victim.join("read").join("inner"), "canary inner").unwrap();
    let before = tree(&victim);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, dir, victim) = (stop.clone(), swaps.clone(), e.dir(), victim.clone());
        let stash = e.tmp.path().join("stash");
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // Swap one subdirectory (also one inbox/<agent> directory) for a
                // symlink to the victim, leave it a moment, then put it back.
                let mut candidates: Vec<PathBuf> = SUBDIRS.iter().map(|s| dir.join(s)).collect();
                if let Ok(rd) = std::fs::read_dir(dir.join("inbox")) {
                    candidates.extend(rd.flatten().map(|e| e.path()));
                }
                let real = &candidates[i % candidates.len()];
                i += 1;
                if std::fs::rename(real, &stash).is_err() {
                    continue;
                }
                if std::os::unix::fs::symlink(&victim, real).is_ok() {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_micros(300 + (i as u64 % 7) * 200));
                let _ = std::fs::remove_file(real);
                if std::fs::rename(&stash, real).is_err() {
                    // tasklock made a fresh one meanwhile: keep that, drop ours.
                    let _ = std::fs::remove_dir_all(&stash);
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(8);
    let ops = Arc::new(AtomicUsize::new(0));
    let oks = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(n, agent)| {
            let (ops, oks) = (ops.clone(), oks.clone());
            let e_dir = e.dir();
            let now = e.now.clone();
            let agent = agent.to_string();
            std::thread::spawn(move || {
                let mut codes: HashMap<i32, usize> = HashMap::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let key = format!("k{}", (n * 16) + (i % 16));
                    let args: Vec<String> = match i % 6 {
                        0 => vec!["checkout".into(), key.clone()],
                        1 => vec!["renew".into(), key.clone()],
                        2 => vec!["heartbeat".into()],
                        3 => vec!["note".into(), key.clone(), "progress".into()],
                        4 => vec![
                            "release".into(),
                            key.clone(),
                            "--note".into(),
                            "done".into(),
                        ],
                        _ => vec!["checkout".into(), "shared".into(), "--queue".into()],
                    };
                    let mut c = base_cmd(&now);
                    c.arg("--dir")
                        .arg(&e_dir)
                        .args(&args)
                        .args(["--agent", &agent])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    let status = c.status().unwrap();
                    let code = status
                        .code()
                        .unwrap_or_else(|| panic!("{args:?} was killed by a signal"));
                    *codes.entry(code).or_default() += 1;
                    ops.fetch_add(1, Ordering::Relaxed);
                    if code == 0 {
                        oks.fetch_add(1, Ordering::Relaxed);
                    }
                    if i % 6 == 5 {
                        // Leave the queue / release the shared key again.
                        let mut c = base_cmd(&now);
                        c.arg("--dir")
                            .arg(&e_dir)
                            .args(["release", "shared", "--agent", &agent])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null());
                        let _ = c.status().unwrap();
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
                codes
            })
        })
        .collect();
    let mut codes: HashMap<i32, usize> = HashMap::new();
    for w in workers {
        for (c, n) in w.join().unwrap() {
            *codes.entry(c).or_default() += n;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    let ops = ops.load(Ordering::Relaxed);
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!(
        "attack: {ops} operations ({} exit 0), {swaps} directory swaps, exit codes {codes:?}",
        oks.load(Ordering::Relaxed)
    );
    assert!(ops >= 300, "too few operations to mean anything: {ops}");
    assert!(swaps >= 200, "too few swaps to mean anything: {swaps}");
    assert!(oks.load(Ordering::Relaxed) > 0, "nothing ever succeeded");
    for code in codes.keys() {
        assert!(
            [0, 1, 2, 3, 4].contains(code),
            "unexpected exit code {code}: {codes:?}"
        );
    }
    let after = tree(&victim);
    let missing: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
    let added: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k).is_some_and(|a| a != *v))
        .map(|(k, _)| k)
        .collect();
    assert!(missing.is_empty(), "canaries deleted: {missing:?}");
    assert!(added.is_empty(), "files created outside .locks: {added:?}");
    assert!(changed.is_empty(), "canaries changed: {changed:?}");

    // With the directories back, the store works normally.
    e.ok("a1", &["checkout", "after-attack"]);
    e.ok("a1", &["release", "after-attack"]);
}

#[test]
fn deleting_the_guard_in_a_loop_never_gives_two_holders_or_one_token_twice() {
    let e = Env::new();
    e.ok("warm", &["checkout", "warm"]);
    let stop = Arc::new(AtomicBool::new(false));
    let deletions = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (stop, deletions) = (stop.clone(), deletions.clone());
        let guard = e.dir().join(".guard");
        let counter = e.dir().join("counter");
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if std::fs::remove_file(&guard).is_ok() {
                    deletions.fetch_add(1, Ordering::Relaxed);
                }
                // Now and then the second copy of the counter goes too.
                i += 1;
                if i.is_multiple_of(50) {
                    let _ = std::fs::remove_file(&counter);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    guard_race(&e, 40, || {
        stop.store(true, Ordering::Relaxed);
        attacker.join().unwrap();
        deletions.load(Ordering::Relaxed)
    });
}

/// The attacker of the test below, run as the unprivileged user: deletes `.guard` (and
/// now and then `counter`) until SIGTERM (or SECONDS seconds) and prints how often it
/// deleted `.guard`.
const UNPRIVILEGED_GUARD_DELETER: &str = r#"
import os, signal, sys, time
locks, seconds = sys.argv[1], float(sys.argv[2])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
end = time.time() + seconds
deleted = 0
i = 0
while time.time() < end and not stop:
    try:
        os.unlink(os.path.join(locks, ".guard"))
        deleted += 1
    except OSError:
        pass
    i += 1
    if i % 50 == 0:
        try:
            os.unlink(os.path.join(locks, "counter"))
        except OSError:
            pass
    time.sleep(0.0002)
print(deleted)
"#;

#[test]
fn an_unprivileged_user_deleting_the_guard_never_gives_two_holders_or_one_token_twice() {
    // As reported: another user who may write in the lock directory (0777 here) deletes
    // `.guard` while root's commands race for keys.
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs as root (as CI does): it needs a second, unprivileged user"
    );
    let e = Env::new();
    e.ok("warm", &["checkout", "warm"]);
    use std::os::unix::fs::PermissionsExt;
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(e.tmp.path(), 0o755).unwrap();
    open(&e.dir(), 0o777).unwrap();
    let Some(user) = TestUser::create_or_skip("tl-g", false) else {
        return;
    };
    let attacker = user
        .command("/usr/bin/python3")
        .args(["-c", UNPRIVILEGED_GUARD_DELETER])
        .arg(e.dir())
        .arg("600")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv and /usr/bin/python3 run the attacker as the test user");
    let pid = attacker.id();
    guard_race(&e, 24, move || {
        // SAFETY: kill has no memory-safety preconditions. The attacker stops at SIGTERM
        // and prints its count.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let out = attacker.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().parse().unwrap_or_else(|_| {
            panic!(
                "the attacker printed no count: {text:?} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    });
    drop(user);
}

/// `rounds` rounds of 8 processes racing to check out a fresh key while an attacker
/// deletes `.guard`; `stop` stops the attacker and says how often it deleted it. Every
/// key has one winner and every acquire token is unique.
fn guard_race(e: &Env, rounds: usize, stop: impl FnOnce() -> usize) {
    let contenders = 8;
    let mut winners_per_key: HashMap<String, usize> = HashMap::new();
    let started = Instant::now();
    for round in 0..rounds {
        let key = format!("fresh-{round}");
        let children: Vec<_> = (0..contenders)
            .map(|c| {
                cmd(e, &format!("agent-{c}"), &["checkout", &key, "--json"])
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let code = out.status.code().expect("exited");
            assert!(
                code == 0 || code == 2 || code == 1,
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if code == 0 {
                *winners_per_key.entry(key.clone()).or_default() += 1;
            }
        }
        // Also a key taken over and over: renews and releases take tokens' places.
        let a = format!("agent-{}", round % contenders);
        let _ = e.run(Some(&a), &["checkout", "churn"]);
        let _ = e.run(Some(&a), &["release", "churn"]);
    }
    let deletions = stop();
    eprintln!(
        "guard attack: {rounds} rounds x {contenders} contenders in {:?}, .guard deleted {deletions} times",
        started.elapsed()
    );
    assert!(deletions >= 100, "the attacker barely ran: {deletions}");
    for (k, n) in &winners_per_key {
        assert_eq!(*n, 1, "{k} was granted {n} times at once");
    }
    assert!(winners_per_key.len() >= rounds / 2, "{winners_per_key:?}");
    let mut seen = HashSet::new();
    let mut acquires = 0;
    for ev in audit(&e.dir()) {
        if ev["event"] == "acquire" {
            acquires += 1;
            let t = ev["token"].as_u64().expect("acquire has a token");
            assert!(seen.insert(t), "token {t} handed out twice: {ev}");
        }
    }
    assert!(acquires > rounds, "{acquires}");
    // Every record on disk agrees with the audit log: one holder per key.
    for (k, _) in winners_per_key {
        let r = e.run(Some("observer"), &["status", &k, "--json"]);
        assert_eq!(r.json()["outcome"], "held", "{}", r.text());
    }
}

#[test]
fn a_lost_counter_never_restarts_below_a_token_handed_out() {
    let e = Env::new();
    for i in 0..5 {
        e.ok("a", &["checkout", &format!("k{i}")]);
    }
    e.ok("a", &["release", "k0", "k1", "k2", "k3", "k4"]);
    // Both copies of the counter gone and no record left: the ended checkouts and the
    // audit log still know token 5 was handed out.
    std::fs::remove_file(e.dir().join(".guard")).unwrap();
    std::fs::remove_file(e.dir().join("counter")).unwrap();
    let r = e.ok("b", &["checkout", "next", "--json"]);
    assert_eq!(r.json()["checkout"]["token"], 6, "{}", r.text());
    // One copy damaged: the other one wins.
    std::fs::write(e.dir().join(".guard"), "garbage").unwrap();
    let r = e.ok("b", &["checkout", "next2", "--json"]);
    assert_eq!(r.json()["checkout"]["token"], 7, "{}", r.text());
    std::fs::write(e.dir().join("counter"), "3\n").unwrap();
    let r = e.ok("b", &["checkout", "next3", "--json"]);
    assert_eq!(
        r.json()["checkout"]["token"],
        8,
        "a lower copy never wins: {}",
        r.text()
    );
}

#[test]
fn a_counter_at_its_largest_value_fails_instead_of_wrapping() {
    let e = Env::new();
    e.ok("a", &["checkout", "k0"]);
    let max = format!("{:020}\n", u64::MAX);
    std::fs::write(e.dir().join(".guard"), &max).unwrap();
    std::fs::write(e.dir().join("counter"), &max).unwrap();
    let r = e.run(Some("a"), &["checkout", "k1"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(r.stderr.contains("largest value"), "{}", r.stderr);
    assert!(!record_path(&e.dir(), "k1").exists());
    // Nothing else is broken: releasing still works.
    e.ok("a", &["release", "k0"]);
}

#[test]
fn planted_fifos_never_hang_a_command() {
    let limit = Duration::from_secs(10);
    // The audit log: the release stands (its record is gone) and says what it could not
    // write, naming the file; `audit` itself fails naming it.
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    std::fs::remove_file(e.dir().join("audit.jsonl")).unwrap();
    mkfifo(&e.dir().join("audit.jsonl"));
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["release", "k"]), limit, "release");
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning"), "{stderr}");
    assert!(stderr.contains("audit.jsonl"), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(!record_path(&e.dir(), "k").exists(), "the release stands");
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["audit"]), limit, "audit");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("audit.jsonl"), "{stderr}");
    let (code, _, _) = run_bounded(cmd(&e, "a", &["list"]), limit, "list");
    assert_eq!(code, 0);

    // Notes, queue, inbox, agent and ended files: never read as records or blocked on.
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    assert_eq!(e.run(Some("b"), &["checkout", "k", "--queue"]).code, 2);
    for (dir, name) in [
        ("notes", "k.jsonl"),
        ("queues", "other.json"),
        ("ended", "k.json"),
        ("agents", "c"),
    ] {
        std::fs::create_dir_all(e.dir().join(dir)).unwrap();
        let p = e.dir().join(dir).join(name);
        let _ = std::fs::remove_file(&p);
        mkfifo(&p);
    }
    let inbox = std::fs::read_dir(e.dir().join("inbox"))
        .map(|rd| rd.flatten().map(|d| d.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    let inbox_b = e.dir().join("inbox").join("b");
    std::fs::create_dir_all(&inbox_b).unwrap();
    mkfifo(&inbox_b.join("planted.json"));
    for args in [
        &["status", "k"][..],
        &["why", "k"],
        &["list"],
        &["agents"],
        &["inbox"],
        &["heartbeat"],
        &["checkout", "other", "--queue"],
        &["renew", "k"],
    ] {
        let who = if args[0] == "inbox" { "b" } else { "a" };
        let (code, _, stderr) = run_bounded(cmd(&e, who, args), limit, &format!("{args:?}"));
        assert!(code == 0 || code == 2, "{args:?}: {stderr}");
    }
    // Appending a note to a FIFO: an error naming it, exit 1 (a note is never dropped).
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["note", "k", "hi"]), limit, "note");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("k.jsonl"), "{stderr}");
    // The release goes through, handing the key to the queue.
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["release", "k"]), limit, "release");
    assert_eq!(code, 0, "{stderr} {inbox:?}");
}

#[test]
fn a_socket_planted_in_keys_is_a_damaged_row_not_a_failure() {
    let e = Env::new();
    e.ok("a", &["checkout", "k1"]);
    let _listener = std::os::unix::net::UnixListener::bind(record_path(&e.dir(), "sock")).unwrap();
    let r = e.run(Some("a"), &["list", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stdout.contains("sock"), "{}", r.stdout);
    assert!(r.stdout.contains("not a regular file"), "{}", r.stdout);
    for args in [
        &["heartbeat"][..],
        &["agents"],
        &["renew", "--all"],
        &["release", "--all"],
        &["checkout", "--any", "k2", "k3"],
    ] {
        let r = e.run(Some("a"), args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.text());
    }
    let r = e.run(Some("a"), &["status", "sock", "--json"]);
    assert_eq!(r.code, 1, "{}", r.text());
}

#[test]
fn a_record_another_user_cannot_read_does_not_fail_commands_for_everyone() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc_geteuid() },
        0,
        "this test creates a user and must run as root (CI does)"
    );
    let Some(user) = TestUser::create_or_skip("tl-a", false) else {
        return;
    };
    let uid = user.uid;
    let e = Env::new();
    e.ok("root-agent", &["checkout", "warm"]);
    // A shared lock directory everyone may write to.
    let status = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(e.dir())
        .status()
        .unwrap();
    assert!(status.success());
    // The parent too, so the user can reach it.
    let status = Command::new("chmod")
        .arg("a+rx")
        .arg(e.tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    // Root's record, written with umask 077.
    e.ok("root-agent", &["checkout", "secret"]);
    let secret = record_path(&e.dir(), "secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    let as_user = |args: &[&str]| -> Run {
        let mut c = user.command(env!("CARGO_BIN_EXE_tasklock"));
        c.env("TASKLOCK_NOW", &e.now)
            .env_remove("TASKLOCK_AGENT")
            .env_remove("TASKLOCK_DIR")
            .env_remove("CLAUDE_CODE_SESSION_ID")
            .env_remove("CODEX_THREAD_ID")
            .arg("--dir")
            .arg(e.dir())
            .args(args)
            .args(["--agent", "user-agent"])
            .stdin(Stdio::null());
        exec(c)
    };
    // The user really cannot read it.
    let r = as_user(&["status", "secret"]);
    assert_eq!(r.code, 1, "{}", r.text());
    let r = as_user(&["list", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.stdout.contains("secret"), "{}", r.stdout);
    assert!(r.stdout.contains("cannot be opened"), "{}", r.stdout);
    for args in [
        &["checkout", "mine"][..],
        &["heartbeat"],
        &["agents"],
        &["renew", "--all"],
        &["release", "--all"],
        &["checkout", "--any", "t1", "t2"],
    ] {
        let r = as_user(args);
        assert_eq!(r.code, 0, "{args:?} as uid {uid}: {}", r.text());
    }
    // Root's record is untouched.
    let r = e.run(Some("root-agent"), &["status", "secret", "--json"]);
    assert_eq!(r.json()["outcome"], "held", "{}", r.text());
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// The swapper of the test below, run as the unprivileged user: swaps each subdirectory
/// of the lock directory for a symlink to the victim and back, for SECONDS seconds, and
/// prints how many swaps it made.
const UNPRIVILEGED_SWAPPER: &str = r#"
import os, sys, time
locks, victim, seconds, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
end = time.time() + seconds
swaps = 0
n = 0
while time.time() < end:
    for name in names:
        real = os.path.join(locks, name)
        stash = os.path.join(locks, ".stash-%d" % n)
        n += 1
        try:
            os.rename(real, stash)
        except OSError:
            continue
        try:
            os.symlink(victim, real)
            swaps += 1
        except OSError:
            pass
        time.sleep(0.0001 * (n % 3))
        try:
            os.unlink(real)
        except OSError:
            pass
        try:
            os.rename(stash, real)
        except OSError:
            pass  # tasklock made a fresh one meanwhile: keep that, leave ours aside
print(swaps)
"#;

#[test]
fn an_unprivileged_user_swapping_directories_never_makes_roots_commands_write_outside() {
    // The reported attack as it happens: another user who may write in the lock
    // directory (here it is 0777) swaps its subdirectories for links to a directory only
    // root may change, while root's commands run. Against the store before it worked
    // through directory descriptors, this swapper made root's commands delete 125 of
    // 128 canary files in 6 s.
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs as root (as CI does): it needs a second, unprivileged user"
    );
    let e = Env::new();
    for a in ["r1", "r2"] {
        e.ok(a, &["checkout", &format!("warm-{a}")]);
        e.ok(a, &["note", &format!("warm-{a}"), "warm"]);
        e.ok(a, &["release", &format!("warm-{a}")]);
    }
    std::fs::create_dir_all(e.dir().join("watchers")).unwrap();
    let victim = e.tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    for i in 0..64 {
        for n in [format!("k{i}"), format!("k{i}.jsonl"), format!("{i}.tmp")] {
            std::fs::write(victim.join(&n), format!("canary {n}")).unwrap();
        }
    }
    let before = tree(&victim);
    use std::os::unix::fs::PermissionsExt;
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(e.tmp.path(), 0o755).unwrap();
    open(&victim, 0o755).unwrap();
    open(&e.dir(), 0o777).unwrap();

    let Some(user) = TestUser::create_or_skip("tl-x", false) else {
        return;
    };
    let seconds = 6;
    let swapper = user
        .command("/usr/bin/python3")
        .args(["-c", UNPRIVILEGED_SWAPPER])
        .arg(e.dir())
        .arg(&victim)
        .arg(seconds.to_string())
        // tmp/ and keys/ twice as often: the commands sweep and replace files there.
        .args(["tmp", "keys"])
        .args(SUBDIRS)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv and /usr/bin/python3 run the swapper as the test user");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let workers: Vec<_> = ["r1", "r2", "r3"]
        .iter()
        .enumerate()
        .map(|(n, agent)| {
            let (e_dir, now, agent) = (e.dir(), e.now.clone(), agent.to_string());
            std::thread::spawn(move || {
                let mut ops = 0usize;
                let mut i = 0;
                while Instant::now() < deadline {
                    let key = format!("k{}", n * 8 + i % 8);
                    let args: Vec<&str> = match i % 5 {
                        0 => vec!["checkout", &key],
                        1 => vec!["note", &key, "progress"],
                        2 => vec!["heartbeat"],
                        3 => vec!["renew", &key],
                        _ => vec!["release", &key, "--note", "done"],
                    };
                    let status = base_cmd(&now)
                        .arg("--dir")
                        .arg(&e_dir)
                        .args(&args)
                        .args(["--agent", &agent])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .unwrap();
                    let code = status
                        .code()
                        .unwrap_or_else(|| panic!("{args:?} was killed by a signal"));
                    assert!([0, 1, 2, 3].contains(&code), "{args:?}: exit {code}");
                    ops += 1;
                    i += 1;
                }
                ops
            })
        })
        .collect();
    let ops: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let out = swapper.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the swapper failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let swaps: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the swapper prints its count");
    eprintln!(
        "unprivileged attack: {ops} commands by root, {swaps} directory swaps by uid {}",
        user.uid
    );
    assert!(swaps >= 100, "too few swaps to mean anything: {swaps}");
    assert!(ops >= 100, "too few commands to mean anything: {ops}");
    assert_eq!(
        tree(&victim),
        before,
        "root's commands changed the directory the other user pointed them to"
    );
}

#[test]
fn fifos_planted_by_an_unprivileged_user_never_hang_roots_commands() {
    // As reported: another user who may write in the lock directory (0777 here) replaces
    // audit.jsonl and config.yaml with FIFOs; root's commands must not block on them.
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs as root (as CI does): it needs a second, unprivileged user"
    );
    let limit = Duration::from_secs(10);
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    use std::os::unix::fs::PermissionsExt;
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(e.tmp.path(), 0o755).unwrap();
    open(&e.dir(), 0o777).unwrap();
    let Some(user) = TestUser::create_or_skip("tl-f", false) else {
        return;
    };
    let plant = user
        .command("/usr/bin/python3")
        .args([
            "-c",
            "import os, sys\nfor n in ('audit.jsonl', 'config.yaml'):\n    p = os.path.join(sys.argv[1], n)\n    if os.path.lexists(p): os.unlink(p)\n    os.mkfifo(p)",
        ])
        .arg(e.dir())
        .output()
        .unwrap();
    assert!(
        plant.status.success(),
        "the test user could not plant the FIFOs: {}",
        String::from_utf8_lossy(&plant.stderr)
    );
    let meta = std::fs::symlink_metadata(e.dir().join("audit.jsonl")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        user.uid,
        "planted by the other user"
    );

    // Each returns promptly, never a hang: the release stands and says what it could not
    // write; a checkout, which needs the settings, refuses naming config.yaml; `audit`
    // refuses naming its file.
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["release", "k"]), limit, "release");
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("audit.jsonl"), "{stderr}");
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["checkout", "k2"]), limit, "checkout");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("config.yaml"), "{stderr}");
    let (code, _, stderr) = run_bounded(cmd(&e, "a", &["audit"]), limit, "audit");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("audit.jsonl"), "{stderr}");
    let (code, _, _) = run_bounded(cmd(&e, "a", &["list"]), limit, "list");
    assert!(code == 0 || code == 1, "list: {code}");
    assert!(!record_path(&e.dir(), "k").exists(), "the release stands");
}

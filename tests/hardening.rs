//! A lock directory no one can turn against its users: keys that look alike are one key
//! or refused, a clock far behind never moves a lease backwards, a hostile or broken
//! `config.yaml` fails fast and quietly, a side effect that fails after a change was
//! made is a warning (never exit 1 with the change kept), and a watcher whose process
//! was superseded follows the agent's new process instead of ending the agent.

#[macro_use]
mod common;
use common::*;

#[test]
fn nfd_and_nfc_spellings_are_one_key() {
    let e = Env::new();
    let nfd = "cafe\u{301}";
    let nfc = "caf\u{e9}";
    let r = e.ok("a", &["checkout", nfd, "--json"]);
    assert_eq!(r.json()["checkout"]["key"], nfc, "stored in NFC");
    let s = e.ok("b", &["status", nfc, "--json"]);
    assert_eq!(s.json()["outcome"], "held");
    assert_eq!(s.json()["checkout"]["agent"]["id"], "a");
    // Another agent's checkout under the other spelling is a conflict, not a second lock.
    let c = e.run(Some("b"), &["checkout", nfc, "--json"]);
    assert_eq!(c.code, 2, "{}", c.text());
    e.ok("a", &["release", nfc]);
    let files: Vec<_> = std::fs::read_dir(e.dir().join("keys")).unwrap().collect();
    assert!(files.is_empty(), "one file for both spellings, now gone");
}

#[test]
fn bidi_and_zero_width_characters_in_keys_are_usage_errors() {
    let e = Env::new();
    for key in [
        "task\u{202E}1",
        "task\u{200B}1",
        "\u{FEFF}task",
        "task\u{2066}1",
    ] {
        let r = e.run(Some("a"), &["checkout", key, "--json"]);
        assert_eq!(r.code, 64, "{key:?}: {}", r.text());
        let j = r.json();
        assert_eq!(j["error"]["kind"], "usage");
        assert!(
            j["error"]["message"].as_str().unwrap().contains("U+"),
            "{}",
            r.stdout
        );
    }
    let r = e.run(Some("a"), &["status", "task\u{202E}1"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(
        !e.dir().join("keys").exists()
            || std::fs::read_dir(e.dir().join("keys"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_renew_with_the_clock_far_behind_never_moves_the_lease_backwards() {
    let mut e = Env::new();
    e.at(T1H);
    let r = e.ok("a", &["checkout", "task-1", "--json"]);
    let acquired = r.json()["checkout"]["acquired_at"].clone();
    let expires = r.json()["checkout"]["expires_at"].clone();
    assert_eq!(expires, "2026-01-01T01:30:00Z");
    // The clock jumps a day back.
    e.at("2025-12-31T01:00:00Z");
    let r = e.ok("a", &["renew", "task-1", "--json"]);
    let c = &r.json()["results"][0]["checkout"];
    assert_eq!(
        c["expires_at"], expires,
        "a plain renew never shortens: {}",
        r.stdout
    );
    let r = e.ok("a", &["renew", "task-1", "--timeout", "5m", "--json"]);
    let c = &r.json()["results"][0]["checkout"];
    assert_eq!(c["acquired_at"], acquired);
    assert!(
        c["expires_at"].as_str().unwrap() >= acquired.as_str().unwrap(),
        "expires_at before acquired_at: {}",
        r.stdout
    );
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(record_path(&e.dir(), "task-1")).unwrap()).unwrap();
    assert!(rec["renewed_at"].as_str().unwrap() >= rec["acquired_at"].as_str().unwrap());
    assert!(rec["expires_at"].as_str().unwrap() >= rec["acquired_at"].as_str().unwrap());
    // The holder's re-checkout is clamped the same way.
    let r = e.ok("a", &["checkout", "task-1", "--timeout", "1m", "--json"]);
    assert_eq!(r.json()["outcome"], "already_held");
    assert!(r.json()["checkout"]["expires_at"].as_str().unwrap() >= acquired.as_str().unwrap());
}

/// Run `tasklock ARGS` as agent `a`; fail the test if it takes longer than `limit`.
fn run_within(e: &Env, limit: std::time::Duration, args: &[&str]) -> Run {
    use std::io::Read;
    let mut cmd = base_cmd(&e.now);
    cmd.arg("--dir")
        .arg(e.dir())
        .args(args)
        .args(["--agent", "a"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Run {
        code: status.code().unwrap(),
        stdout,
        stderr,
    }
}

fn config_error(r: &Run) -> String {
    assert_eq!(r.code, 1, "{}", r.text());
    let j = r.json();
    assert_eq!(j["error"]["kind"], "config", "{}", r.stdout);
    let m = j["error"]["message"].as_str().unwrap().to_string();
    assert!(m.contains("config.yaml"), "names the file: {m}");
    m
}

#[test]
fn a_deeply_nested_config_is_refused_before_parsing() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    let limit = std::time::Duration::from_secs(3);
    let cases = [
        format!("lease: {}{}\n", "[".repeat(30_000), "]".repeat(30_000)),
        format!("lease: {}x\n", "{a: ".repeat(12_000)),
        format!("{}x\n", "- ".repeat(30_000)),
    ];
    for text in cases {
        std::fs::write(e.dir().join("config.yaml"), &text).unwrap();
        let r = run_within(&e, limit, &["checkout", "task-1", "--json"]);
        let m = config_error(&r);
        assert!(m.contains("levels deep"), "{m}");
    }
    // Quoted brackets are text, and a flat file still works.
    std::fs::write(
        e.dir().join("config.yaml"),
        "# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\nlease: \"1h\" # {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n",
    )
    .unwrap();
    let r = e.ok("a", &["checkout", "task-1", "--json"]);
    assert_eq!(r.json()["checkout"]["expires_at"], "2026-01-01T01:00:00Z");
}

#[test]
fn an_oversized_config_is_refused_unread() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    let text = format!("lease: 1h\n{}", "# padding\n".repeat(7000));
    std::fs::write(e.dir().join("config.yaml"), text).unwrap();
    let m = config_error(&e.run(Some("a"), &["checkout", "task-1", "--json"]));
    assert!(m.contains("64 KiB"), "{m}");
}

#[test]
fn a_fifo_planted_as_config_fails_at_once_and_blocks_no_release() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1", "--timeout", "10m"]);
    let fifo = e.dir().join("config.yaml");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(ok.success());
    let limit = std::time::Duration::from_secs(5);
    let m = config_error(&run_within(&e, limit, &["checkout", "task-2", "--json"]));
    assert!(m.contains("not a regular file"), "{m}");
    // A command that does not need the settings is not held up by them.
    let r = run_within(&e, limit, &["release", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "released");
}

#[test]
fn config_errors_never_echo_the_file() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    let secret = e.tmp.path().join("secret.txt");
    std::fs::write(&secret, "password: hunter2-SECRET\n").unwrap();
    let cfg = e.dir().join("config.yaml");
    std::os::unix::fs::symlink(&secret, &cfg).unwrap();
    let r = e.run(Some("a"), &["checkout", "task-1", "--json"]);
    let m = config_error(&r);
    assert!(m.contains("symbolic link"), "{m}");
    assert!(
        !r.stdout.contains("SECRET") && !r.stderr.contains("SECRET"),
        "{}",
        r.text()
    );
    let md = e.run(Some("a"), &["checkout", "task-1"]);
    assert_eq!(md.code, 1);
    assert!(!md.stderr.contains("SECRET"), "{}", md.text());

    // A copy (or hard link) of a secret: the parser's messages would quote it.
    std::fs::remove_file(&cfg).unwrap();
    for text in [
        "sk-live-SECRET-0123456789\n",
        "lease: [SECRET, 1]\n",
        "lease: {SECRET: 1}\n",
        "\"SECRET\n",
        "SECRET-KEY: 1\n",
    ] {
        std::fs::write(&cfg, text).unwrap();
        let r = e.run(Some("a"), &["checkout", "task-1", "--json"]);
        let m = config_error(&r);
        assert!(m.contains("line"), "says where: {m}");
        assert!(
            !r.stdout.contains("SECRET"),
            "{text:?} echoed: {}",
            r.stdout
        );
    }
    // An unknown setting that looks like one is named, to help fix a typo.
    std::fs::write(&cfg, "lease: 1h\nleese: 2h\n").unwrap();
    let m = config_error(&e.run(Some("a"), &["checkout", "task-1", "--json"]));
    assert!(m.contains("`leese`") && m.contains("line 2"), "{m}");
}

/// Make every audit append fail in a way root cannot bypass: a directory in its place.
fn break_audit(e: &Env) {
    let audit = e.dir().join("audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    std::fs::create_dir(&audit).unwrap();
}

fn held_by(e: &Env, key: &str) -> Option<String> {
    let s = e.ok("z", &["status", key, "--json"]);
    s.json()["checkout"]["agent"]["id"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn a_checkout_whose_audit_append_fails_is_kept_and_reported_with_a_warning() {
    let e = Env::new();
    e.ok("a", &["checkout", "warm-up"]);
    break_audit(&e);
    let r = e.run(Some("a"), &["checkout", "task-1", "--json"]);
    assert_eq!(r.code, 0, "never exit 1 with the record kept: {}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "granted");
    let w = j["warnings"][0].as_str().expect("a warnings array");
    assert!(w.contains("task-1") && w.contains("audit"), "{w}");
    assert!(r.stderr.starts_with("tasklock: warning: "), "{}", r.text());
    assert_eq!(held_by(&e, "task-1").as_deref(), Some("a"));
    // The same in markdown: the report on stdout, the warning on stderr.
    let r = e.run(Some("a"), &["checkout", "task-2"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        r.stderr.contains("`task-2` is checked out to you"),
        "{}",
        r.text()
    );
    // A re-checkout and a renew extend the lease and say the log was not written.
    let r = e.run(Some("a"), &["checkout", "task-1", "--json"]);
    assert_eq!(
        (r.code, r.json()["outcome"].as_str()),
        (0, Some("already_held"))
    );
    assert!(r.json()["warnings"].is_array(), "{}", r.stdout);
    let r = e.run(Some("a"), &["renew", "task-1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.json()["warnings"].is_array(), "{}", r.stdout);
}

#[test]
fn a_release_whose_audit_append_fails_still_releases_with_a_warning() {
    let mut e = Env::new();
    e.as_operator();
    e.ok("a", &["checkout", "task-1"]);
    e.ok("b", &["checkout", "task-2"]);
    break_audit(&e);
    let r = e.run(
        Some("a"),
        &["release", "task-1", "--note", "done", "--json"],
    );
    assert_eq!(
        r.code,
        0,
        "never exit 1 with the record removed: {}",
        r.text()
    );
    assert_eq!(r.json()["results"][0]["outcome"], "released");
    assert!(
        r.json()["warnings"][0]
            .as_str()
            .unwrap()
            .contains("`task-1` was released")
    );
    assert_eq!(held_by(&e, "task-1"), None);
    let r = e.run(Some("a"), &["release", "task-2", "--force", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "force_released");
    assert!(
        r.stderr.contains("`task-2` was force-released"),
        "{}",
        r.text()
    );
    assert_eq!(held_by(&e, "task-2"), None);
    // No warnings when nothing failed: the field is absent.
    std::fs::remove_dir(e.dir().join("audit.jsonl")).unwrap();
    e.ok("a", &["checkout", "task-3"]);
    let r = e.ok("a", &["release", "task-3", "--json"]);
    assert!(r.json().get("warnings").is_none(), "{}", r.stdout);
    assert_eq!(r.stderr, "");
}

#[test]
fn a_release_with_an_unreadable_queue_still_releases() {
    let mut e = Env::new();
    e.as_operator();
    e.ok("a", &["checkout", "task-1"]);
    e.ok("a", &["checkout", "task-2"]);
    // A file where the queues directory belongs: reading any queue fails.
    let queues = e.dir().join("queues");
    let _ = std::fs::remove_dir_all(&queues);
    std::fs::write(&queues, "not a directory").unwrap();
    let r = e.run(Some("a"), &["release", "task-1", "--json"]);
    assert_eq!(
        r.code,
        0,
        "never exit 1 with the record removed: {}",
        r.text()
    );
    assert_eq!(r.json()["results"][0]["outcome"], "released");
    assert!(
        r.json()["warnings"][0].as_str().unwrap().contains("queue"),
        "{}",
        r.stdout
    );
    assert!(!record_path(&e.dir(), "task-1").exists());
    let r = e.run(Some("b"), &["release", "task-2", "--force", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!record_path(&e.dir(), "task-2").exists());
    // A directory planted as one key's queue file.
    std::fs::remove_file(&queues).unwrap();
    e.ok("a", &["checkout", "task-3"]);
    std::fs::create_dir_all(queues.join("task-3.json")).unwrap();
    let r = e.run(Some("a"), &["release", "task-3", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(held_by(&e, "task-3"), None);
}

#[test]
fn a_watcher_follows_the_process_its_agent_registered_since() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let e = Env::new();
    let mut old = Command::new("sleep").arg("60").spawn().unwrap();
    let mut new = Command::new("sleep").arg("60").spawn().unwrap();
    let (old_pid, new_pid) = (old.id().to_string(), new.id().to_string());
    e.ok("x", &["checkout", "task-1"]);
    let mut cmd = base_cmd(&e.now);
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["--agent", "x", "heartbeat", "--watch", "--pid", &old_pid])
        .args(["--interval", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watcher = cmd.spawn().unwrap();
    let entry = e.dir().join("agents").join("x");
    let registered = |pid: &str| {
        std::fs::read(&entry)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["pid"].as_u64() == pid.parse::<u64>().ok())
    };
    let start = Instant::now();
    while !registered(&old_pid) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the watcher never beat"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The agent's work moved to another process, which it registers.
    e.ok("x", &["heartbeat", "--pid", &new_pid]);
    // Beats of the old watcher do not take the registration back.
    std::thread::sleep(Duration::from_millis(1300));
    assert!(
        registered(&new_pid),
        "a watcher beat re-registered its own pid"
    );
    // The old process dies: the agent lives on in its new one, so nothing is released
    // and the watcher goes on, watching the new process.
    old.kill().unwrap();
    old.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        watcher.try_wait().unwrap().is_none(),
        "the watcher stopped when the superseded process died"
    );
    let s = e.ok("z", &["status", "task-1", "--json"]);
    assert_eq!(s.json()["checkout"]["agent"]["id"], "x", "{}", s.stdout);
    // The new process dies too: now the agent's checkouts end at once.
    new.kill().unwrap();
    new.wait().unwrap();
    let run = watcher_exit(watcher, &new_pid, "[NEW_PID]");
    snap!(e, "watch_follows_the_new_process", run);
    assert_eq!(run.code, 0);
    let s = e.run(Some("z"), &["status", "task-1", "--json"]);
    assert_eq!(s.json()["outcome"], "free", "{}", s.stdout);
}

#[test]
fn a_watcher_stops_when_its_agent_moved_to_a_process_it_cannot_watch() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let e = Env::new();
    let mut old = Command::new("sleep").arg("60").spawn().unwrap();
    let old_pid = old.id().to_string();
    e.ok("x", &["checkout", "task-1"]);
    let watcher = base_cmd(&e.now)
        .arg("--dir")
        .arg(e.dir())
        .args(["--agent", "x", "heartbeat", "--watch", "--pid", &old_pid])
        .args(["--interval", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let entry = e.dir().join("agents").join("x");
    let start = Instant::now();
    while !std::fs::read_to_string(&entry).is_ok_and(|t| t.contains(&old_pid)) {
        assert!(start.elapsed() < Duration::from_secs(10), "no first beat");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The agent now runs on another machine: its registered process cannot be checked
    // from here, so the watcher cannot follow it.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&entry).unwrap()).unwrap();
    v["host"] = "another-host".into();
    v["pid"] = 4242.into();
    v["pid_start"] = 1.into();
    std::fs::write(&entry, v.to_string()).unwrap();
    old.kill().unwrap();
    old.wait().unwrap();
    let run = watcher_exit(watcher, &old_pid, "[OLD_PID]");
    snap!(e, "watch_superseded", run);
    assert_eq!(run.code, 0);
    let s = e.ok("z", &["status", "task-1", "--json"]);
    assert_eq!(s.json()["checkout"]["agent"]["id"], "x", "{}", s.stdout);
}

/// Wait (at most 10 s) for a `heartbeat --watch` to end; its output, with the watched
/// pid replaced by `placeholder` for a snapshot.
fn watcher_exit(mut watcher: std::process::Child, pid: &str, placeholder: &str) -> Run {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    while watcher.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the watcher did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = watcher.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8_lossy(&out.stdout).replace(pid, placeholder),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A directory planted where the store replaces a file (here the second copy of the
/// fencing counter, replaced by every grant) is refused as a rename over it was: the
/// command fails saying what is in the way, the directory stays where it was with what
/// it holds, and nothing is left in `tmp/`. (The store exchanges the new file with the
/// old one, so it must put a directory it finds back.)
#[test]
fn a_directory_in_place_of_a_replaced_file_stays_and_is_named() {
    let e = Env::new();
    e.ok("a", &["checkout", "task-1"]);
    let counter = e.dir().join("counter");
    std::fs::remove_file(&counter).unwrap();
    std::fs::create_dir_all(counter.join("inside")).unwrap();
    let r = e.run(Some("a"), &["checkout", "task-2", "--json"]);
    assert_eq!(r.code, 1, "{}", r.text());
    assert!(
        r.text().contains("counter") && r.text().contains("directory"),
        "{}",
        r.text()
    );
    assert!(counter.join("inside").is_dir(), "the directory was moved");
    let left: Vec<_> = std::fs::read_dir(e.dir().join("tmp"))
        .unwrap()
        .map(|x| x.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in tmp/: {left:?}");
    assert_eq!(held_by(&e, "task-2"), None);
    // Once it is gone, grants go on, above every token handed out.
    std::fs::remove_dir_all(&counter).unwrap();
    let r = e.run(Some("a"), &["checkout", "task-2", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(r.json()["checkout"]["token"].as_u64().unwrap() > 1);
}

//! The lock directory's backlog survives a command killed at any of its file changes:
//! `backlog add` (also of a key done before), `checkout --next`, `release`, `release --done`,
//! `backlog remove` (also beside a done key, whose index entry it drops) and the
//! move of a backlog of the layout before `backlog/index/` (by `checkout --next`, and by
//! `backlog`, which takes the guard for it) are each killed (strace's fault injection, SIGKILL) at every write, rename, link, unlink
//! and mkdir they make, one at a time, and after each crash the agents' ordinary commands
//! (the killed one tried again, then a worker draining the backlog) do every key exactly
//! once: none lost, none handed out after it was done or removed, and `checkout --next`
//! reaches exit 3. (PostgreSQL's backlog is transactional: not at issue here.) Linux
//! only: it needs strace (`.ci/run` installs it).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

const KEYS: [&str; 3] = ["t1", "t2", "t3"];

/// Run tasklock in the lock directory `dir` as `agent` at `now`; its exit code and JSON.
fn tl(dir: &Path, now: &str, agent: &str, args: &[&str]) -> (i32, Value) {
    let mut cmd = base_cmd(now);
    cmd.arg("--dir")
        .arg(dir)
        .args(["--agent", agent, "--json"])
        .args(args);
    let r = exec(cmd);
    let j = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    (r.code, j)
}

/// The command as strace runs it: traced (`-f`, output to `log`), killed at the `when`-th
/// call of `call` if given.
fn traced(dir: &Path, agent: &str, args: &[&str], log: &Path, kill: Option<(&str, usize)>) -> i32 {
    let mut cmd = strace::strace(log, true, kill);
    let bin = env!("CARGO_BIN_EXE_tasklock");
    let status = cmd
        .arg(bin)
        .arg("--dir")
        .arg(dir)
        .args(["--agent", agent, "--json"])
        .args(args)
        .env("TASKLOCK_NOW", T0)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("strace is needed (apt-get install strace; .ci/run installs it)");
    strace::exit_code(status, &format!("{args:?}"))
}

/// How many times the command makes each call of [`strace::CHANGES`], run whole on a copy of
/// the lock directory.
fn calls(template: &Path, agent: &str, args: &[&str]) -> BTreeMap<String, usize> {
    let t = strace::copy_dir(&template.join(".locks"));
    let log = t.path().join("strace.log");
    let code = traced(&t.path().join(".locks"), agent, args, &log, None);
    assert_eq!(code, 0, "{args:?} without a crash");
    strace::changes_made(&log)
}

/// One command to crash, on a lock directory set up by `setup`, and what must be done in
/// the end.
struct Case {
    name: &'static str,
    setup: &'static [(&'static str, &'static [&'static str])],
    agent: &'static str,
    args: &'static [&'static str],
    /// Keys that must be done by the drain (the others leave the backlog by the
    /// command itself or its retry).
    expected: &'static [&'static str],
    /// The backlog of [`KEYS`] is written in the layout before `backlog/index/` (after
    /// `setup`): the command moves it.
    old_layout: bool,
}

const CASES: [Case; 10] = [
    Case {
        name: "backlog add",
        setup: &[],
        agent: "o",
        args: &["backlog", "add", "t1", "t2", "t3"],
        expected: &KEYS,
        old_layout: false,
    },
    Case {
        name: "backlog add to a backlog",
        setup: &[("o", &["backlog", "add", "t1"])],
        agent: "o",
        args: &["backlog", "add", "t2", "t1", "t3"],
        expected: &KEYS,
        old_layout: false,
    },
    Case {
        name: "checkout --next moving the old layout",
        setup: &[],
        agent: "a",
        args: &["checkout", "--next"],
        expected: &KEYS,
        old_layout: true,
    },
    Case {
        name: "backlog moving the old layout",
        setup: &[],
        agent: "o",
        args: &["backlog"],
        expected: &KEYS,
        old_layout: true,
    },
    Case {
        name: "checkout --next",
        setup: &[("o", &["backlog", "add", "t1", "t2", "t3"])],
        agent: "a",
        args: &["checkout", "--next"],
        expected: &KEYS,
        old_layout: false,
    },
    Case {
        name: "release",
        setup: &[
            ("o", &["backlog", "add", "t1", "t2", "t3"]),
            ("a", &["checkout", "--next"]),
        ],
        agent: "a",
        args: &["release", "t1"],
        expected: &KEYS,
        old_layout: false,
    },
    Case {
        name: "release --done",
        setup: &[
            ("o", &["backlog", "add", "t1", "t2", "t3"]),
            ("a", &["checkout", "--next"]),
        ],
        agent: "a",
        args: &["release", "t1", "--done"],
        expected: &["t2", "t3"],
        old_layout: false,
    },
    Case {
        name: "backlog add of a done key",
        setup: &[
            ("o", &["backlog", "add", "t1", "t2", "t3"]),
            ("a", &["checkout", "--next"]),
            ("a", &["release", "t1", "--done"]),
        ],
        agent: "o",
        args: &["backlog", "add", "t1", "t2"],
        expected: &KEYS,
        old_layout: false,
    },
    Case {
        // x2827 shares t1's index shard: its removal drops t1's entry, left by the done.
        name: "backlog remove beside a done key",
        setup: &[
            ("o", &["backlog", "add", "t1", "t2", "t3", "x2827"]),
            ("a", &["checkout", "--next"]),
            ("a", &["release", "t1", "--done"]),
        ],
        agent: "o",
        args: &["backlog", "remove", "x2827"],
        expected: &["t2", "t3"],
        old_layout: false,
    },
    Case {
        name: "backlog remove",
        setup: &[
            ("o", &["backlog", "add", "t1", "t2", "t3"]),
            ("a", &["checkout", "--next"]),
        ],
        agent: "o",
        args: &["backlog", "remove", "t1", "t2"],
        expected: &["t3"],
        old_layout: false,
    },
];

/// After a crash of `case`'s command: the killed agent tries it again, as an agent whose
/// command died would; then a worker claims, and releases `--done`, until `--next` exits
/// 3, moving the clock past every lease when it is told that everything is claimed (a
/// claim of the killed command that its agent never learned of lapses then). Returns
/// what went wrong, if anything.
fn recover(dir: &Path, case: &Case) -> Result<(), String> {
    let mut done: BTreeSet<String> = BTreeSet::new();
    let (code, j) = tl(dir, T0, case.agent, case.args);
    match (case.name, code) {
        (_, 0) => {}
        // The crash had released it already (3: no such checkout).
        ("release" | "release --done", 3) => {}
        _ => return Err(format!("the retry exits {code}: {j}")),
    }
    if case.args == ["checkout", "--next"]
        && let Some(k) = j["key"].as_str()
    {
        let (code, r) = tl(dir, T0, "a", &["release", k, "--done"]);
        if code != 0 {
            return Err(format!("a's release of {k} exits {code}: {r}"));
        }
        done.insert(k.to_string());
    }
    if case.name == "backlog remove" {
        // a's claim of t1 (removed) ends: t1 must not come back.
        tl(dir, T0, "a", &["release", "t1"]);
    }
    let mut now = chrono::DateTime::parse_from_rfc3339(T0).unwrap();
    let mut lapses = 0;
    for _ in 0..20 {
        let at = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (code, j) = tl(dir, &at, "w", &["checkout", "--next"]);
        match code {
            0 => {
                let k = j["key"].as_str().unwrap().to_string();
                if done.contains(&k) {
                    return Err(format!("{k} handed out again after it was done: {j}"));
                }
                if !case.expected.contains(&k.as_str()) {
                    return Err(format!("{k} handed out after it left the backlog: {j}"));
                }
                let (code, r) = tl(dir, &at, "w", &["release", &k, "--done"]);
                if code != 0 {
                    return Err(format!("the release of {k} exits {code}: {r}"));
                }
                done.insert(k);
            }
            2 if lapses < 2 => {
                lapses += 1;
                now += chrono::Duration::hours(2);
            }
            3 => {
                let want: BTreeSet<String> = case.expected.iter().map(|k| k.to_string()).collect();
                if done != want {
                    return Err(format!("done {done:?}, expected {want:?}"));
                }
                let (_, s) = tl(dir, &at, "o", &["backlog"]);
                if (s["ready"].as_u64(), s["claimed"].as_u64()) != (Some(0), Some(0)) {
                    return Err(format!("--next exits 3 with a backlog left: {s}"));
                }
                return Ok(());
            }
            _ => return Err(format!("--next exits {code}: {j}; done so far {done:?}")),
        }
    }
    Err(format!("--next never exits 3; done {done:?}"))
}

fn crash_everywhere(case: &Case) -> Vec<String> {
    let template = tempfile::tempdir().unwrap();
    let dir = template.path().join(".locks");
    std::fs::create_dir(&dir).unwrap();
    for (agent, args) in case.setup {
        let (code, j) = tl(&dir, T0, agent, args);
        assert_eq!(code, 0, "{args:?}: {j}");
    }
    if case.old_layout {
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        old_backlog_layout(&dir, &KEYS, &[], &[]);
    }
    let calls = calls(template.path(), case.agent, case.args);
    assert!(calls.contains_key("renameat"), "{}: {calls:?}", case.name);
    let mut failures = Vec::new();
    for (call, n) in &calls {
        for when in 1..=*n {
            let t = strace::copy_dir(&template.path().join(".locks"));
            let dir = t.path().join(".locks");
            let log = t.path().join("strace.log");
            let code = traced(&dir, case.agent, case.args, &log, Some((call, when)));
            assert_eq!(code, -9, "{} not killed at {call} #{when}", case.name);
            if let Err(e) = recover(&dir, case) {
                failures.push(format!("{} killed at {call} #{when}: {e}", case.name));
            }
        }
    }
    failures
}

#[test]
fn a_command_killed_at_any_file_change_never_breaks_the_backlog() {
    if file_store_only("a_command_killed_at_any_file_change_never_breaks_the_backlog") {
        return;
    }
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = CASES
            .iter()
            .map(|case| s.spawn(move || crash_everywhere(case)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A journal planted in `tmp/` (anyone who can write to the lock directory can) that
/// names a path outside the backlog is deleted unread, and one cut short changes
/// nothing; neither stops the next command.
#[test]
fn a_planted_or_cut_journal_changes_nothing_outside_the_backlog() {
    if file_store_only("a_planted_or_cut_journal_changes_nothing_outside_the_backlog") {
        return;
    }
    let e = Env::new();
    e.ok("o", &["backlog", "add", "t1"]);
    let victim = e.tmp.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let journal = e.dir().join("tmp").join("backlog.journal");
    for text in [
        r#"{"steps":[{"part":"members","name":"../../../victim"},{"part":"pending","name":"0"}]}"#,
        r#"{"steps":[{"part":"state","name":"../../victim","data":"x"}]}"#,
        r#"{"steps":[{"part":"pending","name":"0"},{"part":"mem"#,
    ] {
        std::fs::write(&journal, text).unwrap();
        let r = e.run(Some("a"), &["checkout", "--next", "--json"]);
        assert_eq!(r.code, 0, "{text}: {}", r.text());
        assert_eq!(r.json()["key"], "t1", "{text}: the backlog was not touched");
        assert!(!journal.exists(), "{text}: the journal stays");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        e.ok("a", &["release", "t1"]);
    }
    // A FIFO in its place is never opened for a blocking read.
    let ok = Command::new("mkfifo").arg(&journal).status().unwrap();
    assert!(ok.success());
    let r = e.run(Some("a"), &["checkout", "--next", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!journal.exists());
}

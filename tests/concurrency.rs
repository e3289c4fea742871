//! Concurrency and crash tests against the real binary.
//!
//! Every test runs `tasklock` as separate processes in its own temporary lock directory.
//! Races are started through a gate: each contender is a small `sh` script that first
//! reports "ready" and then blocks reading its stdin; once every contender is ready the
//! harness writes one line to each, so they all hit the store at (nearly) the same moment.
//! Nothing here asserts on timing; sleeps only widen race windows.

#[macro_use]
mod common;
use common::{on_postgres, use_store};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tasklock");

/// Exit codes (docs/exit-codes.md).
const GRANTED: i32 = 0;
const HELD: i32 = 2;

/// Environment that would change what the binary does; tests pass everything explicitly.
const SCRUB_ENV: &[&str] = &[
    "TASKLOCK_NOW",
    "TASKLOCK_DIR",
    "TASKLOCK_AGENT",
    "TASKLOCK_AGENT_NAME",
    "CLAUDE_CODE_SESSION_ID",
    "CODEX_THREAD_ID",
];

fn scrubbed(program: &str) -> Command {
    let mut c = Command::new(program);
    for v in SCRUB_ENV {
        c.env_remove(v);
    }
    c
}

/// `tasklock ARGS --dir DIR --agent AGENT --json`, with a clean environment.
fn tl(dir: &Path, agent: &str, args: &[&str]) -> Command {
    let mut c = scrubbed(BIN);
    use_store(&mut c, dir);
    c.args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--agent")
        .arg(agent)
        .arg("--json")
        .stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("spawn tasklock")
}

fn code(o: &Output) -> i32 {
    match o.status.code() {
        Some(c) => c,
        None => panic!("killed by signal {:?}: {}", o.status.signal(), describe(o)),
    }
}

fn describe(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn expect_code(o: &Output, want: i32, what: &str) {
    assert_eq!(code(o), want, "{what}: {}", describe(o));
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}", describe(o)))
}

/// Small deterministic PRNG (xorshift64*), seeded from the clock and printed on start so a
/// failing run can be replayed by hard-coding the seed.
struct Rng(u64);

impl Rng {
    fn from_time(test: &str) -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let seed = (nanos ^ (u64::from(std::process::id()) << 32)) | 1;
        eprintln!("{test}: rng seed {seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// The start gate every contender script runs first.
const GATE: &str = r#"echo r >> "$TL_READY" || exit 91; read _go || exit 92; "#;

/// An `sh -c` contender: waits at the gate, then runs `body` with `$TL` (the binary) and
/// `$D` (the lock directory) set. `args` become `$1`...
fn gated_sh(ready: &Path, dir: &Path, body: &str, args: &[&str]) -> Command {
    let mut c = scrubbed("sh");
    use_store(&mut c, dir);
    c.arg("-c")
        .arg(format!("{GATE}{body}"))
        .arg("sh")
        .args(args)
        .env("TL", BIN)
        .env("D", dir)
        .env("TL_READY", ready)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Spawn every command, wait until all are at the gate, open it, and collect the outputs
/// in the order given.
fn run_gated(ready: &Path, cmds: Vec<Command>) -> Vec<Output> {
    let _ = fs::remove_file(ready);
    let n = cmds.len();
    let mut children: Vec<Child> = cmds
        .into_iter()
        .map(|mut c| c.spawn().expect("spawn sh"))
        .collect();
    loop {
        let arrived = fs::read(ready).map(|b| b.len() / 2).unwrap_or(0);
        if arrived >= n {
            break;
        }
        for ch in &mut children {
            if let Some(st) = ch.try_wait().expect("try_wait") {
                panic!("a contender exited before the gate opened: {st:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for ch in &mut children {
        let mut stdin = ch.stdin.take().expect("piped stdin");
        stdin.write_all(b"go\n").expect("open the gate");
    }
    children
        .into_iter()
        .map(|ch| ch.wait_with_output().expect("wait"))
        .collect()
}

/// Every line of `audit.jsonl` (each must be one JSON object).
fn audit(dir: &Path) -> Vec<Value> {
    if on_postgres() {
        return common::audit(dir);
    }
    let text = fs::read_to_string(dir.join("audit.jsonl")).expect("read audit.jsonl");
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("audit.jsonl line {} is not JSON ({e}): {l:?}", i + 1))
        })
        .collect()
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} is not a string in {v}"))
}

fn list(dir: &Path) -> Value {
    let o = run(tl(dir, "observer", &["list"]));
    expect_code(&o, 0, "list");
    let v = json(&o);
    assert!(
        v["corrupt"].as_array().expect("corrupt array").is_empty(),
        "list reports corrupt records: {v}"
    );
    v
}

/// key -> (agent id, token) for every active checkout in `list --json`.
fn holders(dir: &Path) -> BTreeMap<String, (String, u64)> {
    let v = list(dir);
    let mut out = BTreeMap::new();
    for c in v["checkouts"].as_array().expect("checkouts array") {
        let key = s(c, "key").to_string();
        let agent = s(&c["agent"], "id").to_string();
        let token = c["token"].as_u64().expect("token");
        assert!(
            out.insert(key.clone(), (agent, token)).is_none(),
            "{key} listed twice: {v}"
        );
    }
    out
}

/// One `enter`/`exit` line of a critical-section log: (kind, agent, tag).
fn parse_log(path: &Path) -> Vec<(String, String, String)> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            assert_eq!(parts.len(), 3, "malformed log line {l:?}");
            assert!(
                parts[0] == "enter" || parts[0] == "exit",
                "malformed log line {l:?}"
            );
            (
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].to_string(),
            )
        })
        .collect()
}

/// The log must read enter A t / exit A t / enter B u / exit B u ...: any overlap of two
/// critical sections shows up as two enters in a row (or an exit by someone else).
/// Returns the (agent, tag) of every critical section.
fn assert_no_overlap(log: &[(String, String, String)]) -> Vec<(String, String)> {
    assert!(
        log.len().is_multiple_of(2),
        "log has an unmatched line: {:?}",
        log.last()
    );
    let mut sections = Vec::new();
    for (i, pair) in log.chunks(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.0 == "enter" && b.0 == "exit" && a.1 == b.1 && a.2 == b.2,
            "critical sections overlap or are unmatched at log lines {}..{}: {a:?} then {b:?}\n\
             context: {:?}",
            2 * i + 1,
            2 * i + 2,
            &log[(2 * i).saturating_sub(4)..(2 * i + 6).min(log.len())]
        );
        sections.push((a.1.clone(), a.2.clone()));
    }
    sections
}

#[test]
fn race_32_processes_50_rounds() {
    const PROCS: usize = 32;
    const ROUNDS: usize = 50;
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let log = td.path().join("critical.log");
    let ready = td.path().join("ready");
    // The winner enters and leaves the critical section before exiting; the harness
    // releases only after every contender of the round has exited.
    let body = r#"
        "$TL" checkout race --agent "$A" --dir "$D" --json </dev/null
        rc=$?
        if [ $rc -eq 0 ]; then
            echo "enter $A $R" >> "$LOG"
            sleep 0.003
            echo "exit $A $R" >> "$LOG"
        fi
        exit $rc
    "#;
    let mut last_token = 0;
    let mut winners = Vec::new();
    for round in 0..ROUNDS {
        let cmds = (0..PROCS)
            .map(|i| {
                let mut c = gated_sh(&ready, &dir, body, &[]);
                c.env("A", format!("a{i}"))
                    .env("R", round.to_string())
                    .env("LOG", &log);
                c
            })
            .collect();
        let outs = run_gated(&ready, cmds);
        let granted: Vec<usize> = (0..PROCS).filter(|&i| code(&outs[i]) == GRANTED).collect();
        assert_eq!(
            granted.len(),
            1,
            "round {round}: {} processes were granted the key: {granted:?}",
            granted.len()
        );
        let w = granted[0];
        let winner = format!("a{w}");
        let wj = json(&outs[w]);
        assert_eq!(s(&wj, "outcome"), "granted", "round {round}: {wj}");
        assert_eq!(s(&wj["checkout"]["agent"], "id"), winner);
        let token = wj["checkout"]["token"].as_u64().expect("token");
        assert!(
            token > last_token,
            "round {round}: token {token} does not exceed the previous grant's {last_token}"
        );
        last_token = token;
        for (i, o) in outs.iter().enumerate() {
            if i == w {
                continue;
            }
            expect_code(o, HELD, &format!("round {round}: loser a{i}"));
            let lj = json(o);
            assert_eq!(s(&lj, "outcome"), "conflict", "round {round}: {lj}");
            assert_eq!(
                s(&lj["checkout"]["agent"], "id"),
                winner,
                "round {round}: a{i} was told the wrong holder: {lj}"
            );
            assert_eq!(lj["checkout"]["token"].as_u64(), Some(token));
        }
        let rel = run(tl(&dir, &winner, &["release", "race"]));
        expect_code(&rel, 0, &format!("round {round}: release by {winner}"));
        winners.push(winner);
    }

    let sections = assert_no_overlap(&parse_log(&log));
    assert_eq!(
        sections.len(),
        ROUNDS,
        "expected one critical section per round"
    );
    for (round, (agent, tag)) in sections.iter().enumerate() {
        assert_eq!(tag, &round.to_string(), "sections out of round order");
        assert_eq!(
            agent, &winners[round],
            "round {round} entered by a non-winner"
        );
    }
    assert!(holders(&dir).is_empty(), "the key is still held at the end");

    // The audit log agrees: one acquire and one release per round, PROCS-1 denies.
    let events = audit(&dir);
    let count = |e: &str| events.iter().filter(|v| s(v, "event") == e).count();
    assert_eq!(count("acquire"), ROUNDS);
    assert_eq!(count("release"), ROUNDS);
    assert_eq!(count("deny"), ROUNDS * (PROCS - 1));
}

#[test]
fn free_running_mutex_32_workers() {
    const WORKERS: usize = 32;
    const ATTEMPTS: usize = 50;
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let log = td.path().join("critical.log");
    let ready = td.path().join("ready");
    let body = format!(
        r#"
        i=0; wins=0; losses=0
        while [ $i -lt {ATTEMPTS} ]; do
            "$TL" checkout mutex --agent "$A" --dir "$D" >/dev/null 2>"$D.err.$A" </dev/null
            rc=$?
            if [ $rc -eq 0 ]; then
                echo "enter $A $i" >> "$LOG"
                sleep 0.001
                echo "exit $A $i" >> "$LOG"
                "$TL" release mutex --agent "$A" --dir "$D" >/dev/null </dev/null \
                    || {{ echo "release by $A failed with $?"; exit 1; }}
                wins=$((wins + 1))
            elif [ $rc -eq 2 ]; then
                losses=$((losses + 1))
            else
                echo "checkout by $A exited $rc: $(cat "$D.err.$A")"
                exit 1
            fi
            i=$((i + 1))
        done
        echo "$wins $losses"
    "#
    );
    let cmds = (0..WORKERS)
        .map(|i| {
            let mut c = gated_sh(&ready, &dir, &body, &[]);
            c.env("A", format!("w{i}")).env("LOG", &log);
            c
        })
        .collect();
    let outs = run_gated(&ready, cmds);
    let (mut wins, mut losses) = (0, 0);
    let mut wins_by = HashMap::new();
    for (i, o) in outs.iter().enumerate() {
        expect_code(o, 0, &format!("worker w{i}"));
        let text = String::from_utf8_lossy(&o.stdout);
        let nums: Vec<usize> = text
            .split_whitespace()
            .map(|n| n.parse().expect("counts"))
            .collect();
        assert_eq!(nums.len(), 2, "worker w{i} printed {text:?}");
        assert_eq!(nums[0] + nums[1], ATTEMPTS, "worker w{i} printed {text:?}");
        wins += nums[0];
        losses += nums[1];
        wins_by.insert(format!("w{i}"), nums[0]);
    }
    eprintln!("free_running_mutex_32_workers: {wins} wins, {losses} losses");
    assert!(wins > 0, "nobody ever got the mutex");

    let sections = assert_no_overlap(&parse_log(&log));
    assert_eq!(sections.len(), wins, "log sections vs. reported wins");
    let mut seen_by: HashMap<String, usize> = HashMap::new();
    let mut distinct = BTreeSet::new();
    for (agent, tag) in &sections {
        *seen_by.entry(agent.clone()).or_default() += 1;
        assert!(
            distinct.insert((agent.clone(), tag.clone())),
            "{agent} logged attempt {tag} twice"
        );
    }
    for (agent, n) in &wins_by {
        assert_eq!(seen_by.get(agent).copied().unwrap_or(0), *n, "{agent}");
    }

    // The audit log agrees, and tokens only ever go up.
    let events = audit(&dir);
    let count = |e: &str| events.iter().filter(|v| s(v, "event") == e).count();
    assert_eq!(count("acquire"), wins);
    assert_eq!(count("release"), wins);
    assert_eq!(count("deny"), losses);
    let tokens: Vec<u64> = events
        .iter()
        .filter(|v| s(v, "event") == "acquire")
        .map(|v| v["token"].as_u64().expect("token"))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "acquire tokens are not strictly increasing: {tokens:?}"
    );
    assert!(
        holders(&dir).is_empty(),
        "the mutex is still held at the end"
    );
}

/// RFC 3339 (UTC, whole seconds) for a Unix time, without a date crate.
fn rfc3339(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[test]
fn rfc3339_helper_is_right() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
}

/// A fleet's beats take turns at the sweep (the look at every other agent's checkouts):
/// of many beats racing at one moment exactly one sweeps, and the next turn comes
/// `sweep_interval` (10 s by default) after it.
#[test]
fn racing_beats_take_one_sweep_per_interval() {
    const BEATS: usize = 12;
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let ready = td.path().join("ready");
    let body = r#"exec "$TL" heartbeat --agent "$1" --dir "$D" --json </dev/null"#;
    for (now, turns) in [
        ("2026-01-01T00:00:00Z", 1),
        ("2026-01-01T00:00:09Z", 0),
        ("2026-01-01T00:00:10Z", 1),
        ("2026-01-01T00:00:25Z", 1),
    ] {
        let cmds = (0..BEATS)
            .map(|i| {
                let mut c = gated_sh(&ready, &dir, body, &[&format!("a{i}")]);
                c.env("TASKLOCK_NOW", now);
                c
            })
            .collect();
        let outs = run_gated(&ready, cmds);
        let swept = outs
            .iter()
            .filter(|o| {
                expect_code(o, 0, &format!("a beat at {now}"));
                json(o)["swept"].as_bool().expect("swept is a boolean")
            })
            .count();
        assert_eq!(swept, turns, "beats at {now} that swept");
    }
}

#[test]
fn stale_breakers_exactly_one_wins() {
    const TRIALS: usize = 300;
    const BREAKERS: usize = 8;
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let ready = td.path().join("ready");
    let hour_ago = rfc3339(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - 3600,
    );
    let body = r#"exec "$TL" checkout "$1" --agent "$A" --dir "$D" --json </dev/null"#;

    // key -> (old token, winner, winner token)
    let mut trials = BTreeMap::new();
    for t in 0..TRIALS {
        let key = format!("stale-{t}");
        let mut plant = tl(&dir, "old", &["checkout", &key, "--timeout", "1s"]);
        plant.env("TASKLOCK_NOW", &hour_ago);
        let p = run(plant);
        expect_code(&p, 0, "planting the expired lock");
        let old_token = json(&p)["checkout"]["token"].as_u64().expect("token");

        let cmds = (0..BREAKERS)
            .map(|i| {
                let mut c = gated_sh(&ready, &dir, body, &[&key]);
                c.env("A", format!("b{i}"));
                c
            })
            .collect();
        let outs = run_gated(&ready, cmds);
        let granted: Vec<usize> = (0..BREAKERS)
            .filter(|&i| code(&outs[i]) == GRANTED)
            .collect();
        assert_eq!(
            granted.len(),
            1,
            "trial {t}: {} breakers were granted {key}: {granted:?}",
            granted.len()
        );
        let w = granted[0];
        let winner = format!("b{w}");
        let wj = json(&outs[w]);
        assert_eq!(s(&wj, "outcome"), "granted");
        assert_eq!(
            wj["took_over"]["token"].as_u64(),
            Some(old_token),
            "trial {t}: the winner did not report taking over the old lease: {wj}"
        );
        assert_eq!(s(&wj["took_over"]["agent"], "id"), "old");
        let token = wj["checkout"]["token"].as_u64().expect("token");
        assert!(token > old_token);
        for (i, o) in outs.iter().enumerate() {
            if i != w {
                expect_code(o, HELD, &format!("trial {t}: breaker b{i}"));
                let lj = json(o);
                assert_eq!(s(&lj["checkout"]["agent"], "id"), winner, "trial {t}: {lj}");
                assert!(
                    lj["took_over"].is_null(),
                    "trial {t}: loser took over: {lj}"
                );
            }
        }
        trials.insert(key, (old_token, winner, token));
    }

    // Per key, in order: old's acquire, one auto_release of old's token by the winner,
    // the winner's acquire, then BREAKERS-1 denies naming the winner. (The old holder is
    // also told through its inbox: exactly one notify per key, checked apart.)
    let mut by_key: HashMap<String, Vec<Value>> = HashMap::new();
    let mut notified: HashMap<String, usize> = HashMap::new();
    for ev in audit(&dir) {
        if ev["event"] == "notify" {
            assert_eq!(ev["agent"], "old");
            assert_eq!(ev["detail"], "lease_expired");
            *notified
                .entry(ev["key"].as_str().unwrap().to_string())
                .or_default() += 1;
            continue;
        }
        if let Some(key) = ev["key"].as_str() {
            by_key.entry(key.to_string()).or_default().push(ev);
        }
    }
    for (key, (old_token, winner, token)) in &trials {
        assert_eq!(
            notified.get(key),
            Some(&1),
            "{key}: the old holder is told once"
        );
        let evs = by_key.get(key).map(Vec::as_slice).unwrap_or_default();
        let ctx = || format!("{key}: {evs:#?}");
        assert_eq!(evs.len(), 3 + BREAKERS - 1, "{}", ctx());
        let autos: Vec<&Value> = evs
            .iter()
            .filter(|e| s(e, "event") == "auto_release")
            .collect();
        assert_eq!(autos.len(), 1, "{}", ctx());
        assert_eq!(autos[0]["token"].as_u64(), Some(*old_token), "{}", ctx());
        assert_eq!(s(autos[0], "agent"), "old", "{}", ctx());
        assert_eq!(autos[0]["by"].as_str(), Some(winner.as_str()), "{}", ctx());
        assert_eq!(s(&evs[0], "event"), "acquire", "{}", ctx());
        assert_eq!(s(&evs[0], "agent"), "old", "{}", ctx());
        assert_eq!(s(&evs[1], "event"), "auto_release", "{}", ctx());
        assert_eq!(s(&evs[2], "event"), "acquire", "{}", ctx());
        assert_eq!(s(&evs[2], "agent"), winner, "{}", ctx());
        assert_eq!(evs[2]["token"].as_u64(), Some(*token), "{}", ctx());
        for e in &evs[3..] {
            assert_eq!(s(e, "event"), "deny", "{}", ctx());
            assert_eq!(e["holder"].as_str(), Some(winner.as_str()), "{}", ctx());
        }
    }
    let held = holders(&dir);
    assert_eq!(held.len(), TRIALS);
    for (key, (_, winner, token)) in &trials {
        assert_eq!(held.get(key), Some(&(winner.clone(), *token)), "{key}");
    }
}

/// Every file under `keys/` must be a whole JSON record naming a key.
fn assert_records_parse(dir: &Path) -> Vec<(String, Value)> {
    if on_postgres() {
        // The records as the store gives them (a row that does not decode is listed
        // as corrupt, which `list` refuses), named by key.
        return list(dir)["checkouts"]
            .as_array()
            .expect("checkouts array")
            .iter()
            .map(|v| (s(v, "key").to_string(), v.clone()))
            .collect();
    }
    let mut out = Vec::new();
    let keys = dir.join("keys");
    let Ok(entries) = fs::read_dir(&keys) else {
        return out;
    };
    for e in entries {
        let p: PathBuf = e.unwrap().path();
        let bytes = fs::read(&p).unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
            panic!(
                "{} is not a JSON record ({err}): {:?}",
                p.display(),
                String::from_utf8_lossy(&bytes)
            )
        });
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(v["key"].is_string() && v["token"].is_u64(), "{name}: {v}");
        out.push((name, v));
    }
    out
}

#[test]
fn kill_9_during_checkout_and_release_leaves_store_consistent() {
    const ITERATIONS: usize = 400;
    let mut rng = Rng::from_time("kill_9");
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    // How long an uninterrupted checkout takes here: half of the kills land in its last
    // half, where the store is written; the other half anywhere in 0..3 ms.
    let scratch = td.path().join("scratch");
    let mut runs: Vec<u64> = (0..5)
        .map(|i| {
            let start = std::time::Instant::now();
            let o = run(tl(&scratch, "victim", &["checkout", &format!("t{i}")]));
            expect_code(&o, 0, "timing run");
            start.elapsed().as_micros() as u64
        })
        .collect();
    runs.sort_unstable();
    let late = (runs[2] / 2).min(2999)..runs[2].min(3000);
    eprintln!("kill_9: an uninterrupted checkout takes {}us", runs[2]);
    let mut held: Option<u64> = None; // token of victim's checkout of k, if held
    let mut max_token = 0;
    let mut killed = 0;
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for it in 0..ITERATIONS {
        // Not held: take it. Held: release it, or check out again (renews in place).
        let op = match held {
            None => "checkout",
            Some(_) if rng.below(2) == 0 => "release",
            Some(_) => "checkout",
        };
        *ops.entry(op).or_default() += 1;
        let mut victim = tl(&dir, "victim", &[op, "k"]);
        victim.stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = victim.spawn().expect("spawn victim");
        let delay = if rng.below(2) == 0 || late.is_empty() {
            rng.below(3000)
        } else {
            late.start + rng.below(late.end - late.start)
        };
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill();
        let status = child.wait().expect("wait victim");
        if status.signal() == Some(9) {
            killed += 1;
        } else {
            let c = status.code();
            assert_eq!(
                c,
                Some(0),
                "iteration {it}: {op} by victim exited {status:?}"
            );
        }

        let ctx = format!("iteration {it} ({op}, {status:?})");
        let now = holders(&dir);
        for (key, (agent, token)) in &now {
            assert_eq!(key, "k", "{ctx}: unexpected key listed: {now:?}");
            assert_eq!(agent, "victim", "{ctx}: {now:?}");
            assert!(*token >= 1, "{ctx}: {now:?}");
        }
        let after = now.get("k").map(|(_, t)| *t);
        match (held, after) {
            // A renew keeps the token; a fresh grant must use a token never seen before.
            (Some(before), Some(t)) => {
                assert_eq!(
                    t, before,
                    "{ctx}: token changed while held by the same agent"
                )
            }
            (None, Some(t)) => assert!(t > max_token, "{ctx}: token {t} reused (max {max_token})"),
            (Some(_), None) => assert_eq!(op, "release", "{ctx}: checkout lost the key"),
            (None, None) => {}
        }
        if let Some(t) = after {
            max_token = max_token.max(t);
        }
        held = after;
        for (name, v) in assert_records_parse(&dir) {
            assert_eq!(name, "k", "{ctx}: stray record file");
            assert_eq!(v["key"], "k", "{ctx}");
            assert_eq!(v["agent"]["id"], "victim", "{ctx}");
        }

        // A mutating command takes the guard and sweeps debris from tmp/.
        let o = run(tl(&dir, "observer", &["checkout", "other"]));
        expect_code(&o, 0, &format!("{ctx}: observer checkout"));
        let t = json(&o)["checkout"]["token"].as_u64().expect("token");
        assert!(
            t > max_token,
            "{ctx}: observer got token {t}, max seen {max_token}"
        );
        max_token = t;
        let o = run(tl(&dir, "observer", &["release", "other"]));
        expect_code(&o, 0, &format!("{ctx}: observer release"));
        if on_postgres() {
            continue;
        }
        let debris: Vec<_> = fs::read_dir(dir.join("tmp"))
            .expect("tmp/ exists after a checkout")
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(debris.is_empty(), "{ctx}: tmp/ not swept: {debris:?}");
    }
    eprintln!("kill_9: {killed} of {ITERATIONS} victims were killed mid-run; ops {ops:?}");
    // Every audit line is whole, whatever the kills interrupted.
    let events = audit(&dir);
    assert!(!events.is_empty());
}

#[test]
fn many_keys_many_agents_no_double_grant() {
    const AGENTS: usize = 16;
    const KEYS: usize = 20;
    let mut rng = Rng::from_time("many_keys");
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let ready = td.path().join("ready");
    // A few keys that need encoding, next to plain ones.
    let mut keys: Vec<String> = (0..KEYS - 4).map(|i| format!("task-{i}")).collect();
    keys.extend(["Task-1", "a/b", "issue #7", "ünï.cödé"].map(String::from));
    let body = r#"
        for k in "$@"; do
            "$TL" checkout "$k" --agent "$A" --dir "$D" >/dev/null 2>&1 </dev/null
            echo "$?"
        done
    "#;
    let mut orders = Vec::new();
    let cmds = (0..AGENTS)
        .map(|i| {
            let mut order: Vec<&str> = keys.iter().map(String::as_str).collect();
            rng.shuffle(&mut order);
            let mut c = gated_sh(&ready, &dir, body, &order);
            c.env("A", format!("g{i}"));
            orders.push(order);
            c
        })
        .collect();
    let outs = run_gated(&ready, cmds);

    let mut won: Vec<BTreeSet<String>> = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        expect_code(o, 0, &format!("agent g{i}"));
        let codes: Vec<i32> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.parse().expect("exit code"))
            .collect();
        assert_eq!(codes.len(), KEYS, "agent g{i}: {}", describe(o));
        let mut mine = BTreeSet::new();
        for (k, c) in orders[i].iter().zip(&codes) {
            assert!(
                *c == GRANTED || *c == HELD,
                "agent g{i}: checkout {k:?} exited {c}"
            );
            if *c == GRANTED {
                mine.insert(k.to_string());
            }
        }
        won.push(mine);
    }
    for a in 0..AGENTS {
        for b in a + 1..AGENTS {
            let both: Vec<_> = won[a].intersection(&won[b]).collect();
            assert!(both.is_empty(), "g{a} and g{b} were both granted {both:?}");
        }
    }
    let total: usize = won.iter().map(BTreeSet::len).sum();
    assert_eq!(total, KEYS, "every key granted exactly once: {won:?}");

    let held = holders(&dir);
    assert_eq!(
        held.keys().cloned().collect::<BTreeSet<_>>(),
        keys.iter().cloned().collect::<BTreeSet<_>>()
    );
    for (i, mine) in won.iter().enumerate() {
        for k in mine {
            assert_eq!(held[k].0, format!("g{i}"), "{k}");
        }
    }
    let tokens: BTreeSet<u64> = held.values().map(|(_, t)| *t).collect();
    assert_eq!(tokens.len(), KEYS, "fencing tokens repeated: {held:?}");
    assert_eq!(assert_records_parse(&dir).len(), KEYS);
}

/// A backlog drain: 16 agent processes take keys from one list with `checkout --any`
/// until none is free, half with the list in order (the most contention: everyone
/// wants the same next key), half shuffled. Among the keys: some held by a live agent,
/// some frozen (never to be granted), some whose holder's lease ran out long ago (to be
/// taken over), one reserved for one of the drainers (only it may take it). No key and
/// no token is granted twice, every grantable key is taken, and each agent's last call
/// is refused with every key of its list, audited as one `deny`.
/// A key granted to a drainer: the key, its token and the whole output.
type Grant = (String, u64, Value);

#[test]
fn any_drain_grants_each_key_and_token_once() {
    const AGENTS: usize = 16;
    const FREE: usize = 96;
    let mut rng = Rng::from_time("any_drain");
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    fs::create_dir_all(&dir).unwrap();
    // The reservation must outlast the drain however slow the machine.
    fs::write(dir.join("config.yaml"), "handoff_grace: 1h\n").unwrap();
    let hour_ago = rfc3339(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - 3600,
    );
    let mut keys: Vec<String> = (0..FREE).map(|i| format!("job-{i:03}")).collect();
    let live: Vec<String> = (0..8).map(|i| format!("live-{i}")).collect();
    let frozen: Vec<String> = (0..4).map(|i| format!("frozen-{i}")).collect();
    let stale: Vec<String> = (0..8).map(|i| format!("stale-{i}")).collect();
    let reserved = "reserved-0".to_string();
    let reserved_for = "drainer-3";
    for k in &live {
        expect_code(&run(tl(&dir, "keeper", &["checkout", k])), 0, "live");
    }
    for k in &frozen {
        expect_code(
            &run(tl(&dir, "ops", &["freeze", k, "--for", "1h"])),
            0,
            "freeze",
        );
    }
    let mut stale_tokens = BTreeMap::new();
    for k in &stale {
        let mut c = tl(&dir, "gone", &["checkout", k, "--timeout", "1m"]);
        c.env("TASKLOCK_NOW", &hour_ago);
        let o = run(c);
        expect_code(&o, 0, "stale");
        stale_tokens.insert(k.clone(), json(&o)["checkout"]["token"].as_u64().unwrap());
    }
    expect_code(
        &run(tl(&dir, "keeper", &["checkout", &reserved])),
        0,
        "hold",
    );
    expect_code(
        &run(tl(&dir, reserved_for, &["checkout", &reserved, "--queue"])),
        HELD,
        "queue",
    );
    expect_code(
        &run(tl(&dir, "keeper", &["release", &reserved])),
        0,
        "release",
    );
    // The special keys spread through the list, live ones first so every in-order
    // agent meets them ahead of free keys.
    for (i, k) in live
        .iter()
        .chain(&frozen)
        .chain(&stale)
        .chain([&reserved])
        .enumerate()
    {
        keys.insert((i * 5).min(keys.len()), k.clone());
    }
    let grantable: BTreeSet<String> = keys
        .iter()
        .filter(|k| !live.contains(k) && !frozen.contains(k))
        .cloned()
        .collect();
    let before = audit(&dir).len();

    let handles: Vec<_> = (0..AGENTS)
        .map(|i| {
            let mut mine = keys.clone();
            if i % 2 == 1 {
                rng.shuffle(&mut mine);
            }
            let dir = dir.clone();
            std::thread::spawn(move || {
                let agent = format!("drainer-{i}");
                let asked = mine.len();
                let mut got = Vec::new();
                loop {
                    let mut c = tl(&dir, &agent, &["checkout", "--any"]);
                    c.args(&mine);
                    let o = run(c);
                    let j = json(&o);
                    match code(&o) {
                        GRANTED => {
                            assert_eq!(j["outcome"], "granted", "{agent}: {j}");
                            assert_eq!(j["checkout"]["agent"]["id"], agent.as_str());
                            let key = s(&j, "key").to_string();
                            mine.retain(|k| *k != key);
                            got.push((key, j["checkout"]["token"].as_u64().unwrap(), j));
                        }
                        HELD => {
                            assert_eq!(j["outcome"], "conflict", "{agent}: {j}");
                            let refused = j["refused"].as_array().expect("refused array");
                            let listed: Vec<&str> = refused.iter().map(|r| s(r, "key")).collect();
                            let want: Vec<&str> = mine.iter().map(String::as_str).collect();
                            assert_eq!(listed, want, "{agent}: every key, in list order");
                            assert_eq!(mine.len() + got.len(), asked);
                            return (agent, got);
                        }
                        _ => panic!("{agent}: {}", describe(&o)),
                    }
                }
            })
        })
        .collect();
    let results: Vec<(String, Vec<Grant>)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();

    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut tokens = BTreeSet::new();
    for (agent, got) in &results {
        for (k, t, j) in got {
            by_key.entry(k.clone()).or_default().push(agent.clone());
            assert!(tokens.insert(*t), "token {t} granted twice ({k})");
            if let Some(old) = stale_tokens.get(k) {
                assert_eq!(j["took_over"]["token"], *old, "{k}: {j}");
                assert!(t > old, "{k}: a new token after the old one");
            }
        }
    }
    for (k, agents) in &by_key {
        assert_eq!(agents.len(), 1, "{k} granted to {agents:?}");
    }
    let taken: BTreeSet<String> = by_key.keys().cloned().collect();
    assert_eq!(taken, grantable, "every grantable key, and nothing else");
    assert_eq!(by_key[&reserved], [reserved_for]);

    // What the store holds agrees.
    let held = holders(&dir);
    for k in &live {
        assert_eq!(held[k].0, "keeper", "{k}");
    }
    for k in &grantable {
        assert_eq!(held[k].0, by_key[k][0], "{k}");
        assert!(tokens.contains(&held[k].1), "{k}");
    }
    // One acquire per grant; one deny per refused call (each agent's last), none
    // for the keys refused on the way to a grant.
    let log = audit(&dir);
    let new = &log[before..];
    let count = |e: &str| new.iter().filter(|v| v["event"] == e).count();
    assert_eq!(count("acquire"), grantable.len());
    assert_eq!(count("deny"), AGENTS, "one deny per refused --any call");
    for v in new.iter().filter(|v| v["event"] == "deny") {
        let detail = s(v, "detail");
        assert!(
            detail.starts_with("checkout --any: none of "),
            "deny detail: {v}"
        );
    }
}

/// Files replaced again and again are never missing to a reader: a record (every
/// `renew` writes it whole, by a rename over it) and a freeze (every `freeze` writes it
/// whole, exchanged with the old file, which is then removed from `tmp/`). Readers
/// racing the replaces always find the holder's checkout under its token and the key
/// frozen; nothing is left in `tmp/` after.
#[test]
fn readers_never_find_a_file_missing_while_it_is_replaced() {
    const ROUNDS: usize = 100;
    const READERS: usize = 3;
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().join("locks");
    let o = run(tl(&dir, "holder", &["checkout", "k", "--timeout", "1h"]));
    expect_code(&o, GRANTED, "checkout");
    let token = json(&o)["checkout"]["token"].as_u64().unwrap().to_string();
    expect_code(
        &run(tl(&dir, "ops", &["freeze", "deploy", "--for", "1h"])),
        GRANTED,
        "freeze",
    );
    let ready = td.path().join("ready");
    let rounds = ROUNDS.to_string();
    let mut cmds = vec![
        gated_sh(
            &ready,
            &dir,
            r#"i=0; while [ $i -lt "$1" ]; do
                 "$TL" renew k --dir "$D" --agent holder --timeout 1h >/dev/null || exit 3
                 i=$((i+1)); done"#,
            &[&rounds],
        ),
        gated_sh(
            &ready,
            &dir,
            r#"i=0; while [ $i -lt "$1" ]; do
                 "$TL" freeze deploy --for 1h --dir "$D" --agent ops >/dev/null || exit 3
                 i=$((i+1)); done"#,
            &[&rounds],
        ),
    ];
    for _ in 0..READERS {
        cmds.push(gated_sh(
            &ready,
            &dir,
            r#"i=0; while [ $i -lt "$1" ]; do
                 "$TL" verify k --token "$2" --dir "$D" --agent holder >/dev/null 2>&1 \
                   || echo "record missed: exit $?"
                 "$TL" why deploy --json --dir "$D" --agent reader 2>&1 \
                   | grep -q '"state":"frozen"' || echo "freeze missed"
                 i=$((i+1)); done"#,
            &[&rounds, &token],
        ));
    }
    let outs = run_gated(&ready, cmds);
    expect_code(&outs[0], 0, "the renewing loop");
    expect_code(&outs[1], 0, "the freezing loop");
    for (i, o) in outs[2..].iter().enumerate() {
        expect_code(o, 0, "a reading loop");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.trim().is_empty(), "reader {i}:\n{out}");
    }
    let o = run(tl(&dir, "holder", &["verify", "k", "--token", &token]));
    expect_code(&o, GRANTED, "verify after");
    if !on_postgres() {
        let left: Vec<_> = fs::read_dir(dir.join("tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left in tmp/: {left:?}");
    }
}

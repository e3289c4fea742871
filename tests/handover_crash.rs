//! A hand-over killed at any of its file changes leaves one whole holder: `give`, a
//! session's adoption of a claim made for it (`hook session-start`), and a new agent's
//! claim that registers its process (`checkout --pid`) are each killed (strace's fault
//! injection, SIGKILL) at every write, rename, link, unlink and mkdir they make, one at a
//! time, on a copy of the lock directory. After each crash the key has exactly one
//! checkout, its holder acts on it with its own secret and no other agent's secret does,
//! the audit log is whole lines of JSON, and the command tried again does what it would
//! have done. (PostgreSQL makes each of them in one transaction: not at issue here.)
//! Linux only: it needs strace (`.ci/run` installs it).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

const A_SECRET: &str = "a-secret";
const B_SECRET: &str = "b-secret";
const CLAIM: &str = "orchestrator-secret";
const SESSION: &str = "6f1d7c2e-0000-4000-8000-00000000c0de";

/// One command of a hand-over, as an agent with a secret, and its standard input.
struct Cmd<'a> {
    agent: Option<&'a str>,
    secret: &'a str,
    args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    stdin: Option<&'a Path>,
}

/// Run `cmd` on the lock directory `dir`, under strace when `trace` names its log
/// (killed at the `when`-th call of `call` when `kill` says so). Only the command's own
/// process is traced (no `-f`): a session's start leaves a watcher running, which a
/// traced run would wait for. Returns the exit code (-9 when killed) and stdout.
fn run(dir: &Path, cmd: &Cmd, trace: Option<&Path>, kill: Option<(&str, usize)>) -> (i32, String) {
    let bin = env!("CARGO_BIN_EXE_tasklock");
    let mut c = match trace {
        Some(log) => {
            let mut c = strace::strace(log, false, kill);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    c.arg("--dir").arg(dir);
    if let Some(a) = cmd.agent {
        c.args(["--agent", a]);
    }
    c.args(cmd.args)
        .env("TASKLOCK_NOW", T0)
        .env("TASKLOCK_SECRET", cmd.secret)
        .envs(cmd.env.iter().copied())
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .env_remove("TASKLOCK_URL")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match cmd.stdin {
        Some(p) => c.stdin(std::fs::File::open(p).unwrap()),
        None => c.stdin(Stdio::null()),
    };
    let out = c
        .output()
        .expect("strace is needed (apt-get install strace; .ci/run installs it)");
    let code = strace::exit_code(out.status, &format!("{:?}", cmd.args));
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How many times `cmd` makes each call of [`strace::CHANGES`], run whole on a copy of `template`.
fn calls(template: &Path, cmd: &Cmd) -> BTreeMap<String, usize> {
    let t = strace::copy_dir(template);
    let log = t.path().join("strace.log");
    let (code, out) = run(&t.path().join(".locks"), cmd, Some(&log), None);
    assert_eq!(code, 0, "{:?} without a crash: {out}", cmd.args);
    strace::changes_made(&log)
}

/// `tasklock ARGS --json` as `agent` with `secret` on `dir`: the exit code and JSON.
fn tl(dir: &Path, agent: &str, secret: &str, args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let cmd = Cmd {
        agent: Some(agent),
        secret,
        args: &all,
        env: &[],
        stdin: None,
    };
    let (code, out) = run(dir, &cmd, None, None);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null))
}

/// The one checkout of `key` in `dir` (failing when there are none or several).
fn the_checkout(dir: &Path, key: &str) -> Result<Value, String> {
    let (code, l) = tl(dir, "observer", "x", &["list"]);
    if code != 0 {
        return Err(format!("list exits {code}: {l}"));
    }
    let rows: Vec<&Value> = l["checkouts"]
        .as_array()
        .ok_or_else(|| format!("list: {l}"))?
        .iter()
        .filter(|c| c["key"] == key)
        .collect();
    match rows.as_slice() {
        [one] => Ok((*one).clone()),
        _ => Err(format!("{} checkouts of {key}: {l}", rows.len())),
    }
}

/// Every line of the audit log is a whole JSON object.
fn audit_whole(dir: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default();
    for line in text.lines() {
        if serde_json::from_str::<Value>(line).is_err() {
            return Err(format!("a cut audit line: {line:?}"));
        }
    }
    Ok(())
}

/// `holder` acts on `key` with its own secret (verify under the checkout's token) and
/// `other` with its own does not.
fn only_holder_acts(
    dir: &Path,
    key: &str,
    holder: (&str, &str),
    other: (&str, &str),
) -> Result<(), String> {
    let c = the_checkout(dir, key)?;
    let token = c["token"].to_string();
    let (code, j) = tl(dir, holder.0, holder.1, &["verify", key, "--token", &token]);
    if code != 0 {
        return Err(format!(
            "{} cannot verify its own checkout ({code}): {j}",
            holder.0
        ));
    }
    let (code, j) = tl(dir, other.0, other.1, &["verify", key, "--token", &token]);
    if code != 4 {
        return Err(format!(
            "{} verifies {}'s checkout ({code}): {j}",
            other.0, holder.0
        ));
    }
    Ok(())
}

/// Kill `cmd` at each of its file changes on a copy of `template`, then `check` the copy;
/// every failure, named by the crash point.
fn crash_everywhere(
    template: &Path,
    cmd: &Cmd,
    check: impl Fn(&Path) -> Result<(), String>,
) -> (usize, Vec<String>) {
    let calls = calls(template, cmd);
    assert!(!calls.is_empty(), "{:?} changes no file", cmd.args);
    let mut points = 0;
    let mut failures = Vec::new();
    for (call, n) in &calls {
        for when in 1..=*n {
            points += 1;
            let t = strace::copy_dir(template);
            let dir = t.path().join(".locks");
            let log = t.path().join("strace.log");
            let (code, out) = run(&dir, cmd, Some(&log), Some((call, when)));
            let at = format!("{:?} killed at {call} #{when} (exit {code})", cmd.args);
            if code != -9 && code != 0 {
                failures.push(format!("{at}: {out}"));
                continue;
            }
            if let Err(e) = audit_whole(&dir).and_then(|()| check(&dir)) {
                failures.push(format!("{at}: {e}"));
            }
        }
    }
    (points, failures)
}

#[test]
fn a_give_killed_at_any_file_change_leaves_one_whole_holder() {
    let e = Env::new();
    let r = e.run_env(Some("b"), &["heartbeat"], &[("TASKLOCK_SECRET", B_SECRET)]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = e.run_env(
        Some("a"),
        &["checkout", "k", "--path", "src/**"],
        &[("TASKLOCK_SECRET", A_SECRET)],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let give = Cmd {
        agent: Some("a"),
        secret: A_SECRET,
        args: &["give", "k", "--to", "b"],
        env: &[],
        stdin: None,
    };
    let (points, failures) = crash_everywhere(&e.dir(), &give, |dir| {
        let c = the_checkout(dir, "k")?;
        let a = ("a", A_SECRET);
        let b = ("b", B_SECRET);
        match c["agent"]["id"].as_str() {
            Some("a") => {
                only_holder_acts(dir, "k", a, b)?;
                // Not given yet: the giver gives it again, and it is b's.
                let (code, j) = tl(dir, "a", A_SECRET, &["give", "k", "--to", "b"]);
                if code != 0 {
                    return Err(format!("the give tried again exits {code}: {j}"));
                }
                only_holder_acts(dir, "k", b, a)
            }
            Some("b") => only_holder_acts(dir, "k", b, a),
            _ => Err(format!("held by neither: {c}")),
        }?;
        let c = the_checkout(dir, "k")?;
        if c["paths"] != json!(["src/**"]) {
            return Err(format!("the paths did not go with it: {c}"));
        }
        Ok(())
    });
    assert!(points >= 3, "only {points} crash points");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_adoption_killed_at_any_file_change_leaves_the_claim_whole() {
    let e = Env::new();
    let r = e.run_env(
        Some(SESSION),
        &["checkout", "issue-42", "--timeout", "20s", "--json"],
        &[("TASKLOCK_SECRET", CLAIM)],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let claim_token = r.json()["checkout"]["token"].as_u64().unwrap();
    let proc_ = AgentProcess::start();
    let pid = proc_.pid();
    let input = e.tmp.path().join("session-start.json");
    std::fs::write(
        &input,
        json!({"session_id": SESSION, "cwd": e.tmp.path(), "hook_event_name": "SessionStart"})
            .to_string(),
    )
    .unwrap();
    let start = Cmd {
        agent: None,
        secret: CLAIM,
        args: &["hook", "session-start"],
        env: &[("CLAUDE_PID", &pid)],
        stdin: Some(&input),
    };
    let (points, failures) = crash_everywhere(&e.dir(), &start, |dir| {
        let c = the_checkout(dir, "issue-42")?;
        if c["agent"]["id"] != SESSION || c["token"].as_u64() != Some(claim_token) {
            return Err(format!("not the session's claim under its token: {c}"));
        }
        // Either still the claim (the claim's secret acts on it) or wholly adopted (the
        // session's process recorded, the claim's secret refused): never a mix.
        let (code, j) = tl(dir, SESSION, CLAIM, &["renew", "issue-42"]);
        let (_, s) = tl(dir, "observer", "x", &["status", "issue-42"]);
        match s["checkout"]["agent"]["pid"].as_u64() {
            None if code == 0 => Ok(()),
            Some(p) if p.to_string() == pid && code == 4 => Ok(()),
            _ => Err(format!(
                "renew with the claim's secret exits {code} ({j}) on {s}"
            )),
        }
    });
    assert!(points >= 3, "only {points} crash points");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_claim_that_registers_killed_at_any_file_change_leaves_each_key_one_holder() {
    let e = Env::new();
    let r = e.run(Some("o"), &["backlog", "add", "t1", "t2"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let proc_ = AgentProcess::start();
    let pid = proc_.pid();
    let args = ["checkout", "--next", "--pid", &pid];
    let claim = Cmd {
        agent: Some("new-agent"),
        secret: A_SECRET,
        args: &args,
        env: &[],
        stdin: None,
    };
    let (points, failures) = crash_everywhere(&e.dir(), &claim, |dir| {
        // Tried again, the agent gets a key (another one when the crash had made its
        // claim already: that one stays the agent's, as any claim it never learned of)
        // and is registered with its process.
        let (code, j) = tl(dir, "new-agent", A_SECRET, &args);
        if code != 0 {
            return Err(format!("the claim tried again exits {code}: {j}"));
        }
        let (_, agents) = tl(dir, "observer", "x", &["agents"]);
        let me = agents["agents"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["id"] == "new-agent"))
            .ok_or_else(|| format!("not registered: {agents}"))?;
        if me["pid"].as_u64().map(|p| p.to_string()) != Some(pid.clone()) {
            return Err(format!("registered without its process: {me}"));
        }
        // Another agent takes what is left; then everything is claimed (exit 2).
        loop {
            let (code, j) = tl(dir, "other", B_SECRET, &["checkout", "--next"]);
            match code {
                0 => continue,
                2 => break,
                _ => return Err(format!("the other agent's claim exits {code}: {j}")),
            }
        }
        // Each key is held once, by one of the two, and only its holder acts on it.
        for key in ["t1", "t2"] {
            let c = the_checkout(dir, key)?;
            let mine = ("new-agent", A_SECRET);
            let other = ("other", B_SECRET);
            match c["agent"]["id"].as_str() {
                Some("new-agent") => only_holder_acts(dir, key, mine, other)?,
                Some("other") => only_holder_acts(dir, key, other, mine)?,
                _ => return Err(format!("{key} held by neither: {c}")),
            }
        }
        Ok(())
    });
    assert!(points >= 3, "only {points} crash points");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

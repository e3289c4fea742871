//! Ownership proof: a checkout bound to its holder's secret cannot be acted on by a
//! caller that only names the holder; `--force` is for people and operators; hooks do not
//! act for a session on the strength of JSON naming it.

#[macro_use]
mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

const SECRET: &str = "holder-secret-1";
const OTHER: &str = "someone-elses-secret";

/// Run as `agent` with `secret` in TASKLOCK_SECRET (None: unset).
fn as_(e: &Env, agent: &str, secret: Option<&str>, args: &[&str]) -> Run {
    match secret {
        Some(s) => e.run_env(Some(agent), args, &[("TASKLOCK_SECRET", s)]),
        None => e.run(Some(agent), args),
    }
}

fn refused_events(e: &Env) -> Vec<Value> {
    audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == "refused")
        .collect()
}

fn record(e: &Env, key: &str) -> Value {
    Stored::Record(key).read(&e.dir())
}

/// Does the store hold a checkout of `key`?
fn held(dir: &std::path::Path, key: &str) -> bool {
    Stored::Record(key).exists(dir)
}

#[test]
fn a_checkout_bound_to_a_secret_refuses_every_caller_without_it() {
    let e = Env::new();
    let r = as_(&e, "a", Some(SECRET), &["checkout", "k", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["checkout"]["proven"], true, "{}", r.text());
    let rec = record(&e, "k");
    let raw = Stored::Record("k").raw(&e.dir());
    assert!(!raw.contains(SECRET), "the secret is never stored: {raw}");
    assert_eq!(rec["owner"]["sha256"].as_str().unwrap().len(), 64, "{rec}");
    let token = rec["token"].as_u64().unwrap().to_string();

    // Every command that acts for the holder, by a caller naming it: without a secret and
    // with another one. Each is refused with exit 4 and audited; nothing changes.
    let attempts: [&[&str]; 5] = [
        &["release", "k", "--json"],
        &["renew", "k", "--json"],
        &["note", "k", "sneaky", "--json"],
        &["verify", "k", "--token", &token, "--json"],
        &["checkout", "k", "--json"],
    ];
    let mut expected_refusals = 0;
    for secret in [None, Some(OTHER)] {
        for args in attempts {
            let r = as_(&e, "a", secret, args);
            assert_eq!(r.code, 4, "{args:?} with {secret:?}: {}", r.text());
            let j = r.json();
            let outcome = j
                .get("outcome")
                .or_else(|| j["results"][0].get("outcome"))
                .cloned()
                .unwrap_or(Value::Null);
            assert_eq!(outcome, "secret_refused", "{args:?}: {j}");
            expected_refusals += 1;
        }
    }
    let refused = refused_events(&e);
    assert_eq!(refused.len(), expected_refusals, "{refused:?}");
    assert!(refused.iter().any(|v| v["reason"] == "no_secret"));
    assert!(refused.iter().any(|v| v["reason"] == "wrong_secret"));
    assert!(refused.iter().all(|v| v["key"] == "k" && v["agent"] == "a"));
    assert_eq!(record(&e, "k"), rec, "the checkout is untouched");
    let status = e.ok("b", &["status", "k", "--json"]).json();
    assert_eq!(status["notes"], json!([]), "no note was added: {status}");

    // The holder, with its secret, does all of it (release last).
    for args in attempts.iter().rev() {
        let r = as_(&e, "a", Some(SECRET), args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.text());
    }
    assert!(!held(&e.dir(), "k"), "released by its holder");
}

#[test]
fn refusals_say_who_holds_it_and_what_to_do() {
    let e = Env::new();
    assert_eq!(as_(&e, "a", Some(SECRET), &["checkout", "k"]).code, 0);
    let release = as_(&e, "a", None, &["release", "k"]);
    snap!(e, "secret_refused_release", release);
    let checkout = as_(&e, "a", Some(OTHER), &["checkout", "k"]);
    snap!(e, "secret_refused_checkout", checkout);
    for (name, args) in [
        ("secret_refused_renew", &["renew", "k"][..]),
        ("secret_refused_note", &["note", "k", "x"][..]),
        (
            "secret_refused_verify",
            &["verify", "k", "--token", "1"][..],
        ),
    ] {
        let r = as_(&e, "a", None, args);
        snap!(e, name, r);
    }
    // A force by an agent: refused, with the reason and the honest next step.
    let r = e.run(Some("b"), &["release", "k", "--force"]);
    snap!(e, "force_refused", r);
}

#[test]
fn checkouts_without_a_secret_work_as_before_and_show_as_unproven() {
    let e = Env::new();
    e.ok("a", &["checkout", "k"]);
    let j = e.ok("a", &["status", "k", "--json"]).json();
    assert_eq!(j["checkout"]["proven"], false, "{j}");
    assert!(record(&e, "k").get("owner").is_none());
    let list = e.ok("b", &["list"]).stdout;
    assert!(list.contains("| a (unproven) |"), "{list}");
    let status = e.ok("b", &["status", "k"]).stdout;
    assert!(status.contains("- Ownership: unproven"), "{status}");
    // Anyone naming the holder may act for it, as before secrets existed.
    e.ok("a", &["note", "k", "checkpoint"]);
    e.ok("a", &["release", "k"]);
}

#[test]
fn heartbeat_and_inbox_of_an_agent_bound_to_a_secret_need_it() {
    let e = Env::new();
    // The first beat with a secret binds the agent.
    assert_eq!(as_(&e, "a", Some(SECRET), &["heartbeat"]).code, 0);
    for args in [&["heartbeat"][..], &["inbox", "--peek"][..]] {
        for secret in [None, Some(OTHER)] {
            let r = as_(&e, "a", secret, &[args, &["--json"]].concat());
            assert_eq!(r.code, 4, "{args:?} {secret:?}: {}", r.text());
            assert_eq!(r.json()["error"]["kind"], "secret_refused", "{}", r.text());
        }
    }
    assert_eq!(refused_events(&e).len(), 4);
    assert_eq!(as_(&e, "a", Some(SECRET), &["heartbeat"]).code, 0);
    assert_eq!(as_(&e, "a", Some(SECRET), &["inbox"]).code, 0);
}

#[test]
fn force_is_for_people_and_operators_unless_the_holder_is_gone() {
    let mut e = Env::new();
    assert_eq!(
        as_(
            &e,
            "a",
            Some(SECRET),
            &["checkout", "k", "--timeout", "10m"]
        )
        .code,
        0
    );
    // An agent (no terminal, no operator secret) cannot take a live checkout away.
    let r = e.run(Some("b"), &["release", "k", "--force", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    let j = r.json();
    assert_eq!(j["results"][0]["outcome"], "not_holder", "{j}");
    assert!(
        j["results"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("--force refused"),
        "{j}"
    );
    let md = e.run(Some("b"), &["release", "k", "--force"]);
    assert!(md.stdout.contains("checkout k --queue"), "{}", md.text());
    assert!(held(&e.dir(), "k"));
    let refused = refused_events(&e);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|v| v["reason"] == "force" && v["by"] == "b")
    );

    // A wrong operator secret is no operator secret.
    e.as_operator();
    let r = e.run_env(
        Some("b"),
        &["release", "k", "--force"],
        &[("TASKLOCK_OPERATOR_SECRET", "guess")],
    );
    assert_eq!(r.code, 4, "{}", r.text());

    // The operator may, and the audit log says who and why.
    let r = e.run(
        Some("b"),
        &["release", "k", "--force", "--note", "stuck for an hour"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let ev = audit(&e.dir())
        .into_iter()
        .find(|v| v["event"] == "force_release")
        .expect("audited");
    assert_eq!(ev["by"], "b");
    assert_eq!(ev["reason"], "stuck for an hour");
    assert!(
        ev["detail"]
            .as_str()
            .unwrap()
            .contains("the operator secret"),
        "{ev}"
    );

    // A holder whose lease ran out can be forced by anyone.
    let mut e = Env::new();
    assert_eq!(
        as_(&e, "a", Some(SECRET), &["checkout", "k", "--timeout", "1m"]).code,
        0
    );
    e.at("2026-01-01T00:05:00Z");
    let r = e.run(Some("b"), &["release", "k", "--force"]);
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn a_person_at_a_terminal_may_force() {
    let e = Env::new();
    assert_eq!(as_(&e, "a", Some(SECRET), &["checkout", "k"]).code, 0);
    // util-linux `script` gives the command a real pseudo-terminal as its stdin.
    let cmdline = format!(
        "{} --dir {} --agent person release k --force",
        env!("CARGO_BIN_EXE_tasklock"),
        e.dir().display()
    );
    let mut script = Command::new("script");
    use_store(&mut script, &e.dir());
    let out = script
        .args(["-qec", &cmdline, "/dev/null"])
        .env("TASKLOCK_NOW", &e.now)
        .env_remove("TASKLOCK_SECRET")
        .env_remove("TASKLOCK_OPERATOR_SECRET")
        .stdin(Stdio::null())
        .output()
        .expect("util-linux script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!held(&e.dir(), "k"), "{text}");
    let ev = audit(&e.dir())
        .into_iter()
        .find(|v| v["event"] == "force_release")
        .expect("audited");
    assert!(
        ev["detail"]
            .as_str()
            .unwrap()
            .contains("a person at a terminal"),
        "{ev}"
    );
}

#[test]
fn another_unix_user_cannot_take_or_end_a_checkout_bound_to_a_secret() {
    let Some(user) = TestUser::create_or_skip("tl-own", false) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join(".locks");
    let run = |cmd: &mut Command, args: &[&str]| {
        use_store(cmd, &dir);
        if cmd.get_envs().all(|(k, _)| k != "TASKLOCK_SECRET") {
            cmd.env_remove("TASKLOCK_SECRET");
        }
        let out = cmd
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .env("TASKLOCK_NOW", T0)
            .env_remove("TASKLOCK_OPERATOR_SECRET")
            .env_remove("CLAUDE_CODE_SESSION_ID")
            .env_remove("CODEX_THREAD_ID")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let bin = env!("CARGO_BIN_EXE_tasklock");
    let (code, text) = run(
        Command::new(bin).env("TASKLOCK_SECRET", SECRET),
        &["checkout", "k", "--agent", "a"],
    );
    assert_eq!(code, 0, "{text}");
    // Open the lock directory to the other user, as a shared setup would: its files
    // are readable, and still no one without the secret can act for the holder. (On
    // PostgreSQL there is no directory to open: the other user reaches the same schema
    // through the URL.)
    if !on_postgres() {
        chmod_r(&dir);
    }
    for args in [
        &["release", "k", "--agent", "a"][..],
        &["release", "k", "--agent", "a", "--force"][..],
        &["checkout", "k", "--agent", "a"][..],
        &["renew", "k", "--agent", "a"][..],
    ] {
        let (code, text) = run(&mut user.command(bin), args);
        assert_eq!(code, 4, "{args:?} as another user: {text}");
    }
    let rec = Stored::Record("k").read(&dir);
    assert_eq!(rec["agent"]["id"], "a", "still a's: {rec}");
}

fn chmod_r(dir: &std::path::Path) {
    let status = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn hook_input_naming_another_session_does_not_act_for_it() {
    let e = Env::new();
    // Session s1 starts under its own (stand-in) process.
    let mut session = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = session.id().to_string();
    let hook = |event: &str, session_id: &str, extra: &[(&str, &str)]| {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.arg("--dir")
            .arg(e.dir())
            .args(["hook", event])
            .envs(extra.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let input = json!({
            "session_id": session_id,
            "cwd": e.tmp.path(),
            "hook_event_name": event,
        });
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "hooks never fail the agent");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let env_file = e.tmp.path().join("env.sh");
    let env_path = env_file.to_str().unwrap();
    let err = hook(
        "session-start",
        "s1",
        &[("CLAUDE_PID", &pid), ("CLAUDE_ENV_FILE", env_path)],
    );
    assert!(err.is_empty(), "{err}");
    let secret = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("export TASKLOCK_SECRET=")
                .map(str::to_string)
        })
        .expect("the session's secret was exported");
    assert_eq!(
        as_(&e, "s1", Some(&secret), &["checkout", "k"]).code,
        0,
        "the session's Bash calls hold its secret"
    );

    // Another process (here: the test, not s1's process) pipes JSON naming s1.
    let err = hook("session-end", "s1", &[]);
    assert!(err.contains("not the holder"), "{err}");
    assert!(held(&e.dir(), "k"), "s1 keeps its checkout");
    let err = hook("session-start", "s1", &[]);
    assert!(
        err.contains("not the holder"),
        "no takeover of a live session: {err}"
    );
    let entry = Stored::Agent("s1").read(&e.dir());
    assert_eq!(entry["pid"].to_string(), pid, "still s1's process: {entry}");

    // With the session's secret (its own process's environment), the hook acts.
    let err = hook("session-end", "s1", &[("TASKLOCK_SECRET", &secret)]);
    assert!(err.is_empty(), "{err}");
    assert!(!held(&e.dir(), "k"), "released at session end");
    session.kill().unwrap();
    session.wait().unwrap();
}

/// `release --all`, with `--force` too (by the operator, or a person at a terminal),
/// ends what the caller holds and leaves its queues: it takes nothing from anyone else.
#[test]
fn release_all_force_leaves_the_queues_and_takes_nothing_from_others() {
    let mut e = Env::new();
    e.as_operator();
    e.ok("Z", &["checkout", "q2"]);
    let token = e.run(None, &["status", "q2", "--json"]).json()["checkout"]["token"].clone();
    assert_eq!(e.run(Some("orch"), &["checkout", "q2", "--queue"]).code, 2);
    e.ok("orch", &["checkout", "mine"]);

    let r = e.run(Some("orch"), &["release", "--all", "--force", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    let outcomes: Vec<(&str, &str)> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes, [("mine", "released"), ("q2", "left_queue")]);

    let s = e.run(None, &["status", "q2", "--json"]).json();
    assert_eq!(s["checkout"]["agent"]["id"], "Z", "Z still holds q2");
    assert_eq!(s["checkout"]["token"], token, "under the same checkout");
    assert_eq!(s["queue"]["length"], 0, "orch is in no queue of it: {s}");
    assert_eq!(s["queue"]["reserved_for"], Value::Null);
    assert!(
        !audit(&e.dir())
            .iter()
            .any(|v| v["event"] == "force_release"),
        "nothing was forced"
    );
}

//! An orchestrator claims a key before it starts the agent that will work on it: for a
//! session id it chooses (Claude Code's `--session-id`), adopted by that session when it
//! starts with the claim's secret; or for itself, then given (`tasklock give`) to a
//! session named only once it runs (Codex's thread id).

#[macro_use]
mod common;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const CLAIM: &str = "orchestrator-secret-1";
const SESSION: &str = "6f1d7c2e-0000-4000-8000-000000000001";

fn as_(e: &Env, agent: &str, secret: Option<&str>, args: &[&str]) -> Run {
    match secret {
        Some(s) => e.run_env(Some(agent), args, &[("TASKLOCK_SECRET", s)]),
        None => e.run(Some(agent), args),
    }
}

/// Run `tasklock hook session-start` for `session` as a session started with `secret`
/// in its environment, under the stand-in process `pid`; the hook's output (parsed) and
/// the secret it exported for the session's Bash calls.
fn session_start(e: &Env, session: &str, secret: Option<&str>, pid: &str) -> (Value, String) {
    session_start_as(e, session, secret, pid, "/tmp/session.jsonl")
}

/// As [`session_start`], with the hook input's `transcript_path` (Codex's are rollout
/// files, `…/rollout-….jsonl`).
fn session_start_as(
    e: &Env,
    session: &str,
    secret: Option<&str>,
    pid: &str,
    transcript: &str,
) -> (Value, String) {
    let env_file = e.tmp.path().join(format!("env-{session}.sh"));
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir")
        .arg(e.dir())
        .args(["hook", "session-start"])
        .env("CLAUDE_PID", pid)
        .env("CLAUDE_ENV_FILE", &env_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(s) = secret {
        cmd.env("TASKLOCK_SECRET", s);
    }
    let mut child = cmd.spawn().unwrap();
    let input = json!({"session_id": session, "cwd": e.tmp.path(), "hook_event_name": "SessionStart", "transcript_path": transcript});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "hooks never fail the agent");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    let exported = std::fs::read_to_string(&env_file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("export TASKLOCK_SECRET=")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (v, exported)
}

fn events(e: &Env, name: &str) -> Vec<Value> {
    audit(&e.dir())
        .into_iter()
        .filter(|v| v["event"] == name)
        .collect()
}

#[test]
fn a_claim_for_a_session_is_adopted_by_the_session_started_with_its_secret() {
    let e = Env::new();
    // The orchestrator claims for the session it is about to start, with a short lease.
    let r = as_(
        &e,
        SESSION,
        Some(CLAIM),
        &["checkout", "issue-42", "--timeout", "20s", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let claim = r.json();
    assert_eq!(claim["checkout"]["proven"], true);
    let token = claim["checkout"]["token"].as_u64().unwrap();
    // A process that names the session but has not the claim's secret is refused.
    let r = as_(&e, SESSION, None, &["release", "issue-42", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    assert_eq!(r.json()["results"][0]["outcome"], "secret_refused");

    // The session starts with the secret in its environment: its SessionStart adopts it.
    let mut proc_ = AgentProcess::start();
    let (out, own) = session_start(&e, SESSION, Some(CLAIM), &proc_.pid());
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    assert!(context.contains("You hold: `issue-42`."), "{context}");
    assert!(
        context.contains("Claimed for this session before it started"),
        "{context}"
    );
    assert!(
        context.contains("`tasklock release KEY --done`"),
        "{context}"
    );
    assert!(
        !own.is_empty() && own != CLAIM,
        "a secret of the session's own"
    );

    let adopt = events(&e, "adopt");
    assert_eq!(adopt.len(), 1, "{adopt:?}");
    assert_eq!(adopt[0]["key"], "issue-42");
    assert_eq!(adopt[0]["agent"], SESSION);
    assert_eq!(adopt[0]["token"], token, "the claim's token stays");
    let rec = Stored::Record("issue-42").read(&e.dir());
    assert_eq!(rec["token"], token);
    assert_eq!(rec["agent"]["pid"].to_string(), proc_.pid(), "{rec}");
    // The lease is the configured one from now (30m), not the claim's 20s.
    let status = e.ok("x", &["status", "issue-42", "--json"]).json();
    assert_eq!(
        status["checkout"]["expires_at"], "2026-01-01T00:30:00Z",
        "{status}"
    );

    // From now on the session's own secret acts on it; the claim's no longer does.
    let r = as_(&e, SESSION, Some(CLAIM), &["renew", "issue-42", "--json"]);
    assert_eq!(r.code, 4, "{}", r.text());
    let r = as_(&e, SESSION, Some(&own), &["release", "issue-42", "--done"]);
    assert_eq!(r.code, 0, "{}", r.text());
    proc_.kill();
}

#[test]
fn a_claim_from_the_backlog_is_adopted_and_done_by_the_session() {
    let e = Env::new();
    e.ok("orch", &["backlog", "add", "task-1", "task-2"]);
    let r = as_(
        &e,
        SESSION,
        Some(CLAIM),
        &["checkout", "--next", "--timeout", "20s", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["key"], "task-1", "{}", r.text());
    let mut proc_ = AgentProcess::start();
    let (out, own) = session_start(&e, SESSION, Some(CLAIM), &proc_.pid());
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(
        context
            .contains("now yours (bound to this session's secret, renewed by its hooks): `task-1`"),
        "{context}"
    );
    let r = as_(&e, SESSION, Some(&own), &["release", "task-1", "--done"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let b = e.ok("orch", &["backlog", "--json"]).json();
    assert_eq!(b["ready"], 1, "only task-2 is left: {b}");
    assert_eq!(b["claimed"], 0, "{b}");
    proc_.kill();
}

#[test]
fn a_codex_thread_adopts_a_claim_unbound_as_its_own_checkouts_are() {
    let e = Env::new();
    let r = as_(
        &e,
        SESSION,
        Some(CLAIM),
        &["checkout", "k", "--timeout", "20s"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let mut proc_ = AgentProcess::start();
    let rollout = "/home/u/.codex/sessions/2026/01/01/rollout-2026-01-01T00-00-00-x.jsonl";
    let (out, _) = session_start_as(&e, SESSION, Some(CLAIM), &proc_.pid(), rollout);
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(context.contains("now yours"), "{context}");
    // Its commands carry no secret: the checkout is unbound, and they can release it.
    let s = e.ok("x", &["status", "k", "--json"]).json();
    assert_eq!(s["checkout"]["proven"], false, "{s}");
    assert_eq!(s["checkout"]["expires_at"], "2026-01-01T00:30:00Z", "{s}");
    let r = as_(&e, SESSION, None, &["release", "k", "--done"]);
    assert_eq!(r.code, 0, "{}", r.text());
    proc_.kill();
}

#[test]
fn a_session_without_the_claims_secret_does_not_adopt_it_and_the_claim_runs_out() {
    let mut e = Env::new();
    let r = as_(
        &e,
        SESSION,
        Some(CLAIM),
        &["checkout", "issue-42", "--timeout", "20s"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    // Something starts a "session" with that id but without the secret (or another).
    let mut proc_ = AgentProcess::start();
    let (out, own) = session_start(&e, SESSION, Some("a-guess"), &proc_.pid());
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(!context.contains("Claimed for this session"), "{context}");
    assert!(events(&e, "adopt").is_empty());
    for secret in [None, Some(own.as_str()), Some("a-guess")] {
        let r = as_(&e, SESSION, secret, &["release", "issue-42", "--json"]);
        assert_eq!(r.code, 4, "{secret:?}: {}", r.text());
    }
    // Its beats do not keep the claim alive: past its 20s (and the grace), it is free.
    e.at("2026-01-01T00:00:15Z");
    let beat = as_(&e, SESSION, Some(&own), &["heartbeat", "--json"]).json();
    assert_eq!(beat["renewed"], json!([]), "{beat}");
    e.at("2026-01-01T00:01:00Z");
    let r = e.run(Some("orchestrator-2"), &["checkout", "issue-42", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["took_over"]["reason"], "timeout", "{}", r.text());
    proc_.kill();
}

#[test]
fn a_claim_nobody_adopts_frees_itself_and_a_second_orchestrator_is_refused_before() {
    let mut e = Env::new();
    e.ok(
        "session-a",
        &[
            "checkout",
            "issue-7",
            "--timeout",
            "20s",
            "--reason",
            "spawning",
        ],
    );
    // A second orchestrator, for its own session: refused (exit 2) before it spawns.
    e.at("2026-01-01T00:00:10Z");
    let r = e.run(
        Some("session-b"),
        &["checkout", "issue-7", "--timeout", "20s"],
    );
    assert_eq!(r.code, 2, "{}", r.text());
    assert!(r.stdout.contains("session-a"), "{}", r.text());
    // The spawn of session-a failed: nobody adopts it, the short lease ends.
    e.at("2026-01-01T00:01:00Z");
    let r = e.run(Some("session-b"), &["checkout", "issue-7", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn many_orchestrators_racing_to_claim_one_key_for_their_sessions_get_one_winner() {
    let e = Env::new();
    e.ok("warm-up", &["list"]);
    let n = 12;
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = base_cmd(&e.now);
            use_store(&mut cmd, &e.dir());
            cmd.arg("--dir")
                .arg(e.dir())
                .args(["checkout", "issue-9", "--timeout", "20s", "--json"])
                .args(["--agent", &format!("session-{i}")])
                .env("TASKLOCK_SECRET", format!("secret-{i}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|&&c| c == 2).count(),
        n - 1,
        "{codes:?}"
    );
    let acquired = events(&e, "acquire");
    assert_eq!(acquired.len(), 1, "{acquired:?}");
}

/// Register `agent` with `secret` (a session's beat).
fn register(e: &Env, agent: &str, secret: &str) {
    let r = as_(e, agent, Some(secret), &["heartbeat"]);
    assert_eq!(r.code, 0, "{}", r.text());
}

#[test]
fn give_hands_the_checkout_to_a_live_agent_under_a_new_token() {
    let e = Env::new();
    register(&e, "thread-1", "thread-secret");
    let r = as_(
        &e,
        "orch",
        Some(CLAIM),
        &[
            "checkout",
            "issue-42",
            "--reason",
            "for codex",
            "--timeout",
            "1m",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let r = as_(
        &e,
        "orch",
        Some(CLAIM),
        &["give", "issue-42", "--to", "thread-1", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["command"], "give");
    assert_eq!(j["outcome"], "given");
    assert_eq!(j["to"], "thread-1");
    assert_eq!(j["previous_token"], 1);
    assert_eq!(j["checkout"]["token"], 2, "a new token: {j}");
    assert_eq!(j["checkout"]["agent"]["id"], "thread-1");
    assert_eq!(j["checkout"]["reason"], "for codex");
    assert_eq!(
        j["checkout"]["proven"], true,
        "bound to the receiver's secret"
    );
    assert_eq!(
        j["checkout"]["expires_at"], "2026-01-01T00:30:00Z",
        "the receiver's lease: the configured one"
    );

    let give = events(&e, "give");
    assert_eq!(give.len(), 1, "{give:?}");
    assert_eq!(give[0]["agent"], "orch");
    assert_eq!(give[0]["holder"], "thread-1");
    assert_eq!(give[0]["token"], 2);
    assert_eq!(give[0]["detail"], "token 1 → 2");

    // The receiver is told, and acts with its own secret; the giver cannot any more.
    let inbox = as_(&e, "thread-1", Some("thread-secret"), &["inbox", "--json"]).json();
    let msgs = inbox["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{inbox}");
    assert_eq!(msgs[0]["type"], "given");
    assert_eq!(msgs[0]["key"], "issue-42");
    assert_eq!(msgs[0]["from"], "orch");
    let r = as_(
        &e,
        "orch",
        Some(CLAIM),
        &["verify", "issue-42", "--token", "1"],
    );
    assert_eq!(r.code, 4, "{}", r.text());
    let r = as_(&e, "orch", Some(CLAIM), &["release", "issue-42"]);
    assert_eq!(r.code, 4, "{}", r.text());
    let r = as_(&e, "thread-1", None, &["release", "issue-42"]);
    assert_eq!(r.code, 4, "not without the receiver's secret: {}", r.text());
    let r = as_(
        &e,
        "thread-1",
        Some("thread-secret"),
        &["verify", "issue-42", "--token", "2"],
    );
    assert_eq!(r.code, 0, "{}", r.text());

    // Handed back the same way, and the markdown says so.
    register(&e, "orch", CLAIM);
    let r = as_(
        &e,
        "thread-1",
        Some("thread-secret"),
        &["give", "issue-42", "--to", "orch"],
    );
    snap!(e, "give_given", r);
}

#[test]
fn give_is_refused_for_unknown_or_dead_receivers_and_for_non_holders() {
    let mut e = Env::new();
    as_(&e, "orch", Some(CLAIM), &["checkout", "k"]);
    register(&e, "b", "b-secret");
    let give = |e: &Env, who: &str, secret: Option<&str>, to: &str| {
        as_(e, who, secret, &["give", "k", "--to", to, "--json"])
    };
    let r = give(&e, "orch", Some(CLAIM), "nobody");
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (3, json!("unknown_agent"))
    );
    snap!(
        e,
        "give_unknown",
        e.run_env(
            Some("orch"),
            &["give", "k", "--to", "nobody"],
            &[("TASKLOCK_SECRET", CLAIM)]
        )
    );
    let r = give(&e, "orch", None, "b");
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (4, json!("secret_refused"))
    );
    let r = give(&e, "c", None, "b");
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (4, json!("not_holder"))
    );
    snap!(
        e,
        "give_not_holder",
        e.run(Some("c"), &["give", "k", "--to", "b"])
    );
    let r = give(&e, "orch", Some(CLAIM), "orch");
    assert_eq!(r.code, 64, "{}", r.text());
    let r = e.run(Some("orch"), &["give", "free-key", "--to", "b", "--json"]);
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (3, json!("no_such_checkout"))
    );

    // A receiver whose session ended holds nothing, and is given nothing.
    let r = e.run_env(
        Some("b"),
        &["heartbeat", "--pid", &AgentProcess::start().pid()],
        &[("TASKLOCK_SECRET", "b-secret")],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    // (its stand-in process is gone: dropped above)
    let r = give(&e, "orch", Some(CLAIM), "b");
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (3, json!("agent_dead"))
    );
    snap!(
        e,
        "give_dead",
        e.run_env(
            Some("orch"),
            &["give", "k", "--to", "b"],
            &[("TASKLOCK_SECRET", CLAIM)]
        )
    );
    // A receiver silent past dead_after, too.
    register(&e, "c", "c-secret");
    e.at("2026-01-01T00:20:00Z");
    let r = give(&e, "orch", Some(CLAIM), "c");
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (3, json!("agent_dead"))
    );
    // Nothing changed hands.
    let s = e.ok("x", &["status", "k", "--json"]).json();
    assert_eq!(s["checkout"]["agent"]["id"], "orch", "{s}");
    assert_eq!(s["checkout"]["token"], 1, "{s}");
    assert!(events(&e, "give").is_empty());
}

#[test]
fn give_moves_slots_and_paths_and_respects_the_waits_for_graph() {
    let e = Env::new();
    for a in ["b", "c", "d"] {
        register(&e, a, &format!("{a}-secret"));
    }
    // Slots: the giver's slot moves, unless the receiver holds one already.
    e.ok("a", &["checkout", "pool", "--slots", "2"]);
    as_(&e, "b", Some("b-secret"), &["checkout", "pool"]);
    let r = e.run(Some("a"), &["give", "pool", "--to", "b", "--json"]);
    assert_eq!(
        (r.code, r.json()["outcome"].clone()),
        (2, json!("receiver_holds")),
        "{}",
        r.text()
    );
    let r = e.run(Some("a"), &["give", "pool", "--to", "c", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["checkout"]["slot"], 1);
    assert_eq!(r.json()["checkout"]["slots"], 2);
    // Paths go with the key.
    e.ok("a", &["checkout", "parser", "--path", "src/parser/**"]);
    let r = e.run(Some("a"), &["give", "parser", "--to", "d", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(r.json()["checkout"]["paths"], json!(["src/parser/**"]));
    let r = e.run(
        Some("a"),
        &["checkout", "other", "--path", "src/parser/x.rs"],
    );
    assert_eq!(r.code, 2, "d's paths now: {}", r.text());

    // Waits: c holds x; d queues for x; c queues for k (held by a). Giving k to d would
    // have d hold what c waits for while d waits for c. Both places are passive
    // (`--queue`): d's, the first walked from d, is dropped and d told, as a checkout's
    // grant would drop it (issue 46); the give goes through.
    as_(&e, "c", Some("c-secret"), &["checkout", "x"]);
    e.ok("a", &["checkout", "k"]);
    let r = as_(&e, "d", Some("d-secret"), &["checkout", "x", "--queue"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let r = as_(&e, "c", Some("c-secret"), &["checkout", "k", "--queue"]);
    assert_eq!(r.code, 2, "{}", r.text());
    let r = e.run(Some("a"), &["give", "k", "--to", "d", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let j = r.json();
    assert_eq!(j["outcome"], "given", "{j}");
    assert_eq!(
        j["dropped"],
        json!([{"agent": "d", "key": "x", "cycle": ["d", "x", "c", "k", "d"]}]),
        "{j}"
    );
    let x = e.ok("o", &["status", "x", "--json"]).json();
    assert_eq!(x["queue"]["length"], 0, "d left x: {x}");
    let k = e.ok("o", &["status", "k", "--json"]).json();
    assert_eq!(k["checkout"]["agent"]["id"], "d", "{k}");
    assert_eq!(
        k["queue"]["waiters"],
        json!(["c"]),
        "c waits for d now: {k}"
    );
    let msgs = as_(&e, "d", Some("d-secret"), &["inbox", "--peek", "--json"]).json();
    assert!(
        msgs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["type"] == "deadlock"
                && m["key"] == "x"
                && m["body"].as_str().unwrap().contains("when a gave `k` to d")),
        "{msgs}"
    );
}

/// kill -9 of `give` and of a session's adoption at random points: the key has exactly
/// one holder afterwards (the giver or the receiver; the session), never two, never none
/// but by a release.
#[test]
fn a_give_or_an_adoption_killed_at_any_point_leaves_one_holder() {
    let e = Env::new();
    register(&e, "b", "b-secret");
    let spawn = |who: &str, secret: &str, args: &[&str]| {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.arg("--dir")
            .arg(e.dir())
            .args(args)
            .args(["--agent", who])
            .env("TASKLOCK_SECRET", secret)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().unwrap()
    };
    let holder = |e: &Env| {
        let l = e.ok("x", &["list", "--json"]).json();
        let rows: Vec<Value> = l["checkouts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["key"] == "k")
            .cloned()
            .collect();
        assert_eq!(rows.len(), 1, "exactly one checkout of k: {l}");
        rows[0]["agent"]["id"].as_str().unwrap().to_string()
    };
    as_(&e, "a", Some("a-secret"), &["checkout", "k"]);
    let mut secrets = [("a", "a-secret"), ("b", "b-secret")];
    for i in 0..16u64 {
        let (from, secret) = secrets[0];
        let to = secrets[1].0;
        let mut child = spawn(from, secret, &["give", "k", "--to", to]);
        std::thread::sleep(Duration::from_micros(500 + (i * 7919) % 6000));
        let _ = child.kill();
        child.wait().unwrap();
        let now = holder(&e);
        assert!(now == "a" || now == "b", "{now}");
        if now != from {
            secrets.swap(0, 1);
        }
        // Whoever holds it acts on it with its own secret: the record is whole.
        let (who, secret) = secrets[0];
        let token = e.ok("x", &["status", "k", "--json"]).json()["checkout"]["token"].to_string();
        let r = as_(&e, who, Some(secret), &["verify", "k", "--token", &token]);
        assert_eq!(r.code, 0, "{}", r.text());
    }
    // Adoption: a claim, then a session start killed mid-way; the claim is the session's
    // whatever the point (adopted or not yet), and one record stands.
    let mut proc_ = AgentProcess::start();
    let mut claim_tokens = Vec::new();
    for i in 0..8u64 {
        let session = format!("sess-{i}");
        let key = format!("claim-{i}");
        let claim = as_(
            &e,
            &session,
            Some(CLAIM),
            &["checkout", &key, "--timeout", "20s", "--json"],
        );
        claim_tokens.push(claim.json()["checkout"]["token"].as_u64().unwrap());
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.arg("--dir")
            .arg(e.dir())
            .args(["hook", "session-start"])
            .env("TASKLOCK_SECRET", CLAIM)
            .env("CLAUDE_PID", proc_.pid())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let input = json!({"session_id": session, "cwd": e.tmp.path()});
        let _ = child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes());
        std::thread::sleep(Duration::from_micros(1000 + (i * 7919) % 9000));
        let _ = child.kill();
        child.wait().unwrap();
        let s = e.ok("x", &["status", &key, "--json"]).json();
        assert_eq!(s["checkout"]["agent"]["id"], session.as_str(), "{s}");
        let claim_token = claim_tokens.last().copied();
        assert_eq!(s["checkout"]["token"].as_u64(), claim_token, "{s}");
        // Either still the claim (no process, the claim's secret acts on it) or wholly
        // adopted (the session's process, the claim's secret refused): one record,
        // replaced at once, never a mix. (The `adopt` line may be missing: a kill
        // between the record and the audit line.)
        let r = as_(&e, &session, Some(CLAIM), &["renew", &key]);
        match s["checkout"]["agent"]["pid"].as_u64() {
            None => assert_eq!(r.code, 0, "{}", r.text()),
            Some(p) => {
                assert_eq!(p.to_string(), proc_.pid(), "{s}");
                assert_eq!(r.code, 4, "{}", r.text());
            }
        }
    }
    proc_.kill();
}

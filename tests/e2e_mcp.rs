//! `tasklock mcp` end to end with real clients: the official MCP TypeScript SDK (from npm,
//! into target/e2e/mcp-sdk) drives two server processes, two agents. See docs/e2e.md.

#![cfg(feature = "mcp")]

mod e2e;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, Script, Stub, git_project, run_ok};

fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sdk_client_checks_out_conflicts_queues_and_gets_the_handover_pushed() {
    let sdk = e2e::mcp::mcp_sdk();
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    let mut cmd = Command::new("node");
    cmd.arg(sdk.join("mcp_client.mjs"))
        .arg(e2e::tasklock_bin())
        .arg(&project)
        .current_dir(&project)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    let out = run_ok(cmd, "node mcp_client.mjs", COMMAND_TIMEOUT);
    let v: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("the client printed no JSON ({e})\n{}", out.text()));
    let audit = e2e::audit(&project.join(".locks"));
    let ctx = format!(
        "{}\n--- audit\n{}",
        serde_json::to_string_pretty(&v).unwrap(),
        audit
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(v["timeouts"], Value::Null, "{ctx}");
    assert_eq!(v["server"]["name"], "tasklock", "{ctx}");
    assert!(v["capabilities"]["logging"].is_object(), "{ctx}");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "checkout", "release", "renew", "status", "list", "note", "give", "verify", "inbox",
            "agents", "why"
        ],
        "{ctx}"
    );

    // Every result is the CLI's markdown as its one content block, the `--json` object in
    // `_meta["tasklock/json"]` and no `structuredContent` (clients show the model that
    // instead of the content when there is one).
    for (name, r) in v.as_object().unwrap() {
        if !r["content"].is_array() {
            continue;
        }
        assert_eq!(r.get("structuredContent"), None, "{name}: {ctx}");
        let blocks = r["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 1, "{name}: {ctx}");
        assert_eq!(blocks[0]["type"], "text", "{name}: {ctx}");
        assert!(
            !blocks[0]["text"].as_str().unwrap().starts_with('{'),
            "{name}: markdown, not JSON: {ctx}"
        );
        assert!(
            r["_meta"]["tasklock/json"]["exit_code"].is_i64(),
            "{name}: {ctx}"
        );
    }

    // A wins, as the CLI says it: the same markdown, the `--json` object in `_meta`.
    let a = &v["checkout_a"];
    assert_ne!(a["isError"], json!(true), "{ctx}");
    assert!(
        text(a).starts_with("Checked out `task-1` (token 1)"),
        "{ctx}"
    );
    assert_eq!(a["_meta"]["tasklock/json"]["outcome"], "granted", "{ctx}");
    assert_eq!(a["_meta"]["tasklock/json"]["exit_code"], 0, "{ctx}");
    let id_a = a["_meta"]["tasklock/json"]["checkout"]["agent"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id_a.starts_with("mcp-agent-a-client-"), "{ctx}");
    // The registered process is the client's (the node process), not the server's.
    assert_eq!(
        a["_meta"]["tasklock/json"]["checkout"]["agent"]["pid"], v["client_pid"],
        "{ctx}"
    );

    // B, another server process and so another agent, gets the conflict as an error result.
    let b = &v["checkout_b"];
    assert_eq!(b["isError"], true, "{ctx}");
    assert_eq!(b["_meta"]["tasklock/json"]["exit_code"], 2, "{ctx}");
    assert_eq!(
        b["_meta"]["tasklock/json"]["error_kind"], "conflict",
        "{ctx}"
    );
    assert!(
        text(b).contains(&id_a),
        "the conflict names the holder\n{ctx}"
    );
    // Its next step is the tool call that queues, not a command line the session could
    // not run as its agent.
    assert!(
        text(b).contains(r#"`checkout {"key":"task-1","queue":true}`"#),
        "{ctx}"
    );
    assert!(!text(b).contains("--agent"), "{ctx}");
    let q = &v["queue_b"];
    assert_eq!(q["isError"], true, "{ctx}");
    assert_eq!(q["_meta"]["tasklock/json"]["exit_code"], 2, "{ctx}");
    assert_eq!(q["_meta"]["tasklock/json"]["position"], 1, "{ctx}");
    // Arguments the tool does not take: a usage error (64), never 2.
    assert_eq!(
        v["bad_args"]["_meta"]["tasklock/json"]["exit_code"], 64,
        "{ctx}"
    );
    assert_eq!(
        v["bad_args"]["_meta"]["tasklock/json"]["error_kind"], "usage",
        "{ctx}"
    );
    // Not the holder: 4.
    assert_eq!(
        v["release_b"]["_meta"]["tasklock/json"]["exit_code"], 4,
        "{ctx}"
    );
    assert_eq!(
        v["release_b"]["_meta"]["tasklock/json"]["error_kind"], "not_holder",
        "{ctx}"
    );

    // A releases; B, first in line, is told at once through a logging notification.
    assert_ne!(v["release_a"]["isError"], json!(true), "{ctx}");
    let pushed = &v["notifications"]["b"][0];
    assert_eq!(pushed["logger"], "tasklock", "{ctx}");
    assert_eq!(pushed["level"], "notice", "{ctx}");
    assert!(
        pushed["data"]["message"]
            .as_str()
            .unwrap()
            .contains("task-1"),
        "{ctx}"
    );
    let handed = &pushed["data"]["messages"][0];
    assert_eq!(handed["key"], "task-1", "{ctx}");
    // …and the inbox tool still has it (the push leaves it unread).
    let inbox = &v["inbox_b"]["_meta"]["tasklock/json"]["messages"];
    assert_eq!(inbox[0]["id"], handed["id"], "{ctx}");
    assert_eq!(
        v["checkout_b_after"]["_meta"]["tasklock/json"]["outcome"], "granted",
        "{ctx}"
    );
    assert_eq!(v["notifications"]["a"], json!([]), "{ctx}");

    // Paths through MCP: A's tree is granted; B's key with a file in it is a conflict
    // naming A, and B took nothing.
    let pa = &v["paths_a"]["_meta"]["tasklock/json"];
    assert_eq!(pa["outcome"], "granted", "{ctx}");
    assert_eq!(pa["checkout"]["paths"], json!(["src/a"]), "{ctx}");
    let pb = &v["paths_b"];
    assert_eq!(pb["isError"], true, "{ctx}");
    assert!(
        text(pb).starts_with("Conflict: the paths asked for with `task-2`"),
        "{ctx}"
    );
    let pbj = &pb["_meta"]["tasklock/json"];
    assert_eq!(pbj["overlaps"][0]["agent"]["id"], id_a.as_str(), "{ctx}");
    assert_eq!(pbj["overlaps"][0]["witness"], "src/a/x.rs", "{ctx}");
    assert!(
        !audit
            .iter()
            .any(|e| e["event"] == "acquire" && e["key"] == "task-2"),
        "{ctx}"
    );

    // A gives task-3 to B through the tool: refused for an agent that never registered
    // (3); then B holds it under a new token, is pushed the `given` message, and
    // releases it as its own (bound to B's server's secret, not A's).
    let nobody = &v["give_nobody"];
    assert_eq!(nobody["isError"], true, "{ctx}");
    assert_eq!(nobody["_meta"]["tasklock/json"]["exit_code"], 3, "{ctx}");
    assert_eq!(
        nobody["_meta"]["tasklock/json"]["outcome"], "unknown_agent",
        "{ctx}"
    );
    let id_b = v["checkout_b_after"]["_meta"]["tasklock/json"]["checkout"]["agent"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let given = &v["give_a"]["_meta"]["tasklock/json"];
    assert_ne!(v["give_a"]["isError"], json!(true), "{ctx}");
    assert_eq!(given["outcome"], "given", "{ctx}");
    assert_eq!(given["checkout"]["agent"]["id"], id_b.as_str(), "{ctx}");
    let old_token = v["checkout_a3"]["_meta"]["tasklock/json"]["checkout"]["token"].clone();
    assert_eq!(given["previous_token"], old_token, "{ctx}");
    assert_ne!(given["checkout"]["token"], old_token, "{ctx}");
    assert!(
        v["notifications"]["b"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["data"]["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default())
            .any(|m| m["type"] == "given" && m["key"] == "task-3"),
        "{ctx}"
    );
    assert_eq!(
        v["status_given"]["_meta"]["tasklock/json"]["checkout"]["agent"]["id"],
        id_b.as_str(),
        "{ctx}"
    );
    assert_eq!(
        v["release_given"]["_meta"]["tasklock/json"]["exit_code"], 0,
        "{ctx}"
    );
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "give" && e["key"] == "task-3"),
        "{ctx}"
    );

    // Closing the clients ended both agents: B's checkout released as `session_end`.
    let ended = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "task-1")
        .unwrap_or_else(|| panic!("no auto_release of task-1\n{ctx}"));
    assert_eq!(ended["reason"], "session_end", "{ctx}");
    assert!(
        ended["agent"]
            .as_str()
            .unwrap()
            .starts_with("mcp-agent-b-client-"),
        "{ctx}"
    );
    assert!(!project.join(".locks/keys/task-1").exists(), "{ctx}");
}

/// The parent pid of a process.
fn ppid(pid: u32) -> Option<u32> {
    tasklock::os::process(pid)?.parent
}

/// The `tasklock mcp` processes started (directly or through a shell) by `ancestor`,
/// from `ps` (on Linux and macOS alike).
fn mcp_servers_of(ancestor: u32) -> Vec<u32> {
    let out = std::process::Command::new("ps")
        .args(["-A", "-o", "pid=,args="])
        .output()
        .expect("ps lists the processes");
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut words = line.split_whitespace();
        let Some(pid) = words.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let (program, first) = (words.next().unwrap_or_default(), words.next());
        let is_server = program.ends_with("tasklock") && first == Some("mcp");
        let mut p = pid;
        let mut under = false;
        for _ in 0..6 {
            match ppid(p) {
                Some(q) if q == ancestor => {
                    under = true;
                    break;
                }
                Some(q) if q > 1 => p = q,
                _ => break,
            }
        }
        if is_server && under {
            found.push(pid);
        }
    }
    found
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("e2e: gave up waiting for {what} after {limit:?}");
    false
}

fn status_json(locks: &std::path::Path, agent: &str, key: &str) -> Value {
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(["status", key, "--json", "--agent", agent, "--dir"])
        .arg(locks)
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID");
    let out = e2e::run(cmd, "tasklock status", COMMAND_TIMEOUT);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json printed no JSON ({e})\n{}", out.text()))
}

/// Claude Code as the MCP client: a session whose scripted model calls
/// `mcp__tasklock__checkout` holds the key; a second session gets the conflict as a tool
/// error, takes another key and ends, which releases it (`session_end`); then the first
/// session is killed with SIGKILL together with its `tasklock mcp`, so no tasklock code
/// runs, and the next command that meets the key finds the registered process (the
/// `claude` process) gone and releases it (`agent_death`).
#[test]
fn claude_code_uses_the_mcp_tools_and_its_checkouts_end_with_it() {
    let started = Instant::now();
    e2e::claude();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = git_project(tmp.path());
    let locks = project.join(".locks");
    let config = e2e::mcp::mcp_config(tmp.path());
    let checkout = |key: &str| {
        Script::tool_call(
            "mcp__tasklock__checkout",
            json!({"key": key, "reason": "e2e over MCP"}),
        )
    };

    // Session 1 checks out mcp-task, then its model thinks for a long while.
    let stub1 = Stub::script(Script {
        main: vec![checkout("mcp-task")],
        pause_after: Some((0, Duration::from_secs(150))),
        ..Script::default()
    });
    let id1 = e2e::uuid();
    let cmd = e2e::mcp::mcp_session_cmd(
        &home,
        &project,
        &stub1,
        &config,
        "Check out mcp-task with the tasklock tool.",
        &id1,
    );
    let session1 = Running::spawn(cmd, "claude -p (session 1)");
    let claude1 = session1.pid();
    let held = wait_until("session 1's checkout", SESSION_TIMEOUT, || {
        stub1.result("main-0").is_some()
    });
    if !held {
        let out = session1.wait(Duration::ZERO);
        panic!(
            "session 1 never sent back its checkout result\n{}\n--- stub\n{}",
            out.text(),
            stub1.log()
        );
    }
    let r1 = stub1.result("main-0").unwrap();
    let ctx1 = format!("{r1}\n--- stub\n{}", stub1.log());
    assert_ne!(r1["is_error"], json!(true), "{ctx1}");
    // Claude Code 2.1.330 hands the model a result's structured content when it has one;
    // tasklock's results have none, so the model reads the CLI's markdown.
    let t1 = e2e::result_text(&r1);
    assert!(
        t1.starts_with("Checked out `mcp-task` (token 1)") && t1.contains("\nNext: "),
        "the model did not get the markdown of the checkout\n{ctx1}"
    );
    assert!(
        !t1.contains(r#""outcome""#),
        "no JSON for the model\n{ctx1}"
    );
    let status = status_json(&locks, "observer", "mcp-task");
    let holder = status["checkout"]["agent"].clone();
    let agent1 = holder["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(status["outcome"], "held", "{status}\n{ctx1}");
    assert_eq!(
        holder["pid"],
        json!(claude1),
        "the registered process is not the claude process\n{status}"
    );
    // Claude Code hands its session id to its MCP servers: the agent is the session.
    assert_eq!(agent1, id1, "{status}");
    // The server binds its checkouts to a secret of its own: naming the session from
    // another process is not enough to release it.
    assert_eq!(status["checkout"]["proven"], true, "{status}");
    let mut cmd = Command::new(e2e::tasklock_bin());
    cmd.args(["release", "mcp-task", "--json", "--agent", &agent1, "--dir"])
        .arg(&locks)
        .env_remove("TASKLOCK_SECRET");
    let out = e2e::run(cmd, "tasklock release", COMMAND_TIMEOUT);
    assert_eq!(out.status.code(), Some(4), "{}", out.text());
    assert!(out.stdout.contains("secret_refused"), "{}", out.text());
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(locks.join("agents").join(&id1)).unwrap())
            .unwrap();
    assert_eq!(entry["pid"], json!(claude1), "{entry}");
    assert_eq!(
        entry["pid_start"],
        json!(e2e::start_time(claude1)),
        "{entry}"
    );

    // Session 2: the conflict comes back as a tool error naming the holder; it takes
    // another key and ends, and the end releases it.
    let stub2 = Stub::script(Script {
        main: vec![checkout("mcp-task"), checkout("mcp-other")],
        ..Script::default()
    });
    let id2 = e2e::uuid();
    let cmd = e2e::mcp::mcp_session_cmd(
        &home,
        &project,
        &stub2,
        &config,
        "Check out mcp-task, or other work.",
        &id2,
    );
    let out2 = e2e::run_ok(cmd, "claude -p (session 2)", SESSION_TIMEOUT);
    let ctx2 = format!(
        "{}\n--- results\n{}\n--- stub\n{}",
        out2.text(),
        stub2.results_text(),
        stub2.log()
    );
    let result2: Value = serde_json::from_str(out2.stdout.trim()).expect("json result");
    assert_eq!(result2["result"], e2e::FINAL_TEXT, "{ctx2}");
    assert_eq!(result2["permission_denials"], json!([]), "{ctx2}");
    let conflict = stub2.result("main-0").expect("conflict result");
    assert_eq!(conflict["is_error"], json!(true), "{ctx2}");
    let conflict_text = e2e::result_text(&conflict);
    assert!(
        conflict_text.starts_with("Conflict: `mcp-task` is held by")
            && conflict_text.contains(&agent1),
        "the conflict, in markdown, names the holder\n{ctx2}"
    );
    assert!(!conflict_text.contains(r#""exit_code""#), "{ctx2}");
    let other = stub2.result("main-1").expect("second checkout result");
    assert_ne!(other["is_error"], json!(true), "{ctx2}");
    let audit = e2e::audit(&locks);
    let ended = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "mcp-other")
        .unwrap_or_else(|| panic!("session 2's end did not release mcp-other\n{ctx2}"));
    assert_eq!(ended["reason"], "session_end", "{ctx2}");
    assert_ne!(ended["agent"], json!(agent1), "{ctx2}");

    // Kill session 1 and its server at once: nothing of tasklock's runs at its end.
    let servers = mcp_servers_of(claude1);
    assert_eq!(
        servers.len(),
        1,
        "expected one tasklock mcp under claude {claude1}"
    );
    for pid in servers.iter().chain([&claude1]) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    let _ = session1.wait(Duration::from_secs(30));
    assert!(
        !e2e::audit(&locks)
            .iter()
            .any(|e| e["event"] == "auto_release" && e["key"] == "mcp-task"),
        "something released mcp-task before the death check"
    );
    let after = status_json(&locks, "observer", "mcp-task");
    assert_eq!(after["outcome"], "free", "{after}");
    let audit = e2e::audit(&locks);
    let reaped = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "mcp-task")
        .unwrap_or_else(|| panic!("no auto_release of mcp-task: {after}"));
    assert_eq!(reaped["reason"], "agent_death", "{reaped}");
    assert_eq!(reaped["agent"], json!(agent1), "{reaped}");
    assert_eq!(reaped["by"], "observer", "{reaped}");
    eprintln!("e2e: claude over MCP took {:?}", started.elapsed());
}

//! A key may begin with `-` (`checkout -- --all` takes the key `--all`). Wherever tasklock
//! writes a command line that names a key, a path or an agent (the `Next:` lines agents
//! paste, the hooks that rewrite an agent's commands, the MCP server's calls), that text
//! must never be read as an option: `release` of the key `--all` releases that key, never
//! everything. Through the real binary, the suggested and rewritten commands run by `sh`.

#[macro_use]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::mcp::Mcp;
use common::*;
use serde_json::{Value, json};

/// Keys that look like options of `release`, `checkout` and every command.
const KEYS: [&str; 3] = ["--all", "-x", "--force"];

/// `tasklock --dir D [--agent A] ARGS` (the global options first, so that ARGS may end in
/// `-- KEY`).
fn tl(e: &Env, agent: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    cmd.current_dir(e.tmp.path()).arg("--dir").arg(e.dir());
    if let Some(a) = agent {
        cmd.arg(format!("--agent={a}"));
    }
    exec_args(cmd, args)
}

fn exec_args(mut cmd: Command, args: &[&str]) -> Run {
    cmd.args(args);
    exec(cmd)
}

/// `line` run by `sh -c`, with this build's `tasklock` first on PATH, as an agent would
/// paste it (no identity in the environment: the line names it).
fn sh(e: &Env, line: &str) -> Run {
    let bin = Path::new(env!("CARGO_BIN_EXE_tasklock")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut cmd = base_cmd(&e.now);
    use_store(&mut cmd, &e.dir());
    let mut sh = Command::new("sh");
    sh.envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    for (k, v) in cmd.get_envs() {
        if v.is_none() {
            sh.env_remove(k);
        }
    }
    sh.env("PATH", path)
        .env("TASKLOCK_DIR", e.dir())
        .current_dir(e.tmp.path())
        .arg("-c")
        .arg(line)
        .stdin(Stdio::null());
    exec(sh)
}

/// The keys `agent` holds, sorted.
fn held_by(e: &Env, agent: &str) -> Vec<String> {
    let r = tl(e, None, &["list", "--json"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let mut keys: Vec<String> = r.json()["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["agent"]["id"] == agent)
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

/// The code spans of the `Next:` line of a markdown output.
fn next_commands(out: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.starts_with("Next:"))
        .unwrap_or_else(|| panic!("no Next: line in\n{out}"));
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("tasklock "))
        .map(str::to_string)
        .collect()
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    v.sort();
    v
}

#[test]
fn next_lines_for_a_key_that_begins_with_a_dash_act_on_that_key() {
    for key in KEYS {
        let e = Env::new();
        let a = "agent-a";
        assert_eq!(tl(&e, Some(a), &["checkout", "keep"]).code, 0);
        let r = tl(&e, Some(a), &["checkout", "--", key]);
        assert_eq!(r.code, 0, "{}", r.text());
        let [release, renew, verify] = next_commands(&r.stdout)
            .try_into()
            .unwrap_or_else(|c| panic!("release, renew and verify expected: {c:?}\n{}", r.stdout));
        assert!(release.contains(" -- "), "{release}");
        for line in [&renew, &verify] {
            let r = sh(&e, line);
            assert_eq!(r.code, 0, "{line}: {}", r.text());
            assert!(r.stdout.contains(key), "{line}: {}", r.text());
        }
        assert_eq!(held_by(&e, a), sorted(&["keep", key]));

        // Another agent is told how to queue for it: pasted, it queues for that key.
        let r = tl(&e, Some("agent-b"), &["checkout", "--", key]);
        assert_eq!(r.code, 2, "{}", r.text());
        let [queue] = next_commands(&r.stdout).try_into().unwrap();
        let q = sh(&e, &queue);
        assert_eq!(q.code, 2, "{queue}: {}", q.text());
        let s = tl(&e, None, &["status", "--json", "--", key]);
        assert_eq!(s.json()["queue"]["waiters"], json!(["agent-b"]), "{queue}");

        // `why` and `status` suggest the holder's release; pasted, it releases that key.
        let why = tl(&e, Some(a), &["why", "--", key]);
        let [why_release] = next_commands(&why.stdout).try_into().unwrap();
        assert_eq!(why_release, release, "{}", why.stdout);
        let r = sh(&e, &release);
        assert_eq!(r.code, 0, "{release}: {}", r.text());
        assert_eq!(
            held_by(&e, a),
            ["keep"],
            "{release} released more than {key}"
        );
    }
}

#[test]
fn a_key_that_begins_with_a_dash_suggested_as_a_tool_call_names_that_key() {
    // The MCP server suggests tool calls, not command lines: the key stays the key.
    let e = Env::new();
    for key in KEYS {
        tl(&e, Some("agent-a"), &["checkout", "--", key]);
    }
    let mut mcp = Mcp::start(&e, &[]);
    let r = mcp.call("checkout", json!({"key": "-x"}));
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(r#"`checkout {"key":"-x","queue":true}`"#),
        "{text}"
    );
    mcp.close();
}

#[test]
fn mcp_tools_act_on_exactly_a_key_that_begins_with_a_dash() {
    let e = Env::new();
    let me = "mcp-agent";
    let mut mcp = Mcp::start(&e, &[("TASKLOCK_AGENT", me)]);
    let mut left: Vec<&str> = vec!["keep", "keep-2"];
    for key in left.iter().chain(&KEYS) {
        let r = mcp.ok("checkout", json!({"key": key, "reason": "-r"}));
        assert_eq!(r["_meta"]["tasklock/json"]["key"], *key, "{r}");
    }
    left.extend(KEYS);
    for key in KEYS {
        mcp.ok("status", json!({"key": key}));
        mcp.ok("why", json!({"key": key}));
        mcp.ok("note", json!({"key": key, "text": "--all"}));
        let r = mcp.ok("renew", json!({"keys": [key], "timeout": "1h"}));
        assert_eq!(r["_meta"]["tasklock/json"]["results"][0]["key"], key, "{r}");
        let token = tl(&e, None, &["status", "--json", "--", key]).json()["checkout"]["token"]
            .as_u64()
            .unwrap();
        mcp.ok("verify", json!({"key": key, "token": token}));
        mcp.ok("release", json!({"keys": [key], "note": "--force"}));
        left.retain(|k| *k != key);
        assert_eq!(
            held_by(&e, me),
            sorted(&left),
            "release of {key} released something else"
        );
    }
    // `-x` handed over to an agent whose id begins with `-`: `give` names it as itself.
    tl(&e, Some("-other"), &["heartbeat"]);
    mcp.ok("checkout", json!({"key": "-x"}));
    mcp.ok(
        "give",
        json!({"key": "-x", "to": "-other", "timeout": "1h"}),
    );
    assert_eq!(held_by(&e, "-other"), ["-x"]);
    assert_eq!(held_by(&e, me), ["keep", "keep-2"]);
    mcp.close();
}

#[test]
fn an_mcp_server_whose_agent_and_name_begin_with_a_dash_acts_for_it() {
    let e = Env::new();
    let mut mcp = Mcp::start(
        &e,
        &[("TASKLOCK_AGENT", "-a"), ("TASKLOCK_AGENT_NAME", "--all")],
    );
    mcp.ok("checkout", json!({"key": "k", "paths": ["-b.rs"]}));
    assert_eq!(held_by(&e, "-a"), ["k"]);
    let s = tl(&e, None, &["status", "--json", "k"]).json();
    assert_eq!(s["checkout"]["agent"]["name"], "--all", "{s}");
    assert_eq!(s["checkout"]["paths"], json!(["-b.rs"]), "{s}");
    mcp.close();
}

/// `tasklock --dir D hook pre-tool-use` with `input` on stdin.
fn hook(e: &Env, input: &Value) -> Run {
    let mut cmd = base_cmd(&e.now);
    for k in ["CLAUDE_PID", "CLAUDE_ENV_FILE", "CLAUDE_PROJECT_DIR"] {
        cmd.env_remove(k);
    }
    use_store(&mut cmd, &e.dir());
    cmd.arg("--dir").arg(e.dir()).args(["hook", "pre-tool-use"]);
    Run::with_stdin(&mut cmd, &input.to_string())
}

#[test]
fn a_subagents_rewritten_command_acts_on_exactly_its_key_and_path() {
    let e = Env::new();
    // The session's id begins with `-`: so does its subagent's, `-s1/a1`.
    let sub = "-s1/a1";
    let rewrite = |command: &str| -> String {
        let input = json!({
            "session_id": "-s1",
            "agent_id": "a1",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        });
        let r = hook(&e, &input);
        assert_eq!(r.code, 0, "{}", r.text());
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        v["hookSpecificOutput"]["updatedInput"]["command"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let take = rewrite("tasklock checkout --path=-b.rs -- keep");
    assert_eq!(
        take,
        "tasklock checkout --agent='-s1/a1' --path=-b.rs -- keep"
    );
    let mut left = vec!["keep"];
    for key in KEYS {
        let line = rewrite(&format!("tasklock checkout -- {}", shell_word(key)));
        left.push(key);
        assert_eq!(sh(&e, &take).code, 0, "{take}");
        let r = sh(&e, &line);
        assert_eq!(r.code, 0, "{line}: {}", r.text());
    }
    assert_eq!(held_by(&e, sub), sorted(&left));
    let s = tl(&e, None, &["status", "--json", "keep"]).json();
    assert_eq!(s["checkout"]["paths"], json!(["-b.rs"]), "{s}");
    for key in KEYS {
        let release = rewrite(&format!("tasklock release -- {}", shell_word(key)));
        let r = sh(&e, &release);
        assert_eq!(r.code, 0, "{release}: {}", r.text());
        left.retain(|k| *k != key);
        assert_eq!(held_by(&e, sub), sorted(&left), "{release}");
    }
}

fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `tl` with the real clock (beside a watcher, which reads it).
fn tl_now(e: &Env, agent: &str, args: &[&str]) -> Run {
    let mut cmd = base_cmd(&e.now);
    cmd.env_remove("TASKLOCK_NOW");
    use_store(&mut cmd, &e.dir());
    cmd.current_dir(e.tmp.path())
        .arg("--dir")
        .arg(e.dir())
        .arg(format!("--agent={agent}"));
    exec_args(cmd, args)
}

#[test]
fn a_watcher_started_for_an_agent_whose_id_and_name_begin_with_a_dash_watches_it() {
    // `heartbeat --watch --detach` starts the watcher as a command line of its own, with
    // the agent's id and name in it.
    let e = Env::new();
    let x = AgentProcess::start();
    let r = tl_now(
        &e,
        "-w",
        &[
            "--name=--all",
            "heartbeat",
            "--watch",
            "--pid",
            &x.pid(),
            "--detach",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let r = tl_now(&e, "-w", &["checkout", "--", "-k"]);
    assert_eq!(r.code, 0, "{}", r.text());
    drop(x);
    // Nothing else meets the checkout: only the watcher ends it.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !audit(&e.dir())
        .iter()
        .any(|ev| ev["key"] == "-k" && ev["event"] != "acquire")
    {
        assert!(
            std::time::Instant::now() < end,
            "the watcher did not end -w's checkout: {:?}",
            audit(&e.dir())
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let ended: Vec<Value> = audit(&e.dir())
        .into_iter()
        .filter(|ev| ev["key"] == "-k" && ev["event"] != "acquire")
        .collect();
    assert_eq!(ended[0]["agent"], "-w", "{ended:?}");
    assert_eq!(ended[0]["reason"], "agent_death", "{ended:?}");
}

//! The OpenCode plugin without OpenCode: its shipped copy is the one `init` writes, `init`
//! writes it once, a shell command's `OPENCODE_SESSION_ID` names the agent, and a session
//! registered by the plugin's hooks is woken through its server's `prompt_async`. The real
//! CLI is driven in tests/e2e_opencode.rs.

#[macro_use]
mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const PLUGIN: &str = include_str!("../templates/opencode-plugin.js");
const PLUGIN_PATH: &str = ".opencode/plugin/tasklock.js";

fn repo(e: &Env) -> PathBuf {
    let path = e.tmp.path().join("proj");
    std::fs::create_dir_all(&path).unwrap();
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "git init");
    path
}

fn init(cwd: &Path, args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    cmd.current_dir(cwd)
        .arg("init")
        .args(args)
        .args(["--client", "claude,opencode"]);
    exec(cmd)
}

fn action_of(report: &Value, path: &Path) -> String {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path.display().to_string())
        .and_then(|c| c["action"].as_str())
        .unwrap_or_else(|| panic!("no change for {}: {report}", path.display()))
        .to_string()
}

/// plugins/opencode/tasklock.js is what `init` writes, and Node parses it as a module.
#[test]
fn the_shipped_opencode_plugin_is_the_one_init_writes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shipped = std::fs::read_to_string(root.join("plugins/opencode/tasklock.js")).unwrap();
    assert!(
        shipped == PLUGIN,
        "plugins/opencode/tasklock.js is stale: cp templates/opencode-plugin.js plugins/opencode/tasklock.js"
    );
    let tmp = tempfile::tempdir().unwrap();
    let module = tmp.path().join("tasklock.mjs");
    std::fs::write(&module, PLUGIN).unwrap();
    let out = Command::new("node")
        .arg("--check")
        .arg(&module)
        .output()
        .expect("node runs (install Node.js)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn init_writes_the_opencode_plugin_once_and_renews_a_stale_one() {
    let e = Env::new();
    let project = repo(&e);
    let plugin = project.join(PLUGIN_PATH);

    let dry = init(&project, &["--dry-run", "--json"]);
    assert_eq!(dry.code, 0, "{}", dry.text());
    assert_eq!(action_of(&dry.json(), &plugin), "created");
    assert!(!plugin.exists(), "a dry run wrote the plugin");

    let first = init(&project, &["--json"]);
    assert_eq!(first.code, 0, "{}", first.text());
    assert_eq!(action_of(&first.json(), &plugin), "created");
    assert_eq!(std::fs::read_to_string(&plugin).unwrap(), PLUGIN);

    let before = std::fs::metadata(&plugin).unwrap();
    let again = init(&project, &["--json"]);
    assert_eq!(action_of(&again.json(), &plugin), "unchanged");
    let after = std::fs::metadata(&plugin).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (before.ino(), before.mtime_nsec()),
        (after.ino(), after.mtime_nsec()),
        "a second init rewrote the plugin"
    );

    // A plugin of another version (or edited) is replaced by this one.
    std::fs::write(&plugin, "// an older tasklock plugin\n").unwrap();
    let stale = init(&project, &[]);
    assert_eq!(stale.code, 0, "{}", stale.text());
    let line = stale
        .stdout
        .lines()
        .find(|l| l.contains(PLUGIN_PATH))
        .unwrap_or_else(|| panic!("no line for the plugin: {}", stale.stdout))
        .replace(&e.tmp.path().display().to_string(), "[TMP]");
    insta::assert_snapshot!("init_renews_stale_plugin", line);
    assert_eq!(std::fs::read_to_string(&plugin).unwrap(), PLUGIN);
}

/// OPENCODE_SESSION_ID (which the plugin sets in every shell command) names the agent,
/// after CODEX_THREAD_ID.
#[test]
fn opencode_session_id_is_the_identity_after_codex_thread_id() {
    let e = Env::new();
    let r = e.run_env(
        None,
        &["checkout", "oc-task", "--json"],
        &[("OPENCODE_SESSION_ID", "ses_abc123")],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    assert_eq!(
        r.json()["checkout"]["agent"]["id"],
        "ses_abc123",
        "{}",
        r.text()
    );
    let r = e.run_env(
        None,
        &["checkout", "oc-task-2", "--json"],
        &[
            ("OPENCODE_SESSION_ID", "ses_abc123"),
            ("CODEX_THREAD_ID", "thread-1"),
        ],
    );
    assert_eq!(
        r.json()["checkout"]["agent"]["id"],
        "thread-1",
        "{}",
        r.text()
    );
    // An empty value (the plugin blanks identities a command would otherwise inherit)
    // counts as none.
    let r = e.run_env(
        None,
        &["checkout", "oc-task-3", "--json"],
        &[
            ("TASKLOCK_AGENT", ""),
            ("OPENCODE_SESSION_ID", "ses_abc123"),
        ],
    );
    assert_eq!(
        r.json()["checkout"]["agent"]["id"],
        "ses_abc123",
        "{}",
        r.text()
    );
}

/// A stand-in for OpenCode's server: answers one request 204 and hands it over.
fn fake_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Headers, then Content-Length bytes of body.
            while let Ok(n) = conn.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        }
    });
    (port, rx)
}

/// An OpenCode session as the plugin registers it: `tasklock hook session-start` run by a
/// process named `opencode` (a copy of sh, which stays alive as the session's process),
/// with the session's secret in its environment and its server in the payload.
struct FakeSession {
    child: std::process::Child,
}

impl Drop for FakeSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_session(e: &Env, project: &Path, id: &str, secret: &str, port: u16) -> FakeSession {
    let opencode = e.tmp.path().join("bin/opencode");
    if !opencode.exists() {
        std::fs::create_dir_all(opencode.parent().unwrap()).unwrap();
        std::fs::copy("/bin/sh", &opencode).unwrap();
    }
    let payload = json!({
        "session_id": id,
        "cwd": project,
        "hook_event_name": "SessionStart",
        "opencode": {"server_url": format!("http://127.0.0.1:{port}/"), "directory": project},
    });
    let input = e.tmp.path().join(format!("{id}.json"));
    std::fs::write(&input, payload.to_string()).unwrap();
    let done = e.tmp.path().join(format!("{id}.done"));
    let script = format!(
        "{} hook session-start < {} > {}.out; touch {}; sleep 60",
        env!("CARGO_BIN_EXE_tasklock"),
        input.display(),
        done.display(),
        done.display()
    );
    let mut sh = Command::new(&opencode);
    sh.arg("-c")
        .arg(script)
        .current_dir(project)
        .env_remove("TASKLOCK_NOW")
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env_remove("CODEX_THREAD_ID")
        .env("TASKLOCK_SECRET", secret)
        .env_remove("TASKLOCK_DIR")
        .env_remove("OPENCODE_SESSION_ID")
        .stdin(Stdio::null());
    use_store(&mut sh, &project.join(".locks"));
    let child = sh.spawn().unwrap();
    let started = Instant::now();
    while !done.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "session-start hung"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    FakeSession { child }
}

fn now_cmd(project: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = base_cmd(T0);
    use_store(&mut cmd, &project.join(".locks"));
    cmd.env_remove("TASKLOCK_NOW")
        .current_dir(project)
        .envs(env.iter().copied())
        .args(args);
    exec(cmd)
}

#[test]
fn a_queued_opencode_session_is_woken_through_its_server() {
    let e = Env::new();
    let project = repo(&e);
    assert_eq!(init(&project, &[]).code, 0);
    let (port, requests) = fake_server();
    let session = "ses_wakeme01";
    let secret = "f00dfeed";
    let _oc = start_session(&e, &project, session, secret, port);
    let locks = project.join(".locks");
    let entry: Value = serde_json::from_str(&if on_postgres() {
        psql(
            &locks,
            &format!("SELECT data FROM agents WHERE id = {}", sql_text(session)),
        )
    } else {
        std::fs::read_to_string(locks.join("agents").join(session)).unwrap()
    })
    .unwrap();
    assert_eq!(entry["name"], "opencode in proj #ses_wake", "{entry}");
    assert_eq!(entry["reach"]["via"], "opencode", "{entry}");
    assert_eq!(
        entry["reach"]["url"],
        format!("http://127.0.0.1:{port}"),
        "{entry}"
    );

    let holder = now_cmd(
        &project,
        &[],
        &["checkout", "wake-key", "--agent", "holder"],
    );
    assert_eq!(holder.code, 0, "{}", holder.text());
    let me = [
        ("OPENCODE_SESSION_ID", session),
        ("TASKLOCK_SECRET", secret),
    ];
    let queued = now_cmd(
        &project,
        &me,
        &["checkout", "wake-key", "--queue", "--json"],
    );
    assert_eq!(queued.code, 2, "{}", queued.text());
    assert_eq!(queued.json()["push_wake"], true, "{}", queued.text());
    // Without the session's secret, nobody acts as it.
    let stranger = now_cmd(
        &project,
        &[("OPENCODE_SESSION_ID", session)],
        &["inbox", "--json"],
    );
    assert_eq!(stranger.code, 4, "{}", stranger.text());

    let released = now_cmd(&project, &[], &["release", "wake-key", "--agent", "holder"]);
    assert_eq!(released.code, 0, "{}", released.text());
    let request = requests
        .recv_timeout(Duration::from_secs(10))
        .expect("the session's server got no request");
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    let line = head.lines().next().unwrap();
    let dir = project.display().to_string();
    assert_eq!(
        line,
        format!("POST /session/{session}/prompt_async?directory={dir} HTTP/1.1"),
        "{request}"
    );
    let body: Value = serde_json::from_str(body).expect("the body is JSON");
    let text = body["parts"][0]["text"].as_str().unwrap();
    assert_eq!(body["parts"][0]["type"], "text");
    assert!(text.starts_with("[tasklock]"), "{text}");
    assert!(text.contains("key: \"wake-key\""), "{text}");
    let audit = audit(&project.join(".locks"));
    let push = audit
        .iter()
        .find(|ev| ev["event"] == "push" && ev["agent"] == session)
        .unwrap_or_else(|| panic!("no push audited: {audit:?}"));
    assert!(
        push["detail"].as_str().unwrap().contains("delivered"),
        "{push}"
    );
}

/// A server recorded on a port nobody of this user listens on is not written to; the
/// message waits in the inbox, which says why.
#[test]
fn no_push_to_a_port_nobody_of_this_user_listens_on() {
    let e = Env::new();
    let project = repo(&e);
    assert_eq!(init(&project, &[]).code, 0);
    // A port that was just free.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let session = "ses_nobody01";
    let secret = "c0ffee";
    let _oc = start_session(&e, &project, session, secret, port);
    assert_eq!(
        now_cmd(&project, &[], &["checkout", "k", "--agent", "holder"]).code,
        0
    );
    let me = [
        ("OPENCODE_SESSION_ID", session),
        ("TASKLOCK_SECRET", secret),
    ];
    assert_eq!(
        now_cmd(&project, &me, &["checkout", "k", "--queue"]).code,
        2
    );
    assert_eq!(
        now_cmd(&project, &[], &["release", "k", "--agent", "holder"]).code,
        0
    );
    let inbox = now_cmd(&project, &me, &["inbox", "--json"]);
    assert_eq!(inbox.code, 0, "{}", inbox.text());
    let m = &inbox.json()["messages"][0];
    assert_eq!(m["delivery"]["delivered"], false, "{m}");
    assert!(
        m["delivery"]["error"]
            .as_str()
            .unwrap()
            .contains(&format!("no server of this user listens at port {port}")),
        "{m}"
    );
}

/// Run the shipped plugin in Node, as a process named `opencode` (as OpenCode's is), in
/// `project`: `script` is the body of an async function given the plugin's hooks as `p`,
/// `spawnSync`, and the `tasklock` binary as `bin`; what it returns is printed as JSON.
fn run_plugin(e: &Env, project: &Path, script: &str) -> Value {
    let node = Command::new("node")
        .args(["-p", "process.execPath"])
        .output()
        .expect("node runs (install Node.js)");
    let node = String::from_utf8(node.stdout).unwrap().trim().to_string();
    let opencode = e.tmp.path().join("bin/opencode");
    if !opencode.exists() {
        std::fs::create_dir_all(opencode.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&node, &opencode).unwrap();
    }
    let module = e.tmp.path().join("tasklock.mjs");
    std::fs::write(&module, PLUGIN).unwrap();
    let main = e.tmp.path().join("main.mjs");
    std::fs::write(
        &main,
        format!(
            "import {{ TasklockPlugin }} from {module:?};\nimport {{ spawnSync }} from 'node:child_process';\nimport fs from 'node:fs';\nconst bin = process.env.TASKLOCK_BIN;\nconst p = await TasklockPlugin({{ directory: {project:?}, serverUrl: '' }});\nconst out = await (async () => {{ {script} }})();\nconsole.log(JSON.stringify(out));\n",
            module = module.display().to_string(),
            project = project.display().to_string(),
        ),
    )
    .unwrap();
    // The environment of the commands (base_cmd's), for `opencode main.mjs`.
    let mut cmd = Command::new(&opencode);
    for (k, v) in base_cmd(&e.now).get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    use_store(&mut cmd, &e.dir());
    cmd.env("TASKLOCK_BIN", env!("CARGO_BIN_EXE_tasklock"))
        .env_remove("GEMINI_SESSION_ID")
        .current_dir(project)
        .arg(&main)
        .stdin(Stdio::null());
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    serde_json::from_str(r.stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|err| panic!("{err}: {}", r.text()))
}

/// OpenCode's `edit` and `write` `path.join` a relative `filePath` to the project (its
/// `..` applied to the text) and take an absolute one as given; its `apply_patch`
/// `path.resolve`s every name. Through the plugin, every form of a file another agent
/// holds is refused (the tool fails with tasklock's reason), an unclaimed one is allowed,
/// and the edit is recorded as the file OpenCode wrote.
#[test]
fn opencode_edits_are_judged_in_every_form_opencode_reaches_the_file_in() {
    let (e, top) = git_env();
    std::fs::create_dir_all(e.dir()).unwrap();
    let names = dotdot_layout(&top);
    let r = e.run_in(&top, Some("alice"), &["checkout", "--path", "src/a.rs"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let script = format!(
        r#"const names = {names};
        const tried = async (tool, args) => {{
          try {{ await p["tool.execute.before"]({{ tool, sessionID: "oc-b", callID: "c" }}, {{ args }}); return "allowed"; }}
          catch (err) {{ return String(err.message); }}
        }};
        const out = {{}};
        for (const n of [...names, ...names.map((n) => n.replace("a.rs", "free.rs"))]) {{
          const patch = `*** Begin Patch\n*** Update File: ${{n}}\n@@\n-a\n+b\n*** End Patch\n`;
          out[n] = [
            await tried("edit", {{ filePath: n, oldString: "a", newString: "b" }}),
            await tried("write", {{ filePath: n, content: "x" }}),
            await tried("apply_patch", {{ patchText: patch }}),
          ];
        }}
        await p["tool.execute.after"]({{ tool: "write", sessionID: "oc-b", callID: "d", args: {{ filePath: "l/../src/c.rs", content: "x" }} }}, {{ output: "" }});
        // Read before the plugin ends the session (which forgets its edits).
        const dir = {edits};
        out.recorded = fs.readdirSync(dir).filter((f) => !f.startsWith(".")).map((f) => JSON.parse(fs.readFileSync(`${{dir}}/${{f}}`, "utf8")).file);
        return out;"#,
        names = serde_json::to_string(&names).unwrap(),
        edits = serde_json::to_string(&top.join(".git/tasklock/edits")).unwrap(),
    );
    let out = run_plugin(&e, &top, &script);
    for name in &names {
        for (i, said) in out[name].as_array().unwrap().iter().enumerate() {
            let said = said.as_str().unwrap();
            assert!(
                said.contains("`src/a.rs` is checked out by another agent"),
                "tool {i} on {name}: {said}"
            );
        }
        let free = name.replace("a.rs", "free.rs");
        assert_eq!(
            out[&free],
            json!(["allowed", "allowed", "allowed"]),
            "{free}"
        );
    }
    assert_eq!(out["recorded"], json!(["src/c.rs"]));
}

/// An OpenCode session's own checkouts, made by `tasklock` commands its model runs in the
/// shell, are bound to the secret the plugin made for the session (`shell.env` gives the
/// commands `OPENCODE_SESSION_ID` and `TASKLOCK_SECRET`): another agent naming the session
/// cannot release them (exit 4), the session can.
#[test]
fn an_opencode_sessions_own_checkouts_are_bound_to_its_secret() {
    let (e, top) = git_env();
    std::fs::create_dir_all(e.dir()).unwrap();
    let script = r#"const shell = { env: {} };
        await p["shell.env"]({ sessionID: "oc-s", callID: "c" }, shell);
        const run = (args, extra) =>
          spawnSync(bin, args, { env: { ...process.env, ...extra }, encoding: "utf8" });
        const made = run(["checkout", "oc-k", "--json"], shell.env);
        const other = run(["release", "oc-k", "--agent", "oc-s"], { TASKLOCK_SECRET: "" });
        const own = run(["release", "oc-k"], shell.env);
        return { made: JSON.parse(made.stdout), other: [other.status, other.stderr], own: own.status };"#;
    let out = run_plugin(&e, &top, script);
    assert_eq!(out["made"]["checkout"]["agent"]["id"], "oc-s", "{out}");
    assert_eq!(out["made"]["checkout"]["proven"], true, "{out}");
    assert_eq!(out["other"][0], 4, "{out}");
    assert_eq!(out["own"], 0, "{out}");
}

//! End to end with the real Claude Code CLI: a project set up by `tasklock init`, one
//! headless session against a loopback stub of the Anthropic API whose "model" runs
//! `tasklock checkout e2e-task`, and the hooks' effects checked in the lock directory.
//!
//! The first run installs the CLI from npm into target/e2e/node (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use e2e::{
    Script, Stub, assert_session_lifecycle, git_project, run_session, run_session_with,
    run_trusted_session, tasklock_init,
};

#[test]
fn claude_session_registers_checks_out_beats_and_releases() {
    let started = Instant::now();
    let claude = e2e::claude();
    eprintln!(
        "e2e: claude at {} ({:?})",
        claude.display(),
        started.elapsed()
    );

    let (_tmp, home, project) = initialised_project();
    assert!(
        project.join(".claude/settings.json").is_file(),
        "tasklock init wrote no .claude/settings.json"
    );

    let stub = Stub::start("tasklock checkout e2e-task");
    let session = run_session(
        &home,
        &project,
        &stub,
        "Check out the task e2e-task with tasklock, then stop.",
    );
    eprintln!(
        "e2e: session {} took {:?}; stub saw:\n{}\nclaude stderr:\n{}",
        session.id,
        session.out.elapsed,
        stub.log(),
        session.out.stderr
    );
    assert_session_lifecycle(&session, &project, &stub);
    eprintln!("e2e: total {:?}", started.elapsed());
}

/// A temporary directory with a home for Claude Code and a git repository set up by
/// `tasklock init`.
fn initialised_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    (tmp, home, project)
}

/// The project's lock directory and its audit log as text, for failure messages.
fn audit_text(project: &Path) -> String {
    e2e::audit(&project.join(".locks"))
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn result_of(stub: &Stub, id: &str) -> (bool, String) {
    let r = stub
        .result(id)
        .unwrap_or_else(|| panic!("no tool result for {id}; saw:\n{}", stub.results_text()));
    (r["is_error"] == json!(true), e2e::result_text(&r))
}

#[test]
fn parallel_subagents_are_agents_of_their_own() {
    let (_tmp, home, project) = initialised_project();

    // The session takes a task of its own, then starts two subagents in one message;
    // both race for the same task and then list the checkouts.
    let race = vec![
        "tasklock checkout shared-task".to_string(),
        "tasklock list".to_string(),
    ];
    let stub = Stub::script(Script {
        main: vec!["tasklock checkout parent-task".into()],
        subagents: vec![race.clone(), race],
        pause_after: None,
        ..Script::default()
    });
    let session = run_trusted_session(&home, &project, &stub, "Start two subagents.");
    let sid = &session.id;
    let audit = e2e::audit(&project.join(".locks"));
    let context = format!(
        "--- tool results\n{}\n--- audit\n{}\n--- requests\n{}\n--- claude\n{}",
        stub.results_text(),
        audit_text(&project),
        stub.log(),
        session.out.text()
    );
    assert_eq!(
        session.result["permission_denials"],
        json!([]),
        "Claude Code refused a tasklock command\n{context}"
    );
    let (err, text) = result_of(&stub, "main-0");
    assert!(!err && text.contains("Checked out"), "{text}\n{context}");

    // Exactly one subagent won; the other was refused with exit 2, naming its sibling.
    let runs = [result_of(&stub, "sub0-0"), result_of(&stub, "sub1-0")];
    let winners: Vec<_> = runs.iter().filter(|(err, _)| !err).collect();
    assert_eq!(winners.len(), 1, "exactly one subagent wins\n{context}");
    assert!(
        winners[0].1.contains("Checked out `shared-task`"),
        "{context}"
    );
    let acquire = audit
        .iter()
        .find(|e| e["event"] == "acquire" && e["key"] == "shared-task")
        .unwrap_or_else(|| panic!("no acquire of shared-task\n{context}"));
    let winner = acquire["agent"].as_str().unwrap().to_string();
    assert!(
        winner.starts_with(&format!("{sid}/")) && winner.len() > sid.len() + 1,
        "the winner is a subagent of the session, not the session itself: {winner}\n{context}"
    );
    let deny = audit
        .iter()
        .find(|e| e["event"] == "deny" && e["key"] == "shared-task")
        .unwrap_or_else(|| panic!("no deny of shared-task\n{context}"));
    let loser = deny["agent"].as_str().unwrap();
    assert!(loser.starts_with(&format!("{sid}/")), "{context}");
    assert_ne!(loser, winner, "two subagents, two identities\n{context}");
    assert_eq!(deny["holder"], winner.as_str(), "{context}");
    let (_, lost) = runs.iter().find(|(err, _)| *err).unwrap();
    assert!(
        lost.contains("Exit code 2") && lost.contains(&winner),
        "the loser is told its sibling holds the task: {lost}\n{context}"
    );

    // `list` run by a subagent shows which session the holder belongs to.
    let listed = [result_of(&stub, "sub0-1").1, result_of(&stub, "sub1-1").1];
    assert!(
        listed
            .iter()
            .any(|l| l.contains(&format!("subagent of session `{sid}`"))),
        "list names the session of a subagent holder\n{context}"
    );

    // The winner's checkout ended when it stopped; the session's own one only at its end.
    let sub_end = audit
        .iter()
        .position(|e| {
            e["event"] == "auto_release"
                && e["key"] == "shared-task"
                && e["agent"] == winner.as_str()
        })
        .unwrap_or_else(|| panic!("the winner's checkout was never released\n{context}"));
    assert_eq!(audit[sub_end]["reason"], "subagent_end", "{context}");
    let parent_end = audit
        .iter()
        .position(|e| e["event"] == "auto_release" && e["key"] == "parent-task")
        .unwrap_or_else(|| panic!("parent-task was never released\n{context}"));
    assert_eq!(audit[parent_end]["agent"], sid.as_str(), "{context}");
    assert_eq!(
        audit[parent_end]["reason"], "session_end",
        "the session's own checkout is untouched by its subagents stopping\n{context}"
    );
    assert!(sub_end < parent_end, "{context}");

    // Both subagents were registered under the session and ended as subagents.
    for id in [winner.as_str(), loser] {
        let entry =
            std::fs::read_to_string(project.join(".locks/agents").join(id.replace('/', "%2F")))
                .unwrap_or_else(|e| panic!("no registry entry for {id} ({e})\n{context}"));
        let entry: serde_json::Value = serde_json::from_str(&entry).unwrap();
        assert_eq!(entry["parent"], sid.as_str(), "{entry}");
        assert_eq!(entry["ended_reason"], "subagent_end", "{entry}");
        assert!(
            entry["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("general-purpose subagent of claude in project #")),
            "{entry}"
        );
    }
}

#[test]
fn an_idle_session_keeps_its_task_past_its_lease() {
    let (_tmp, home, project) = initialised_project();
    // A 4 s lease, and death by silence after 2 s: without the session's watcher the
    // task would be anyone's long before the model answers again.
    std::fs::write(
        project.join(".locks/config.yaml"),
        "lease: 4s\nheartbeat_interval: 1s\nstalled_after: 1s\ndead_after: 2s\n",
    )
    .unwrap();
    let pause = Duration::from_secs(12);
    let stub = Stub::script(Script {
        main: vec![
            "tasklock checkout idle-task".into(),
            "tasklock verify idle-task --token 1".into(),
        ],
        subagents: Vec::new(),
        // The model thinks for 12 s after the checkout, with no tool call.
        pause_after: Some((0, pause)),
        ..Script::default()
    });
    let locks = project.join(".locks");
    let intruder = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let holder = loop {
                if let Some(e) = e2e::audit(&locks)
                    .into_iter()
                    .find(|e| e["event"] == "acquire" && e["key"] == "idle-task")
                {
                    break e["agent"].as_str().unwrap().to_string();
                }
                assert!(started.elapsed() < Duration::from_secs(120), "no checkout");
                std::thread::sleep(Duration::from_millis(100));
            };
            // Past the lease, its break grace and dead_after, while the model is silent.
            std::thread::sleep(Duration::from_secs(8));
            // Naming the session is not enough to release its checkout: it is bound to
            // the secret the session's hooks gave its Bash calls.
            let impersonation = std::process::Command::new(e2e::tasklock_bin())
                .args(["release", "idle-task", "--agent", &holder, "--dir"])
                .arg(&locks)
                .env_remove("TASKLOCK_SECRET")
                .output()
                .unwrap();
            assert_eq!(
                impersonation.status.code(),
                Some(4),
                "{}",
                String::from_utf8_lossy(&impersonation.stdout)
            );
            let out = std::process::Command::new(e2e::tasklock_bin())
                .args(["checkout", "idle-task", "--agent", "intruder", "--dir"])
                .arg(&locks)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr),
            )
        })
    };
    let session = run_trusted_session(&home, &project, &stub, "Check out idle-task.");
    let (code, text) = intruder.join().unwrap();
    let sid = &session.id;
    let audit = e2e::audit(&locks);
    let context = format!(
        "--- intruder\n{text}\n--- tool results\n{}\n--- audit\n{}\n--- requests\n{}",
        stub.results_text(),
        audit_text(&project),
        stub.log()
    );
    assert!(stub.log().contains("paused"), "the stub paused\n{context}");
    assert_eq!(
        code,
        Some(2),
        "another agent could take the idle session's task\n{context}"
    );
    assert!(text.contains(sid.as_str()), "{context}");
    let (err, verified) = result_of(&stub, "main-1");
    assert!(
        !err && verified.contains("Valid"),
        "the session still holds its task under token 1 after the pause: {verified}\n{context}"
    );
    assert!(
        verified.contains("- Ownership: bound to the holder's secret"),
        "the session's checkout is bound to its secret: {verified}\n{context}"
    );
    assert!(
        audit.iter().any(|e| e["event"] == "refused"
            && e["key"] == "idle-task"
            && e["agent"] == sid.as_str()),
        "the impersonation was audited\n{context}"
    );
    assert!(
        audit
            .iter()
            .filter(|e| e["event"] == "renew"
                && e["key"] == "idle-task"
                && e["agent"] == sid.as_str())
            .count()
            >= 3,
        "the watcher renewed the lease while the model was silent\n{context}"
    );
    let ends: Vec<_> = audit
        .iter()
        .filter(|e| e["event"] == "auto_release" && e["key"] == "idle-task")
        .collect();
    assert_eq!(ends.len(), 1, "{context}");
    assert_eq!(ends[0]["reason"], "session_end", "{context}");
}

/// Every `tasklock` command the skills show, in fenced `sh` blocks and in code spans.
fn skill_examples() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(e2e::repo_root().join("skills"))
        .unwrap()
        .map(|e| e.unwrap().path().join("SKILL.md"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let body = text.splitn(3, "---").nth(2).expect("front matter");
        let mut in_sh = false;
        for line in body.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            let mut found = Vec::new();
            if in_sh {
                // A trailing comment after two or more spaces explains the command.
                let cmd = line.split("  #").next().unwrap().trim();
                if cmd.starts_with("tasklock") {
                    found.push(cmd.to_string());
                }
            } else {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("tasklock ") {
                        found.push(span.to_string());
                    }
                }
            }
            for c in found {
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}

#[test]
fn skill_examples_run_under_the_permissions_init_writes() {
    let (tmp, home, project) = initialised_project();
    let examples = skill_examples();
    assert!(examples.len() >= 15, "too few examples found: {examples:?}");
    // What must ask: `run` runs any command, `init` rewrites the project's settings.
    let asks = |c: &str| c.starts_with("tasklock run ") || c.starts_with("tasklock init");
    assert!(examples.iter().any(|c| asks(c)), "{examples:?}");
    let marker = tmp.path().join("ran-without-approval");
    let mut commands = examples.clone();
    commands.push(format!(
        "tasklock run e2e-run -- touch {}",
        marker.display()
    ));
    let stub = Stub::script(Script {
        main: commands.clone(),
        ..Script::default()
    });
    let session = run_trusted_session(&home, &project, &stub, "Try every skill example.");
    let context = format!(
        "--- tool results\n{}\n--- claude\n{}",
        stub.results_text(),
        session.out.text()
    );
    for (i, c) in commands.iter().enumerate() {
        let (_, text) = result_of(&stub, &format!("main-{i}"));
        if asks(c) {
            assert!(
                e2e::refused(&text),
                "`{c}` ran without approval: {text}\n{context}"
            );
        } else {
            assert!(
                !e2e::refused(&text),
                "`{c}` is refused under the permissions init writes: {text}\n{context}"
            );
        }
    }
    assert!(!marker.exists(), "tasklock run ran a command unasked");
}

#[test]
fn the_checkouts_skill_reaches_the_model_even_when_tasklock_fails() {
    for installed in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let project = git_project(tmp.path());
        tasklock_init(&project);
        let skills = project.join(".claude/skills/checkouts");
        std::fs::create_dir_all(&skills).unwrap();
        std::fs::copy(
            e2e::repo_root().join("skills/checkouts/SKILL.md"),
            skills.join("SKILL.md"),
        )
        .unwrap();
        let stub = Stub::script(Script::default());
        let mut cmd = e2e::claude_cmd(&home, Some(&stub));
        if !installed {
            // tasklock is not on PATH: `tasklock list` fails in the skill (and the hooks).
            for dir in ["/usr/bin", "/bin"] {
                assert!(
                    !Path::new(dir).join("tasklock").exists(),
                    "a tasklock in {dir} spoils this test; it needs PATH without tasklock"
                );
            }
            cmd.env("PATH", "/usr/bin:/bin");
        }
        e2e::trust(&home, &project);
        cmd.current_dir(&project)
            .args(["-p", "/checkouts", "--output-format", "json"]);
        let out = e2e::run(cmd, "claude -p /checkouts", e2e::SESSION_TIMEOUT);
        let bodies = stub.state.lock().unwrap().bodies.clone();
        let context = format!("{}\n--- requests\n{}", out.text(), stub.log());
        assert!(
            !bodies.is_empty(),
            "the skill never reached the model (installed: {installed})\n{context}"
        );
        let expected = if installed {
            "No active checkouts."
        } else {
            "tasklock list failed: the lines above say why."
        };
        assert!(
            bodies.iter().any(|b| b.contains(expected)),
            "the model was not shown {expected:?}\n{context}"
        );
    }
}

/// Path checkouts are enforced where edits happen: session A holds `src/a/**`; session
/// B's Edit of `src/a/x.rs` is denied by the PreToolUse hook (the model gets the reason
/// as the tool result) and the file is untouched, while its Edit of `src/b/y.rs` goes
/// through; an Edit and a Write of `l/../src/a/x.rs` (through a link `l -> a/b`) are
/// denied as well. The deny carries the top-level `tasklock` object (checked in
/// tests/edit_hook.rs), which Claude Code must ignore.
#[test]
fn an_edit_of_a_file_another_session_checked_out_is_denied() {
    let (_tmp, home, project) = initialised_project();
    std::fs::create_dir_all(project.join("src/a")).unwrap();
    std::fs::create_dir_all(project.join("src/b")).unwrap();
    std::fs::write(project.join("src/a/x.rs"), "fn a() {}\n").unwrap();
    std::fs::write(project.join("src/b/y.rs"), "fn b() {}\n").unwrap();
    // A link `l -> a/b`: `l/../src/a/x.rs` is A's file to Claude Code, which applies the
    // `..` to the text, and `a/src/a/x.rs` to the kernel.
    std::fs::create_dir_all(project.join("a/b")).unwrap();
    std::os::unix::fs::symlink("a/b", project.join("l")).unwrap();

    // Session A's checkout, taken under A's session id as its Bash calls would.
    let a = e2e::uuid();
    let mut cmd = std::process::Command::new(e2e::tasklock_bin());
    cmd.args([
        "checkout",
        "--path",
        "src/a/**",
        "--reason",
        "parser rewrite",
    ])
    .env("CLAUDE_CODE_SESSION_ID", &a)
    .env_remove("TASKLOCK_AGENT")
    .env_remove("TASKLOCK_DIR")
    .env_remove("TASKLOCK_URL")
    .current_dir(&project);
    e2e::run_ok(
        cmd,
        "tasklock checkout --path src/a/**",
        e2e::COMMAND_TIMEOUT,
    );

    let file = |p: &str| project.join(p).to_string_lossy().into_owned();
    let stub = Stub::script(Script {
        main: vec![
            Script::tool_call("Read", json!({ "file_path": file("src/a/x.rs") })),
            Script::tool_call(
                "Edit",
                json!({ "file_path": file("src/a/x.rs"), "old_string": "fn a()", "new_string": "fn a2()" }),
            ),
            Script::tool_call("Read", json!({ "file_path": file("src/b/y.rs") })),
            Script::tool_call(
                "Edit",
                json!({ "file_path": file("src/b/y.rs"), "old_string": "fn b()", "new_string": "fn b2()" }),
            ),
            Script::tool_call(
                "Edit",
                json!({ "file_path": "l/../src/a/x.rs", "old_string": "fn a()", "new_string": "fn a3()" }),
            ),
            Script::tool_call(
                "Write",
                json!({ "file_path": "l/../src/a/x.rs", "content": "fn a4() {}\n" }),
            ),
        ],
        ..Script::default()
    });
    let session = run_session_with(
        &home,
        &project,
        &stub,
        "Rename the functions in src/a/x.rs and src/b/y.rs.",
        &["Read", "Edit", "Write"],
    );
    let context = format!(
        "--- tool results\n{}\n--- audit\n{}\n--- requests\n{}\n--- claude\n{}",
        stub.results_text(),
        audit_text(&project),
        stub.log(),
        session.out.text()
    );
    // The denied edit: the reason reached the model in B's next request, and the file
    // is as it was.
    let (err, text) = result_of(&stub, "main-1");
    assert!(err, "the edit of src/a/x.rs was not refused\n{context}");
    for part in [
        "tasklock: `src/a/x.rs` is checked out by another agent",
        &format!("`{a}`"),
        "`path:src/a/**`",
        "pattern `src/a/**`",
        "parser rewrite",
        "tasklock checkout --path src/a/x.rs --queue",
    ] {
        assert!(
            text.contains(part),
            "{part:?} not in the tool result\n{context}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(project.join("src/a/x.rs")).unwrap(),
        "fn a() {}\n",
        "{context}"
    );
    // The edit of an unclaimed file went through.
    let (err, text) = result_of(&stub, "main-3");
    assert!(!err, "the edit of src/b/y.rs failed: {text}\n{context}");
    assert_eq!(
        std::fs::read_to_string(project.join("src/b/y.rs")).unwrap(),
        "fn b2() {}\n",
        "{context}"
    );
    // Through the link's `..`, the Edit and the Write are denied the same way, and
    // nothing is written where the kernel would take the name. (Claude Code applies the
    // `..` before its hooks see the name: the gate of old, which judged only the kernel's
    // reading, denied these too.)
    for call in ["main-4", "main-5"] {
        let (err, text) = result_of(&stub, call);
        assert!(err, "{call} was not refused: {text}\n{context}");
        for part in [
            "tasklock: `src/a/x.rs` is checked out by another agent",
            &format!("`{a}`"),
        ] {
            assert!(
                text.contains(part),
                "{call}: {part:?} not in {text}\n{context}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(project.join("src/a/x.rs")).unwrap(),
        "fn a() {}\n",
        "{context}"
    );
    assert!(!project.join("a/src").exists(), "{context}");
    // A still holds its checkout; B's session took nothing.
    let held = e2e::audit(&project.join(".locks"));
    assert!(
        held.iter()
            .any(|e| e["event"] == "acquire" && e["agent"] == a.as_str()),
        "{context}"
    );
    assert!(
        !held
            .iter()
            .any(|e| e["event"] == "acquire" && e["agent"] == session.id.as_str()),
        "{context}"
    );
}

/// `tasklock` run by an orchestrator in `project` as `agent`, with `secret`.
fn orchestrator(project: &Path, agent: &str, secret: &str, args: &[&str]) -> std::process::Child {
    std::process::Command::new(e2e::tasklock_bin())
        .args(args)
        .args(["--agent", agent, "--json"])
        .current_dir(project)
        .env_remove("TASKLOCK_DIR")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .env("TASKLOCK_SECRET", secret)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn an_orchestrator_claims_for_a_session_before_starting_it() {
    let (_tmp, home, project) = initialised_project();
    e2e::claude();
    // Two orchestrators race for issue-42, each for the session it would start: one
    // wins, the other is refused (exit 2) before it starts anything.
    let ids = [e2e::uuid(), e2e::uuid()];
    let secrets = [e2e::uuid(), e2e::uuid()];
    let racers: Vec<_> = (0..2)
        .map(|i| {
            let args = ["checkout", "issue-42", "--timeout", "30s"];
            orchestrator(&project, &ids[i], &secrets[i], &args)
        })
        .collect();
    let codes: Vec<i32> = racers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [0, 2],
        "one orchestrator wins, the other is refused"
    );
    let w = codes.iter().position(|&c| c == 0).unwrap();
    // A claim for a session whose spawn fails: nobody adopts it.
    let lost = orchestrator(
        &project,
        &e2e::uuid(),
        &e2e::uuid(),
        &["checkout", "issue-43", "--timeout", "1s"],
    );
    assert!(lost.wait_with_output().unwrap().status.success());
    let lost_until = Instant::now() + Duration::from_millis(3500);

    // The winner starts its session with the claim's secret; the stub model releases the
    // key `--done` once the SessionStart context tells it the key is its own.
    let stub = Stub::script(Script {
        on_text: vec![(
            "Claimed for this session before it started".into(),
            "tasklock release issue-42 --done".into(),
        )],
        ..Script::default()
    });
    let mut cmd = e2e::claude_cmd(&home, Some(&stub));
    cmd.arg("--allowedTools")
        .args(e2e::allowed_rules())
        .env("TASKLOCK_SECRET", &secrets[w])
        .current_dir(&project)
        .args(["-p", "Work on the task you hold.", "--session-id", &ids[w]])
        .args(["--output-format", "json"]);
    let out = e2e::Running::spawn(cmd, "claude -p (claimed session)").wait(e2e::SESSION_TIMEOUT);
    let context = format!(
        "--- tool results\n{}\n--- audit\n{}\n--- requests\n{}\n--- claude\n{}",
        stub.results_text(),
        audit_text(&project),
        stub.log(),
        out.text()
    );
    assert!(out.status.success(), "{context}");
    let (err, text) = result_of(&stub, "text-0");
    assert!(!err && text.contains("Released"), "{text}\n{context}");
    let audit = e2e::audit(&project.join(".locks"));
    let of = |event: &str, key: &str| {
        audit
            .iter()
            .filter(|e| e["event"] == event && e["key"] == key)
            .cloned()
            .collect::<Vec<_>>()
    };
    let adopt = of("adopt", "issue-42");
    assert_eq!(adopt.len(), 1, "{context}");
    assert_eq!(adopt[0]["agent"], ids[w].as_str(), "{context}");
    let release = of("release", "issue-42");
    assert_eq!(release.len(), 1, "{context}");
    assert_eq!(release[0]["agent"], ids[w].as_str(), "{context}");
    // The claim nobody adopted frees itself when its second (and the 2s grace) ran out:
    // another orchestrator takes it.
    std::thread::sleep(lost_until.saturating_duration_since(Instant::now()));
    let taken = orchestrator(&project, "orchestrator-3", "s3", &["checkout", "issue-43"])
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&taken.stdout);
    assert!(taken.status.success(), "{text}\n{context}");
    // Ended as a lapsed lease: by this checkout, or earlier by a sweep of the session's.
    let lapsed = e2e::audit(&project.join(".locks")).into_iter().any(|e| {
        e["event"] == "auto_release" && e["key"] == "issue-43" && e["reason"] == "timeout"
    });
    assert!(lapsed, "{text}\n{context}");
}

/// Issue 49: `claude --worktree NAME` in a project `tasklock init` set up. Claude Code's
/// WorktreeCreate hook is tasklock's: the session works in the worktree tasklock made and
/// holds it as its checkout of `worktree:NAME`; when the session ends, so does the
/// checkout, and the worktree, which holds nothing, is removed with its branch.
#[test]
fn a_session_started_with_worktree_holds_it_as_its_checkout() {
    let (_tmp, home, project) = initialised_project();
    // What `init` wrote is committed, as a team does: a worktree has the project's hooks
    // only so (`.locks/` is ignored).
    let mut git = std::process::Command::new("sh");
    git.args([
        "-c",
        "git add -A && git -c user.name=e2e -c user.email=e2e@example.com commit -q -m init",
    ])
    .current_dir(&project);
    e2e::run_ok(git, "git commit", Duration::from_secs(30));
    let stub = Stub::script(Script::bash(&["pwd", "tasklock list --json"]));
    let session = run_session_with(
        &home,
        &project,
        &stub,
        "Say where you work, then list the checkouts.",
        &["--worktree", "feat-x"],
    );
    let (_, pwd) = result_of(&stub, "main-0");
    let worktrees = project.canonicalize().unwrap().join(".worktrees");
    assert!(
        pwd.trim().starts_with(&worktrees.display().to_string()),
        "the session works in {pwd:?}, not under {}\n{}",
        worktrees.display(),
        session.out.text()
    );
    let (_, list) = result_of(&stub, "main-1");
    let list: serde_json::Value =
        serde_json::from_str(list.trim()).unwrap_or_else(|e| panic!("{e}: {list}"));
    let held = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "worktree:feat-x")
        .unwrap_or_else(|| panic!("worktree:feat-x is not held: {list}"))
        .clone();
    assert_eq!(held["agent"]["id"], session.id, "{held}");
    assert_eq!(held["worktree"]["path"], pwd.trim(), "{held}");

    // The session is over: its checkout ended, and the worktree with it.
    let events = e2e::audit(&project.join(".locks"));
    assert!(
        events.iter().any(|e| e["key"] == "worktree:feat-x"
            && e["event"] != "acquire"
            && e["agent"] == session.id.as_str()),
        "the checkout did not end: {}",
        audit_text(&project)
    );
    assert!(
        !Path::new(pwd.trim()).exists(),
        "the worktree stayed: {}",
        audit_text(&project)
    );
}

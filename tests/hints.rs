//! What the commands tell an agent to do next runs as printed, and what `doctor` says of
//! the hooks is what `init` wrote: checked through the real binary.

#[macro_use]
mod common;

use common::*;

/// The command in the first code span of the `Next:` line, split into words (the keys
/// and ids here need no quoting).
fn next_command(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("Next:"))
        .unwrap_or_else(|| panic!("no Next: line in\n{text}"));
    let span = line.split('`').nth(1).expect("a command in the Next: line");
    span.split_whitespace().map(str::to_string).collect()
}

/// A checkout made with `--agent`, then `status` by a caller with no identity (a script,
/// no terminal): the hint to release names the holder, so it runs as printed. A caller
/// with an identity of its own gets the hint without `--agent`.
#[test]
fn status_names_the_holder_for_a_caller_without_identity() {
    let env = Env::new();
    env.ok("alice", &["checkout", "task-1"]);
    let r = env.run(None, &["status", "task-1"]);
    assert_eq!(r.code, 0, "{}", r.text());
    snap!(env, "status_without_identity", r);
    let words = next_command(&r.stdout);
    assert_eq!(words[..3], ["tasklock", "release", "task-1"], "{words:?}");
    assert!(
        words.windows(2).any(|w| w == ["--agent", "alice"]),
        "{words:?}"
    );

    let r = env.run_env(None, &["status", "task-1"], &[("TASKLOCK_AGENT", "bob")]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        !next_command(&r.stdout).contains(&"--agent".to_string()),
        "{}",
        r.stdout
    );

    // The printed command, run as printed (no identity but its own flags), releases.
    let mut cmd = base_cmd(T0);
    use_store(&mut cmd, &env.dir());
    cmd.args(&words[1..]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{words:?}: {}", r.text());
    assert!(r.stdout.starts_with("Released"), "{}", r.text());
}

/// `doctor` counts the hooks `init` writes into .claude/settings.json, all of them.
#[test]
fn doctor_counts_the_hooks_init_writes() {
    let (env, top) = git_env();
    let r = env.run_in(&top, Some("ops"), &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(top.join(".claude/settings.json")).unwrap())
            .unwrap();
    let events: Vec<&String> = settings["hooks"]
        .as_object()
        .expect("hooks")
        .iter()
        .filter(|(_, groups)| groups.to_string().contains("tasklock hook"))
        .map(|(event, _)| event)
        .collect();
    let r = env.run_in(&top, Some("ops"), &["doctor", "--json"]);
    let j = r.json();
    let hooks = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hooks")
        .unwrap_or_else(|| panic!("no hooks check: {j}"));
    assert_eq!(hooks["status"], "ok", "{hooks}");
    let detail = hooks["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("wires all {} of tasklock's hooks", events.len())),
        "{detail}; init wrote {events:?}"
    );
    for event in events {
        assert!(detail.contains(event.as_str()), "{detail} lacks {event}");
    }
}

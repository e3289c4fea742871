//! Output for people and for agents: `--format table` (the default for a person at a
//! terminal) fits the width and tells times locally and relatively; markdown stays the
//! same byte for byte for pipes and inside agents, even when they give commands a terminal.

#[macro_use]
mod common;

use std::process::Command;

use common::*;

const T10: &str = "2026-01-01T10:00:00Z";

/// Two agents at work, one waiting in line, the clock at 10:05.
fn fleet() -> Env {
    let mut e = Env::new();
    e.at(T10);
    e.ok(
        "agent-a",
        &[
            "checkout",
            "task-1",
            "--reason",
            "fix the parser bug that drops the last line of every file it reads",
        ],
    );
    e.ok("agent-b", &["checkout", "task-2", "--path", "src/*"]);
    e.run(Some("agent-c"), &["checkout", "task-1", "--queue"]);
    e.at("2026-01-01T10:05:00Z");
    e
}

/// What each command prints at `width` columns, in the form for people.
fn tables(e: &Env, width: &str) -> String {
    let env = [("COLUMNS", width), ("TZ", "UTC")];
    let mut out = String::new();
    let steps: [(&str, &[&str]); 11] = [
        ("agent-c", &["list"]),
        ("agent-c", &["status", "task-1"]),
        ("agent-c", &["agents"]),
        ("agent-c", &["why", "task-1"]),
        ("agent-c", &["checkout", "task-2"]),
        ("agent-c", &["checkout", "task-3", "--reason", "docs"]),
        ("agent-c", &["release", "task-3"]),
        ("agent-a", &["release", "task-1"]),
        ("agent-c", &["inbox"]),
        ("agent-c", &["backlog", "add", "docs-1", "docs-2"]),
        ("agent-c", &["backlog"]),
    ];
    for (agent, args) in steps {
        let mut a = args.to_vec();
        a.extend(["--format", "table"]);
        let r = e.run_env(Some(agent), &a, &env);
        out.push_str(&format!(
            "$ tasklock {} (exit {})\n",
            args.join(" "),
            r.code
        ));
        out.push_str(&r.stdout);
        out.push_str(&r.stderr);
        out.push('\n');
    }
    out
}

#[test]
fn tables_fit_80_and_120_columns() {
    for width in ["80", "120"] {
        let e = fleet();
        let out = tables(&e, width);
        let w: usize = width.parse().unwrap();
        // Every table row fits; keys are never cut.
        for l in out
            .lines()
            .filter(|l| l.starts_with("task-") || l.starts_with("KEY"))
        {
            assert!(l.chars().count() <= w, "wider than {w}: {l:?}\n{out}");
        }
        assert!(!out.contains("|---"), "no markdown table:\n{out}");
        assert!(!out.contains("2026-01-01T"), "no ISO times:\n{out}");
        let run = Run {
            code: 0,
            stdout: out,
            stderr: String::new(),
        };
        snap!(e, format!("tables_{width}"), run);
    }
}

#[test]
fn table_times_are_local() {
    let e = fleet();
    let r = e.run_env(
        Some("agent-c"),
        &["status", "task-1", "--format", "table"],
        &[("TZ", "Asia/Tokyo")],
    );
    // 10:30 UTC is 19:30 in Tokyo.
    assert!(r.stdout.contains("19:30 (in 25m)"), "{}", r.text());
}

/// The agent environments: at a terminal with any of them, output stays markdown.
const AGENTS: [(&str, &str); 6] = [
    ("CLAUDECODE", "1"),
    ("CLAUDE_CODE_ENTRYPOINT", "cli"),
    ("CODEX_SANDBOX", "seatbelt"),
    ("GEMINI_CLI", "1"),
    ("OPENCODE", "1"),
    ("CURSOR_AGENT", "1"),
];

/// `tasklock ARGS` with stdout a terminal (util-linux `script` gives it one), with `env`
/// and none of the agent variables this test process may have; its output, line ends
/// as written.
fn at_terminal(e: &Env, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut words = vec![env!("CARGO_BIN_EXE_tasklock").to_string()];
    words.extend(["--dir".into(), e.dir().display().to_string()]);
    words.extend(args.iter().map(|a| a.to_string()));
    let line = words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("TASKLOCK_NOW", &e.now)
        .env("COLUMNS", "100")
        .env("TZ", "UTC")
        .env_remove("TASKLOCK_FORMAT")
        .env_remove("TASKLOCK_AGENT")
        .stdin(std::process::Stdio::null());
    for (name, _) in std::env::vars() {
        let agent = name == "CLAUDECODE"
            || ["CLAUDE_CODE_", "CODEX_", "OPENCODE", "GEMINI_"]
                .iter()
                .any(|p| name.starts_with(p))
            || name == "CURSOR_AGENT";
        if agent {
            cmd.env_remove(name);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("util-linux `script` runs");
    // The terminal turns each line end into CR LF.
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

#[test]
fn markdown_is_unchanged_for_pipes_and_agents_even_at_a_terminal() {
    let e = fleet();
    for args in [
        &["list", "--agent", "agent-c"][..],
        &["status", "task-1", "--agent", "agent-c"],
        &["agents", "--agent", "agent-c"],
        &["why", "task-1", "--agent", "agent-c"],
    ] {
        let piped = e.run(None, args);
        let mut md = args.to_vec();
        md.extend(["--format", "md"]);
        assert_eq!(piped.stdout, e.run(None, &md).stdout, "{args:?}");
        assert_eq!(piped.code, 0, "{}", piped.text());
        for var in AGENTS {
            let tty = at_terminal(&e, args, &[var]);
            assert_eq!(tty, piped.stdout, "{args:?} at a terminal with {var:?}");
        }
        // A person at the same terminal gets the table, as `--format table` prints it.
        let mut table = args.to_vec();
        table.extend(["--format", "table"]);
        let want = e.run_env(None, &table, &[("COLUMNS", "100"), ("TZ", "UTC")]);
        assert_eq!(at_terminal(&e, args, &[]), want.stdout, "{args:?}");
        // TASKLOCK_FORMAT chooses, and `--format` over it.
        let env_md = at_terminal(&e, args, &[("TASKLOCK_FORMAT", "md")]);
        assert_eq!(env_md, piped.stdout, "{args:?}");
        let env_table = e.run_env(
            None,
            args,
            &[
                ("TASKLOCK_FORMAT", "table"),
                ("COLUMNS", "100"),
                ("TZ", "UTC"),
            ],
        );
        assert_eq!(env_table.stdout, want.stdout, "{args:?}");
    }
    snap!(e, "list_piped", e.run(Some("agent-c"), &["list"]));
}

#[test]
fn json_is_json_whatever_the_terminal_and_the_variable() {
    let e = fleet();
    for args in [&["list", "--json"][..], &["list", "--format", "json"]] {
        let r = e.run_env(Some("agent-c"), args, &[("TASKLOCK_FORMAT", "table")]);
        assert_eq!(r.json()["checkouts"].as_array().unwrap().len(), 2);
        let tty = at_terminal(&e, args, &[]);
        let v: serde_json::Value = serde_json::from_str(&tty).expect(&tty);
        assert_eq!(v["checkouts"][0]["key"], "task-1");
    }
    let r = e.run_env(Some("agent-c"), &["list"], &[("TASKLOCK_FORMAT", "json")]);
    assert_eq!(r.json()["command"], "list");
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let e = fleet();
    let r = e.run_env(Some("agent-c"), &["list"], &[("TASKLOCK_FORMAT", "xml")]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("md, json or table"), "{}", r.text());
    assert_eq!(r.stdout, "");
    let r = e.run(Some("agent-c"), &["list", "--format", "xml"]);
    assert_eq!(r.code, 64, "{}", r.text());
}

#[test]
fn hooks_never_break_on_a_bad_format_variable() {
    let e = fleet();
    let mut cmd = base_cmd(&e.now);
    cmd.env("TASKLOCK_FORMAT", "xml")
        .args(["--dir"])
        .arg(e.dir())
        .args(["hook", "user-prompt-submit"]);
    let r = exec(cmd);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!r.stderr.contains("TASKLOCK_FORMAT"), "{}", r.text());
}

/// The width is the terminal's own (TIOCGWINSZ), with no COLUMNS to say it: a 72-column
/// tmux pane, and a clean environment (no agent variables, no COLUMNS).
#[test]
fn tables_fit_the_terminal_they_are_printed_on() {
    let e = fleet();
    let done = e.tmp.path().join("done");
    let script = format!(
        "env -i PATH=/usr/bin:/bin TZ=UTC TASKLOCK_NOW={} {} --dir {} --agent agent-c list; touch {}; sleep 60",
        e.now,
        env!("CARGO_BIN_EXE_tasklock"),
        e.dir().display(),
        done.display()
    );
    let t = common::tmux::Tmux::start(&script, 72, 20);
    t.until("the table", |s| s.contains("agent-b") && done.exists());
    // Wrapped lines joined: a line wider than the pane shows as one.
    let screen = t.ok(&["capture-pane", "-p", "-J", "-t", common::tmux::SESSION]);
    assert!(screen.contains("KEY"), "{screen}");
    assert!(screen.contains('…'), "the reason is cut to fit:\n{screen}");
    assert!(!screen.contains("|---"), "{screen}");
    for l in screen.lines() {
        assert!(l.trim_end().chars().count() <= 72, "{l:?}\n{screen}");
    }
}

//! `tasklock top`: the fleet drawn from the store (one frame with `--once`, snapshotted;
//! the fleet as JSON), nothing written by looking, hostile text drawn inert, and the live
//! view in a real terminal (tmux): changes made by other processes appear, a resize is
//! redrawn, a force-release needs a person and a confirmation, `q` and SIGTERM give the
//! terminal back. Runs on PostgreSQL too (tests/pg.rs includes it).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::tmux::{SESSION, Tmux};
use common::{Env, T0};

const T14M: &str = "2026-01-01T00:14:00Z";
const T15M: &str = "2026-01-01T00:15:00Z";

/// A fleet with a bit of everything: a checkout with a reason, a path checkout, a queue,
/// a key with slots, a freeze, and a holder that stopped beating.
fn fleet(env: &mut Env) {
    // One sweep of dead holders an hour: the beats at T14M do not end the dead ones'
    // checkouts, so the view meets them still held.
    env.configure("sweep_interval: 1h\n");
    env.at(T0);
    // Alice is a Claude Code session (its hooks' environment names its socket).
    let r = env.run_env(
        Some("alice"),
        &["heartbeat", "--status", "shipping"],
        &[
            (
                "CLAUDE_CODE_MESSAGING_SOCKET",
                "/tmp/tasklock-top-test.sock",
            ),
            ("CLAUDE_CODE_SESSION_ID", "alice"),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    env.ok(
        "alice",
        &[
            "checkout",
            "deploy://api-prod",
            "--name",
            "researcher",
            "--reason",
            "ship 1.2",
            "--timeout",
            "1h",
        ],
    );
    env.ok("bob", &["heartbeat"]);
    env.ok(
        "bob",
        &["checkout", "k2", "--path", "src/**", "--timeout", "1h"],
    );
    let q = env.run(Some("carol"), &["checkout", "deploy://api-prod", "--queue"]);
    assert_eq!(q.code, 2, "{}", q.text());
    env.ok(
        "dave",
        &["checkout", "build", "--slots", "2", "--timeout", "1h"],
    );
    // Carol stays alive and holds a key dave queues for: a wait the graph keeps.
    env.ok("carol", &["checkout", "review-9", "--timeout", "1h"]);
    let q = env.run(Some("dave"), &["checkout", "review-9", "--queue"]);
    assert_eq!(q.code, 2, "{}", q.text());
    env.ok(
        "alice",
        &["freeze", "prod*", "--for", "2h", "--reason", "release week"],
    );
    env.ok("carol", &["heartbeat"]);
    env.ok("dave", &["heartbeat"]);
    // Alice and bob stop beating: at T15M they are dead (silent), their leases still run.
    env.at(T14M);
    env.ok("carol", &["heartbeat"]);
    env.ok("dave", &["heartbeat"]);
    env.at(T15M);
}

/// Snapshot a frame: the same file when tests/pg.rs runs this one on PostgreSQL. The
/// store's name (a temp path, or a PostgreSQL schema) ends the header line.
fn frame_snapshot(name: &str, frame: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r" · (the lock directory|PostgreSQL at) .*", " · [STORE]");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(format!("top__{name}"), frame));
}

#[test]
fn one_frame_shows_the_fleet() {
    let mut env = Env::new();
    fleet(&mut env);
    let r = env.run(None, &["top", "--once", "--size", "132x34"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let text = r.stdout.clone();
    // The facts, whatever the layout.
    for fact in [
        "deploy://api-prod",
        "alice (researcher) · claude-code",
        "ending: holder dead",
        "src/**",
        "1/2",
        "dave waits for carol on review-9",
        "frozen: prod* for 1h more (release week)",
        "dead: silent",
        "shipping",
    ] {
        assert!(text.contains(fact), "no {fact:?} in:\n{text}");
    }
    frame_snapshot("top_frame_132x34", &text);
}

#[test]
fn a_small_terminal_shows_the_pane_in_focus() {
    let mut env = Env::new();
    fleet(&mut env);
    let r = env.run(None, &["top", "--once", "--size", "60x12"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 12, "{}", r.stdout);
    assert!(
        lines.iter().all(|l| l.chars().count() <= 60),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("Checkouts (4)"), "{}", r.stdout);
    // The other sections are tabs: named on the tab line, not drawn.
    assert!(r.stdout.contains("2 Agents"), "{}", r.stdout);
    assert!(!r.stdout.contains("attention first"), "{}", r.stdout);
    frame_snapshot("top_frame_60x12", &r.stdout);
}

#[test]
fn the_fleet_as_json() {
    let mut env = Env::new();
    fleet(&mut env);
    let j = env.run(None, &["top", "--once", "--json"]).json();
    assert_eq!(j["now"], "2026-01-01T00:15:00Z");
    let keys: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["build", "deploy://api-prod", "k2", "review-9"]);
    let deploy = &j["checkouts"][1];
    assert_eq!(deploy["agent"]["id"], "alice");
    assert_eq!(deploy["holder_state"], "dead");
    assert_eq!(deploy["holder_cause"], "silent");
    assert_eq!(deploy["holder_client"], "claude-code");
    assert!(j["checkouts"][0].get("holder_client").is_none());
    assert_eq!(deploy["ending"], "agent_death");
    assert_eq!(deploy["queued"], 1);
    assert_eq!(j["checkouts"][0]["slots"], 2);
    // Carol's wait for alice's key is kept by nobody: alice is dead, and the next command
    // to meet her checkout ends it. Dave's is kept by carol.
    assert_eq!(
        j["waits"],
        serde_json::json!([{"waiter": "dave", "key": "review-9", "blocker": "carol"}])
    );
    assert_eq!(j["cycles"], serde_json::json!([]));
    assert_eq!(j["freezes"][0]["pattern"], "prod*");
    let agents: Vec<(&str, &str)> = j["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["id"].as_str().unwrap(), a["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        agents,
        [
            ("carol", "alive"),
            ("dave", "alive"),
            ("alice", "dead"),
            ("bob", "dead")
        ]
    );
    assert_eq!(
        j["agents"][0]["waiting_for"],
        serde_json::json!(["deploy://api-prod"])
    );
}

#[test]
fn looking_writes_nothing() {
    let mut env = Env::new();
    fleet(&mut env);
    let audit_before = env.run(None, &["audit", "--json"]).stdout.lines().count();
    // Alice is dead: any command that meets her checkout ends it. The view only says so.
    for _ in 0..2 {
        let j = env.run(None, &["top", "--once", "--json"]).json();
        assert_eq!(j["checkouts"][1]["ending"], "agent_death");
        env.run(None, &["top", "--once"]);
    }
    let audit_after = env.run(None, &["audit", "--json"]).stdout.lines().count();
    assert!(audit_before >= 5, "{audit_before}");
    assert_eq!(audit_before, audit_after, "the view wrote to the audit log");
    // A command does end it.
    let list = env.run(Some("carol"), &["list", "--json"]).json();
    assert!(
        list["checkouts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["key"] != "deploy://api-prod"),
        "{list}"
    );
}

#[test]
fn hostile_text_is_drawn_inert() {
    let env = Env::new();
    let long = format!("k{}", "x".repeat(511));
    let bidi = "invoice\u{202e}fdp.exe";
    env.ok(
        "mallory",
        &["heartbeat", "--status", &format!("status {bidi}")],
    );
    env.ok(
        "mallory",
        &[
            "checkout",
            "**bold** | table | <script>alert(1)</script>",
            "--reason",
            bidi,
        ],
    );
    env.ok("mallory", &["checkout", &long]);
    // Commands refuse control characters in text; a hand-edited record is drawn inert too.
    env.ok("mallory", &["checkout", "edited", "--reason", "plain"]);
    let hostile = "\u{1b}[2J\u{1b}]0;pwned\u{7}wipe";
    common::Stored::Record("edited").edit(&env.dir(), |v| v["reason"] = hostile.into());
    let r = env.run(None, &["top", "--once", "--size", "200x40"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(!r.stdout.contains('\u{1b}'), "an escape reached the screen");
    assert!(!r.stdout.contains('\u{7}'), "a bell reached the screen");
    assert!(
        !r.stdout.contains('\u{202e}'),
        "a bidi override reached the screen"
    );
    assert!(
        r.stdout.contains("\\u{1b}[2J\\u{1b}]0;pwned"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("**bold** | table | <script>"),
        "{}",
        r.stdout
    );
    // JSON keeps the text as it is: it is data there.
    let j = env.run(None, &["top", "--once", "--json"]).json();
    let reasons: Vec<&str> = j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["reason"].as_str())
        .collect();
    assert_eq!(reasons, [bidi, hostile]);
    // The longest key fits its cell: the frame keeps its width.
    assert!(r.stdout.lines().all(|l| l.chars().count() <= 200));
}

#[test]
fn bad_arguments_are_usage_errors() {
    let env = Env::new();
    env.ok("a", &["checkout", "k"]);
    let r = env.run(None, &["top", "--once", "--size", "huge"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("COLUMNSxROWS"), "{}", r.text());
    // Not a terminal, and not --once: said plainly, not a garbled screen.
    let r = env.run(None, &["top"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("--once"), "{}", r.text());
    let r = env.run(None, &["top", "--json"]);
    assert_eq!(r.code, 64, "{}", r.text());
}

// ---- The live view, in tmux ----

/// `tasklock top ARGS` in a detached tmux session of `cols`×`rows` on a tmux server of
/// its own; the shell around it prints `EXITED <code>` when it ends.
fn start_top(env: &Env, args: &str, extra_env: &[(&str, &str)], cols: u16, rows: u16) -> Tmux {
    let bin = env!("CARGO_BIN_EXE_tasklock");
    let mut script = String::from(
        "unset TASKLOCK_AGENT TASKLOCK_AGENT_NAME CLAUDE_CODE_SESSION_ID CODEX_THREAD_ID TASKLOCK_NOW TASKLOCK_OPERATOR_SECRET TASKLOCK_URL TASKLOCK_SESSION_URL; ",
    );
    let mut cmd = Command::new("true");
    common::use_store(&mut cmd, &env.dir());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            script.push_str(&format!(
                "export {}='{}'; ",
                k.to_string_lossy(),
                v.to_string_lossy()
            ));
        }
    }
    for (k, v) in extra_env {
        script.push_str(&format!("export {k}='{v}'; "));
    }
    script.push_str(&format!(
        "'{bin}' top --dir '{}' {args}; echo EXITED $?; sleep 600",
        env.dir().display()
    ));
    Tmux::start(&script, cols, rows)
}

/// The live view reads the real clock: so do the commands of these tests ([`real`]).
fn live_env() -> Env {
    Env::new()
}

/// A command with the real clock, as `agent`.
fn real(env: &Env, agent: &str, args: &[&str]) -> common::Run {
    env.run_now(Some(agent), args)
}

fn real_ok(env: &Env, agent: &str, args: &[&str]) -> common::Run {
    let r = real(env, agent, args);
    assert!(r.code == 0, "{args:?}: {}", r.text());
    r
}

/// A process that can be killed to make an agent die.
fn sleeper() -> std::process::Child {
    Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn live_view_follows_other_processes_and_gives_the_terminal_back() {
    let env = live_env();
    real_ok(&env, "seed", &["checkout", "seed-key"]);
    let t = start_top(&env, "", &[], 120, 40);
    t.shows("seed-key");

    // A checkout, a queue join, a death and a release, each made by another process.
    real_ok(
        &env,
        "alice",
        &["checkout", "task-7", "--reason", "fix the flaky test"],
    );
    t.shows("task-7");
    assert_eq!(
        real(&env, "bob", &["checkout", "task-7", "--queue"]).code,
        2
    );
    t.shows("bob waits for alice on task-7");

    let mut child = sleeper();
    let pid = child.id().to_string();
    real_ok(&env, "carol", &["heartbeat", "--pid", &pid]);
    real_ok(&env, "carol", &["checkout", "deploy"]);
    let s = t.shows("deploy");
    assert!(s.contains("carol"), "{s}");
    child.kill().unwrap();
    child.wait().unwrap();
    t.shows("dead: process_gone");
    t.shows("ending: holder dead");

    real_ok(&env, "alice", &["release", "task-7"]);
    // The key is handed to bob, the head of its queue: the reservation shows, the wait goes.
    t.until("task-7 released", |s| {
        !s.contains("bob waits for alice") && s.contains("alice released task-7")
    });

    // Filter, then a key's detail.
    t.keys(&["/", "s", "e", "e", "d", "Enter"]);
    let s = t.shows("filter: seed");
    assert!(!s.contains("deploy "), "{s}");
    t.keys(&["Enter"]);
    t.shows("No notes for the next holder.");
    // `why`, in the view's own words.
    t.shows("- seed holds it (token 1)");
    t.keys(&["Escape", "/", "Escape"]);

    // Resized small: one pane, redrawn.
    t.ok(&["resize-window", "-t", SESSION, "-x", "60", "-y", "12"]);
    t.until("the small layout", |s| {
        s.contains("Checkouts (") && !s.contains("attention first")
    });
    t.ok(&["resize-window", "-t", SESSION, "-x", "120", "-y", "40"]);
    t.shows("Agents (");

    // q: the screen before the view comes back, and the exit code is 0.
    t.keys(&["q"]);
    let s = t.shows("EXITED 0");
    assert!(
        !s.contains("Checkouts ("),
        "the alternate screen was not left:\n{s}"
    );
}

#[test]
fn live_view_force_release_needs_a_person_and_a_yes() {
    let env = live_env();
    real_ok(&env, "alice", &["checkout", "hot-key"]);

    // Started with an agent's identity: read-only, and the key stays held.
    let t = start_top(&env, "", &[("TASKLOCK_AGENT", "some-agent")], 120, 40);
    t.shows("read-only (started as agent some-agent)");
    t.keys(&["r"]);
    t.shows("read-only: started as agent some-agent");
    drop(t);

    // A person: asked first; "n" keeps it, "y" releases it, audited as forced.
    let t = start_top(&env, "", &[], 120, 40);
    // The events pane names the key before the first snapshot lands: wait for the row.
    t.shows("Checkouts (1)");
    t.keys(&["r"]);
    t.shows("Force-release hot-key?");
    t.keys(&["n"]);
    t.shows("cancelled");
    assert!(real(&env, "alice", &["verify", "hot-key", "--token", "1"]).code == 0);
    t.keys(&["r"]);
    t.shows("Force-release hot-key?");
    t.keys(&["y"]);
    t.shows("force-released hot-key from alice");
    let log = env
        .run_now(None, &["audit", "--json", "--key", "hot-key"])
        .stdout;
    let forced: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "force_release")
        .collect();
    assert_eq!(forced.len(), 1, "{log}");
    assert!(
        forced[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("as a person at a terminal")),
        "{log}"
    );
    assert_eq!(
        real(&env, "alice", &["verify", "hot-key", "--token", "1"]).code,
        3
    );

    // --read-only: no action even for a person.
    drop(t);
    real_ok(&env, "alice", &["checkout", "hot-key"]);
    let t = start_top(&env, "--read-only", &[], 120, 40);
    t.shows("read-only (--read-only)");
    t.keys(&["r"]);
    t.shows("read-only: --read-only");

    // SIGTERM gives the terminal back too.
    let shell = t.shell_pid();
    let view = children_of(shell)
        .into_iter()
        .next()
        .expect("the view runs under the shell");
    assert!(alive(view));
    // SAFETY: a plain kill(2) of a pid this test found.
    unsafe { libc::kill(view as i32, libc::SIGTERM) };
    let s = t.shows("EXITED");
    assert!(!s.contains("Checkouts ("), "{s}");
}

/// A key is other agents' text: one that begins with `-` is acted on as that key, never
/// read as an option (`release --all --force` would end the person's own checkouts).
#[test]
fn live_view_acts_on_a_key_that_looks_like_an_option_as_a_key() {
    let env = live_env();
    for key in ["--all", "-x"] {
        let r = env.run_now(None, &["checkout", "--agent=alice", "--", key]);
        assert_eq!(r.code, 0, "{}", r.text());
    }
    real_ok(&env, "alice", &["checkout", "zzz-keep"]);
    let t = start_top(&env, "", &[], 120, 40);
    t.shows("Checkouts (3)");

    t.keys(&["/", "a", "l", "l", "Enter"]);
    t.until("only --all", |s| {
        s.contains("filter: all") && s.contains("Checkouts (1)")
    });
    t.keys(&["r"]);
    t.shows("Force-release --all?");
    t.keys(&["y"]);
    t.shows("force-released --all from alice");

    t.keys(&["/", "Escape", "/", "x", "Enter"]);
    t.until("only -x", |s| {
        s.contains("filter: x") && s.contains("Checkouts (1)")
    });
    t.keys(&["f"]);
    t.keys(&["Enter"]);
    t.shows("Freeze -x for 30m?");
    t.keys(&["y"]);
    t.shows("froze -x");

    // Exactly those keys: `--all` is free, `-x` frozen, alice's other key untouched.
    let list = real_ok(&env, "alice", &["list", "--json"]).stdout;
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let keys: Vec<&str> = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert!(!keys.contains(&"--all"), "{list}");
    assert!(keys.contains(&"zzz-keep"), "{list}");
    let log = env.run_now(None, &["audit", "--json"]).stdout;
    let frozen: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "freeze")
        .map(|e| e["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(frozen, ["-x"], "{log}");
}

/// Esc and the next key arriving together (typed fast, or read at once on a busy
/// machine) reach the view as that key with Alt, as a terminal sends Alt: the view takes
/// it as the Esc and then the key. Sent here as one write (`M-/`), as that race sends it.
#[test]
fn live_view_reads_esc_and_a_key_arriving_together_as_both() {
    let env = live_env();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    real_ok(&env, "alice", &["checkout", "zzz-keep"]);
    let t = start_top(&env, "", &[], 120, 40);
    t.shows("Checkouts (2)");

    t.keys(&["/", "z", "z", "z"]);
    t.shows("/zzz▏");
    // The Esc clears the filter and the `/` begins a new one.
    t.keys(&["M-/"]);
    t.until("an empty filter", |s| {
        s.contains("/▏") && !s.contains("/zzz")
    });
    t.keys(&["t", "a", "s", "k", "Enter"]);
    t.until("only task-1", |s| {
        s.contains("filter: task") && s.contains("Checkouts (1)")
    });

    // At a prompt the Esc cancels it: Esc and `y` together never confirm.
    t.keys(&["r"]);
    t.shows("Force-release task-1?");
    t.keys(&["M-y"]);
    t.until("the prompt gone", |s| !s.contains("Force-release task-1?"));
    let list = real_ok(&env, "alice", &["list", "--json"]).stdout;
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let keys: Vec<&str> = list["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["task-1", "zzz-keep"], "{list}");
}

#[test]
fn no_color_means_no_colour() {
    let env = live_env();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let coloured = |extra: &[(&str, &str)]| {
        let t = start_top(&env, "", extra, 120, 40);
        t.shows("task-1");
        let raw = t.ok(&["capture-pane", "-e", "-p", "-t", SESSION]);
        // A foreground colour in an SGR sequence: 30–38 or 90–97 (39 is the default).
        raw.split("\u{1b}[").skip(1).any(|seq| {
            seq.split_once('m').is_some_and(|(params, _)| {
                params.split(';').any(|p| {
                    p.parse::<u8>()
                        .is_ok_and(|n| (30..=38).contains(&n) || (90..=97).contains(&n))
                })
            })
        })
    };
    assert!(coloured(&[]), "a live holder is drawn in colour");
    assert!(!coloured(&[("NO_COLOR", "1")]), "NO_COLOR draws no colour");
}

fn children_of(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

// ---- What a person needs of it: every section at 80×24, help, focus, sort, who did what ----

/// [`fleet`], and at T15M: a long reason on a long path pattern, a refusal of a key whose
/// slots are all held, and a freeze ended early by someone other than its maker.
fn busy_fleet(env: &mut Env) {
    fleet(env);
    env.ok(
        "erin",
        &[
            "checkout",
            "path:src/parser",
            "--path",
            "src/parser/grammar/generated/tables/**",
            "--reason",
            "rewrite the lexer so that it never loses a token at the end of a line",
            "--timeout",
            "1h",
        ],
    );
    env.ok(
        "frank",
        &["checkout", "build", "--slots", "2", "--timeout", "1h"],
    );
    let r = env.run(Some("gina"), &["checkout", "build"]);
    assert_eq!(r.code, 2, "{}", r.text());
    env.ok("ops", &["freeze", "staging", "--for", "1h"]);
    env.as_operator();
    env.ok("kate", &["unfreeze", "staging"]);
}

/// The live view of `env`'s fleet with its clock pinned at `env.now`: frames the same
/// on every run, for snapshots.
fn start_pinned(env: &Env, cols: u16, rows: u16) -> Tmux {
    let now = env.now.clone();
    start_top(env, "", &[("TASKLOCK_NOW", &now)], cols, rows)
}

/// The screen once it shows `text` and is drawn whole: the same on two looks in a row
/// (a frame is written to the terminal in pieces, and tmux may be read between them).
fn settled(t: &Tmux, text: &str) -> String {
    let last = std::cell::RefCell::new(String::new());
    t.until(text, |s| {
        let same = *last.borrow() == s;
        *last.borrow_mut() = s.to_string();
        same && s.contains(text)
    })
}

#[test]
fn at_80x24_every_section_is_a_tab_away_and_help_lists_the_keys() {
    let mut env = Env::new();
    busy_fleet(&mut env);
    let t = start_pinned(&env, 80, 24);
    let s = settled(&t, "1 Checkouts (5)");
    // The header keeps what needs a person, the freeze count too.
    let head = s.lines().next().unwrap();
    for fact in ["5 checkouts", "2 dead", "2 waiting", "1 freeze"] {
        assert!(head.contains(fact), "no {fact:?} in the header:\n{s}");
    }
    // The tab line names every section; the focused one is marked.
    for tab in ["▶1 Checkouts (5)", "2 Agents", "3 Waits", "4 Events"] {
        assert!(s.contains(tab), "no tab {tab:?}:\n{s}");
    }
    assert!(s.contains("? help"), "{s}");
    // A path pattern cut keeps its `**`; the reason gets the rest of the line.
    assert!(s.contains("/**"), "{s}");
    frame_snapshot("top_live_80x24_checkouts", &s);

    t.keys(&["2"]);
    let s = settled(&t, "Agents (6) · attention first");
    assert!(s.contains("dead: silent"), "{s}");
    frame_snapshot("top_live_80x24_agents", &s);
    t.keys(&["3"]);
    let s = settled(&t, "dave waits for carol on review-9");
    assert!(
        s.contains("frozen: prod* for 1h more (release week)"),
        "{s}"
    );
    frame_snapshot("top_live_80x24_waits", &s);
    t.keys(&["4"]);
    let s = settled(&t, "kate unfroze staging (set by ops)");
    frame_snapshot("top_live_80x24_events", &s);
    // Tab goes round to the first section again.
    t.keys(&["Tab"]);
    t.shows("▶1 Checkouts (5)");

    t.keys(&["?"]);
    let s = settled(&t, "Attention first: dead");
    for key in ["S ", "reverse the sort", "1 2 3 4", "/ ", "enter"] {
        assert!(s.contains(key), "no {key:?} in the help:\n{s}");
    }
    frame_snapshot("top_live_80x24_help", &s);
    t.keys(&["Escape"]);
    t.until("the help closed", |s| !s.contains("Help: keys"));
    t.keys(&["q"]);
    t.shows("EXITED 0");
}

#[test]
fn at_160x45_all_sections_side_by_side() {
    let mut env = Env::new();
    busy_fleet(&mut env);
    let t = start_pinned(&env, 160, 45);
    t.shows("Checkouts (5)");
    let s = settled(&t, "kate unfroze staging");
    for fact in [
        "▶ Checkouts (5) · by attention ▼",
        "HOLDER ▼",
        "Agents (6) · attention first",
        "Waits & freezes (2)",
        "alice (researcher) · claude-code",
        "src/parser/grammar/generated/tables/**",
        "rewrite the lexer so that it never loses a token at the end of a line",
        "gina was refused build: all 2 slots are taken (dave, …)",
        "kate unfroze staging (set by ops)",
    ] {
        assert!(s.contains(fact), "no {fact:?} in:\n{s}");
    }
    frame_snapshot("top_live_160x45", &s);
}

/// Dead holders first, then those waited on or waiting, then the rest; agents likewise.
#[test]
fn what_needs_attention_comes_first() {
    let mut env = Env::new();
    fleet(&mut env);
    let r = env.run(None, &["top", "--once", "--size", "132x34"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let order = |words: &[&str]| {
        words
            .iter()
            .map(|w| {
                r.stdout
                    .find(w)
                    .unwrap_or_else(|| panic!("no {w:?} in:\n{}", r.stdout))
            })
            .collect::<Vec<_>>()
    };
    let keys = order(&["│deploy://api-prod", "│k2 ", "│build ", "│review-9 "]);
    assert!(
        keys.is_sorted(),
        "checkouts not attention first:\n{}",
        r.stdout
    );
    // The agents' names appear in the checkouts pane too: look below its header.
    let below = r.stdout.find("Agents (4)").unwrap();
    let agent_rows: Vec<usize> = ["■ alice", "■ bob ", "■ carol ", "■ dave "]
        .iter()
        .map(|w| below + r.stdout[below..].find(w).unwrap())
        .collect();
    assert!(
        agent_rows.is_sorted(),
        "agents not attention first:\n{}",
        r.stdout
    );
}

/// `s` picks the sorted column and marks it; `S` reverses it and the mark says so.
#[test]
fn sort_is_marked_and_reverses() {
    let mut env = Env::new();
    fleet(&mut env);
    let t = start_pinned(&env, 132, 34);
    t.shows("by attention ▼");
    t.keys(&["s"]);
    let s = t.shows("by key ▲");
    assert!(s.contains("KEY ▲"), "{s}");
    let rows = |s: &str| {
        ["│build ", "│deploy://api-prod", "│k2 ", "│review-9 "]
            .iter()
            .map(|k| s.find(k).unwrap_or_else(|| panic!("no {k:?} in:\n{s}")))
            .collect::<Vec<_>>()
    };
    assert!(rows(&s).is_sorted(), "{s}");
    t.keys(&["S"]);
    let s = t.shows("by key ▼");
    assert!(s.contains("KEY ▼"), "{s}");
    let mut down = rows(&s);
    down.reverse();
    assert!(down.is_sorted(), "not reversed:\n{s}");
    // The next column starts in its own direction again.
    t.keys(&["s"]);
    let s = t.shows("by lease left ▲");
    assert!(s.contains("LEASE ▲"), "{s}");
}

/// A section with more rows than fit says how many are out of sight.
#[test]
fn clipped_rows_say_how_many_more() {
    let env = Env::new();
    for i in 0..30 {
        env.ok(
            &format!("agent-{i:02}"),
            &["checkout", &format!("task-{i:02}")],
        );
    }
    let r = env.run(None, &["top", "--once", "--size", "80x24"]);
    assert_eq!(r.code, 0, "{}", r.text());
    // 24 rows: header, tabs, border, headings, 18 rows, border, footer.
    assert!(r.stdout.contains("+12 more ↓"), "{}", r.stdout);
    assert!(r.stdout.contains("task-17"), "{}", r.stdout);
    assert!(!r.stdout.contains("task-18"), "{}", r.stdout);
}

/// The key detail's next step is a command line of the CLI, never an MCP tool call.
#[test]
fn the_key_detail_suggests_cli_commands() {
    let mut env = Env::new();
    fleet(&mut env);
    let t = start_pinned(&env, 132, 34);
    t.shows("by attention ▼");
    t.keys(&["s"]);
    t.shows("by key ▲");
    // build, then deploy://api-prod: its holder is dead and carol queues.
    t.keys(&["Down", "Enter"]);
    let s = t.shows("Next:");
    assert!(s.contains("tasklock "), "{s}");
    assert!(!s.contains("{\"key\""), "{s}");
}

/// Issue 48, told without watching: `top --notify` tells the desktop (here a stand-in
/// `notify-send` on PATH, with a display) of a death once, in the events' own words, and
/// of nothing it was not asked to tell (a plain checkout and release).
#[test]
fn notify_tells_the_desktop_of_a_death_once() {
    let env = live_env();
    let bin = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let told = env.tmp.path().join("told");
    let fake = bin.join("notify-send");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s|' \"$@\" >> '{}'\necho >> '{}'\n",
            told.display(),
            told.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    real_ok(&env, "alice", &["checkout", "quiet-key"]);
    let t = start_top(
        &env,
        "--notify",
        &[("PATH", &path), ("DISPLAY", ":99")],
        120,
        40,
    );
    t.shows("Checkouts (1)");
    real_ok(&env, "alice", &["release", "quiet-key"]);
    let mut child = sleeper();
    let pid = child.id().to_string();
    real_ok(&env, "carol", &["heartbeat", "--pid", &pid]);
    real_ok(&env, "carol", &["checkout", "deploy"]);
    t.shows("deploy");
    child.kill().unwrap();
    child.wait().unwrap();
    // A command that meets the checkout ends it.
    real_ok(&env, "bob", &["list"]);
    t.shows("carol died holding deploy");
    let start = std::time::Instant::now();
    let lines = loop {
        let lines: Vec<String> = std::fs::read_to_string(&told)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if !lines.is_empty() || start.elapsed() > std::time::Duration::from_secs(10) {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("--app-name=tasklock|tasklock · ")
            && lines[0].ends_with("|carol died holding deploy; released by bob|"),
        "{lines:?}"
    );
    // Nothing more comes of later frames.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(std::fs::read_to_string(&told).unwrap().lines().count(), 1);
}

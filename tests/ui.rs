//! `tasklock ui`: the page and its door. Over plain HTTP: nothing without the token, no
//! other Host, no change from another origin or without the page's token, the security
//! headers on every answer, server-sent events that carry a change made by another
//! process, a timeline that escapes what agents wrote. In a real browser (Debian's
//! Chromium, headless, through chromedriver): the page shows the store, an update
//! arrives from another process, a key made of HTML and script stays text, a page of
//! another origin cannot force a release, and a person's force-release works. A fleet
//! bigger than a page: the server filters, sorts and pages (over HTTP, and from the page:
//! a typed filter finds a key beyond the first rows, the counts are the store's). The
//! server under load and at its edges: more idle connections than it has descriptors, a
//! signal with no connection coming, listening beyond loopback, two projects' pages in one
//! browser (whose tokens go to no other server); keys that look like options, and
//! noncharacters in the picture. Runs on PostgreSQL too (tests/pg.rs includes it).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Env;
use common::browser::{Answer, Browser, http};
use serde_json::{Value, json};

/// `tasklock ui` on a free loopback port, with the real clock.
struct Ui {
    child: Child,
    port: u16,
    token: String,
}

impl Ui {
    fn start(env: &Env, extra: &[&str]) -> Ui {
        Ui::start_in(env, extra, None)
    }

    /// As `start`, with at most `files` open descriptors (`ulimit -n` in a shell that
    /// then becomes the server: its pid is the server's).
    fn start_in(env: &Env, extra: &[&str], files: Option<u32>) -> Ui {
        Ui::launch(env, extra, files, &[])
    }

    /// As `start`, with more environment variables.
    fn start_with(env: &Env, vars: &[(&str, &str)]) -> Ui {
        Ui::launch(env, &[], None, vars)
    }

    fn launch(env: &Env, extra: &[&str], files: Option<u32>, vars: &[(&str, &str)]) -> Ui {
        let mut cmd = match files {
            None => Command::new(env!("CARGO_BIN_EXE_tasklock")),
            Some(n) => {
                let mut c = Command::new("sh");
                c.args([
                    "-c",
                    &format!("ulimit -n {n} && exec \"$0\" \"$@\""),
                    env!("CARGO_BIN_EXE_tasklock"),
                ]);
                c
            }
        };
        common::use_store(&mut cmd, &env.dir());
        for v in [
            "TASKLOCK_NOW",
            "TASKLOCK_AGENT",
            "CLAUDE_CODE_SESSION_ID",
            "CODEX_THREAD_ID",
            "TASKLOCK_OPERATOR_SECRET",
        ] {
            cmd.env_remove(v);
        }
        if env.operator {
            cmd.env("TASKLOCK_OPERATOR_SECRET", common::OPERATOR_SECRET);
        }
        cmd.envs(vars.iter().copied());
        cmd.arg("--dir")
            .arg(env.dir())
            .args(["ui", "--no-open"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start tasklock ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let found = line
            .trim()
            .strip_prefix("tasklock ui: ")
            .and_then(|url| url.strip_prefix("http://127.0.0.1:"))
            .and_then(|rest| rest.split_once("/#token="));
        let Some((port, token)) = found else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no URL on loopback with a token in {line:?}");
        };
        Ui {
            child,
            port: port.parse().unwrap(),
            token: token.to_string(),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/#token={}", self.port, self.token)
    }

    /// One HTTP request; its status line, headers and body.
    fn http(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        http(self.port, method, path, headers, body)
    }

    fn get(&self, path: &str) -> Answer {
        let host = format!("127.0.0.1:{}", self.port);
        self.http(
            "GET",
            path,
            &[("Host", &host), ("X-Tasklock-Token", &self.token)],
            "",
        )
    }
}

impl Ui {
    /// A change as the page asks for it: a POST from its own origin, with its token.
    fn change(&self, what: &str, body: &Value) -> Answer {
        let host = format!("127.0.0.1:{}", self.port);
        let own = format!("http://{host}");
        self.http(
            "POST",
            &format!("/api/{what}"),
            &[
                ("Host", &host),
                ("Origin", &own),
                ("X-Tasklock-Token", &self.token),
                ("Content-Type", "application/json"),
            ],
            &body.to_string(),
        )
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer once the server has read the store (503 until then), 20 s at most.
fn ready(ask: impl Fn() -> Answer) -> Answer {
    let start = Instant::now();
    loop {
        let a = ask();
        if a.status != 503 || start.elapsed() > Duration::from_secs(20) {
            return a;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command with the real clock, as `agent`.
fn real_ok(env: &Env, agent: &str, args: &[&str]) {
    let r = env.run_now(Some(agent), args);
    assert!(r.code == 0 || r.code == 2, "{args:?}: {}", r.text());
}

fn held(env: &Env, key: &str) -> bool {
    let j = env.run_now(None, &["top", "--once", "--json"]).json();
    j["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["key"] == key)
}

const HOSTILE: &str = "<img src=x onerror=\"document.title='pwned'\">";

#[test]
fn the_door_is_locked() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let ui = Ui::start(&env, &[]);
    let host = format!("127.0.0.1:{}", ui.port);

    // No token, a wrong one, another Host: refused, and nothing of the store is said.
    let wrong = vec![("Host", host.as_str()), ("X-Tasklock-Token", "0123")];
    let token = ui.token.as_str();
    for (path, headers) in [
        ("/api/fleet", vec![("Host", host.as_str())]),
        ("/events", vec![("Host", host.as_str())]),
        ("/timeline.svg", vec![("Host", host.as_str())]),
        ("/api/key?key=task-1", vec![("Host", host.as_str())]),
        ("/api/fleet", wrong.clone()),
        ("/api/fleet?token=0123", vec![("Host", host.as_str())]),
        (
            "/api/fleet",
            vec![("Host", "evil.example:80"), ("X-Tasklock-Token", token)],
        ),
        ("/", vec![("Host", "evil.example:80")]),
        ("/api/fleet", vec![("X-Tasklock-Token", token)]),
    ] {
        let a = ui.http("GET", path, &headers, "");
        assert_eq!(a.status, 403, "{path} {headers:?}: {}", a.head);
        assert!(!a.body.contains("task-1"), "{}", a.body);
        // A caller without the token keeps no connection.
        assert_eq!(
            a.header("Connection").as_deref(),
            Some("close"),
            "{}",
            a.head
        );
    }
    // With it (as a header, or in the query where a script cannot send headers).
    let a = ready(|| ui.get("/api/fleet"));
    assert_eq!(a.status, 200, "{}", a.head);
    let a = ready(|| {
        ui.http(
            "GET",
            &format!("/timeline.svg?token={token}"),
            &[("Host", &host)],
            "",
        )
    });
    assert_eq!(a.status, 200, "{}", a.head);

    // The page itself holds nothing of the store and no token: it is the same for
    // everyone, it sets no cookie, and it takes the token from the printed URL's
    // fragment (which no browser sends).
    let a = ui.http("GET", "/", &[("Host", &host)], "");
    assert_eq!(a.status, 200, "{}", a.head);
    assert!(a.header("Set-Cookie").is_none(), "{}", a.head);
    assert!(!a.body.contains(token) && !a.body.contains("task-1"));

    // Under a policy that allows no inline script.
    let a = ui.get("/");
    assert_eq!(a.status, 200, "{}", a.head);
    let csp = a.header("Content-Security-Policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(a.header("X-Frame-Options").as_deref(), Some("DENY"));
    assert!(a.header("Access-Control-Allow-Origin").is_none());
    assert!(!a.body.contains("<script>"), "no inline script: {}", a.body);
    for asset in ["/app.js", "/app.css"] {
        let a = ui.get(asset);
        assert_eq!(a.status, 200, "{asset}");
        assert!(a.header("Content-Security-Policy").is_some());
    }

    // Changes: not from another origin, not without the page's token, not as a form.
    let body = json!({"key": "task-1"}).to_string();
    let own = format!("http://{host}");
    for headers in [
        vec![
            ("Origin", "http://evil.example"),
            ("X-Tasklock-Token", ui.token.as_str()),
            ("Content-Type", "application/json"),
        ],
        vec![
            ("Origin", own.as_str()),
            ("Content-Type", "application/json"),
        ],
        vec![
            ("Origin", own.as_str()),
            ("X-Tasklock-Token", ui.token.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        vec![
            ("X-Tasklock-Token", ui.token.as_str()),
            ("Content-Type", "application/json"),
        ],
    ] {
        let mut h = vec![("Host", host.as_str())];
        h.extend(headers.iter().copied());
        let a = ui.http("POST", "/api/release", &h, &body);
        assert!(matches!(a.status, 403 | 415), "{headers:?}: {}", a.head);
        assert!(held(&env, "task-1"));
    }
    // A CORS preflight gets no permission.
    let a = ui.http(
        "OPTIONS",
        "/api/release",
        &[("Host", &host), ("Origin", "http://evil.example")],
        "",
    );
    assert!(
        a.header("Access-Control-Allow-Origin").is_none(),
        "{}",
        a.head
    );
    assert!(a.status >= 400);

    // Started without a person at a terminal (stdin is not one here): read-only, said.
    let a = ui.http(
        "POST",
        "/api/release",
        &[
            ("Host", &host),
            ("Origin", &own),
            ("X-Tasklock-Token", &ui.token),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    assert_eq!(a.status, 403, "{}", a.head);
    let j: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(j["ok"], false);
    assert!(j["message"].as_str().unwrap().contains("read-only"), "{j}");
    assert!(held(&env, "task-1"));
}

#[test]
fn events_carry_changes_made_elsewhere() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let ui = Ui::start(&env, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /events?token={} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        ui.token, ui.port
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut next_doc = || -> Value {
        loop {
            let mut line = String::new();
            assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended");
            if let Some(d) = line.strip_prefix("data: ") {
                return serde_json::from_str(d.trim()).unwrap();
            }
        }
    };
    let keys = |d: &Value| -> Vec<String> {
        d["checkouts"]["rows"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["key"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let start = Instant::now();
    let mut d = next_doc();
    while keys(&d).is_empty() {
        d = next_doc();
    }
    assert_eq!(keys(&d), ["task-1"]);
    assert_eq!(d["can_act"], "no person at a terminal");

    real_ok(
        &env,
        "bob",
        &["checkout", HOSTILE, "--reason", "<b>bold</b>"],
    );
    real_ok(&env, "carol", &["checkout", "task-1", "--queue"]);
    // The fleet follows the store at once; the audit log's events within a second.
    loop {
        d = next_doc();
        let queued = d["events"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "queue" && e["agent"] == "carol");
        if keys(&d).contains(&HOSTILE.to_string())
            && !d["waits"]["rows"].as_array().unwrap().is_empty()
            && queued
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no update: {d}");
    }
    assert_eq!(d["waits"]["rows"][0]["waiter"], "carol");
    assert_eq!(d["counts"]["checkouts"], 2, "{d}");
    assert_eq!(d["counts"]["waiting"], 1, "{d}");

    // The timeline: the hostile key is text in the picture, never markup.
    let svg = ui.get("/timeline.svg?since=600");
    assert_eq!(svg.status, 200);
    assert_eq!(svg.header("Content-Type").as_deref(), Some("image/svg+xml"));
    assert!(svg.body.starts_with("<svg"), "{}", svg.body);
    assert!(!svg.body.contains("<img"), "{}", svg.body);
    assert!(svg.body.contains("&lt;img src=x onerror="), "{}", svg.body);
    assert!(svg.body.contains("class=\"hold\""));
    assert!(svg.body.contains("class=\"wait\""));
    // One key in detail, its name encoded as the page encodes it.
    let enc: String = HOSTILE
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let k = ui.get(&format!("/api/key?key={enc}"));
    assert_eq!(k.status, 200, "{}", k.head);
    let j: Value = serde_json::from_str(&k.body).unwrap();
    assert_eq!(j["key"], HOSTILE);
    assert!(
        j["why"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("bob holds it")),
        "{j}"
    );
    // The verdict leads, with the state, read from `why`'s typed answer (the view has no
    // agent: no checkout of its own is decided).
    assert_eq!(j["why"][0], "You cannot check it out now (held).", "{j}");
    assert_eq!(j["history"][0]["event"], "acquire", "{j}");
    assert_eq!(ui.get("/api/key").status, 400);
    // By agent: bob's row says what he holds.
    let by = ui.get("/timeline.svg?since=600&by=agent");
    assert_eq!(by.status, 200, "{}", by.head);
    assert!(by.body.contains(", by agent</text>"), "{}", by.body);
    assert!(
        by.body.contains("bob held &lt;img src=x onerror="),
        "{}",
        by.body
    );
    assert!(by.body.contains("carol waited for task-1"), "{}", by.body);
    assert_eq!(ui.get("/timeline.svg?by=host").status, 400);
    let saved = ui.get("/timeline.svg?since=600&download=1");
    assert!(
        saved
            .header("Content-Disposition")
            .unwrap()
            .contains("attachment")
    );
}

#[test]
fn the_timeline_as_a_file() {
    let mut env = Env::new();
    env.at("2026-01-01T00:00:00Z");
    env.ok("alice", &["checkout", "task-1"]);
    env.run(Some("bob"), &["checkout", "task-1", "--queue"]);
    env.at("2026-01-01T00:10:00Z");
    env.ok("alice", &["release", "task-1"]);
    env.at("2026-01-01T00:12:00Z");
    env.ok("bob", &["checkout", "task-1"]);
    env.ok("alice", &["checkout", "deploy-api"]);
    env.ok("alice", &["freeze", "deploy*", "--for", "5m"]);
    env.at("2026-01-01T00:20:00Z");
    let file = env.tmp.path().join("t.svg");
    let r = env.run(
        None,
        &["ui", "--svg", file.to_str().unwrap(), "--since", "30m"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    // alice held task-1 for 10m; bob waited 12m and holds it since.
    assert!(
        svg.contains("alice held it (token 1) for 10m, ended by release"),
        "{svg}"
    );
    assert!(svg.contains("bob waited 12m"), "{svg}");
    assert!(
        svg.contains("bob held it (token 2) for 8m, still held"),
        "{svg}"
    );
    assert!(svg.contains("class=\"freeze\""), "{svg}");
    // One row per agent: what each held and waited for.
    let r = env.run(
        None,
        &[
            "ui",
            "--svg",
            file.to_str().unwrap(),
            "--since",
            "30m",
            "--by",
            "agent",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.contains("UTC, by agent</text>"), "{svg}");
    assert!(
        svg.contains("alice held task-1 (token 1) for 10m, ended by release"),
        "{svg}"
    );
    assert!(
        svg.contains("alice held deploy-api (token 3) for 8m, still held"),
        "{svg}"
    );
    assert!(svg.contains("bob waited for task-1 12m"), "{svg}");
    assert!(
        svg.contains(">alice</text>") && svg.contains(">bob</text>"),
        "{svg}"
    );
    assert!(!svg.contains(">task-1</text>"), "rows are agents: {svg}");
    let bad = env.run(None, &["ui", "--svg", "x.svg", "--by", "host"]);
    assert_eq!(bad.code, 64, "{}", bad.text());
    let bad = env.run(None, &["ui", "--svg", "/nonexistent/dir/t.svg"]);
    assert_eq!(bad.code, 1, "{}", bad.text());
    let bad = env.run(None, &["ui", "--since", "forever"]);
    assert_eq!(bad.code, 64, "{}", bad.text());
}

/// Keys are other agents' text: one that begins with `-` is a key, never an option of the
/// command the page runs. Force-releasing `--all` releases that key alone (not the
/// caller's own checkouts, not a live holder's), and freezing `-x` freezes `-x`.
#[test]
fn a_key_that_looks_like_an_option_is_a_key() {
    let mut env = Env::new();
    env.as_operator();
    let r = env.run_now(None, &["--agent=alice", "checkout", "--", "--all"]);
    assert_eq!(r.code, 0, "{}", r.text());
    real_ok(&env, "bob", &["checkout", "task-1"]);
    real_ok(&env, "ops", &["checkout", "ops-own"]);
    let ui = Ui::start(&env, &["--agent", "ops"]);

    let a = ui.change("release", &json!({"key": "--all"}));
    assert_eq!(a.status, 200, "{} {}", a.head, a.body);
    let j: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(j["ok"], true, "{j}");
    assert!(!held(&env, "--all"), "the key --all is released");
    assert!(held(&env, "task-1"), "bob's checkout is his");
    assert!(held(&env, "ops-own"), "the caller's own checkout stays");

    let a = ui.change("freeze", &json!({"key": "-x", "for": "30m"}));
    assert_eq!(a.status, 200, "{} {}", a.head, a.body);
    let top = env.run_now(None, &["top", "--once", "--json"]).json();
    let frozen: Vec<&str> = top["freezes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(frozen, ["-x"], "{top}");
    // A duration that looks like an option is a bad duration, not an option.
    let a = ui.change("freeze", &json!({"key": "task-1", "for": "--help"}));
    assert_eq!(a.status, 409, "{} {}", a.head, a.body);
    assert_eq!(
        env.run_now(None, &["top", "--once", "--json"]).json()["freezes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The key's detail is about that key too.
    let k = ui.get("/api/key?key=--all");
    let j: Value = serde_json::from_str(&k.body).unwrap();
    assert_eq!(j["key"], "--all");
    assert!(
        j["why"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l.as_str().unwrap().contains("error")),
        "{j}"
    );
}

/// Unicode's noncharacters are not text: a key with one is refused (exit 64). Other text
/// drawn in the timeline (an agent's id here; keys a store of older versions holds) may
/// still have U+FFFE or U+FFFF, which XML refuses: the picture escapes them and stays
/// XML, in the file and on the page.
#[test]
fn noncharacters_are_no_key_and_the_picture_stays_xml() {
    let env = Env::new();
    for key in ["k\u{fffe}", "k\u{ffff}", "\u{fdd0}", "a\u{10ffff}"] {
        let r = env.run_now(Some("alice"), &["checkout", key]);
        assert_eq!(r.code, 64, "{key:?}: {}", r.text());
        assert!(r.text().contains("noncharacter"), "{}", r.text());
    }
    real_ok(&env, "bob\u{ffff}", &["checkout", "task-1"]);
    real_ok(&env, "carol\u{fffe}", &["checkout", "task-1", "--queue"]);
    let file = env.tmp.path().join("t.svg");
    let r = env.run_now(
        None,
        &["ui", "--svg", file.to_str().unwrap(), "--by", "agent"],
    );
    assert_eq!(r.code, 0, "{}", r.text());
    let svg = std::fs::read_to_string(&file).unwrap();
    if let Err(e) = roxmltree::Document::parse(&svg) {
        panic!("the SVG is not XML: {e}\n{svg}");
    }
    assert!(svg.contains("bob\\u{ffff}"), "{svg}");
    let ui = Ui::start(&env, &[]);
    let page = ready(|| ui.get("/timeline.svg?since=600"));
    assert_eq!(page.status, 200, "{}", page.head);
    if let Err(e) = roxmltree::Document::parse(&page.body) {
        panic!("the page's SVG is not XML: {e}\n{}", page.body);
    }
    assert!(page.body.contains("carol\\u{fffe}"), "{}", page.body);
}

/// The CPU time (user and system, in clock ticks) the process `pid` has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's name in parentheses: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// More idle connections than the server has descriptors, each sending a byte now and
/// then: the person with the token is still answered, and the server does not spin.
#[test]
fn idle_connections_do_not_stop_the_page() {
    // This test's own descriptors: 1,500 connections and some.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if lim.rlim_cur < 4096 {
        lim.rlim_cur = lim.rlim_max.min(4096);
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let ui = Ui::start_in(&env, &[], Some(1024));
    let mut idle = Vec::new();
    for _ in 0..1500 {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], ui.port));
        // A server that stopped taking connections: no use trying more.
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            break;
        };
        let _ = s.write_all(b"G");
        idle.push(s);
    }
    // A byte every two seconds on each, for a minute at most.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drip = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && start.elapsed() < Duration::from_secs(60)
            {
                for s in &mut idle {
                    let _ = s.write_all(b"E");
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        })
    };
    let pid = ui.child.id();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_ticks(pid) - before;
    // The person with the token: answered (a stuck server would leave this read to time
    // out while the drip goes on).
    let host = format!("127.0.0.1:{}", ui.port);
    let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /api/fleet?table=checkouts HTTP/1.1\r\nHost: {host}\r\nX-Tasklock-Token: {}\r\nConnection: close\r\n\r\n",
        ui.token
    )
    .unwrap();
    let mut answer = String::new();
    let read = BufReader::new(s).read_to_string(&mut answer);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drip.join().unwrap();
    read.unwrap_or_else(|e| panic!("no answer: {e}"));
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 503"),
        "{answer}"
    );
    // Clock ticks are hundredths of a second here: a quarter of one core over three
    // seconds is 75 (the server that spun on accept used 70-90% of one).
    assert!(used < 75, "the server used {used} ticks of CPU in 3 s");
}

/// SIGINT, SIGTERM and SIGHUP end the server at once, with no connection coming.
#[test]
fn a_signal_ends_the_server() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let mut ui = Ui::start(&env, &[]);
        // The page is served: the server is up.
        assert_eq!(ui.get("/app.css").status, 200);
        unsafe { libc::kill(ui.child.id() as i32, sig) };
        let start = Instant::now();
        let status = loop {
            if let Some(st) = ui.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "signal {sig}: the server is still running"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "signal {sig}: {status:?}");
    }
}

/// Listening beyond loopback works as documented: any Host (the name the network gives
/// the machine), and the token still needed.
#[test]
fn listening_beyond_loopback_needs_the_token_and_no_host_name() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let ui = Ui::start(&env, &["--listen", "0.0.0.0"]);
    let host = format!("tasklock.example:{}", ui.port);
    let a = ui.http("GET", "/api/fleet", &[("Host", &host)], "");
    assert_eq!(a.status, 403, "{}", a.head);
    let a = ready(|| {
        ui.http(
            "GET",
            "/api/fleet",
            &[("Host", &host), ("X-Tasklock-Token", &ui.token)],
            "",
        )
    });
    assert_eq!(a.status, 200, "{}", a.head);
    let j: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(j["checkouts"]["rows"][0]["key"], "task-1");
    // The page at that name, and a change from it (its own Origin).
    let a = ui.http("GET", "/", &[("Host", &host)], "");
    assert_eq!(a.status, 200, "{}", a.head);
}

// ---- In a real browser ----

#[test]
fn the_page_in_a_real_browser() {
    let mut env = Env::new();
    // The operator secret lets this test's server act although no person started it.
    env.as_operator();
    real_ok(
        &env,
        "alice",
        &["checkout", "task-1", "--reason", "fix the flaky test"],
    );
    real_ok(
        &env,
        "bob",
        &[
            "checkout",
            HOSTILE,
            "--reason",
            "<script>document.title='pwned'</script>",
        ],
    );
    real_ok(&env, "carol", &["checkout", "task-1", "--queue"]);
    // Forces are made in the name of whoever started the page.
    let ui = Ui::start(&env, &["--agent", "ops"]);
    let b = Browser::start();

    // Without the token: refused, nothing shown.
    b.go(&format!("http://127.0.0.1:{}/", ui.port));
    let text = b.js("return document.body.innerText");
    assert!(text.as_str().unwrap().contains("needs its token"), "{text}");

    // With it: the store, as text.
    b.go(&ui.url());
    b.until(
        "the checkouts",
        "return document.querySelector('#checkouts tbody').innerText.includes('task-1')",
    );
    b.until(
        "carol's wait",
        "return document.querySelector('#waits').innerText.includes('carol waits for alice on task-1')",
    );
    let row = b.js("return document.querySelector('#checkouts tbody').innerText");
    assert!(row.as_str().unwrap().contains(HOSTILE), "{row}");
    assert!(
        row.as_str().unwrap().contains("fix the flaky test"),
        "{row}"
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#checkouts img, #checkouts script, #checkouts b').length"),
        json!(0)
    );
    assert_eq!(b.js("return document.title"), json!("tasklock"));
    // The URL kept no token.
    assert_eq!(b.js("return location.search + location.hash"), json!(""));

    // A key in detail: why, notes, history, all as text.
    real_ok(
        &env,
        "alice",
        &["note", "task-1", "<i>half done</i>: tests pass"],
    );
    b.js("[...document.querySelectorAll('#checkouts tbody tr')] \
          .find(r => r.cells[0].textContent === 'task-1').cells[0].firstChild.click();");
    b.until(
        "the key's detail",
        "const d = document.getElementById('detail'); return !d.hidden \
         && document.getElementById('detail-why').innerText.includes('alice holds it (token 1)') \
         && document.getElementById('detail-notes').innerText.includes('<i>half done</i>: tests pass') \
         && document.getElementById('detail-history').innerText.includes('alice checked out task-1 (token 1): fix the flaky test')",
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#detail i').length"),
        json!(0)
    );

    // An update made by another process arrives by itself.
    real_ok(
        &env,
        "dave",
        &["checkout", "deploy-api", "--reason", "pushed"],
    );
    b.until(
        "dave's checkout",
        "return document.querySelector('#checkouts tbody').innerText.includes('deploy-api')",
    );
    // The timeline picture loaded (an image the browser drew, not an error).
    b.until(
        "the timeline",
        "const i = document.getElementById('timeline'); return i.complete && i.naturalWidth > 100",
    );
    // By agent: the picture is asked for again, one row per agent.
    b.js("document.querySelector('#by button[data-by=agent]').click()");
    b.until(
        "the timeline by agent",
        "const i = document.getElementById('timeline'); return i.src.includes('by=agent') \
         && i.complete && i.naturalWidth > 100 \
         && document.getElementById('save').href.includes('by=agent')",
    );

    // A page of another origin cannot force a release, whatever it sends.
    b.go("data:text/html,<p>another site</p>");
    let res = b.js_async(&format!(
        "const done = arguments[arguments.length - 1];
         fetch('http://127.0.0.1:{}/api/release', {{method: 'POST', credentials: 'include',
             headers: {{'Content-Type': 'application/json', 'X-Tasklock-Token': 'guess'}},
             body: JSON.stringify({{key: 'task-1'}})}})
           .then(r => done('answered ' + r.status), e => done('blocked: ' + e));",
        ui.port
    ));
    assert!(res.as_str().unwrap().starts_with("blocked"), "{res}");
    assert!(held(&env, "task-1"));

    // The person's own page: force-release after a confirmation.
    b.go(&ui.url());
    b.until(
        "the buttons",
        "return document.querySelectorAll('#checkouts button.act').length > 0",
    );
    let shot = b.screenshot();
    assert_eq!(&shot[..8], b"\x89PNG\r\n\x1a\n");
    // A test artefact, to look at when the page looks wrong (the README's pictures are
    // tests/pictures.rs's): under target/, never in the source tree.
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui.png");
    std::fs::write(&out, &shot).unwrap();
    b.js("window.confirm = () => true; \
          const rows = [...document.querySelectorAll('#checkouts tbody tr')]; \
          rows.find(r => r.cells[0].textContent === 'deploy-api').querySelector('button.act').click();");
    b.until(
        "the release",
        "return !document.querySelector('#checkouts tbody').innerText.includes('deploy-api')",
    );
    assert!(!held(&env, "deploy-api"));
    let msg = b.js("return document.getElementById('message').textContent");
    assert!(
        msg.as_str()
            .unwrap()
            .contains("Force-released `deploy-api`"),
        "{msg}"
    );
}

/// A plain server on another loopback port that answers anything and keeps the heads of
/// the requests it got: what a browser sends to another server of this host.
struct Stub {
    port: u16,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Stub {
    fn start() -> Stub {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, st) = (heads.clone(), stop.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !st.load(std::sync::atomic::Ordering::Relaxed)
                && start.elapsed() < Duration::from_secs(120)
            {
                let Ok((c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut r = BufReader::new(c);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                h.lock().unwrap().push(head);
                let _ = r.get_mut().write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\nConnection: close\r\n\r\nstub",
                );
            }
        });
        Stub { port, heads, stop }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Two projects' pages (two servers, two ports) in one browser: each keeps working, and
/// neither's token is ever sent to another server of the same host.
#[test]
fn two_pages_side_by_side_and_the_token_goes_nowhere_else() {
    let one = Env::new();
    real_ok(&one, "alice", &["checkout", "first-project-task"]);
    let two = Env::new();
    real_ok(&two, "bob", &["checkout", "second-project-task"]);
    let (ui1, ui2) = (Ui::start(&one, &[]), Ui::start(&two, &[]));
    let stub = Stub::start();
    let b = Browser::start();
    let shows = |what: &str| {
        b.until(
            what,
            &format!(
                "return document.querySelector('#checkouts tbody').innerText.includes('{what}')"
            ),
        )
    };
    b.go(&ui1.url());
    shows("first-project-task");
    b.go(&ui2.url());
    shows("second-project-task");
    // Back to the first, by its address alone: it still has its token, and its own.
    b.go(&format!("http://127.0.0.1:{}/", ui1.port));
    shows("first-project-task");
    b.until(
        "the first project's timeline",
        "const i = document.getElementById('timeline'); return i.complete && i.naturalWidth > 100",
    );
    b.go(&format!("http://127.0.0.1:{}/", ui2.port));
    shows("second-project-task");
    // Another server of this host is sent neither token.
    b.go(&format!("http://127.0.0.1:{}/some/page", stub.port));
    b.until(
        "the stub's page",
        "return document.body.innerText.includes('stub')",
    );
    let heads = stub.heads.lock().unwrap().clone();
    assert!(!heads.is_empty());
    for h in &heads {
        assert!(
            !h.contains(&ui1.token) && !h.contains(&ui2.token),
            "a token went elsewhere: {h}"
        );
        assert!(!h.to_lowercase().contains("cookie:"), "{h}");
    }
}

/// 150 checkouts (key `task-NNN`, held by `agent-(N % 7)`): more than the page's first
/// rows.
fn a_bigger_fleet() -> Env {
    let env = Env::new();
    for i in 0..150 {
        real_ok(
            &env,
            &format!("agent-{}", i % 7),
            &["checkout", &format!("task-{i:03}")],
        );
    }
    env
}

fn rows(v: &Value) -> Vec<&Value> {
    v["rows"].as_array().unwrap().iter().collect()
}

fn keys_of(v: &Value) -> Vec<String> {
    rows(v)
        .iter()
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect()
}

/// The page is sent only what it shows: the server filters, sorts and pages over its
/// one snapshot, and the counts are the store's.
#[test]
fn the_server_filters_sorts_and_pages() {
    let env = a_bigger_fleet();
    let top = env.run_now(None, &["top", "--once", "--json"]).json();
    let ui = Ui::start(&env, &[]);
    let json = |path: &str| -> Value {
        let start = Instant::now();
        loop {
            let a = ui.get(path);
            if a.status != 503 || start.elapsed() > Duration::from_secs(20) {
                assert_eq!(a.status, 200, "{path}: {} {}", a.head, a.body);
                return serde_json::from_str(&a.body).unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // The first page: counts of everything, the first rows of each table.
    let d = json("/api/fleet");
    assert_eq!(
        d["counts"]["checkouts"],
        top["checkouts"].as_array().unwrap().len()
    );
    assert_eq!(d["counts"]["checkouts"], 150);
    assert_eq!(
        d["counts"]["agents"],
        top["agents"].as_array().unwrap().len()
    );
    assert_eq!(d["counts"]["agents"], 7);
    let c = &d["checkouts"];
    assert_eq!(
        (c["total"].clone(), c["matched"].clone()),
        (json!(150), json!(150))
    );
    let first: Vec<String> = (0..100).map(|i| format!("task-{i:03}")).collect();
    assert_eq!(keys_of(c), first);
    assert_eq!(rows(&d["agents"]).len(), 7);
    // Each of the seven agents has a colour of its own, the same in every table.
    let colour_of = |table: &Value, field: &str| -> std::collections::BTreeMap<String, String> {
        rows(table)
            .iter()
            .map(|r| {
                let id = r
                    .pointer(field)
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_string();
                (id, r["colour"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let by_agent = colour_of(&d["agents"], "/id");
    let mut distinct: Vec<&String> = by_agent.values().collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 7, "{by_agent:?}");
    for (id, colour) in colour_of(c, "/agent/id") {
        assert_eq!(by_agent.get(&id), Some(&colour), "{id}");
        assert!(colour.starts_with('#') && colour.len() == 7, "{colour}");
    }
    assert!(d["version"].as_u64().unwrap() >= 1);

    // The next page, through one table.
    let p = json("/api/fleet?table=checkouts&offset=100&limit=100");
    assert_eq!(p["table"], "checkouts");
    let rest: Vec<String> = (100..150).map(|i| format!("task-{i:03}")).collect();
    assert_eq!(keys_of(&p), rest);
    assert_eq!(p["matched"], 150);

    // A filter (any case) finds what lies beyond the first page; on agents too.
    let f = json("/api/fleet?filter=TASK-14");
    let found: Vec<String> = (140..150).map(|i| format!("task-{i:03}")).collect();
    assert_eq!(keys_of(&f["checkouts"]), found);
    assert_eq!(f["checkouts"]["matched"], 10);
    assert_eq!(f["counts"]["checkouts"], 150);
    let by_agent = json("/api/fleet?table=checkouts&filter=agent-3&limit=1000");
    let expect: Vec<String> = (0..150)
        .filter(|i| i % 7 == 3)
        .map(|i| format!("task-{i:03}"))
        .collect();
    assert_eq!(keys_of(&by_agent), expect);
    let agents = json("/api/fleet?table=agents&filter=task-149");
    assert_eq!(
        rows(&agents)
            .iter()
            .map(|a| a["id"].clone())
            .collect::<Vec<_>>(),
        [json!(format!("agent-{}", 149 % 7))]
    );

    // Sorts: the other way round, by holder, by token.
    let back = json("/api/fleet?table=checkouts&sort=-key&limit=3");
    assert_eq!(keys_of(&back), ["task-149", "task-148", "task-147"]);
    let holders = json("/api/fleet?checkouts.sort=holder&checkouts.limit=1000");
    let ids: Vec<&str> = rows(&holders["checkouts"])
        .iter()
        .map(|c| c["agent"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 150);
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{ids:?}");
    let newest = json("/api/fleet?table=checkouts&sort=-token&limit=1");
    let max = top["checkouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["token"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(rows(&newest)[0]["token"], max);
    let busiest = json("/api/fleet?table=agents&sort=-holds&limit=1");
    // 150 = 7 * 21 + 3: agents 0, 1 and 2 hold 22; agent-0 first by id.
    assert_eq!(rows(&busiest)[0]["id"], "agent-0");
    assert_eq!(rows(&busiest)[0]["checkouts"].as_array().unwrap().len(), 22);

    // Bad views are refused, saying why.
    for (path, says) in [
        (
            "/api/fleet?table=checkouts&sort=colour",
            "sort by key, holder",
        ),
        ("/api/fleet?checkouts.limit=5000", "at most 1000"),
        ("/api/fleet?table=agents&offset=x", "not a number"),
        ("/api/fleet?table=nope", "table: one of"),
        ("/api/fleet?waits.sort=key", "own order"),
        ("/events?agents.sort=name", "sort by state"),
    ] {
        let a = ui.get(path);
        assert_eq!(a.status, 400, "{path}: {}", a.head);
        assert!(a.body.contains(says), "{path}: {}", a.body);
    }

    // The event stream carries the view it was opened with.
    let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /events?filter=task-12&checkouts.sort=-key HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Tasklock-Token: {}\r\n\r\n",
        ui.port,
        ui.token
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let doc = loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended");
        if let Some(d) = line.strip_prefix("data: ") {
            break serde_json::from_str::<Value>(d.trim()).unwrap();
        }
    };
    let want: Vec<String> = (120..130).rev().map(|i| format!("task-{i:03}")).collect();
    assert_eq!(keys_of(&doc["checkouts"]), want);
    assert_eq!(doc["filter"], "task-12");
}

#[test]
fn a_big_fleet_in_the_browser_a_page_of_rows_and_the_server_finds_the_rest() {
    let env = a_bigger_fleet();
    let ui = Ui::start(&env, &[]);
    let b = Browser::start();
    b.go(&ui.url());
    b.until(
        "a page of rows",
        "return document.querySelectorAll('#checkouts tbody tr').length === 100",
    );
    // The counts are the store's, not the rows'.
    let summary = b.js("return document.getElementById('summary').textContent");
    assert!(
        summary
            .as_str()
            .unwrap()
            .starts_with("150 checkouts · 7 agents"),
        "{summary}"
    );
    let more = b.js("return document.getElementById('more-checkouts').innerText");
    assert!(
        more.as_str()
            .unwrap()
            .starts_with("Showing 100 of 150 checkouts."),
        "{more}"
    );
    // The mark bench/ui.py reads.
    assert_eq!(
        b.js("return performance.getEntriesByName('tasklock-first-rows').length"),
        json!(1)
    );
    // Typing a filter finds a key beyond the first rows.
    b.js(
        "const f = document.getElementById('filter'); f.value = 'task-149'; \
          f.dispatchEvent(new Event('input'));",
    );
    b.until(
        "the filtered row",
        "const rows = document.querySelectorAll('#checkouts tbody tr'); \
         return rows.length === 1 && rows[0].cells[0].textContent === 'task-149' \
         && document.getElementById('more-checkouts').hidden",
    );
    // Cleared: the first page again; "show more" brings the rest.
    b.js(
        "const f = document.getElementById('filter'); f.value = ''; \
          f.dispatchEvent(new Event('input'));",
    );
    b.until(
        "the first page again",
        "return document.querySelectorAll('#checkouts tbody tr').length === 100",
    );
    b.js("document.querySelector('#more-checkouts button').click()");
    b.until(
        "every row",
        "return document.querySelectorAll('#checkouts tbody tr').length === 150 \
         && document.getElementById('more-checkouts').hidden",
    );
    // A click on a column sorts on the server: Key twice, the other way round.
    b.js("document.querySelector('#checkouts th[data-sort=key]').click()");
    b.until(
        "sorted by key",
        "return document.querySelector('#checkouts th[data-sort=key]').classList.contains('sorted')",
    );
    b.js("document.querySelector('#checkouts th[data-sort=key]').click()");
    b.until(
        "the last key first",
        "return document.querySelector('#checkouts tbody tr').cells[0].textContent === 'task-149'",
    );
}

/// The metric `name` (with `label` = `value`, when given) in a scrape, as a number.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> f64 {
    let found = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)));
    match found.map(|s| &s.value) {
        Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v)) => *v,
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            buckets.iter().map(|b| b.count).fold(0.0, f64::max)
        }
        other => panic!("{name} {label:?}: {other:?}"),
    }
}

/// `/metrics`: Prometheus' text format behind the page's token (given as a bearer token, as
/// a Prometheus scrape sends it; `TASKLOCK_UI_TOKEN` keeps it across restarts), parsed
/// by a Prometheus text-format parser: the fleet's gauges, and the events, holds and waits
/// that happen while the server runs, with labels that never name a key or an agent.
#[test]
fn metrics_for_prometheus_behind_the_token() {
    let env = Env::new();
    let token = "metrics-token-0123456789abcdef0123456789";
    let refused = env.run_env(
        None,
        &["ui", "--no-open"],
        &[("TASKLOCK_UI_TOKEN", "short")],
    );
    assert_eq!(refused.code, 64, "{}", refused.text());

    real_ok(&env, "alice", &["checkout", "metrics-key"]);
    let ui = Ui::start_with(&env, &[("TASKLOCK_UI_TOKEN", token)]);
    assert_eq!(ui.token, token);
    let host = format!("127.0.0.1:{}", ui.port);
    let scrape = || {
        let bearer = format!("Bearer {token}");
        let a = ui.http(
            "GET",
            "/metrics",
            &[("Host", &host), ("Authorization", &bearer)],
            "",
        );
        assert_eq!(a.status, 200, "{}", a.body);
        assert!(
            a.header("content-type")
                .unwrap()
                .starts_with("text/plain; version=0.0.4"),
            "{}",
            a.head
        );
        let lines = a.body.lines().map(|l| Ok(l.to_string()));
        (prometheus_parse::Scrape::parse(lines).unwrap(), a.body)
    };
    let anonymous = ui.http("GET", "/metrics", &[("Host", &host)], "");
    assert_eq!(anonymous.status, 403);
    let wrong = ui.http(
        "GET",
        "/metrics",
        &[
            ("Host", &host),
            (
                "Authorization",
                "Bearer metrics-token-not-this-one-0123456789",
            ),
        ],
        "",
    );
    assert_eq!(wrong.status, 403);

    let started = Instant::now();
    let (first, text) = loop {
        let (s, text) = scrape();
        if sample(&s, "tasklock_up", None) == 1.0 {
            break (s, text);
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(sample(&first, "tasklock_checkouts", None), 1.0, "{text}");
    assert_eq!(
        sample(&first, "tasklock_agents", Some(("state", "alive"))),
        1.0,
        "{text}"
    );
    assert!(
        !text.contains("metrics-key") && !text.contains("alice"),
        "{text}"
    );

    // bob queues, alice releases, bob takes the key: one hold ended, one wait ended.
    real_ok(&env, "bob", &["checkout", "metrics-key", "--queue"]);
    real_ok(&env, "alice", &["release", "metrics-key"]);
    real_ok(&env, "bob", &["checkout", "metrics-key"]);
    let (last, text) = loop {
        let (s, text) = scrape();
        // The file store appends an event before the change it tells of is in place:
        // the gauges catch up on the next read.
        if sample(&s, "tasklock_wait_duration_seconds", None) >= 1.0
            && sample(&s, "tasklock_checkouts", None) == 1.0
        {
            break (s, text);
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        sample(&last, "tasklock_checkout_duration_seconds", None),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&last, "tasklock_events_total", Some(("event", "acquire"))),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&last, "tasklock_events_total", Some(("event", "queue"))),
        1.0,
        "{text}"
    );
    assert_eq!(sample(&last, "tasklock_checkouts", None), 1.0, "{text}");
    assert_eq!(sample(&last, "tasklock_waiting", None), 0.0, "{text}");
}

// ---- The page as a product: phone and desktop, dark, empty, sorted ----

/// A fleet as a new user's trial had it: a key with two slots, a path checkout, a queue,
/// a long key and a long reason, several agents.
fn a_trial_fleet() -> Env {
    let env = Env::new();
    let ok = |agent: &str, args: &[&str]| real_ok(&env, agent, args);
    ok(
        "erin",
        &[
            "checkout",
            "ci-build",
            "--slots",
            "2",
            "--reason",
            "cargo build",
        ],
    );
    ok(
        "frank",
        &[
            "checkout",
            "ci-build",
            "--slots",
            "2",
            "--reason",
            "cargo test",
        ],
    );
    ok(
        "dave",
        &[
            "checkout",
            "--path",
            "src/parser/**",
            "--reason",
            "rewrite the lexer",
        ],
    );
    ok(
        "alice",
        &[
            "checkout",
            "issue-42",
            "--reason",
            "root cause: the cookie path; the fix goes in PR #53 with a test of its own",
        ],
    );
    ok("bob", &["checkout", "issue-42", "--queue"]);
    ok("gina", &["checkout", "review/pr-77-the-parser-rewrite"]);
    env
}

/// What is wrong with the page's layout at its current size, as a list (empty: nothing):
/// the page scrolls sideways, a key or name is broken inside or wrapped, two sections
/// overlap, a card pokes out of the page, or a Queue or Reason cell cannot be reached.
const LAYOUT: &str = r#"
const problems = [];
const W = window.innerWidth;
const root = document.scrollingElement;
if (root.scrollWidth > W) problems.push('the page scrolls sideways: ' + root.scrollWidth + ' > ' + W);
for (const k of document.querySelectorAll('td .key, td .name, #detail-key')) {
  if (!k.offsetParent) continue;
  const lh = parseFloat(getComputedStyle(k).lineHeight);
  if (k.getClientRects().length !== 1 || k.getBoundingClientRect().height > lh * 1.5)
    problems.push('wrapped: ' + k.textContent);
}
const boxes = [...document.querySelectorAll('header.bar, main section')].filter(s => s.offsetParent !== null || s.matches('header'));
const rects = boxes.map(s => [s.id || s.tagName, s.getBoundingClientRect()]);
for (const [id, r] of rects) {
  if (r.left < 0 || r.right > W + 0.5) problems.push(id + ' pokes out: ' + r.left + '..' + r.right);
}
for (let i = 0; i < rects.length; i++) for (let j = i + 1; j < rects.length; j++) {
  const [a, p] = rects[i], [b, q] = rects[j];
  if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom - 0.5 && q.top < p.bottom - 0.5)
    problems.push(a + ' overlaps ' + b);
}
for (const td of document.querySelectorAll('#checkouts td[data-label=Queue], #checkouts td[data-label=Reason]')) {
  if (!td.textContent) continue;
  const r = td.getBoundingClientRect();
  const inView = r.width > 0 && r.left >= 0 && r.right <= W + 0.5;
  const box = td.closest('.scroll');
  const scrolls = box && box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX === 'auto';
  if (!inView && !scrolls) problems.push(td.dataset.label + ' out of reach: ' + td.textContent);
}
return problems;
"#;

/// A PNG of the whole page (a viewport as tall as the page, for the picture), kept under
/// target/ as a test artefact.
fn keep_screenshot(b: &Browser, name: &str) {
    let size = b.js("return [window.innerWidth, window.innerHeight, \
                     Math.ceil(document.scrollingElement.scrollHeight)]");
    let n = |i: usize| size[i].as_u64().unwrap() as u32;
    b.viewport(n(0), n(2));
    // Every section drawn, those below the first screen too.
    b.js("for (const s of document.querySelectorAll('section')) s.style.contentVisibility = 'visible'");
    let png = b.screenshot();
    b.viewport(n(0), n(1));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&out, &png).unwrap();
}

/// On a phone (390×844) and a desktop (1400×900): no sideways scroll, keys whole, no
/// section over another, the Queue and Reason of each checkout reachable; every table
/// sorts by a click on a column, marked ▲ or ▼ (and aria-sort), a second click the other
/// way; events in words, each with its time. Screenshots under target/.
#[test]
fn the_page_on_a_phone_and_a_desktop() {
    let env = a_trial_fleet();
    let ui = Ui::start(&env, &[]);
    let b = Browser::start();
    for (w, h) in [(390, 844), (1400, 900)] {
        b.viewport(w, h);
        b.go(&ui.url());
        b.until(
            "the trial fleet",
            "return document.querySelectorAll('#checkouts tbody tr').length === 5 \
             && document.querySelectorAll('#events li').length > 0 \
             && document.querySelector('#agent-time tbody tr') !== null",
        );
        b.until(
            "the timeline",
            "const i = document.getElementById('timeline'); return i.complete && i.naturalWidth > 100",
        );
        let problems = b.js(LAYOUT);
        keep_screenshot(&b, &format!("ui-{w}x{h}.png"));
        assert_eq!(problems, json!([]), "at {w}x{h}");
        // The long key is whole on one line, and the queue and reason are there.
        let key = b.js(
            "const k = [...document.querySelectorAll('#checkouts td .key')] \
               .find(k => k.textContent === 'review/pr-77-the-parser-rewrite'); \
             return k.getClientRects().length",
        );
        assert_eq!(key, json!(1), "at {w}x{h}");
    }

    // Events: the time, then who did what in words; no number to clip.
    let events = b.js(
        "return [...document.querySelectorAll('#events li')].map(li => \
           [li.firstChild.tagName, li.firstChild.textContent, li.lastChild.textContent])",
    );
    let events = events.as_array().unwrap();
    assert!(
        events.iter().all(|e| e[0] == "TIME"
            && e[1].as_str().unwrap().len() == 8
            && e[1].as_str().unwrap().as_bytes()[2] == b':'),
        "{events:?}"
    );
    let said: Vec<&str> = events.iter().map(|e| e[2].as_str().unwrap()).collect();
    for want in [
        "erin checked out ci-build (token ",
        "bob queued for issue-42",
        "dave checked out path:src/parser/** (token ",
    ] {
        assert!(said.iter().any(|s| s.starts_with(want)), "{want}: {said:?}");
    }
    assert!(
        said.iter()
            .any(|s| s.starts_with("frank checked out ci-build") && s.ends_with(": cargo test")),
        "{said:?}"
    );
    assert_eq!(
        b.js("return getComputedStyle(document.getElementById('events')).listStyleType"),
        json!("none")
    );

    // A server-sorted table: a click sorts (▲, ascending), another the other way (▼).
    let mark = |th: &str| {
        b.js(&format!(
            "const th = document.querySelector('{th}'); \
             return [th.getAttribute('aria-sort'), getComputedStyle(th, '::after').content]"
        ))
    };
    let first_key = "return document.querySelector('#checkouts tbody tr').cells[0].textContent";
    assert_eq!(mark("#checkouts th[data-sort=reason]")[0], "none");
    b.js("document.querySelector('#checkouts th[data-sort=reason]').click()");
    b.until(
        "sorted by reason",
        "return document.querySelector('#checkouts th[data-sort=reason]').getAttribute('aria-sort') === 'ascending' \
         && document.querySelector('#checkouts tbody tr').cells[0].textContent === 'ci-build'",
    );
    assert_eq!(
        mark("#checkouts th[data-sort=reason]"),
        json!(["ascending", "\" ▲\""])
    );
    b.js("document.querySelector('#checkouts th[data-sort=reason]').click()");
    b.until(
        "sorted by reason, the other way",
        "return document.querySelector('#checkouts th[data-sort=reason]').getAttribute('aria-sort') === 'descending'",
    );
    assert_eq!(
        mark("#checkouts th[data-sort=reason]"),
        json!(["descending", "\" ▼\""])
    );
    // The other way round, wholly: the one without a reason (last A to Z) first, then
    // the reasons Z to A.
    b.until(
        "the last reason first",
        "const rows = [...document.querySelectorAll('#checkouts tbody tr')];          return rows[0].cells[0].textContent === 'review/pr-77-the-parser-rewrite'          && rows[1].cells[0].textContent === 'issue-42'",
    );
    assert_ne!(b.js(first_key), json!("ci-build"));

    // The timeline's window: fitted at first; a preset; zoom out and in from it; fitted
    // again. The picture and the saved file follow.
    let window = |click: &str, since: &str| {
        b.js(&format!("document.querySelector('{click}').click()"));
        b.until(
            &format!("the timeline since={since}"),
            &format!(
                "const i = document.getElementById('timeline'); \
                 return i.src.includes('&since={since}&') && i.complete && i.naturalWidth > 100 \
                 && document.getElementById('save').href.includes('&since={since}&')"
            ),
        );
    };
    assert!(
        b.js("return document.getElementById('timeline').src")
            .as_str()
            .unwrap()
            .contains("&since=all&")
    );
    window("#windows button[data-since=\"3600\"]", "3600");
    assert_eq!(
        b.js("return [...document.querySelectorAll('#windows button.on')].map(b => b.textContent)"),
        json!(["1h", "By key"])
    );
    window("#zoom-out", "7200");
    window("#zoom-in", "3600");
    window("#zoom-in", "1800");
    window("#windows button[data-since=all]", "all");

    // Where the time went: sorted on the page, the most first, marked; a click on the
    // marked column reverses it (the most contended key, issue-42, last).
    assert_eq!(
        mark("#agent-time th[data-sort=total]"),
        json!(["descending", "\" ▼\""])
    );
    assert_eq!(
        mark("#time th[data-sort=contention]"),
        json!(["descending", "\" ▼\""])
    );
    let keys =
        "return [...document.querySelectorAll('#time tbody tr')].map(r => r.cells[0].textContent)";
    assert_eq!(b.js(keys)[0], "issue-42");
    b.js("document.querySelector('#time th[data-sort=contention]').click()");
    assert_eq!(
        mark("#time th[data-sort=contention]"),
        json!(["ascending", "\" ▲\""])
    );
    assert_eq!(b.js(keys)[3], "issue-42");
    // By another column: held, the least first; then the most first.
    b.js("document.querySelector('#time th[data-sort=held]').click()");
    assert_eq!(mark("#time th[data-sort=contention]")[0], "none");
    b.js("document.querySelector('#time th[data-sort=held]').click()");
    assert_eq!(b.js(keys)[0], "ci-build");
}

/// The connection starts "connecting…" and never shows "offline" while it connects; it
/// says "offline" once the server is gone. Dark mode follows `prefers-color-scheme`.
#[test]
fn no_offline_while_connecting_and_dark_mode() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    let ui = Ui::start(&env, &[]);
    // The page as served: connecting, not offline.
    let page = ui.get("/");
    assert!(
        page.body
            .contains(r#"<span id="live" class="connecting" role="status">connecting…</span>"#),
        "{}",
        page.body
    );
    let b = Browser::start();
    // Every state the connection's badge is in, from the first thing the browser parses.
    b.cdp(
        "Page.addScriptToEvaluateOnNewDocument",
        json!({"source": "window.__live = []; new MutationObserver(() => { \
            const l = document.getElementById('live'); if (!l) return; \
            const t = l.className + ': ' + l.textContent; \
            if (window.__live[window.__live.length - 1] !== t) window.__live.push(t); \
          }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});"}),
    );
    b.go(&ui.url());
    b.until(
        "live",
        "return document.getElementById('live').textContent === 'live'",
    );
    let seen = b.js("return window.__live");
    let seen = seen.as_array().unwrap();
    // (The badge may be seen before the parser gave it its text: `connecting: `.)
    let said: Vec<&str> = seen
        .iter()
        .map(|s| s.as_str().unwrap())
        .filter(|s| !s.ends_with(": "))
        .collect();
    assert_eq!(said[0], "connecting: connecting…", "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| !s.as_str().unwrap().contains("offline")),
        "{seen:?}"
    );

    // Dark: the page's ground dark and its text light; light: the other way.
    let colours = "const rgb = (c) => c.match(/[\\d.]+/g).map(Number); \
        const lum = (c) => { const [r, g, b, a] = rgb(c); return a === 0 ? -1 : (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; }; \
        const card = document.querySelector('.card'); \
        return [lum(getComputedStyle(document.body).backgroundColor), lum(getComputedStyle(card).backgroundColor), lum(getComputedStyle(document.body).color)]";
    for (scheme, dark) in [("dark", true), ("light", false)] {
        b.cdp(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        );
        let l = b.js(colours);
        let l: Vec<f64> = l
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        if dark {
            assert!(
                l[0] >= 0.0 && l[0] < 0.15 && l[1] >= 0.0 && l[1] < 0.2 && l[2] > 0.7,
                "{scheme}: {l:?}"
            );
            keep_screenshot(&b, "ui-dark-1400.png");
        } else {
            assert!(l[0] > 0.85 && l[1] > 0.85 && l[2] < 0.3, "{scheme}: {l:?}");
        }
    }

    // The server gone: the badge says so.
    drop(ui);
    b.until(
        "offline",
        "return document.getElementById('live').className === 'offline' \
         && document.getElementById('live').textContent === 'offline'",
    );
}

/// A fresh project: every part says what to do, never an empty table with its headers.
#[test]
fn an_empty_project_says_what_to_do() {
    let env = Env::new();
    // In the test's own directory: `init` writes the project's files where it runs.
    let r = env.run_in(env.tmp.path(), None, &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let ui = Ui::start(&env, &[]);
    let b = Browser::start();
    b.viewport(1400, 900);
    b.go(&ui.url());
    b.until(
        "the store read",
        "return document.getElementById('summary').textContent.startsWith('0 checkouts')",
    );
    let shown = b.js(
        "const t = (id) => { const e = document.getElementById(id); \
           return e.offsetParent === null ? null : e.innerText.trim(); }; \
         return { checkouts: t('no-checkouts'), agents: t('no-agents'), waits: t('waits'), \
           time: t('no-time'), events: t('no-events'), \
           tables: [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null).map(t => t.id) }",
    );
    assert_eq!(
        shown,
        json!({
            "checkouts": "No checkouts. An agent takes one with tasklock checkout KEY.",
            "agents": "No agents yet. An agent shows here once it runs tasklock, for example tasklock checkout KEY.",
            "waits": "Nobody waits.",
            "time": "Nothing held or waited for in this window.",
            "events": "No events yet. Checkouts, waits and releases show here as they happen.",
            "tables": [],
        })
    );
    assert_eq!(
        b.js("return document.querySelector('#no-checkouts code').textContent"),
        json!("tasklock checkout KEY")
    );
    keep_screenshot(&b, "ui-empty-1400x900.png");
    // The timeline says it is empty, in a plot with no grid line through the words.
    let svg = ready(|| ui.get("/timeline.svg"));
    assert_eq!(svg.status, 200, "{}", svg.head);
    assert!(
        svg.body
            .contains("Nothing held or waited for in this window."),
        "{}",
        svg.body
    );
    assert!(!svg.body.contains("stroke=\"#ddd\""), "{}", svg.body);
}

/// The texts of an SVG timeline that reach out of its picture (by their anchor and a
/// generous width per character), and its title's window in seconds.
fn outside_and_span(svg: &str) -> (Vec<String>, i64) {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
    let root = doc.root_element();
    let width: f64 = root.attribute("width").unwrap().parse().unwrap();
    let mut out = Vec::new();
    let mut span = -1;
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let text: String = t
            .children()
            .filter(|c| c.is_text())
            .map(|c| c.text().unwrap())
            .collect();
        let size: f64 = t
            .attribute("font-size")
            .map_or(12.0, |s| s.parse().unwrap());
        let x: f64 = t.attribute("x").unwrap().parse().unwrap();
        let w = text.chars().count() as f64 * size * 0.65;
        let (left, right) = match t.attribute("text-anchor") {
            Some("end") => (x - w, x),
            Some("middle") => (x - w / 2.0, x + w / 2.0),
            _ => (x, x + w),
        };
        if left < 0.0 || right > width {
            out.push(format!("{text:?} {left:.0}..{right:.0} of {width}"));
        }
        if let Some(rest) = text.strip_prefix("tasklock: ") {
            let (from, to) = rest.split_once(" to ").unwrap();
            let from = chrono::NaiveDateTime::parse_from_str(from, "%Y-%m-%d %H:%M:%S").unwrap();
            let to = chrono::NaiveTime::parse_from_str(&to[..8], "%H:%M:%S").unwrap();
            span = (from.date().and_time(to) - from).num_seconds();
            // A window of a day or more ends at the same time of day, or earlier.
            if span <= 0 {
                span += 86_400;
            }
        }
    }
    (out, span)
}

/// The timeline fits what happened by default: a log of two minutes spans about two
/// minutes, not an hour; every label (the last one too) is inside the picture; "now" is
/// marked; an empty one says so with no grid line through its words. On the page's
/// server too (`since=all`, or none), and a bad window is refused.
#[test]
fn the_timeline_fits_what_happened() {
    let mut env = Env::new();
    env.at("2026-01-01T10:00:00Z");
    let r = env.run_in(env.tmp.path(), None, &["init"]);
    assert_eq!(r.code, 0, "{}", r.text());
    let file = env.tmp.path().join("t.svg");
    let draw = |env: &Env, extra: &[&str]| -> String {
        let mut args = vec!["ui", "--svg", file.to_str().unwrap()];
        args.extend(extra);
        let r = env.run(None, &args);
        assert_eq!(r.code, 0, "{}", r.text());
        std::fs::read_to_string(&file).unwrap()
    };
    let empty = draw(&env, &[]);
    assert!(
        empty.contains(">Nothing held or waited for in this window.</text>"),
        "{empty}"
    );
    assert!(!empty.contains("stroke=\"#ddd\""), "a grid line: {empty}");
    assert_eq!(outside_and_span(&empty).0, Vec::<String>::new());

    env.ok("alice", &["checkout", "task-1"]);
    env.run(Some("bob"), &["checkout", "task-1", "--queue"]);
    env.at("2026-01-01T10:01:10Z");
    env.ok("alice", &["release", "task-1"]);
    env.ok("bob", &["checkout", "task-1"]);
    env.at("2026-01-01T10:02:00Z");
    let fitted = draw(&env, &[]);
    let (outside, span) = outside_and_span(&fitted);
    assert_eq!(outside, Vec::<String>::new(), "{fitted}");
    assert!((120..=150).contains(&span), "{span} s: {fitted}");
    assert!(fitted.contains(">now 10:02:00</text>"), "{fitted}");
    assert!(
        fitted.contains("alice held it (token 1) for 70s"),
        "{fitted}"
    );
    // Labels at round times: every 15 seconds over two minutes.
    assert!(fitted.contains(">10:00:15</text>"), "{fitted}");
    // A window asked for: as long as asked, its labels inside too.
    for since in ["30m", "1h", "15m", "24h"] {
        let svg = draw(&env, &["--since", since]);
        let (outside, span) = outside_and_span(&svg);
        assert_eq!(outside, Vec::<String>::new(), "--since {since}: {svg}");
        let want = secs_of(since);
        assert_eq!(span, want, "--since {since}");
    }
    let by_agent = draw(&env, &["--by", "agent"]);
    assert!((120..=150).contains(&outside_and_span(&by_agent).1));

    // The page's server (on the real clock): fitted by default and with since=all, to
    // a checkout taken a moment ago (a minute at least); as asked with since=N.
    let now = Env::new();
    real_ok(&now, "alice", &["checkout", "task-1"]);
    let ui = Ui::start(&now, &[]);
    for path in ["/timeline.svg", "/timeline.svg?since=all&by=agent"] {
        let a = ready(|| ui.get(path));
        assert_eq!(a.status, 200, "{path}: {}", a.head);
        let (outside, span) = outside_and_span(&a.body);
        assert!(outside.is_empty(), "{path}: {outside:?}");
        assert!((60..=120).contains(&span), "{path}: {span} s");
    }
    let hour = ui.get("/timeline.svg?since=3600");
    assert_eq!(outside_and_span(&hour.body), (vec![], 3600));
    let bad = ui.get("/timeline.svg?since=forever");
    assert_eq!(bad.status, 400, "{}", bad.head);
    assert!(bad.body.contains("since:"), "{}", bad.body);
}

fn secs_of(s: &str) -> i64 {
    let (n, unit) = s.split_at(s.len() - 1);
    let n: i64 = n.parse().unwrap();
    n * match unit {
        "m" => 60,
        "h" => 3600,
        _ => 1,
    }
}

/// Issue 48, told without watching: once a person asks (a click, and the browser's
/// permission), the page tells the desktop of a death, once, in the words of `top` and
/// the webhooks, and of nothing it was not asked to tell. (Chromium headless shows no
/// notifications: the page's `Notification` is a stand-in that records them.)
#[test]
fn the_page_tells_the_desktop_of_a_death_once_asked() {
    let env = Env::new();
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    real_ok(
        &env,
        "carol",
        &["heartbeat", "--pid", &child.id().to_string()],
    );
    real_ok(&env, "carol", &["checkout", "deploy"]);
    let ui = Ui::start(&env, &[]);
    let b = Browser::start();
    b.cdp(
        "Page.addScriptToEvaluateOnNewDocument",
        json!({"source": "window.__told = []; window.__perm = 'default'; \
            window.Notification = class { \
              constructor(title, o) { window.__told.push(title + ': ' + o.body); } \
              static get permission() { return window.__perm; } \
              static requestPermission() { window.__perm = 'granted'; return Promise.resolve('granted'); } \
            };"}),
    );
    b.go(&ui.url());
    b.until(
        "live",
        "return document.getElementById('live').textContent === 'live'",
    );
    b.js("document.getElementById('notify').click(); return 0");
    b.until(
        "notifying",
        "return document.getElementById('notify').textContent === 'Notifying'",
    );
    real_ok(&env, "alice", &["checkout", "quiet-key"]);
    real_ok(&env, "alice", &["release", "quiet-key"]);
    child.kill().unwrap();
    child.wait().unwrap();
    real_ok(&env, "bob", &["list"]);
    b.until("told", "return window.__told.length > 0");
    // Later frames tell nothing more.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        b.js("return window.__told"),
        json!(["tasklock: carol died holding deploy; released by bob"])
    );
    // The events the page is sent carry their sentence and, when told, their kind.
    let rows = b.js("return doc.events.rows.map((e) => [e.event, e.text, e.notify || null])");
    let rows = rows.as_array().unwrap();
    assert!(
        rows.contains(&json!([
            "auto_release",
            "carol died holding deploy; released by bob",
            "death"
        ])),
        "{rows:?}"
    );
    assert!(
        rows.contains(&json!(["release", "alice released quiet-key", null])),
        "{rows:?}"
    );
}

/// Issue 49: a checkout's git worktree is on the page, its path whole, its branch on
/// hover, and the column sorts.
#[test]
fn a_checkouts_worktree_is_on_the_page() {
    let (mut env, top) = common::git_repo();
    env.at(&chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let r = env.run_in(&top, Some("alice"), &["checkout", "wt-key", "--worktree"]);
    assert_eq!(r.code, 0, "{}", r.text());
    real_ok(&env, "bob", &["checkout", "plain-key"]);
    let ui = Ui::start(&env, &[]);
    let b = Browser::start();
    b.go(&ui.url());
    b.until(
        "the worktree",
        "return document.querySelector('#checkouts tbody').innerText.includes('.worktrees/wt-key')",
    );
    let cell = b.js(
        "const td = [...document.querySelectorAll('#checkouts tbody td')].find((t) => t.dataset.label === 'Worktree' && t.innerText); \
         return [td.innerText, td.querySelector('.key').title]",
    );
    let path = top.join(".worktrees/wt-key").display().to_string();
    assert_eq!(cell, json!([path, "branch tasklock/wt-key"]));
    // Sorted by it: the checkout with a worktree first, then the other way round.
    b.js("document.querySelector('th[data-sort=worktree]').click(); return 0");
    b.until(
        "sorted by worktree",
        "return document.querySelector('#checkouts tbody tr td').innerText === 'wt-key'",
    );
    b.js("document.querySelector('th[data-sort=worktree]').click(); return 0");
    b.until(
        "sorted the other way",
        "return document.querySelector('#checkouts tbody tr td').innerText === 'plain-key'",
    );
}

/// Issue 48: the timeline saved as one HTML file, from the command line (`ui --html`) and
/// from the page's server (`/timeline.html`, behind the token): the picture and where
/// the time went, escaped, with no script and nothing fetched.
#[test]
fn the_timeline_as_one_html_file() {
    let env = Env::new();
    real_ok(&env, "alice", &["checkout", "task-1"]);
    real_ok(&env, "bob", &["checkout", HOSTILE]);
    real_ok(&env, "carol", &["checkout", "task-1", "--queue"]);
    let file = env.tmp.path().join("t.html");
    let r = env.run_now(None, &["ui", "--html", file.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.text());
    let check = |html: &str| {
        assert!(html.starts_with("<!doctype html>"), "{html}");
        assert!(html.contains("<svg") && html.contains("</svg>"), "{html}");
        assert!(html.contains("Where the time went"), "{html}");
        assert!(html.contains(">task-1</td>"), "{html}");
        for agent in ["alice", "bob", "carol"] {
            assert!(
                html.contains(&format!("</i>{agent}</td>")),
                "{agent}: {html}"
            );
        }
        assert!(html.contains("&lt;img src=x"), "escaped: {html}");
        // Every tag: none that runs or fetches (text is escaped, so `<` opens a tag).
        for tag in html
            .split('<')
            .skip(1)
            .map(|t| t.split('>').next().unwrap())
        {
            let t = tag.to_lowercase();
            let name = t.split([' ', '/']).next().unwrap_or("");
            assert!(
                !["script", "img", "link", "iframe", "object", "embed"].contains(&name)
                    && !t.contains(" src=")
                    && !t.contains("href=")
                    && !t.contains(" on"),
                "<{tag}>"
            );
        }
        assert!(
            !html.contains("@import") && !html.contains("url("),
            "{html}"
        );
    };
    check(&std::fs::read_to_string(&file).unwrap());
    let ui = Ui::start(&env, &[]);
    let a = ready(|| ui.get("/timeline.html?since=all&by=key"));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{}",
        a.head
    );
    assert!(
        a.header("content-disposition")
            .is_some_and(|d| d.contains("tasklock-timeline.html")),
        "{}",
        a.head
    );
    check(&a.body);
    let host = format!("127.0.0.1:{}", ui.port);
    let anonymous = ui.http("GET", "/timeline.html", &[("Host", &host)], "");
    assert_eq!(anonymous.status, 403);
    assert_eq!(ui.get("/timeline.html?since=5").status, 400);
}

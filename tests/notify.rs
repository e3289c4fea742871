//! `notify:` in config.yaml, against a real HTTP receiver on loopback: a holder's death
//! noticed by a plain `tasklock list` reaches the webhook, told once however many
//! commands race to notice it; an endpoint that never answers holds no command up; one
//! that cannot be reached leaves a failure for `doctor`; bad entries are usage errors.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{AgentProcess, Env};
use serde_json::Value;

/// A webhook receiver: every POST body it got, parsed. With `hold`, it answers nobody
/// until the sender of `hold` is dropped (or sends), and says on `arrived` when a request
/// came.
struct Receiver {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start(hold: Option<(mpsc::Receiver<()>, mpsc::Sender<()>)>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&bodies);
        let hold = hold.map(|(go, arrived)| (Mutex::new(go), arrived));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let body = read_post(&stream);
                if let Some((go, arrived)) = &hold {
                    let _ = arrived.send(());
                    let _ = go.lock().unwrap().recv();
                }
                if let Some(b) = body {
                    seen.lock().unwrap().push(b);
                }
                let mut s = stream;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
            }
        });
        Receiver { port, bodies }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn kinds(&self, key: &str) -> Vec<String> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b["event"]["key"] == key)
            .map(|b| b["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

fn read_post(stream: &TcpStream) -> Option<Value> {
    let mut r = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

/// Until no drainer runs (none holds the drainer's lock) and `done` holds, at most 60 s.
fn settle(env: &Env, done: impl Fn() -> bool) {
    let lock = env.dir().join("notify/drain.lock");
    let started = Instant::now();
    while common::flocked(&lock) || !done() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the webhook was not told within a minute"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// alice holds `key` bound to a process that is then killed; bob waits for it.
fn a_death(env: &Env, key: &str) {
    let mut p = AgentProcess::start();
    let r = env.run_now(Some("alice"), &["checkout", key, "--pid", &p.pid()]);
    assert_eq!(r.code, 0, "{}", r.text());
    let r = env.run_now(Some("bob"), &["checkout", key, "--queue"]);
    assert_eq!(r.code, 2, "{}", r.text());
    p.kill();
}

#[test]
fn a_death_noticed_by_list_is_told_once_however_many_notice_it() {
    let env = Env::new();
    let hook = Receiver::start(None);
    env.configure(&format!(
        "notify:\n  - url: {}\n    on: [death, handoff]\n",
        hook.url()
    ));
    a_death(&env, "deploy-1");
    // Eight commands race to notice it, each able to start a drainer.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = common::base_cmd("unused");
            cmd.env_remove("TASKLOCK_NOW");
            common::use_store(&mut cmd, &env.dir());
            cmd.arg("--dir").arg(env.dir()).arg("list");
            cmd.spawn().unwrap()
        })
        .collect();
    for mut c in racers {
        assert!(c.wait().unwrap().success());
    }
    settle(&env, || hook.kinds("deploy-1").len() >= 2);
    for _ in 0..3 {
        env.run_now(None, &["list"]);
        env.run_now(Some("bob"), &["status", "deploy-1"]);
    }
    settle(&env, || true);
    let mut kinds = hook.kinds("deploy-1");
    kinds.sort();
    assert_eq!(
        kinds,
        ["death", "handoff"],
        "{:?}",
        hook.bodies.lock().unwrap()
    );
    let death = hook
        .bodies
        .lock()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "death")
        .cloned()
        .unwrap();
    assert_eq!(death["event"]["agent"], "alice");
    assert_eq!(death["event"]["reason"], "agent_death");
    assert!(
        death["text"].as_str().unwrap().contains("alice died"),
        "{death}"
    );
}

#[test]
fn a_webhook_that_never_answers_holds_no_command_up() {
    let env = Env::new();
    let (go, wait_go) = mpsc::channel();
    let (arrived_tx, arrived) = mpsc::channel();
    let hook = Receiver::start(Some((wait_go, arrived_tx)));
    env.configure(&format!("notify:\n  - url: {}\n", hook.url()));
    a_death(&env, "deploy-2");
    // The receiver answers nothing until this test says so, after `list` has ended: a
    // command that waited for it would never end.
    let r = env.run_now(None, &["list"]);
    assert_eq!(r.code, 0, "{}", r.text());
    assert!(
        arrived.recv_timeout(Duration::from_secs(60)).is_ok(),
        "the drainer never reached the webhook"
    );
    assert!(
        hook.kinds("deploy-2").is_empty(),
        "answered before the command ended"
    );
    drop(go);
    settle(&env, || {
        hook.kinds("deploy-2").contains(&"death".to_string())
    });
}

#[test]
fn an_unreachable_webhook_leaves_a_failure_and_bad_entries_are_refused() {
    let env = Env::new();
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    env.configure(&format!(
        "notify:\n  - url: http://127.0.0.1:{port}/secret-path\n    on: [death]\n"
    ));
    a_death(&env, "deploy-3");
    assert_eq!(env.run_now(None, &["list"]).code, 0);
    let failures = env.dir().join("notify/failures.jsonl");
    settle(&env, || failures.exists());
    let text = std::fs::read_to_string(&failures).unwrap();
    let f: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(f["kind"], "death");
    assert_eq!(f["key"], "deploy-3");
    assert!(
        !text.contains("secret-path"),
        "the URL's path is kept out: {text}"
    );
    let doctor = env.run_now(None, &["doctor", "--json"]).json();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "notify")
        .cloned()
        .unwrap_or_else(|| panic!("no notify check: {doctor}"));
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("deploy-3"),
        "{check}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&failures).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "failures are private: {mode:o}");
    }

    for bad in [
        "notify:\n  - url: ftp://example.com\n",
        "notify:\n  - url: http://127.0.0.1:1/\n    on: [births]\n",
        "notify:\n  - url: http://127.0.0.1:1/\n    format: xml\n",
        "notify:\n  - url: http://127.0.0.1:1/\n    colour: red\n",
    ] {
        let e = Env::new();
        e.configure(bad);
        let r = e.run_now(Some("carol"), &["checkout", "k"]);
        assert_eq!(r.code, 1, "{bad}: {}", r.text());
        assert!(r.text().contains("notify"), "{bad}: {}", r.text());
    }
}

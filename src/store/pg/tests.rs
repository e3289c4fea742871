//! The PostgreSQL store against a real server: `TASKLOCK_TEST_PG_URL` (`.ci/run` starts
//! one). Without it these tests say so on stderr and pass.

use std::time::Duration;

use super::*;
use crate::identity::Agent;
use crate::store::{Queue, Record, Slot};

fn base_url() -> Option<String> {
    match std::env::var("TASKLOCK_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!("TASKLOCK_TEST_PG_URL is not set: PostgreSQL store test skipped");
            None
        }
    }
}

/// A store in a schema of its own.
fn fresh(name: &str) -> Option<(Target, PgStore)> {
    let base = base_url()?;
    let schema = format!("u_{name}_{}", std::process::id());
    let admin = PgStore::open(&Target::parse(&base, "test").unwrap()).unwrap();
    admin
        .with_client("drop", |c| {
            c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        })
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let t = Target::parse(&format!("{base}{sep}schema={schema}"), "test").unwrap();
    let store = PgStore::open(&t).unwrap();
    Some((t, store))
}

fn record(key: &str, token: u64) -> Record {
    let t = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    Record {
        version: 1,
        key: key.into(),
        token,
        agent: Agent {
            id: "a".into(),
            name: None,
            host: "h".into(),
            boot_id: None,
            pid_ns: None,
            pid: None,
            pid_start: None,
            parent: None,
            user: None,
        },
        acquired_at: t,
        renewed_at: t,
        expires_at: t + chrono::Duration::minutes(30),
        reason: Some("r".into()),
        owner: None,
        paths: Vec::new(),
    }
}

#[test]
fn records_round_trip_and_tokens_increase() {
    let Some((_, s)) = fresh("rt") else { return };
    assert_eq!(s.schema_version(), schema::CURRENT);
    let g = s.begin(true).unwrap().unwrap();
    let t1 = s.next_token(&g).unwrap();
    let t2 = s.next_token(&g).unwrap();
    assert!(t2 > t1);
    s.insert(&g, &record("../x", t1)).unwrap();
    assert!(
        s.insert(&g, &record("../x", t2)).is_err(),
        "a second insert fails"
    );
    s.commit(g)
        .expect_err("the transaction saw a failed step, so commit fails");
    assert!(
        matches!(s.read("../x").unwrap(), Slot::Free),
        "nothing kept"
    );

    let g = s.begin(true).unwrap().unwrap();
    let t3 = s.next_token(&g).unwrap();
    assert!(t3 > t2, "tokens are never reused, even after a rollback");
    s.insert(&g, &record("b", t3)).unwrap();
    s.insert(&g, &record("a", t3 + 100)).unwrap();
    s.commit(g).unwrap();
    match s.read("b").unwrap() {
        Slot::Held(r) => assert_eq!(r, record("b", t3)),
        other => panic!("{other:?}"),
    }
    let keys: Vec<String> = s
        .scan()
        .unwrap()
        .into_iter()
        .map(|sl| match sl {
            Slot::Held(r) => r.key,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, ["a", "b"]);
}

#[test]
fn a_dropped_guard_keeps_nothing() {
    let Some((_, s)) = fresh("drop") else { return };
    {
        let g = s.begin(true).unwrap().unwrap();
        s.insert(&g, &record("k", 1)).unwrap();
        let mut q = Queue::empty("k");
        q.waiters.clear();
        s.write_queue(&g, &q).unwrap();
    }
    assert!(matches!(s.read("k").unwrap(), Slot::Free));
    // The connection is usable after the rollback.
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 2)).unwrap();
    s.commit(g).unwrap();
    assert!(matches!(s.read("k").unwrap(), Slot::Held(_)));
}

#[test]
fn the_scope_is_serial_and_try_does_not_wait() {
    let Some((t, s)) = fresh("serial") else {
        return;
    };
    let other = PgStore::connect_new(&t).unwrap();
    let g = s.begin(true).unwrap().unwrap();
    assert!(other.begin(false).unwrap().is_none(), "busy: None at once");
    s.commit(g).unwrap();
    let g2 = other.begin(false).unwrap().expect("free again");
    other.commit(g2).unwrap();
}

#[test]
fn a_killed_connection_keeps_nothing_and_says_so() {
    let Some((t, s)) = fresh("kill") else { return };
    let killer = PgStore::connect_new(&t).unwrap();
    let pid: i32 = s
        .with_client("pid", |c| {
            c.query_one("SELECT pg_backend_pid()", &[])
                .map(|r| r.get(0))
        })
        .unwrap();
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 1)).unwrap();
    killer
        .with_client("kill", |c| {
            c.execute("SELECT pg_terminate_backend($1)", &[&pid])
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let err = s
        .insert(&g, &record("k2", 2))
        .and_then(|_| s.commit(g))
        .expect_err("the connection is gone");
    let msg = err.to_string();
    assert!(msg.contains("PostgreSQL at"), "{msg}");
    assert!(
        !matches!(killer.read("k").unwrap(), Slot::Held(_)),
        "nothing kept"
    );
}

#[test]
fn notifications_wake_a_waiter_after_commit() {
    let Some((t, s)) = fresh("notify") else {
        return;
    };
    let other = PgStore::connect_new(&t).unwrap();
    let mut changes = other.changes().unwrap();
    let mut follow = other.follow_audit().unwrap();
    assert!(follow.next(Duration::from_millis(10)).unwrap().is_empty());
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 1)).unwrap();
    let ev = crate::store::AuditEvent::new(record("k", 1).acquired_at, "acquire", "k", "a");
    s.audit(&g, &ev).unwrap();
    s.commit(g).unwrap();
    let started = std::time::Instant::now();
    changes.wait(Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woken by NOTIFY"
    );
    let got = follow.next(Duration::from_secs(5)).unwrap();
    assert_eq!(got, vec![ev]);
}

#[test]
fn one_watcher_per_agent() {
    let Some((t, s)) = fresh("watch") else { return };
    let other = PgStore::connect_new(&t).unwrap();
    let held = s.lock_watcher("a").unwrap().expect("first");
    assert!(other.lock_watcher("a").unwrap().is_none());
    assert!(other.lock_watcher("b").unwrap().is_some());
    drop(held);
    assert!(other.lock_watcher("a").unwrap().is_some());
}

#[test]
fn concurrent_first_runs_migrate_once() {
    let Some(base) = base_url() else { return };
    let schema = format!("u_race_{}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let t = Target::parse(&url, "test").unwrap();
                PgStore::open(&t)
                    .map(|s| s.schema_version())
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Ok(schema::CURRENT));
    }
}

#[test]
fn a_server_that_is_down_is_named_masked_within_the_timeout() {
    // A port nobody listens on (and a password that must not show).
    let t = Target::parse(
        "postgres://u:hunter2@127.0.0.1:9/db?connect_timeout=2",
        "TASKLOCK_URL",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = PgStore::open(&t).err().expect("refused").to_string();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(err.contains("postgres://u:***@127.0.0.1:9/db"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

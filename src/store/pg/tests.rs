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
        slot: None,
        slots: None,
        worktree: None,
    }
}

/// The record of slot `slot` (of 3) of `key`.
fn slot_record(key: &str, slot: u32, token: u64) -> Record {
    Record {
        version: crate::store::version_for(&[], Some(slot)),
        slot: Some(slot),
        slots: Some(3),
        ..record(key, token)
    }
}

/// The records of `slots`, each expected held.
fn held(slots: Vec<Slot>) -> Vec<Record> {
    slots
        .into_iter()
        .map(|s| match s {
            Slot::Held(r) => r,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Write a row with SQL of its own, as damage or another build would.
fn raw(s: &PgStore, sql: &str, data: &str) {
    let data = data.to_string();
    let sql = s.sql(sql);
    s.with_client("write a row", |c| {
        c.query_typed(&sql, &[(&data, tokio_postgres::types::Type::TEXT)])
    })
    .unwrap();
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
    // A second insert of the key fails: a new record's insert is put off to the next
    // round trip, here the commit's, which then keeps nothing.
    let _ = s.insert(&g, &record("../x", t2));
    let e = s
        .commit(g)
        .expect_err("the second insert failed, so commit fails");
    assert!(
        e.to_string()
            .contains("none of this command's changes were kept"),
        "{e}"
    );
    assert!(
        matches!(s.read("../x").unwrap(), Slot::Free),
        "nothing kept"
    );

    let g = s.begin(true).unwrap().unwrap();
    let t3 = s.next_token(&g).unwrap();
    assert!(t3 > t2, "tokens are never reused, even after a rollback");
    s.insert(&g, &record("b", t3)).unwrap();
    s.insert(&g, &record("a", t3 + 100)).unwrap();
    // Inserts put off are sent before the next statement on their table: it sees them.
    assert!(matches!(s.read("a").unwrap(), Slot::Held(r) if r.token == t3 + 100));
    s.insert(&g, &record("a", t3 + 200)).unwrap();
    // ...but only before one that names their table: a token is drawn first.
    s.next_token(&g)
        .expect("a statement on another table goes before the insert");
    let e = s
        .read("b")
        .expect_err("a put-off insert that fails is the next statement's failure");
    assert!(e.to_string().contains("write what it changed"), "{e}");
    s.commit(g).expect_err("the transaction saw a failed step");
    let g = s.begin(true).unwrap().unwrap();
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
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 1)).unwrap();
    // The server session of the transaction (behind a pooler in transaction mode, the
    // one it was given for this transaction).
    let pid: i32 = s
        .with_client("pid", |c| {
            c.query_typed_one("SELECT pg_backend_pid()", &[])
                .map(|r| r.get(0))
        })
        .unwrap();
    killer
        .with_client("kill", |c| {
            c.query_typed(
                "SELECT pg_terminate_backend($1)",
                &[(&pid, tokio_postgres::types::Type::INT4)],
            )
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
    let ev = crate::store::AuditEvent::new(
        record("k", 1).acquired_at,
        crate::store::Event::Acquire,
        "k",
        "a",
    );
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

#[test]
fn slot_records_round_trip_apart_from_the_key_record() {
    let Some((_, pg)) = fresh("slots") else {
        return;
    };
    // Through the trait, as the engine uses it.
    let s: &dyn crate::store::Store = &pg;
    let g = s.begin(true).unwrap().unwrap();
    let t1 = s.next_token(&g).unwrap();
    let t2 = s.next_token(&g).unwrap();
    let t3 = s.next_token(&g).unwrap();
    s.insert(&g, &record("k", t1)).unwrap();
    // Slot 2 first: they are read back in slot order all the same.
    s.insert(&g, &slot_record("k", 2, t2)).unwrap();
    s.insert(&g, &slot_record("k", 1, t3)).unwrap();
    s.insert(&g, &record("z", t3 + 1)).unwrap();
    s.commit(g).unwrap();

    assert_eq!(
        held(s.read_slots("k").unwrap()),
        [slot_record("k", 1, t3), slot_record("k", 2, t2)]
    );
    match s.read("k").unwrap() {
        Slot::Held(r) => assert_eq!(r, record("k", t1), "the key's own record"),
        other => panic!("{other:?}"),
    }
    assert!(s.read_slots("z").unwrap().is_empty(), "a key without slots");
    assert!(s.read_slots("nothing").unwrap().is_empty());
    assert!(matches!(s.read("nothing").unwrap(), Slot::Free));

    // The token sequence is shared: a slot's token follows the key records'.
    let g = s.begin(true).unwrap().unwrap();
    let t4 = s.next_token(&g).unwrap();
    assert!(t1 < t2 && t2 < t3 && t3 < t4, "{t1} {t2} {t3} {t4}");
    s.remove(&g, "k", Some(1), None).unwrap();
    s.remove(&g, "k", Some(7), None).unwrap(); // absent is fine
    let mut renewed = slot_record("k", 2, t4);
    renewed.expires_at += chrono::Duration::minutes(5);
    s.replace(&g, &renewed).unwrap();
    s.commit(g).unwrap();

    assert_eq!(held(s.read_slots("k").unwrap()), [renewed.clone()]);
    assert!(
        matches!(s.read("k").unwrap(), Slot::Held(r) if r.slot.is_none()),
        "removing a slot leaves the key's record"
    );
    // Key records first (by key), then slot records.
    assert_eq!(
        held(s.scan().unwrap()),
        [record("k", t1), record("z", t3 + 1), renewed.clone()]
    );
    assert!(s.path_index().unwrap().is_empty());

    // Removing the key's record leaves its slots.
    let g = s.begin(true).unwrap().unwrap();
    s.remove(&g, "k", None, Some(&[])).unwrap();
    s.commit(g).unwrap();
    assert!(matches!(s.read("k").unwrap(), Slot::Free));
    assert_eq!(held(s.read_slots("k").unwrap()), [renewed]);
}

/// A beat's reads: an agent's records (and its subagents'), by the `agent` column; the
/// records with paths, for path checkouts; and the turn at the sweep, one per interval.
#[test]
fn an_agents_records_the_path_index_and_the_sweeps_turn() {
    let Some((_, s)) = fresh("held") else { return };
    let by = |key: &str, agent: &str, token: u64| {
        let mut r = record(key, token);
        r.agent.id = agent.into();
        r
    };
    let paths = vec!["src/a/**".to_string()];
    let with_paths = Record {
        version: crate::store::version_for(&paths, None),
        paths: paths.clone(),
        ..by("p", "b", 5)
    };
    let mut slot = slot_record("s", 2, 6);
    slot.agent.id = "a/helper".into();
    let g = s.begin(true).unwrap().unwrap();
    for r in [
        by("k1", "a", 1),
        by("k2", "a/sub", 2),
        by("k3", "ab", 3),
        by("k4", "a%", 4),
        with_paths.clone(),
        slot.clone(),
    ] {
        s.insert(&g, &r).unwrap();
    }
    s.commit(g).unwrap();
    let keys = |agent: &str, subagents: bool| -> Vec<(String, Option<u32>)> {
        s.held_by(agent, subagents)
            .unwrap()
            .iter()
            .map(Record::id)
            .collect()
    };
    assert_eq!(keys("a", false), [("k1".to_string(), None)]);
    assert_eq!(
        keys("a", true),
        [
            ("k1".to_string(), None),
            ("k2".to_string(), None),
            ("s".to_string(), Some(2))
        ]
    );
    assert_eq!(keys("a%", true), [("k4".to_string(), None)]);
    assert!(keys("nobody", true).is_empty());
    assert_eq!(s.path_index().unwrap(), [("p".to_string(), paths)]);

    let t0 = record("x", 1).acquired_at;
    let every = Duration::from_secs(10);
    let turn = |t: crate::clock::Time| s.sweep_turn(&t, every).unwrap();
    assert!(turn(t0), "no sweep yet");
    assert!(!turn(t0));
    assert!(!turn(t0 + chrono::Duration::seconds(9)));
    assert!(turn(t0 + chrono::Duration::seconds(10)));
    // Recorded more than the interval ahead (a clock ahead): not in the way.
    assert!(turn(t0 - chrono::Duration::hours(1)));
    assert!(!turn(t0 - chrono::Duration::hours(1)));
}

/// A claim takes the first ready key whose lock is free, by the same lock id as a
/// change of that key computes (here, on the server), and may change only what it took.
#[test]
fn claims_take_ready_keys_whose_locks_are_free() {
    let Some((t, s)) = fresh("take") else { return };
    for key in ["k1", "ключ/ü", "a b", "agent:x"] {
        let sql = format!(
            "SELECT {} FROM (VALUES ($2::text)) AS v(k)",
            PgStore::key_lock_sql("v.k", "$1")
        );
        let prefix = s.key_lock_prefix();
        let row = s
            .with_client("hash", |c| c.query_one(&sql, &[&prefix, &key]))
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), s.key_lock(key), "{key}");
    }
    let keys: Vec<String> = ["k1", "k2", "k3"].map(String::from).to_vec();
    let g = s.begin(true).unwrap().unwrap();
    s.backlog_add(&g, &keys).unwrap();
    s.commit(g).unwrap();
    let other = PgStore::connect_new(&t).unwrap();
    let key = |e: Option<crate::store::BacklogEntry>| e.map(|e| (e.key, e.seq));
    let g1 = s.begin_claim(&["agent:a".into()]).unwrap().unwrap();
    assert_eq!(
        key(s.backlog_take(&g1, None).unwrap()),
        Some(("k1".into(), 1))
    );
    let g2 = other.begin_claim(&["agent:b".into()]).unwrap().unwrap();
    assert_eq!(
        key(other.backlog_take(&g2, None).unwrap()),
        Some(("k2".into(), 2)),
        "k1 is being claimed: passed over"
    );
    // The claim may change the key it took, and nothing else.
    other.allow(&g2, Some("k2"), true).unwrap();
    assert!(matches!(
        other.allow(&g2, Some("k3"), true),
        Err(Error::Escalate)
    ));
    drop(g2);
    // A change of the key being claimed waits for the claim; of another key, not.
    let third = PgStore::connect_new(&t).unwrap();
    assert!(third.begin_scoped(&["k1".into()], false).unwrap().is_none());
    let g3 = third.begin_scoped(&["k3".into()], false).unwrap().unwrap();
    drop(g3);
    // The project's lock waits for the claim too.
    assert!(third.begin(false).unwrap().is_none());
    s.commit(g1).unwrap();
    let g1 = s.begin_claim(&["agent:a".into()]).unwrap().unwrap();
    assert_eq!(
        key(s.backlog_take(&g1, Some(2)).unwrap()),
        Some(("k3".into(), 3))
    );
    assert_eq!(key(s.backlog_take(&g1, Some(3)).unwrap()), None);
}

#[test]
fn an_occupied_slot_cannot_be_inserted_into() {
    let Some((_, s)) = fresh("slotbusy") else {
        return;
    };
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &slot_record("k", 1, 1)).unwrap();
    s.commit(g).unwrap();

    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &slot_record("k", 2, 2))
        .expect("another slot is free");
    let err = s
        .insert(&g, &slot_record("k", 1, 3))
        .expect_err("slot 1 is held");
    assert!(err.to_string().contains("slot 1 of `k`"), "{err}");
    s.commit(g)
        .expect_err("the transaction saw a failed step, so commit fails");
    assert_eq!(
        held(s.read_slots("k").unwrap()),
        [slot_record("k", 1, 1)],
        "nothing of the failed transaction kept"
    );

    // A slot record never takes the place of the key's record, nor the other way round.
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 4))
        .expect("the key's own record is apart from its slots");
    s.commit(g).unwrap();
}

#[test]
fn damaged_slot_rows_are_reported_as_corrupt() {
    let Some((_, s)) = fresh("slotbad") else {
        return;
    };
    let insert = "INSERT INTO {s}.slot_records (key, slot, token, agent, expires_at, data) \
                  VALUES ($2, $3, 1, 'a', now(), $1::text::jsonb)";
    let json = |r: &Record| serde_json::to_string(r).unwrap();
    let rows: Vec<(u32, String)> = vec![
        (1, json(&slot_record("k", 1, 1))),
        (2, "{\"not\": \"a record\"}".into()),
        (3, json(&slot_record("other", 3, 1))),
        (4, json(&slot_record("k", 5, 1))),
        (
            5,
            json(&Record {
                version: 99,
                ..slot_record("k", 5, 1)
            }),
        ),
        (6, json(&record("k", 1))),
    ];
    for (n, data) in &rows {
        let data = data.clone();
        let n = *n as i32;
        let insert = s.sql(insert);
        s.with_client("write a row", |c| {
            use tokio_postgres::types::Type;
            c.query_typed(
                &insert,
                &[(&data, Type::TEXT), (&"k", Type::TEXT), (&n, Type::INT4)],
            )
        })
        .unwrap();
    }
    let slots = s.read_slots("k").unwrap();
    assert_eq!(slots.len(), 6, "{slots:?}");
    assert!(matches!(&slots[0], Slot::Held(r) if *r == slot_record("k", 1, 1)));
    let problems: Vec<(String, String)> = slots[1..]
        .iter()
        .map(|sl| match sl {
            Slot::Corrupt { path, problem } => (path.display().to_string(), problem.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let schema = s.schema().to_string();
    for (i, (path, _)) in problems.iter().enumerate() {
        assert_eq!(path, &format!("{schema}.slot_records[\"k\", {}]", i + 2));
    }
    assert!(problems[0].1.contains("not a valid record"), "{problems:?}");
    assert!(
        problems[1].1.contains("names the key \"other\""),
        "{problems:?}"
    );
    assert!(
        problems[2].1.contains("place of slot 4 but names slot 5"),
        "{problems:?}"
    );
    assert!(crate::error::newer_format(&problems[3].1), "{problems:?}");
    assert!(
        problems[4].1.contains("place of slot 6 but names no slot"),
        "{problems:?}"
    );
    // A scan reports them too, after the key records.
    let scan = s.scan().unwrap();
    assert_eq!(scan.len(), 6);
    assert_eq!(
        scan.iter()
            .filter(|sl| matches!(sl, Slot::Corrupt { .. }))
            .count(),
        5
    );

    // A slot's record in the place of the key's own is damage, never returned by read.
    raw(
        &s,
        "INSERT INTO {s}.records (key, token, agent, expires_at, data) \
         VALUES ('k', 1, 'a', now(), $1::text::jsonb)",
        &json(&slot_record("k", 2, 1)),
    );
    match s.read("k").unwrap() {
        Slot::Corrupt { path, problem } => {
            assert_eq!(
                path.display().to_string(),
                format!("{schema}.records[\"k\"]")
            );
            assert!(problem.contains("names slot 2"), "{problem}");
        }
        other => panic!("{other:?}"),
    }

    // Damage can be removed by its slot.
    let g = s.begin(true).unwrap().unwrap();
    for n in 2..=6 {
        s.remove(&g, "k", Some(n)).unwrap();
    }
    s.commit(g).unwrap();
    assert_eq!(held(s.read_slots("k").unwrap()), [slot_record("k", 1, 1)]);
}

#[test]
fn a_slot_change_wakes_a_waiter() {
    let Some((t, s)) = fresh("slotwake") else {
        return;
    };
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &slot_record("k", 1, 1)).unwrap();
    s.commit(g).unwrap();
    let other = PgStore::connect_new(&t).unwrap();
    let mut changes = other.changes().unwrap();
    // Only a slot's record goes: no key record, no queue.
    let g = s.begin(true).unwrap().unwrap();
    s.remove(&g, "k", Some(1)).unwrap();
    s.commit(g).unwrap();
    let started = std::time::Instant::now();
    changes.wait(Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woken by NOTIFY"
    );
}

#[test]
fn the_previous_schema_is_migrated_with_its_records_kept() {
    let Some(base) = base_url() else { return };
    let schema = format!("u_mig_{}", std::process::id());
    let admin = PgStore::open(&Target::parse(&base, "test").unwrap()).unwrap();
    // Version 1 as a build of it left it: a checkout held, tokens handed out.
    let v1 = format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; {} {} \
         INSERT INTO {schema}.schema_version (version, tasklock) VALUES (1, 'old'); \
         SELECT setval('{schema}.tokens', 41);",
        super::schema::bootstrap(&schema),
        super::schema::migration(&schema, 1),
    );
    admin
        .with_client("make a version 1 schema", |c| c.batch_execute(&v1))
        .unwrap();
    let old = serde_json::to_string(&record("k", 41)).unwrap();
    admin
        .with_client("write a version 1 record", |c| {
            c.query_typed(
                &format!(
                    "INSERT INTO {schema}.records (key, token, agent, expires_at, data) \
                     VALUES ('k', 41, 'a', now(), $1::text::jsonb)"
                ),
                &[(&old, tokio_postgres::types::Type::TEXT)],
            )
        })
        .unwrap();

    let sep = if base.contains('?') { '&' } else { '?' };
    let t = Target::parse(&format!("{base}{sep}schema={schema}"), "test").unwrap();
    let s = PgStore::connect_new(&t).unwrap();
    assert_eq!(s.schema_version(), schema::CURRENT);
    let versions: Vec<i32> = s
        .with_client("read the versions", |c| {
            c.query_typed(
                &format!("SELECT version FROM {schema}.schema_version ORDER BY version"),
                &[],
            )
        })
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=schema::CURRENT).collect::<Vec<_>>());
    match s.read("k").unwrap() {
        Slot::Held(r) => assert_eq!(r, record("k", 41)),
        other => panic!("{other:?}"),
    }
    assert!(s.read_slots("k").unwrap().is_empty());

    // Slots work, with tokens after the old ones.
    let g = s.begin(true).unwrap().unwrap();
    let tok = s.next_token(&g).unwrap();
    assert!(tok > 41, "{tok}");
    s.insert(&g, &slot_record("k", 1, tok)).unwrap();
    s.commit(g).unwrap();
    assert_eq!(held(s.read_slots("k").unwrap()), [slot_record("k", 1, tok)]);
    assert_eq!(held(s.scan().unwrap()).len(), 2);

    // Opening it again migrates nothing more.
    let again = PgStore::connect_new(&t).unwrap();
    assert_eq!(again.schema_version(), schema::CURRENT);
    admin
        .with_client("drop", |c| {
            c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        })
        .unwrap();
}

/// A PgBouncer in transaction mode in front of `TASKLOCK_TEST_PG_URL`'s server
/// (`TASKLOCK_TEST_PGBOUNCER_URL`; `.ci/run` starts one). Without it the tests behind a
/// pooler say so on stderr and pass.
fn pooler_url() -> Option<String> {
    match std::env::var("TASKLOCK_TEST_PGBOUNCER_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!("TASKLOCK_TEST_PGBOUNCER_URL is not set: test behind PgBouncer skipped");
            None
        }
    }
}

/// The store of `fresh(name)` reached through the pooler, with the direct URL as its
/// session URL (`session`) or without one.
fn pooled(name: &str, session: bool) -> Option<(Target, PgStore, PgStore)> {
    let pooler = pooler_url()?;
    let (direct, store) = fresh(name)?;
    let sep = if pooler.contains('?') { '&' } else { '?' };
    let mut t = Target::parse(
        &format!("{pooler}{sep}schema={}", direct.schema),
        "TASKLOCK_URL",
    )
    .unwrap();
    if session {
        t.set_session(&direct.url, "TASKLOCK_SESSION_URL").unwrap();
    }
    let s = PgStore::connect_new(&t).unwrap();
    Some((t, s, store))
}

#[test]
fn behind_a_pooler_the_session_url_keeps_watcher_locks_and_notifications() {
    let Some((t, s, direct)) = pooled("pool_sess", true) else {
        return;
    };
    let other = PgStore::connect_new(&t).unwrap();
    // One watcher per agent, let go when dropped.
    let held = s.lock_watcher("a").unwrap().expect("first");
    assert!(other.lock_watcher("a").unwrap().is_none());
    assert!(other.lock_watcher("b").unwrap().is_some());
    drop(held);
    assert!(other.lock_watcher("a").unwrap().is_some());

    // A commit through the pooler wakes a waiter listening on the session URL.
    let mut changes = other.changes().unwrap();
    assert!(changes.listening());
    let mut follow = other.follow_audit().unwrap();
    assert!(follow.next(Duration::from_millis(10)).unwrap().is_empty());
    let g = s.begin(true).unwrap().unwrap();
    s.insert(&g, &record("k", 1)).unwrap();
    let ev = crate::store::AuditEvent::new(
        record("k", 1).acquired_at,
        crate::store::Event::Acquire,
        "k",
        "a",
    );
    s.audit(&g, &ev).unwrap();
    s.commit(g).unwrap();
    let started = std::time::Instant::now();
    changes.wait(Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woken by NOTIFY"
    );
    assert_eq!(follow.next(Duration::from_secs(5)).unwrap(), vec![ev]);
    // What went through the pooler is the store's, as seen directly.
    assert!(matches!(direct.read("k").unwrap(), Slot::Held(_)));
}

#[test]
fn behind_a_pooler_without_a_session_url_a_watcher_is_refused_not_misplaced() {
    let Some((t, s, _direct)) = pooled("pool_nosess", false) else {
        return;
    };
    // Hold the server session the store was given when it connected in a transaction
    // of another client, so its next statement runs in another one (as under load).
    let pid = s.backend_pid();
    let mut pins = Vec::new();
    let pinned = (0..10).any(|_| {
        let mut c = super::client::connect_for_tests(&t).unwrap();
        c.batch_execute("BEGIN").unwrap();
        let got: i32 = c
            .query_typed_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        pins.push(c);
        got == pid
    });
    if !pinned {
        eprintln!("the pooler did not hand out the store's server session again: skipped");
        return;
    }
    let err = s.lock_watcher("a").err().expect("refused").to_string();
    assert!(err.contains("TASKLOCK_SESSION_URL"), "{err}");
    assert!(err.contains("transaction mode"), "{err}");
    // A wait does not listen there (the notifications would reach a pooled session);
    // it polls.
    let changes = s.changes().unwrap();
    assert!(!changes.listening());
    // No watcher lock was left in any session.
    drop(pins);
    let id = super::client::lock_id_for_tests(&["watcher", &t.schema, "a"]);
    let held: i64 = s
        .with_client("count advisory locks", |c| {
            c.query_typed_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND ((classid::bigint << 32) | objid::bigint) = $1",
                &[(&id, tokio_postgres::types::Type::INT8)],
            )
            .map(|r| r.get(0))
        })
        .unwrap();
    assert_eq!(held, 0);
}

/// What a key scope's BEGIN read ahead (ahead.rs) answers its first reads, and its own
/// writes are what it reads after them: a record inserted, replaced or removed, a token
/// drawn ahead only once.
#[test]
fn reads_ahead_answer_a_scope_until_it_writes() {
    let Some((_, s)) = fresh("ahead") else { return };
    let g = s.begin(true).unwrap().unwrap();
    let t = s.next_token(&g).unwrap();
    s.insert(&g, &record("held", t)).unwrap();
    s.commit(g).unwrap();
    let locks = ["held".to_string(), "free".to_string()];
    let g = s.begin_scoped(&locks, true).unwrap().unwrap();
    // Read ahead: one held, one free with a token drawn for it; both have no slots.
    assert!(matches!(s.read("held").unwrap(), Slot::Held(r) if r.token == t));
    assert!(matches!(s.read("free").unwrap(), Slot::Free));
    assert!(s.read_slots("free").unwrap().is_empty());
    let (drawn, _) = s.grant_token("free", 3).unwrap();
    assert!(drawn > t);
    let (again, _) = s.grant_token("free", 3).unwrap();
    assert!(again > drawn, "a token drawn ahead is handed out once");
    // The scope's own writes are what it reads next.
    s.insert(&g, &record("free", drawn)).unwrap();
    assert!(matches!(s.read("free").unwrap(), Slot::Held(r) if r.token == drawn));
    s.remove(&g, "held", None).unwrap();
    assert!(matches!(s.read("held").unwrap(), Slot::Free));
    let read = s.read_many(&g, &locks).unwrap();
    assert!(matches!(&read[0].0, Slot::Free));
    assert!(matches!(&read[1].0, Slot::Held(r) if r.token == drawn));
    s.commit(g).unwrap();
    // Outside a scope nothing read ahead is kept.
    assert!(matches!(s.read("held").unwrap(), Slot::Free));
    assert!(matches!(s.read("free").unwrap(), Slot::Held(_)));
}

/// Version 7: keeping the audit table to its bound reads the newest event's running total
/// and the newest event outside the bound through indexes, and drops only the rows below
/// it; before, every look added up the whole table (a scan of 17 ms at 10,000 events,
/// once every 64 events).
#[test]
fn the_audit_trim_reads_by_index_and_drops_only_the_oldest() {
    let Some((_t, s)) = fresh("trim") else {
        return;
    };
    let simple = |sql: &str| -> Vec<Vec<String>> {
        let rows = s.with_client("query", |c| c.simple_query(sql)).unwrap();
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("").to_string())
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    };
    // 20,000 events of the same size, their running totals as commits write them.
    simple(&s.sql(
        "INSERT INTO {s}.audit (ts, event, key, agent, data, total) \
         SELECT now(), 'acquire', 'k' || i, 'a', d, sum(octet_length(d::text)) OVER (ORDER BY i) \
         FROM generate_series(1, 20000) AS i, \
              LATERAL (SELECT jsonb_build_object('event', 'acquire', 'key', 'k' || lpad(i::text, 6, '0'))) AS j(d); \
         ANALYZE {s}.audit",
    ));
    let size: i64 = simple(&s.sql("SELECT octet_length(data::text) FROM {s}.audit LIMIT 1"))[0][0]
        .parse()
        .unwrap();
    // Room for 1,500 of them and half of one more.
    let budget = (size * 1500 + size / 2) as u64;
    // The look, and a drop of the few oldest rows, as between two looks of a busy log.
    for sql in [s.audit_cut_sql(budget), s.audit_drop_sql(size * 64)] {
        let plan = simple(&format!("EXPLAIN {sql}")).concat().join("\n");
        assert!(!plan.contains("Seq Scan"), "{sql}\n{plan}");
        assert!(plan.contains("Index"), "{sql}\n{plan}");
    }
    s.with_client("trim", |c| s.trim_audit_with(c, budget))
        .unwrap();
    let left = simple(&s.sql(
        "SELECT count(*), min(total), max(total), \
         bool_and(total - prev = octet_length(data::text)) \
         FROM (SELECT total, data, lag(total) OVER (ORDER BY id) AS prev FROM {s}.audit) t",
    ));
    // The newest 1,500 events and the one that crosses the bound, half of it inside.
    assert_eq!(left[0][0], "1501", "{left:?}");
    assert_eq!(left[0][1], (size * 18500).to_string(), "{left:?}");
    assert_eq!(left[0][2], (size * 20000).to_string(), "{left:?}");
    assert_eq!(left[0][3], "t", "{left:?}");
    // Within the bound, a look drops nothing.
    s.with_client("trim", |c| s.trim_audit_with(c, budget))
        .unwrap();
    assert_eq!(
        simple(&s.sql("SELECT count(*) FROM {s}.audit"))[0][0],
        "1501"
    );
}

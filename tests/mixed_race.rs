//! Changes to one key alone run beside each other (on PostgreSQL, under that key's lock
//! only); changes that span keys (a queue's handoff) still run alone. Real processes race
//! both kinds at once: soloists check their own keys out and in, while contenders queue
//! for one shared key through `run --wait`. Nobody is ever inside the shared key with
//! another (checked from the times the holders wrote), every grant has its own token,
//! and each key's tokens grow.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

fn script_cmd(e: &Env, script: &str) -> Child {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .env_remove("TASKLOCK_NOW")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(u) = pg_url_for(&e.dir()) {
        cmd.env("TASKLOCK_URL", u);
    }
    if let Some(u) = pg_session_url() {
        cmd.env("TASKLOCK_SESSION_URL", u);
    }
    cmd.spawn().unwrap()
}

#[test]
fn single_key_changes_and_queue_handoffs_race_without_double_grants() {
    let e = Env::new();
    std::fs::create_dir_all(e.dir()).unwrap();
    let tl = env!("CARGO_BIN_EXE_tasklock");
    let dir = e.dir();
    let log = e.tmp.path().join("shared.log");
    const SOLOISTS: usize = 8;
    const CONTENDERS: usize = 8;
    const SOLO_ROUNDS: usize = 25;
    const SHARED_ROUNDS: usize = 3;
    let mut children = Vec::new();
    for i in 0..SOLOISTS {
        let a = format!("solo-{i}");
        let script = format!(
            r#"i=0
while [ $i -lt {SOLO_ROUNDS} ]; do
  {tl} --dir '{d}' --agent {a} checkout own-{i} >/dev/null || exit 1
  {tl} --dir '{d}' --agent {a} renew own-{i} >/dev/null || exit 1
  {tl} --dir '{d}' --agent {a} heartbeat >/dev/null || exit 1
  {tl} --dir '{d}' --agent {a} release own-{i} >/dev/null || exit 1
  i=$((i+1))
done"#,
            d = dir.display(),
        );
        children.push((a, script_cmd(&e, &script)));
    }
    for i in 0..CONTENDERS {
        let a = format!("contender-{i}");
        let script = format!(
            r#"i=0
while [ $i -lt {SHARED_ROUNDS} ]; do
  {tl} --dir '{d}' --agent {a} run shared --wait 120s -- sh -c '
    echo "enter $(date +%s%N) {a}" >> "{log}"
    sleep 0.02
    echo "leave $(date +%s%N) {a}" >> "{log}"' >/dev/null || exit 1
  i=$((i+1))
done"#,
            d = dir.display(),
            log = log.display(),
        );
        children.push((a, script_cmd(&e, &script)));
    }
    wait_all_ok(children, Duration::from_secs(300));

    // The shared key: one holder at a time, from the holders' own clocks.
    let events = inside_log(&log);
    assert_eq!(events.len(), CONTENDERS * SHARED_ROUNDS * 2);
    let mut inside: Option<String> = None;
    for (t, enter, who) in &events {
        if *enter {
            assert!(
                inside.is_none(),
                "{who} entered at {t} while {inside:?} was inside"
            );
            inside = Some(who.clone());
        } else {
            assert_eq!(inside.as_deref(), Some(who.as_str()), "at {t}");
            inside = None;
        }
    }

    // Every grant its own token; each key's tokens grow with its grants.
    let log = audit(&e.dir());
    let mut seen = std::collections::HashSet::new();
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut grants: HashMap<String, usize> = HashMap::new();
    for ev in log.iter().filter(|ev| ev["event"] == "acquire") {
        let token = ev["token"].as_u64().unwrap();
        let key = ev["key"].as_str().unwrap().to_string();
        assert!(seen.insert(token), "token {token} granted twice: {ev}");
        if let Some(prev) = last.insert(key.clone(), token) {
            assert!(token > prev, "{key}: token {token} after {prev}");
        }
        *grants.entry(key).or_default() += 1;
    }
    assert_eq!(grants["shared"], CONTENDERS * SHARED_ROUNDS);
    for i in 0..SOLOISTS {
        assert_eq!(grants[&format!("own-{i}")], SOLO_ROUNDS, "{grants:?}");
    }
    // Nothing left held, nobody left waiting.
    let list = e.run(Some("observer"), &["list", "--json"]).json();
    assert_eq!(list["checkouts"].as_array().unwrap().len(), 0, "{list}");
    assert!(list["queues"].as_object().unwrap().is_empty(), "{list}");
}

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

/// Claims from the backlog (on PostgreSQL each under the lock of the key it takes, beside
/// the others) race plain checkouts and releases of the same keys: a key is never inside
/// two holders at once (from the holders' own clocks), every key is either claimed and
/// done once or still in the backlog, and every grant has its own token.
#[test]
fn backlog_claims_and_plain_checkouts_of_the_same_keys_race() {
    const KEYS: usize = 30;
    const CLAIMERS: usize = 6;
    const PLAIN: usize = 4;
    const PLAIN_ROUNDS: usize = 30;
    let e = Env::new();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("task-{i:02}")).collect();
    let mut args = vec!["backlog", "add"];
    args.extend(keys.iter().map(String::as_str));
    e.ok("observer", &args);
    let tl = env!("CARGO_BIN_EXE_tasklock");
    let dir = e.dir();
    let logs = e.tmp.path().join("inside");
    std::fs::create_dir(&logs).unwrap();
    // What a holder does with a key: marks its stay in the key's own log.
    let stay = format!(
        r#"echo "enter $(date +%s%N) $me" >> '{l}'/$key
  sleep 0.01
  echo "leave $(date +%s%N) $me" >> '{l}'/$key"#,
        l = logs.display()
    );
    let mut children = Vec::new();
    for c in 0..CLAIMERS {
        let me = format!("claimer-{c}");
        let script = format!(
            r#"me={me}
while :; do
  out=$({tl} --dir '{d}' --agent $me checkout --next --json)
  rc=$?
  [ $rc -eq 0 ] || break
  key=$(printf '%s' "$out" | grep -o '"key":"[^"]*"' | head -n 1 | cut -d '"' -f 4)
  {stay}
  echo "$key" >> '{l}'/done-$me
  {tl} --dir '{d}' --agent $me release "$key" --done >/dev/null || exit 1
done
# Nothing ready (2), or nothing left at all (3).
[ $rc -eq 2 ] || [ $rc -eq 3 ] || {{ echo "exit $rc: $out" >&2; exit 1; }}"#,
            d = dir.display(),
            l = logs.display(),
        );
        children.push((me, script_cmd(&e, &script)));
    }
    for p in 0..PLAIN {
        let me = format!("plain-{p}");
        let script = format!(
            r#"me={me}
i=0
while [ $i -lt {PLAIN_ROUNDS} ]; do
  key=task-$(printf '%02d' $(( (i * 7 + {p} * 11) % {KEYS} )))
  {tl} --dir '{d}' --agent $me checkout $key >/dev/null
  rc=$?
  if [ $rc -eq 0 ]; then
    {stay}
    {tl} --dir '{d}' --agent $me release $key >/dev/null || exit 1
  elif [ $rc -ne 2 ]; then
    echo "checkout $key: exit $rc" >&2; exit 1
  fi
  i=$((i+1))
done"#,
            d = dir.display(),
        );
        children.push((me, script_cmd(&e, &script)));
    }
    wait_all_ok(children, Duration::from_secs(300));

    for key in &keys {
        let path = logs.join(key);
        if !path.exists() {
            continue;
        }
        let mut inside: Option<String> = None;
        for (t, enter, who) in inside_log(&path) {
            if enter {
                assert!(
                    inside.is_none(),
                    "{who} entered {key} at {t} while {inside:?} was inside"
                );
                inside = Some(who);
            } else {
                assert_eq!(inside.as_deref(), Some(who.as_str()), "{key} at {t}");
                inside = None;
            }
        }
    }
    // Each key claimed and done once, or still in the backlog (ready: a claimer that
    // found it held by a plain checkout stopped when nothing else was ready).
    let mut done = Vec::new();
    for c in 0..CLAIMERS {
        let text =
            std::fs::read_to_string(logs.join(format!("done-claimer-{c}"))).unwrap_or_default();
        done.extend(text.lines().map(str::to_string));
    }
    let show = e.ok("observer", &["backlog", "show", "--json"]).json();
    let count = |f: &str| show[f].as_u64().unwrap() as usize;
    assert!(done.len() >= KEYS / 2, "claims were made: {done:?}");
    let unique: std::collections::BTreeSet<&String> = done.iter().collect();
    assert_eq!(unique.len(), done.len(), "a key done twice: {done:?}");
    assert_eq!(
        done.len() + count("ready") + count("claimed"),
        KEYS,
        "{show}"
    );
    for list in ["next", "claims"] {
        for k in show[list].as_array().unwrap() {
            let k = k["key"].as_str().unwrap().to_string();
            assert!(keys.contains(&k) && !done.contains(&k), "{k}: {show}");
        }
    }
    let mut seen = std::collections::HashSet::new();
    for ev in audit(&e.dir()).iter().filter(|ev| ev["event"] == "acquire") {
        let token = ev["token"].as_u64().unwrap();
        assert!(seen.insert(token), "token {token} granted twice: {ev}");
    }
}

//! A lock directory no one can turn against its users: keys that look alike are one key
//! or refused, a clock far behind never moves a lease backwards, a hostile or broken
//! `config.yaml` fails fast and quietly, a side effect that fails after a change was
//! made is a warning (never exit 1 with the change kept), and a watcher whose process
//! was superseded leaves the agent's checkouts alone.

mod common;
use common::*;

#[test]
fn nfd_and_nfc_spellings_are_one_key() {
    let e = Env::new();
    let nfd = "cafe\u{301}";
    let nfc = "caf\u{e9}";
    let r = e.ok("a", &["checkout", nfd, "--json"]);
    assert_eq!(r.json()["checkout"]["key"], nfc, "stored in NFC");
    let s = e.ok("b", &["status", nfc, "--json"]);
    assert_eq!(s.json()["outcome"], "held");
    assert_eq!(s.json()["checkout"]["agent"]["id"], "a");
    // Another agent's checkout under the other spelling is a conflict, not a second lock.
    let c = e.run(Some("b"), &["checkout", nfc, "--json"]);
    assert_eq!(c.code, 2, "{}", c.text());
    e.ok("a", &["release", nfc]);
    let files: Vec<_> = std::fs::read_dir(e.dir().join("keys")).unwrap().collect();
    assert!(files.is_empty(), "one file for both spellings, now gone");
}

#[test]
fn bidi_and_zero_width_characters_in_keys_are_usage_errors() {
    let e = Env::new();
    for key in [
        "task\u{202E}1",
        "task\u{200B}1",
        "\u{FEFF}task",
        "task\u{2066}1",
    ] {
        let r = e.run(Some("a"), &["checkout", key, "--json"]);
        assert_eq!(r.code, 64, "{key:?}: {}", r.text());
        let j = r.json();
        assert_eq!(j["error"]["kind"], "usage");
        assert!(
            j["error"]["message"].as_str().unwrap().contains("U+"),
            "{}",
            r.stdout
        );
    }
    let r = e.run(Some("a"), &["status", "task\u{202E}1"]);
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(
        !e.dir().join("keys").exists()
            || std::fs::read_dir(e.dir().join("keys"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_renew_with_the_clock_far_behind_never_moves_the_lease_backwards() {
    let mut e = Env::new();
    e.at(T1H);
    let r = e.ok("a", &["checkout", "task-1", "--json"]);
    let acquired = r.json()["checkout"]["acquired_at"].clone();
    let expires = r.json()["checkout"]["expires_at"].clone();
    assert_eq!(expires, "2026-01-01T01:30:00Z");
    // The clock jumps a day back.
    e.at("2025-12-31T01:00:00Z");
    let r = e.ok("a", &["renew", "task-1", "--json"]);
    let c = &r.json()["results"][0]["checkout"];
    assert_eq!(
        c["expires_at"], expires,
        "a plain renew never shortens: {}",
        r.stdout
    );
    let r = e.ok("a", &["renew", "task-1", "--timeout", "5m", "--json"]);
    let c = &r.json()["results"][0]["checkout"];
    assert_eq!(c["acquired_at"], acquired);
    assert!(
        c["expires_at"].as_str().unwrap() >= acquired.as_str().unwrap(),
        "expires_at before acquired_at: {}",
        r.stdout
    );
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(record_path(&e.dir(), "task-1")).unwrap()).unwrap();
    assert!(rec["renewed_at"].as_str().unwrap() >= rec["acquired_at"].as_str().unwrap());
    assert!(rec["expires_at"].as_str().unwrap() >= rec["acquired_at"].as_str().unwrap());
    // The holder's re-checkout is clamped the same way.
    let r = e.ok("a", &["checkout", "task-1", "--timeout", "1m", "--json"]);
    assert_eq!(r.json()["outcome"], "already_held");
    assert!(r.json()["checkout"]["expires_at"].as_str().unwrap() >= acquired.as_str().unwrap());
}

//! File modes: a lock directory is private to its user unless `tasklock init --shared`
//! made it a group's, and then every member can use it and sees who wrote what.

#[macro_use]
mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_tasklock");

fn scrub(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let s = k.to_string_lossy();
        if s.starts_with("TASKLOCK_") || s.starts_with("CLAUDE_") {
            cmd.env_remove(&k);
        }
    }
}

/// `sh -c 'umask U; exec tasklock --dir DIR ARGS'`, optionally through `setpriv` as
/// another user with the extra group `group`.
fn tl(
    user: Option<(&TestUser, Option<u32>)>,
    umask: &str,
    dir: &Path,
    cwd: &Path,
    args: &[&str],
) -> Run {
    let mut cmd = match user {
        Some((u, group)) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", u.uid))
                .arg(format!("--regid={}", u.gid));
            match group {
                Some(g) => c.arg(format!("--groups={g}")),
                None => c.arg("--clear-groups"),
            };
            c.arg("sh");
            c
        }
        None => Command::new("sh"),
    };
    scrub(&mut cmd);
    cmd.arg("-c")
        .arg(format!("umask {umask} && exec \"$@\""))
        .arg("sh")
        .arg(BIN)
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env("TASKLOCK_NOW", T0)
        .env("HOME", "/nonexistent")
        .current_dir(cwd)
        .stdin(Stdio::null());
    exec(cmd)
}

fn ok(r: Run) -> Run {
    assert_eq!(r.code, 0, "{}", r.text());
    r
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every entry under `root` (not following symlinks), with its mode and group.
fn walk(root: &Path) -> Vec<(PathBuf, bool, u32, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            out.push((e.path(), m.is_dir(), m.mode() & 0o7777, m.gid()));
            if m.is_dir() {
                todo.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_private_lock_directory_is_0600_and_0700_whatever_the_umask_and_others_cannot_read_it() {
    let Some(user) = TestUser::create_or_skip("tl-s", false) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let dir = tmp.path().join(".locks");
    let cwd = tmp.path();
    for umask in ["000", "022"] {
        let _ = std::fs::remove_dir_all(&dir);
        ok(tl(
            None,
            umask,
            &dir,
            cwd,
            &["checkout", "k", "--agent", "a"],
        ));
        ok(tl(
            None,
            umask,
            &dir,
            cwd,
            &["note", "k", "found the cause", "--agent", "a"],
        ));
        let q = tl(
            None,
            umask,
            &dir,
            cwd,
            &["checkout", "k", "--queue", "--agent", "b"],
        );
        assert_eq!(q.code, 2, "{}", q.text());
        ok(tl(
            None,
            umask,
            &dir,
            cwd,
            &["freeze", "deploy", "--for", "1h", "--agent", "a"],
        ));
        ok(tl(None, umask, &dir, cwd, &["heartbeat", "--agent", "a"]));
        ok(tl(
            None,
            umask,
            &dir,
            cwd,
            &["release", "k", "--agent", "a"],
        ));
        ok(tl(None, umask, &dir, cwd, &["inbox", "--agent", "b"]));
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(
            meta.mode() & 0o7777,
            0o700,
            "umask {umask}: the lock directory"
        );
        let entries = walk(&dir);
        for name in [
            "audit.jsonl",
            ".guard",
            "counter",
            "notes",
            "inbox",
            "freezes",
            "agents",
        ] {
            assert!(
                entries.iter().any(|e| e.0.file_name().unwrap() == name),
                "umask {umask}: no {name} in {entries:?}"
            );
        }
        for (path, is_dir, mode, _) in &entries {
            let want = if *is_dir { 0o700 } else { 0o600 };
            assert_eq!(*mode, want, "umask {umask}: {} is {mode:o}", path.display());
        }
    }
    // Another user can read none of it, even with the directory opened up above it.
    for f in ["audit.jsonl", "notes/k.jsonl"] {
        let out = user.command("cat").arg(dir.join(f)).output().unwrap();
        assert!(!out.status.success(), "{f} was readable by another user");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let doctor = tl(None, "022", &dir, cwd, &["doctor", "--json"]).json();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "sharing")
        .cloned()
        .expect("a sharing check");
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("private"),
        "{check}"
    );
    // An older tasklock's world-readable audit log: left alone, and doctor says so.
    chmod(&dir.join("audit.jsonl"), 0o644);
    ok(tl(
        None,
        "022",
        &dir,
        cwd,
        &["checkout", "k2", "--agent", "a"],
    ));
    assert_eq!(
        std::fs::metadata(dir.join("audit.jsonl")).unwrap().mode() & 0o777,
        0o644
    );
    let r = tl(None, "022", &dir, cwd, &["doctor"]);
    assert!(r.stdout.contains("audit.jsonl (0644)"), "{}", r.text());
    assert!(r.stdout.contains("chmod go-rwx"), "{}", r.text());
}

#[test]
fn a_shared_lock_directory_is_usable_by_every_member_and_shows_who_wrote_what() {
    let Some(user) = TestUser::create_or_skip("tl-s", true) else {
        return;
    };
    let (group, gid) = user.group.clone().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let dir = tmp.path().join(".locks");
    let cwd = tmp.path();
    let member = Some((&user, Some(gid)));

    let init = ok(tl(None, "022", &dir, cwd, &["init", "--shared", &group]));
    assert!(
        init.stdout.contains(&format!("shared with group {group}")),
        "{}",
        init.text()
    );
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o2770);
    assert_eq!(meta.gid(), gid);

    // Root and the member, both under umask 022, in one lock directory.
    ok(tl(
        None,
        "022",
        &dir,
        cwd,
        &["checkout", "k1", "--agent", "root-agent"],
    ));
    ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["checkout", "k2", "--agent", "user-agent"],
    ));
    let q = tl(
        member,
        "022",
        &dir,
        cwd,
        &["checkout", "k1", "--queue", "--agent", "user-agent"],
    );
    assert_eq!(q.code, 2, "{}", q.text());
    ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["note", "k2", "halfway", "--agent", "user-agent"],
    ));

    // Root sees who wrote each record and who waits.
    let list = ok(tl(None, "022", &dir, cwd, &["list"]));
    assert!(
        list.stdout
            .contains(&format!("user-agent (user {})", user.name)),
        "{}",
        list.text()
    );
    assert!(!list.stdout.contains("root-agent (user"), "{}", list.text());
    let json = ok(tl(None, "022", &dir, cwd, &["list", "--json"])).json();
    let by_key = |k: &str| {
        json["checkouts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["key"] == k)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_key("k2")["agent"]["user"]["name"], user.name.as_str());
    assert_eq!(by_key("k2")["agent"]["user"]["uid"], user.uid);
    assert_eq!(by_key("k1")["agent"]["user"]["name"], "root");
    assert_eq!(
        json["queues"]["k1"]["waiter_users"][0]["name"],
        user.name.as_str()
    );
    let status = ok(tl(None, "022", &dir, cwd, &["status", "k1"]));
    assert!(
        status
            .stdout
            .contains(&format!("next: user-agent (user {})", user.name)),
        "{}",
        status.text()
    );
    // The member sees root's.
    let theirs = ok(tl(member, "022", &dir, cwd, &["status", "k1"]));
    assert!(
        theirs.stdout.contains("held by root-agent (user root)"),
        "{}",
        theirs.text()
    );

    // Root's release reserves k1 for the member and leaves a message root wrote.
    ok(tl(
        None,
        "022",
        &dir,
        cwd,
        &["release", "k1", "--agent", "root-agent"],
    ));
    let inbox = ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["inbox", "--agent", "user-agent"],
    ));
    assert!(inbox.stdout.contains("reserved"), "{}", inbox.text());
    assert!(inbox.stdout.contains("(user root)"), "{}", inbox.text());
    ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["checkout", "k1", "--agent", "user-agent"],
    ));
    ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["release", "k1", "--agent", "user-agent"],
    ));
    ok(tl(
        member,
        "022",
        &dir,
        cwd,
        &["release", "k2", "--agent", "user-agent"],
    ));
    ok(tl(
        None,
        "022",
        &dir,
        cwd,
        &["checkout", "k2", "--agent", "root-agent"],
    ));
    ok(tl(
        None,
        "022",
        &dir,
        cwd,
        &["release", "k2", "--agent", "root-agent"],
    ));

    // Everything is the group's and usable by it, whoever made it.
    let entries = walk(&dir);
    for name in [
        ".guard",
        "counter",
        "audit.jsonl",
        "config.yaml",
        "keys",
        "queues",
        "inbox",
        "notes",
    ] {
        assert!(
            entries.iter().any(|e| e.0.file_name().unwrap() == name),
            "no {name} in {entries:?}"
        );
    }
    for (path, is_dir, mode, g) in &entries {
        let want = if *is_dir { 0o2770 } else { 0o660 };
        assert_eq!(*mode, want, "{} is {mode:o}", path.display());
        assert_eq!(*g, gid, "{} has group {g}", path.display());
    }
    let doctor = ok(tl(member, "022", &dir, cwd, &["doctor"]));
    assert!(
        doctor
            .stdout
            .contains(&format!("shared with group {group}")),
        "{}",
        doctor.text()
    );
    // A .guard the group cannot write (as an older tasklock made it): doctor says so.
    chmod(&dir.join(".guard"), 0o644);
    let doctor = tl(None, "022", &dir, cwd, &["doctor"]);
    assert!(doctor.stdout.contains(".guard (0644)"), "{}", doctor.text());
    assert!(
        doctor.stdout.contains("not usable by every member"),
        "{}",
        doctor.text()
    );
}

#[test]
fn init_shared_with_an_unknown_group_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".locks");
    let r = tl(
        None,
        "022",
        &dir,
        tmp.path(),
        &["init", "--shared", "no-such-group-tl"],
    );
    assert_eq!(r.code, 64, "{}", r.text());
    assert!(r.stderr.contains("no-such-group-tl"), "{}", r.text());
    assert!(!dir.exists());
}

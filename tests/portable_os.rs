//! The liveness, wait, queue and death-release suites again, with every command running
//! the OS layer that macOS runs (src/os/portable.rs: the `sysinfo` crate for processes,
//! polling for directory changes) instead of Linux's (`common::portable_os` is true in
//! this target). Built on Linux with the `portable-os` feature (`--all-features`); on
//! other systems the portable layer is the only one and every suite runs on it anyway.
#![allow(clippy::duplicate_mod)]

#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[macro_use]
mod common;

#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[path = "handover.rs"]
mod handover;
#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[path = "liveness.rs"]
mod liveness;
#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[path = "queue.rs"]
mod queue;
#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[path = "queue_paths.rs"]
mod queue_paths;

/// The switch works: a checkout made with a registered process records that process's
/// start the portable way (milliseconds since 1970, not Linux's clock ticks) and no pid
/// namespace.
#[cfg(any(feature = "portable-os", not(target_os = "linux")))]
#[test]
fn commands_here_run_the_portable_os_layer() {
    use common::*;
    use serde_json::Value;
    let e = Env::new();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    e.ok("a", &["heartbeat", "--pid", &sleeper.id().to_string()]);
    let j = e.ok("a", &["checkout", "k", "--json"]).json();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(j["checkout"]["agent"]["pid"], sleeper.id(), "{j}");
    let record = Stored::Record("k").read(&e.dir());
    let start = record["agent"]["pid_start"].as_u64().expect("a start time");
    assert!(start >= 1_000_000_000_000, "epoch milliseconds: {record}");
    assert!(
        record["agent"].get("pid_ns").is_none_or(Value::is_null),
        "{record}"
    );
}

#[cfg(all(target_os = "linux", not(feature = "portable-os")))]
#[test]
fn portable_os_suites_run_with_the_feature() {
    assert!(
        std::env::var_os("CI").is_none(),
        "tests/portable_os.rs: build with --features portable-os (or --all-features) to run the suites on the portable OS layer"
    );
}

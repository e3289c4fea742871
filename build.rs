//! One build-time switch for the tests: `TASKLOCK_TEST_PG_URL` set when building (with the
//! `postgres` feature) turns on the `tests/pg.rs` suites (the behaviour-defining tests
//! again, against PostgreSQL); without it that target is one test saying how to run them.
//! Nothing else is built differently. A build for native Windows stops here, pointing to
//! WSL.
fn main() {
    // Native Windows is not supported: stop here with one clear message instead of the
    // wall of errors the Unix-only code below would give.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("windows") {
        eprintln!(
            "error: tasklock does not run on native Windows yet. Use it inside WSL \
             (https://learn.microsoft.com/windows/wsl/install), where it builds and runs as on Linux."
        );
        std::process::exit(1);
    }
    println!("cargo::rustc-check-cfg=cfg(tasklock_pg_tests)");
    println!("cargo::rerun-if-env-changed=TASKLOCK_TEST_PG_URL");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("TASKLOCK_TEST_PG_URL").is_some_and(|v| !v.is_empty())
        && std::env::var_os("CARGO_FEATURE_POSTGRES").is_some()
    {
        println!("cargo::rustc-cfg=tasklock_pg_tests");
    }
}

//! One build-time switch for the tests: `TASKLOCK_TEST_PG_URL` set when building (with the
//! `postgres` feature) turns on the `tests/pg.rs` suites (the behaviour-defining tests
//! again, against PostgreSQL); without it that target is one test saying how to run them.
//! Nothing else is built differently.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(tasklock_pg_tests)");
    println!("cargo::rerun-if-env-changed=TASKLOCK_TEST_PG_URL");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("TASKLOCK_TEST_PG_URL").is_some_and(|v| !v.is_empty())
        && std::env::var_os("CARGO_FEATURE_POSTGRES").is_some()
    {
        println!("cargo::rustc-cfg=tasklock_pg_tests");
    }
}

//! The behaviour-defining suites again, against the PostgreSQL store: the same test
//! files, included here, with every command pointed at a schema of its own
//! (`common::on_postgres` is true in this target), plus the tests only PostgreSQL has.
//!
//! Built when `TASKLOCK_TEST_PG_URL` is set (see build.rs; `.ci/run` starts a throwaway
//! server and sets it). Without it this target is one test, which fails under `CI`.
//!
//! Each included file declares `mod common;` itself, so `common` is compiled once per
//! included file here: intended (clippy's duplicate_mod is allowed for that).
#![allow(clippy::duplicate_mod)]

#[cfg(tasklock_pg_tests)]
#[macro_use]
mod common;

#[cfg(tasklock_pg_tests)]
#[path = "agents.rs"]
mod agents;
#[cfg(tasklock_pg_tests)]
#[path = "backlog.rs"]
mod backlog;
#[cfg(tasklock_pg_tests)]
#[path = "commit_guard.rs"]
mod commit_guard;
#[cfg(tasklock_pg_tests)]
#[path = "concurrency.rs"]
mod concurrency;
#[cfg(tasklock_pg_tests)]
#[path = "edit_hook.rs"]
mod edit_hook;
#[cfg(tasklock_pg_tests)]
#[path = "liveness.rs"]
mod liveness;
#[cfg(tasklock_pg_tests)]
#[path = "merge_queue.rs"]
mod merge_queue;
#[cfg(tasklock_pg_tests)]
#[path = "mixed_race.rs"]
mod mixed_race;
#[cfg(tasklock_pg_tests)]
#[path = "ops.rs"]
mod ops;
#[cfg(tasklock_pg_tests)]
#[path = "orchestrate.rs"]
mod orchestrate;
#[cfg(tasklock_pg_tests)]
#[path = "own_edits.rs"]
mod own_edits;
#[cfg(tasklock_pg_tests)]
#[path = "ownership.rs"]
mod ownership;
#[cfg(tasklock_pg_tests)]
#[path = "path_checkouts.rs"]
mod path_checkouts;
#[cfg(tasklock_pg_tests)]
#[path = "queue.rs"]
mod queue;
#[cfg(tasklock_pg_tests)]
#[path = "queue_paths.rs"]
mod queue_paths;
#[cfg(tasklock_pg_tests)]
#[path = "slots.rs"]
mod slots;
#[cfg(tasklock_pg_tests)]
#[path = "subagents.rs"]
mod subagents;
#[cfg(tasklock_pg_tests)]
#[path = "top.rs"]
mod top;
#[cfg(tasklock_pg_tests)]
#[path = "ui.rs"]
mod ui;
#[cfg(tasklock_pg_tests)]
#[path = "waits.rs"]
mod waits;
#[cfg(tasklock_pg_tests)]
#[path = "wake.rs"]
mod wake;
#[cfg(tasklock_pg_tests)]
#[path = "why_agrees.rs"]
mod why_agrees;
#[cfg(tasklock_pg_tests)]
#[path = "worktrees.rs"]
mod worktrees;

#[cfg(tasklock_pg_tests)]
#[path = "pg/pg_only.rs"]
mod pg_only;
#[cfg(tasklock_pg_tests)]
#[path = "pg/pgbouncer.rs"]
mod pgbouncer;

/// Outside CI the PostgreSQL suites are optional (they need a server); in CI
/// (`CI=true`, as `.ci/run` runs) they must not be skipped silently.
#[cfg(not(tasklock_pg_tests))]
#[test]
fn postgres_suites_run_in_ci() {
    assert!(
        std::env::var_os("CI").is_none(),
        "tests/pg.rs: not built against PostgreSQL; build with --features postgres (or --all-features) and TASKLOCK_TEST_PG_URL=postgres://… set (or run .ci/run) to run the suites on it"
    );
}

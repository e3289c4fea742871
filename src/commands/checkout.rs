//! `checkout KEY` and `run`'s checkout: arguments in, the engine's [`attempt`] under the
//! store's scope, a report out.

use std::time::Duration;

use crate::engine::Ctx;
use crate::engine::bind::bind_to;
pub use crate::engine::take::{
    Join, Request, Want, attempt, check_text, overlap_detail, with_registered_pid,
    with_registered_pid_kept,
};
use crate::error::Result;
use crate::report::Report;

pub fn run(
    ctx: &Ctx,
    key: &str,
    want: Want,
    timeout: Option<Duration>,
    reason: Option<String>,
    join: Join,
) -> Result<Report> {
    crate::key::validate(key)?;
    let mut req = Request::new(ctx, timeout, reason, None)?.registering(want.pid)?;
    req.paths = want.paths;
    req.slots = want.slots;
    let store = ctx.open_store()?;
    let work = |guard: &crate::store::Guard| {
        let req = with_registered_pid(ctx, &*store, guard, req.clone())?;
        attempt(ctx, &*store, guard, &req, key, join).map(Report::Checkout)
    };
    let r = if req.paths.is_empty() {
        // A key alone: beside checkouts of other keys (escalated if it turns out to
        // touch more: a queue, another key's checkout).
        let locks = crate::engine::key_locks(&[key.to_string()], &req.agent.id);
        crate::engine::transaction_scoped(&*store, &locks, work)
    } else {
        store.transaction(work)
    };
    crate::engine::take::audited(ctx, &*store, &req, r)
}

/// `run` checks out on behalf of its own process.
pub fn run_as(
    ctx: &Ctx,
    key: &str,
    slots: Option<u32>,
    timeout: Option<Duration>,
    reason: Option<String>,
    pid: u32,
) -> Result<Report> {
    crate::key::validate(key)?;
    let mut req = Request::new(ctx, timeout, reason, Some(pid))?;
    req.slots = slots;
    let store = ctx.open_store()?;
    let locks = crate::engine::key_locks(&[key.to_string()], &req.agent.id);
    crate::engine::transaction_scoped(&*store, &locks, |guard| {
        // The registered name applies; the process to watch is this one.
        let mut req = with_registered_pid(ctx, &*store, guard, req.clone())?;
        bind_to(ctx, &*store, key, &mut req, pid)?;
        attempt(ctx, &*store, guard, &req, key, Join::No).map(Report::Checkout)
    })
}

/// `checkout`: one key (or paths alone), `--queue`, `--wait`, or `--any` over several.
pub fn execute(ctx: &Ctx, a: crate::cli::CheckoutArgs) -> Result<Report> {
    use crate::error::Error;
    use crate::key;
    if a.next {
        return super::claim::next(ctx, a.timeout, a.reason, a.pid);
    }
    let mut keys = a.keys;
    let wait = super::wait_or_key(&mut keys, a.wait)?;
    let worktree = if wait.is_some() || !a.paths.is_empty() {
        a.worktree
    } else {
        worktree_or_key(&mut keys, a.worktree)
    };
    let paths = crate::engine::paths::resolve(ctx, &a.paths)?;
    if keys.is_empty() && !paths.is_empty() {
        keys.push(key::for_paths(&paths)?);
    }
    if keys.is_empty() {
        return Err(super::missing_key());
    }
    if paths.is_empty()
        && let Some(k) = keys.iter().find(|k| k.starts_with(key::PATH_KEY_PREFIX))
    {
        return Err(Error::Usage(format!(
            "`{k}` names a checkout of paths; take paths with `tasklock checkout --path PATTERN`"
        )));
    }
    if a.any {
        return super::claim::any(ctx, &keys, a.timeout, a.reason, a.pid);
    }
    let [key] = keys.as_slice() else {
        return Err(Error::Usage(
            "checkout takes one KEY; to take the first free of several, use --any".into(),
        ));
    };
    let want = Want {
        paths,
        slots: a.slots,
        pid: a.pid,
    };
    let report = match wait {
        Some(dur) => super::wait::run(ctx, key, want, a.timeout, a.reason, dur)?,
        None => {
            let join = if a.queue { Join::Queue } else { Join::No };
            run(ctx, key, want, a.timeout, a.reason, join)?
        }
    };
    match worktree {
        Some(path) => super::worktrees::after_grant(ctx, report, path),
        None => Ok(report),
    }
}

/// `--worktree` takes an optional path, so in `checkout --worktree KEY` the parser gives
/// it the key: with no key besides, that value is the key and the worktree goes to its
/// configured place.
fn worktree_or_key(
    keys: &mut Vec<String>,
    worktree: Option<Option<std::path::PathBuf>>,
) -> Option<Option<std::path::PathBuf>> {
    match worktree {
        Some(Some(p)) if keys.is_empty() => {
            keys.push(p.to_string_lossy().into_owned());
            Some(None)
        }
        w => w,
    }
}

//! `checkout KEY` and `run`'s checkout: arguments in, the engine's [`attempt`] under the
//! store's scope, a report out.

use std::time::Duration;

use crate::engine::Ctx;
pub use crate::engine::take::{
    Join, Request, Want, attempt, check_text, overlap_detail, with_registered_pid,
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
    let mut req = Request::new(ctx, timeout, reason, None)?;
    req.paths = want.paths;
    req.slots = want.slots;
    let store = ctx.open_store()?;
    store.transaction(|guard| {
        let req = with_registered_pid(&*store, guard, req)?;
        attempt(ctx, &*store, guard, &req, key, join).map(Report::Checkout)
    })
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
    store.transaction(|guard| {
        // The registered name applies; the process to watch stays this one.
        let mut req = with_registered_pid(&*store, guard, req)?;
        req.agent.pid = Some(pid);
        req.agent.pid_start = crate::os::start_time(pid);
        attempt(ctx, &*store, guard, &req, key, Join::No).map(Report::Checkout)
    })
}

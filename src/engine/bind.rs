//! Which process a checkout taken for a running process (`run`'s, a `--wait` of the
//! agent's own process) ends with: decided under the scope that takes the key.

use super::Ctx;
use super::take::Request;
use crate::error::Result;
use crate::store::{Slot, Store};

/// `run`'s checkout ends when process `pid` (`run` itself) dies; but a checkout the agent
/// holds already is not `run`'s: it keeps the process it is bound to (and `run` leaves it
/// held when the command ends). One that has ended (its lease over, its process gone: a
/// killed `run`'s) is ended by the checkout, and the new one is `run`'s. Decided under
/// the scope that takes the key.
pub fn bind_to(ctx: &Ctx, store: &dyn Store, key: &str, req: &mut Request, pid: u32) -> Result<()> {
    let mut judge = super::Judge::new(ctx, store);
    match super::slots::read_mine(store, key, &req.agent.id)? {
        Slot::Held(r) if r.held_by(&req.agent.id) && judge.own_end(&r)?.is_none() => {
            req.agent.pid = r.agent.pid;
            req.agent.pid_start = r.agent.pid_start;
        }
        _ => {
            req.agent.pid = Some(pid);
            req.agent.pid_start = crate::os::start_time(pid);
        }
    }
    Ok(())
}

//! Worktrees tied to checkouts: `checkout --worktree`'s worktree made once the checkout
//! is granted, those of the checkouts `release` ends removed when that loses nothing,
//! and `tasklock worktrees [--clean]`. The git work is the engine's
//! ([`crate::engine::worktree`]); this puts it around the commands.

use std::path::{Path, PathBuf};

use crate::engine::worktree::{self, Plan};
use crate::engine::{Ctx, Judge, scan_reaping};
use crate::error::{Error, Outcome, Result};
use crate::report::{CheckoutView, KeyResult, Report, WorktreeEnd, WorktreeRow, WorktreesReport};
use crate::store::{Slot, Worktree};

/// After `checkout KEY --worktree [PATH]`: a checkout granted (or held already) gets its
/// worktree, made and then recorded with it; any other outcome makes nothing. When the
/// worktree cannot be made, a checkout granted by this command is given back and the
/// command fails ([`Error::Worktree`], exit 64); one held before stays held.
pub fn after_grant(ctx: &Ctx, report: Report, path: Option<PathBuf>) -> Result<Report> {
    let Report::Checkout(mut r) = report else {
        return Ok(report);
    };
    let (Outcome::Granted | Outcome::AlreadyHeld, Some(c)) = (r.outcome, r.checkout.clone()) else {
        return Ok(Report::Checkout(r));
    };
    let made = plan_for(ctx, &r.key, c.worktree.as_ref(), path.as_deref())
        .and_then(|p| worktree::create(&p, &r.key).map(|m| (p, m)));
    let (plan, made) = match made {
        Ok(ok) => ok,
        Err(e) if r.outcome == Outcome::Granted => {
            worktree::give_back(ctx, &r.key, c.token, &e.to_string())?;
            return Err(match e {
                Error::Worktree(m) => {
                    Error::Worktree(format!("{m}. The checkout of `{}` was given back.", r.key))
                }
                e => e,
            });
        }
        Err(e) => return Err(e),
    };
    if !worktree::record(ctx, &r.key, c.token, &plan.worktree)? {
        return Err(Error::Worktree(format!(
            "the checkout of `{}` ended before its worktree {} was recorded; the worktree stays (see `tasklock worktrees`)",
            r.key, plan.worktree.path
        )));
    }
    if let Some(view) = r.checkout.as_mut() {
        view.worktree = Some(plan.worktree);
    }
    r.worktree = Some(made);
    Ok(Report::Checkout(r))
}

/// Where the worktree goes: the one recorded with the checkout (a re-checkout), else
/// PATH or the configured place.
fn plan_for(
    ctx: &Ctx,
    key: &str,
    recorded: Option<&Worktree>,
    path: Option<&Path>,
) -> Result<Plan> {
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    match recorded {
        Some(w) => {
            if let Some(p) = path
                && worktree::plan(&ctx.config()?.worktrees, &cwd, key, Some(p))?
                    .worktree
                    .path
                    != w.path
            {
                return Err(Error::Worktree(format!(
                    "your checkout of `{key}` has its worktree at {} already",
                    w.path
                )));
            }
            Ok(Plan {
                worktree: w.clone(),
                ignore_dir: None,
            })
        }
        None => worktree::plan(&ctx.config()?.worktrees, &cwd, key, path),
    }
}

/// The worktrees of the checkouts a `release` ended (released, force-released, or its
/// lease found lost): each removed if that loses nothing, else kept and said why. The
/// release itself stands whatever happens here.
pub fn after_release(results: &[KeyResult]) -> Vec<WorktreeEnd> {
    results
        .iter()
        .filter(|k| {
            matches!(
                k.outcome,
                Outcome::Released | Outcome::ForceReleased | Outcome::LeaseLost
            )
        })
        .filter_map(|k| Some((k.key.as_str(), k.checkout.as_ref()?.worktree.as_ref()?)))
        .map(|(key, w)| worktree::remove_if_safe(key, w))
        .collect()
}

/// Every worktree tasklock made that is known here: those recorded with checkouts (any
/// repository), and those git's marks find in the repository of the working directory,
/// whose checkout has ended (or never recorded it). With their state.
/// With `reap`, checkouts that may be ended are ended on the way (as `list` does);
/// without (`doctor`), the records are read as they are.
pub fn rows(ctx: &Ctx, reap: bool) -> Result<(Option<String>, Vec<WorktreeRow>)> {
    let mut rows: Vec<WorktreeRow> = Vec::new();
    if let Some(store) = ctx.existing_store()? {
        let slots = if reap {
            let mut judge = Judge::new(ctx, &*store);
            let me = ctx.agent_id().ok();
            scan_reaping(ctx, &*store, &mut judge, me.as_deref())?.0
        } else {
            store.scan()?
        };
        for r in slots.into_iter().filter_map(Slot::held) {
            if let Some(w) = &r.worktree {
                rows.push(WorktreeRow {
                    key: r.key.clone(),
                    worktree: w.clone(),
                    state: worktree::state_or_unknown(w),
                    checkout: Some(CheckoutView::from(&r)),
                });
            }
        }
    }
    let repo = std::env::current_dir()
        .ok()
        .and_then(|d| crate::discover::main_worktree_root(&d))
        .map(|r| r.canonicalize().unwrap_or(r));
    if let Some(repo) = &repo {
        for f in worktree::registry(repo)? {
            let known = rows.iter().any(|r| {
                r.worktree.repo == f.worktree.repo && r.worktree.branch == f.worktree.branch
            });
            if !known {
                rows.push(WorktreeRow {
                    key: f.key,
                    state: worktree::state_or_unknown(&f.worktree),
                    worktree: f.worktree,
                    checkout: None,
                });
            }
        }
    }
    rows.sort_by(|a, b| (&a.key, &a.worktree.path).cmp(&(&b.key, &b.worktree.path)));
    Ok((repo.map(|r| r.to_string_lossy().into_owned()), rows))
}

/// `worktrees [--clean]`.
pub fn execute(ctx: &Ctx, a: crate::cli::WorktreesArgs) -> Result<Report> {
    let cleaned = if a.clean {
        let (_, before) = rows(ctx, true)?;
        Some(
            before
                .iter()
                .filter(|r| r.checkout.is_none())
                .map(|r| worktree::remove_if_safe(&r.key, &r.worktree))
                .collect(),
        )
    } else {
        None
    };
    let (repo, worktrees) = rows(ctx, true)?;
    Ok(Report::Worktrees(WorktreesReport {
        command: "worktrees",
        now: ctx.now(),
        repo,
        worktrees,
        cleaned,
    }))
}

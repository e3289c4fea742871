//! Claims on Claude Code's task list: a `TaskUpdate` that takes a task (sets its owner,
//! or the status `in_progress`) is a checkout of `task:LIST/ID` by the agent calling it,
//! made by the PreToolUse hook before Claude Code writes the task. Held by another live
//! agent, the update is denied and the model reads who holds it; the holder's own updates
//! pass. Completing the task (the `completed` status, the `TaskCompleted` hook) releases
//! it `--done`; giving it up (no owner, `pending`, `deleted`) releases it. A dead
//! holder's checkout ends as any other does, so the next claim is granted.
//! Claude Code's task rules live in `clients::claude_tasks`, the checkout's in the
//! engine: this module only joins them.

use serde_json::{Value, json};

use super::checkout::{self, Join};
use crate::clients::claude_tasks::{self as tasks, Change, Led, Teammate};
use crate::engine::Ctx;
use crate::error::Result;
use crate::report::{CheckoutReport, Report};

/// Who calls the hook, as Claude Code's task list knows it.
pub struct Caller<'a> {
    pub session: &'a str,
    /// A subagent (or a teammate inside the lead's process) calls.
    pub subagent: bool,
    /// The teammate the calling process is (one in a pane of its own).
    pub mate: Option<Teammate>,
}

impl Caller<'_> {
    /// The team the session leads, unless the caller is a teammate.
    fn led(&self) -> Option<Led> {
        match &self.mate {
            Some(_) => None,
            None => tasks::led_team(self.session),
        }
    }

    /// The caller's name in its team: a pane teammate's, or the lead's own (not a
    /// subagent's or an in-process teammate's: they carry no name Claude Code's owner
    /// field would hold).
    fn own_name(&self, led: Option<&Led>) -> Option<String> {
        match &self.mate {
            Some(m) => Some(m.name.clone()),
            None if !self.subagent => led.and_then(|l| l.lead.clone()),
            None => None,
        }
    }

    fn key(&self, payload: &Value, led: Option<&Led>, task: &str) -> String {
        let list = tasks::list_id(payload, self.session, self.mate.as_ref(), led);
        tasks::key(&list, task)
    }
}

/// PreToolUse of `TaskUpdate`: the hook's output (a deny), none to let it through.
pub fn pre_tool_use(ctx: &Ctx, caller: &Caller, payload: &Value) -> Result<Option<String>> {
    let led = caller.led();
    let own = caller.own_name(led.as_ref());
    let Some(update) = tasks::update(payload, own.as_deref()) else {
        return Ok(None);
    };
    let key = caller.key(payload, led.as_ref(), &update.task);
    match update.change {
        Change::Claim => claim(ctx, &key, &update.task),
        Change::Done => release_own(ctx, &key, &update.task, true),
        Change::Drop => release_own(ctx, &key, &update.task, false),
        Change::Assign(_) | Change::Other => Ok(None),
    }
}

/// `TaskCompleted`: the task is done; the caller's checkout of it ends `--done`.
pub fn completed(ctx: &Ctx, caller: &Caller, payload: &Value) -> Result<Option<String>> {
    let task = match &payload["task_id"] {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Ok(None),
    };
    let led = caller.led();
    let key = caller.key(payload, led.as_ref(), &task);
    release_own(ctx, &key, &task, true)
}

/// Check the task out for the caller; refused, the deny that names the holder.
fn claim(ctx: &Ctx, key: &str, task: &str) -> Result<Option<String>> {
    let Report::Checkout(r) = checkout::run(
        ctx,
        key,
        checkout::Want {
            paths: Vec::new(),
            slots: None,
            pid: None,
        },
        None,
        Some(format!("claimed task #{task} in Claude Code's task list")),
        Join::No,
    )?
    else {
        unreachable!("checkout returns a checkout report")
    };
    if r.outcome.exit_code() == 0 {
        return Ok(None);
    }
    Ok(Some(deny(&r, task)))
}

/// The deny of a claim refused: the holder named for the model and for programs.
fn deny(r: &CheckoutReport, task: &str) -> String {
    let outcome = serde_json::to_value(r.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let (who, holder) = match &r.checkout {
        Some(c) => (
            format!("`{}` holds it (as `{}`)", c.agent.label(), r.key),
            json!({
                "agent": c.agent.id,
                "name": c.agent.name,
                "token": c.token,
                "until": c.expires_at,
            }),
        ),
        None => (
            format!("its checkout `{}` was refused ({outcome})", r.key),
            Value::Null,
        ),
    };
    let reason = format!(
        "tasklock: task #{task} is already claimed: {who}. Do not work on it and do not change its owner: pick another task from TaskList. Never retry this update in a loop."
    );
    super::edit_gate::deny_text(
        &reason,
        Some(json!({ "key": r.key, "task": task, "outcome": outcome, "holder": holder })),
    )
}

/// Release the caller's checkout of `key`, if it holds one (`--done` when the task was
/// completed, with a note saying so): another agent's is not the caller's to end, and a
/// task never claimed has none.
fn release_own(ctx: &Ctx, key: &str, task: &str, done: bool) -> Result<Option<String>> {
    let me = ctx.agent_id()?;
    let held = match ctx.existing_store()? {
        Some(store) => store.read(key)?.as_held().is_some_and(|r| r.held_by(&me)),
        None => false,
    };
    if held {
        let note = match done {
            true => format!("task #{task} completed in Claude Code's task list"),
            false => format!("task #{task} given up in Claude Code's task list"),
        };
        super::release::run(ctx, vec![key.to_string()], false, false, done, Some(note))?;
    }
    Ok(None)
}

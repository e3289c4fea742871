use crate::engine::Ctx;
use crate::error::Result;
use crate::report::{InboxReport, Report};
use crate::store::Message;

/// This agent's unread messages, oldest first; marked read unless `peek`.
pub fn run(ctx: &Ctx, peek: bool) -> Result<Report> {
    let me = ctx.agent_id()?;
    let mut messages = Vec::new();
    if let Some(store) = ctx.existing_store()? {
        // An agent bound to a secret reads its inbox only with it.
        let owner = store.read_agent(&me)?.and_then(|e| e.owner);
        if crate::secret::standing_for(&me, owner.as_ref()).refused() {
            let agent = ctx.agent()?;
            let standing = store.transaction(|g| {
                crate::engine::agent_refused(ctx, &*store, g, &agent, owner.as_ref(), "inbox")
            })?;
            return Err(crate::error::Error::SecretRefused {
                agent: me,
                wrong: standing == Some(crate::secret::Standing::WrongSecret),
            });
        }
        messages = take(&*store, &me, peek)?;
    }
    Ok(report(ctx, me, messages, peek))
}

/// As [`run`] without `peek`, for a hook right after the agent's beat, which has just
/// made the same check of its secret: one read of the registry fewer.
pub fn after_beat(ctx: &Ctx) -> Result<Report> {
    let me = ctx.agent_id()?;
    let messages = match ctx.existing_store()? {
        Some(store) => take(&*store, &me, false)?,
        None => Vec::new(),
    };
    Ok(report(ctx, me, messages, false))
}

/// The unread messages of `me`, marked read unless `peek`.
fn take(store: &dyn crate::store::Store, me: &str, peek: bool) -> Result<Vec<Message>> {
    let mut messages = Vec::new();
    for msg in store.unread(me)? {
        // With two readers at once, each message goes to exactly one of them.
        if peek || store.mark_read(me, &msg.id)? {
            messages.push(msg);
        }
    }
    Ok(messages)
}

fn report(ctx: &Ctx, me: String, messages: Vec<Message>, peek: bool) -> Report {
    Report::Inbox(InboxReport {
        command: "inbox",
        now: ctx.now,
        agent: me,
        messages,
        marked_read: !peek,
    })
}

/// `inbox [--peek]`.
pub fn execute(ctx: &Ctx, a: crate::cli::InboxArgs) -> Result<Report> {
    run(ctx, a.peek)
}

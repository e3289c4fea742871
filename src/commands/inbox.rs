use crate::engine::Ctx;
use crate::error::Result;
use crate::report::{InboxReport, Report};

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
        for msg in store.unread(&me)? {
            // With two readers at once, each message goes to exactly one of them.
            if peek || store.mark_read(&me, &msg.id)? {
                messages.push(msg);
            }
        }
    }
    Ok(Report::Inbox(InboxReport {
        command: "inbox",
        now: ctx.now,
        agent: me,
        messages,
        marked_read: !peek,
    }))
}

/// `inbox [--peek]`.
pub fn execute(ctx: &Ctx, a: crate::cli::InboxArgs) -> Result<Report> {
    run(ctx, a.peek)
}

use crate::engine::Ctx;
use crate::error::Result;
use crate::report::{InboxReport, Report};

/// This agent's unread messages, oldest first; marked read unless `peek`.
pub fn run(ctx: &Ctx, peek: bool) -> Result<Report> {
    let me = ctx.agent_id()?;
    let mut messages = Vec::new();
    if let Some(store) = ctx.existing_store()? {
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

//! An audit event in one sentence that says who did what to which key, for people
//! reading a list of them (`tasklock top`'s events and a key's history). Which field
//! names whom depends on the event (docs/file-format.md, "Audit log"): `by` is the
//! caller of a force-release but the maker of a freeze someone else ended, `holder` the
//! holder of a refused key or the receiver of a gift; the wording follows that table.

use crate::store::{AuditEvent, Event};

/// "alice (researcher) checked out issue-42 (token 1): fix the login",
/// "kate unfroze deploy://api-prod (set by ops)", "gina was refused ci-build: all 2
/// slots are taken (carol, …)". The text is the log's as it is: a screen draws it inert.
pub fn sentence(e: &AuditEvent) -> String {
    let who = crate::identity::label(&e.agent, e.name.as_deref(), None);
    let k = &e.key;
    let by = e.by.as_deref();
    let detail = e.detail.as_deref();
    let token = e.token.map(|t| format!(" (token {t})")).unwrap_or_default();
    let because = e
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    match e.kind() {
        Some(Event::Acquire) => format!("{who} checked out {k}{token}{}", slot(detail) + &because),
        Some(Event::Deny) => format!("{who} was refused {k}: {}", refusal(e)),
        Some(Event::Renew) => format!("{who} renewed {k}"),
        Some(Event::Release) => format!("{who} released {k}"),
        Some(Event::ForceRelease) => match by {
            Some(b) => format!("{b} force-released {k} from {who}{because}"),
            None => format!("{who} removed the record of {k}{}", paren(detail)),
        },
        Some(Event::AutoRelease) => auto_release(e, &who),
        Some(Event::Queue) => format!("{who} queued for {k}{}", paren(detail)),
        Some(Event::Dequeue) => {
            format!("{who} left the queue of {k}{}", paren(e.reason.as_deref()))
        }
        Some(Event::Handoff) => format!("{k} is reserved for {who}, next in its queue"),
        Some(Event::Lapse) => format!("{who} did not take {k} in time; it passed on"),
        Some(Event::Notify) => format!(
            "{who} was told of {k}: {}{}",
            detail.unwrap_or("a message"),
            by.map(|b| format!(" (by {b})")).unwrap_or_default()
        ),
        Some(Event::Push) => format!("{who}'s session, about {k}: {}", detail.unwrap_or("pushed")),
        Some(Event::Deadlock) if e.reason.as_deref() == Some("dropped") => {
            format!("{who} left the queue of {k}: a deadlock{}", paren(detail))
        }
        Some(Event::Deadlock) => format!("{who} was refused {k}: a deadlock{}", paren(detail)),
        Some(Event::Adopt) => format!("{who} adopted {k}{token}"),
        Some(Event::Give) => format!(
            "{who} gave {k} to {}{token}",
            e.holder.as_deref().unwrap_or("another agent")
        ),
        Some(Event::Freeze) => format!("{who} froze {k}{because}"),
        // `name` is copied from the freeze: its maker's, not the remover's.
        Some(Event::Unfreeze) => format!(
            "{} unfroze {k}{}",
            e.agent,
            by.map(|b| format!(" (set by {b})")).unwrap_or_default()
        ),
        Some(Event::Refused) => format!(
            "{} was refused acting for {who} on {k}{because}",
            by.unwrap_or("a caller")
        ),
        Some(Event::Slots) => format!("{who} changed the slots of {k}{}", paren(detail)),
        None => format!("{} {k} {who}{token}", e.event),
    }
}

fn paren(s: Option<&str>) -> String {
    s.map(|s| format!(" ({s})")).unwrap_or_default()
}

/// ", slot 2 of 2" from an acquire's detail.
fn slot(detail: Option<&str>) -> String {
    detail
        .filter(|d| d.starts_with("slot "))
        .map(|d| format!(", {d}"))
        .unwrap_or_default()
}

/// Why a checkout was refused: a freeze, a reservation, full slots (the first holder
/// is the one the log names), or a holder.
fn refusal(e: &AuditEvent) -> String {
    let holder = e.holder.as_deref();
    let detail = e.detail.as_deref().unwrap_or("");
    if e.reason.as_deref() == Some("frozen") {
        return if detail.is_empty() {
            "frozen".into()
        } else {
            detail.to_string()
        };
    }
    if detail.starts_with("checkout --any") || detail.starts_with("checkout --next") {
        return detail.to_string();
    }
    match holder {
        Some(h) if detail.starts_with("reserved") => format!("reserved for {h}"),
        Some(h) if detail.contains("slots") => format!("{detail} ({h}, …)"),
        Some(h) => format!("held by {h}"),
        None if !detail.is_empty() => detail.to_string(),
        None => "refused".into(),
    }
}

fn auto_release(e: &AuditEvent, who: &str) -> String {
    let k = &e.key;
    let why = match e.reason.as_deref() {
        Some("timeout") => format!("the lease of {who} on {k} ran out"),
        Some("agent_death") => format!("{who} died holding {k}"),
        Some("session_end") => format!("{who}'s session ended holding {k}"),
        Some("subagent_end") => format!("{who}, a subagent, stopped holding {k}"),
        Some(r) => format!("{k} of {who} ended ({r})"),
        None => format!("{k} of {who} ended"),
    };
    match e.by.as_deref() {
        Some(b) => format!("{why}; released by {b}"),
        None => format!("{why}; released"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, key: &str, agent: &str) -> AuditEvent {
        serde_json::from_value(serde_json::json!({
            "ts": "2026-01-01T00:00:00Z", "event": event, "key": key, "agent": agent
        }))
        .unwrap()
    }

    #[test]
    fn who_did_what() {
        let mut e = ev("unfreeze", "deploy://api-prod", "kate");
        e.by = Some("ops".into());
        e.name = Some("ops-bot".into());
        assert_eq!(sentence(&e), "kate unfroze deploy://api-prod (set by ops)");
        let mut e = ev("deny", "ci-build", "gina");
        e.holder = Some("erin".into());
        e.detail = Some("all 2 slots are taken".into());
        assert_eq!(
            sentence(&e),
            "gina was refused ci-build: all 2 slots are taken (erin, …)"
        );
        let mut e = ev("force_release", "k", "alice");
        e.by = Some("bob".into());
        e.token = Some(3);
        assert_eq!(sentence(&e), "bob force-released k from alice");
        let mut e = ev("acquire", "k", "alice");
        e.name = Some("researcher".into());
        e.token = Some(1);
        e.reason = Some("ship it".into());
        assert_eq!(
            sentence(&e),
            "alice (researcher) checked out k (token 1): ship it"
        );
    }
}

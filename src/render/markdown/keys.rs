//! `release`, `renew`, `leave`, `verify` and `note`: one result per key.

use super::*;

pub(super) fn keys(r: &KeysReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let releasing = r.command == KeysCommand::Release;
    if r.results.is_empty() {
        let _ = match r.command {
            KeysCommand::Leave => writeln!(out, "You wait in no queue; nothing to leave."),
            _ => writeln!(
                out,
                "You hold no checkouts; nothing to {}.",
                r.command.as_str()
            ),
        };
        return out;
    }
    let ok = r
        .results
        .iter()
        .filter(|k| k.outcome.exit_code() == 0)
        .count();
    let verdict = match (r.command, r.results.len()) {
        (_, 1) => single_verdict(&r.results[0], r),
        (KeysCommand::Release, n) => format!("Released {ok} of {n} checkouts."),
        (KeysCommand::Renew, n) => format!("Renewed {ok} of {n} checkouts."),
        (KeysCommand::Leave, n) => format!("Left {ok} of {n} queues."),
    };
    let _ = writeln!(out, "{verdict}");
    if r.results.len() > 1 || r.results[0].checkout.is_some() {
        out.push('\n');
    }
    if r.results.len() > 1 {
        out.push_str("| Key | Result | Token | Lease ends |\n|---|---|---|---|\n");
        for k in &r.results {
            let (token, ends) = match &k.checkout {
                Some(c) => (c.token.to_string(), with_relative(&c.expires_at, &r.now)),
                None => ("-".into(), "-".into()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {token} | {ends} |",
                code_cell(&k.key),
                outcome_words(k.outcome)
            );
        }
    } else if let Some(c) = &r.results[0].checkout {
        checkout_lines(&mut out, c, &r.now);
    }
    if let Some(n) = &r.note {
        let _ = writeln!(out, "- Note: {n}");
    }
    if !r.worktrees.is_empty() {
        if r.results.len() > 1 {
            out.push('\n');
        }
        worktree_end_lines(&mut out, &r.worktrees, inv);
    }
    for k in r.results.iter().filter(|k| k.outcome == Outcome::Corrupt) {
        let problem = k.problem.as_deref().unwrap_or_default();
        let fix = if newer_format(problem) {
            UPGRADE.to_string()
        } else {
            format!(
                "if nobody works on it, {} (audited).",
                inv.cmd("release --force", &k.key)
            )
        };
        let _ = writeln!(out, "\n{problem}\nFix: {fix}");
    }
    for k in r.results.iter().filter(|k| k.outcome == Outcome::NotHolder) {
        if let Some(problem) = &k.problem {
            let _ = writeln!(out, "\n{problem}");
        }
    }
    let next: &str = if r.results.iter().any(|k| k.outcome == Outcome::Frozen) {
        "Next: renewals are refused until the freeze ends; finish before your lease ends, or release and check out again after the freeze."
    } else if r.results.iter().any(|k| k.outcome == Outcome::LeaseLost) {
        "Next: a lost lease means another agent may have taken the key; check out again before doing more work on it, and re-check anything written after the lease ended."
    } else if r
        .results
        .iter()
        .any(|k| k.outcome == Outcome::SecretRefused)
    {
        SECRET_NEXT
    } else if let Some(k) = r
        .results
        .iter()
        .find(|k| k.outcome == Outcome::NotHolder && k.problem.is_some())
    {
        // A force that was refused: forcing again is not the way.
        &format!(
            "Next: ask a person to release it from a terminal, or queue for it: {}; do not retry in a loop.",
            inv.code_of(&Line::new("checkout").arg(&k.key).flag("--queue"))
        )
    } else if let Some(k) = r.results.iter().find(|k| k.outcome == Outcome::NotHolder) {
        &format!(
            "Next: only the holder can do this. A checkout whose holder is gone ends by itself; to take a live agent's checkout away, a person at a terminal (or a caller with the operator secret) runs {} (audited). Otherwise queue for it: {}.",
            inv.cmd("release --force", &k.key),
            inv.code_of(&Line::new("checkout").arg(&k.key).flag("--queue"))
        )
    } else if r.results.iter().any(|k| k.outcome == Outcome::NotQueued) {
        &format!(
            "Next: nothing to do for a queue you are not in; {} shows the queues.",
            inv.code("list")
        )
    } else if r
        .results
        .iter()
        .any(|k| k.outcome == Outcome::NoSuchCheckout)
    {
        &format!(
            "Next: nothing to do for a key nobody holds; {} shows what is held.",
            inv.code("list")
        )
    } else if releasing || r.command == KeysCommand::Leave {
        &format!(
            "Next: pick your next task with {}.",
            inv.code("checkout KEY")
        )
    } else {
        "Next: keep working; renew again before the lease ends."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

pub(super) fn single_verdict(k: &KeyResult, r: &KeysReport) -> String {
    let key = code(&k.key);
    match k.outcome {
        Outcome::Released => format!("Released {key}."),
        Outcome::ForceReleased => match &k.checkout {
            Some(c) => format!("Force-released {key} (was held by {}).", c.agent.label()),
            None => format!("Force-released {key}: removed the damaged record."),
        },
        Outcome::Renewed => match &k.checkout {
            Some(c) => format!(
                "Renewed {key} (token {}); lease ends {}.",
                c.token,
                with_relative(&c.expires_at, &r.now)
            ),
            None => format!("Renewed {key}."),
        },
        Outcome::LeaseLost => format!(
            "Lease lost: your checkout of {key} ran out {} and has been released; it was not {}.",
            k.checkout
                .as_ref()
                .map(|c| with_relative(&c.expires_at, &r.now))
                .unwrap_or_default(),
            if r.command == KeysCommand::Renew {
                "renewed"
            } else {
                "held any more"
            }
        ),
        Outcome::NoSuchCheckout => format!("No such checkout: nobody holds {key}."),
        Outcome::LeftQueue => format!("Left the queue of {key}."),
        Outcome::NotQueued => format!("Not queued: you are not in the queue of {key}."),
        Outcome::Frozen => match &k.frozen {
            Some(f) => format!(
                "Frozen: {key} {}; your lease was not extended (you keep the key until it ends).",
                freeze_words(f, &k.key, &r.now)
            ),
            None => format!("Frozen: {key} cannot be renewed now."),
        },
        Outcome::NotHolder => match &k.checkout {
            Some(c) => format!("Not the holder: {key} is held by {}.", c.agent.label()),
            None => format!("Not the holder of {key}."),
        },
        Outcome::SecretRefused => secret_refused_words(&key, k.checkout.as_ref()),
        other => format!("{key}: {}", outcome_words(other)),
    }
}

pub(super) fn verify(r: &VerifyReport) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    let line = match r.outcome {
        Outcome::Valid => format!("Valid: you hold {k} under token {}.", r.token),
        Outcome::StaleToken => format!(
            "Stale token: you hold {k}, but under token {}, not {}.",
            r.checkout.as_ref().map(|c| c.token).unwrap_or_default(),
            r.token
        ),
        Outcome::NotHolder => format!(
            "Not the holder: {k} is held by {}.",
            r.checkout
                .as_ref()
                .map(|c| c.agent.label())
                .unwrap_or_default()
        ),
        Outcome::LeaseLost => {
            format!("Lease lost: your checkout of {k} ran out and has been released.")
        }
        Outcome::SecretRefused => secret_refused_words(&k, r.checkout.as_ref()),
        _ => format!("No such checkout: nobody holds {k}."),
    };
    let _ = writeln!(out, "{line}");
    if let Some(c) = &r.checkout {
        out.push('\n');
        checkout_lines(&mut out, c, &r.now);
    }
    let next = if r.valid {
        "Next: go ahead with the irreversible step."
    } else if r.outcome == Outcome::SecretRefused {
        SECRET_NEXT
    } else {
        "Next: stop; do not push, deploy or publish for this key. Check it out again and redo the work from a known state."
    };
    let _ = writeln!(out, "\n{next}");
    out
}

pub(super) fn note(r: &NoteReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    match (r.outcome, &r.note) {
        (Outcome::Noted, Some(n)) => {
            let _ = writeln!(
                out,
                "Noted on {k} (token {}): {}",
                n.token.unwrap_or_default(),
                n.text
            );
            let _ = writeln!(
                out,
                "\nNext: notes stay after release; the next holder sees them in {}.",
                inv.without_agent().cmd("status", &r.key)
            );
        }
        (Outcome::NotHolder, _) => {
            let _ = writeln!(
                out,
                "Not the holder: {k} is held by {}; only its holder can add notes.",
                r.checkout
                    .as_ref()
                    .map(|c| c.agent.label())
                    .unwrap_or_default()
            );
        }
        (Outcome::LeaseLost, _) => {
            let _ = writeln!(
                out,
                "Lease lost: your checkout of {k} ran out and has been released; the note was not added."
            );
        }
        (Outcome::SecretRefused, _) => {
            let _ = writeln!(out, "{}", secret_refused_words(&k, r.checkout.as_ref()));
            let _ = writeln!(out, "\n{SECRET_NEXT}");
        }
        _ => {
            let _ = writeln!(
                out,
                "No such checkout: nobody holds {k}; check it out first."
            );
        }
    }
    out
}

pub(super) fn give(r: &GiveReport, inv: &Invocation) -> String {
    let mut out = String::new();
    let k = code(&r.key);
    let to = code(&r.to);
    let holder = r
        .checkout
        .as_ref()
        .map(|c| c.agent.label())
        .unwrap_or_default();
    match r.outcome {
        Outcome::Given => {
            let _ = writeln!(
                out,
                "Given: {k} is held by {to} now (token {}; yours was {}).",
                r.checkout.as_ref().map(|c| c.token).unwrap_or_default(),
                r.previous_token.unwrap_or_default()
            );
            if let Some(c) = &r.checkout {
                out.push('\n');
                checkout_lines(&mut out, c, &r.now);
            }
            dropped_lines(&mut out, &r.dropped);
            let _ = writeln!(
                out,
                "\nNext: stop working on {k}; it is not yours any more. {to} was told through its inbox."
            );
        }
        Outcome::NotHolder => {
            let _ = writeln!(
                out,
                "Not the holder: {k} is held by {holder}; only its holder can give it."
            );
        }
        Outcome::SecretRefused => {
            let _ = writeln!(out, "{}", secret_refused_words(&k, r.checkout.as_ref()));
            let _ = writeln!(out, "\n{SECRET_NEXT}");
        }
        Outcome::LeaseLost => {
            let _ = writeln!(
                out,
                "Lease lost: your checkout of {k} ran out and has been released; nothing was given."
            );
        }
        Outcome::Frozen => {
            let _ = writeln!(
                out,
                "Frozen: {k} is frozen, so it cannot change hands now; it is still yours."
            );
        }
        Outcome::UnknownAgent => {
            let _ = writeln!(
                out,
                "No such agent: {to} has never registered here; {k} is still yours."
            );
            let _ = writeln!(
                out,
                "\nNext: a session registers when it starts (its SessionStart hook); give again once {} lists it.",
                inv.without_agent().code("agents")
            );
        }
        Outcome::AgentDead => {
            let _ = writeln!(
                out,
                "Agent gone: {to} has ended or is dead, and a dead agent holds nothing; {k} is still yours."
            );
        }
        Outcome::ReceiverHolds => {
            let _ = writeln!(
                out,
                "Already a holder: {to} holds a slot of {k} already; your slot is still yours."
            );
        }
        Outcome::Deadlock => {
            let _ = writeln!(
                out,
                "Deadlock: {to} holding {k} would close a wait-for cycle: {}. {k} is still yours.",
                r.cycle.join(" → ")
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "No such checkout: nobody holds {k}; check it out first."
            );
        }
    }
    out
}

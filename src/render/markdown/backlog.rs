//! `checkout --next` when nothing was taken, and `backlog`.

use super::*;

/// Claimers named when nothing could be claimed.
const CLAIMERS_NAMED: usize = 10;

pub(super) fn next(r: &NextReport, inv: &Invocation) -> String {
    let mut out = String::new();
    // Spawn per task makes a claimer per claim: a few are named, the rest counted (the
    // JSON names them all).
    let claimers = match r.claimers.as_slice() {
        [] => String::new(),
        list => {
            let named: Vec<String> = list.iter().take(CLAIMERS_NAMED).map(|a| code(a)).collect();
            match list.len() - named.len() {
                0 => format!(", by {}", named.join(", ")),
                more => format!(", by {} and {more} other agents", named.join(", ")),
            }
        }
    };
    match r.outcome {
        Outcome::BacklogEmpty => {
            out.push_str("The backlog is empty: nothing to claim.\n");
            let _ = writeln!(
                out,
                "\nNext: add keys with {} (or {}), or stop here: every key of it is done.",
                inv.code("backlog add KEY…"),
                inv.code("backlog add --file FILE")
            );
            return out;
        }
        _ if r.refused.is_empty() => {
            let _ = writeln!(
                out,
                "Conflict: every key of the backlog is claimed ({} claimed{claimers}).",
                r.claimed
            );
        }
        Outcome::Frozen => {
            let _ = writeln!(
                out,
                "Frozen: every key of the backlog ready to claim is frozen ({} ready).",
                r.ready
            );
            out.push_str(&refusal_table(&r.refused, &r.now));
        }
        _ => {
            let ready = match r.refused.len() {
                1 => "the one key ready in the backlog cannot".to_string(),
                n => format!("none of the {n} keys ready in the backlog can"),
            };
            let _ = writeln!(
                out,
                "Conflict: {ready} be taken now ({} claimed{claimers}).",
                r.claimed
            );
            out.push_str(&refusal_table(&r.refused, &r.now));
        }
    }
    let _ = writeln!(
        out,
        "\nNext: work on something else and try {} again later; {} shows the claims.",
        inv.code("checkout --next"),
        inv.code("backlog")
    );
    out
}

pub(super) fn backlog(r: &BacklogReport, inv: &Invocation) -> String {
    let mut out = String::new();
    match (r.action, r.added, &r.removed) {
        (_, Some(n), _) => {
            let _ = writeln!(
                out,
                "Added {n} key{} to the backlog: {} ready, {} claimed.",
                if n == 1 { "" } else { "s" },
                r.ready,
                r.claimed
            );
        }
        (_, _, Some(gone)) if gone.is_empty() => {
            let _ = writeln!(
                out,
                "Removed nothing: none of the keys is in the backlog ({} ready, {} claimed).",
                r.ready, r.claimed
            );
        }
        (_, _, Some(gone)) => {
            let _ = writeln!(
                out,
                "Removed {} from the backlog: {} ready, {} claimed.",
                key_words(gone),
                r.ready,
                r.claimed
            );
        }
        _ if r.ready == 0 && r.claimed == 0 => {
            out.push_str("The backlog is empty.\n");
            let _ = writeln!(
                out,
                "\nNext: add keys with {}; agents claim them in order with {}.",
                inv.code("backlog add KEY…"),
                inv.code("checkout --next")
            );
            return out;
        }
        _ => {
            let _ = writeln!(out, "Backlog: {} ready, {} claimed.", r.ready, r.claimed);
        }
    }
    if !r.next.is_empty() {
        let more = r.ready.saturating_sub(r.next.len() as u64);
        out.push_str("\n| Next | Key |\n|---|---|\n");
        for (i, k) in r.next.iter().enumerate() {
            let _ = writeln!(out, "| {} | {} |", i + 1, code_cell(&k.key));
        }
        if more > 0 {
            let _ = writeln!(out, "\n…and {more} more ready.");
        }
    }
    if let Some(claims) = r.claims.as_ref().filter(|c| !c.is_empty()) {
        out.push_str("\n| Claimed | By |\n|---|---|\n");
        for k in claims {
            let _ = writeln!(
                out,
                "| {} | {} |",
                code_cell(&k.key),
                cell(k.claimed_by.as_deref().unwrap_or("-"))
            );
        }
    }
    if r.action == "show" && r.ready > 0 {
        let _ = writeln!(
            out,
            "\nNext: {} claims the first key that can be taken; {} when its work is finished.",
            inv.code("checkout --next"),
            inv.code("release KEY --done")
        );
    }
    out
}

/// `a`, `a` and `b`, `a`, `b` and `c`: keys in code.
/// The most keys a sentence names; the rest are counted (the JSON has them all).
const NAMED: usize = 10;

fn key_words(keys: &[String]) -> String {
    let coded: Vec<String> = keys.iter().take(NAMED).map(|k| code(k)).collect();
    if keys.len() > NAMED {
        return format!("{} and {} more keys", coded.join(", "), keys.len() - NAMED);
    }
    match coded.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

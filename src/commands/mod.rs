//! One module per command family. Each takes its arguments as one typed struct
//! ([`crate::cli`]) in `execute(ctx, args)`, calls the engine, and returns a [`Report`];
//! commands never print. They may import the engine, the stores, reports, clients and the
//! basic layer; nothing below imports a command.

pub mod agents;
pub mod audit;
pub mod backlog;
pub mod checkout;
pub mod claim;
pub mod doctor;
pub mod edit_gate;
pub mod freeze;
pub mod give;
pub mod guard;
pub mod heartbeat;
pub mod hook;
pub mod inbox;
pub mod init;
pub mod list;
pub mod note;
pub mod release;
pub mod renew;
pub mod run;
pub mod setup;
pub mod stage;
pub mod status;
pub mod task_claim;
pub mod verify;
pub mod wait;
pub mod watch;
pub mod why;
pub mod worktrees;

pub use crate::engine::Ctx;

/// `--wait` takes an optional duration, so in `checkout --wait task-1` the parser gives
/// it `task-1`. A value that is not a duration is the key: it goes back in front of the
/// keys, and the wait has no limit. A value that looks like a number with a bad unit
/// (`--wait 5x KEY`) is a bad duration.
pub(crate) fn wait_or_key(
    keys: &mut Vec<String>,
    wait: Option<Option<String>>,
) -> std::result::Result<Option<Option<std::time::Duration>>, crate::error::Error> {
    let Some(value) = wait else {
        return Ok(None);
    };
    let Some(v) = value else {
        return Ok(Some(None));
    };
    match crate::duration::parse(&v) {
        Ok(d) => Ok(Some(Some(d))),
        Err(e) if !keys.is_empty() && v.starts_with(|c: char| c.is_ascii_digit()) => {
            Err(crate::error::Error::Usage(format!("--wait: {e}")))
        }
        Err(_) => {
            keys.insert(0, v);
            Ok(Some(None))
        }
    }
}

pub(crate) fn missing_key() -> crate::error::Error {
    crate::error::Error::Usage("the following required arguments were not provided: <KEY>".into())
}

/// A key of `release` or `renew` whose record cannot be read: with one key asked for,
/// the command's error; with several, its row of the report, and the others go on.
pub(crate) fn corrupt_row(
    e: crate::error::Error,
    single: bool,
) -> crate::error::Result<crate::report::KeyResult> {
    let crate::error::Error::Corrupt { key, .. } = &e else {
        return Err(e);
    };
    if single {
        return Err(e);
    }
    Ok(crate::report::KeyResult {
        problem: Some(e.to_string()),
        ..crate::report::KeyResult::new(key.clone(), crate::error::Outcome::Corrupt, None)
    })
}

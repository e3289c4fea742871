//! Warnings: a step that failed after a command's change was already made.
//!
//! A command must never exit 1 when what it was asked to do was done: a checkout whose
//! record is published is the caller's even if the audit line cannot be written, and a
//! released key is released even if its queue cannot be updated. Such a failure is
//! collected here; the command reports success, and `tasklock` prints each warning on
//! stderr (`tasklock: warning: …`) and, with `--json`, in the report's `warnings` array.

use std::sync::Mutex;

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Say that something after the change failed.
pub fn warn(message: String) {
    WARNINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(message);
}

/// `result` is a step after the change was made: its failure is a warning, prefixed
/// with `what` (what stands, what did not happen).
pub fn after_change(what: &str, result: crate::error::Result<()>) {
    if let Err(e) = result {
        warn(format!("{what}: {e}"));
    }
}

/// How many warnings there are now (see [`truncate`]).
pub fn mark() -> usize {
    WARNINGS.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// Forget the warnings said since `mark`: their change was abandoned and is made again.
pub fn truncate(mark: usize) {
    WARNINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .truncate(mark);
}

/// The warnings collected so far, leaving none.
pub fn take() -> Vec<String> {
    std::mem::take(&mut *WARNINGS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// A JSON report with a `warnings` array added (the report itself when it is not one
/// JSON object).
pub fn into_json(report: &str, warnings: &[String]) -> String {
    match serde_json::from_str::<serde_json::Value>(report) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("warnings".into(), serde_json::json!(warnings));
            let mut s = serde_json::Value::Object(map).to_string();
            s.push('\n');
            s
        }
        _ => report.to_string(),
    }
}

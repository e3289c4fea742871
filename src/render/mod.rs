//! Turning reports and errors into text. Commands never print.

pub mod markdown;

use crate::error::Error;
use crate::report::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

pub fn report(r: &Report, format: Format) -> String {
    match format {
        Format::Markdown => markdown::report(r),
        // The audit log is JSON lines: one event per line, like the file itself.
        Format::Json => match r {
            Report::Audit(a) => a
                .events
                .iter()
                .map(|e| json_line(&serde_json::to_value(e).unwrap_or_default()))
                .collect(),
            _ => {
                let mut s = r.to_json();
                s.push('\n');
                s
            }
        },
    }
}

/// Errors: JSON goes to stdout (one object, like every other result); markdown to stderr.
pub fn error(e: &Error, format: Format) -> String {
    match format {
        Format::Markdown => {
            let mut s = format!("Error: {e}\n");
            if let Some(h) = e.hint() {
                s.push_str(&format!("\nNext: {h}\n"));
            }
            s
        }
        Format::Json => json_line(&error_json(
            e.kind(),
            &e.to_string(),
            e.hint(),
            e.exit_code(),
        )),
    }
}

pub fn error_json(kind: &str, message: &str, hint: Option<String>, code: i32) -> serde_json::Value {
    serde_json::json!({
        "error": { "kind": kind, "message": message, "hint": hint, "exit_code": code }
    })
}

pub fn json_line(v: &serde_json::Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

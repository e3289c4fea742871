//! Desktop notifications from `tasklock top --notify`: each new audit event of a kind that
//! `notify:` could tell of ([`crate::engine::notify::kind_of`]: a death, a deadlock, a
//! handoff, a lease run out, a lapse, a force-release, a freeze) in the words a webhook
//! gets, so that nobody has to watch the screen. Through `notify-send` where a Linux
//! desktop has it, `osascript` on macOS, and otherwise the terminal's own notification
//! escape (OSC 9), which iTerm2, WezTerm, Windows Terminal, Ghostty and kitty turn into a
//! desktop notification.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::engine::notify::kind_of;
use crate::render::events::sentence;
use crate::store::AuditEvent;

/// At most this many notifications for one batch of events; the rest are counted in one.
const AT_ONCE: usize = 3;

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desktop {
    /// `notify-send TITLE BODY`.
    NotifySend(PathBuf),
    /// `osascript -e 'display notification BODY with title TITLE'`.
    Osascript(PathBuf),
    /// OSC 9 written to the terminal.
    Terminal,
}

impl Desktop {
    /// What this machine has: `notify-send` with a display to show it on, `osascript` on
    /// macOS, else the terminal.
    pub fn detect() -> Desktop {
        let display = ["DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        if cfg!(target_os = "macos")
            && let Some(p) = on_path("osascript")
        {
            return Desktop::Osascript(p);
        }
        if display && let Some(p) = on_path("notify-send") {
            return Desktop::NotifySend(p);
        }
        Desktop::Terminal
    }

    /// Tell of the events of `new` that are worth telling; `store` names the fleet.
    /// Never waits for the notifier and never fails the view.
    pub fn tell(&self, new: &[AuditEvent], store: &str) {
        for (title, body) in notes(new, store) {
            self.show(&title, &body);
        }
    }

    fn show(&self, title: &str, body: &str) {
        let run = |program: &Path, args: &[&str]| {
            // Reaped by a thread of its own, so that no zombie is left and the view
            // never waits for the desktop.
            if let Ok(mut child) = Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                std::thread::spawn(move || child.wait());
            }
        };
        match self {
            Desktop::NotifySend(p) => run(p, &["--app-name=tasklock", title, body]),
            Desktop::Osascript(p) => {
                let script = format!(
                    "display notification {} with title {}",
                    apple_string(body),
                    apple_string(title)
                );
                run(p, &["-e", &script]);
            }
            Desktop::Terminal => {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "\x1b]9;{}: {}\x07", clean(title), clean(body));
                let _ = out.flush();
            }
        }
    }
}

/// The notifications for `new`: a title and a body each, at most [`AT_ONCE`] (the last
/// one counting the rest).
pub fn notes(new: &[AuditEvent], store: &str) -> Vec<(String, String)> {
    let told: Vec<String> = new
        .iter()
        .filter(|e| kind_of(e).is_some())
        .map(sentence)
        .collect();
    let title = format!("tasklock · {store}");
    if told.len() <= AT_ONCE {
        return told.into_iter().map(|b| (title.clone(), b)).collect();
    }
    let mut out: Vec<(String, String)> = told[..AT_ONCE - 1]
        .iter()
        .map(|b| (title.clone(), b.clone()))
        .collect();
    out.push((
        title,
        format!("and {} more: see tasklock top", told.len() - (AT_ONCE - 1)),
    ));
    out
}

fn on_path(name: &str) -> Option<PathBuf> {
    crate::os::on_path(&std::env::var_os("PATH")?, name)
}

/// Text safe inside an escape sequence: no control characters (a key or a reason could
/// carry an escape of its own).
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// An AppleScript string literal.
fn apple_string(s: &str) -> String {
    format!(
        "\"{}\"",
        clean(s).replace('\\', "\\\\").replace('"', "\\\"")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Event;

    fn ev(event: Event, key: &str, reason: Option<&str>) -> AuditEvent {
        let mut e = AuditEvent::new(chrono::Utc::now(), event, key, "alice");
        e.reason = reason.map(str::to_string);
        e
    }

    #[test]
    fn only_what_a_webhook_would_be_told_and_a_burst_counted_in_one() {
        let quiet = [ev(Event::Acquire, "k", None), ev(Event::Release, "k", None)];
        assert!(notes(&quiet, "s").is_empty());
        let death = ev(Event::AutoRelease, "k", Some("agent_death"));
        let n = notes(&[quiet[0].clone(), death.clone()], "s");
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, "tasklock · s");
        assert!(
            n[0].1.contains("alice died") && n[0].1.contains('k'),
            "{n:?}"
        );
        let burst: Vec<AuditEvent> = (0..5)
            .map(|i| ev(Event::Freeze, &format!("k{i}"), None))
            .collect();
        let n = notes(&burst, "s");
        assert_eq!(n.len(), AT_ONCE);
        assert_eq!(n[AT_ONCE - 1].1, "and 3 more: see tasklock top");
    }

    #[test]
    fn escapes_and_quotes_cannot_leave_their_place() {
        assert_eq!(clean("a\x1b]9;x\x07b"), "a ]9;x b");
        assert_eq!(apple_string("say \"hi\" \\"), "\"say \\\"hi\\\" \\\\\"");
    }
}

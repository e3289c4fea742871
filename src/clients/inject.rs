//! Give a subagent's `tasklock` commands the subagent's identity.
//!
//! Claude Code runs a subagent's Bash commands with its session's environment: nothing in
//! the process tells a subagent from its parent or its siblings. The PreToolUse hook input
//! does carry `agent_id`, and the hook may hand back an updated command. This module
//! rewrites every `tasklock SUBCOMMAND` invocation of a shell command line into
//! `tasklock SUBCOMMAND --agent ID` (`--agent=ID` for an id that begins with `-`, so it
//! is never read as an option), so that the permission rules written by `init`
//! (`Bash(tasklock checkout *)` …) still match the rewritten command.
//!
//! The scan is a small shell lexer: it knows quotes, backslashes, comments and the
//! operators that start a new command (`;`, `&`, `|`, `(`, newline, …). A `tasklock` word
//! inside quotes, an argument (`echo tasklock checkout`) or a here-document body is left
//! alone, and an invocation that already names `--agent` is never changed.

/// Where `--agent ID` goes in `command`, or `None` when nothing needs a change.
pub fn inject_agent(command: &str, agent: &str) -> Option<String> {
    let insert = format!(" {}", crate::key::option("--agent", agent));
    let points = insertion_points(command);
    if points.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(command.len() + points.len() * insert.len());
    let mut last = 0;
    for p in points {
        out.push_str(&command[last..p]);
        out.push_str(&insert);
        last = p;
    }
    out.push_str(&command[last..]);
    Some(out)
}

/// Prefix every `tasklock` invocation of `command` with `assignment` (`NAME=VALUE`, written
/// as the shell should read it), at the start of its simple command; `None` when there is
/// none.
pub fn prefix_invocations(command: &str, assignment: &str) -> Option<String> {
    let starts: Vec<usize> = invocations(command).iter().map(|i| i.start).collect();
    if starts.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(command.len() + starts.len() * (assignment.len() + 1));
    let mut last = 0;
    for p in starts {
        out.push_str(&command[last..p]);
        out.push_str(assignment);
        out.push(' ');
        last = p;
    }
    out.push_str(&command[last..]);
    Some(out)
}

/// One `tasklock` invocation in a command line.
struct Invocation {
    /// Where its simple command begins (before assignments and wrappers).
    start: usize,
    /// Right after its subcommand word, when it carries no `--agent` yet.
    agent_at: Option<usize>,
}

/// One shell word: its text with quotes removed, and where it begins and ends in the line.
struct Word {
    text: String,
    start: usize,
    end: usize,
    /// The word had quotes or escapes (so it is never an operator or assignment).
    quoted: bool,
}

/// Byte offsets right after the subcommand word of each `tasklock` invocation that does
/// not already carry `--agent`.
fn insertion_points(line: &str) -> Vec<usize> {
    invocations(line)
        .into_iter()
        .filter_map(|i| i.agent_at)
        .collect()
}

/// The `tasklock` invocations of a command line, in order.
fn invocations(line: &str) -> Vec<Invocation> {
    let bytes = line.as_bytes();
    let mut points = Vec::new();
    let mut i = 0;
    // Words of the simple command being read, and whether the next word is in command
    // position.
    let mut words: Vec<Word> = Vec::new();
    let mut heredoc_pending = false;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' | b'\t' => i += 1,
            b'\n' => {
                finish(line, &mut words, &mut points);
                i += 1;
                if heredoc_pending {
                    // A here-document body is data: stop at it rather than guess.
                    return points;
                }
            }
            b';' | b'&' | b'|' | b'(' | b')' | b'{' | b'}' if words.is_empty() || c != b'{' => {
                finish(line, &mut words, &mut points);
                i += 1;
            }
            b'#' if words.is_empty() || bytes[i - 1].is_ascii_whitespace() => {
                // A comment runs to the end of the line.
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'<' | b'>' => {
                if bytes.get(i + 1) == Some(&b'<') && c == b'<' {
                    heredoc_pending = true;
                }
                // A redirection and its target are not words of the command.
                while i < bytes.len() && matches!(bytes[i], b'<' | b'>' | b'&' | b'-') {
                    i += 1;
                }
                while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                    i += 1;
                }
                if i < bytes.len() && !is_operator(bytes[i]) {
                    let w = read_word(line, i);
                    i = w.end;
                }
            }
            _ => {
                let w = read_word(line, i);
                i = w.end.max(i + 1);
                words.push(w);
            }
        }
    }
    finish(line, &mut words, &mut points);
    points
}

fn is_operator(b: u8) -> bool {
    matches!(b, b';' | b'&' | b'|' | b'(' | b')' | b'\n')
}

/// A simple command ended: if it runs tasklock, note where it begins and where its
/// subcommand ends.
fn finish(_line: &str, words: &mut Vec<Word>, points: &mut Vec<Invocation>) {
    let start = words.first().map_or(0, |w| w.start);
    let mut rest = words.iter().skip_while(|w| {
        // Leading assignments (`A=b tasklock …`) and wrappers that run their arguments.
        !w.quoted
            && (is_assignment(&w.text) || matches!(w.text.as_str(), "command" | "exec" | "env"))
    });
    if let Some(program) = rest.next()
        && is_tasklock(&program.text)
    {
        let args: Vec<&Word> = rest.collect();
        let has_agent = args
            .iter()
            .take_while(|w| w.text != "--")
            .any(|w| w.text == "--agent" || w.text.starts_with("--agent="));
        let mut agent_at = None;
        if !has_agent {
            // After the first word that is not an option: the subcommand. Options given
            // before it take a value only for these flags.
            let mut at = program.end;
            let mut expect_value = false;
            for w in &args {
                if expect_value {
                    expect_value = false;
                    at = w.end;
                    continue;
                }
                if w.text == "--" {
                    break;
                }
                if w.text.starts_with('-') {
                    expect_value = matches!(w.text.as_str(), "--format" | "--dir" | "--name");
                    at = w.end;
                    continue;
                }
                at = w.end;
                break;
            }
            agent_at = Some(at);
        }
        points.push(Invocation { start, agent_at });
    }
    words.clear();
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit()
        }
        None => false,
    }
}

fn is_tasklock(program: &str) -> bool {
    program == "tasklock" || program.ends_with("/tasklock")
}

/// Read one word starting at `start` (not whitespace, not an operator).
fn read_word(line: &str, start: usize) -> Word {
    let bytes = line.as_bytes();
    let mut i = start;
    let mut text = String::new();
    let mut quoted = false;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>' => break,
            b'\\' => {
                quoted = true;
                if let Some(ch) = line[i + 1..].chars().next() {
                    if ch != '\n' {
                        text.push(ch);
                    }
                    i += 1 + ch.len_utf8();
                } else {
                    i += 1;
                }
            }
            b'\'' => {
                quoted = true;
                let close = line[i + 1..].find('\'').map_or(bytes.len(), |p| i + 1 + p);
                text.push_str(&line[i + 1..close]);
                i = (close + 1).min(bytes.len());
            }
            b'"' => {
                quoted = true;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    let ch = line[i..].chars().next().expect("inside the line");
                    text.push(ch);
                    i += ch.len_utf8();
                }
                i = (i + 1).min(bytes.len());
            }
            _ => {
                let ch = line[i..].chars().next().expect("inside the line");
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Word {
        text,
        start,
        end: i,
        quoted,
    }
}

#[cfg(test)]
mod tests {
    use super::inject_agent;

    fn inj(cmd: &str) -> Option<String> {
        inject_agent(cmd, "s1/a2")
    }

    #[test]
    fn plain_invocations_get_the_agent_after_the_subcommand() {
        assert_eq!(
            inj("tasklock checkout task-1").as_deref(),
            Some("tasklock checkout --agent s1/a2 task-1")
        );
        assert_eq!(
            inj("tasklock list").as_deref(),
            Some("tasklock list --agent s1/a2")
        );
        assert_eq!(
            inj("  /usr/local/bin/tasklock release k --note 'x y'").as_deref(),
            Some("  /usr/local/bin/tasklock release --agent s1/a2 k --note 'x y'")
        );
    }

    #[test]
    fn every_invocation_of_a_compound_command() {
        assert_eq!(
            inj("tasklock checkout a && git push; tasklock release a|cat").as_deref(),
            Some(
                "tasklock checkout --agent s1/a2 a && git push; tasklock release --agent s1/a2 a|cat"
            )
        );
        assert_eq!(
            inj("cd x && TASKLOCK_DIR=/d tasklock note k \"done\"\ntasklock list").as_deref(),
            Some(
                "cd x && TASKLOCK_DIR=/d tasklock note --agent s1/a2 k \"done\"\ntasklock list --agent s1/a2"
            )
        );
        assert_eq!(
            inj("(tasklock status k)").as_deref(),
            Some("(tasklock status --agent s1/a2 k)")
        );
    }

    #[test]
    fn global_options_before_the_subcommand() {
        assert_eq!(
            inj("tasklock --json --dir /x/.locks checkout k").as_deref(),
            Some("tasklock --json --dir /x/.locks checkout --agent s1/a2 k")
        );
        assert_eq!(
            inj("tasklock run k -- tasklock list").as_deref(),
            Some("tasklock run --agent s1/a2 k -- tasklock list")
        );
    }

    #[test]
    fn leaves_other_commands_and_explicit_agents_alone() {
        assert_eq!(inj("echo tasklock checkout k"), None);
        assert_eq!(inj("echo 'tasklock checkout k'; ls"), None);
        assert_eq!(inj("grep -r \"tasklock list\" ."), None);
        assert_eq!(inj("tasklock checkout k --agent other"), None);
        assert_eq!(inj("tasklock --agent=other list"), None);
        assert_eq!(inj("# tasklock checkout k"), None);
        assert_eq!(inj("git commit -m x # tasklock list"), None);
        assert_eq!(inj("cat <<EOF\ntasklock checkout k\nEOF"), None);
        assert_eq!(inj("tasklocker list"), None);
        assert_eq!(inj(""), None);
    }

    #[test]
    fn an_assignment_goes_before_each_invocation() {
        use super::prefix_invocations as pre;
        assert_eq!(
            pre(
                "cd x && A=b tasklock checkout k; env tasklock list | cat",
                "S=1"
            )
            .as_deref(),
            Some("cd x && S=1 A=b tasklock checkout k; S=1 env tasklock list | cat")
        );
        assert_eq!(
            pre("(tasklock status k --agent other)", "S=1").as_deref(),
            Some("(S=1 tasklock status k --agent other)")
        );
        assert_eq!(pre("echo tasklock list", "S=1"), None);
    }

    #[test]
    fn quotes_an_agent_that_needs_it() {
        assert_eq!(
            inject_agent("tasklock list", "a b").as_deref(),
            Some("tasklock list --agent 'a b'")
        );
    }
}

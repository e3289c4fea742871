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
//! The scan reads the command with the crate's shell lexer ([`super::shell`]): it knows
//! quotes, backslashes, comments and the operators that start a new command (`;`, `&`,
//! `|`, `(`, `` ` ``, `$(`, newline, …). A `tasklock` word
//! inside quotes, an argument (`echo tasklock checkout`) or a here-document body is left
//! alone, and an invocation that already names `--agent` is never changed.

use super::shell::{Lexer, Token, Word, is_assignment};

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
    let mut points = Vec::new();
    let mut lexer = Lexer::new(line);
    // Words of the simple command being read.
    let mut words: Vec<Word> = Vec::new();
    while let Some(token) = lexer.next(words.is_empty()) {
        match token {
            Token::Word(w) => words.push(w),
            Token::Newline { bodies } => {
                finish(&mut words, &mut points);
                if bodies {
                    // A here-document body is data: stop at it rather than guess.
                    return points;
                }
            }
            // A command substitution's commands are commands.
            Token::Op(_) | Token::Subst => finish(&mut words, &mut points),
            // A redirection and its target are not words of the command.
            Token::Redirect => {}
        }
    }
    finish(&mut words, &mut points);
    points
}

/// A simple command ended: if it runs tasklock, note where it begins and where its
/// subcommand ends.
fn finish(words: &mut Vec<Word>, points: &mut Vec<Invocation>) {
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

fn is_tasklock(program: &str) -> bool {
    program == "tasklock" || program.ends_with("/tasklock")
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

//! Codex's `apply_patch` reached through the shell. Besides calling the `apply_patch`
//! tool, a model may run it as a command (`apply_patch <<'PATCH' … PATCH`, `cd DIR &&
//! apply_patch …`, `applypatch '…'`): Codex applies the patch itself, and reports the
//! call to its hooks as the shell tool (`tool_name: "Bash"`, the script in
//! `tool_input.command`). Codex also puts an `apply_patch` program on the PATH of the
//! commands it runs, so any script that invokes one changes the files its patch names.
//!
//! [`shell_patch`] tells such a command from any other with the crate's shell lexer
//! ([`super::shell`]: quotes, backslashes, comments, here-documents, the operators that
//! start a new command) and says which files its patch touches and from which directory. It knows nothing of
//! checkouts: the edit gate judges what it finds.

use super::shell::{Lexer, Token, Word, is_assignment};

/// What a shell command that applies a patch changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPatch {
    /// The files the patch names (`*** Add File:`, `*** Update File:`, `*** Delete File:`,
    /// `*** Move to:`), as written, each once.
    pub files: Vec<String>,
    /// The directories `cd` moved to before the patch is applied, in order, as written
    /// (quotes removed): the files are relative to the last of them. `~` and `~/…` are
    /// left to the caller.
    pub dirs: Vec<String>,
    /// Why the files cannot be told from the command, when they cannot: the patch is
    /// read from elsewhere (`apply_patch < p.diff`, a pipe), or a `cd` goes to a place
    /// only the shell knows (`cd "$DIR"`, `cd -`).
    pub unknown: Option<&'static str>,
    /// The command runs the program (in command position); else it only names it and
    /// carries patch headers, which are judged but may be no edit at all.
    pub invoked: bool,
}

/// The patch's text is not in the command.
pub const NOT_IN_COMMAND: &str =
    "its patch is not written in the command (it is read from a file, a pipe or a variable)";
/// A `cd` before it goes where only the shell knows.
pub const DIR_UNKNOWN: &str =
    "a `cd` before it goes to a directory only the shell knows (a variable, `-`, a command)";

/// The names a patch-applying program goes by in Codex.
const PROGRAMS: [&str; 2] = ["apply_patch", "applypatch"];

/// Does the shell command `command` apply a patch, and to which files? `None`: it runs
/// no `apply_patch` (or `applypatch`) and carries no patch for one.
///
/// Lenient where Codex is strict: Codex takes only `apply_patch <<'EOF' … EOF`,
/// optionally after one `cd DIR &&`, and the argument form; any other script that runs
/// the `apply_patch` Codex puts on PATH edits files too. So every invocation in command
/// position counts, after `;`, `&&`, `|`, in a subshell, behind assignments or `env`; and
/// a command that names the program anywhere and carries patch headers is judged by
/// those headers.
pub fn shell_patch(command: &str) -> Option<ShellPatch> {
    let lexed = lex(command);
    let mentioned = PROGRAMS.iter().any(|p| mentions(command, p));
    if lexed.invoked.is_none() && !mentioned {
        return None;
    }
    let mut files = patch_files(command);
    // An argument written with `\n` escapes (`$'*** Begin Patch\n…'`).
    if command.contains("\\n") {
        for f in patch_files(&command.replace("\\n", "\n")) {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    let Some(dirs) = lexed.invoked else {
        // Named, not run in command position (`grep apply_patch`): only a patch it
        // carries counts.
        return (!files.is_empty()).then_some(ShellPatch {
            files,
            dirs: Vec::new(),
            unknown: None,
            invoked: false,
        });
    };
    let unknown = if dirs.iter().any(Option::is_none) {
        Some(DIR_UNKNOWN)
    } else if files.is_empty() {
        Some(NOT_IN_COMMAND)
    } else {
        None
    };
    Some(ShellPatch {
        files,
        dirs: dirs.into_iter().flatten().collect(),
        unknown,
        invoked: true,
    })
}

/// The files a patch in Codex's format touches: the paths of its `*** Add File:`,
/// `*** Update File:`, `*** Delete File:` and `*** Move to:` lines, in order, each once.
/// Lines are trimmed as Codex's own parser does; anything else is ignored, so a malformed
/// patch gives what it names (perhaps nothing), never an error.
pub fn patch_files(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File:",
        "*** Update File:",
        "*** Delete File:",
        "*** Move to:",
    ];
    let mut files: Vec<String> = Vec::new();
    for line in patch.lines() {
        // A header may follow the opening quote of an argument on the same line.
        let line = line.trim().trim_start_matches(['\'', '"', '$']);
        let Some(path) = HEADERS
            .iter()
            .find_map(|h| line.strip_prefix(h))
            .map(str::trim)
            .filter(|p| !p.is_empty())
        else {
            continue;
        };
        if !files.iter().any(|f| f == path) {
            files.push(path.to_string());
        }
    }
    files
}

/// Does `text` hold `word` with no name character on either side?
fn mentions(text: &str, word: &str) -> bool {
    let name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).any(|(i, _)| {
        !name(text[..i].chars().next_back()) && !name(text[i + word.len()..].chars().next())
    })
}

/// What the lexer found: for the first invocation in command position, the `cd`
/// targets before it (`None` for one only the shell knows).
struct Lexed {
    invoked: Option<Vec<Option<String>>>,
}

fn lex(line: &str) -> Lexed {
    let mut lexer = Lexer::new(line);
    let mut words: Vec<Word> = Vec::new();
    let mut dirs: Vec<Option<String>> = Vec::new();
    while let Some(token) = lexer.next(words.is_empty()) {
        match token {
            Token::Word(w) => words.push(w),
            // A command substitution. As an argument its value is the shell's to know (and
            // its words are read as more arguments); as a whole command, its commands are
            // commands.
            Token::Subst if !words.is_empty() => words.push(Word {
                text: "$(".into(),
                start: 0,
                end: 0,
                quoted: false,
                dynamic: true,
            }),
            Token::Subst | Token::Redirect => {}
            Token::Newline { .. } | Token::Op(_) => {
                if finish(&mut words, &mut dirs) {
                    return Lexed {
                        invoked: Some(dirs),
                    };
                }
            }
        }
    }
    Lexed {
        invoked: finish(&mut words, &mut dirs).then_some(dirs),
    }
}

/// A simple command ended: does it run the patch program? A `cd` before it adds its
/// target to `dirs`.
fn finish(words: &mut Vec<Word>, dirs: &mut Vec<Option<String>>) -> bool {
    let mut rest = words.iter().skip_while(|w| {
        !w.quoted
            && (is_assignment(&w.text)
                || matches!(
                    w.text.as_str(),
                    "command" | "exec" | "env" | "sudo" | "time" | "nice" | "nohup" | "!"
                ))
    });
    let found = match rest.next() {
        Some(program) if is_apply_patch(&program.text) => true,
        Some(program) if program.text == "cd" && !program.quoted => {
            let args: Vec<&Word> = rest
                .filter(|w| !w.text.starts_with('-') || w.text == "-")
                .collect();
            dirs.push(match args.as_slice() {
                [] => Some("~".to_string()),
                [w] if !w.dynamic && w.text != "-" => Some(w.text.clone()),
                _ => None,
            });
            false
        }
        _ => false,
    };
    words.clear();
    found
}

fn is_apply_patch(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    PROGRAMS.contains(&base)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** End Patch";

    fn sp(cmd: &str) -> Option<ShellPatch> {
        shell_patch(cmd)
    }

    fn files(cmd: &str) -> (Vec<String>, Vec<String>) {
        let p = sp(cmd).unwrap_or_else(|| panic!("not a patch: {cmd:?}"));
        assert_eq!(p.unknown, None, "{cmd:?}");
        (p.files, p.dirs)
    }

    #[test]
    fn heredoc_and_argument_forms_with_either_name() {
        for cmd in [
            format!("apply_patch <<'PATCH'\n{PATCH}\nPATCH\n"),
            format!("apply_patch <<PATCH\n{PATCH}\nPATCH"),
            format!("applypatch <<\"EOF\"\n{PATCH}\nEOF\n"),
            format!("apply_patch <<-EOF\n\t{PATCH}\n\tEOF\n"),
            format!("apply_patch '{PATCH}'"),
            format!("applypatch \"{PATCH}\""),
            format!("/tmp/codex-arg0/apply_patch '{PATCH}'"),
            format!("apply_patch $'{}'", PATCH.replace('\n', "\\n")),
        ] {
            assert_eq!(
                files(&cmd),
                (vec!["src/a.rs".to_string()], vec![]),
                "{cmd:?}"
            );
        }
    }

    #[test]
    fn cd_before_it_gives_the_directory() {
        let cmd = format!("cd sub/dir && apply_patch <<'PATCH'\n{PATCH}\nPATCH\n");
        assert_eq!(files(&cmd).1, ["sub/dir"]);
        let cmd = format!("cd '/abs path' && cd x; apply_patch '{PATCH}'");
        assert_eq!(files(&cmd).1, ["/abs path", "x"]);
        let cmd = format!("cd && apply_patch '{PATCH}'");
        assert_eq!(files(&cmd).1, ["~"]);
        // A cd after it does not count.
        let cmd = format!("apply_patch <<'P'\n{PATCH}\nP\ncd elsewhere\n");
        assert!(files(&cmd).1.is_empty());
        for cmd in [
            format!("cd \"$DIR\" && apply_patch '{PATCH}'"),
            format!("cd $(git rev-parse --show-toplevel) && apply_patch '{PATCH}'"),
            format!("cd - && apply_patch '{PATCH}'"),
            format!("cd s* && apply_patch '{PATCH}'"),
        ] {
            assert_eq!(sp(&cmd).unwrap().unknown, Some(DIR_UNKNOWN), "{cmd:?}");
        }
    }

    #[test]
    fn every_command_position_counts() {
        for cmd in [
            format!("echo hi; apply_patch <<'P'\n{PATCH}\nP"),
            format!("true && (apply_patch '{PATCH}')"),
            format!("FOO=1 env apply_patch '{PATCH}'"),
            format!("cat <<'P' | apply_patch\n{PATCH}\nP\n"),
            format!("x=$(apply_patch '{PATCH}')"),
        ] {
            assert_eq!(files(&cmd).0, ["src/a.rs"], "{cmd:?}");
        }
    }

    #[test]
    fn a_patch_from_elsewhere_is_unknown() {
        for cmd in [
            "apply_patch < /tmp/p.diff",
            "cat /tmp/p.diff | apply_patch",
            "apply_patch \"$PATCH\"",
        ] {
            assert_eq!(sp(cmd).unwrap().unknown, Some(NOT_IN_COMMAND), "{cmd:?}");
        }
    }

    #[test]
    fn ordinary_commands_are_not_patches() {
        for cmd in [
            "ls -la",
            "cargo test",
            "grep -rn apply_patch src",
            "echo 'apply_patch <<EOF'",
            "cat docs/apply_patch.md",
            "git commit -m 'apply_patch: fix'",
            "my_apply_patch_tool x",
            "cat <<'EOF'\napply_patch\nEOF\n",
            "",
        ] {
            assert_eq!(sp(cmd), None, "{cmd:?}");
        }
        // Named with a patch it carries: judged by the patch, but not run.
        let cmd = format!("echo '{PATCH}' > p; echo apply_patch");
        assert_eq!(files(&cmd).0, ["src/a.rs"]);
        assert!(!sp(&cmd).unwrap().invoked);
        assert!(sp(&format!("apply_patch '{PATCH}'")).unwrap().invoked);
    }

    #[test]
    fn garbage_never_panics() {
        for cmd in [
            "apply_patch '",
            "apply_patch \"",
            "apply_patch \\",
            "apply_patch <<",
            "apply_patch <<'E",
            "cd 'x",
            "$(",
            "apply_patch <<E\n*** Update File: é\u{0}\n",
            "\u{202e}apply_patch",
        ] {
            let _ = sp(cmd);
        }
    }
}

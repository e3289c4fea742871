//! The one shell lexer of the crate, for the commands agents run that tasklock reads:
//! giving a subagent's `tasklock` invocations its identity ([`super::inject`]) and
//! telling a patch applied through the shell ([`super::apply_patch`]). It knows quotes,
//! backslashes, comments, expansions, redirections and here-documents (whose bodies it
//! skips), and the operators that end a simple command; what a command means is the
//! caller's to judge.
//!
//! The caller drives it a token at a time, saying whether the simple command it reads
//! has a word yet: at a command's start `{`, `}` and `!` are the shell's grouping and
//! negation (an [`Token::Op`]), elsewhere they begin a word; and `#` begins a comment
//! there, or after whitespace.

/// One shell word: its text with quotes removed, and where it begins and ends in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    pub text: String,
    pub start: usize,
    pub end: usize,
    /// Had quotes or escapes (so it is never an operator or an assignment).
    pub quoted: bool,
    /// Holds an expansion the shell makes (`$…`, `` ` ``, a glob); a leading `~` is not
    /// counted.
    pub dynamic: bool,
}

/// What the lexer reads next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Word(Word),
    /// An operator that ends a simple command (`;`, `&`, `|`, `(`, `)`, `` ` ``), or `{`,
    /// `}` or `!` at a command's start.
    Op(u8),
    /// `$(`: a command substitution begins.
    Subst,
    /// A redirection with its target (neither is a word of the command).
    Redirect,
    /// The end of a line; `bodies`: here-documents opened on it follow (and are skipped).
    Newline {
        bodies: bool,
    },
}

/// A shell command line read token by token.
pub struct Lexer<'a> {
    line: &'a str,
    at: usize,
    /// Here-documents opened on the current line: (delimiter, strip leading tabs).
    heredocs: Vec<(String, bool)>,
    /// Their bodies start here: skip them before the next token.
    bodies_next: Vec<(String, bool)>,
}

impl<'a> Lexer<'a> {
    pub fn new(line: &'a str) -> Self {
        Lexer {
            line,
            at: 0,
            heredocs: Vec::new(),
            bodies_next: Vec::new(),
        }
    }

    /// The next token, `None` at the end; `at_start`: no word of the current simple
    /// command has been read.
    pub fn next(&mut self, at_start: bool) -> Option<Token> {
        self.skip_bodies();
        let bytes = self.line.as_bytes();
        while self.at < bytes.len() {
            let i = self.at;
            let c = bytes[i];
            match c {
                b' ' | b'\t' | b'\r' => self.at += 1,
                b'\n' => {
                    self.at += 1;
                    self.bodies_next = std::mem::take(&mut self.heredocs);
                    return Some(Token::Newline {
                        bodies: !self.bodies_next.is_empty(),
                    });
                }
                b';' | b'&' | b'|' | b'(' | b')' | b'`' => {
                    self.at += 1;
                    return Some(Token::Op(c));
                }
                b'{' | b'}' | b'!' if at_start => {
                    self.at += 1;
                    return Some(Token::Op(c));
                }
                b'#' if at_start || bytes[i - 1].is_ascii_whitespace() => {
                    // A comment runs to the end of the line.
                    self.at = self.line[i..].find('\n').map_or(bytes.len(), |p| i + p);
                }
                b'<' | b'>' => {
                    self.redirect();
                    return Some(Token::Redirect);
                }
                b'$' if bytes.get(i + 1) == Some(&b'(') => {
                    self.at += 2;
                    return Some(Token::Subst);
                }
                _ => {
                    let w = read_word(self.line, i);
                    self.at = w.end.max(i + 1);
                    return Some(Token::Word(w));
                }
            }
        }
        None
    }

    /// A redirection: its operator, and its target when one follows (a here-document's
    /// delimiter is kept for skipping its body).
    fn redirect(&mut self) {
        let (line, bytes) = (self.line, self.line.as_bytes());
        let rest = &line[self.at..];
        let here = rest.starts_with("<<") && !rest.starts_with("<<<");
        let strip = rest.starts_with("<<-");
        while self.at < bytes.len() && matches!(bytes[self.at], b'<' | b'>' | b'&' | b'-' | b'|') {
            self.at += 1;
        }
        while self.at < bytes.len() && matches!(bytes[self.at], b' ' | b'\t') {
            self.at += 1;
        }
        if self.at < bytes.len()
            && !matches!(bytes[self.at], b';' | b'&' | b'|' | b'(' | b')' | b'\n')
        {
            let w = read_word(line, self.at);
            self.at = w.end.max(self.at + 1);
            if here {
                self.heredocs.push((w.text, strip));
            }
        }
    }

    /// Skip the bodies of the here-documents opened on the line just ended: each runs to
    /// its delimiter alone on a line (tabs stripped for `<<-`).
    fn skip_bodies(&mut self) {
        let (line, len) = (self.line, self.line.len());
        for (delim, strip) in std::mem::take(&mut self.bodies_next) {
            while self.at < len {
                let end = line[self.at..].find('\n').map_or(len, |p| self.at + p);
                let body_line = &line[self.at..end];
                let body_line = if strip {
                    body_line.trim_start_matches('\t')
                } else {
                    body_line
                };
                self.at = (end + 1).min(len);
                if body_line == delim {
                    break;
                }
            }
        }
    }
}

/// `NAME=value`: a variable assignment in front of a command.
pub fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit()
        }
        None => false,
    }
}

/// Read one word starting at `start` (not whitespace, not an operator).
pub fn read_word(line: &str, start: usize) -> Word {
    let bytes = line.as_bytes();
    let mut i = start;
    let mut w = Word {
        text: String::new(),
        start,
        end: start,
        quoted: false,
        dynamic: false,
    };
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\r' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>'
            | b'`' => break,
            b'\\' => {
                w.quoted = true;
                if let Some(ch) = line[i + 1..].chars().next() {
                    if ch != '\n' {
                        w.text.push(ch);
                    }
                    i += 1 + ch.len_utf8();
                } else {
                    i += 1;
                }
            }
            b'\'' => {
                w.quoted = true;
                let close = line[i + 1..].find('\'').map_or(bytes.len(), |p| i + 1 + p);
                w.text.push_str(&line[i + 1..close]);
                i = (close + 1).min(bytes.len());
            }
            b'"' => {
                w.quoted = true;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    } else if matches!(bytes[i], b'$' | b'`') {
                        w.dynamic = true;
                    }
                    let ch = line[i..].chars().next().expect("inside the line");
                    w.text.push(ch);
                    i += ch.len_utf8();
                }
                i = (i + 1).min(bytes.len());
            }
            b'$' => {
                w.dynamic = true;
                w.text.push('$');
                i += 1;
            }
            _ => {
                let ch = line[i..].chars().next().expect("inside the line");
                if matches!(ch, '*' | '?' | '[') {
                    // A glob: the shell picks the name.
                    w.dynamic = true;
                }
                w.text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    w.end = i;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token of a line, a word as its text, reading at a command's start after an
    /// operator or a line's end.
    fn tokens(line: &str) -> Vec<String> {
        let mut lexer = Lexer::new(line);
        let mut out = Vec::new();
        let mut at_start = true;
        while let Some(t) = lexer.next(at_start) {
            at_start = !matches!(t, Token::Word(_) | Token::Subst | Token::Redirect);
            out.push(match t {
                Token::Word(w) if w.dynamic => format!("${{{}}}", w.text),
                Token::Word(w) => w.text,
                Token::Op(c) => format!("op {}", c as char),
                Token::Subst => "subst".into(),
                Token::Redirect => "redirect".into(),
                Token::Newline { bodies } => format!("newline {bodies}"),
            });
        }
        out
    }

    #[test]
    fn quotes_and_backslashes_group_and_go_away() {
        assert_eq!(
            tokens(r#"a 'b c' "d \"e\"" f\ g"#),
            ["a", "b c", "d \"e\"", "f g"]
        );
    }

    #[test]
    fn operators_end_commands_and_grouping_counts_only_at_a_start() {
        assert_eq!(
            tokens("{ a; b && c | d; } & (e) `f` ! g x!y"),
            [
                "op {", "a", "op ;", "b", "op &", "op &", "c", "op |", "d", "op ;", "op }", "op &",
                "op (", "e", "op )", "op `", "f", "op `", "op !", "g", "x!y"
            ]
        );
    }

    #[test]
    fn comments_start_a_word_or_follow_whitespace() {
        assert_eq!(tokens("a#b # c d\ne"), ["a#b", "newline false", "e"]);
    }

    #[test]
    fn expansions_and_globs_are_dynamic() {
        assert_eq!(
            tokens(r#"cd $DIR "x$y" *.rs '$z' $(pwd)"#),
            [
                "cd", "${$DIR}", "${x$y}", "${*.rs}", "$z", "subst", "pwd", "op )"
            ]
        );
    }

    #[test]
    fn redirections_take_their_target_and_here_documents_are_skipped() {
        // A descriptor's number (`2>&1`) is read as a word, as the callers want.
        assert_eq!(
            tokens("cat <<'EOF' >out 2>&1\nbody; rm x\nEOF\nnext <<-E\n\tin\n\tE\nlast <<< s"),
            [
                "cat",
                "redirect",
                "redirect",
                "2",
                "redirect",
                "newline true",
                "next",
                "redirect",
                "newline true",
                "last",
                "redirect"
            ]
        );
    }

    #[test]
    fn words_know_where_they_are() {
        let w = read_word("ab 'c d'e", 3);
        assert_eq!(
            (w.text.as_str(), w.start, w.end, w.quoted),
            ("c de", 3, 9, true)
        );
        assert!(!is_assignment("'A'=b") || is_assignment("A=b"));
        assert!(is_assignment("A_1=") && !is_assignment("1A=b") && !is_assignment("=b"));
    }

    #[test]
    fn garbage_never_panics() {
        for line in [
            "\\",
            "'",
            "\"\\",
            "<<",
            "$(",
            "é\\é'é",
            "a <<E\n",
            "#",
            "\r\n\r",
        ] {
            tokens(line);
        }
    }
}

//! Key validation and the key -> file name encoding.
//!
//! A file name keeps the bytes `a-z 0-9 - _ .` and writes every other byte as `%XX`
//! (upper-case hex). Upper-case letters are encoded too, so keys that differ only in case
//! stay distinct on case-insensitive file systems; a leading `.` is encoded so no key
//! becomes `.`, `..` or a hidden file. Names longer than [`MAX_PLAIN`] keep a readable
//! prefix and end in `~` plus 32 hex digits of the key's SHA-256; `~` never appears in a
//! plain encoding, so the two forms cannot collide.
//!
//! Keys are Unicode text in NFC: [`normalize`] runs on every key given on the command
//! line, so `café` typed with a combining accent (NFD, as macOS file names and some
//! editors write it) and with the precomposed `é` (NFC) is one key, one file, one lock.

use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

use crate::error::{Error, Result};

pub const MAX_KEY_BYTES: usize = 512;

/// The most slots a key may have (`--slots`, `slots:`).
pub const MAX_SLOTS: u32 = 1000;
const MAX_PLAIN: usize = 200;
const HASHED_PREFIX: usize = 120;

/// A key as tasklock stores it: the NFC form of what was given. Two spellings of one
/// text (precomposed or combining accents) must never be two locks.
pub fn normalize(key: &str) -> String {
    if unicode_normalization::is_nfc_quick(key.chars()) == unicode_normalization::IsNormalized::Yes
    {
        key.to_string()
    } else {
        key.nfc().collect()
    }
}

/// Characters that make a key display as something it is not: bidi embeddings and
/// overrides (U+202A–U+202E), bidi isolates (U+2066–U+2069), zero-width space and
/// joiners (U+200B–U+200D) and the zero-width no-break space (U+FEFF). Two keys that
/// look the same in every table must be the same key.
pub fn deceptive(c: char) -> bool {
    crate::error::deceptive(c)
}

/// Unicode's noncharacters: U+FDD0–U+FDEF and the last two code points of every plane
/// (U+FFFE, U+FFFF, U+1FFFE, …). Never text to interchange; U+FFFE and U+FFFF are not
/// even allowed in XML.
pub fn noncharacter(c: char) -> bool {
    let c = c as u32;
    (0xFDD0..=0xFDEF).contains(&c) || c & 0xFFFE == 0xFFFE
}

/// How the key of a checkout of paths alone begins.
pub const PATH_KEY_PREFIX: &str = "path:";

/// The key of a checkout of paths alone: `path:` and its patterns.
pub fn for_paths(patterns: &[String]) -> Result<String> {
    let key = format!("{PATH_KEY_PREFIX}{}", patterns.join(", "));
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::Usage(format!(
            "these paths make a key of {} bytes, longer than the limit of {} bytes; name the checkout with a KEY: `tasklock checkout KEY --path …`",
            key.len(),
            MAX_KEY_BYTES
        )));
    }
    Ok(key)
}

/// A command line to suggest to an agent or a person, written in this one place so that
/// the text in it (keys, paths, patterns: anyone's text) is read by a shell, and then by
/// tasklock, as itself: every operand and value is shell-quoted, operands go after `--`
/// when one begins with `-` (a key may be `--all`), and a value that begins with `-` is
/// joined to its option (`--path=-b`).
#[derive(Clone, Debug)]
pub struct Line {
    /// The subcommand and its flags, written as they are: `release --force`.
    sub: String,
    /// Keys, patterns, queues.
    operands: Vec<String>,
    /// Options after the operands, with their values: `--queue`, `--path P`.
    options: Vec<(String, Option<String>)>,
}

impl Line {
    /// `SUB`: a subcommand and its flags, fixed words of tasklock's own.
    pub fn new(sub: &str) -> Line {
        Line {
            sub: sub.to_string(),
            operands: Vec::new(),
            options: Vec::new(),
        }
    }

    /// An operand: a key, a pattern, a queue.
    pub fn arg(mut self, operand: &str) -> Line {
        self.operands.push(operand.to_string());
        self
    }

    /// A flag of tasklock's own after the operands: `--queue`.
    pub fn flag(mut self, name: &str) -> Line {
        self.options.push((name.to_string(), None));
        self
    }

    /// An option with a value: `--path P`, `--token N`.
    pub fn opt(mut self, name: &str, value: &str) -> Line {
        self.options
            .push((name.to_string(), Some(value.to_string())));
        self
    }

    /// No operand: the command names no key of its own (`checkout --path P`).
    pub fn has_operands(&self) -> bool {
        !self.operands.is_empty()
    }

    /// The words after `tasklock`, with the global options `globals` (`--dir D`,
    /// `--agent A`) after the command's own and before any `--`:
    /// `SUB OPERANDS OPTIONS GLOBALS`, or `SUB OPTIONS GLOBALS -- OPERANDS` when an
    /// operand begins with `-`.
    pub fn render(&self, globals: &[(&str, &str)]) -> String {
        use crate::error::shell_quote;
        use std::fmt::Write;
        let mut out = String::with_capacity(64);
        out.push_str(&self.sub);
        let dashed = self.operands.iter().any(|o| o.starts_with('-'));
        let operands = |out: &mut String| {
            for o in &self.operands {
                out.push(' ');
                out.push_str(&shell_quote(o));
            }
        };
        if !dashed {
            operands(&mut out);
        }
        for (n, v) in &self.options {
            match v {
                None => {
                    let _ = write!(out, " {n}");
                }
                Some(v) => {
                    let _ = write!(out, " {}", option(n, v));
                }
            }
        }
        for (n, v) in globals {
            let _ = write!(out, " {}", option(n, v));
        }
        if dashed {
            out.push_str(" --");
            operands(&mut out);
        }
        out
    }
}

/// An option and its value for a shell command line: `--name VALUE`, or `--name=VALUE`
/// when the value begins with `-` (so it is not read as an option), VALUE shell-quoted.
pub fn option(name: &str, value: &str) -> String {
    let v = crate::error::shell_quote(value);
    if value.starts_with('-') {
        format!("{name}={v}")
    } else {
        format!("{name} {v}")
    }
}

/// The `checkout` that asks for `key` with `paths` again: no key when it is the one a
/// checkout of those paths alone gets.
pub fn checkout_line(key: &str, paths: &[String]) -> Line {
    let mut line = Line::new("checkout");
    if paths.is_empty() || for_paths(paths).ok().as_deref() != Some(key) {
        line = line.arg(key);
    }
    for p in paths {
        line = line.opt("--path", p);
    }
    line
}

/// Check that a key is acceptable; the error says what is wrong.
pub fn validate(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::Usage("invalid key: a key must not be empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::Usage(format!(
            "invalid key: {} bytes is longer than the limit of {MAX_KEY_BYTES} bytes",
            key.len()
        )));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(Error::Usage(format!(
            "invalid key {key:?}: it contains the control character U+{:04X}; keys are text without control characters",
            c as u32
        )));
    }
    if let Some(c) = key.chars().find(|c| noncharacter(*c)) {
        return Err(Error::Usage(format!(
            "invalid key {key:?}: it contains the Unicode noncharacter U+{:04X}, which is not text (XML and other formats refuse it); keys are text",
            c as u32
        )));
    }
    if let Some(c) = key.chars().find(|c| deceptive(*c)) {
        return Err(Error::Usage(format!(
            "invalid key {key:?}: it contains the invisible or direction-changing character U+{:04X}, which would make it look like another key",
            c as u32
        )));
    }
    Ok(())
}

/// Keys given on a command line: each valid (else the first invalid one's usage error),
/// each once, in the order given.
pub fn validate_all(keys: Vec<String>) -> Result<Vec<String>> {
    for k in &keys {
        validate(k)?;
    }
    let mut seen = std::collections::HashSet::new();
    Ok(keys
        .into_iter()
        .filter(|k| seen.insert(k.clone()))
        .collect())
}

/// The file name under `keys/` for a valid key.
pub fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 8);
    for (i, b) in key.bytes().enumerate() {
        let plain = matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_') || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[(b >> 4) as usize]));
            out.push(char::from(HEX[(b & 15) as usize]));
        }
    }
    if out.len() <= MAX_PLAIN {
        return out;
    }
    let mut cut = HASHED_PREFIX;
    // Never cut an escape in half.
    if let Some(p) = out[cut - 2..cut].find('%') {
        cut = cut - 2 + p;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut hashed = String::with_capacity(cut + 33);
    hashed.push_str(&out[..cut]);
    hashed.push('~');
    for b in &digest[..16] {
        hashed.push(char::from(HEX[(b >> 4) as usize]));
        hashed.push(char::from(HEX[(b & 15) as usize]));
    }
    hashed
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn lines_never_let_a_key_or_a_value_be_read_as_an_option() {
        let globals = [("--dir", "-d"), ("--agent", "a b")];
        let line = Line::new("checkout").arg("k").flag("--queue");
        assert_eq!(
            line.render(&globals),
            "checkout k --queue --dir='-d' --agent 'a b'"
        );
        let line = Line::new("checkout").arg("--all").flag("--queue");
        assert_eq!(
            line.render(&globals),
            "checkout --queue --dir='-d' --agent 'a b' -- '--all'"
        );
        let line = Line::new("verify").arg("-x").opt("--token", "7");
        assert_eq!(line.render(&[]), "verify --token 7 -- '-x'");
        assert_eq!(
            checkout_line("k", &["-b".into(), "src".into()]).render(&[]),
            "checkout k --path='-b' --path src"
        );
        assert_eq!(option("--agent", "-s/a"), "--agent='-s/a'");
    }

    #[test]
    fn tricky_keys_are_distinct_and_safe() {
        let keys = [
            "a/b",
            "a_b",
            "a%2Fb",
            "a%2fb",
            "../x",
            "..",
            ".",
            "/etc/passwd",
            "A",
            "a",
            "ünïcödé",
            "github://acme/app/issues/42",
            "#44",
            "a~b",
            "a b",
            ".hidden",
            "-",
            "x.",
        ];
        let mut seen = HashSet::new();
        for k in keys {
            validate(k).unwrap();
            let e = encode(k);
            assert!(seen.insert(e.clone()), "collision for {k:?}: {e}");
            assert!(!e.contains('/') && e != "." && e != ".." && !e.starts_with('.'));
            assert!(!e.is_empty() && e.len() <= 255);
        }
    }

    #[test]
    fn long_keys_hash_without_colliding() {
        let a = "x".repeat(512);
        let mut b = "x".repeat(511);
        b.push('y');
        let (ea, eb) = (encode(&a), encode(&b));
        assert_ne!(ea, eb);
        assert!(ea.len() <= 200 && ea.contains('~'));
        let u = "é".repeat(256);
        let eu = encode(&u);
        assert!(eu.len() <= 200);
        let prefix = eu.split('~').next().unwrap();
        assert!(
            prefix.len().is_multiple_of(3),
            "escape cut in half: {prefix}"
        );
    }

    #[test]
    fn rejects_bad_keys() {
        assert!(validate("").is_err());
        assert!(validate(&"k".repeat(513)).is_err());
        assert!(validate("a\nb").is_err());
        assert!(validate("a\0b").is_err());
        assert!(validate("tab\there").is_err());
        assert!(validate(&"k".repeat(512)).is_ok());
        for bad in [
            "a\u{202E}b",
            "a\u{2066}b",
            "a\u{200B}b",
            "a\u{200D}b",
            "\u{FEFF}a",
        ] {
            let e = validate(bad).unwrap_err();
            assert!(e.to_string().contains("U+"), "{e}");
        }
        assert!(validate("a\u{2010}b").is_ok());
    }

    #[test]
    fn nfc_and_nfd_are_one_key() {
        let nfd = "cafe\u{301}";
        let nfc = "caf\u{e9}";
        assert_eq!(normalize(nfd), nfc);
        assert_eq!(normalize(nfc), nfc);
        assert_eq!(encode(&normalize(nfd)), encode(nfc));
    }
}

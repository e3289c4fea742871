//! Path checkouts: patterns over the files of a repository, how they are written, how
//! they are normalised, which files they match and whether two of them overlap.
//!
//! This module is self-contained: it knows nothing of the store or the commands. The
//! full description is in `docs/paths.md`; in short:
//!
//! - A pattern is a path relative to the top of the worktree, written with `/`. All
//!   worktrees of one repository have the same layout, so `src/a.rs` in a linked worktree
//!   and `src/a.rs` in the main one are the same pattern.
//! - Within a segment, `*` is any run of characters (possibly none), `?` one character,
//!   `[abc]`, `[a-z]`, `[!a]` (or `[^a]`) one character of a class, and `\x` the
//!   character `x` itself. A whole segment `**` is any number of whole segments,
//!   including none; `**` inside a longer segment is just `*`.
//! - **A plain path covers the file it names and the whole tree below it**: `src/a`
//!   covers the file `src/a` and, if `src/a` is a directory, everything in it. The same
//!   holds for any pattern whose last segment has no wildcard (`**/target`,
//!   `src/*/mod.rs`). This never depends on what is on disk, which differs between
//!   worktrees and changes over time, so a directory that appears after the checkout is
//!   still covered. `src/a`, `src/a/` and `src/a/**` are one pattern.
//! - **A pattern whose last segment has a wildcard matches file paths**: `src/*.rs`
//!   covers `src/x.rs`, not `src/x/y.rs` and not the inside of a directory called
//!   `src/d.rs`; `**/*.md` and `**/*.rs` never overlap. A trailing `/` asks for the trees
//!   below the matches: `src/*/` covers every directory in `src` and all it contains.
//!
//! [`overlaps`] is an exact decision procedure (a product of the two patterns'
//! segment automata, with each step's pair of segment globs intersected by a small
//! search of its own), so it is sound (never misses a file that could match both) and
//! it only says yes with a witness: [`overlap_witness`] returns a path that matches both.

use std::collections::VecDeque;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// The most segments a pattern may have (after normalisation), so that matching can
/// keep its states in one `u128`.
pub const MAX_SEGMENTS: usize = 120;
/// How many symbolic links are followed in a row before giving up (as Linux's ELOOP).
const MAX_LINKS: usize = 40;

/// Why a pattern or a file path was refused. All but [`PathError::Io`] are usage errors
/// (exit 64).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("invalid path: a path must not be empty")]
    Empty,
    #[error("invalid path {0:?}: {1} bytes is longer than the limit of {MAX_PATTERN_BYTES}")]
    TooLong(String, usize),
    #[error("invalid path {0:?}: more than {MAX_SEGMENTS} segments")]
    TooDeep(String),
    #[error(
        "invalid path {0:?}: it contains the control character U+{1:04X}; paths are text without control characters"
    )]
    Control(String, u32),
    #[error(
        "invalid path {0:?}: it contains the invisible or direction-changing character U+{1:04X}, which would make it look like another path"
    )]
    Deceptive(String, u32),
    #[error("invalid path {0:?}: `..` leaves the repository at {1}")]
    Escapes(String, String),
    #[error("invalid path {0:?}: it is outside the repository at {1}")]
    Outside(String, String),
    #[error(
        "invalid path {0:?}: the working directory {1} is outside the repository at {2}, so a relative path means nothing there"
    )]
    CwdOutside(String, String, String),
    #[error("invalid path {0:?}: {1} is a symbolic link to {2}, outside the repository at {3}")]
    SymlinkOut(String, String, String, String),
    #[error("invalid path {0:?}: `..` after a wildcard segment; write the path without it")]
    DotDotAfterGlob(String),
    #[error(
        "invalid path {0:?}: it names the repository itself; write `**` to check out the whole repository"
    )]
    RootItself(String),
    #[error(
        "invalid path {0:?}: `[` without a closing `]` in its segment (a class cannot contain `/`)"
    )]
    UnclosedClass(String),
    #[error("invalid path {0:?}: the range {1}-{2} in a class runs backwards")]
    BadRange(String, char, char),
    #[error("invalid path {0:?}: a `\\` at the end of a segment escapes nothing")]
    TrailingBackslash(String),
    #[error("invalid path {0:?}: the segment {1:?} can never be a file name")]
    DotSegment(String, String),
    #[error("invalid path {0:?}: {1} is not valid UTF-8")]
    NotUtf8(String, String),
    #[error("{0}: {1}")]
    Io(String, String),
}

impl From<PathError> for crate::error::Error {
    fn from(e: PathError) -> Self {
        match e {
            PathError::Io(path, msg) => crate::error::Error::Io {
                path: PathBuf::from(path),
                source: std::io::Error::other(msg),
            },
            other => crate::error::Error::Usage(other.to_string()),
        }
    }
}

/// One character of a segment glob.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// This character.
    Char(char),
    /// `?`: any one character.
    One,
    /// `*`: any run of characters, possibly empty.
    Star,
    /// `[...]`: one character of these sorted, merged, inclusive code-point ranges (a
    /// negated class is stored as its complement within [`UNIVERSE`]).
    Class(Vec<(u32, u32)>),
}

/// The characters a file name segment can contain: everything but NUL and `/` (and the
/// surrogate code points, which are not characters).
const UNIVERSE: &[(u32, u32)] = &[(1, 0x2E), (0x30, 0xD7FF), (0xE000, 0x10FFFF)];

/// One compiled segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    /// `**`: any number of whole segments, including none.
    Any,
    /// A segment glob; `lit` is its text when it has no wildcard.
    Glob {
        toks: Vec<Tok>,
        lit: Option<Box<str>>,
    },
}

impl Seg {
    fn lit(&self) -> Option<&str> {
        match self {
            Seg::Glob { lit, .. } => lit.as_deref(),
            Seg::Any => None,
        }
    }
}

/// A normalised, compiled path pattern.
#[derive(Debug, Clone)]
pub struct PathPattern {
    /// The normalised text: segments joined by `/`, escapes kept.
    text: String,
    /// The compiled segments, with no two [`Seg::Any`] in a row; a final [`Seg::Any`]
    /// when the pattern covers the tree below its matches.
    segs: Vec<Seg>,
}

impl PartialEq for PathPattern {
    /// Two patterns are equal when they match the same paths by the same compiled form
    /// (`src/a`, `src/a/` and `src/a/**` are equal).
    fn eq(&self, other: &Self) -> bool {
        self.segs == other.segs
    }
}
impl Eq for PathPattern {}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PathPattern {
    /// The normalised text of the pattern (relative to the worktree top, `/`-separated,
    /// escapes kept).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Compile an already normalised, repository-relative pattern (as stored in a
    /// record). `..`, `.` and empty segments are refused here, not collapsed: a stored
    /// pattern must already be in normal form. Use [`normalize`] for what people type.
    pub fn parse(text: &str) -> Result<PathPattern, PathError> {
        check_text(text)?;
        if text.starts_with('/') {
            return Err(PathError::Outside(text.into(), "/".into()));
        }
        // One trailing `/` marks a glob whose matches are trees.
        let (body, tree) = match text.strip_suffix('/') {
            Some(b) if !b.is_empty() => (b, true),
            _ => (text, false),
        };
        let mut raws = Vec::new();
        for raw in body.split('/') {
            match raw {
                "" | "." => return Err(PathError::DotSegment(text.into(), raw.into())),
                ".." => return Err(PathError::Escapes(text.into(), ".".into())),
                _ => raws.push(raw.to_string()),
            }
        }
        build(text, raws, tree)
    }

    /// Whether the pattern has no wildcard at all (a plain path: one file or one tree).
    pub fn is_literal(&self) -> bool {
        let Some((last, init)) = self.segs.split_last() else {
            return false;
        };
        *last == Seg::Any && !init.is_empty() && init.iter().all(|s| s.lit().is_some())
    }

    /// The leading wildcard-free segments, unescaped, joined by `/` (empty when the
    /// first segment has a wildcard).
    pub fn literal_prefix(&self) -> String {
        let lits: Vec<&str> = self.segs.iter().map_while(Seg::lit).collect();
        lits.join("/")
    }
}

// ---------------------------------------------------------------------------------------
// Parsing

fn check_text(input: &str) -> Result<(), PathError> {
    if input.is_empty() {
        return Err(PathError::Empty);
    }
    if input.len() > MAX_PATTERN_BYTES {
        return Err(PathError::TooLong(short(input), input.len()));
    }
    if let Some(c) = input.chars().find(|c| c.is_control()) {
        return Err(PathError::Control(input.into(), c as u32));
    }
    if let Some(c) = input.chars().find(|c| crate::key::deceptive(*c)) {
        return Err(PathError::Deceptive(input.into(), c as u32));
    }
    Ok(())
}

fn short(s: &str) -> String {
    let cut = (0..=64.min(s.len()))
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &s[..cut])
}

/// Compile one raw segment (escapes still in it).
fn parse_seg(whole: &str, raw: &str) -> Result<Seg, PathError> {
    if raw == "**" {
        return Ok(Seg::Any);
    }
    let mut toks = Vec::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => toks.push(Tok::Char(e)),
                None => return Err(PathError::TrailingBackslash(whole.into())),
            },
            '*' => {
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
            }
            '?' => toks.push(Tok::One),
            '[' => {
                let negated = matches!(chars.peek(), Some('!' | '^'));
                if negated {
                    chars.next();
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let Some(mut lo) = chars.next() else {
                        return Err(PathError::UnclosedClass(whole.into()));
                    };
                    if lo == ']' && !first {
                        break;
                    }
                    first = false;
                    if lo == '\\' {
                        lo = chars
                            .next()
                            .ok_or_else(|| PathError::UnclosedClass(whole.into()))?;
                    }
                    let mut hi = lo;
                    if chars.peek() == Some(&'-') {
                        let mut ahead = chars.clone();
                        ahead.next();
                        match ahead.next() {
                            Some(']') | None => {} // a trailing `-` is itself
                            Some(h) => {
                                chars.next();
                                chars.next();
                                hi = if h == '\\' {
                                    chars
                                        .next()
                                        .ok_or_else(|| PathError::UnclosedClass(whole.into()))?
                                } else {
                                    h
                                };
                                if hi < lo {
                                    return Err(PathError::BadRange(whole.into(), lo, hi));
                                }
                            }
                        }
                    }
                    ranges.push((lo as u32, hi as u32));
                }
                let set = normalize_ranges(ranges);
                let set = if negated {
                    complement(&set)
                } else {
                    intersect(&set, UNIVERSE)
                };
                toks.push(Tok::Class(set));
            }
            c => toks.push(Tok::Char(c)),
        }
    }
    let lit = toks
        .iter()
        .map(|t| match t {
            Tok::Char(c) => Some(*c),
            _ => None,
        })
        .collect::<Option<String>>();
    if let Some(l) = &lit
        && (l == "." || l == "..")
    {
        return Err(PathError::DotSegment(whole.into(), raw.into()));
    }
    Ok(Seg::Glob {
        toks,
        lit: lit.map(String::into_boxed_str),
    })
}

fn normalize_ranges(mut r: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    r.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (lo, hi) in r {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn intersect(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 { i += 1 } else { j += 1 }
    }
    out
}

fn complement(set: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut gaps = Vec::new();
    let mut next = 0u32;
    for &(lo, hi) in set {
        if lo > next {
            gaps.push((next, lo - 1));
        }
        next = hi.saturating_add(1);
    }
    if next <= 0x10FFFF {
        gaps.push((next, 0x10FFFF));
    }
    intersect(&gaps, UNIVERSE)
}

/// Compile normalised raw segments into a pattern.
///
/// A pattern whose last segment has no wildcard, or that was written with a trailing
/// `/`, covers the tree below each match: it gets a final [`Seg::Any`].
fn build(whole: &str, raws: Vec<String>, tree: bool) -> Result<PathPattern, PathError> {
    if raws.is_empty() {
        return Err(PathError::RootItself(whole.into()));
    }
    if raws.len() > MAX_SEGMENTS {
        return Err(PathError::TooDeep(short(whole)));
    }
    let mut segs: Vec<Seg> = Vec::with_capacity(raws.len() + 1);
    for raw in &raws {
        let seg = parse_seg(whole, raw)?;
        if seg == Seg::Any && segs.last() == Some(&Seg::Any) {
            continue;
        }
        segs.push(seg);
    }
    let mut text = raws.join("/");
    match segs.last() {
        Some(Seg::Any) => {}
        Some(last) if last.lit().is_some() => segs.push(Seg::Any),
        _ if tree => {
            segs.push(Seg::Any);
            text.push('/');
        }
        _ => {}
    }
    Ok(PathPattern { text, segs })
}

/// Write a file name so that the pattern syntax reads it as itself.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn has_wildcard(raw: &str) -> bool {
    let mut esc = false;
    for c in raw.chars() {
        if esc {
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if matches!(c, '*' | '?' | '[') {
            return true;
        }
    }
    false
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut esc = false;
    for c in raw.chars() {
        if !esc && c == '\\' {
            esc = true;
        } else {
            out.push(c);
            esc = false;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Normalisation

/// The roots a path is judged against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The top of the worktree containing the starting directory: patterns and files are
    /// relative to it.
    pub worktree: PathBuf,
    /// The top of the main worktree, shared by every worktree of the repository (where
    /// the shared `.locks/` lives).
    pub main: PathBuf,
}

/// The worktree top and the main worktree top for a directory inside a git repository,
/// found by reading `.git` files and directories (no `git` process: hooks must be fast).
pub fn roots(start: &Path) -> Option<Roots> {
    let worktree = start
        .ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())?
        .to_path_buf();
    let main = crate::discover::main_worktree_root(&worktree).unwrap_or_else(|| worktree.clone());
    Some(Roots { worktree, main })
}

/// Normalise a pattern as a person or agent typed it: relative to `cwd`, or absolute
/// inside `root` (the top of the worktree). The result is relative to `root`.
///
/// `.` and empty segments are dropped, `..` is applied lexically (and refused when it
/// leaves `root` or follows a wildcard), the text is put in NFC, control and invisible
/// characters are refused, and the symbolic links of the wildcard-free prefix are
/// resolved: one that leads outside `root` is refused, one that stays inside is replaced
/// by the path it leads to (an edit through the link changes that file). In a repository
/// that ignores case ([`ignores_case`]) the result is in lower case ([`fold_case`]), so
/// that checkouts, the edit hook and the commit guard all compare one form.
pub fn normalize(root: &Path, cwd: &Path, input: &str) -> Result<PathPattern, PathError> {
    let input = crate::key::normalize(input);
    check_text(&input)?;
    let root_str = root
        .to_str()
        .ok_or_else(|| PathError::NotUtf8(input.clone(), root.display().to_string()))?;
    let canon_root = root
        .canonicalize()
        .map_err(|e| PathError::Io(root_str.into(), e.to_string()))?;

    // The raw segments, from the root of the file system or of the repository.
    let absolute = input.starts_with('/');
    let mut stack: Vec<String> = Vec::new();
    if !absolute {
        stack = cwd_segments(&input, root, &canon_root, cwd)?;
    }
    for raw in input.split('/') {
        match raw {
            "" | "." => {}
            ".." => match stack.pop() {
                Some(prev) if has_wildcard(&prev) || prev == "**" => {
                    return Err(PathError::DotDotAfterGlob(input.clone()));
                }
                Some(_) => {}
                None if absolute => {} // `/..` is `/`
                None => return Err(PathError::Escapes(input.clone(), root_str.into())),
            },
            raw => stack.push(raw.to_string()),
        }
    }
    if absolute {
        stack = strip_root(&input, stack, root, &canon_root)?;
    }
    if stack.is_empty() {
        return Err(PathError::RootItself(input));
    }
    // Check the syntax before touching the disk.
    for raw in &stack {
        parse_seg(&input, raw)?;
    }
    let stack = resolve_links(&input, stack, &canon_root)?;
    let p = build(&input, stack, input.ends_with('/'))?;
    if !ignores_case(root) {
        return Ok(p);
    }
    // One name however it is cased: patterns and files are compared in lower case.
    PathPattern::parse(&fold_case(p.as_str())).or(Ok(p))
}

/// A path or pattern in the one case a case-insensitive repository compares in.
pub fn fold_case(s: &str) -> String {
    crate::key::normalize(&s.to_lowercase())
}

/// Does the repository whose worktree top is `root` ignore case in file names? Git's
/// `core.ignorecase` (set by `git init` and `git clone` on a case-insensitive file system,
/// as macOS's default is) says; outside a repository, no. Read once per process.
pub fn ignores_case(root: &Path) -> bool {
    static SEEN: std::sync::Mutex<Option<(PathBuf, bool)>> = std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((r, v)) = seen.as_ref()
        && r == root
    {
        return *v;
    }
    let v = crate::discover::git_common_dir(root)
        .and_then(|d| std::fs::read_to_string(d.join("config")).ok())
        .is_some_and(|text| config_ignorecase(&text));
    *seen = Some((root.to_path_buf(), v));
    v
}

/// `core.ignorecase` in the text of a git config file: a boolean as git reads one.
fn config_ignorecase(text: &str) -> bool {
    let mut in_core = false;
    let mut value = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest.split(']').next().unwrap_or_default().trim();
            in_core = name.eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core || line.starts_with(['#', ';']) {
            continue;
        }
        let (key, val) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (line, None),
        };
        if key.eq_ignore_ascii_case("ignorecase") {
            let val = val
                .map(|v| {
                    v.split(['#', ';'])
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .trim_matches('"')
                })
                .map(str::to_ascii_lowercase);
            value = matches!(val.as_deref(), None | Some("true" | "yes" | "on" | "1"));
        }
    }
    value
}

/// The working directory's segments below `root`, escaped.
fn cwd_segments(
    input: &str,
    root: &Path,
    canon_root: &Path,
    cwd: &Path,
) -> Result<Vec<String>, PathError> {
    let rel = match cwd.strip_prefix(root) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => {
            let canon_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
            canon_cwd
                .strip_prefix(canon_root)
                .map_err(|_| {
                    PathError::CwdOutside(
                        input.into(),
                        cwd.display().to_string(),
                        root.display().to_string(),
                    )
                })?
                .to_path_buf()
        }
    };
    let mut out: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => {
                let n = n
                    .to_str()
                    .ok_or_else(|| PathError::NotUtf8(input.into(), cwd.display().to_string()))?;
                out.push(escape(&crate::key::normalize(n)));
            }
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Remove the root's segments from an absolute pattern (given as its root or as the
/// root with its links resolved).
fn strip_root(
    input: &str,
    stack: Vec<String>,
    root: &Path,
    canon_root: &Path,
) -> Result<Vec<String>, PathError> {
    for r in [root, canon_root] {
        let Some(r) = r.to_str() else { continue };
        let rsegs: Vec<String> = r
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .map(|s| escape(&crate::key::normalize(s)))
            .collect();
        if stack.len() >= rsegs.len() && stack[..rsegs.len()] == rsegs[..] {
            return Ok(stack[rsegs.len()..].to_vec());
        }
    }
    Err(PathError::Outside(input.into(), root.display().to_string()))
}

/// Follow the symbolic links along the wildcard-free prefix of `stack`.
fn resolve_links(
    input: &str,
    stack: Vec<String>,
    canon_root: &Path,
) -> Result<Vec<String>, PathError> {
    let n_lit = stack
        .iter()
        .take_while(|r| *r != "**" && !has_wildcard(r))
        .count();
    let mut here = canon_root.to_path_buf();
    let mut resolved_upto = 0;
    for raw in &stack[..n_lit] {
        let next = here.join(unescape(raw));
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                let target =
                    follow(&next).map_err(|e| PathError::Io(next.display().to_string(), e))?;
                if !target.starts_with(canon_root) {
                    let shown = next.strip_prefix(canon_root).unwrap_or(&next);
                    return Err(PathError::SymlinkOut(
                        input.into(),
                        shown.display().to_string(),
                        target.display().to_string(),
                        canon_root.display().to_string(),
                    ));
                }
                here = target;
            }
            Ok(_) => here = next,
            Err(_) => break, // does not exist (yet): nothing to resolve below it
        }
        resolved_upto += 1;
    }
    let rel = here.strip_prefix(canon_root).unwrap_or(Path::new(""));
    let mut out: Vec<String> = Vec::new();
    for c in rel.components() {
        if let Component::Normal(n) = c {
            let n = n
                .to_str()
                .ok_or_else(|| PathError::NotUtf8(input.into(), here.display().to_string()))?;
            out.push(escape(&crate::key::normalize(n)));
        }
    }
    out.extend(stack[resolved_upto..].iter().cloned());
    if out.is_empty() {
        return Err(PathError::RootItself(input.into()));
    }
    Ok(out)
}

/// Where a symbolic link finally leads, made absolute and lexically clean; a chain
/// whose end does not exist is followed as far as it goes.
fn follow(link: &Path) -> Result<PathBuf, String> {
    if let Ok(p) = link.canonicalize() {
        return Ok(p);
    }
    let mut cur = link.to_path_buf();
    for _ in 0..MAX_LINKS {
        let t = match std::fs::read_link(&cur) {
            Ok(t) => t,
            Err(_) => return Ok(lexical(&cur)),
        };
        let base = cur.parent().map(Path::to_path_buf).unwrap_or_default();
        // Resolve the existing part of the target's parent, so a link in it counts.
        let joined = lexical(&base.join(t));
        cur = match (joined.parent(), joined.file_name()) {
            (Some(p), Some(f)) => p.canonicalize().unwrap_or_else(|_| p.to_path_buf()).join(f),
            _ => joined,
        };
    }
    Err("too many levels of symbolic links".into())
}

fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// `path` made absolute from `cwd` with its `.` and `..` applied to the text, as the
/// clients' tools do before the kernel sees the path (Node's `path.resolve`, Codex's
/// absolute paths): with `l -> a/b`, `l/../src/x` is `<cwd>/src/x` here, while the kernel
/// takes it to `a/src/x`. `None` when the result is not UTF-8.
pub fn lexical_file(cwd: &Path, path: &str) -> Option<String> {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else if cwd.is_absolute() {
        cwd.join(path)
    } else {
        std::env::current_dir().ok()?.join(cwd).join(path)
    };
    lexical(&joined).into_os_string().into_string().ok()
}

/// Normalise the path of one file (as an edit hook or a commit guard sees it) to the
/// form [`matches`] takes: relative to the top of its worktree, `/`-separated, NFC (and
/// folded where the repository ignores case), every link resolved. Wildcard characters
/// in it are just characters. See [`locate_file`].
pub fn normalize_file(root: &Path, cwd: &Path, path: &str) -> Result<String, PathError> {
    locate_file(root, cwd, path).map(|(_, rel)| rel)
}

/// Where the file an edit names really is: the top of the worktree that holds it and its
/// path there, in the form [`matches`] takes.
///
/// The path (relative to `cwd`, or absolute) is resolved on disk as the kernel resolves
/// it for the edit: every symbolic link along it, the last one too, and each `..` after
/// the directory it follows is known (`/elsewhere/alias/x` with `alias -> <repo>/src` is
/// `src/x`; so is `../<repo>/src/x` from next to the repository). From the first missing
/// segment on it is taken as written. The file is judged in `root` (the caller's
/// worktree) when it is there, else in the other worktree of the same repository that
/// holds it (all worktrees share one layout); anywhere else it is [`PathError::Outside`].
///
/// Unlike a pattern, a file name may hold any character but NUL: control and
/// direction-changing characters are kept (a file called `a\tb` is still a file someone
/// can edit and commit).
pub fn locate_file(root: &Path, cwd: &Path, path: &str) -> Result<(PathBuf, String), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > MAX_PATTERN_BYTES {
        return Err(PathError::TooLong(short(path), path.len()));
    }
    if path.contains('\0') {
        return Err(PathError::Control(path.into(), 0));
    }
    let real = real_path(cwd, path)?;
    let canon = |r: &Path| {
        r.canonicalize()
            .map_err(|e| PathError::Io(r.display().to_string(), e.to_string()))
    };
    let canon_root = canon(root)?;
    if let Ok(rel) = real.strip_prefix(&canon_root) {
        return Ok((root.to_path_buf(), file_rel(root, rel, path)?));
    }
    // Another worktree of the same repository?
    let main =
        |r: &Path| crate::discover::main_worktree_root(r).and_then(|m| m.canonicalize().ok());
    if let Some(other) = roots(&real)
        && main(&other.worktree).is_some()
        && main(&other.worktree) == main(root)
        && let Ok(top) = canon(&other.worktree)
        && let Ok(rel) = real.strip_prefix(&top)
    {
        let rel = file_rel(&other.worktree, rel, path)?;
        return Ok((other.worktree, rel));
    }
    Err(PathError::Outside(path.into(), root.display().to_string()))
}

/// `path` made absolute from `cwd` and resolved as `realpath` does, except that a tail
/// that does not exist (yet) is kept as written.
fn real_path(cwd: &Path, path: &str) -> Result<PathBuf, PathError> {
    let mut here = if path.starts_with('/') {
        PathBuf::from("/")
    } else {
        cwd.canonicalize().unwrap_or_else(|_| lexical(cwd))
    };
    let parts = |p: &Path| -> Vec<std::ffi::OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect()
    };
    let mut todo: VecDeque<std::ffi::OsString> = parts(Path::new(path)).into();
    let mut missing = false;
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            here.pop();
            continue;
        }
        let next = here.join(&part);
        if missing {
            here = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(PathError::Io(
                        path.into(),
                        "too many levels of symbolic links".into(),
                    ));
                }
                let target = std::fs::read_link(&next)
                    .map_err(|e| PathError::Io(next.display().to_string(), e.to_string()))?;
                if target.is_absolute() {
                    here = PathBuf::from("/");
                }
                for p in parts(&target).into_iter().rev() {
                    todo.push_front(p);
                }
            }
            Ok(_) => here = next,
            Err(_) => {
                missing = true;
                here = next;
            }
        }
    }
    Ok(here)
}

/// A file's path below its worktree top `root`, as text: `/`-separated, NFC, folded
/// where the repository ignores case.
fn file_rel(root: &Path, rel: &Path, input: &str) -> Result<String, PathError> {
    let mut segs: Vec<String> = Vec::new();
    for c in rel.components() {
        if let Component::Normal(n) = c {
            let n = n
                .to_str()
                .ok_or_else(|| PathError::NotUtf8(input.into(), rel.display().to_string()))?;
            segs.push(n.to_string());
        }
    }
    if segs.is_empty() {
        return Err(PathError::RootItself(input.into()));
    }
    let text = crate::key::normalize(&segs.join("/"));
    Ok(if ignores_case(root) {
        fold_case(&text)
    } else {
        text
    })
}

// ---------------------------------------------------------------------------------------
// Matching

fn tok_has(t: &Tok, c: char) -> bool {
    match t {
        Tok::Char(x) => *x == c,
        Tok::One => c != '/' && c != '\0',
        Tok::Star => true,
        Tok::Class(set) => {
            let c = c as u32;
            set.iter().any(|&(lo, hi)| lo <= c && c <= hi)
        }
    }
}

/// Does one segment glob match one segment? Greedy with one backtrack point per `*`,
/// which is exact for globs whose only variable-length token is `*`.
fn seg_match(toks: &[Tok], s: &str) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut back: Option<(usize, usize)> = None;
    loop {
        let c = s[i..].chars().next();
        match (toks.get(p), c) {
            (Some(Tok::Star), _) => {
                back = Some((p, i));
                p += 1;
                continue;
            }
            (Some(t), Some(c)) if tok_has(t, c) => {
                p += 1;
                i += c.len_utf8();
                continue;
            }
            (None, None) => return true,
            _ => {}
        }
        // Mismatch: let the last `*` take one more character.
        match back {
            Some((bp, bi)) => match s[bi..].chars().next() {
                Some(c) => {
                    let ni = bi + c.len_utf8();
                    back = Some((bp, ni));
                    p = bp + 1;
                    i = ni;
                }
                None => return false,
            },
            None => return false,
        }
    }
}

fn seg_matches(seg: &Seg, s: &str) -> bool {
    match seg {
        Seg::Any => true,
        Seg::Glob { lit: Some(l), .. } => **l == *s,
        Seg::Glob { toks, .. } => seg_match(toks, s),
    }
}

/// Does the pattern cover this file? `file` is relative to the worktree top,
/// `/`-separated and in NFC, as [`normalize_file`] gives it.
pub fn matches(p: &PathPattern, file: &str) -> bool {
    let n = p.segs.len();
    debug_assert!(n <= 127);
    let accept = 1u128 << n;
    let closure = |mut st: u128| {
        for (i, s) in p.segs.iter().enumerate() {
            if *s == Seg::Any && st & (1 << i) != 0 {
                st |= 1 << (i + 1);
            }
        }
        st
    };
    let mut st = closure(1);
    let mut any = false;
    for part in file.split('/').filter(|s| !s.is_empty()) {
        any = true;
        let mut next = 0u128;
        let mut live = st;
        while live != 0 {
            let i = live.trailing_zeros() as usize;
            live &= live - 1;
            if i >= n {
                continue;
            }
            match &p.segs[i] {
                Seg::Any => next |= 1 << i,
                seg => {
                    if seg_matches(seg, part) {
                        next |= 1 << (i + 1);
                    }
                }
            }
        }
        st = closure(next);
        if st == 0 {
            return false;
        }
        // The trailing `**` is reached: everything below matches.
        if st & (1 << (n - 1)) != 0 && p.segs[n - 1] == Seg::Any {
            return true;
        }
    }
    any && st & accept != 0
}

// ---------------------------------------------------------------------------------------
// Overlap

/// The witness automaton for one segment: a file name segment is not empty, `.` or `..`.
const W_EMPTY: u8 = 0;
const W_DOT: u8 = 1;
const W_DOTDOT: u8 = 2;
const W_OK: u8 = 3;

fn w_step(w: u8, dot: bool) -> u8 {
    match (w, dot) {
        (W_EMPTY, true) => W_DOT,
        (W_DOT, true) => W_DOTDOT,
        _ => W_OK,
    }
}

/// The characters one token accepts, as ranges.
fn tok_set(t: &Tok) -> std::borrow::Cow<'_, [(u32, u32)]> {
    match t {
        Tok::Char(c) => std::borrow::Cow::Owned(vec![(*c as u32, *c as u32)]),
        Tok::One | Tok::Star => std::borrow::Cow::Borrowed(UNIVERSE),
        Tok::Class(set) => std::borrow::Cow::Borrowed(set),
    }
}

/// Of the characters in both sets: is `.` one, and which other one (preferring `x`)?
fn common(a: &[(u32, u32)], b: &[(u32, u32)]) -> (bool, Option<char>) {
    let both = intersect(a, b);
    let has = |c: u32| both.iter().any(|&(lo, hi)| lo <= c && c <= hi);
    let dot = has('.' as u32);
    let other = if has('x' as u32) {
        Some('x')
    } else {
        both.iter().find_map(|&(lo, hi)| {
            (lo..=hi.min(lo + 2))
                .find(|&c| c != '.' as u32)
                .and_then(char::from_u32)
        })
    };
    (dot, other)
}

/// A segment both globs match (not empty, `.` or `..`), if there is one: a
/// breadth-first search over (position in a, position in b, witness state), so the
/// answer is exact and the witness is a shortest one.
fn seg_witness(a: &[Tok], b: &[Tok]) -> Option<String> {
    let (la, lb) = (a.len(), b.len());
    let idx = |p: usize, q: usize, w: u8| ((p * (lb + 1)) + q) * 4 + w as usize;
    let size = (la + 1) * (lb + 1) * 4;
    // parent[state] = (previous state, character consumed, if any)
    let mut parent: Vec<Option<(usize, Option<char>)>> = vec![None; size];
    let start = idx(0, 0, W_EMPTY);
    parent[start] = Some((usize::MAX, None));
    let mut queue = VecDeque::from([(0usize, 0usize, W_EMPTY)]);
    while let Some((p, q, w)) = queue.pop_front() {
        let here = idx(p, q, w);
        if p == la && q == lb && w == W_OK {
            let mut out = Vec::new();
            let mut s = here;
            while let Some((prev, c)) = parent[s] {
                if prev == usize::MAX {
                    break;
                }
                out.extend(c);
                s = prev;
            }
            out.reverse();
            return Some(out.into_iter().collect());
        }
        let mut visit = |p: usize, q: usize, w: u8, c: Option<char>, queue: &mut VecDeque<_>| {
            let s = idx(p, q, w);
            if parent[s].is_none() {
                parent[s] = Some((here, c));
                queue.push_back((p, q, w));
            }
        };
        if a.get(p) == Some(&Tok::Star) {
            visit(p + 1, q, w, None, &mut queue);
        }
        if b.get(q) == Some(&Tok::Star) {
            visit(p, q + 1, w, None, &mut queue);
        }
        if let (Some(ta), Some(tb)) = (a.get(p), b.get(q)) {
            let np = if *ta == Tok::Star { p } else { p + 1 };
            let nq = if *tb == Tok::Star { q } else { q + 1 };
            let (dot, other) = common(&tok_set(ta), &tok_set(tb));
            if dot {
                visit(np, nq, w_step(w, true), Some('.'), &mut queue);
            }
            if let Some(c) = other {
                visit(np, nq, w_step(w, false), Some(c), &mut queue);
            }
        }
    }
    None
}

/// A segment that both compiled segments match, if any.
fn pair_witness(a: &Seg, b: &Seg) -> Option<String> {
    const STAR: &[Tok] = &[Tok::Star];
    match (a, b) {
        (Seg::Any, Seg::Any) => Some("x".into()),
        (Seg::Glob { lit: Some(l), .. }, other) | (other, Seg::Glob { lit: Some(l), .. }) => {
            seg_matches(other, l).then(|| l.to_string())
        }
        (Seg::Any, Seg::Glob { toks, .. }) | (Seg::Glob { toks, .. }, Seg::Any) => {
            seg_witness(toks, STAR)
        }
        (Seg::Glob { toks: x, .. }, Seg::Glob { toks: y, .. }) => seg_witness(x, y),
    }
}

/// A path both patterns cover, if there is one. The search runs over pairs of
/// positions in the two segment lists: `**` may be skipped, or consume one segment and
/// stay; a segment glob consumes one segment and moves on; a step where both consume
/// is possible exactly when some one segment matches both sides, which
/// [`pair_witness`] decides. Every path both patterns match is a path through this
/// product, and every path through it is built from such segments, so the answer is
/// exact.
pub fn overlap_witness(a: &PathPattern, b: &PathPattern) -> Option<String> {
    let (na, nb) = (a.segs.len(), b.segs.len());
    // state = (i, j, consumed at least one segment)
    let idx = |i: usize, j: usize, ne: bool| ((i * (nb + 1)) + j) * 2 + ne as usize;
    let size = (na + 1) * (nb + 1) * 2;
    let mut parent: Vec<Option<(usize, Option<usize>)>> = vec![None; size];
    let mut compat: HashMap<(usize, usize), Option<String>> = HashMap::new();
    let mut segs_out: Vec<String> = Vec::new(); // witness segments, referred to by index
    let start = idx(0, 0, false);
    parent[start] = Some((usize::MAX, None));
    let mut queue = VecDeque::from([(0usize, 0usize, false)]);
    while let Some((i, j, ne)) = queue.pop_front() {
        let here = idx(i, j, ne);
        if i == na && j == nb && ne {
            let mut out = Vec::new();
            let mut s = here;
            while let Some((prev, seg)) = parent[s] {
                if prev == usize::MAX {
                    break;
                }
                if let Some(k) = seg {
                    out.push(segs_out[k].clone());
                }
                s = prev;
            }
            out.reverse();
            return Some(out.join("/"));
        }
        let mut visit = |i: usize, j: usize, ne: bool, seg: Option<usize>, q: &mut VecDeque<_>| {
            let s = idx(i, j, ne);
            if parent[s].is_none() {
                parent[s] = Some((here, seg));
                q.push_back((i, j, ne));
            }
        };
        if a.segs.get(i) == Some(&Seg::Any) {
            visit(i + 1, j, ne, None, &mut queue);
        }
        if b.segs.get(j) == Some(&Seg::Any) {
            visit(i, j + 1, ne, None, &mut queue);
        }
        if let (Some(sa), Some(sb)) = (a.segs.get(i), b.segs.get(j)) {
            let w = compat
                .entry((i, j))
                .or_insert_with(|| pair_witness(sa, sb))
                .clone();
            if let Some(w) = w {
                segs_out.push(w);
                let ni = if *sa == Seg::Any { i } else { i + 1 };
                let nj = if *sb == Seg::Any { j } else { j + 1 };
                visit(ni, nj, true, Some(segs_out.len() - 1), &mut queue);
            }
        }
    }
    None
}

/// A set of states for the overlap searches: on the stack when small.
enum Bits {
    Small([u64; 4]),
    Big(Vec<u64>),
}

impl Bits {
    fn new(n: usize) -> Bits {
        if n <= 256 {
            Bits::Small([0; 4])
        } else {
            Bits::Big(vec![0; n.div_ceil(64)])
        }
    }
    /// Set bit `i`; true when it was not set before.
    fn insert(&mut self, i: usize) -> bool {
        let words = match self {
            Bits::Small(w) => &mut w[..],
            Bits::Big(w) => &mut w[..],
        };
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let fresh = words[w] & b == 0;
        words[w] |= b;
        fresh
    }
}

/// Of the characters in both sets: is `.` one, and is another one? No allocation.
fn common_kinds(a: &[(u32, u32)], b: &[(u32, u32)]) -> (bool, bool) {
    let (mut i, mut j) = (0, 0);
    let (mut dot, mut other) = (false, false);
    let d = '.' as u32;
    while i < a.len() && j < b.len() && !(dot && other) {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            let has_dot = lo <= d && d <= hi;
            dot |= has_dot;
            other |= !(has_dot && lo == hi);
        }
        if a[i].1 < b[j].1 { i += 1 } else { j += 1 }
    }
    (dot, other)
}

/// The characters one token accepts, as ranges, without allocating (`buf` holds a
/// single character's range).
fn tok_slice<'a>(t: &'a Tok, buf: &'a mut [(u32, u32); 1]) -> &'a [(u32, u32)] {
    match t {
        Tok::Char(c) => {
            buf[0] = (*c as u32, *c as u32);
            &buf[..]
        }
        Tok::One | Tok::Star => UNIVERSE,
        Tok::Class(s) => s,
    }
}

/// As [`seg_witness`], answering only whether there is one.
fn seg_inter(a: &[Tok], b: &[Tok]) -> bool {
    let (la, lb) = (a.len(), b.len());
    let idx = |p: usize, q: usize, w: u8| ((p * (lb + 1)) + q) * 4 + w as usize;
    let mut seen = Bits::new((la + 1) * (lb + 1) * 4);
    let mut stack: Vec<(usize, usize, u8)> = Vec::with_capacity(16);
    seen.insert(idx(0, 0, W_EMPTY));
    stack.push((0, 0, W_EMPTY));
    while let Some((p, q, w)) = stack.pop() {
        if p == la && q == lb && w == W_OK {
            return true;
        }
        let mut push = |p: usize, q: usize, w: u8, stack: &mut Vec<_>| {
            if seen.insert(idx(p, q, w)) {
                stack.push((p, q, w));
            }
        };
        if a.get(p) == Some(&Tok::Star) {
            push(p + 1, q, w, &mut stack);
        }
        if b.get(q) == Some(&Tok::Star) {
            push(p, q + 1, w, &mut stack);
        }
        if let (Some(ta), Some(tb)) = (a.get(p), b.get(q)) {
            let np = if *ta == Tok::Star { p } else { p + 1 };
            let nq = if *tb == Tok::Star { q } else { q + 1 };
            let (mut ba, mut bb) = ([(0, 0)], [(0, 0)]);
            let (dot, other) = common_kinds(tok_slice(ta, &mut ba), tok_slice(tb, &mut bb));
            if dot {
                push(np, nq, w_step(w, true), &mut stack);
            }
            if other {
                push(np, nq, w_step(w, false), &mut stack);
            }
        }
    }
    false
}

/// Is there one segment both compiled segments match?
fn pair_ok(a: &Seg, b: &Seg) -> bool {
    const STAR: &[Tok] = &[Tok::Star];
    match (a, b) {
        (Seg::Any, Seg::Any) => true,
        (Seg::Glob { lit: Some(l), .. }, other) | (other, Seg::Glob { lit: Some(l), .. }) => {
            seg_matches(other, l)
        }
        (Seg::Any, Seg::Glob { toks, .. }) | (Seg::Glob { toks, .. }, Seg::Any) => {
            seg_inter(toks, STAR)
        }
        (Seg::Glob { toks: x, .. }, Seg::Glob { toks: y, .. }) => seg_inter(x, y),
    }
}

/// Could some file be covered by both patterns? Exact (the same search as
/// [`overlap_witness`], without building the witness), hence sound: it never answers
/// no when such a file could exist.
pub fn overlaps(a: &PathPattern, b: &PathPattern) -> bool {
    // Fast path: the literal segments both start with must agree.
    for (x, y) in a.segs.iter().zip(&b.segs) {
        match (x.lit(), y.lit()) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(_), Some(_)) => return false,
            _ => break,
        }
    }
    let (na, nb) = (a.segs.len(), b.segs.len());
    let idx = |i: usize, j: usize, ne: bool| ((i * (nb + 1)) + j) * 2 + ne as usize;
    let mut seen = Bits::new((na + 1) * (nb + 1) * 2);
    let mut stack: Vec<(usize, usize, bool)> = Vec::with_capacity(16);
    seen.insert(idx(0, 0, false));
    stack.push((0, 0, false));
    while let Some((i, j, ne)) = stack.pop() {
        if i == na && j == nb && ne {
            return true;
        }
        let mut push = |i: usize, j: usize, ne: bool, stack: &mut Vec<_>| {
            if seen.insert(idx(i, j, ne)) {
                stack.push((i, j, ne));
            }
        };
        if a.segs.get(i) == Some(&Seg::Any) {
            push(i + 1, j, ne, &mut stack);
        }
        if b.segs.get(j) == Some(&Seg::Any) {
            push(i, j + 1, ne, &mut stack);
        }
        if let (Some(sa), Some(sb)) = (a.segs.get(i), b.segs.get(j))
            && pair_ok(sa, sb)
        {
            let ni = if *sa == Seg::Any { i } else { i + 1 };
            let nj = if *sb == Seg::Any { j } else { j + 1 };
            push(ni, nj, true, &mut stack);
        }
    }
    false
}

// ---------------------------------------------------------------------------------------
// Many patterns

/// Patterns held at once, indexed by their literal prefix (the leading segments without
/// a wildcard), so that a file or a new pattern is compared only with the patterns whose
/// literal prefix is on its path: a file `a/b/c` meets the patterns with prefix ``, `a`,
/// `a/b` or `a/b/c`; a new pattern with prefix `a/b` meets those and the ones below
/// `a/b/` (a range of the ordered map). A pattern starting with a wildcard is compared
/// with everything.
#[derive(Debug, Default, Clone)]
pub struct PatternSet {
    pats: Vec<PathPattern>,
    by_prefix: BTreeMap<String, Vec<usize>>,
}

impl PatternSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a pattern; returns its index.
    pub fn insert(&mut self, p: PathPattern) -> usize {
        let i = self.pats.len();
        self.by_prefix
            .entry(p.literal_prefix())
            .or_default()
            .push(i);
        self.pats.push(p);
        i
    }

    pub fn len(&self) -> usize {
        self.pats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pats.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&PathPattern> {
        self.pats.get(i)
    }

    /// The patterns filed under the prefixes of `path` (the empty one, each `/`
    /// boundary, and `path` itself).
    fn on_path<'a>(&'a self, path: &'a str) -> impl Iterator<Item = usize> + 'a {
        std::iter::once("")
            .chain(path.match_indices('/').map(|(k, _)| &path[..k]))
            .chain(std::iter::once(path))
            .filter_map(|k| self.by_prefix.get(k))
            .flatten()
            .copied()
    }

    /// The indices of the patterns that cover `file` (normalised as for [`matches`]).
    pub fn matching(&self, file: &str) -> Vec<usize> {
        if file.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<usize> = self
            .on_path(file)
            .filter(|&i| matches(&self.pats[i], file))
            .collect();
        out.sort_unstable();
        out
    }

    /// The indices of the patterns that overlap `p`.
    pub fn overlapping(&self, p: &PathPattern) -> Vec<usize> {
        let prefix = p.literal_prefix();
        let mut out: Vec<usize> = if prefix.is_empty() {
            (0..self.pats.len())
                .filter(|&i| overlaps(&self.pats[i], p))
                .collect()
        } else {
            let below = format!("{prefix}/");
            let under = self
                .by_prefix
                .range(below.clone()..)
                .take_while(|(k, _)| k.starts_with(&below))
                .flat_map(|(_, v)| v.iter().copied());
            self.on_path(&prefix)
                .chain(under)
                .filter(|&i| overlaps(&self.pats[i], p))
                .collect()
        };
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod case_tests {
    use super::*;

    #[test]
    fn core_ignorecase_is_read_as_git_reads_a_boolean() {
        assert!(config_ignorecase("[core]\n\tignorecase = true\n"));
        assert!(config_ignorecase(
            "[CORE]\n  IgnoreCase=Yes ; set by clone\n"
        ));
        assert!(config_ignorecase("[core]\n\tignorecase\n"));
        assert!(!config_ignorecase("[core]\n\tignorecase = false\n"));
        assert!(!config_ignorecase("[user]\n\tignorecase = true\n"));
        assert!(!config_ignorecase("[core]\n\tbare = false\n"));
        assert!(!config_ignorecase(
            "[core]\n\tignorecase = true\n\tignorecase = false\n"
        ));
    }

    #[test]
    fn folding_keeps_the_pattern_and_only_changes_case() {
        assert_eq!(fold_case("Src/Parser/**/*.RS"), "src/parser/**/*.rs");
        let p = PathPattern::parse(&fold_case("Docs/[A-C]*.MD")).unwrap();
        assert!(matches(&p, "docs/b1.md"));
        assert!(!matches(&p, "docs/d1.md"));
    }
}

//! Path patterns: syntax, normalisation (every refusal), matching and overlap on
//! hand-picked cases, and a seeded property test against a brute-force reference.

use std::path::Path;

use tasklock::paths::{
    PathError, PathPattern, PatternSet, matches, normalize, normalize_file, overlap_witness,
    overlaps, roots,
};

fn pat(s: &str) -> PathPattern {
    PathPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ov(a: &str, b: &str) -> bool {
    let (pa, pb) = (pat(a), pat(b));
    let r = overlaps(&pa, &pb);
    assert_eq!(
        r,
        overlaps(&pb, &pa),
        "overlap of {a} and {b} is not symmetric"
    );
    r
}

// ----------------------------------------------------------------------------------
// Syntax and matching

#[test]
fn plain_paths_cover_the_tree_below() {
    let p = pat("src/a");
    assert!(matches(&p, "src/a"));
    assert!(matches(&p, "src/a/x.rs"));
    assert!(matches(&p, "src/a/b/c/d"));
    assert!(!matches(&p, "src/ab"));
    assert!(!matches(&p, "src"));
    assert!(!matches(&p, "src/b/a"));
    assert_eq!(pat("src/a"), pat("src/a/**"));
    assert_eq!(pat("src/a"), pat("src/a/**/**"));
    assert!(p.is_literal());
    assert!(!pat("src/*").is_literal());
    assert_eq!(pat("src/a/*.rs").literal_prefix(), "src/a");
}

#[test]
fn wildcards_within_a_segment() {
    let p = pat("src/*.rs");
    assert!(matches(&p, "src/x.rs"));
    assert!(matches(&p, "src/.rs"));
    assert!(!matches(&p, "src/x.rsx"));
    assert!(!matches(&p, "src/a/x.rs"));
    assert!(
        !matches(&p, "src/dir.rs/inner"),
        "a glob matches files, not trees"
    );
    let t = pat("src/*.rs/");
    assert!(matches(&t, "src/dir.rs/inner") && matches(&t, "src/x.rs"));
    assert_eq!(t.as_str(), "src/*.rs/");
    assert!(
        matches(&pat("src/*/mod.rs"), "src/a/mod.rs/x"),
        "literal last: a tree"
    );
    let q = pat("a?c");
    assert!(matches(&q, "abc") && !matches(&q, "ac") && !matches(&q, "abbc"));
    let c = pat("[a-c]x[!0-9]");
    assert!(matches(&c, "bxz") && !matches(&c, "dxz") && !matches(&c, "bx5"));
    let c = pat("[]]");
    assert!(matches(&c, "]"));
    let c = pat("[a-]");
    assert!(matches(&c, "-") && matches(&c, "a") && !matches(&c, "b"));
    let e = pat(r"a\*b");
    assert!(matches(&e, "a*b") && !matches(&e, "axb"));
    assert!(e.is_literal());
    assert!(matches(&pat("a**b"), "axyzb"), "** inside a segment is *");
    assert!(!matches(&pat("a**b"), "ax/yb"));
}

#[test]
fn double_star_is_any_number_of_segments() {
    let p = pat("**/*.md");
    assert!(matches(&p, "x.md"));
    assert!(matches(&p, "docs/x.md"));
    assert!(matches(&p, "a/b/c/x.md"));
    assert!(!matches(&p, "a/b/c/x.rs"));
    let q = pat("src/**/mod.rs");
    assert!(matches(&q, "src/mod.rs"));
    assert!(matches(&q, "src/a/b/mod.rs"));
    assert!(!matches(&q, "mod.rs"));
    let all = pat("**");
    assert!(matches(&all, "anything") && matches(&all, "a/b/c"));
    assert!(!matches(&all, ""));
}

#[test]
fn syntax_errors_are_clear() {
    let cases: &[(&str, &str)] = &[
        ("a/[bc", "closing `]`"),
        ("a/[b/c]", "closing `]`"),
        ("a/[z-a]", "runs backwards"),
        (r"a/b\", "escapes nothing"),
        (r"a/\.", "never be a file name"),
        ("", "must not be empty"),
        ("a\u{7}b", "control character U+0007"),
        ("a\u{202E}b", "U+202E"),
        ("/etc", "outside the repository"),
        ("a/../b", "leaves the repository"),
        ("a//b", "never be a file name"),
    ];
    for (input, needle) in cases {
        let e = PathPattern::parse(input).unwrap_err();
        assert!(e.to_string().contains(needle), "{input:?}: {e}");
        // Usage errors: exit 64.
        assert_eq!(tasklock::error::Error::from(e).exit_code(), 64);
    }
    let deep = vec!["a"; 200].join("/");
    assert!(matches!(
        PathPattern::parse(&deep),
        Err(PathError::TooDeep(_))
    ));
    let long = "a".repeat(5000);
    assert!(matches!(
        PathPattern::parse(&long),
        Err(PathError::TooLong(..))
    ));
}

// ----------------------------------------------------------------------------------
// Overlap, hand-picked

#[test]
fn overlap_hand_picked() {
    let yes = [
        ("src/a/**", "src/a/x.rs"),
        ("src/a", "src/a/x.rs"),
        ("src/*.rs", "src/**/mod.rs"),
        ("**/*.md", "docs/x.md"),
        ("a/*/c", "a/b/*"),
        ("src", "src/*/deep/**/x"),
        ("**", "x"),
        ("a*", "*b"),
        ("a*b*", "*ba*"),
        ("[ab]x", "?x"),
        ("[!a]", "[a-c]"),
        ("**/a/**/b", "**/b/**/a"),
        ("src/*.rs/", "src/dir.rs/inner.txt"),
        ("x/.*", "x/.?"),
        ("*/", "anything/at/all"),
        ("**/target", "a/*/x.rs"),
    ];
    for (a, b) in yes {
        assert!(ov(a, b), "{a} and {b} should overlap");
        let w = overlap_witness(&pat(a), &pat(b)).unwrap();
        assert!(
            matches(&pat(a), &w) && matches(&pat(b), &w),
            "{a} / {b}: witness {w}"
        );
    }
    let no = [
        ("src/a", "src/b"),
        ("src/a", "src/ab"),
        ("src/*.rs", "src/*.md"),
        ("src/*.rs", "tests/**"),
        ("a/*/c", "a/*/d"),
        ("a?", "a??"),
        ("[ab]", "[cd]"),
        ("[!a]x", "ax"),
        ("a/*", "b/*"),
        ("src/*.rs", "src/dir.rs/inner.txt"),
        ("*", "anything/at/all"),
        ("**/*.md", "**/*.rs"),
        ("src/*", "src/a/b"),
        ("*a", "*b"),
        // The only common segment would be `..`, which is never a file name.
        ("x/.?", "x/?."),
        ("x/.?/y", "x/?./y"),
    ];
    for (a, b) in no {
        assert!(!ov(a, b), "{a} and {b} should not overlap");
        assert_eq!(overlap_witness(&pat(a), &pat(b)), None);
    }
}

#[test]
fn witness_is_a_path_both_cover() {
    assert_eq!(
        overlap_witness(&pat("src/*.rs"), &pat("src/**/mod.rs")).as_deref(),
        Some("src/mod.rs")
    );
    assert_eq!(
        overlap_witness(&pat("a/*/c"), &pat("a/b/*")).as_deref(),
        Some("a/b/c")
    );
}

// ----------------------------------------------------------------------------------
// Normalisation

struct Repo {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("src/parser")).unwrap();
    std::fs::write(root.join("src/parser/x.rs"), "").unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside"), root.join("out")).unwrap();
    std::os::unix::fs::symlink("src/parser", root.join("p")).unwrap();
    std::os::unix::fs::symlink("../../etc", root.join("src/up")).unwrap();
    std::os::unix::fs::symlink("nowhere/inside", root.join("dangling")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/abs", root.join("dangling_out")).unwrap();
    Repo { _dir: dir, root }
}

fn norm(r: &Repo, cwd: &str, input: &str) -> Result<String, PathError> {
    normalize(&r.root, &r.root.join(cwd), input).map(|p| p.as_str().to_string())
}

#[test]
fn normalize_relative_absolute_and_noise() {
    let r = repo();
    assert_eq!(norm(&r, "", "src/parser/**").unwrap(), "src/parser/**");
    assert_eq!(norm(&r, "src", "parser").unwrap(), "src/parser");
    assert_eq!(
        norm(&r, "src", "./parser//x.rs").unwrap(),
        "src/parser/x.rs"
    );
    assert_eq!(
        norm(&r, "src/parser", "../../README.md").unwrap(),
        "README.md"
    );
    assert_eq!(norm(&r, "src", "parser/").unwrap(), "src/parser");
    assert_eq!(norm(&r, "src", "*.rs").unwrap(), "src/*.rs");
    let abs = format!("{}/src/./parser", r.root.display());
    assert_eq!(norm(&r, "src", &abs).unwrap(), "src/parser");
    // Through the canonical form of the root, too.
    let canon = r.root.canonicalize().unwrap();
    let abs = format!("{}/src/x", canon.display());
    assert_eq!(norm(&r, "", &abs).unwrap(), "src/x");
    assert_eq!(
        norm(&r, "", "caf\u{65}\u{301}").unwrap(),
        "caf\u{e9}",
        "NFC"
    );
    assert_eq!(norm(&r, "", "**").unwrap(), "**");
    // A link inside the tree is replaced by where it leads.
    assert_eq!(norm(&r, "", "p/*.rs").unwrap(), "src/parser/*.rs");
    assert_eq!(norm(&r, "", "dangling").unwrap(), "nowhere/inside");
    // Not on disk yet: taken as written.
    assert_eq!(norm(&r, "", "new/dir/**").unwrap(), "new/dir/**");
    // A directory whose name has wildcard characters is escaped.
    std::fs::create_dir_all(r.root.join("we*rd")).unwrap();
    assert_eq!(
        norm(&r, "we*rd", "x").unwrap(),
        r"we\*rd/x",
        "the working directory is a literal"
    );
}

#[test]
fn normalize_refusals() {
    let r = repo();
    let cases: &[(&str, &str, &str)] = &[
        ("", "", "must not be empty"),
        ("", "..", "leaves the repository"),
        ("src", "../../x", "leaves the repository"),
        ("", "/etc/passwd", "outside the repository"),
        ("", "a\0b", "control character"),
        ("", "a\nb", "control character"),
        ("", "a\u{200B}b", "invisible"),
        ("", ".", "names the repository itself"),
        ("src", "..", "names the repository itself"),
        ("", "out/x", "symbolic link"),
        ("", "src/up/passwd", "symbolic link"),
        ("", "dangling_out", "symbolic link"),
        ("", "src/*/../x", "after a wildcard"),
        ("", "src/[x", "closing `]`"),
        ("", r"src/x\", "escapes nothing"),
    ];
    for (cwd, input, needle) in cases {
        let e = norm(&r, cwd, input).unwrap_err();
        assert!(
            e.to_string().contains(needle),
            "{input:?} from {cwd:?}: {e}"
        );
        assert_eq!(tasklock::error::Error::from(e).exit_code(), 64);
    }
    // A working directory outside the repository, with a relative path.
    let e = normalize(&r.root, Path::new("/"), "x").unwrap_err();
    assert!(matches!(e, PathError::CwdOutside(..)), "{e}");
    // But an absolute path inside it is fine from anywhere.
    let abs = format!("{}/src", r.root.display());
    assert_eq!(
        normalize(&r.root, Path::new("/"), &abs).unwrap().as_str(),
        "src"
    );
}

#[test]
fn normalize_file_for_hooks() {
    let r = repo();
    let f = |cwd: &str, p: &str| normalize_file(&r.root, &r.root.join(cwd), p);
    assert_eq!(f("src", "parser/x.rs").unwrap(), "src/parser/x.rs");
    assert_eq!(f("", "p/x.rs").unwrap(), "src/parser/x.rs");
    assert_eq!(
        f("", "a*b?").unwrap(),
        "a*b?",
        "wildcards are characters here"
    );
    assert!(matches(&pat("src/parser"), &f("", "p/x.rs").unwrap()));
    assert!(f("", "/etc/passwd").is_err());
    assert!(f("", "out/x").is_err());
    // Resolved on disk as the edit will be: `..` after a link leaves where the link
    // leads, and a path from outside through `..` or a link back in is inside.
    assert_eq!(f("", "p/../x.rs").unwrap(), "src/x.rs");
    let name = r.root.file_name().unwrap().to_str().unwrap();
    assert_eq!(f("src", &format!("../../{name}/src/a")).unwrap(), "src/a");
    let outside = r.root.parent().unwrap().join("outside");
    std::os::unix::fs::symlink(r.root.join("src"), outside.join("alias")).unwrap();
    let via = outside.join("alias/parser/x.rs");
    assert_eq!(f("", via.to_str().unwrap()).unwrap(), "src/parser/x.rs");
    assert_eq!(
        normalize_file(&r.root, &outside, "alias/y").unwrap(),
        "src/y"
    );
    // A file name may hold any character but NUL.
    for odd in ["a\tb", "new\nline", "\u{202e}rt", "\u{7}"] {
        assert_eq!(f("src", odd).unwrap(), format!("src/{odd}"));
    }
    assert!(f("", "a\0b").is_err());
    assert!(f("", "").is_err());
}

#[test]
fn roots_of_main_and_linked_worktrees() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main");
    std::fs::create_dir_all(main.join(".git/worktrees/wt")).unwrap();
    std::fs::create_dir_all(main.join("src")).unwrap();
    std::fs::write(main.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
    let wt = dir.path().join("wt");
    std::fs::create_dir_all(wt.join("src/deep")).unwrap();
    std::fs::write(
        wt.join(".git"),
        format!("gitdir: {}\n", main.join(".git/worktrees/wt").display()),
    )
    .unwrap();
    let r = roots(&main.join("src")).unwrap();
    assert_eq!(
        (r.worktree.as_path(), r.main.as_path()),
        (main.as_path(), main.as_path())
    );
    let r = roots(&wt.join("src/deep")).unwrap();
    assert_eq!(r.worktree, wt);
    assert_eq!(r.main, main.canonicalize().unwrap());
    // The same file, from either worktree, is one path.
    let a = normalize_file(&wt, &wt.join("src/deep"), "x.rs").unwrap();
    let b = normalize_file(&main, &main, "src/deep/x.rs").unwrap();
    assert_eq!(a, b);
}

// ----------------------------------------------------------------------------------
// Property test: random trees and patterns against a brute-force reference.

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const ALPHA: [char; 3] = ['a', 'b', '.'];

fn rand_seg(rng: &mut Rng) -> String {
    loop {
        let n = 1 + rng.below(3);
        let s: String = (0..n).map(|_| ALPHA[rng.below(3)]).collect();
        if s != "." && s != ".." {
            return s;
        }
    }
}

fn rand_file(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(4);
    (0..depth)
        .map(|_| rand_seg(rng))
        .collect::<Vec<_>>()
        .join("/")
}

const TOKS: [&str; 9] = ["a", "b", ".", "*", "?", "[ab]", "[!a]", "[.-a]", "a"];

fn rand_pattern(rng: &mut Rng) -> PathPattern {
    loop {
        let n = 1 + rng.below(4);
        let segs: Vec<String> = (0..n)
            .map(|_| {
                if rng.below(5) == 0 {
                    "**".to_string()
                } else {
                    (0..1 + rng.below(3))
                        .map(|_| TOKS[rng.below(TOKS.len())])
                        .collect()
                }
            })
            .collect();
        let slash = if rng.below(4) == 0 { "/" } else { "" };
        if let Ok(p) = PathPattern::parse(&(segs.join("/") + slash)) {
            return p;
        }
    }
}

/// A reference tokenizer for the generated patterns, independent of the library's.
#[derive(Debug)]
enum RTok {
    C(char),
    Q,
    S,
    Set(Vec<char>, bool),
}

fn rtoks(seg: &str) -> Vec<RTok> {
    let cs: Vec<char> = seg.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        match cs[i] {
            '*' => out.push(RTok::S),
            '?' => out.push(RTok::Q),
            '[' => {
                let neg = cs[i + 1] == '!';
                let mut j = i + 1 + neg as usize;
                let mut set = Vec::new();
                while cs[j] != ']' {
                    if cs.get(j + 1) == Some(&'-') && cs.get(j + 2) != Some(&']') {
                        for c in cs[j]..=cs[j + 2] {
                            set.push(c);
                        }
                        j += 3;
                    } else {
                        set.push(cs[j]);
                        j += 1;
                    }
                }
                out.push(RTok::Set(set, neg));
                i = j;
            }
            c => out.push(RTok::C(c)),
        }
        i += 1;
    }
    out
}

fn rseg(t: &[RTok], s: &[char]) -> bool {
    match t.split_first() {
        None => s.is_empty(),
        Some((RTok::S, rest)) => (0..=s.len()).any(|k| rseg(rest, &s[k..])),
        Some((tok, rest)) => match s.split_first() {
            None => false,
            Some((c, srest)) => {
                let ok = match tok {
                    RTok::C(x) => x == c,
                    RTok::Q => true,
                    RTok::Set(set, neg) => set.contains(c) != *neg,
                    RTok::S => unreachable!(),
                };
                ok && rseg(rest, srest)
            }
        },
    }
}

fn rsegs(p: &[&str], f: &[&str]) -> bool {
    match p.split_first() {
        None => f.is_empty(),
        Some((&"**", rest)) => (0..=f.len()).any(|k| rsegs(rest, &f[k..])),
        Some((seg, rest)) => {
            !f.is_empty()
                && rseg(&rtoks(seg), &f[0].chars().collect::<Vec<_>>())
                && rsegs(rest, &f[1..])
        }
    }
}

/// The reference: a pattern covers a file when it matches the file, or, when its last
/// segment has no wildcard or it ends in `/`, a directory above it.
fn reference(p: &PathPattern, file: &str) -> bool {
    let text = p.as_str();
    let (body, slash) = match text.strip_suffix('/') {
        Some(b) => (b, true),
        None => (text, false),
    };
    let ps: Vec<&str> = body.split('/').collect();
    let fs: Vec<&str> = file.split('/').collect();
    if slash || is_tree(p) {
        (1..=fs.len()).any(|k| rsegs(&ps, &fs[..k]))
    } else {
        rsegs(&ps, &fs)
    }
}

/// Does the pattern cover the trees below its matches (its last segment has no
/// wildcard, or it ends in `/`)?
fn is_tree(p: &PathPattern) -> bool {
    let text = p.as_str();
    let last = text.rsplit('/').next().unwrap_or("");
    text.ends_with('/') || !last.contains(['*', '?', '['])
}

/// A random file the pattern matches (or None when the draw gives an impossible name).
fn instantiate(rng: &mut Rng, p: &PathPattern) -> Option<String> {
    let mut segs = Vec::new();
    for seg in p.as_str().trim_end_matches('/').split('/') {
        if seg == "**" {
            for _ in 0..rng.below(3) {
                segs.push(rand_seg(rng));
            }
            continue;
        }
        let mut s = String::new();
        for t in rtoks(seg) {
            match t {
                RTok::C(c) => s.push(c),
                RTok::Q => s.push(ALPHA[rng.below(3)]),
                RTok::S => (0..rng.below(3)).for_each(|_| s.push(ALPHA[rng.below(3)])),
                RTok::Set(set, neg) => {
                    let pool: Vec<char> = ALPHA
                        .iter()
                        .copied()
                        .filter(|c| set.contains(c) != neg)
                        .collect();
                    if pool.is_empty() {
                        return None;
                    }
                    s.push(pool[rng.below(pool.len())]);
                }
            }
        }
        segs.push(s);
    }
    if is_tree(p) {
        for _ in 0..rng.below(2) {
            segs.push(rand_seg(rng));
        }
    }
    let ok = !segs.is_empty() && segs.iter().all(|s| !s.is_empty() && s != "." && s != "..");
    ok.then(|| segs.join("/"))
}

fn valid_file(f: &str) -> bool {
    f.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

const CASES: u64 = 20_000;

#[test]
fn property_overlap_is_sound_exact_and_matches_agree() {
    let base: u64 = std::env::var("PATHS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7A5C_10C4);
    let (mut overlapping, mut found_by_brute) = (0u64, 0u64);
    for case in 0..CASES {
        let seed = base.wrapping_add(case.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
        let rng = &mut Rng(seed);
        let a = rand_pattern(rng);
        let b = rand_pattern(rng);
        let mut tree: Vec<String> = (0..1 + rng.below(12)).map(|_| rand_file(rng)).collect();
        for _ in 0..3 {
            tree.extend(instantiate(rng, &a));
            tree.extend(instantiate(rng, &b));
        }
        let ctx = format!("seed {seed} (PATHS_SEED={base}, case {case}): {a} vs {b}");
        let ov = overlaps(&a, &b);
        assert_eq!(ov, overlaps(&b, &a), "not symmetric; {ctx}");
        let mut brute = false;
        for f in &tree {
            let (ma, mb) = (matches(&a, f), matches(&b, f));
            assert_eq!(ma, reference(&a, f), "matches({a}, {f}); {ctx}");
            assert_eq!(mb, reference(&b, f), "matches({b}, {f}); {ctx}");
            if ma && mb {
                brute = true;
                assert!(ov, "missed overlap on {f}; {ctx}");
            }
        }
        // Exactness: a yes always comes with a real file name both cover.
        let w = overlap_witness(&a, &b);
        assert_eq!(w.is_some(), ov, "{ctx}");
        if let Some(w) = w {
            assert!(valid_file(&w), "witness {w:?}; {ctx}");
            assert!(reference(&a, &w) && reference(&b, &w), "witness {w}; {ctx}");
            overlapping += 1;
            found_by_brute += brute as u64;
        }
    }
    eprintln!(
        "{CASES} cases: {overlapping} overlapping pairs, {found_by_brute} of them also found by brute force over the tree"
    );
    assert!(overlapping > CASES / 10 && overlapping < CASES * 9 / 10);
}

#[test]
fn property_pattern_set_agrees_with_a_scan() {
    for case in 0..200u64 {
        let seed = 0xC0FF_EE00 + case * 7919;
        let rng = &mut Rng(seed);
        let mut set = PatternSet::new();
        let pats: Vec<PathPattern> = (0..30).map(|_| rand_pattern(rng)).collect();
        for p in &pats {
            set.insert(p.clone());
        }
        for _ in 0..20 {
            let f = rand_file(rng);
            let want: Vec<usize> = (0..pats.len()).filter(|&i| matches(&pats[i], &f)).collect();
            assert_eq!(set.matching(&f), want, "seed {seed}: {f}");
            let q = rand_pattern(rng);
            let want: Vec<usize> = (0..pats.len())
                .filter(|&i| overlaps(&pats[i], &q))
                .collect();
            assert_eq!(set.overlapping(&q), want, "seed {seed}: {q}");
        }
    }
}

#[test]
fn garbage_never_panics() {
    const PIECES: [&str; 22] = [
        "a",
        "/",
        "//",
        ".",
        "..",
        "*",
        "**",
        "?",
        "[",
        "]",
        "!",
        "^",
        "-",
        "\\",
        "é",
        "e\u{301}",
        "\u{10FFFF}",
        " ",
        "[!]",
        "[]-]",
        "\u{0}",
        "\u{202E}",
    ];
    let r = repo();
    let probe = [pat("**"), pat("a/*"), pat("[!a]?/"), pat("a/**/b")];
    for case in 0..3000u64 {
        let rng = &mut Rng(0xBAD_5EED + case * 104_729);
        let s: String = (0..rng.below(12))
            .map(|_| PIECES[rng.below(PIECES.len())])
            .collect();
        let parsed = PathPattern::parse(&s);
        let normed = normalize(&r.root, &r.root.join("src"), &s);
        for p in parsed.iter().chain(normed.iter()) {
            // A stored form parses back to the same pattern.
            assert_eq!(&PathPattern::parse(p.as_str()).unwrap(), p, "{s:?}");
            for q in &probe {
                assert_eq!(
                    overlaps(p, q),
                    overlap_witness(p, q).is_some(),
                    "{s:?} vs {q}"
                );
            }
            let _ = matches(p, &s);
        }
        let _ = normalize_file(&r.root, &r.root, &s);
    }
}

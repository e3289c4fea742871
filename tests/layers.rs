//! The layers of docs/architecture.md, checked from the source: no file imports a module
//! of a higher layer (lib.rs, the crate's root, is the top one: a name it defines, such as
//! a function, counts as its layer; a name it re-exports counts as the module it comes
//! from), and no module imports, directly or around a circle, a module of its own layer
//! that imports it. Read from the `crate::`, `super::` and `self::` paths in the code
//! (comments left out), so a new import that climbs back up or closes a circle fails
//! here, naming the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer of each top-level module of the crate, from the bottom.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "os" | "error" | "duration" | "signals" | "pack" | "clock" | "key" | "warnings"
        | "discover" | "paths" | "identity" | "secret" | "config" => 0,
        "store" => 1,
        "liveness" => 2,
        "report" => 3,
        "engine" | "render" | "clients" | "cli" | "argv" => 4,
        "commands" => 5,
        "dispatch" => 6,
        "mcp" | "view" | "demo" => 7,
        "lib" | "main" | "bin" => 8,
        _ => return None,
    })
}

/// The crate root's own layer: every name lib.rs defines.
const ROOT: u8 = 8;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A source file's text without its `//` comments (doc comments included).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// Read a path after its first segment (`a::b::{c, d::e}`), pushing every full path it
/// names onto `out`; returns the text after it.
fn read_path<'a>(mut s: &'a str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> &'a str {
    let mut path = prefix;
    loop {
        s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            s = group;
            loop {
                s = s.trim_start();
                if let Some(rest) = s.strip_prefix('}') {
                    return rest;
                }
                if let Some(rest) = s.strip_prefix(',') {
                    s = rest;
                    continue;
                }
                let (first, rest) = ident(s);
                if first.is_empty() {
                    // `*` or anything else this reader does not follow.
                    out.push(path.clone());
                    s = &s[s.chars().next().map_or(0, char::len_utf8)..];
                    continue;
                }
                let mut inner = path.clone();
                inner.push(first.to_string());
                s = read_path(rest, inner, out);
            }
        }
        match s.strip_prefix("::") {
            Some(rest) => {
                let (seg, after) = ident(rest.trim_start());
                if seg.is_empty() {
                    s = rest;
                    continue;
                }
                path.push(seg.to_string());
                s = after;
            }
            None => {
                out.push(path);
                return s;
            }
        }
    }
}

/// Every path a file's code names from `crate::`, `super::` or `self::`, its first
/// segment kept (`["crate", "engine", "take", "Request"]`). A path inside an inline
/// module (`mod tests { use super::*; }`) starts with one `self` for each such module it
/// is in, so that its `super` names the file's own module.
fn paths_named(code: &str) -> Vec<Vec<String>> {
    let inline = inline_modules(code);
    let mut out = Vec::new();
    for start in ["crate", "super", "self"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(start).map(|i| at + i) {
            let before = code[..i].chars().next_back();
            let after = &code[i + start.len()..];
            at = i + start.len();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                || !after.starts_with("::")
            {
                continue;
            }
            let depth = inline.iter().filter(|r| r.contains(&i)).count();
            let mut found = Vec::new();
            let rest = read_path(after, vec![start.to_string()], &mut found);
            at = code.len() - rest.len();
            for p in found {
                let p = if start == "super" {
                    // Inline modules' `super`s lead back to the file's own module first.
                    let ups = p.iter().take_while(|s| *s == "super").count();
                    let mut q = if ups > depth {
                        vec!["super".to_string(); ups - depth]
                    } else {
                        vec!["self".to_string()]
                    };
                    q.extend(p[ups..].iter().cloned());
                    q
                } else {
                    p
                };
                out.push(p);
            }
        }
    }
    out
}

/// The byte ranges of the inline modules (`mod NAME { … }`) of a file's code.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("mod ").map(|i| at + i) {
        at = i + 4;
        if code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let (name, rest) = ident(code[at..].trim_start());
        if name.is_empty() || !rest.trim_start().starts_with('{') {
            continue;
        }
        let open = code.len() - rest.trim_start().len();
        let mut depth = 0;
        for (j, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push(open..open + j);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The top-level modules a file names with `crate::…`, in code (not comments).
fn crate_modules(text: &str) -> BTreeSet<String> {
    paths_named(&code_of(text))
        .into_iter()
        .filter(|p| p[0] == "crate" && p.len() > 1)
        .map(|p| p[1].clone())
        .collect()
}

/// The crate's source: each file by its module path (`commands::claim`; `commands` for
/// commands/mod.rs, `lib` for lib.rs, `bin::name` for a binary).
struct Source {
    src: PathBuf,
    files: BTreeMap<String, (PathBuf, String)>,
    /// What lib.rs re-exports at the crate root: name → the module it comes from.
    reexports: BTreeMap<String, String>,
}

impl Source {
    fn read() -> Source {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        paths.sort();
        assert!(paths.len() > 50, "found only {} files", paths.len());
        let mut files = BTreeMap::new();
        for f in paths {
            let rel = f.strip_prefix(&src).unwrap().to_path_buf();
            let mut segs: Vec<String> = rel
                .components()
                .map(|c| {
                    c.as_os_str()
                        .to_string_lossy()
                        .trim_end_matches(".rs")
                        .to_string()
                })
                .collect();
            if segs.len() > 1 && segs.last().is_some_and(|s| s == "mod") {
                segs.pop();
            }
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            files.insert(segs.join("::"), (rel, code));
        }
        let mut reexports = BTreeMap::new();
        for p in paths_named(&files["lib"].1.replace("pub use ", "pub use self::")) {
            if p[0] == "self" && p.len() > 2 && files.contains_key(&p[1]) {
                reexports.insert(p.last().unwrap().clone(), p[1].clone());
            }
        }
        Source {
            src,
            files,
            reexports,
        }
    }

    /// The module a path names: the longest prefix of it that is a file of the crate.
    fn module_of(&self, from: &str, path: &[String]) -> Option<String> {
        let mut base: Vec<String> = match path[0].as_str() {
            "crate" => Vec::new(),
            "self" => from.split("::").map(String::from).collect(),
            _ => {
                // `super` of a file's module: its parent (of a mod.rs: the parent's).
                let mut b: Vec<String> = from.split("::").map(String::from).collect();
                b.pop();
                b
            }
        };
        let mut rest = &path[1..];
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        if base.is_empty() {
            return None;
        }
        if base.len() == 1 && !self.files.contains_key(&base[0]) {
            // A name at the crate root: lib.rs's own, or one it re-exports.
            return Some(
                self.reexports
                    .get(&base[0])
                    .cloned()
                    .unwrap_or_else(|| "lib".to_string()),
            );
        }
        (1..=base.len())
            .rev()
            .map(|n| base[..n].join("::"))
            .find(|m| self.files.contains_key(m))
    }

    /// Every module of the crate each file imports (itself left out).
    fn imports(&self) -> BTreeMap<&str, BTreeSet<String>> {
        let mut out = BTreeMap::new();
        for (module, (_, code)) in &self.files {
            let set: BTreeSet<String> = paths_named(code)
                .iter()
                .filter_map(|p| self.module_of(module, p))
                .filter(|m| m != module)
                .collect();
            out.insert(module.as_str(), set);
        }
        out
    }

    fn layer_of(&self, module: &str) -> u8 {
        let top = module.split("::").next().unwrap();
        layer(top).unwrap_or_else(|| {
            panic!(
                "src/{}: module `{top}` has no layer here; add it",
                self.files[module].0.display()
            )
        })
    }

    fn file(&self, module: &str) -> String {
        format!("src/{}", self.files[module].0.display())
    }
}

/// `a` is `b` or contains it (`commands` and `commands::claim`): a mod.rs and the files
/// under it are one family, which may name each other (a parent declares and re-exports
/// its children; a child uses its parent's shared items).
fn same_family(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| y.strip_prefix(x).is_some_and(|r| r.starts_with("::"));
    a == b || under(a, b) || under(b, a)
}

#[test]
fn no_file_imports_a_higher_layer() {
    let source = Source::read();
    let mut climbs = Vec::new();
    for (module, imported) in source.imports() {
        let own = source.layer_of(module);
        for m in imported {
            let theirs = if m == "lib" {
                ROOT
            } else {
                source.layer_of(&m)
            };
            if theirs > own {
                climbs.push(format!(
                    "{} (layer {own}) imports crate::{m} (layer {theirs})",
                    source.file(module)
                ));
            }
        }
    }
    assert!(
        climbs.is_empty(),
        "imports that climb a layer (see docs/architecture.md):\n{}",
        climbs.join("\n")
    );
}

#[test]
fn no_circle_of_imports_inside_a_layer() {
    let source = Source::read();
    let imports = source.imports();
    // The imports between modules of one layer, families apart.
    let edges: BTreeMap<&str, Vec<&str>> = imports
        .iter()
        .map(|(m, set)| {
            let next = set
                .iter()
                .filter(|t| t.as_str() != "lib" && source.layer_of(t) == source.layer_of(m))
                .filter(|t| !same_family(m, t))
                .map(String::as_str)
                .collect();
            (*m, next)
        })
        .collect();
    let mut circles = BTreeSet::new();
    for start in edges.keys() {
        if let Some(circle) = circle_from(&edges, start) {
            // Each circle once, from its smallest module.
            let at = (0..circle.len()).min_by_key(|&i| circle[i]).unwrap();
            let mut turned: Vec<&str> = circle[at..].iter().chain(&circle[..at]).copied().collect();
            turned.push(turned[0]);
            let named: Vec<String> = turned.iter().map(|m| source.file(m)).collect();
            circles.insert(named.join(" -> "));
        }
    }
    let _ = &source.src;
    assert!(
        circles.is_empty(),
        "modules of one layer importing each other around a circle (see docs/architecture.md):\n{}",
        circles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// A shortest circle of imports from `start` back to it, if there is one.
fn circle_from<'a>(
    edges: &BTreeMap<&'a str, Vec<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for m in frontier {
            for &t in edges.get(m).into_iter().flatten() {
                if t == start {
                    let mut circle = vec![m];
                    while let Some(&p) = came_from.get(circle.last().unwrap()) {
                        circle.push(p);
                    }
                    circle.reverse();
                    return Some(circle);
                }
                if t != start && !came_from.contains_key(t) {
                    came_from.insert(t, m);
                    next.push(t);
                }
            }
        }
        frontier = next;
    }
    None
}

#[test]
fn the_check_sees_an_import_that_climbs() {
    let found = crate_modules(
        "use crate::{engine::Ctx, key};\n// crate::commands in a comment\nlet x = crate::report::Report::X;",
    );
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["engine", "key", "report"]
    );
}

#[test]
fn the_check_reads_nested_groups_over_lines() {
    let found = paths_named(&code_of(
        "use crate::{\n    engine::{take::Request, Ctx},\n    key, // crate::cli\n};\nuse super::{checkout::{self, Join}, wait};\nlet a = myself::x; super::claim::next(ctx);",
    ));
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "crate::engine::take::Request",
            "crate::engine::Ctx",
            "crate::key",
            "super::checkout::self",
            "super::checkout::Join",
            "super::wait",
            "super::claim::next",
        ]
    );
}

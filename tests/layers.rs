//! The layers of docs/architecture.md, checked from the source: no file imports a module
//! of a higher layer. Read from the `crate::` paths in the code (comments left out), so a
//! new import that climbs back up fails here, naming the file and the module.

use std::collections::BTreeSet;
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
        "mcp" | "view" | "demo" | "lib" | "main" | "bin" => 6,
        _ => return None,
    })
}

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

/// The top-level modules a file names with `crate::…`, in code (not comments).
fn crate_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a::b, c}` on one line.
                let inner = group.split('}').next().unwrap_or_default();
                for part in inner.split(',') {
                    let m: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !m.is_empty() {
                        out.insert(m);
                    }
                }
                continue;
            }
            let m: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !m.is_empty() {
                out.insert(m);
            }
        }
    }
    out
}

#[test]
fn no_file_imports_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut climbs = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let own = layer(&top).unwrap_or_else(|| {
            panic!(
                "src/{}: module `{top}` has no layer here; add it",
                rel.display()
            )
        });
        let text = std::fs::read_to_string(f).unwrap();
        for m in crate_modules(&text) {
            let Some(theirs) = layer(&m) else {
                // A name re-exported at the crate root (`crate::call`, `crate::Called`).
                continue;
            };
            if theirs > own {
                climbs.push(format!(
                    "src/{} (layer {own}) imports crate::{m} (layer {theirs})",
                    rel.display()
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
fn the_check_sees_an_import_that_climbs() {
    let found = crate_modules(
        "use crate::{engine::Ctx, key};\n// crate::commands in a comment\nlet x = crate::report::Report::X;",
    );
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["engine", "key", "report"]
    );
}

//! Every script in scripts/ answers `--help` with its own header, changing nothing, and
//! refuses what it does not take with exit 64 before doing anything.

use std::path::Path;
use std::process::Command;

fn scripts() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh") && !p.ends_with("usage.sh"))
        .collect();
    all.sort();
    assert!(all.len() >= 5, "{all:?}");
    all
}

fn sh(script: &Path, arg: &str, cwd: &Path) -> std::process::Output {
    Command::new("sh")
        .arg(script)
        .arg(arg)
        .current_dir(cwd)
        .env("TMPDIR", cwd)
        .output()
        .unwrap()
}

/// The files below `dir`, with their contents.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_script_answers_help_and_refuses_what_it_does_not_take() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plugins = tree(&root.join("plugins"));
    for script in scripts() {
        let name = script.file_name().unwrap().to_string_lossy().into_owned();
        let cwd = tempfile::tempdir().unwrap();

        let help = sh(&script, "--help", cwd.path());
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{name} --help: {help:?}");
        assert!(
            text.starts_with(&format!("scripts/{name}: ")),
            "{name} --help prints its header:\n{text}"
        );
        assert!(!text.contains("set -eu") && !text.contains("\n#"), "{text}");
        assert_eq!(
            sh(&script, "-h", cwd.path()).stdout,
            help.stdout,
            "{name} -h"
        );

        let bad = sh(&script, "--no-such-option", cwd.path());
        assert_eq!(
            bad.status.code(),
            Some(64),
            "{name} --no-such-option: {bad:?}"
        );
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains(name.as_str()), "{name}: {err}");

        assert!(
            tree(cwd.path()).is_empty(),
            "{name} wrote into the working directory"
        );
    }
    assert!(
        tree(&root.join("plugins")) == plugins,
        "a script changed plugins/"
    );
}

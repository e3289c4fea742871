//! Cost of path checkouts with 1,000 held patterns, as ratios to a reference measured in
//! the same run: `Path::starts_with` of one file over 1,000 literal prefixes.
//!
//! Run: `cargo run --release --example paths_bench`

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tasklock::paths::{PathPattern, PatternSet, matches, normalize_file, overlaps, roots};

const HELD: usize = 1000;

/// Nanoseconds per call of `f`, run for about `budget`.
fn time<F: FnMut() -> usize>(budget: Duration, mut f: F) -> f64 {
    let mut n = 1u64;
    loop {
        let start = Instant::now();
        let mut sink = 0usize;
        for _ in 0..n {
            sink = sink.wrapping_add(f());
        }
        black_box(sink);
        let took = start.elapsed();
        if took >= budget {
            return took.as_nanos() as f64 / n as f64;
        }
        n *= 2;
    }
}

/// 1,000 held patterns shaped like real checkouts: 70% plain trees, 20% globs under a
/// literal directory, 10% starting with `**`.
fn held() -> Vec<PathPattern> {
    (0..HELD)
        .map(|i| {
            let text = match i % 10 {
                0 => format!("**/gen{i}/*.rs"),
                1 | 2 => format!("crates/c{}/src/m{i}/*.rs", i % 37),
                _ => format!("crates/c{}/src/m{i}", i % 37),
            };
            PathPattern::parse(&text).expect("bench pattern")
        })
        .collect()
}

fn main() {
    let budget = Duration::from_millis(300);
    let pats = held();
    let mut set = PatternSet::new();
    for p in &pats {
        set.insert(p.clone());
    }
    // The reference: the same 1,000 checkouts as literal directory prefixes.
    let prefixes: Vec<PathBuf> = (0..HELD)
        .map(|i| PathBuf::from(format!("crates/c{}/src/m{i}", i % 37)))
        .collect();

    let file = "crates/c5/src/m500/parser/lexer.rs"; // covered by one held pattern
    let free = "crates/c5/src/other/lexer.rs"; // covered by none
    let reference = time(budget, || {
        let f = Path::new(file);
        prefixes.iter().filter(|p| f.starts_with(p)).count()
    });
    let rows: Vec<(&str, f64)> = vec![
        (
            "edit hook, indexed (PatternSet::matching), covered file",
            time(budget, || set.matching(file).len()),
        ),
        (
            "edit hook, indexed, uncovered file",
            time(budget, || set.matching(free).len()),
        ),
        (
            "edit hook, linear scan of matches() over all 1,000",
            time(budget, || pats.iter().filter(|p| matches(p, file)).count()),
        ),
        (
            "checkout, indexed (PatternSet::overlapping), literal new pattern",
            {
                let q = PathPattern::parse("crates/c5/src/m500/parser").unwrap();
                time(budget, || set.overlapping(&q).len())
            },
        ),
        ("checkout, indexed, new pattern `crates/*/src/**/*.rs`", {
            let q = PathPattern::parse("crates/*/src/**/*.rs").unwrap();
            time(budget, || set.overlapping(&q).len())
        }),
        ("checkout, indexed, new pattern `**/*.md`", {
            let q = PathPattern::parse("**/*.md").unwrap();
            time(budget, || set.overlapping(&q).len())
        }),
        ("checkout, linear scan of overlaps() over all 1,000", {
            let q = PathPattern::parse("crates/*/src/**/*.rs").unwrap();
            time(budget, || pats.iter().filter(|p| overlaps(p, &q)).count())
        }),
    ];
    let cwd = std::env::current_dir().expect("working directory");
    let norm = roots(&cwd).map(|r| {
        time(budget, || {
            normalize_file(&r.worktree, &cwd, "src/paths.rs")
                .map(|s| s.len())
                .unwrap_or(0)
        })
    });

    println!("path checkouts: {HELD} held patterns");
    println!("{:<66} {:>10} {:>8}", "operation", "per call", "ratio");
    println!(
        "{:<66} {:>8.1}µs {:>8}",
        "reference: Path::starts_with over 1,000 literal prefixes",
        reference / 1000.0,
        "1.0"
    );
    for (name, ns) in rows {
        println!("{name:<66} {:>8.1}µs {:>8.2}", ns / 1000.0, ns / reference);
    }
    if let Some(ns) = norm {
        println!(
            "{:<66} {:>8.1}µs {:>8.2}",
            "normalize_file (syscalls: canonicalize root, lstat per segment)",
            ns / 1000.0,
            ns / reference
        );
    }
}

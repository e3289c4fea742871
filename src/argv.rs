//! The most frequent command lines, read without clap.
//!
//! clap builds the whole command tree before it reads a word: every subcommand, with the
//! global options copied into each, about a fifth of what a `checkout` or `release` costs
//! (docs/performance.md). The command lines agents and hooks run most (`checkout KEY…`,
//! `checkout --next`, `release KEY…`, `hook EVENT`, with plain options after the subcommand) are read here
//! into the [`Cli`] clap would make of them. Anything else goes to clap, which reads it as
//! before and gives every message: help, a value that does not parse, an option given
//! twice, `--opt=value`, `--`, a value or key starting with `-`, an empty value, an option
//! before the subcommand, a word that is not valid UTF-8, and every option not listed
//! below (those with conflicts or requirements among them).
//!
//! `tests` below checks that clap makes the same [`Cli`] of every command line read here.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cli::{CheckoutArgs, Cli, Command, FormatArg, Global, HookArgs, ReleaseArgs};

/// The subcommand's own options that take a value, and flags, read here.
struct Options {
    values: &'static [&'static str],
    flags: &'static [&'static str],
}

const GLOBAL_VALUES: [&str; 4] = ["--format", "--dir", "--agent", "--name"];
const GLOBAL_FLAGS: [&str; 1] = ["--json"];

/// `args` as clap would read it (`args[0]` is the program), when it is one of the plain
/// command lines read here; `None` sends it to clap.
pub fn parse(args: &[OsString]) -> Option<Cli> {
    let mut words = Vec::with_capacity(args.len());
    for a in args.get(1..)? {
        words.push(a.to_str()?);
    }
    let (&sub, rest) = words.split_first()?;
    let options = match sub {
        "checkout" => Options {
            values: &["--timeout", "--reason", "--pid"],
            flags: &["--next"],
        },
        "release" => Options {
            values: &["--note"],
            flags: &["--force"],
        },
        "hook" => Options {
            values: &[],
            flags: &[],
        },
        _ => return None,
    };
    let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
    let mut positional = Vec::new();
    let mut it = rest.iter();
    while let Some(&w) = it.next() {
        if w.is_empty() {
            return None;
        }
        if !w.starts_with('-') {
            positional.push(w.to_string());
            continue;
        }
        if seen.iter().any(|(name, _)| *name == w) {
            return None;
        }
        if GLOBAL_FLAGS.contains(&w) || options.flags.contains(&w) {
            seen.push((w, None));
        } else if GLOBAL_VALUES.contains(&w) || options.values.contains(&w) {
            let &value = it.next()?;
            if value.is_empty() || value.starts_with('-') {
                return None;
            }
            seen.push((w, Some(value)));
        } else {
            return None;
        }
    }
    let value = |name: &str| {
        seen.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.map(str::to_string))
    };
    let flag = |name: &str| seen.iter().any(|(n, _)| *n == name);
    let global = Global {
        format: match value("--format").as_deref() {
            None => None,
            Some("md") => Some(FormatArg::Md),
            Some("json") => Some(FormatArg::Json),
            Some("table") => Some(FormatArg::Table),
            Some(_) => return None,
        },
        json: flag("--json"),
        dir: value("--dir").map(PathBuf::from),
        agent: value("--agent"),
        name: value("--name"),
    };
    let command = match sub {
        // `--next` takes no key; clap says so.
        "checkout" if positional.is_empty() != flag("--next") => return None,
        "checkout" => Command::Checkout(CheckoutArgs {
            keys: positional,
            paths: Vec::new(),
            timeout: match value("--timeout") {
                None => None,
                Some(t) => Some(crate::duration::parse(&t).ok()?),
            },
            reason: value("--reason"),
            queue: false,
            wait: None,
            any: false,
            slots: None,
            next: flag("--next"),
            pid: match value("--pid") {
                None => None,
                Some(p) => Some(p.parse().ok()?),
            },
            worktree: None,
        }),
        "release" if !positional.is_empty() => Command::Release(ReleaseArgs {
            keys: positional,
            all: false,
            force: flag("--force"),
            note: value("--note"),
            done: false,
        }),
        "hook" if positional.len() <= 1 => Command::Hook(HookArgs {
            event: positional.pop(),
        }),
        _ => return None,
    };
    Some(Cli { global, command })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn os(words: &[&str]) -> Vec<OsString> {
        std::iter::once("tasklock")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// Whatever is read here, clap reads the same way.
    fn same_as_clap(words: &[&str]) -> bool {
        let args = os(words);
        let Some(fast) = parse(&args) else {
            return false;
        };
        let clap = Cli::try_parse_from(&args)
            .unwrap_or_else(|e| panic!("{words:?}: read here, refused by clap: {e}"));
        assert_eq!(format!("{fast:?}"), format!("{clap:?}"), "{words:?}");
        true
    }

    /// clap checks a command's definition when it builds it; with subcommands built
    /// only when they run (`defer` in cli.rs), this builds and checks them all.
    #[test]
    fn every_subcommand_definition_is_sound() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn the_common_command_lines_are_read_as_clap_reads_them() {
        for words in [
            &["checkout", "task-1", "--dir", "/tmp/l", "--agent", "bench"][..],
            &["release", "task-1", "--dir", "/tmp/l", "--agent", "bench"],
            &["checkout", "a", "--agent", "x", "b", "--json"],
            &[
                "checkout",
                "k",
                "--timeout",
                "90s",
                "--reason",
                "fix it",
                "--format",
                "md",
            ],
            &["release", "k", "--force", "--note", "done", "--name", "Ann"],
            &["hook", "session-start"],
            &[
                "checkout", "--next", "--agent", "a-1", "--pid", "4242", "--json",
            ],
            &["checkout", "--next"],
            &["checkout", "k", "--pid", "7"],
            &["hook"],
            &["hook", "--agent", "a", "post-tool-use"],
        ] {
            assert!(same_as_clap(words), "{words:?} should be read here");
        }
    }

    #[test]
    fn everything_else_goes_to_clap() {
        for words in [
            &[][..],
            &["--dir", "d", "checkout", "k"],
            &["checkout"],
            &["checkout", "--help"],
            &["checkout", "k", "--dir="],
            &["checkout", "k", "--dir=d"],
            &["checkout", "k", "--dir", ""],
            &["checkout", "k", "--agent", "a", "--agent", "b"],
            &["checkout", "k", "--reason", "-x"],
            &["checkout", "k", "--timeout", "5x"],
            &["checkout", "k", "--format", "xml"],
            &["checkout", "k", "--queue"],
            &["checkout", "k", "--wait"],
            &["checkout", "k", "--any"],
            &["checkout", "k", "--slots", "2"],
            &["checkout", "k", "--path", "src/**"],
            &["checkout", "-"],
            &["checkout", ""],
            &["checkout", "k", "--"],
            &["checkout", "k", "--agent"],
            &["checkout", "k", "--next"],
            &["checkout", "--next", "--next"],
            &["checkout", "--pid", "7"],
            &["checkout", "--next", "--pid", "x"],
            &["checkout", "--next", "--pid", "-1"],
            &["checkout", "--next", "--pid"],
            &["release"],
            &["release", "--all"],
            &["release", "k", "--all"],
            &["hook", "a", "b"],
            &["list"],
        ] {
            assert!(parse(&os(words)).is_none(), "{words:?} should go to clap");
        }
        let bad = vec![OsString::from("tasklock"), OsString::from("checkout"), {
            use std::os::unix::ffi::OsStringExt;
            OsString::from_vec(vec![0xff])
        }];
        assert!(parse(&bad).is_none());
    }

    /// Many command lines made of the words read here, in every order, each compared
    /// with clap when read here.
    #[test]
    fn generated_command_lines_agree_with_clap() {
        let subs = ["checkout", "release", "hook"];
        let words: &[&[&str]] = &[
            &["k"],
            &["k2"],
            &["ключ"],
            &["--json"],
            &["--force"],
            &["--format", "json"],
            &["--format", "md"],
            &["--format", "table"],
            &["--dir", "/tmp/x y"],
            &["--agent", "a"],
            &["--name", "N"],
            &["--timeout", "30m"],
            &["--timeout", "1h30m"],
            &["--reason", "why"],
            &["--note", "n"],
            &["--next"],
            &["--pid", "12"],
        ];
        // A fixed pseudo-random sequence: the same command lines on every run.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut read = 0;
        for _ in 0..3000 {
            let mut line = vec![subs[next(subs.len())]];
            for _ in 0..next(7) {
                line.extend_from_slice(words[next(words.len())]);
            }
            if same_as_clap(&line) {
                read += 1;
            }
        }
        assert!(read > 300, "only {read} command lines were read here");
    }
}

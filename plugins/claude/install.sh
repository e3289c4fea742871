#!/bin/sh
# install.sh: install tasklock with its agent skills.
#
#   ./install.sh [--prefix DIR] [--skills-dir DIR] [--agents-dir DIR] [--no-agents]
#                [--project] [--force] [--dry-run] [--from-source | --download]
#   ./install.sh --binary-only [--prefix DIR] [--download]
#   ./install.sh --uninstall [--dry-run]
#   curl -fsSL https://github.com/tasklock/tasklock/releases/latest/download/install.sh | sh
#   curl -fsSL …/install.sh | sh -s -- --uninstall        (options after `sh -s --`)
#
# This script belongs to one release (tasklock_version below, kept equal to Cargo.toml's
# by the tests) and installs that release only: the archive of its tag, or, built from
# source, its tag.
#
# Where the binary comes from:
#   - in a checkout of the source: built from it (cargo build --release --locked);
#   - unpacked from a release archive (tasklock-TARGET.tar.gz): the binary beside it;
#   - anywhere else (piped into sh, or copied elsewhere): the release archive for this
#     platform, downloaded from $TASKLOCK_RELEASE_URL (default: this script's release on
#     GitHub) with its .sha256, verified: a wrong, missing or unreadable checksum stops
#     everything, nothing installed. No Rust toolchain needed. Only with --from-source
#     (TASKLOCK_FROM_SOURCE=1), or when no archive is made for the platform at all, it
#     fetches the source instead: `git clone --depth 1` of $TASKLOCK_REPO (default
#     https://github.com/tasklock/tasklock.git; any URL or path git accepts) at
#     $TASKLOCK_REF (default: this release's tag, vVERSION), and builds it.
#   - with --download (TASKLOCK_DOWNLOAD=1), the release archive even in a checkout.
# --binary-only installs the binaries and nothing else (no skills, no links).
# --no-receipt records nothing in the receipt: the Claude Code plugin's launcher brings
# its own binary so (plugins/claude/bin/tasklock), and --uninstall leaves it alone.
# Every refusal says what to run next, as this script was started (from a file, or piped).
# Downloads and clones go to a temporary directory that is removed when the script ends,
# however it ends. The script is POSIX sh throughout (dash, busybox sh, bash).
#
# What goes where (every directory may be overridden; nothing outside them is touched):
#   binary   ${XDG_BIN_HOME:-$HOME/.local/bin}/tasklock                 --prefix DIR
#   skills   ~/.claude/skills/NAME, one per skills/NAME/SKILL.md here   --skills-dir DIR
#   links    ~/.agents/skills/NAME -> the skill above, for Codex & co.  --agents-dir DIR,
#                                                                       --no-agents
#   receipt  ${XDG_DATA_HOME:-$HOME/.local/share}/tasklock/install-receipt
# --project puts the skills in .claude/skills and the links in .agents/skills of the
# project: the git worktree containing the current directory, else the current
# directory (links relative, so the project can commit them). It then runs the
# freshly installed `tasklock init` there (lock directory, .claude/settings.json hooks,
# CLAUDE.md). The binary still goes to the bin directory.
#
# The binary is replaced atomically (copied to a temporary name beside it, then renamed).
# --dry-run builds too (writing only cargo's target directory), so that it can say whether
# the installed binary is unchanged or would be replaced.
# Claude Code loads every copy of a skill it finds, and runs a plugin's hooks beside the
# project's: install.sh warns when the skills are also in ~/.claude/skills (--project) or
# in the current project's .claude/skills (global), and when a tasklock plugin is enabled.
# Running again is safe: files already up to date are left alone and reported unchanged.
#
# Receipt and uninstall: the receipt lists, one a line, every path this script installed
# ("KIND<TAB>CHECKSUM<TAB>PATH"; KIND is bin, file, link or dir; CHECKSUM is the POSIX
# cksum of the file, of a link's target, or "-" for a directory this script created).
# Installs add to it; --uninstall removes what it lists and then the receipt:
#   - a file or binary only if it is unchanged since install; a changed one is kept and
#     reported ("kept ... changed since install"), and is yours from then on;
#   - a link only if it still points where install.sh pointed it;
#   - a directory only if install.sh created it and it is now empty.
# Nothing that is not in the receipt is ever removed, such as your own skills beside ours.
# Files written by `tasklock init` (--project) are project settings and are left in place.
# On install, an existing skill file that install.sh did not put there (or that was edited
# since) is kept and reported, unless --force; one identical to ours is adopted into the
# receipt. A skill directory that is a link (say, to your own copy) is never written
# through, and a real directory is never replaced.
#
# Environment:
#   TASKLOCK_INSTALL_BINARY=PATH  install this prebuilt binary instead of running
#                                 `cargo build --release --locked` (for tests and packagers)
#   TASKLOCK_FEATURES=postgres    build with these cargo features (`postgres`: the
#                                 PostgreSQL store, docs/postgres.md)
#   XDG_BIN_HOME, XDG_DATA_HOME   as above; CARGO_TARGET_DIR is honoured for the build
#   TASKLOCK_REPO, TASKLOCK_REF   where to fetch the source from when not run from a checkout
#
# Exit status: 0 done (or nothing to do), 1 error (no cargo, build or I/O failure),
# 64 usage error.
set -eu

tasklock_version=0.1.0
script_url=https://github.com/tasklock/tasklock/releases/download/v$tasklock_version/install.sh

tab=$(printf '\t')
nl='
'

say() { printf '%s\n' "$*"; }
warn() { printf 'install.sh: %s\n' "$*" >&2; }
die() { warn "$*"; exit 1; }

# quote WORD: WORD as the shell reads it back.
quote() {
    case $1 in
        '' | *[!A-Za-z0-9_./:=@%+,-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
        *) printf '%s' "$1" ;;
    esac
}
# Started from a file (sh install.sh), or piped into sh (then $0 is the shell)?
from_file=0
if [ -f "$0" ] && grep -q '^tasklock_version=' "$0" 2>/dev/null; then from_file=1; fi
# again [ARGS...]: the command that runs this script again with ARGS, the way it was
# started: `sh FILE ARGS` from a file, `curl … | sh -s -- ARGS` when piped into sh.
again() {
    if [ "$from_file" = 1 ]; then
        printf 'sh %s' "$(quote "$0")"
        [ $# -eq 0 ] || printf ' %s' "$@"
    else
        printf 'curl -fsSL %s | sh' "$script_url"
        [ $# -eq 0 ] || { printf ' -s --'; printf ' %s' "$@"; }
    fi
}
usage_error() {
    warn "$*"
    printf '%s\n' "Run $(again --help) for the options." >&2
    exit 64
}

usage() {
    cat <<'EOF'
Usage: ./install.sh [OPTIONS]
       ./install.sh --uninstall [--dry-run]

Install tasklock (built from this checkout, or downloaded as a verified release archive
when run from anywhere else):
  the binary     into ${XDG_BIN_HOME:-$HOME/.local/bin}
  the skills     into ~/.claude/skills/NAME (Claude Code)
  skill links    into ~/.agents/skills/NAME (Codex and other agents)
and record every installed path in ${XDG_DATA_HOME:-$HOME/.local/share}/tasklock/install-receipt.

Options:
  --prefix DIR       install the binary into DIR
  --skills-dir DIR   install the skills into DIR
  --agents-dir DIR   link the skills into DIR
  --no-agents        do not link the skills for other agents
  --project          install the skills into ./.claude/skills (links into ./.agents/skills)
                     of the current directory and run `tasklock init` there
  --force            replace skill files and links that install.sh did not put there
  --dry-run          print what would be done; change nothing installed (it still
                     builds, in cargo's target directory, to compare the binary)
  --uninstall        remove what the receipt lists (files changed since install are kept)
  --from-source      outside a checkout: clone the source and build it instead of
                     downloading the release archive
  --download         in a checkout too: download the release archive instead of building
  --binary-only      install the binaries only: no skills, no links
  --no-receipt       record nothing in the receipt (--uninstall then leaves it alone)
  -h, --help         show this help

Run from anywhere else (or piped: curl -fsSL .../install.sh | sh, options after
`sh -s --`), it downloads the release archive of this script's version for this platform
and its SHA-256 sum, and installs it only if they match (a missing sum is refused too):
  TASKLOCK_RELEASE_URL=URL  where the archives are (default
                     https://github.com/tasklock/tasklock/releases/download/vVERSION)
With --from-source, or when no archive is made for the platform, it clones the source
and builds it:
  TASKLOCK_REPO=URL  the repository (default https://github.com/tasklock/tasklock.git)
  TASKLOCK_REF=REF   a branch or tag of it (default: this release's tag, vVERSION)

Environment: TASKLOCK_INSTALL_BINARY=PATH installs that binary instead of building.
Exit status: 0 done, 1 error, 64 usage error.
EOF
}

# Make a path absolute (relative to the current directory) without trailing slashes;
# refuse newlines, which the receipt cannot hold.
absolute() {
    _p=$1
    case $_p in
        *"$nl"*) usage_error "paths with a newline are not supported: $_p" ;;
        /*) ;;
        *) _p=$PWD/$_p ;;
    esac
    while [ "$_p" != / ] && [ "${_p%/}" != "$_p" ]; do _p=${_p%/}; done
    printf '%s\n' "$_p"
}

# need_value FLAG VALUE...: the flag's value must be there and not empty.
need_value() {
    if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "${1%%=*} needs a directory"; fi
    case $2 in -*) usage_error "${1%%=*} needs a directory, not $2 (write ./$2 for a directory named so)" ;; esac
}

bindir='' skills_dir='' agents_dir='' no_agents=0 project=0 force=0 dry_run=0 uninstall=0
binary_only=0 no_receipt=0 given_args=$*
from_source=${TASKLOCK_FROM_SOURCE:-0} download=${TASKLOCK_DOWNLOAD:-0}
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) need_value "$@"; bindir=$2; shift 2 ;;
        --prefix=*) need_value "$1" "${1#*=}"; bindir=${1#*=}; shift ;;
        --skills-dir) need_value "$@"; skills_dir=$2; shift 2 ;;
        --skills-dir=*) need_value "$1" "${1#*=}"; skills_dir=${1#*=}; shift ;;
        --agents-dir) need_value "$@"; agents_dir=$2; shift 2 ;;
        --agents-dir=*) need_value "$1" "${1#*=}"; agents_dir=${1#*=}; shift ;;
        --no-agents) no_agents=1; shift ;;
        --project) project=1; shift ;;
        --force) force=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        --uninstall) uninstall=1; shift ;;
        --from-source) from_source=1; shift ;;
        --download) download=1; shift ;;
        --binary-only) binary_only=1; shift ;;
        --no-receipt) no_receipt=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; [ $# -eq 0 ] || usage_error "unexpected argument: $1" ;;
        -*) usage_error "unknown option: $1" ;;
        *) usage_error "unexpected argument: $1" ;;
    esac
done

if [ "$from_source" = 1 ] && [ "$download" = 1 ]; then
    usage_error "--from-source and --download are each other's opposites: give one"
fi
if [ "$binary_only" = 1 ] && { [ -n "$skills_dir$agents_dir" ] || [ "$no_agents$project" != 00 ]; }; then
    usage_error "--binary-only installs no skills: it takes no --skills-dir, --agents-dir, --no-agents or --project"
fi

[ -n "${HOME:-}" ] || die "HOME is not set"
case $HOME in /*) ;; *) die "HOME is not an absolute path: $HOME" ;; esac
home=$(absolute "$HOME")

data_home=${XDG_DATA_HOME:-}
case $data_home in /*) ;; *) data_home=$home/.local/share ;; esac
receipt_dir=$(absolute "$data_home/tasklock")
receipt=$receipt_dir/install-receipt

# ---------------------------------------------------------------- checksums and receipt

file_sum() { cksum <"$1" | awk '{ print $1 "." $2 }'; }
text_sum() { printf '%s' "$1" | cksum | awk '{ print $1 "." $2 }'; }

# The checksum the receipt holds for path $1 (empty if it is not there).
receipt_sum() {
    [ -f "$receipt" ] || return 0
    P=$1 awk -F "$tab" '
        function path(l, i) { i = index(l, "\t"); l = substr(l, i + 1); i = index(l, "\t"); return substr(l, i + 1) }
        !/^#/ && path($0) == ENVIRON["P"] { s = $2 }
        END { if (s != "") print s }' "$receipt"
}

entries=''   # this run's receipt lines
record() { entries=$entries$1$tab$2$tab$3$nl; }

# The old receipt with this run's lines replacing old ones for the same path in place, then
# this run's new paths; so a run that changes nothing writes the same receipt (it is then
# left untouched).
write_receipt() {
    [ -n "$entries" ] || return 0
    _old=$receipt
    [ -f "$_old" ] || _old=/dev/null
    _tmp=$receipt_dir/.install-receipt.$$
    {
        say "# tasklock install receipt: every path install.sh installed (KIND<TAB>CKSUM<TAB>PATH)."
        say "# Read by ./install.sh --uninstall; do not edit."
        printf '%s' "$entries" | awk -F "$tab" '
            function path(l, i) { i = index(l, "\t"); l = substr(l, i + 1); i = index(l, "\t"); return substr(l, i + 1) }
            FILENAME == "-" { p = path($0); if (!(p in line)) order[++n] = p; line[p] = $0; next }
            /^#/ || $0 == "" { next }
            { p = path($0); if (p in done) next; done[p] = 1; print ((p in line) ? line[p] : $0) }
            END { for (k = 1; k <= n; k++) if (!(order[k] in done)) print line[order[k]] }' - "$_old"
    } >"$_tmp"
    if [ -f "$receipt" ] && cmp -s "$_tmp" "$receipt"; then
        rm -f "$_tmp"
    else
        mv -f "$_tmp" "$receipt"
    fi
}

# ---------------------------------------------------------------- uninstall

if [ "$uninstall" = 1 ]; then
    if [ -n "$bindir$skills_dir$agents_dir" ] || [ "$no_agents$project$force$binary_only$download" != 00000 ]; then
        usage_error "--uninstall takes only --dry-run: it removes what the receipt lists"
    fi
    if [ ! -f "$receipt" ]; then
        say "Nothing to uninstall: there is no receipt at $receipt."
        exit 0
    fi
    if [ "$dry_run" = 1 ]; then would='would remove'; else would='removed'; fi
    line() { printf '  %-15s %s\n' "$1" "$2"; }
    removed=0 kept=0 dirs=''
    while IFS="$tab" read -r kind sum path; do
        case $kind in ''|'#'*) continue ;; esac
        case $path in
            /*) ;;
            *) warn "ignoring a receipt line without an absolute path: $kind $path"; continue ;;
        esac
        case $kind in
            bin|file)
                if [ -L "$path" ] || { [ -e "$path" ] && [ ! -f "$path" ]; }; then
                    line kept "$path (no longer the file install.sh installed)"; kept=$((kept + 1))
                elif [ ! -e "$path" ]; then
                    line "already gone" "$path"
                elif [ "$(file_sum "$path")" != "$sum" ]; then
                    line kept "$path (changed since install)"; kept=$((kept + 1))
                else
                    [ "$dry_run" = 1 ] || rm -f "$path"
                    line "$would" "$path"; removed=$((removed + 1))
                fi ;;
            link)
                if [ -L "$path" ]; then
                    if [ "$(text_sum "$(readlink "$path")")" = "$sum" ]; then
                        [ "$dry_run" = 1 ] || rm -f "$path"
                        line "$would" "$path"; removed=$((removed + 1))
                    else
                        line kept "$path (now points elsewhere)"; kept=$((kept + 1))
                    fi
                elif [ -e "$path" ]; then
                    line kept "$path (no longer a link)"; kept=$((kept + 1))
                else
                    line "already gone" "$path"
                fi ;;
            dir) dirs=$dirs$path$nl ;;
            *) warn "ignoring an unknown receipt line: $kind $path" ;;
        esac
    done <"$receipt"
    [ "$dry_run" = 1 ] || rm -f "$receipt"
    line "$would" "$receipt"
    # Directories install.sh created, deepest first, only when empty. In a dry run a
    # directory emptied by the removals above is reported as removable.
    if [ -n "$dirs" ]; then
        sorted=$(printf '%s' "$dirs" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-)
        while IFS= read -r d; do
            [ -n "$d" ] || continue
            if [ ! -d "$d" ] || [ -L "$d" ]; then
                continue
            elif [ "$dry_run" = 1 ]; then
                line "$would" "$d/ (if empty)"
            elif rmdir "$d" 2>/dev/null; then
                line "$would" "$d/"
            else
                line kept "$d/ (not empty)"
            fi
        done <<EOF
$sorted
EOF
    fi
    if [ "$dry_run" = 1 ]; then summary="Dry run: $removed would be removed"; else summary="Uninstalled: $removed removed"; fi
    if [ "$kept" -gt 0 ]; then
        say "$summary; $kept kept (listed above: changed since install, so now yours)."
    else
        say "$summary."
    fi
    [ "$dry_run" = 0 ] || say "Nothing was changed."
    say "Files written by \`tasklock init\` in projects (.locks/, .claude/settings.json hooks, CLAUDE.md) are left as they are."
    exit 0
fi

# ---------------------------------------------------------------- plan

# Where releases are published: the one place to change it. TASKLOCK_RELEASE_URL
# overrides it (a mirror, a fork, a directory served for tests); the archives are
# RELEASE_URL/tasklock-TARGET.tar.gz with RELEASE_URL/tasklock-TARGET.tar.gz.sha256.
default_release_url=https://github.com/tasklock/tasklock/releases/download/v$tasklock_version
release_url=${TASKLOCK_RELEASE_URL:-$default_release_url}
default_repo=https://github.com/tasklock/tasklock.git
repo_url=${TASKLOCK_REPO:-$default_repo}

# How the binary comes: `checkout` builds the checkout this script is in; `unpacked`
# installs the release archive this script was unpacked from; `release` downloads the
# archive for this platform and verifies its checksum (piped into sh, or copied out of a
# checkout); `source` clones the source and builds it (--from-source, or when no archive
# fits this platform).
here='' mode=release
if [ "$from_file" = 1 ]; then
    here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd -P)
    if [ -f "$here/Cargo.toml" ] && [ -d "$here/skills" ]; then
        mode=checkout
    elif [ -x "$here/tasklock" ] && [ -d "$here/skills" ]; then
        mode=unpacked
    else
        here=''
    fi
fi
if [ "$from_source" = 1 ] && [ "$mode" != checkout ]; then here='' mode=source; fi
if [ "$download" = 1 ]; then here='' mode=release; fi

# This platform's Rust target triple, as release archives are named (empty: none fits).
platform() {
    case $(uname -s)/$(uname -m) in
        Linux/x86_64 | Linux/amd64) say x86_64-unknown-linux-gnu ;;
        Linux/aarch64 | Linux/arm64) say aarch64-unknown-linux-gnu ;;
        Darwin/arm64 | Darwin/aarch64) say aarch64-apple-darwin ;;
        Darwin/x86_64) say x86_64-apple-darwin ;;
    esac
}

# fetch URL FILE: download with curl or wget. Exit status 0, or 2 when the server says
# there is no such file (404 and the like), or 1 when it cannot be had (network).
fetch() {
    if command -v curl >/dev/null 2>&1; then
        _rc=0
        curl -fsSL --connect-timeout 20 --proto '=https,http,file' -o "$2" "$1" 2>/dev/null || _rc=$?
        case $_rc in 0) return 0 ;; 22 | 37) return 2 ;; *) return 1 ;; esac
    elif command -v wget >/dev/null 2>&1; then
        _rc=0
        wget -q -T 20 -O "$2" "$1" || _rc=$?
        case $_rc in 0) return 0 ;; 8) return 2 ;; *) return 1 ;; esac
    else
        die "neither curl nor wget is on PATH to download tasklock with; nothing was installed. Next: install curl, then run $(again $given_args)"
    fi
}

# sha256 FILE: its SHA-256, in hex.
sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    elif command -v openssl >/dev/null 2>&1; then
        openssl dgst -sha256 "$1" | sed 's/.*= *//'
    else
        die "no sha256sum, shasum or openssl on PATH to verify the download with"
    fi
}

target=''
if [ "$mode" = release ]; then
    target=$(platform)
    if [ -z "$target" ]; then
        say "No release archive is made for this platform ($(uname -s) $(uname -m)): building tasklock $tasklock_version from source."
        mode=source
    fi
fi
if [ "$mode" = source ] && ! command -v git >/dev/null 2>&1; then
    die "git not found on PATH: install.sh clones $repo_url with git to build from source. Next: install git, then run $(again $given_args)"
fi

if [ -z "$bindir" ]; then
    bindir=${XDG_BIN_HOME:-}
    case $bindir in /*) ;; *) bindir=$home/.local/bin ;; esac
fi
relative_links=0
project_root=$PWD
if [ "$project" = 1 ]; then
    # The project is the git worktree containing the current directory (as for
    # `tasklock init`), else the current directory.
    root=$PWD
    while [ "$root" != / ] && [ ! -e "$root/.git" ]; do root=$(dirname "$root"); done
    [ -e "$root/.git" ] && project_root=$root
    [ -n "$skills_dir$agents_dir" ] || relative_links=1
    : "${skills_dir:=$project_root/.claude/skills}" "${agents_dir:=$project_root/.agents/skills}"
else
    : "${skills_dir:=$home/.claude/skills}" "${agents_dir:=$home/.agents/skills}"
fi
bindir=$(absolute "$bindir")
skills_dir=$(absolute "$skills_dir")
agents_dir=$(absolute "$agents_dir")

source_bin=${TASKLOCK_INSTALL_BINARY:-}
if [ -n "$source_bin" ]; then
    source_bin=$(absolute "$source_bin")
    if [ ! -f "$source_bin" ] || [ ! -x "$source_bin" ]; then
        die "TASKLOCK_INSTALL_BINARY is not an executable file: $source_bin"
    fi
elif [ "$mode" = unpacked ]; then
    source_bin=$here/tasklock
elif [ "$mode" = release ]; then
    :
elif ! command -v cargo >/dev/null 2>&1; then
    die "cargo not found on PATH, and it is needed to build from source. Next: install Rust from https://rustup.rs (curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), open a new shell and run $(again $given_args)"
fi

changed=0 unchanged=0 kept=0
tmpfile='' fetched='' pack=''
cleanup() {
    [ -z "$tmpfile" ] || rm -f "$tmpfile"
    [ -z "$fetched" ] || rm -rf "$fetched"
    [ -z "$pack" ] || rm -rf "$pack"
}
finish() {
    _status=$?
    cleanup
    if [ "$dry_run" = 0 ] && [ "$no_receipt" = 0 ] && [ -n "$entries" ]; then
        if ! { ensure_dir "$receipt_dir" && write_receipt; }; then _status=1; fi
    fi
    exit "$_status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Report one item: "ACTION  PATH [NOTE]", counting changes.
item() {
    case $1 in
        unchanged) unchanged=$((unchanged + 1)) ;;
        kept) kept=$((kept + 1)) ;;
        *) changed=$((changed + 1)) ;;
    esac
    if [ "$dry_run" = 1 ]; then
        case $1 in
            unchanged | kept) _verb=$1 ;;
            updated | replaced) _verb="would ${1%d}" ;;
            *) _verb="would ${1%ed}" ;;
        esac
        printf '  %-15s %s\n' "$_verb" "$2${3:+ $3}"
    else
        printf '  %-15s %s\n' "$1" "$2${3:+ $3}"
    fi
}

# Create directory $1 and any missing parents, recording each one created.
ensure_dir() {
    _d=$1 _missing=''
    while [ ! -d "$_d" ]; do
        if [ -e "$_d" ] || [ -L "$_d" ]; then die "not a directory: $_d"; fi
        _missing=$_d$nl$_missing
        _d=$(dirname "$_d")
    done
    [ -n "$_missing" ] || return 0
    [ "$dry_run" = 0 ] || return 0
    while IFS= read -r _m; do
        [ -n "$_m" ] || continue
        mkdir "$_m" 2>/dev/null || [ -d "$_m" ] || die "cannot create directory $_m"
        record dir - "$_m"
    done <<EOF
$_missing
EOF
}

# Copy $1 over $2 atomically: to a temporary name in the same directory, then rename.
copy_atomic() {
    tmpfile=$(dirname "$2")/.$(basename "$2").tasklock-install.$$
    rm -f "$tmpfile"
    cp "$1" "$tmpfile"
    [ -z "${3:-}" ] || chmod "$3" "$tmpfile"
    mv -f "$tmpfile" "$2"
    tmpfile=''
}

# Install skill file $1 as $2 (see the header for when an existing file is kept).
install_file() {
    if [ -L "$2" ] || { [ -e "$2" ] && [ ! -f "$2" ]; }; then
        if [ -d "$2" ] && [ ! -L "$2" ]; then
            item kept "$2" "(a directory is in the way; move it and run again)"; return 0
        elif [ "$force" = 0 ]; then
            item kept "$2" "(not a regular file; --force replaces it)"; return 0
        fi
        [ "$dry_run" = 1 ] || { rm -f "$2"; copy_atomic "$1" "$2"; record file "$(file_sum "$2")" "$2"; }
        item replaced "$2"; return 0
    fi
    if [ ! -e "$2" ]; then
        [ "$dry_run" = 1 ] || { copy_atomic "$1" "$2"; record file "$(file_sum "$2")" "$2"; }
        item installed "$2"; return 0
    fi
    _was=$(receipt_sum "$2")
    _now=$(file_sum "$2")
    if cmp -s "$1" "$2"; then
        record file "$_now" "$2"
        if [ -n "$_was" ]; then item unchanged "$2"; else item adopted "$2" "(identical; now in the receipt)"; fi
    elif [ "$_was" = "$_now" ]; then
        [ "$dry_run" = 1 ] || { copy_atomic "$1" "$2"; record file "$(file_sum "$2")" "$2"; }
        item updated "$2"
    elif [ "$force" = 1 ]; then
        [ "$dry_run" = 1 ] || { copy_atomic "$1" "$2"; record file "$(file_sum "$2")" "$2"; }
        item replaced "$2" "(--force)"
    elif [ -n "$_was" ]; then
        item kept "$2" "(edited since install; --force replaces it)"
    else
        item kept "$2" "(not installed by install.sh; --force replaces it)"
    fi
}

# Link $1 (the target text) at $2.
install_link() {
    if [ -L "$2" ]; then
        _cur=$(readlink "$2")
        if [ "$_cur" = "$1" ]; then
            _was=$(receipt_sum "$2")
            record link "$(text_sum "$1")" "$2"
            if [ -n "$_was" ]; then item unchanged "$2"; else item adopted "$2" "-> $1"; fi
            return 0
        elif [ "$force" = 0 ] && [ "$(receipt_sum "$2")" != "$(text_sum "$_cur")" ]; then
            item kept "$2" "(points to $_cur; --force replaces the link)"; return 0
        fi
        # Ours from an earlier install (or --force): relink. rm first: mv onto a link to a
        # directory would move into that directory.
        [ "$dry_run" = 1 ] || { rm -f "$2"; ln -s "$1" "$2"; record link "$(text_sum "$1")" "$2"; }
        item relinked "$2" "-> $1"
    elif [ -e "$2" ]; then
        item kept "$2" "(exists and is not a link; move it and run again)"
    else
        [ "$dry_run" = 1 ] || { ln -s "$1" "$2"; record link "$(text_sum "$1")" "$2"; }
        item linked "$2" "-> $1"
    fi
}

# ---------------------------------------------------------------- install

if [ "$dry_run" = 1 ]; then
    say "Dry run: this is what ./install.sh would do; nothing is changed."
fi

# A release: download the archive for this platform and its checksum into a temporary
# directory (cleanup removes it on any exit), verify, unpack. A checksum that does not
# match stops everything before anything is installed.
if [ "$mode" = release ] && [ -z "$source_bin" ]; then
    fetched=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-install.XXXXXX") ||
        die "cannot create a temporary directory in ${TMPDIR:-/tmp}"
    archive=tasklock-$target.tar.gz
    say "Downloading: $release_url/$archive (into $fetched, removed afterwards)"
    rc=0
    fetch "$release_url/$archive.sha256" "$fetched/$archive.sha256" || rc=$?
    if [ "$rc" = 1 ]; then
        die "cannot download the checksum $release_url/$archive.sha256 (no network, or the server is down): nothing was installed, since the archive could not be verified. Next: try again later ($(again $given_args)), or set TASKLOCK_RELEASE_URL to a mirror of the release"
    elif [ "$rc" = 2 ]; then
        # No checksum: never install what cannot be verified, and never quietly install
        # another version instead. Say which of the two is missing.
        if fetch "$release_url/$archive" "$fetched/$archive"; then
            die "the checksum $release_url/$archive.sha256 is missing: $archive cannot be verified, so nothing was installed. Next: set TASKLOCK_RELEASE_URL to a release that has it, or build tasklock $tasklock_version from source: $(again --from-source $given_args)"
        else
            die "no release archive for $target at $release_url (neither $archive nor its .sha256 is there): nothing was installed. Next: set TASKLOCK_RELEASE_URL to where the v$tasklock_version release is, or build it from source: $(again --from-source $given_args)"
        fi
    else
        fetch "$release_url/$archive" "$fetched/$archive" ||
            die "downloading $release_url/$archive failed"
        want=$(awk 'NR == 1 { print $1 }' "$fetched/$archive.sha256")
        got=$(sha256 "$fetched/$archive")
        case $want in
            *[!0-9a-f]* | '') die "$release_url/$archive.sha256 holds no SHA-256 sum: $archive cannot be verified, so nothing was installed. Next: set TASKLOCK_RELEASE_URL to a release whose checksum is whole, or build from source: $(again --from-source $given_args)" ;;
        esac
        [ "$got" = "$want" ] ||
            die "the checksum of $archive does not match: expected $want, got $got. The download is damaged or was tampered with; nothing was installed. Next: try again later ($(again $given_args)); if it keeps failing, report it"
        say "Verified: SHA-256 $got"
        mkdir "$fetched/unpacked"
        (cd "$fetched/unpacked" && gzip -dc "../$archive" | tar -xf -) ||
            die "unpacking $archive failed"
        here=$fetched/unpacked/tasklock-$target
        source_bin=$here/tasklock
        [ -x "$source_bin" ] && [ -d "$here/skills" ] ||
            die "$archive does not hold tasklock-$target/tasklock and its skills"
    fi
fi

# Building from source without a checkout around this script: fetch the source into a
# temporary directory, which cleanup (on any exit) removes.
if [ "$mode" = source ] && [ -z "$here" ]; then
    command -v git >/dev/null 2>&1 ||
        die "git not found on PATH: install.sh clones $repo_url with git to build from source"
    [ -n "$fetched" ] || fetched=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-install.XXXXXX") ||
        die "cannot create a temporary directory in ${TMPDIR:-/tmp}"
    ref=${TASKLOCK_REF:-v$tasklock_version}
    say "Fetching: git clone --depth 1 --branch $ref $repo_url (into $fetched, removed afterwards)"
    git clone -q --depth 1 --branch "$ref" -- "$repo_url" "$fetched/tasklock" ||
        die "git clone of $repo_url at $ref failed (output above): nothing was installed. Next: set TASKLOCK_REPO to the repository's URL or path (and TASKLOCK_REF to a tag of it), then run $(again $given_args)"
    here=$fetched/tasklock
    if [ ! -f "$here/Cargo.toml" ] || [ ! -d "$here/skills" ]; then
        die "$repo_url is not a tasklock repository: no Cargo.toml and skills/ in it"
    fi
fi

# The binary.
if [ -z "$source_bin" ]; then
    # On glibc Linux the binary is linked statically, as a non-PIE executable: dynamic
    # loading is a fifth of the cost of a short command, and a static-pie binary still
    # applies its relocations at every start (docs/performance.md). --target keeps the
    # flags off build scripts and proc macros.
    host=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
    target_args='' release_dir=release
    if [ -n "${TASKLOCK_FEATURES:-}" ]; then
        target_args="--features $TASKLOCK_FEATURES"
    fi
    case $host in
        *-linux-gnu)
            target_args="${target_args:+$target_args }--target $host" release_dir=$host/release
            flags_var=CARGO_TARGET_$(printf '%s' "$host" | tr 'a-z.-' 'A-Z__')_RUSTFLAGS
            export "$flags_var=-C target-feature=+crt-static -C relocation-model=static"
            ;;
    esac
    # A dry run builds too: only the cargo target directory is written, and without
    # the fresh binary it could not honestly say whether the installed one would change.
    if [ "$dry_run" = 1 ]; then
        say "Building (the dry run writes only cargo's target directory): cargo build --release --locked $target_args (in $here)"
    else
        say "Building: cargo build --release --locked $target_args (in $here)"
    fi
    # shellcheck disable=SC2086 # target_args is empty or a few words
    (cd "$here" && cargo build --release --locked $target_args) || die "cargo build failed (output above)"
    target_dir=${CARGO_TARGET_DIR:-target}
    case $target_dir in /*) ;; *) target_dir=$here/$target_dir ;; esac
    source_bin=$target_dir/$release_dir/tasklock
    [ -x "$source_bin" ] || die "the build did not produce $source_bin"
fi

# install_binary SOURCE DEST: one binary, recorded in the receipt.
install_binary() {
    if [ -f "$2" ] && [ ! -L "$2" ] && cmp -s "$1" "$2"; then
        _was=$(receipt_sum "$2")
        record bin "$(file_sum "$2")" "$2"
        if [ -n "$_was" ]; then item unchanged "$2"; else item adopted "$2" "(identical; now in the receipt)"; fi
    elif [ -d "$2" ] && [ ! -L "$2" ]; then
        die "$2 is a directory; move it and run again"
    else
        if [ -e "$2" ] || [ -L "$2" ]; then action=replaced; else action=installed; fi
        if [ "$dry_run" = 0 ]; then
            copy_atomic "$1" "$2" 755
            record bin "$(file_sum "$2")" "$2"
        fi
        item "$action" "$2"
    fi
}

# ---------------------------------------------------------------- summary

# What was done, and whether the bin directory is on PATH.
summary() {
    if [ "$dry_run" = 1 ]; then
        say "Dry run: $changed to change, $unchanged unchanged, $kept kept. Nothing was changed."
    elif [ "$changed" = 0 ]; then
        say "Already installed: nothing changed ($unchanged up to date, $kept kept)."
    else
        say "Installed: $changed changed, $unchanged unchanged, $kept kept. Receipt: $receipt"
    fi
    if [ "$kept" -gt 0 ]; then
        warn "$kept path(s) kept as they are (listed above as kept); --force replaces files and links"
    fi

    case ":$PATH:" in
        *":$bindir:"* | *":$bindir/:"*)
            found=$(command -v tasklock 2>/dev/null || true)
            if [ -n "$found" ] && [ "$found" != "$bin" ]; then
                say "note: another tasklock comes first on your PATH: $found"
            fi ;;
        *)
            say "note: $bindir is not on your PATH; add it (the Claude Code hooks run \`tasklock\` from PATH), e.g.:"
            say "  export PATH=\"$bindir:\$PATH\"" ;;
    esac
    say "MCP clients: \`tasklock init\` in a project registers the server for Codex (.codex/config.toml) and prints the setup for the others: \`claude mcp add tasklock -- tasklock mcp\`; elsewhere {\"mcpServers\": {\"tasklock\": {\"command\": \"tasklock\", \"args\": [\"mcp\"]}}}"
}

say "Binary:"
bin=$bindir/tasklock
ensure_dir "$bindir"
install_binary "$source_bin" "$bin"
# The MCP server (`tasklock mcp` runs it), built beside tasklock with the `mcp` feature.
source_mcp=$(dirname "$source_bin")/tasklock-mcp
if [ -f "$source_mcp" ] && [ -x "$source_mcp" ]; then
    install_binary "$source_mcp" "$bindir/tasklock-mcp"
else
    say "  (no tasklock-mcp: built without the mcp feature, so \`tasklock mcp\` is not available)"
fi
# The views (`tasklock top`, `tasklock ui` run it), built beside tasklock with the `view` feature.
source_view=$(dirname "$source_bin")/tasklock-view
if [ -f "$source_view" ] && [ -x "$source_view" ]; then
    install_binary "$source_view" "$bindir/tasklock-view"
else
    say "  (no tasklock-view: built without the view feature, so \`tasklock top\` and \`tasklock ui\` are not available)"
fi
if [ "$dry_run" = 0 ]; then
    version=$("$bin" --version 2>&1) || die "the installed binary does not run: $version"
    say "  runs:           $version"
fi
if [ "$binary_only" = 1 ]; then
    summary
    exit 0
fi

# The skills, and links to them for other agents. Their text is the one the binary
# carries (`tasklock setup` writes it out, into a temporary directory that cleanup
# removes), so what is installed is the pack of the binary's own version; a binary too old
# to have `setup` falls back to the skills beside this script.
skills_src=$here/skills
pack=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-pack.XXXXXX") ||
    die "cannot create a temporary directory in ${TMPDIR:-/tmp}"
# (XDG_DATA_HOME: setup's receipt of this temporary copy goes there too.)
if XDG_DATA_HOME=$pack "$source_bin" setup --skills-dir "$pack/skills" --no-agents >/dev/null 2>&1; then
    skills_src=$pack/skills
fi
say "Skills:"
skills=''
for src in "$skills_src"/*/; do
    [ -f "${src}SKILL.md" ] || continue
    src=${src%/}
    skills=$skills${src##*/}$nl
done
[ -n "$skills" ] || die "no skills found under $skills_src"
while IFS= read -r name; do
    [ -n "$name" ] || continue
    src=$skills_src/$name
    dest=$skills_dir/$name
    if [ -L "$dest" ]; then
        # Perhaps linked to a checkout by hand: writing through it would change that.
        item kept "$dest" "(a link to $(readlink "$dest"); left as it is)"
        continue
    fi
    ensure_dir "$dest"
    while IFS= read -r f; do
        [ -n "$f" ] || continue
        rel=${f#"$src"/}
        ensure_dir "$(dirname "$dest/$rel")"
        install_file "$f" "$dest/$rel"
    done <<EOF
$(find "$src" -type f | sort)
EOF
done <<EOF
$skills
EOF

if [ "$no_agents" = 0 ]; then
    say "Links for Codex and other agents:"
    ensure_dir "$agents_dir"
    while IFS= read -r name; do
        [ -n "$name" ] || continue
        if [ "$relative_links" = 1 ]; then
            install_link "../../.claude/skills/$name" "$agents_dir/$name"
        else
            install_link "$skills_dir/$name" "$agents_dir/$name"
        fi
    done <<EOF
$skills
EOF
fi

# Project setup with the binary just installed.
if [ "$project" = 1 ]; then
    say "Project:"
    if [ "$dry_run" = 1 ]; then
        say "  would run       $bin init (in $project_root)"
    else
        say "  running         $bin init (in $project_root)"
        (cd "$project_root" && "$bin" init) || die "\`tasklock init\` failed (output above)"
    fi
fi

# ---------------------------------------------------------------- loaded twice

# Claude Code lists every skill it finds, in ~/.claude/skills, in the project's
# .claude/skills and in enabled plugins; and runs the hooks of the project's settings
# and of plugins alike. Say when this install makes something load twice.
user_skills=$home/.claude/skills
if [ "$project" = 1 ]; then
    other_skills=$user_skills
else
    # The project around the current directory, if any (as for --project).
    other_skills=''
    root=$PWD
    while [ "$root" != / ] && [ ! -e "$root/.git" ]; do root=$(dirname "$root"); done
    [ -e "$root/.git" ] && other_skills=$root/.claude/skills
fi
if [ -n "$other_skills" ] && [ "$other_skills" != "$skills_dir" ]; then
    twice=''
    while IFS= read -r name; do
        [ -n "$name" ] || continue
        [ -f "$other_skills/$name/SKILL.md" ] && twice="$twice${twice:+, }$name"
    done <<EOF
$skills
EOF
    if [ -n "$twice" ]; then
        if [ "$project" = 1 ]; then
            warn "the skills $twice are also installed for your user in $other_skills: Claude Code lists each twice in the model's context. Keep one: $(again --uninstall) removes the global install (then run $(again --project) again)"
        else
            warn "the skills $twice are also in this project's $other_skills: Claude Code lists each twice in the model's context there. Keep one: delete the project's copies, or use only $(again --project)"
        fi
    fi
fi

# Is a tasklock plugin enabled for this user? enabledPlugins "tasklock@...": true in
# ~/.claude/settings.json, or installed (plugins/installed_plugins.json) and not
# disabled there.
plugin=''
user_settings=$home/.claude/settings.json
installed_plugins=$home/.claude/plugins/installed_plugins.json
if [ -f "$user_settings" ] && grep -Eq '"tasklock@[^"]*"[[:space:]]*:[[:space:]]*true' "$user_settings"; then
    plugin=1
elif [ -f "$installed_plugins" ] && grep -q '"tasklock@' "$installed_plugins" &&
    ! { [ -f "$user_settings" ] && grep -Eq '"tasklock@[^"]*"[[:space:]]*:[[:space:]]*false' "$user_settings"; }; then
    plugin=1
fi
if [ -n "$plugin" ]; then
    if [ "$project" = 1 ]; then
        warn "the tasklock plugin is enabled for your user and \`tasklock init\` wires the same hooks into this project: Claude Code runs each hook twice, and lists the skills twice. Use the plugin or --project, not both (/plugin disable tasklock@tasklock)"
    else
        warn "the tasklock plugin is enabled for your user and brings the same skills: Claude Code lists each twice. Use the plugin or install.sh, not both (/plugin disable tasklock@tasklock, or $(again --uninstall))"
    fi
fi

summary

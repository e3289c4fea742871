#!/bin/sh
# scripts/dist.sh: build this host's release archive of tasklock, and its SHA-256 sum, as
# the release workflow (.github/workflows/release.yml) does for every platform.
#
#   scripts/dist.sh [OUT_DIR]        (default: dist/)
#
# Writes OUT_DIR/tasklock-TARGET.tar.gz and OUT_DIR/tasklock-TARGET.tar.gz.sha256
# ("HASH  NAME", as `sha256sum -c` and `shasum -a 256 -c` read it). TARGET is the Rust
# target triple of this host (x86_64-unknown-linux-gnu, aarch64-apple-darwin, ...). The
# archive holds one directory, tasklock-TARGET/, with the binaries (tasklock and
# tasklock-mcp, and tasklock-view for `top` and `ui`), the skills, install.sh, README.md and the licence files: what install.sh
# installs from when it downloads a release instead of building.
#
# Built like install.sh builds (`cargo build --release --locked`; statically linked on
# glibc Linux), and with every store: `--features postgres`, so that a prebuilt binary
# can use the PostgreSQL store without a rebuild. On Linux it is linked as a static
# non-PIE executable (`-C relocation-model=static`): a static-pie binary applies its
# relocations at every start, and the PostgreSQL client would make every command, file
# store included, start slower; non-PIE, the binary with it starts as fast as one without
# (docs/performance.md). TASKLOCK_DIST_BINARY=PATH packages that prebuilt tasklock (and
# the tasklock-mcp and tasklock-view beside it, if any) instead of building: for tests.
#
# This archive's binary is the one every channel delivers: scripts/npm.sh packs the npm
# platform package from it, install.sh and the Claude Code plugin's launcher download it.
#
# Reproducible: two runs on one commit with one binary write the same bytes. Every member
# has the time SOURCE_DATE_EPOCH (default: the commit time of HEAD), owner and group 0,
# mode 644 or 755; members are in byte order of their names; gzip -n stores no name or
# time.
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"
case ${1:-} in -*) echo "dist.sh: unknown option $1 (see --help)" >&2; exit 64 ;; esac
[ $# -le 1 ] || { echo "dist.sh: one OUT_DIR at most (see --help)" >&2; exit 64; }

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/dist}
case $out in /*) ;; *) out=$PWD/$out ;; esac

target=${TASKLOCK_DIST_TARGET:-$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')}
[ -n "$target" ] || { echo "dist.sh: cannot tell this host's target (no rustc?); set TASKLOCK_DIST_TARGET" >&2; exit 1; }

if [ -n "${TASKLOCK_DIST_BINARY:-}" ]; then
    bin=$TASKLOCK_DIST_BINARY
else
    case $target in
        *-linux-gnu)
            flags_var=CARGO_TARGET_$(printf '%s' "$target" | tr 'a-z.-' 'A-Z__')_RUSTFLAGS
            export "$flags_var=-C target-feature=+crt-static -C relocation-model=static"
            ;;
    esac
    (cd "$here" && cargo build --release --locked --features postgres --target "$target")
    target_dir=${CARGO_TARGET_DIR:-$here/target}
    bin=$target_dir/$target/release/tasklock
fi
[ -x "$bin" ] || { echo "dist.sh: no binary at $bin" >&2; exit 1; }

name=tasklock-$target
stage=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-dist.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM
mkdir -p "$stage/$name"
cp "$bin" "$stage/$name/tasklock"
for extra in tasklock-mcp tasklock-view; do
    if [ -x "$(dirname "$bin")/$extra" ]; then
        cp "$(dirname "$bin")/$extra" "$stage/$name/$extra"
    fi
done
cp -R "$here/skills" "$stage/$name/skills"
cp "$here/install.sh" "$here/README.md" "$stage/$name/"
for f in LICENSE-MIT LICENSE-APACHE; do
    [ -f "$here/$f" ] || { echo "dist.sh: $here/$f is missing: the archive must carry the licence" >&2; exit 1; }
    cp "$here/$f" "$stage/$name/"
done

# Fixed modes and times, whatever the umask and the clock.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || true)}
case $epoch in '' | *[!0-9]*) echo "dist.sh: set SOURCE_DATE_EPOCH (seconds): $here is not a git checkout" >&2; exit 1 ;; esac
stamp=$(TZ=UTC date -d "@$epoch" +%Y%m%d%H%M.%S 2>/dev/null || TZ=UTC date -r "$epoch" +%Y%m%d%H%M.%S)
find "$stage/$name" -type d -exec chmod 755 {} +
find "$stage/$name" -type f -exec chmod 644 {} +
for f in tasklock tasklock-mcp tasklock-view install.sh; do
    if [ -f "$stage/$name/$f" ]; then chmod 755 "$stage/$name/$f"; fi
done
find "$stage/$name" -exec env TZ=UTC touch -h -t "$stamp" {} +

mkdir -p "$out"
archive=$name.tar.gz
(cd "$stage" && find "$name" -print | LC_ALL=C sort >"$stage/members")
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
    set -- --format=ustar --owner=0 --group=0 --numeric-owner --no-recursion -T "$stage/members"
else
    set -- --format=ustar --uid 0 --gid 0 --uname '' --gname '' --numeric-owner --no-xattrs --no-mac-metadata -n -T "$stage/members"
fi
(cd "$stage" && tar -cf - "$@" | gzip -n -9 >"$out/$archive.tmp")
mv "$out/$archive.tmp" "$out/$archive"
if command -v sha256sum >/dev/null 2>&1; then
    sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
else
    sum=$(shasum -a 256 "$out/$archive" | cut -d' ' -f1)
fi
printf '%s  %s\n' "$sum" "$archive" >"$out/$archive.sha256"
echo "$out/$archive"
echo "$out/$archive.sha256"

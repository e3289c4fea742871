#!/bin/sh
# scripts/npm.sh: make the npm packages, as tarballs (`npm pack`), from a release archive.
#
#   scripts/npm.sh [--archive ARCHIVE] [OUT_DIR]     (default OUT_DIR: dist/npm)
#   scripts/npm.sh --main-only [OUT_DIR]
#
# Writes OUT_DIR/tasklock-OS-CPU-VERSION.tgz (@tasklock/OS-CPU: the binaries of one
# platform, an optional dependency of the main package that npm installs only on its
# platform, as esbuild and biome ship theirs) and OUT_DIR/tasklock-VERSION.tgz (the main
# package users install: `npm i -g tasklock`, or `npx tasklock`).
#
# The binaries are the ones in ARCHIVE, the tasklock-TARGET.tar.gz that scripts/dist.sh
# wrote (checked against the .sha256 beside it): npm delivers the very bytes the archive
# and install.sh do, never a build of its own. Without --archive it runs scripts/dist.sh
# first (which builds, or packs TASKLOCK_DIST_BINARY) and packs what that wrote.
# --main-only writes the main package alone (it holds no binary). The release workflow
# publishes one platform package per platform, then the main one.
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"

here=$(cd "$(dirname "$0")/.." && pwd)
archive='' main_only=0
while [ $# -gt 0 ]; do
    case $1 in
        --archive) [ $# -ge 2 ] || { echo "npm.sh: --archive needs a file" >&2; exit 64; }; archive=$2; shift 2 ;;
        --main-only) main_only=1; shift ;;
        -*) echo "npm.sh: unknown option $1" >&2; exit 64 ;;
        *) break ;;
    esac
done
out=${1:-$here/dist/npm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)

stage=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-npm.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM
mkdir -p "$out"

if [ "$main_only" = 0 ]; then
    if [ -z "$archive" ]; then
        sh "$here/scripts/dist.sh" "$stage/dist" >/dev/null
        archive=$(ls "$stage"/dist/tasklock-*.tar.gz)
    fi
    case $archive in /*) ;; *) archive=$PWD/$archive ;; esac
    [ -f "$archive" ] && [ -f "$archive.sha256" ] ||
        { echo "npm.sh: no $archive with its .sha256 beside it (scripts/dist.sh writes both)" >&2; exit 1; }
    want=$(awk 'NR == 1 { print $1 }' "$archive.sha256")
    if command -v sha256sum >/dev/null 2>&1; then
        got=$(sha256sum "$archive" | cut -d' ' -f1)
    else
        got=$(shasum -a 256 "$archive" | cut -d' ' -f1)
    fi
    [ "$got" = "$want" ] || { echo "npm.sh: $archive does not match its .sha256" >&2; exit 1; }
    name=$(basename "$archive" .tar.gz)
    case ${name#tasklock-} in
        x86_64-unknown-linux-gnu) os=linux cpu=x64 ;;
        aarch64-unknown-linux-gnu) os=linux cpu=arm64 ;;
        aarch64-apple-darwin) os=darwin cpu=arm64 ;;
        x86_64-apple-darwin) os=darwin cpu=x64 ;;
        *) echo "npm.sh: no npm package for ${name#tasklock-}" >&2; exit 1 ;;
    esac
    mkdir "$stage/unpacked"
    (cd "$stage/unpacked" && gzip -dc "$archive" | tar -xf -)
    from=$stage/unpacked/$name

    # The platform package: the archive's binaries and licences, as they are.
    plat=$stage/platform
    mkdir -p "$plat/bin"
    for f in tasklock tasklock-mcp tasklock-view; do
        if [ -f "$from/$f" ]; then cp -p "$from/$f" "$plat/bin/$f"; fi
    done
    cp "$from/LICENSE-MIT" "$from/LICENSE-APACHE" "$plat/"
    cat >"$plat/package.json" <<JSON
{
  "name": "@tasklock/$os-$cpu",
  "version": "$version",
  "description": "The tasklock binaries for $os $cpu (installed by the tasklock package).",
  "license": "MIT OR Apache-2.0",
  "repository": "github:tasklock/tasklock",
  "os": ["$os"],
  "cpu": ["$cpu"],
  "files": ["bin/", "LICENSE-MIT", "LICENSE-APACHE"],
  "preferUnplugged": true
}
JSON
    (cd "$plat" && npm pack --silent --pack-destination "$out" >/dev/null)
    echo "$out/tasklock-$os-$cpu-$version.tgz"
fi

# The main package, its version and its dependencies' versions set to the crate's.
main=$stage/main
cp -R "$here/npm/tasklock" "$main"
cp "$here/README.md" "$here/LICENSE-MIT" "$here/LICENSE-APACHE" "$main/"
sed "s/\"0\.1\.0\"/\"$version\"/g" "$here/npm/tasklock/package.json" >"$main/package.json"
(cd "$main" && npm pack --silent --pack-destination "$out" >/dev/null)
echo "$out/tasklock-$version.tgz"

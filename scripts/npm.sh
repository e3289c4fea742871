#!/bin/sh
# scripts/npm.sh: build the npm packages for this host, as tarballs (`npm pack`).
#
#   scripts/npm.sh [OUT_DIR]        (default: dist/npm)
#
# Writes OUT_DIR/tasklock-VERSION.tgz (the package users install: `npm i -g tasklock`,
# or `npx tasklock`) and OUT_DIR/tasklock-OS-CPU-VERSION.tgz (@tasklock/OS-CPU, the
# prebuilt binaries of this platform, an optional dependency of the first, installed by
# npm only on its platform, as esbuild and biome ship theirs). The binaries are built as
# scripts/dist.sh builds them; TASKLOCK_DIST_BINARY=PATH packs that prebuilt tasklock (and
# the tasklock-mcp beside it) instead. The release workflow publishes one platform package
# per platform and then the main one.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/dist/npm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)

case $(uname -s)/$(uname -m) in
    Linux/x86_64 | Linux/amd64) os=linux cpu=x64 ;;
    Linux/aarch64 | Linux/arm64) os=linux cpu=arm64 ;;
    Darwin/arm64) os=darwin cpu=arm64 ;;
    Darwin/x86_64) os=darwin cpu=x64 ;;
    *) echo "npm.sh: no npm package for $(uname -s) $(uname -m)" >&2; exit 1 ;;
esac

if [ -n "${TASKLOCK_DIST_BINARY:-}" ]; then
    bin=$TASKLOCK_DIST_BINARY
else
    target=$(rustc -vV | sed -n 's/^host: //p')
    case $target in
        *-linux-gnu)
            flags_var=CARGO_TARGET_$(printf '%s' "$target" | tr 'a-z.-' 'A-Z__')_RUSTFLAGS
            export "$flags_var=-C target-feature=+crt-static"
            ;;
    esac
    (cd "$here" && cargo build --release --locked --target "$target")
    bin=${CARGO_TARGET_DIR:-$here/target}/$target/release/tasklock
fi
[ -x "$bin" ] || { echo "npm.sh: no binary at $bin" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/tasklock-npm.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM

# The platform package: the binaries, for one OS and CPU.
plat=$stage/platform
mkdir -p "$plat/bin"
cp "$bin" "$plat/bin/tasklock"
if [ -x "$(dirname "$bin")/tasklock-mcp" ]; then
    cp "$(dirname "$bin")/tasklock-mcp" "$plat/bin/tasklock-mcp"
fi
chmod 755 "$plat"/bin/*
cat >"$plat/package.json" <<JSON
{
  "name": "@tasklock/$os-$cpu",
  "version": "$version",
  "description": "The tasklock binaries for $os $cpu (installed by the tasklock package).",
  "license": "MIT OR Apache-2.0",
  "repository": "github:tasklock/tasklock",
  "os": ["$os"],
  "cpu": ["$cpu"],
  "files": ["bin/"],
  "preferUnplugged": true
}
JSON

# The main package, its version and its dependencies' versions set to the crate's.
main=$stage/main
cp -R "$here/npm/tasklock" "$main"
cp "$here/README.md" "$main/README.md"
sed "s/\"0\.1\.0\"/\"$version\"/g" "$here/npm/tasklock/package.json" >"$main/package.json"

mkdir -p "$out"
(cd "$plat" && npm pack --silent --pack-destination "$out" >/dev/null)
(cd "$main" && npm pack --silent --pack-destination "$out" >/dev/null)
ls "$out"/*.tgz

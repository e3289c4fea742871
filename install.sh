#!/bin/sh
# Build tasklock from this checkout and install the binary.
#   ./install.sh [--prefix DIR] [--dry-run]
# The binary goes to ${XDG_BIN_HOME:-$HOME/.local/bin} unless --prefix is given.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
bindir=${XDG_BIN_HOME:-$HOME/.local/bin}
dry_run=0

usage() {
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 64; }
                  bindir=$2; shift 2 ;;
        --prefix=*) bindir=${1#--prefix=}; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown option: $1" >&2; usage >&2; exit 64 ;;
    esac
done

if [ "$dry_run" = 1 ]; then
    echo "would build: cargo build --release --locked (in $here)"
    echo "would install: $bindir/tasklock"
    exit 0
fi

command -v cargo >/dev/null 2>&1 || {
    echo "install.sh: cargo not found; install Rust from https://rustup.rs and run again" >&2
    exit 1
}

(cd "$here" && cargo build --release --locked)
mkdir -p "$bindir"
# Copy beside the target, then rename: a running tasklock never sees a half-written file.
tmp="$bindir/.tasklock.$$"
cp "$here/target/release/tasklock" "$tmp"
chmod 755 "$tmp"
mv -f "$tmp" "$bindir/tasklock"
echo "installed $bindir/tasklock ($("$bindir/tasklock" --version))"

case ":$PATH:" in
    *":$bindir:"*) ;;
    *) echo "note: $bindir is not on your PATH; add it, e.g.: export PATH=\"$bindir:\$PATH\"" ;;
esac

#!/bin/sh
# scripts/pictures.sh: make the README's pictures again, from the real `tasklock demo`.
#
#   scripts/pictures.sh
#
# Runs tests/pictures.rs with TASKLOCK_PICTURES=update, which writes
# docs/pictures/top.svg (`tasklock top` in a terminal of a fixed size, in tmux, drawn as
# an SVG) and docs/pictures/page.png (the page of `tasklock demo --ui` in headless
# Chromium) once the demo's fleet shows agents at work, a queue, a death and a freeze.
# Needs tmux, chromium and chromedriver, as the tests do. Look at both before committing.
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"

if [ $# -gt 0 ]; then
    echo "pictures.sh: takes no arguments (got $1)" >&2
    exit 64
fi
cd "$(dirname "$0")/.."
TASKLOCK_PICTURES=update exec cargo test --locked --all-features --test pictures

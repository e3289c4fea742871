#!/bin/sh
# scripts/gemini-plugin.sh: write plugins/gemini/, the Gemini CLI extension, from the
# sources it copies: the skills (skills/*/SKILL.md), Gemini CLI's hooks
# (templates/gemini-settings.json, which is also what `tasklock init` merges into a
# project's .gemini/settings.json) and the coordination instructions
# (templates/instructions.md, the extension's GEMINI.md). `gemini extensions install`
# copies the directory, so the extension holds copies; tests/gemini_plugin.rs fails when
# they are not the sources' (run this script and commit).
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"
[ $# -eq 0 ] || { echo "gemini-plugin.sh: takes no arguments (see --help)" >&2; exit 64; }
here=$(cd "$(dirname "$0")/.." && pwd)
plugin=$here/plugins/gemini
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)
rm -rf "$plugin/skills"
mkdir -p "$plugin/hooks" "$plugin/skills"
for dir in "$here"/skills/*/; do
    name=$(basename "$dir")
    [ -f "$dir/SKILL.md" ] || continue
    mkdir -p "$plugin/skills/$name"
    cp "$dir/SKILL.md" "$plugin/skills/$name/SKILL.md"
done
cp "$here/templates/gemini-settings.json" "$plugin/hooks/hooks.json"
cp "$here/templates/instructions.md" "$plugin/GEMINI.md"
cat >"$plugin/gemini-extension.json" <<JSON
{
  "name": "tasklock",
  "version": "$version",
  "description": "Atomic task checkouts for coding agents working side by side: skills to check out, list and keep tasks alive, and hooks that register the session, heartbeat, gate file edits and release its checkouts when it ends. Needs the tasklock CLI on PATH.",
  "contextFileName": "GEMINI.md"
}
JSON
echo "$plugin"

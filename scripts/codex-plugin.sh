#!/bin/sh
# scripts/codex-plugin.sh: write plugins/codex/, the Codex plugin, from the sources it
# copies: the skills (skills/*/SKILL.md) and Codex's hooks (templates/codex-hooks.json).
# Codex copies a plugin's directory into its cache and drops symbolic links, so the
# plugin holds copies; tests/codex_plugin.rs fails when they are not the sources' (run
# this script and commit). The marketplace Codex reads is .agents/plugins/marketplace.json.
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"
[ $# -eq 0 ] || { echo "codex-plugin.sh: takes no arguments (see --help)" >&2; exit 64; }
here=$(cd "$(dirname "$0")/.." && pwd)
plugin=$here/plugins/codex
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)
rm -rf "$plugin/skills"
mkdir -p "$plugin/.codex-plugin" "$plugin/skills"
for dir in "$here"/skills/*/; do
    name=$(basename "$dir")
    [ -f "$dir/SKILL.md" ] || continue
    mkdir -p "$plugin/skills/$name"
    cp "$dir/SKILL.md" "$plugin/skills/$name/SKILL.md"
done
cp "$here/templates/codex-hooks.json" "$plugin/hooks.json"
cat >"$plugin/.codex-plugin/plugin.json" <<JSON
{
  "name": "tasklock",
  "version": "$version",
  "description": "Atomic task checkouts for coding agents working side by side: skills to check out, list and keep tasks alive, and hooks that register the session, heartbeat and release its checkouts when it ends. Needs the tasklock CLI on PATH.",
  "author": { "name": "tasklock contributors" },
  "license": "MIT OR Apache-2.0",
  "repository": "https://github.com/tasklock/tasklock",
  "keywords": ["tasks", "locks", "coordination", "multi-agent"],
  "skills": "./skills/",
  "hooks": "./hooks.json",
  "interface": {
    "displayName": "tasklock",
    "shortDescription": "Check out a task before working on it, so that no two agents do the same work.",
    "developerName": "tasklock contributors",
    "category": "Coding"
  }
}
JSON
echo "$plugin"

#!/bin/sh
# scripts/claude-plugin.sh: write the copies in plugins/claude/, the Claude Code plugin,
# from their sources: the skills (skills/*/SKILL.md), install.sh (which the plugin's
# launcher, bin/tasklock, runs to download the release binary on first use) and the
# licence files. The plugin's manifest (.claude-plugin/plugin.json) and launcher live
# there and nowhere else. Claude Code copies a plugin's directory into its cache, so the
# plugin is its own small directory, not the repository; the marketplace at the
# repository's root (.claude-plugin/marketplace.json) points to it. tests/plugin.rs
# fails when the copies are not the sources' (run this script and commit).
set -eu
. "$(dirname "$0")/usage.sh"
script_help "$0" "${1:-}"
[ $# -eq 0 ] || { echo "claude-plugin.sh: takes no arguments (see --help)" >&2; exit 64; }
here=$(cd "$(dirname "$0")/.." && pwd)
plugin=$here/plugins/claude
rm -rf "$plugin/skills"
mkdir -p "$plugin/skills"
for dir in "$here"/skills/*/; do
    name=$(basename "$dir")
    [ -f "$dir/SKILL.md" ] || continue
    mkdir -p "$plugin/skills/$name"
    cp "$dir/SKILL.md" "$plugin/skills/$name/SKILL.md"
done
cp "$here/install.sh" "$plugin/install.sh"
chmod 755 "$plugin/install.sh"
cp "$here/LICENSE-MIT" "$here/LICENSE-APACHE" "$plugin/"
echo "$plugin"

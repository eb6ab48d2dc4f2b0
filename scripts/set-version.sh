#!/usr/bin/env bash
# Set the crate's and the plugin's version, in every file that names it:
# Cargo.toml, Cargo.lock (the workspace entry only), .claude-plugin/plugin.json
# and the plugin's package.json (scripts/npm-lock.mjs --package-json). The
# release workflow runs it before it builds, so the binaries, the packages
# and the lockfile it commits all say the same version.
#   scripts/set-version.sh 0.2.0
set -euo pipefail
cd "$(dirname "$0")/.."
v=${1:?usage: scripts/set-version.sh VERSION}
[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "set-version: '$v' is not a semver version" >&2; exit 2; }
# The first `version = ` line of Cargo.toml is the package's.
awk -v v="$v" '!done && /^version = "/ { print "version = \"" v "\""; done = 1; next } { print }' Cargo.toml >Cargo.toml.new
mv Cargo.toml.new Cargo.toml
cargo update --workspace --offline --quiet 2>/dev/null || cargo update --workspace --quiet
sed -E "s/^(  \"version\": \")[^\"]*(\",)$/\1$v\2/" .claude-plugin/plugin.json >.claude-plugin/plugin.json.new
mv .claude-plugin/plugin.json.new .claude-plugin/plugin.json
grep -q "\"version\": \"$v\"" .claude-plugin/plugin.json || { echo "set-version: .claude-plugin/plugin.json did not take $v" >&2; exit 1; }
node scripts/npm-lock.mjs --package-json .
echo "set-version: $v" >&2

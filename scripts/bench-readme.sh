#!/usr/bin/env sh
# Regenerate the README's Performance tables from the benches, in one step:
# runs `cargo bench --bench NAME -- --markdown` for each NAME (default:
# foundation shim jobs plugin repair), then replaces what stands between
# `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in README.md with that
# output. README.md is only written once every bench has run. The jobs and
# plugin benches run the pinned Claude Code CLI (installed here if needed).
#
#   scripts/bench-readme.sh              # all four (a few minutes)
#   scripts/bench-readme.sh shim         # just the shim table
set -eu
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- foundation shim jobs plugin repair
for name in "$@"; do
  grep -qx "<!-- bench:$name -->" README.md && grep -qx "<!-- /bench:$name -->" README.md ||
    { echo "bench-readme: README.md has no <!-- bench:$name --> ... <!-- /bench:$name --> block" >&2; exit 1; }
done
LOCALAGENTS_CLAUDE="${LOCALAGENTS_CLAUDE:-$(scripts/install-claude.sh)}"
export LOCALAGENTS_CLAUDE

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for name in "$@"; do
  echo "bench-readme: cargo bench --bench $name -- --markdown" >&2
  cargo bench --locked --bench "$name" -- --markdown >"$tmp/$name.md"
  grep -q '^|' "$tmp/$name.md" || { echo "bench-readme: the $name bench printed no table" >&2; exit 1; }
  cat "$tmp/$name.md"
done

cp README.md "$tmp/README.md"
for name in "$@"; do
  awk -v name="$name" -v file="$tmp/$name.md" '
    $0 == "<!-- bench:" name " -->" {
      print; print ""
      while ((getline line < file) > 0) print line
      print ""; skip = 1; next
    }
    $0 == "<!-- /bench:" name " -->" { skip = 0 }
    !skip { print }
  ' "$tmp/README.md" >"$tmp/README.next"
  mv "$tmp/README.next" "$tmp/README.md"
done
cp "$tmp/README.md" README.md
echo "bench-readme: README.md updated ($*); review with git diff README.md" >&2

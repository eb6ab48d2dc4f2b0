#!/usr/bin/env sh
# Regenerate the benchmark tables of docs/benchmarks.md from the benches, in
# one step: runs `cargo bench --bench NAME -- --markdown` for each NAME
# (default: foundation shim jobs plugin repair), then replaces what stands
# between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in
# docs/benchmarks.md with that output. The file is only written once every
# bench has run. The jobs and plugin benches run the pinned Claude Code CLI
# (installed here if needed).
#
#   scripts/bench-readme.sh              # all five (a few minutes)
#   scripts/bench-readme.sh shim         # just the shim table
set -eu
cd "$(dirname "$0")/.."
doc=docs/benchmarks.md
[ "$#" -gt 0 ] || set -- foundation shim jobs plugin repair
for name in "$@"; do
  grep -qx "<!-- bench:$name -->" "$doc" && grep -qx "<!-- /bench:$name -->" "$doc" ||
    { echo "bench-readme: $doc has no <!-- bench:$name --> ... <!-- /bench:$name --> block" >&2; exit 1; }
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

cp "$doc" "$tmp/doc.md"
for name in "$@"; do
  awk -v name="$name" -v file="$tmp/$name.md" '
    $0 == "<!-- bench:" name " -->" {
      print; print ""
      while ((getline line < file) > 0) print line
      print ""; skip = 1; next
    }
    $0 == "<!-- /bench:" name " -->" { skip = 0 }
    !skip { print }
  ' "$tmp/doc.md" >"$tmp/doc.next"
  mv "$tmp/doc.next" "$tmp/doc.md"
done
cp "$tmp/doc.md" "$doc"
echo "bench-readme: $doc updated ($*); review with git diff $doc" >&2

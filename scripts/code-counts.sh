#!/usr/bin/env sh
# Counts the clean-house figures of issue 23 (and with `43`, of issue 43),
# for any checkout:
#   scripts/code-counts.sh [REV]      (default: the work tree)
#   scripts/code-counts.sh 43 [REV]   reads of JSON by key in all of src
#                                     outside shim/fold* and shim/repair/, a
#                                     line a file and the total (the
#                                     layering test holds it at none now;
#                                     this counts any revision)
# 1. `serde_json::Value` reads in non-test code of src/runner.rs and
#    src/probe/: `["key"]`, `.get("key")` and `.pointer(` before the first
#    `#[cfg(test)]` of each file.
# 2. Lines of the six long functions, from their `fn` line to the closing
#    brace at the same indent.
set -eu
cd "$(dirname "$0")/.."
issue=23
if [ "${1:-}" = 43 ]; then issue=43; shift; fi
rev="${1:-}"
show() { if [ -n "$rev" ]; then git show "$rev:$1" 2>/dev/null || true; else cat "$1" 2>/dev/null || true; fi; }
if [ "$issue" = 43 ]; then
  if [ -n "$rev" ]; then all=$(git ls-tree -r --name-only "$rev" -- src); else all=$(git ls-files src); fi
  total=0
  for f in $(echo "$all" | grep '\.rs$' | grep -v -e '^src/shim/fold' -e '^src/shim/repair/'); do
    n=$(show "$f" | awk '/^#\[cfg\(test\)\]/{exit} {print}' | grep -oE '\["[A-Za-z_0-9]+"\]|\.get\("[^"]+"\)|\.pointer\(' | wc -l)
    if [ "$n" -gt 0 ]; then echo "key reads  $f  $n"; total=$((total + n)); fi
  done
  echo "key reads  total  $total"
  exit 0
fi
files() { if [ -n "$rev" ]; then git ls-tree -r --name-only "$rev" -- src/runner.rs src/probe; else ls src/runner.rs src/probe/*.rs; fi; }
for f in $(files | grep '\.rs$'); do
  n=$(show "$f" | awk '/#\[cfg\(test\)\]/{exit} {print}' | grep -oE '\["[A-Za-z_0-9-]+"\]|\.get\("[A-Za-z_0-9-]+"\)|\.pointer\(' | wc -l)
  echo "value reads  $f  $n"
done
for spec in "src/jobs/run.rs run" "src/probe/mod.rs probe_inner" "src/jobs/manager.rs start" \
  "src/config/schema.rs build" "src/setup.rs bringup" "src/jobs/run.rs session"; do
  # shellcheck disable=SC2086 # split on purpose: file and name
  set -- $spec
  show "$1" | awk -v name="$2" -v file="$1" '
    !found && match($0, "^[ ]*(pub(\\([a-z]+\\))? )?(async )?fn " name "[(<]") {
      found = NR; ind = $0; sub(/[^ ].*/, "", ind); next }
    found && $0 == ind "}" { print "fn lines     " file "  " name "  " NR - found + 1; exit }'
done

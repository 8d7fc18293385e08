#!/bin/sh
# Detection benchmark: builds test_stream (through the shared build lock),
# runs its hidden [bench] cases (accuracy and samples-to-label per class, cost
# of Record and of one re-test, memory per node) and writes the figures into
# docs/DETECTION.md between the FIGURES markers. Figures only: nothing here
# passes or fails on a number.
#
#   scripts/bench_detection.sh            # build, run, update docs/DETECTION.md
#   scripts/bench_detection.sh --no-doc   # build, run, print only
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${IGT_BUILD_DIR:-$root/build}
doc=$root/docs/DETECTION.md
write_doc=1
[ "${1:-}" = "--no-doc" ] && write_doc=0

flock /tmp/igt-build.lock cmake --build "$build" --target test_stream -j2 >/dev/null

out=$(mktemp)
trap 'rm -f "$out" "$out.md"' EXIT
"$build/test_stream" "[bench]" >"$out"
# Keep the Markdown the cases print (drop Catch2's banner and summary).
sed -n '/^###/,$p' "$out" | sed '/^====/,$d' >"$out.md"
{
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),"
  echo "build type $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"), by \`scripts/bench_detection.sh\`."
  echo
  cat "$out.md"
} >"$out"
cat "$out"

if [ $write_doc -eq 1 ]; then
  python3 - "$doc" "$out" <<'EOF'
import sys
doc, figs = sys.argv[1], open(sys.argv[2]).read()
text = open(doc).read()
begin, end = "<!-- BEGIN FIGURES (scripts/bench_detection.sh) -->", "<!-- END FIGURES -->"
i, j = text.index(begin) + len(begin), text.index(end)
open(doc, "w").write(text[:i] + "\n" + figs.rstrip() + "\n" + text[j:])
EOF
  echo "updated $doc" >&2
fi

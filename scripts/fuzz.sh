#!/usr/bin/env bash
# libFuzzer runs (issue 6): builds fuzz/ standalone with clang-14 +
# -fsanitize=fuzzer,address,undefined into build-fuzz/, then fuzzes each
# target for FUZZ_SECONDS (default 25) starting from its seed corpus in
# fuzz/corpus/<target>/ (new interesting inputs go to build-fuzz/corpus-<t>/,
# crashes to build-fuzz/crash-*). Exit status non-zero on any finding.
#
# Usage: scripts/fuzz.sh [target...]     targets: config list_xml trace
#   FUZZ_SECONDS=N   time per target     IGT_BUILD_LOCK=FILE  flock the build
#   MERGE=1          also copy new corpus entries that add coverage into
#                    fuzz/corpus/<t>/ (libFuzzer -merge=1)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${FUZZ_SECONDS:-25}
targets=${*:-config list_xml trace}
CXX=${FUZZ_CXX:-g++}
command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (scripts/setup.sh installs g++ and libclang-rt-14-dev)" >&2; exit 2; }

cmake -S fuzz -B build-fuzz -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
build_cmd=(cmake --build build-fuzz -j"${JOBS:-$(nproc)}")
if [[ -n "${IGT_BUILD_LOCK:-}" ]]; then flock "$IGT_BUILD_LOCK" "${build_cmd[@]}"; else "${build_cmd[@]}"; fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus-$t"
  echo "== fuzz_$t for ${SECONDS_PER}s"
  if ! (cd build-fuzz && "./fuzz_$t" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 "corpus-$t" "../fuzz/corpus/$t" 2>&1 | tail -15); then
    status=1
  fi
  if [[ -n "${MERGE:-}" ]]; then
    (cd build-fuzz && "./fuzz_$t" -merge=1 "../fuzz/corpus/$t" "corpus-$t" 2>&1 | tail -2)
  fi
done
ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* 2>/dev/null && status=1
exit $status

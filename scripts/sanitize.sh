#!/usr/bin/env bash
# Sanitizer runs (issue 6): builds igtcache and every unit test with
#   AddressSanitizer + UndefinedBehaviorSanitizer  -> build-asan/
#   ThreadSanitizer                                -> build-tsan/
# and runs, under each, all unit tests (ctest -L unit) and three short real
# mounts (test_corruption: cache damage; test_faults: S3 faults through
# scripts/cloudproxy.py; test_concurrency: many readers of shared files). Any sanitizer report fails the run (halt_on_error;
# a daemon that dies of one makes its mount test fail).
#
# Usage: scripts/sanitize.sh [asan|tsan|all] [extra ctest args]
#   IGT_BUILD_LOCK=/tmp/igt-build.lock  take this flock around each build
#   JOBS=N                              parallel build jobs (default nproc)
#   SKIP_MOUNT=1                        unit tests only
#   SAN_TARGETS="igtcache test_cache"   build and test only these targets
# Timings on the 2-core dev machine are in docs/RELIABILITY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
shift || true
JOBS=${JOBS:-$(nproc)}
ROOT=$(pwd)

build() {  # dir sanitizer
  local dir=$1 san=$2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIGT_SANITIZE="$san" >/dev/null
  # One target at a time, each under the lock when asked: on a shared
  # machine other builds get their turn between targets.
  local targets
  targets=${SAN_TARGETS:-$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \(igtcache\|test_[a-z_]*\|fuzz_replay_[a-z_]*\)$/\1/p')}
  for t in $targets; do
    echo "-- $t"
    if [[ -n "${IGT_BUILD_LOCK:-}" ]]; then
      flock "$IGT_BUILD_LOCK" cmake --build "$dir" --target "$t" -j"$JOBS"
    else
      cmake --build "$dir" --target "$t" -j"$JOBS"
    fi
  done
}

run() {  # name sanitizer
  local name=$1 san=$2 dir=build-$1
  local t0 t1 t2
  t0=$(date +%s)
  echo "== $name: building ($san) into $dir"
  mkdir -p "$dir"; build "$dir" "$san" > "$dir/sanitize-build.log" 2>&1 || { tail -50 "$dir/sanitize-build.log"; return 1; }
  t1=$(date +%s)
  echo "== $name: built in $((t1 - t0)) s; running unit tests"
  local mount_re='^mount: test_(corruption|faults|concurrency)$'
  if [[ -n "${SAN_TARGETS:-}" ]]; then  # only the unit tests of the targets built
    local re
    re=$(echo "$SAN_TARGETS" | tr ' ' '\n' | sed -n 's/^test_\(.*\)$/^\1:/p' | paste -sd'|')
    [[ -n "$re" ]] && ( cd "$dir" && ctest -L unit -R "$re" -j2 --output-on-failure --timeout 1200 "$@" )
  else
    ( cd "$dir" && ctest -L unit -j2 --output-on-failure --timeout 1200 "$@" )
  fi
  if [[ -z "${SKIP_MOUNT:-}" ]]; then
    echo "== $name: short mount tests"
    ( cd "$dir" && ctest -R "$mount_re" --output-on-failure --timeout 1200 "$@" )
  fi
  t2=$(date +%s)
  echo "== $name: PASS (build $((t1 - t0)) s, tests $((t2 - t1)) s)"
}

# Sanitizer options: stop at the first report; leaks are reported at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# RocksDB, libcurl and libfuse are not instrumented: races inside them (or
# on memory only they touch) are not ours to report. See scripts/tsan.supp.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp}

case "$which" in
  asan) run asan "address,undefined" "$@" ;;
  tsan) run tsan "thread" "$@" ;;
  all) run asan "address,undefined" "$@"; run tsan "thread" "$@" ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac

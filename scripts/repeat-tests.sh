#!/usr/bin/env bash
# Runs test executables with all their tests in one process, COUNT times in a
# row (default 20), and fails at the first run that does not pass, naming the
# run and the signal if one killed it. CTest runs each test in a process of
# its own, which hides a crash that state shared across tests causes (issue
# 19: LibTorch 2.x's flight recorder crashed the distributed binary only so).
#   scripts/repeat-tests.sh [COUNT] [EXECUTABLE...]
# EXECUTABLE is a test executable's name (basin_distributed_tests) or path;
# none means every tests/basin_*_tests of the build BASIN_LIBTORCH names
# (scripts/build_dir.sh), or of the folder BASIN_REPEAT_BUILD_DIR names.
# Builds nothing: run scripts/build.sh first.
set -euo pipefail
count=${1:-20}
shift || true
[[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "repeat-tests.sh: COUNT must be a positive whole number, got '$count'" >&2; exit 2; }
paths=()  # paths given are the caller's, resolved before the cd
for name in "$@"; do
  case "$name" in */*) paths+=("$(realpath -m "$name")") ;; *) paths+=("$name") ;; esac
done
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
build_dir=${BASIN_REPEAT_BUILD_DIR:-$build_dir}

executables=()
if [ ${#paths[@]} -eq 0 ]; then
  for exe in "$build_dir"/tests/basin_*_tests; do [ -x "$exe" ] && executables+=("$exe"); done
else
  for name in "${paths[@]}"; do
    case "$name" in */*) executables+=("$name") ;; *) executables+=("$build_dir/tests/$name") ;; esac
  done
fi
[ ${#executables[@]} -gt 0 ] || { echo "repeat-tests.sh: no test executables in $build_dir/tests: build first" >&2; exit 2; }
for exe in "${executables[@]}"; do
  [ -x "$exe" ] || { echo "repeat-tests.sh: $exe: no such test executable (built?)" >&2; exit 2; }
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for exe in "${executables[@]}"; do
  SECONDS=0
  for ((run = 1; run <= count; ++run)); do
    # From the folder CTest runs them in; 30 minutes at most, so a hang fails.
    if (cd "$(dirname "$exe")" && timeout 1800 "./$(basename "$exe")" --gtest_brief=1) > "$log" 2>&1; then
      continue
    else
      rc=$?
    fi
    tail -n 60 "$log"
    if [ $rc -eq 124 ]; then
      why="hung (killed after 30 minutes)"
    elif [ $rc -gt 128 ]; then
      why="was killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
    else
      why="exited $rc (the failed tests are listed above)"
    fi
    echo "repeat-tests.sh: FAIL: $exe, all its tests in one process, $why on run $run of $count" >&2
    exit 1
  done
  echo "repeat-tests.sh: $(basename "$exe") ($build_dir): $count runs of all its tests in one process, all passed (${SECONDS} s)"
done

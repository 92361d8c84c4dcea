#!/usr/bin/env bash
# The liveness tests under load: the launchers', restarts' and resumes' tests
# (CTest's MultiNode, BasinRun, Torchrun, ResumeProgram, Elastic and
# LauncherStore entries) and the whole distributed test binary in one process,
# RUNS times in a row (default 10), each while a busy loop spins on every
# core. A liveness check that a busy machine trips would trip on a busy
# cluster node too. Stops at the first run that fails, naming it.
#   scripts/under-load.sh [RUNS]        BASIN_LIBTORCH=pypi for the 2.x build
# BUSY_LOOPS (default: one per core) sets how many loops spin. Both builds'
# checks can run side by side under one set of loops: the second with
# BUSY_LOOPS=0, itself a load beside the first.
# Builds nothing: run scripts/build.sh first.
set -euo pipefail
runs=${1:-10}
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "under-load.sh: RUNS must be a positive whole number, got '$runs'" >&2; exit 2; }
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
busy=()
trap 'kill "${busy[@]}" 2> /dev/null || true' EXIT
trap 'exit 143' INT TERM  # a stopped check stops its busy loops too (through the EXIT trap)
loops=${BUSY_LOOPS:-$(nproc)}
[[ "$loops" =~ ^[0-9]+$ ]] || { echo "under-load.sh: BUSY_LOOPS must be a whole number, got '$loops'" >&2; exit 2; }
for ((loop = 0; loop < loops; ++loop)); do
  yes > /dev/null &
  busy+=($!)
done
SECONDS=0
for ((run = 1; run <= runs; ++run)); do
  if ! ctest --test-dir "$build_dir" --output-on-failure -R 'MultiNode|BasinRun|Torchrun|ResumeProgram|Elastic|LauncherStore'; then
    echo "under-load.sh: FAIL: the liveness tests ($build_dir), run $run of $runs, beside $loops busy loops" >&2
    exit 1
  fi
  if ! bash scripts/repeat-tests.sh 1 basin_distributed_tests; then
    echo "under-load.sh: FAIL: the distributed tests in one process ($build_dir), run $run of $runs, beside $loops busy loops" >&2
    exit 1
  fi
  echo "under-load.sh: run $run of $runs passed beside $loops busy loops (${SECONDS} s so far)"
done
echo "under-load.sh: $runs runs passed ($build_dir, ${SECONDS} s)"

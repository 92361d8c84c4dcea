#!/usr/bin/env bash
# Runs the data-parallel cost benchmark at 1, 2 and 4 local ranks.
# Usage: bash bench/distributed.sh [build-dir]
set -euo pipefail
build=${1:-build}
cmake --build "$build" --target basin-run basin-bench-distributed > /dev/null
for n in 1 2 4; do
  "$build/examples/basin-run" --nproc "$n" -- "$build/bench/basin-bench-distributed" | grep '^\[rank 0\]' | sed 's/^\[rank 0\] //'
  echo
done

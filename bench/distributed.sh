#!/usr/bin/env bash
# Runs the data-parallel cost benchmark (ddp, zero1, zero2, zero3; SGD and SAM) at
# 2 and 4 local ranks on each model of BASIN_BENCH_MODELS (default: the
# small CNN, the MLP 784-1024-1024-10 and the resnet).
# Usage: bash bench/distributed.sh [build-dir]
set -euo pipefail
build=${1:-build}
cmake --build "$build" --target basin-run basin-bench-distributed > /dev/null
for model in ${BASIN_BENCH_MODELS:-cnn mlp1024 resnet}; do
  for n in 2 4; do
    BASIN_BENCH_MODEL=$model "$build/programs/basin-run" --nproc "$n" -- "$build/bench/basin-bench-distributed" |
      grep '^\[rank 0\]' | sed 's/^\[rank 0\] //'
    echo
  done
done

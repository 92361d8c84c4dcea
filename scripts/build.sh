#!/usr/bin/env bash
# Installs what is missing and builds (Release). Arguments go to
# `cmake --build`, e.g. --target basin-train.
#   BASIN_LIBTORCH=debian (default)  against Debian's LibTorch 1.13.1, into build/
#   BASIN_LIBTORCH=pypi              against PyPI's torch (BASIN_TORCH_VERSION,
#                                    default 2.11.0, with CUDA and NCCL), into
#                                    build-torch-<version>/, warnings as errors
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/build_dir.sh
libtorch=$(bash scripts/libtorch.sh)
options=(-DCMAKE_BUILD_TYPE=Release)
[ -n "$libtorch" ] && options+=(-DCMAKE_PREFIX_PATH="$libtorch" -DBASIN_WARNINGS_AS_ERRORS=ON)
command -v ninja > /dev/null && [ ! -f "$build_dir/CMakeCache.txt" ] && options+=(-G Ninja)
cmake -S . -B "$build_dir" "${options[@]}"
cmake --build "$build_dir" --parallel "$(nproc)" "$@"

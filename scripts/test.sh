#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (CTest).
# BASIN_LIBTORCH=pypi tests the build against PyPI's LibTorch 2.x (see build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
source scripts/build_dir.sh
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)"

#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
generator=()
command -v ninja > /dev/null && [ ! -f build/CMakeCache.txt ] && generator=(-G Ninja)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${generator[@]}"
cmake --build build --parallel "$(nproc)"
ctest --test-dir build --output-on-failure --parallel "$(nproc)"

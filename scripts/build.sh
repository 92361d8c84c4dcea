#!/usr/bin/env bash
# Installs what is missing and builds (Release, into build/). Arguments go to
# `cmake --build`, e.g. --target basin-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
generator=()
command -v ninja > /dev/null && [ ! -f build/CMakeCache.txt ] && generator=(-G Ninja)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${generator[@]}"
cmake --build build --parallel "$(nproc)" "$@"

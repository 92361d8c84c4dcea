#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then configures, builds
# and runs the consumer project against it, with README's snippet in it.
set -euo pipefail
build_dir=$1
consumer_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
# README's SAMOptimizer snippet is compiled as README shows it: the code
# block after the marker line, included by main.cpp.
readme="$consumer_dir/../../README.md"
mkdir -p "$scratch/snippet"
awk '/^<!-- tests\/consumer compiles the next block -->$/ {found = 1; next}
     found == 1 && /^```/ {found = 2; next}
     found == 2 && /^```/ {exit}
     found == 2 {print}' "$readme" > "$scratch/snippet/readme_loop.inc"
[ -s "$scratch/snippet/readme_loop.inc" ] || { echo "consumer: no code block after the marker in $readme" >&2; exit 1; }
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$consumer_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" -DREADME_SNIPPET_DIR="$scratch/snippet" > /dev/null
cmake --build "$scratch/build" > /dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}" "$scratch/build/consumer"

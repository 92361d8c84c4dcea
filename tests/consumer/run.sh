#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then configures, builds
# and runs the consumer project against it, with README's snippet in it.
set -euo pipefail
build_dir=$1
consumer_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
# README's snippets are compiled as README shows them: the code block after
# each marker line, included by main.cpp.
readme="$consumer_dir/../../README.md"
mkdir -p "$scratch/snippet"
extract() {  # marker text, output file
  awk -v marker="<!-- $1 -->" '$0 == marker {found = 1; next}
       found == 1 && /^```/ {found = 2; next}
       found == 2 && /^```/ {exit}
       found == 2 {print}' "$readme" > "$scratch/snippet/$2"
  [ -s "$scratch/snippet/$2" ] || { echo "consumer: no code block after '<!-- $1 -->' in $readme" >&2; exit 1; }
}
extract "tests/consumer compiles the next block" readme_loop.inc
extract "tests/consumer compiles the next block as a variant" readme_variant.inc
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$consumer_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" -DREADME_SNIPPET_DIR="$scratch/snippet" > /dev/null
cmake --build "$scratch/build" > /dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}" "$scratch/build/consumer"

#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then configures, builds
# and runs the consumer project against it, with the documentation's snippets
# in it.
set -euo pipefail
build_dir=$1
consumer_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
# The snippets are compiled as the documentation shows them: the code block
# after each marker line, in the first of README.md and docs/*.md that holds
# the marker (the loop is in README.md, the variant in docs/sam-family.md),
# included by main.cpp.
source_root=$(cd "$consumer_dir/../.." && pwd)
pages=("$source_root/README.md" "$source_root"/docs/*.md)
mkdir -p "$scratch/snippet"
extract() {  # marker text, output file
  local marker="<!-- $1 -->" page="" candidate
  for candidate in "${pages[@]}"; do
    if [ -f "$candidate" ] && grep -qxF -- "$marker" "$candidate"; then page=$candidate; break; fi
  done
  [ -n "$page" ] || { echo "consumer: no line '$marker' in README.md or docs/*.md under $source_root" >&2; exit 1; }
  awk -v marker="$marker" '$0 == marker {found = 1; next}
       found == 1 && /^```/ {found = 2; next}
       found == 2 && /^```/ {exit}
       found == 2 {print}' "$page" > "$scratch/snippet/$2"
  [ -s "$scratch/snippet/$2" ] || { echo "consumer: no code block after '$marker' in $page" >&2; exit 1; }
}
extract "tests/consumer compiles the next block" readme_loop.inc
extract "tests/consumer compiles the next block as a variant" readme_variant.inc
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# --as-needed, as some distributions link by default: the consumer names no
# symbol of basin::models or basin::datasets, so only basin's own link option
# keeps their registrations in the program.
cmake -S "$consumer_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" -DREADME_SNIPPET_DIR="$scratch/snippet" > /dev/null
cmake --build "$scratch/build" > /dev/null
# Without LD_LIBRARY_PATH: what is installed finds its libraries by itself.
unset LD_LIBRARY_PATH
"$scratch/build/consumer" | tee "$scratch/consumer.out"
grep -q "consumer: sign_sam took 1 SAM step" "$scratch/consumer.out" \
  || { echo "consumer: the loop snippet took no SAM step" >&2; exit 1; }
# The installed programs, from the prefix alone (their RPATH finds basin's
# libraries beside them): a short training run, and the other two's usage.
"$scratch/prefix/bin/basin-train" --config "$source_root/examples/configs/synthetic_smoke.json" \
  --set max_epochs=1 --run-dir "$scratch/run" > "$scratch/train.out"
grep -q "^test accuracy" "$scratch/train.out" || { cat "$scratch/train.out"; echo "consumer: installed basin-train did not finish" >&2; exit 1; }
"$scratch/prefix/bin/basin-run" --help > /dev/null
"$scratch/prefix/bin/basin-consolidate" --help > /dev/null
echo "consumer: installed package and programs ok"

#!/usr/bin/env bash
# The benchmark runner's smoke run (a pair per algorithm, two ranks at most):
# it must write the page with its header and every benchmark's figures.
#   smoke.sh SOURCE_DIR OUT_FILE
set -euo pipefail
source_dir=$1 out=$2
rm -f "$out"
BASIN_BENCH_BUILT=1 bash "$source_dir/bench/run_all.sh" --smoke --out "$out"
fail() { echo "bench smoke: $*" >&2; exit 1; }
[ -f "$out" ] || fail "no $out"
for expected in "^- Machine: .*cores" "^- LibTorch: " "^## SAM against SGD" "OptimizerSide" \
                "^## The SAM family against SGD" "^sam  *[0-9.]" "^mesa  *[0-9.]" "a forward alone" \
                "^## Image decoding" "^Decode/jpeg/32/3 .*items_per_second" "^ReadImageFolder/96/2/real_time .*items_per_second" \
                "^## Bytes, memory and time per step by parallel mode" "^zero2 sam, synced ascent  *[0-9]" "^zero3 sam, synced ascent  *[0-9]"; do
  grep -q -- "$expected" "$out" || fail "$out has no line matching '$expected'"
done
echo "bench smoke: ok"

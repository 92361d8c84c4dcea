#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/) with clang, libFuzzer, ASan and UBSan into
# build-fuzz/, then runs each for SECONDS (default 60) from a corpus in
# build-fuzz/corpus/<target>/ that is seeded, on every run, with
# fuzz/corpus/<target>/ and the target's SEEDS folders (see fuzz/CMakeLists.txt).
# Exits non-zero if any target crashed; the input that did so is left in
# build-fuzz/crashes/<target>/. A second run rebuilds nothing and keeps the
# corpus grown so far.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 600 config
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }

bash scripts/install-deps.sh clang libclang-rt-14-dev
build_dir=build-fuzz
options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBASIN_BUILD_FUZZERS=ON -DBASIN_BUILD_TESTS=OFF
         -DBASIN_BUILD_PROGRAMS=OFF -DBASIN_BUILD_BENCH=OFF
         -DBASIN_SANITIZE=address,undefined,fuzzer-no-link)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  options+=(-DCMAKE_CXX_COMPILER=clang++)
  command -v ninja > /dev/null && options+=(-G Ninja)
fi
cmake -S . -B "$build_dir" "${options[@]}" > /dev/null
# Only the targets asked for: CI fuzzes the config loader alone, whose build
# needs no LibTorch, and the checkpoint target's ASan build of the whole
# library would be most of CI's fuzzing time (CTest's FuzzReplay builds and
# runs both targets anyway).
targets=(basin_fuzzers)
if [ $# -gt 0 ]; then targets=("${@/#/basin-fuzz-}"); fi
cmake --build "$build_dir" --parallel "$(nproc)" --target "${targets[@]}"

# UBSan findings are crashes too; allocations above 2 GB are bugs, not inputs.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=abort_on_error=1:allocator_may_return_null=1:detect_leaks=1
# -malloc_limit_mb above the RSS limit: LibTorch's unpickler reserves a string's
# stated length (up to 4 GiB) before reading it; the reservation touches no
# memory and the short read then fails as a clean error (see docs/reliability.md).
# LibTorch leaks inside its zip reader on archives it rejects (see the file).
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0

failed=()
while IFS=$'\t' read -r name program seeds; do
  if [ $# -gt 0 ] && [[ ! " $* " =~ " $name " ]]; then continue; fi
  corpus=$build_dir/corpus/$name
  crashes=$build_dir/crashes/$name
  mkdir -p "$corpus" "$crashes"
  for seed in $seeds; do
    [ -d "$seed" ] && cp -f "$seed"/* "$corpus"/ 2> /dev/null || true
  done
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  echo "fuzz.sh: $name for ${seconds} s (corpus $corpus: $(ls "$corpus" | wc -l) inputs)"
  if "$program" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=8192 \
       -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 > "$build_dir/$name.log" 2>&1; then
    grep -E "^(#[0-9]+\s+DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$build_dir/$name.log" || true
  else
    echo "fuzz.sh: $name FAILED; the end of $build_dir/$name.log:" >&2
    tail -40 "$build_dir/$name.log" >&2
    failed+=("$name")
  fi
done < "$build_dir/fuzz/fuzz_targets.tsv"

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashed: ${failed[*]} (inputs in $build_dir/crashes/)" >&2
  exit 1
fi
echo "fuzz.sh: no crash"

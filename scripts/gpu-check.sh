#!/usr/bin/env bash
# basin's GPU check, for a machine with an NVIDIA GPU, PyPI's CUDA torch in its
# python3, CMake, ninja and nvcc, but no network and none of basin's other
# dependencies. Everything else comes from .gpu-deps/ (fill it first, on a
# Debian 12 machine with apt: bash scripts/gpu-deps.sh), unpacked into a
# private prefix, never into /.
#
#   bash scripts/gpu-check.sh               unpack, configure, build, then run on the GPU:
#                                           CTest's Cuda|Nccl entries, the default training
#                                           job, and the SAM/SGD step benchmark (cnn, resnet)
#   bash scripts/gpu-check.sh --build-only  unpack, configure and build only (no GPU needed)
#
# Environment:
#   GPU_CHECK_PYTHON     python whose torch to build against (default: python3 if it has
#                        torch, else /opt/torch/.venv/bin/python3)
#   GPU_CHECK_BUILD_DIR  build folder (default build-gpu-check)
#   GPU_CHECK_JOBS       parallel build jobs (default: every core)
#   GPU_CHECK_TARGETS    targets to build (default: what the checks run)
#   GPU_CHECK_PREFIX     where the packages are unpacked (default /tmp/basin-gpu-deps)
#   OUT                  if set, the report and the logs are copied there
#
# Exit status: 0 all passed; 1 a check failed (the others still ran); 2 a setup
# or build step failed (the message names it).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

mode=full
case "${1:-}" in
  "") ;;
  --build-only) mode=build ;;
  *) echo "usage: bash scripts/gpu-check.sh [--build-only]" >&2; exit 2 ;;
esac

deps=$repo/.gpu-deps
build=${GPU_CHECK_BUILD_DIR:-build-gpu-check}
case "$build" in /*) ;; *) build=$repo/$build ;; esac
jobs=${GPU_CHECK_JOBS:-$(nproc)}
prefix=${GPU_CHECK_PREFIX:-/tmp/basin-gpu-deps}
read -ra targets <<< "${GPU_CHECK_TARGETS:-basin_precision_tests basin_distributed_tests basin_training_tests \
basin_sam_tests basin-train basin-bench-sam}"
logs=$build/gpu-check-logs
report=$logs/gpu-check.txt
mkdir -p "$logs"
: > "$report"

# --- reporting -------------------------------------------------------------

script_start=$(date +%s)
phase=setup
phase_start=$script_start
failed_checks=0

say() { echo "$*" | tee -a "$report"; }

# Copies the report and the logs to $OUT (at most 8 files come back from there).
export_results() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  cp "$report" "$OUT/gpu-check.txt"
  local f
  for f in configure.log build.log ctest.log train.log train-metrics.jsonl bench-cnn.log bench-resnet.log; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/$f"
  done
  return 0
}

begin() {
  phase=$1
  phase_start=$(date +%s)
  echo
  echo "=== gpu-check: $phase"
}

# Ends a phase with its line in the report, and copies what there is to $OUT:
# if the whole command is killed at its limit, the phases done still come back.
end() {
  say "$(printf '%-12s %4ds  %s' "$phase" $(($(date +%s) - phase_start)) "$*")"
  export_results
}

# Stops the script: a setup or build step failed. The log's tail goes to stdout.
die() {
  trap - ERR
  local log=${2:-}
  if [ -n "$log" ] && [ -f "$log" ]; then
    echo "--- last lines of $log"
    grep -E "error|Error|FAILED|not found" "$log" | head -20 || true
    echo "..."
    tail -40 "$log"
  fi
  say "gpu-check: FAILED in phase '$phase': $1"
  say "$(printf "%-12s %4ds" total $(($(date +%s) - script_start)))"
  export_results
  exit 2
}
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR

# --- deps: unpack the packages into the private prefix ----------------------

begin deps
if ! compgen -G "$deps/*.deb" > /dev/null || [ ! -f "$deps/boost-signals2.tar.xz" ]; then
  die "$deps is missing or incomplete: run 'bash scripts/gpu-deps.sh' on a Debian 12 machine and carry .gpu-deps"
fi

unpack_deb() {
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$1" "$prefix"
  else  # no dpkg: a .deb is an ar archive around a tarball
    local data
    data=$(ar t "$1" | grep '^data\.tar')
    ar p "$1" "$data" | tar -x -C "$prefix" -f - --use-compress-program="$(case $data in *.xz) echo xz -d ;; *.zst) echo zstd -d ;; *) echo gzip -d ;; esac)"
  fi
}

stamp=$prefix/.gpu-check-unpacked
wanted=$(cd "$deps" && find . -maxdepth 1 -type f -printf '%s %T@ %f\n' | sort -k3)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for f in "$deps"/*.deb; do unpack_deb "$f" || die "could not unpack $f"; done
  tar -xJf "$deps/boost-signals2.tar.xz" -C "$prefix" || die "could not unpack the Boost headers"
  # Absolute links (libz.so -> /lib/.../libz.so.1.2.13) point into the prefix.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi
  done < <(find "$prefix" -type l -lname '/*')
  echo "$wanted" > "$stamp"
fi

dep=$prefix/usr
libdir=$dep/lib/x86_64-linux-gnu
data_root=$dep/share/datasets/fashion-mnist
# Gloo's headers are reached through LibTorch's ProcessGroupGloo.hpp, with no
# CMake target to name them: the compiler's search path takes them (after -I
# and -isystem folders, before the system's). Libraries need no such path:
# CMake links them by full path and puts their folder in the programs' RUNPATH.
export CPLUS_INCLUDE_PATH=$dep/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
export LD_LIBRARY_PATH=$libdir:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Debian 12's shared libraries (spdlog, fmt, benchmark) need glibc 2.34 and
# GCC 12's libstdc++ (GLIBCXX_3.4.30): see that they load here.
glibc=$(getconf GNU_LIBC_VERSION 2> /dev/null || ldd --version | head -1)
unloadable=$(for lib in "$libdir"/libspdlog.so.1.10.0 "$libdir"/libfmt.so.9.* "$libdir"/libbenchmark.so.1.7.1; do
  ldd "$lib" 2>&1 | grep -E "not found|version" | sed "s|^|$(basename "$lib"): |"
done || true)
[ -z "$unloadable" ] || die "Debian 12's shared libraries do not load on this system ($glibc):
$unloadable"
end "$(du -sm "$prefix" | cut -f1) MiB unpacked in $prefix; $glibc; Debian 12 libraries load"

# --- configure ---------------------------------------------------------------

begin configure
python=${GPU_CHECK_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2> /dev/null ||
    python=/opt/torch/.venv/bin/python3
fi
torch_root=$("$python" -c 'import os, importlib.util; print(os.path.dirname(importlib.util.find_spec("torch").origin))') ||
  die "no torch in $python (set GPU_CHECK_PYTHON)"
torch_version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_root/version.py")

# CMake and ninja may live beside that python only; nvcc in CUDA's folder only.
PATH=$PATH:$(dirname "$python")
export PATH
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
command -v cmake > /dev/null || die "cmake not found"
command -v ninja > /dev/null || die "ninja not found"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # the H200's; saves LibTorch's GPU probe
export CMAKE_POLICY_VERSION_MINIMUM=3.5  # CMake 4 refuses configs older than 3.5 without it

# A CTest entry per test, so that -R 'Cuda|Nccl' below picks tests by name across suites.
configure_options=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBASIN_WITH_NCCL=ON -DBASIN_CTEST_PER_TEST=ON
  "-DCMAKE_PREFIX_PATH=$dep;$torch_root")
# The NCCL header of PyPI's nvidia-nccl package, beside torch.
nccl_include=$(dirname "$torch_root")/nvidia/nccl/include
[ -f "$nccl_include/nccl.h" ] && configure_options+=("-DBASIN_NCCL_INCLUDE_DIR=$nccl_include")
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=Ninja" "$build/CMakeCache.txt"; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S "$repo" -B "$build" "${configure_options[@]}" > "$logs/configure.log" 2>&1 ||
  die "cmake configure failed (log: $logs/configure.log)" "$logs/configure.log"

# Every dependency must come from the prefix, not from a system copy.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
found=()
for var in nlohmann_json_DIR spdlog_DIR fmt_DIR Boost_DIR Boost_INCLUDE_DIR GTest_DIR benchmark_DIR CLI11_DIR \
  ZLIB_INCLUDE_DIR ZLIB_LIBRARY_RELEASE; do
  value=$(cache_value "$var")
  [ -n "$value" ] || continue
  case "$value" in
    "$prefix"/*) found+=("$var") ;;
    *) die "$var=$value is outside $prefix: a system copy was found first" "$logs/configure.log" ;;
  esac
done
grep -E "basin: (LibTorch|NCCL)|CUDA|nvcc" "$logs/configure.log" | grep -v "^--   " | head -8 || true
end "LibTorch $torch_version at $torch_root; $(grep -o 'basin: NCCL [A-Z]*' "$logs/configure.log" | tail -1); from the prefix: ${found[*]}"

# --- build ---------------------------------------------------------------------

begin build
cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" > "$logs/build.log" 2>&1 ||
  die "build failed (log: $logs/build.log)" "$logs/build.log"
# No header of a dependency may come from the system's /usr/include.
leaks=$(ninja -C "$build" -t deps 2> /dev/null |
  grep -oE "^ +/usr/include/(boost|spdlog|fmt|nlohmann|gtest|gmock|benchmark|CLI|gloo|zlib\.h|zconf\.h)[^ ]*" |
  sort -u | head -5 || true)
[ -z "$leaks" ] || die "headers came from the system instead of $prefix: $leaks"
end "${targets[*]} built ($jobs jobs); no dependency header from /usr/include"

if [ "$mode" = build ]; then
  say "$(printf "%-12s %4ds" total $(($(date +%s) - script_start))) (build only)"
  export_results
  exit 0
fi

# --- checks on the GPU -------------------------------------------------------------

begin gpu
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1 || true)
cuda_seen=$("$python" -c 'import torch; print(torch.cuda.is_available(), torch.version.cuda)' 2> /dev/null || echo "? ?")
end "${gpu:-nvidia-smi gave nothing}; torch.cuda.is_available, CUDA: $cuda_seen"

begin ctest
status=0
# Each test has CTest's TIMEOUT 300; the whole run gets less (exit 124 when cut).
(cd "$build" && timeout 240 ctest -R 'Cuda|Nccl' --output-on-failure) > "$logs/ctest.log" 2>&1 || status=$?
# "  1/3 Test #1: Name ......***Skipped   0.52 sec": the word before the time.
statuses=$(sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +[^ ]+ +[.]*[ *]*([A-Za-z][A-Za-z ]*[A-Za-z]) +[0-9.]+ sec.*/\1/p' \
  "$logs/ctest.log")
count() { grep -cx "$1" <<< "$statuses" || true; }
passed=$(count Passed)
skipped=$(count Skipped)
failed=$(($(grep -c . <<< "$statuses" || true) - passed - skipped))
verdict=PASS
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then verdict=FAIL; failed_checks=$((failed_checks + 1)); fi
end "$verdict: $passed passed, $failed failed, $skipped skipped (ctest -R 'Cuda|Nccl', exit $status)"
grep -E "Test +#[0-9]+: " "$logs/ctest.log" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /  /' | tee -a "$report" || true
[ "$verdict" = PASS ] || grep -B2 -A12 -E "Failure|FAILED|Exception" "$logs/ctest.log" | head -60 || true

begin train
run_dir=$(mktemp -d /tmp/basin-gpu-train.XXXXXX)
status=0
timeout 240 "$build/programs/basin-train" --config examples/configs/fashion_mnist_sam.json --set device=cuda \
  --set "data.root=$data_root" --run-dir "$run_dir" --overwrite > "$logs/train.log" 2>&1 || status=$?
summary=""
[ -f "$run_dir/summary.json" ] && summary=$("$python" -c '
import json, sys
s = json.load(open(sys.argv[1]))
print("test_accuracy %.4f, test_loss %.4f, final_train_loss %.4f, %d steps, %d epochs, %d skipped steps, %.1f s" % (
    s["test_accuracy"], s["test_loss"], s["final_train_loss"], s["steps"], s["epochs"], s["skipped_steps"], s["wall_seconds"]))
' "$run_dir/summary.json" 2>&1 || true)
if [ "$status" -eq 0 ] && [ -n "$summary" ]; then
  end "PASS: $summary (CPU reference: 0.879)"
else
  failed_checks=$((failed_checks + 1))
  end "FAIL: basin-train exit $status${summary:+; $summary}"
  tail -15 "$logs/train.log"
fi
if [ -f "$run_dir/metrics.jsonl" ]; then cp "$run_dir/metrics.jsonl" "$logs/train-metrics.jsonl"; fi

for model in cnn resnet; do
  begin "bench-$model"
  status=0
  BASIN_BENCH_DEVICE=cuda BASIN_BENCH_MODEL=$model timeout 150 "$build/bench/basin-bench-sam" \
    > "$logs/bench-$model.log" 2>&1 || status=$?
  if [ "$status" -eq 0 ] && grep -q "^BM_OptimizerSide" "$logs/bench-$model.log"; then
    end "PASS (cuda, $model)"
  else
    failed_checks=$((failed_checks + 1))
    end "FAIL: basin-bench-sam exit $status (cuda, $model)"
    tail -15 "$logs/bench-$model.log"
  fi
  grep -E "^BM_|^peak bytes" "$logs/bench-$model.log" | sed 's/^/  /' | tee -a "$report" || true
done

# --- report ---------------------------------------------------------------------------

say "$(printf "%-12s %4ds" total $(($(date +%s) - script_start))); $failed_checks check(s) failed"
echo
echo "=== gpu-check report ($report)"
cat "$report"
export_results
[ "$failed_checks" -eq 0 ] || exit 1

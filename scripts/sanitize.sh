#!/usr/bin/env bash
# Builds everything under AddressSanitizer and UndefinedBehaviorSanitizer
# (BASIN_SANITIZE=address,undefined) into build-asan/ (BASIN_LIBTORCH=pypi:
# build-asan-torch-<version>/, against PyPI's LibTorch as scripts/build.sh
# builds it), then runs the whole CTest suite under them. Arguments go to
# ctest, e.g. scripts/sanitize.sh -R Config.
# LibTorch and the other prebuilt libraries are not instrumented: what they
# report that is not basin's is suppressed in scripts/sanitize/, each line
# with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/build_dir.sh
build_dir=${build_dir/#build/build-asan}
libtorch=$(bash scripts/libtorch.sh)
options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBASIN_SANITIZE=address,undefined -DBASIN_BUILD_BENCH=OFF)
[ -n "$libtorch" ] && options+=(-DCMAKE_PREFIX_PATH="$libtorch")
command -v ninja > /dev/null && [ ! -f "$build_dir/CMakeCache.txt" ] && options+=(-G Ninja)
cmake -S . -B "$build_dir" "${options[@]}"
cmake --build "$build_dir" --parallel "$(nproc)"

supp=$PWD/scripts/sanitize
# Any finding fails its test: ASan stops at the first error (its default),
# UBSan is told to. detect_leaks: LeakSanitizer runs at every exit.
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1:suppressions=$supp/asan.supp
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" "$@"

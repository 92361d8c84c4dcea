#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (CTest).
# BASIN_LIBTORCH=pypi tests the build against PyPI's LibTorch 2.x (see build.sh).
#
# A test that fails is run once more, alone. If it passes then, the run
# passes but says FLAKY with the test's name (its first output, a stack if it
# crashed, stays above); a test that fails twice fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
source scripts/build_dir.sh
if ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)"; then
  exit 0
fi
echo "test.sh: running the failed tests again, one at a time"
ctest --test-dir "$build_dir" --output-on-failure --rerun-failed
echo "test.sh: FLAKY: the tests listed as failed above passed when run again alone; see their first output" >&2

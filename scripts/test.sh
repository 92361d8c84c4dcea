#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (CTest: an
# entry per GoogleTest suite, whose tests share a process, and per script;
# cmake/BasinTestSuites.cmake). BASIN_LIBTORCH=pypi tests the build against
# PyPI's LibTorch 2.x (see build.sh).
#
# An entry that failed (a failed assertion or a non-zero exit) is run once
# more, alone. If it passes then, the run passes but names it as FLAKY, last, and in
# <build>/flaky-tests.txt (which .ci/run repeats at its end). A test that
# crashed (a signal: SEGFAULT, Subprocess aborted, ...) or timed out is never
# run again: the run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
bash scripts/build.sh
echo "test.sh: installing what was missing and building took ${SECONDS} s"
# The PyPI build's tests also hand GPT-2 weights to Hugging Face's transformers (the Debian build's skip that test
# until this has run once, saying so).
if [ "${BASIN_LIBTORCH:-debian}" = pypi ]; then
  BASIN_HF_PYTHON=$(bash scripts/hf-python.sh)
  export BASIN_HF_PYTHON
fi
source scripts/build_dir.sh
flaky_file=$build_dir/flaky-tests.txt
rm -f "$flaky_file"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" 2>&1 | tee "$log"; then
  exit 0
fi

# CTest's summary lists each failed test as "  <number> - <name> (<reason>)".
failed=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - .+ \(.+\)$' || true)
not_plain=$(grep -v ' (Failed)$' <<< "$failed" || true)
if [ -z "$failed" ] || [ -n "$not_plain" ]; then
  echo "test.sh: FAILED: these tests crashed or timed out, and a crash is never run again into a pass:" >&2
  echo "${not_plain:-(CTest named no failed test; see above)}" >&2
  exit 1
fi
echo "test.sh: running the failed tests again, one at a time"
ctest --test-dir "$build_dir" --output-on-failure --rerun-failed
sed -E 's/^[[:space:]]+[0-9]+ - (.+) \(Failed\)$/\1/' <<< "$failed" > "$flaky_file"
echo "test.sh: FLAKY ($build_dir): these tests failed, then passed when run again alone; see their first output above:" >&2
sed 's/^/test.sh: FLAKY: /' "$flaky_file" >&2

#!/usr/bin/env bash
# Builds flight_recorder_race.cpp against the LibTorch BASIN_LIBTORCH names
# (as scripts/build.sh does; default pypi, where the race is) and runs it
# five times each way: concurrent issue crashes on LibTorch 2.x, serialized
# issue (basin's fix) and TORCH_FR_BUFFER_SIZE=0 (the recorder off) do not.
# Not a CTest test: it crashes by design. Prints one line per run; exits 1
# if a serialized or recorder-off run failed (the cause would be elsewhere).
set -uo pipefail
cd "$(dirname "$0")/../.."
export BASIN_LIBTORCH=${BASIN_LIBTORCH:-pypi}
root=$(bash scripts/libtorch.sh) || exit 2
include=(-I/usr/include)
libs=(-ltorch -ltorch_cpu -lc10)
if [ -n "$root" ]; then
  include=(-I"$root/include" -I"$root/include/torch/csrc/api/include")
  libs=(-L"$root/lib" -Wl,-rpath,"$root/lib" "${libs[@]}")
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
g++ -std=c++17 -O1 -g -DUSE_C10D_GLOO tests/upstream/flight_recorder_race.cpp "${include[@]}" "${libs[@]}" \
    -pthread -o "$scratch/race" || exit 2
status=0
for mode in concurrent serialize recorder-off; do
  for run in 1 2 3 4 5; do
    if [ "$mode" = recorder-off ]; then
      TORCH_FR_BUFFER_SIZE=0 "$scratch/race" 200 > "$scratch/out" 2>&1
    else
      "$scratch/race" 200 "$mode" > "$scratch/out" 2>&1
    fi
    rc=$?
    echo "$mode run $run: exit $rc $( ((rc > 128)) && echo "(signal $(kill -l $((rc - 128))))")"
    [ "$mode" != concurrent ] && [ $rc -ne 0 ] && status=1
  done
done
exit $status

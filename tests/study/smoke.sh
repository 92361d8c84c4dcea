#!/usr/bin/env bash
# The study's smoke run (tiny subset, 2 epochs, 1 seed, 3 methods): it must
# write a results table and well-formed PNG plots, so the study cannot rot.
#   smoke.sh SOURCE_DIR BASIN_TRAIN OUT_DIR
set -euo pipefail
source_dir=$1 basin_train=$2 out=$3
rm -rf "$out"
python3 "$source_dir/scripts/study.py" --smoke --basin-train "$basin_train" --out "$out"
results="$out/results.md"
fail() { echo "study smoke: $*" >&2; exit 1; }
[ -f "$results" ] || fail "no $results"
grep -q "^| SGD | [0-9.]* ± [0-9.]* |" "$results" || fail "no SGD row in the table of $results"
grep -q "^| SAM | " "$results" || fail "no SAM row in $results"
grep -q "^| 40% | " "$results" || fail "no noise sweep row in $results"
for plot in noise epochs cost; do
  png="$out/$plot.png"
  [ -f "$png" ] || fail "no $png"
  # The PNG signature, then a non-trivial image.
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
  [ "$(stat -c %s "$png")" -gt 5000 ] || fail "$png is nearly empty"
  grep -q "($plot.png)" "$results" || fail "$results does not show $plot.png"
done
# A second start finds every run done and only redraws.
again=$(python3 "$source_dir/scripts/study.py" --smoke --basin-train "$basin_train" --out "$out")
grep -q "already done, 0 to run" <<< "$again" || fail "a second start ran the study again: $again"
echo "study smoke: ok"

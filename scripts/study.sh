#!/usr/bin/env bash
# The label-noise study behind docs/results.md: installs what is missing,
# builds basin-train, then runs scripts/study.py (every method against SGD on
# Fashion-MNIST with label noise; two runs at a time; it resumes where it
# stopped and says how long is left), which writes docs/results.md, the
# plots beside it, and the tables at the top of README.md. Arguments go to
# study.py: --smoke for a run of seconds (README untouched), --report-only to
# redraw from the runs under runs/study.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --target basin-train
source scripts/build_dir.sh
readme=(--readme README.md)  # README's tables come from the full study only
[[ " $* " == *" --smoke "* ]] && readme=()
python3 scripts/study.py --basin-train "$build_dir/programs/basin-train" "${readme[@]}" "$@"

#!/usr/bin/env bash
# basin's SAM step against Python SAM on the same LibTorch (PyPI's torch, see
# scripts/libtorch.sh): an eager SAM written as the widely used reference
# does it, and pytorch-optimizer's SAM, for the MLP (784-256-10) and the small
# CNN at batch 128, one thread, run in turn round after round.
# Extra arguments go to bench/peers.py (--rounds, --steps, --models, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
export BASIN_LIBTORCH=pypi
bash scripts/build.sh --target basin-bench-step > /dev/null
source scripts/build_dir.sh
python=$(bash scripts/libtorch.sh --python)
"$python" -m pip show pytorch-optimizer 2> /dev/null | grep -q '^Version: 4.1.0$' ||
  "$python" -m pip install --quiet --disable-pip-version-check pytorch-optimizer==4.1.0
"$python" bench/peers_sam.py --check
"$python" bench/peers.py --step-timer "$build_dir/bench/basin-bench-step" "$@"

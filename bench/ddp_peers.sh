#!/usr/bin/env bash
# basin's data-parallel step against PyTorch DDP's (Debian's python3-torch,
# the LibTorch basin builds against by default), at 2 and 4 ranks, one
# thread per rank, side by side round after round. Extra arguments go to
# bench/ddp_peers.py (--rounds, --steps, --cases).
# Usage: bash bench/ddp_peers.sh [build-dir] [args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' ||
  { echo "bench/ddp_peers.sh needs Debian's python3-torch (apt-get install python3-torch)" >&2; exit 2; }
cmake --build "$build" --target basin-run basin-bench-step > /dev/null
/usr/bin/python3 bench/ddp_peers.py --step-timer "$build/bench/basin-bench-step" \
  --launcher "$build/programs/basin-run" "$@"

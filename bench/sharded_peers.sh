#!/usr/bin/env bash
# basin's ddp and zero3 SAM steps against PyTorch DDP's and FSDP2's on the
# same LibTorch (PyPI's torch, see scripts/libtorch.sh; FSDP2 needs 2.6 or
# later), at 2 and 4 ranks, one thread per rank, the MLP 784-4096-4096-4096-10
# (36.8M parameters), Adam, batch 32 per rank. Extra arguments go to
# bench/sharded_peers.py (--ranks, --rounds, --steps, --model, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
export BASIN_LIBTORCH=pypi
bash scripts/build.sh --target basin-bench-step basin-run > /dev/null
source scripts/build_dir.sh
python=$(bash scripts/libtorch.sh --python)
"$python" bench/sharded_peers.py --python "$python" --step-timer "$build_dir/bench/basin-bench-step" \
  --launcher "$build_dir/programs/basin-run" "$@"

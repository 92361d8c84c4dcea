#!/usr/bin/env bash
# bench/ddp_peers.py's smoke run (one round of one step, the smallest case):
# basin and PyTorch DDP each train as a 2-rank job and the ratios come out.
#   ddp_peers_smoke.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build=$2
if ! /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2> /dev/null; then
  echo "ddp peers smoke: skipped: /usr/bin/python3 has no torch with Gloo (Debian's python3-torch)"
  exit 77
fi
out=$(/usr/bin/python3 "$source_dir/bench/ddp_peers.py" --step-timer "$build/bench/basin-bench-step" \
      --launcher "$build/programs/basin-run" --rounds 1 --steps 1 --cases 4 2> /dev/null)
echo "$out"
for algorithm in sgd sam_local sam_synced; do
  echo "$out" | grep -Eq "^ +2 mlp2048 +32 $algorithm +[0-9.]+ +[0-9.]+ +[0-9.]+ \(" ||
    { echo "ddp peers smoke: no ratio line for $algorithm" >&2; exit 1; }
done
echo "ddp peers smoke: ok"

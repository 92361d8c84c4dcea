#!/usr/bin/env bash
# Every benchmark of basin with one command, written to docs/benchmark-runs.md
# with the machine and the LibTorch version in its header:
#   - SAM against SGD: a train step, SAM's optimizer-side work, peak memory
#     (basin-bench-sam);
#   - each algorithm of the SAM family against SGD, time and memory
#     (basin-bench-sam-family);
#   - image decoding for data "image_folder", images per second per thread
#     (basin-bench-decode);
#   - bytes, memory and time per step by parallel mode (ddp, zero1, zero2, zero3)
#     at 1, 2 and 4 ranks, on the small CNN, the MLP 784-1024-1024-10 and the
#     resnet (basin-bench-distributed under basin-run);
#   - with --peers, basin against the Python SAMs on the same LibTorch
#     (bench/peers.sh: builds against PyPI's torch and installs
#     pytorch-optimizer there, so it needs PyPI);
#   - with --ddp-peers, basin's data-parallel step against PyTorch DDP's at
#     2 and 4 ranks (bench/ddp_peers.sh; Debian's python3-torch; about half
#     an hour on 2 cores).
# Every ratio is measured side by side in one run (interleaved pairs).
#
#   bash bench/run_all.sh [--smoke] [--peers] [--ddp-peers] [--out FILE]
#
# --smoke: a few pairs, two ranks at most, into build/benchmarks-smoke.md
# unless --out says otherwise (the tests run it, so the runner cannot rot).
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 peers=0 ddp_peers=0 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --peers) peers=1 ;;
    --ddp-peers) ddp_peers=1 ;;
    --out) out=$2; shift ;;
    *) echo "run_all.sh: unknown argument '$1' (expected --smoke, --peers, --ddp-peers or --out FILE)" >&2; exit 2 ;;
  esac
  shift
done
source scripts/build_dir.sh
: "${BASIN_BENCH_BUILT:=0}"
if [ "$BASIN_BENCH_BUILT" != 1 ]; then
  bash scripts/build.sh --target basin-bench-sam basin-bench-sam-family basin-bench-decode basin-bench-distributed basin-run > /dev/null
fi
[ -n "$out" ] || out=$([ $smoke = 1 ] && echo "$build_dir/benchmarks-smoke.md" || echo docs/benchmark-runs.md)
mkdir -p "$(dirname "$out")"

pairs=15 ranks="1 2 4" models="cnn mlp1024 resnet" gbench=() decode=()
if [ $smoke = 1 ]; then
  pairs=1 ranks="1 2" models="cnn"
  gbench=(--benchmark_filter=OptimizerSide)  # the train-step pairs take half a minute
  decode=(--benchmark_filter='Decode/jpeg/32|ReadImageFolder/96/2' --benchmark_min_time=0.05)
fi
# Torch_DIR is <torch>/share/cmake/Torch; a PyPI torch says its version in <torch>/version.py.
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build_dir/CMakeCache.txt")
if [ -f "$torch_dir/../../../version.py" ]; then
  torch_version="PyPI torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_dir/../../../version.py")"
else
  torch_version="Debian libtorch-dev $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo '?')"
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
section() {  # title, then the command's output as a code block
  local title=$1; shift
  echo "run_all: $title" >&2
  { echo "## $title"; echo; echo '```'; "$@"; echo '```'; echo; } >> "$tmp"
}

{
  echo "# Benchmarks"
  echo
  echo "Written by \`bash bench/run_all.sh$([ $smoke = 1 ] && echo ' --smoke')\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory"
  echo "- LibTorch: $torch_version"
  echo "- Threads: 1 per process; every ratio comes from pairs run interleaved in one process"
  echo "- Times move by a few percent from run to run here (more with 4 ranks on 2 cores); byte counts and memory are exact"
  echo
} > "$tmp"
section "SAM against SGD: train step, optimizer-side work, peak memory" \
  env BASIN_BENCH_THREADS=1 "$build_dir/bench/basin-bench-sam" "${gbench[@]}"
section "The SAM family against SGD ($pairs interleaved pairs each)" \
  env BASIN_BENCH_THREADS=1 BASIN_BENCH_PAIRS=$pairs "$build_dir/bench/basin-bench-sam-family"
section "Image decoding for data \"image_folder\" (images per second per thread)" \
  env BASIN_BENCH_THREADS=1 "$build_dir/bench/basin-bench-decode" "${decode[@]}"
distributed() {
  for model in $models; do
    for n in $ranks; do
      BASIN_BENCH_MODEL=$model "$build_dir/programs/basin-run" --nproc "$n" -- "$build_dir/bench/basin-bench-distributed" |
        grep '^\[rank 0\]' | sed 's/^\[rank 0\] //'
      echo
    done
  done
}
section "Bytes, memory and time per step by parallel mode (ranks: $ranks; models: $models)" distributed
if [ $peers = 1 ]; then
  section "basin against the Python SAMs (same LibTorch)" bash bench/peers.sh
fi
if [ $ddp_peers = 1 ]; then
  section "basin's data parallel against PyTorch DDP (same LibTorch, Gloo)" bash bench/ddp_peers.sh "$build_dir"
fi
mv "$tmp" "$out"
trap - EXIT
echo "run_all: wrote $out" >&2

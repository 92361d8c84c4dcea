#!/usr/bin/env bash
# Debian's LibTorch against each BLAS Debian's alternatives can give it:
# netlib's reference BLAS (a fresh machine's), OpenBLAS's pthreads flavour
# and its OpenMP flavour. Each is put first on the loader's path
# (LD_LIBRARY_PATH), so nothing changes system-wide; the OpenBLAS flavours
# must be installed (apt-get install libopenblas0-pthread libopenblas0-openmp).
# For each, at 1 and 2 threads: one [2048]x[2048] GEMM, and the matrix-product
# throughput of the default job's SAM step and of the 36.8M-parameter MLP's
# (bench/flops_bench.cpp), then the default job's first epoch.
#   bash bench/blas_flavours.sh [--quick]     (--quick: no epoch)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
bash scripts/build.sh --target basin-bench-flops basin-train > /dev/null
source scripts/build_dir.sh
lib=/usr/lib/x86_64-linux-gnu
declare -A path=([reference]="$lib/blas:$lib/lapack" [openblas-pthread]="$lib/openblas-pthread"
                 [openblas-openmp]="$lib/openblas-openmp")
for flavour in reference openblas-pthread openblas-openmp; do
  dir=${path[$flavour]%%:*}
  if [ ! -e "$dir/libblas.so.3" ]; then
    echo "== $flavour: not installed ($dir/libblas.so.3), skipped"
    continue
  fi
  for threads in 1 2; do
    echo "== $flavour, $threads thread(s)"
    for config in examples/configs/fashion_mnist_sam.json bench/configs/mlp4096x3_adam_sam.json; do
      # The reference BLAS takes about 20x longer: fewer steps there.
      steps=$([ $flavour = reference ] && echo 3 || echo 10)
      LD_LIBRARY_PATH=${path[$flavour]} "$build_dir/bench/basin-bench-flops" --config "$config" \
        --set threads=$threads --steps $steps | grep -E '^(config|LibTorch|step|reached)'
    done
    if [ $quick = 0 ]; then
      LD_LIBRARY_PATH=${path[$flavour]} "$build_dir/programs/basin-train" --config examples/configs/fashion_mnist_sam.json \
        --set threads=$threads --set max_epochs=1 --run-dir "$(mktemp -d)/run" 2>&1 | grep -E 'test accuracy'
    fi
  done
done

#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default training job
# (SAM on Fashion-MNIST). Extra arguments go to basin-train, e.g. --set max_epochs=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --target basin-train
source scripts/build_dir.sh
"$build_dir/programs/basin-train" --config examples/configs/fashion_mnist_sam.json "$@"

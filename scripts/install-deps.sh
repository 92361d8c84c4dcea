#!/usr/bin/env bash
# Installs the Debian packages basin needs, and only those that are missing:
# on a machine that has them all it runs no apt-get at all. Arguments name
# further packages a script needs (scripts/fuzz.sh: clang and libFuzzer).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev nlohmann-json3-dev libboost-dev libgtest-dev
  # Debian's LibTorch links libblas.so.3, which on a fresh machine is netlib's
  # reference BLAS (20x slower GEMMs). OpenBLAS's OpenMP flavour takes over
  # libblas.so.3 and liblapack.so.3 through Debian's alternatives, and shares
  # LibTorch's OpenMP threads (the pthreads flavour keeps a pool of its own):
  # see docs/building.md#blas.
  libopenblas0-openmp
  zlib1g-dev libspdlog-dev libcli11-dev libbenchmark-dev
  libpng-dev libturbojpeg0-dev  # data "image_folder": PNG and JPEG decoding
  dataset-fashion-mnist
  libpcre2-dev libutf8proc-dev  # tokenizer/: the pre-tokenizers' regexes, Unicode normal forms
  fortunes       # the language-model example's corpus (examples/configs/fortunes_gpt_sam.json), 2.6 MB of text
  python3-torch  # the tests open checkpoints with Python's torch.load
  python3-pil    # ... and read the image-folder test's images in Python
  gnuplot-nox    # the study's plots (scripts/study.py), smoke-tested
  iproute2       # MultiNodeTest: two network namespaces and a veth pair (ip netns, as root)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

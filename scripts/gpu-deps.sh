#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with apt, what scripts/gpu-check.sh needs on
# a machine without network: basin's build dependencies and the Fashion-MNIST
# files, as .deb files in .gpu-deps/ (git-ignored), plus the Boost headers
# that Boost.Signals2 needs, cut from libboost1.74-dev (whose .deb is 9.5 MB)
# into .gpu-deps/boost-signals2.tar.xz (about 0.7 MB). Files already there are
# kept; a second run downloads nothing. Prints the total size at the end.
# Name .gpu-deps in the device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dir=.gpu-deps
mkdir -p "$dir"

# Headers and CMake configs of what basin's CMake finds, the shared libraries
# behind spdlog, fmt and Google Benchmark (GoogleTest is static), zlib, Gloo's
# headers for ProcessGroupGloo.hpp, and the data set.
packages=(
  nlohmann-json3-dev
  libspdlog-dev libspdlog1.10
  libfmt-dev libfmt9
  libgtest-dev
  libbenchmark-dev libbenchmark1debian
  libcli11-dev
  zlib1g-dev zlib1g
  libpng-dev libpng16-16 libturbojpeg0-dev libturbojpeg0  # data "image_folder"'s decoders
  libgloo-dev
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2  # tokenizer/: regexes, Unicode normal forms
  dataset-fashion-mnist
)

updated=""
apt_update() {
  if [ -z "$updated" ]; then
    apt-get update -qq
    updated=1
  fi
}

for p in "${packages[@]}"; do
  if compgen -G "$dir/${p}_*.deb" > /dev/null; then continue; fi
  apt_update
  echo "gpu-deps: downloading $p"
  # apt-get download writes into the current folder; _apt cannot write here,
  # so it warns that it downloads unsandboxed: harmless.
  (cd "$dir" && { apt-get download -qq "$p" 2>&1 | grep -v "unsandboxed" || true; })
  compgen -G "$dir/${p}_*.deb" > /dev/null || { echo "gpu-deps: could not download $p" >&2; exit 1; }
done

# Boost: only the sub-libraries that <boost/signals2/signal.hpp> reaches (each
# whole, so another compiler's choice of config header is there too), the
# top-level headers, and the CMake configs (relocatable).
boost_tar=$dir/boost-signals2.tar.xz
if [ ! -f "$boost_tar" ]; then
  apt_update
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "gpu-deps: cutting the Boost.Signals2 headers out of libboost1.74-dev"
  (cd "$work" && { apt-get download -qq libboost1.74-dev 2>&1 | grep -v "unsandboxed" || true; })
  dpkg -x "$work"/libboost1.74-dev_*.deb "$work/x"
  inc=$work/x/usr/include
  echo '#include <boost/signals2/signal.hpp>' > "$work/probe.cpp"
  closure=$(for std in c++14 c++17 gnu++17 c++20; do g++ -std=$std -pthread -I "$inc" -M "$work/probe.cpp"; done |
    tr ' \\' '\n\n' | grep "^$inc/boost/" | sed "s|^$inc/||" | sort -u)
  [ -n "$closure" ] || { echo "gpu-deps: found no Boost headers behind signals2 (is g++ installed?)" >&2; exit 1; }
  mapfile -t sublibs < <(echo "$closure" | awk -F/ 'NF > 2 {print "usr/include/boost/" $2}' | sort -u)
  (cd "$work/x" && tar -cJf "$repo/$boost_tar.part" \
      "${sublibs[@]}" usr/include/boost/*.hpp usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
      usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.74.0 usr/lib/x86_64-linux-gnu/cmake/BoostDetectToolset-1.74.0.cmake)
  mv "$boost_tar.part" "$boost_tar"
  echo "gpu-deps: Boost sub-libraries kept: ${sublibs[*]#usr/include/boost/}"
fi

total=$(du -cb "$dir"/*.deb "$boost_tar" | tail -1 | cut -f1)
echo "gpu-deps: $(find "$dir" -maxdepth 1 -type f | wc -l) files in $dir, $total bytes ($((total / 1048576)) MiB)"

#!/usr/bin/env bash
# Prints the root of the LibTorch to build against (the folder with lib/ and
# include/), installing it first if it is missing; with --python, the Python
# of its virtual environment instead.
#   BASIN_LIBTORCH=debian (default)  Debian's libtorch-dev 1.13.1: prints nothing,
#                                    CMake finds it in the system's folders.
#   BASIN_LIBTORCH=pypi              PyPI's torch wheel (BASIN_TORCH_VERSION,
#                                    default 2.11.0) in a virtual environment
#                                    under BASIN_CACHE (default ~/.cache/basin),
#                                    shared by every clone; a second run
#                                    installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${BASIN_LIBTORCH:-debian}
case "$kind" in
  debian) exit 0 ;;
  pypi) ;;
  *) echo "libtorch.sh: BASIN_LIBTORCH='$kind': expected debian or pypi" >&2; exit 2 ;;
esac

version=${BASIN_TORCH_VERSION:-2.11.0}
cache=${BASIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/basin}
venv=$cache/torch-$version
done_marker=$venv/.basin-installed  # written last: a broken install is redone

install() {
  [ -f "$done_marker" ] && return 0  # another clone finished it while this one waited
  echo "libtorch.sh: installing torch==$version from PyPI into $venv (about 3 GB with its CUDA libraries)" >&2
  rm -rf "$venv"
  if ! python3 -m venv "$venv" > /dev/null 2>&1; then
    # Debian's python3 makes virtual environments only with python3-venv.
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo > /dev/null || { echo "libtorch.sh: python3 cannot make a virtual environment: install python3-venv" >&2; exit 1; }
      sudo="sudo"
    fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv python3-pip >&2
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "torch==$version" >&2
  touch "$done_marker"
}

if [ ! -f "$done_marker" ]; then
  mkdir -p "$cache"
  # Clones share the cache: one installs while the others wait for it.
  exec 9> "$cache/.torch-$version.lock"
  flock 9
  install
  flock -u 9
fi
if [ "${1:-}" = "--python" ]; then
  echo "$venv/bin/python"
  exit 0
fi
# The package's own folder is a LibTorch root: lib/, include/, share/cmake/Torch.
"$venv/bin/python" -c 'import os, sys, importlib.util; print(os.path.dirname(importlib.util.find_spec("torch").origin))'

#!/usr/bin/env bash
# Prints a Python with PyPI's torch, transformers, safetensors and peft, for
# the tests that hand weights between basin and Hugging Face (GptTest,
# LlamaTest, LoraTest):
# the PyPI LibTorch's virtual environment (scripts/libtorch.sh, installed
# there first if missing), with transformers, safetensors and peft added to it. A
# second run installs nothing. Debian's Python is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(BASIN_LIBTORCH=pypi bash scripts/libtorch.sh --python)
if ! "$python" -c 'import transformers, safetensors, peft' > /dev/null 2>&1; then
  echo "hf-python.sh: installing transformers, safetensors and peft beside PyPI's torch ($python)" >&2
  "$python" -m pip install --quiet --disable-pip-version-check --no-cache-dir transformers safetensors peft >&2
fi
echo "$python"

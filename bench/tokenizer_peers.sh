#!/usr/bin/env bash
# basin's tokenizer against Hugging Face's `tokenizers`, one thread each, on
# all of Debian's fortunes (2.6 MB): for tokenizers built like GPT-2's,
# Llama 3's, Qwen2's, SmolLM2's, Llama 2's and Mistral's (the tests'
# fixtures, tests/tokenizer/make_fixtures.py), the encode time of each, best
# of 3, and their ratio. Prints a markdown table (docs/benchmarks.md).
#
#     bash bench/tokenizer_peers.sh build [PYTHON]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: tokenizer_peers.sh BUILD_DIR [PYTHON]}" && pwd)
python=${2:-$(bash "$root/scripts/hf-python.sh")}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mapfile -t files < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
"$python" "$root/tests/tokenizer/make_fixtures.py" "$scratch/fixtures" "${files[@]}" > /dev/null
echo "| tokenizer (as) | tokens | basin s | tokenizers s | basin / tokenizers |"
echo "|---|---:|---:|---:|---:|"
for style in gpt2 llama3 qwen2 smollm2 llama2 mistral; do
  tokenizer=$scratch/fixtures/$style/tokenizer.json
  best=""
  for _ in 1 2 3; do
    line=$("$build/programs/basin-tokenize" --tokenizer "$tokenizer" --dtype uint32 --out "$scratch/ids.bin" "${files[@]}" 2>&1)
    seconds=$(sed -E 's/.* in ([0-9.]+) s:.*/\1/' <<< "$line")
    best=$(awk -v a="$seconds" -v b="${best:-$seconds}" 'BEGIN { print (a < b ? a : b) }')
  done
  tokens=$(( $(stat -c %s "$scratch/ids.bin") / 4 ))
  read -r peer peer_tokens < <("$python" "$root/bench/tokenizers_peer.py" "$tokenizer" "${files[@]}")
  [ "$tokens" = "$peer_tokens" ] || { echo "tokenizer_peers: $style: basin gave $tokens tokens, tokenizers $peer_tokens" >&2; exit 1; }
  awk -v s="$style" -v t="$tokens" -v b="$best" -v p="$peer" 'BEGIN { printf "| %s | %d | %.3f | %.3f | %.2f |\n", s, t, b, p, b / p }'
done

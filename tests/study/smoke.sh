#!/usr/bin/env bash
# The studies' smoke runs (label noise: tiny subset, 2 epochs, 1 seed, 4
# methods, and 2 on the CNN; language model: 12 steps, 2 methods, then 3
# ways of fine-tuning): they must write their tables and well-formed PNG
# plots into one results.md, so none can rot.
#   smoke.sh SOURCE_DIR BASIN_TRAIN OUT_DIR
set -euo pipefail
source_dir=$1 basin_train=$2 out=$3
rm -rf "$out"
fail() { echo "study smoke: $*" >&2; exit 1; }
# README's tables go between its markers; what lies around them stays.
mkdir -p "$out"
readme="$out/README.md"
markers=$(grep -E "^<!-- (study tables|end of study tables)" "$source_dir/README.md") \
  || fail "README.md has no study tables block"
printf 'before\n%s\nafter\n' "$markers" > "$readme"
python3 "$source_dir/scripts/study.py" --smoke --basin-train "$basin_train" --out "$out" --readme "$readme"
results="$out/results.md"
[ "$(head -1 "$readme")" = before ] && [ "$(tail -1 "$readme")" = after ] || fail "$readme lost what lies around its tables"
grep -q '^| SGD | [0-9.]* ± [0-9.]* | ' "$readme" || fail "no SGD row in the noise table of $readme"
grep -q '^| SAM | `{"sam": {"rho": 0.1}}` | [0-9.]* ± ' "$readme" || fail "no SAM row in the method table of $readme"
[ -f "$results" ] || fail "no $results"
grep -q "^| SGD | none | [0-9.]* ± [0-9.]* |" "$results" || fail "no SGD row in the table of $results"
grep -q "^| SAM | " "$results" || fail "no SAM row in $results"
grep -q '^| AE-SAM | `{"ae_sam": {"rho": 0.1}}` | [0-9.]* | ' "$results" || fail "no screen row (AE-SAM, one seed) in $results"
grep -q "^| 40% | " "$results" || fail "no noise sweep row in $results"
grep -q '^| RWP | `{"rwp": {"gamma": 0.05}}` | [0-9.]* ± [0-9.]* | ' "$results" || fail "no RWP row in the CNN table of $results"
for plot in noise epochs cost; do
  png="$out/$plot.png"
  [ -f "$png" ] || fail "no $png"
  # The PNG signature, then a non-trivial image.
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
  [ "$(stat -c %s "$png")" -gt 5000 ] || fail "$png is nearly empty"
  grep -q "($plot.png)" "$results" || fail "$results does not show $plot.png"
done
# The language-model study (12 steps, AdamW and SAM, seed 0) adds its section to results.md.
python3 "$source_dir/scripts/lm_study.py" --smoke --basin-train "$basin_train" --out "$out"
grep -q '^| AdamW, lr 0.01 | none | [0-9.]* ± [0-9.]* | ' "$results" || fail "no AdamW row in the language-model table of $results"
grep -q '^| SAM, lr 0.01 | `{"sam": {"rho": 0.05}}` | [0-9.]* ± ' "$results" || fail "no SAM row in the language-model table"
grep -q '^| LoRA | `adapters.lora` | [0-9.]* ± [0-9.]* → [0-9.]* ± ' "$results" || fail "no LoRA row in the fine-tuning table"
grep -q '^| Bi-LoRA | `adapters.lora`, `{"bi_lora": {"rho": 0.05}}` | ' "$results" || fail "no Bi-LoRA row in the fine-tuning table"
grep -q '^| full fine-tuning | none | ' "$results" || fail "no full fine-tuning row in the fine-tuning table"
for plot in lm_loss lm_forgetting ft_loss ft_forgetting; do
  [ "$(stat -c %s "$out/$plot.png")" -gt 5000 ] || fail "$out/$plot.png is missing or nearly empty"
  grep -q "($plot.png)" "$results" || fail "$results does not show $plot.png"
done
# Started again, it finds its runs done and rewrites its section in place.
python3 "$source_dir/scripts/lm_study.py" --smoke --basin-train "$basin_train" --out "$out" > /dev/null
[ "$(grep -c '^<!-- language-model study' "$results")" = 1 ] || fail "$results has the language-model section twice"
[ "$(grep -c '^<!-- fine-tuning study' "$results")" = 1 ] || fail "$results has the fine-tuning section twice"
# A second start finds every run done and only redraws, keeping the other study's section.
again=$(python3 "$source_dir/scripts/study.py" --smoke --basin-train "$basin_train" --out "$out")
grep -q "already done, 0 to run" <<< "$again" || fail "a second start ran the study again: $again"
grep -q '^| AdamW, lr 0.01 | none | ' "$results" || fail "the label-noise study's report dropped the language-model section"
grep -q '^| LoRA | `adapters.lora` | ' "$results" || fail "the label-noise study's report dropped the fine-tuning section"
grep -q "^| SGD | none | " "$results" || fail "no SGD row after the second start"
echo "study smoke: ok"

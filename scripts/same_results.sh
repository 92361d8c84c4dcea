#!/usr/bin/env bash
# Shows that a redesign moved nothing: trains the same configs with two
# builds of basin-train (and basin-run for the ranks) and compares each
# run's final loss, accuracy and weights digest, which must be equal to the
# bit. Prints one line per config and exits 1 if any differs.
#   bash scripts/same_results.sh OLD_BIN_DIR NEW_BIN_DIR
# Each BIN_DIR holds basin-train and basin-run (e.g. build/programs of an
# older checkout). The configs cover every mode, both ascents, bf16,
# microbatches, a TorchScript model, the SAM family under ZeRO (every rule
# that reads the step beyond SAM's norm and trains the MLP: asam, rwp's
# mixed form, wsam, ae_sam, arwp, esam, momentum_sam, fisher_sam, gsam,
# looksam; flat_lora and bi_lora need LoRA adapters, which their tests
# pin against plain ops), and a zero3 run resumed from its checkpoint.
set -uo pipefail
old=${1:?usage: same_results.sh OLD_BIN_DIR NEW_BIN_DIR}
new=${2:?usage: same_results.sh OLD_BIN_DIR NEW_BIN_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
# The runs' logs stay when a run failed or differed (the lines name them).
trap '[ "${status:-1}" -eq 0 ] && rm -rf "$work"' EXIT

# A TorchScript model and tensor data, written by Debian's PyTorch (the
# scripted class needs a source file).
cat > "$work/models.py" <<'PY'
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(64, 3)
    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))
PY
(cd "$work" && /usr/bin/python3 -c "
import torch, models
torch.manual_seed(0)
torch.jit.script(models.Net()).save('net.pt')
w = torch.randn(16, 3)
for name, n in (('train', 256), ('test', 128)):
    x = torch.randn(n, 1, 4, 4)
    torch.save({'x': x, 'y': (x.reshape(n, 16) @ w).argmax(1)}, name + '.pt')
") || { echo "same_results: could not write the TorchScript model"; exit 2; }

smoke=$root/examples/configs/synthetic_smoke.json
# name | ranks | overrides (each a --set)
configs=(
  "plain|1|"
  "sam|1|algorithms={\"sam\":{\"rho\":0.05}}"
  "ddp-local-ascent|2|algorithms={\"sam\":{\"rho\":0.05,\"sync_ascent\":false}} parallel.mode=ddp data.batch_size=16"
  "ddp-synced-ascent|2|algorithms={\"sam\":{\"rho\":0.05,\"sync_ascent\":true}} parallel.mode=ddp data.batch_size=16"
  "ddp-microbatches|2|algorithms={\"sam\":{\"rho\":0.05}} parallel.mode=ddp data.batch_size=16 data.microbatches=2"
  "ddp-bf16|2|algorithms={\"sam\":{\"rho\":0.05}} parallel.mode=ddp data.batch_size=16 precision=amp_bf16"
  "zero1-sam|2|algorithms={\"sam\":{\"rho\":0.05}} parallel.mode=zero1 data.batch_size=16"
  "zero1-looksam|2|algorithms={\"looksam\":{\"rho\":0.05,\"k\":2}} parallel.mode=zero1 data.batch_size=16"
  "zero2-gsam|2|algorithms={\"gsam\":{\"rho\":0.05}} parallel.mode=zero2 data.batch_size=16 optimizer={\"name\":\"adam\",\"lr\":0.01}"
  "zero2-microbatches|2|algorithms={\"sam\":{\"rho\":0.05,\"sync_ascent\":true}} parallel.mode=zero2 data.batch_size=16 data.microbatches=2"
  "zero3-sam|2|algorithms={\"sam\":{\"rho\":0.05}} parallel.mode=zero3 data.batch_size=16"
  "zero2-looksam|2|algorithms={\"looksam\":{\"rho\":0.05,\"k\":2}} parallel.mode=zero2 data.batch_size=16"
  "zero3-looksam|2|algorithms={\"looksam\":{\"rho\":0.05,\"k\":2}} parallel.mode=zero3 data.batch_size=16"
  "zero3-momentum-sam|2|algorithms={\"momentum_sam\":{\"rho\":0.05}} parallel.mode=zero3 data.batch_size=16"
  "zero1-bf16-msam|2|algorithms={\"msam\":{\"rho\":0.05,\"m\":2}} parallel.mode=zero1 data.batch_size=16 precision=amp_bf16"
  "asam|1|algorithms={\"asam\":{\"rho\":0.5}}"
  "ddp-rwp-mixed|2|algorithms={\"rwp\":{\"gamma\":0.01,\"mix\":0.5}} parallel.mode=ddp data.batch_size=16"
  "zero1-wsam|2|algorithms={\"wsam\":{\"rho\":0.05}} parallel.mode=zero1 data.batch_size=16"
  "zero2-ae-sam|2|algorithms={\"ae_sam\":{\"rho\":0.05}} parallel.mode=zero2 data.batch_size=16"
  "zero2-arwp|2|algorithms={\"arwp\":{\"gamma\":0.01}} parallel.mode=zero2 data.batch_size=16 optimizer={\"name\":\"adam\",\"lr\":0.01}"
  "zero2-esam|2|algorithms={\"esam\":{\"rho\":0.05}} parallel.mode=zero2 data.batch_size=16"
  "zero1-momentum-sam|2|algorithms={\"momentum_sam\":{\"rho\":0.05}} parallel.mode=zero1 data.batch_size=16"
  "zero3-fisher-sam|2|algorithms={\"fisher_sam\":{\"rho\":0.05}} parallel.mode=zero3 data.batch_size=16"
  "torchscript-sam|1|model={\"torchscript\":\"$work/net.pt\"} data={\"name\":\"tensors\",\"train\":\"$work/train.pt\",\"test\":\"$work/test.pt\",\"batch_size\":32} algorithms={\"sam\":{\"rho\":0.05}}"
  "torchscript-zero3|2|model={\"torchscript\":\"$work/net.pt\"} data={\"name\":\"tensors\",\"train\":\"$work/train.pt\",\"test\":\"$work/test.pt\",\"batch_size\":16} algorithms={\"sam\":{\"rho\":0.05}} parallel.mode=zero3"
)

# Runs basin-train from BIN_DIR into RUN_DIR; prints its result line.
train() {
  local bin=$1 ranks=$2 run_dir=$3; shift 3
  local command=("$bin/basin-train" --config "$smoke" --run-dir "$run_dir" --overwrite "$@")
  if [ "$ranks" -gt 1 ]; then command=("$bin/basin-run" --nproc "$ranks" -- "${command[@]}"); fi
  "${command[@]}" > "$run_dir.log" 2>&1 || { echo "FAILED (see $run_dir.log)"; tail -5 "$run_dir.log" >&2; return; }
  result "$run_dir"
}
# The summary's loss and accuracy, the exported weights' hash and, with
# several ranks, the ranks' digests of their weights (one, when they agree).
result() {
  local digest
  digest=$(sha256sum "$1/state_dict.pt" | cut -c1-16)
  digest+=$(grep -o 'final weights digest [0-9a-f]*' "$1.log" | awk '{print $4}' | sort -u | sed 's/^/ rank /' | tr -d '\n')
  /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('loss %r acc %r digest %s' % (s['final_train_loss'], s['test_accuracy'], sys.argv[2]))" \
    "$1/summary.json" "$digest"
}

status=0
compare() {
  local name=$1 a=$2 b=$3
  if [ "$a" = "$b" ] && [[ "$a" != FAILED* ]]; then
    echo "same       $name: $a"
  else
    echo "DIFFERENT  $name: old $a, new $b"
    status=1
  fi
}

for entry in "${configs[@]}"; do
  IFS='|' read -r name ranks overrides <<< "$entry"
  sets=()
  for o in $overrides; do sets+=(--set "$o"); done
  a=$(train "$old" "$ranks" "$work/old-$name" "${sets[@]}")
  b=$(train "$new" "$ranks" "$work/new-$name" "${sets[@]}")
  compare "$name" "$a" "$b"
done

# zero3 resumed: 3 epochs with a checkpoint each epoch, then the second and
# third again from the first epoch's checkpoint.
resume_sets=(--set 'algorithms={"sam":{"rho":0.05}}' --set parallel.mode=zero3 --set data.batch_size=16
             --set 'callbacks={"checkpoint":{"every_epochs":1}}')
for side in old new; do
  bin=$old; [ $side = new ] && bin=$new
  dir=$work/$side-zero3-resume
  train "$bin" 2 "$dir" "${resume_sets[@]}" > /dev/null
  first=$(ls "$dir"/checkpoints/ 2>/dev/null | sort -V | head -1)
  rm -f "$dir/summary.json" "$dir/state_dict.pt"  # only the resumed run may write them
  if "$bin/basin-run" --nproc 2 -- "$bin/basin-train" --run-dir "$dir" --resume "$dir/checkpoints/$first" \
       > "$dir.log" 2>&1 && grep -q "resumed from" "$dir.log"; then
    declare "resumed_$side=$(result "$dir")"
  else
    declare "resumed_$side=FAILED (see $dir.log)"
  fi
done
compare "zero3-resumed" "$resumed_old" "$resumed_new"
exit $status

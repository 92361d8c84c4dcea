#!/usr/bin/env bash
# Plants one violation of each rule in a copy of the tree and checks that
# check_layout.sh reports every one of them, and nothing that is allowed.
set -euo pipefail
source_root=$(cd "${1:?usage: self_test.sh SOURCE_ROOT}" && pwd)
checker=$(cd "$(dirname "$0")" && pwd)/check_layout.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$source_root"/{core,algorithms,callbacks,schedulers,tokenizer,models,datasets,launch,programs} "$scratch"

plant() {  # file, line to append; prints the file:line it lands on
  echo "$2" >> "$scratch/$1"
  echo "$1:$(wc -l < "$scratch/$1")"
}
# One plant that breaks two rules: a plug-in's allowed includes, and the library parts' place above.
callbacks_plant=$(plant callbacks/progress.cpp '#include "basin/launch/local_ranks.h"')
expected=(
  "$(plant core/engine/engine.h '#include "basin/callbacks/progress.h"'): core includes a plug-in"
  "$(plant core/train/trainer.cpp '#include <basin/algorithms/sam.h>'): core includes a plug-in"
  "$(plant core/communication/communicator.cpp '#include "basin/core/train/trainer.h"'): core/communication/ includes no layer above it (data model optim sharding engine parallel checkpoint train)"
  "$(plant core/config/config_text.h '#include "basin/core/engine/state.h"'): core/config/ includes no layer above it (serialization communication data model optim sharding engine parallel checkpoint train)"
  "$(plant core/engine/state.cpp '#include "basin/core/checkpoint/checkpoint.h"'): core/engine/ includes no layer above it (parallel checkpoint train)"
  "$(plant core/stray.cpp '// a file in no layer'): core/'s root holds no source but precompiled.h: put it in its layer"
  "$(plant algorithms/sam/gsam.cpp '#include "basin/core/train/trainer.h"'): algorithms/ includes only core/'s layers up to checkpoint/ but parallel/, and algorithms/"
  "$(plant core/communication/rendezvous.cpp '#include "basin/core/sharding/grad_norm.h"'): core/communication/ includes no layer above it (data model optim sharding engine parallel checkpoint train)"
  "$(plant core/parallel/distributed_strategy.cpp '#include "basin/core/parallel/zero/zero_strategy.h"'): core/parallel/'s root includes no mode's folder (modes.cpp aside)"
  "$(plant core/parallel/ddp/bucket_reducer.cpp '#include "basin/core/parallel/zero3/fully_sharded_model.h"'): core/parallel/ddp/ includes no other mode's folder but ddp/"
  "$(plant core/parallel/hsdp/hsdp_strategy.cpp '#include "basin/core/parallel/zero/sharded_optimizer.h"'): core/parallel/hsdp/ includes no other mode's folder but ddp/ and zero3/, which it builds on"
  "$(plant algorithms/sam/looksam.cpp '#include "basin/core/parallel/zero/sharded_optimizer.h"'): algorithms/ includes only core/'s layers up to checkpoint/ but parallel/, and algorithms/"
  "$(plant core/train/trainer_setup.cpp '#include "basin/core/parallel/zero3/fully_sharded_model.h"'): core/'s layers outside core/parallel/ include no mode's folder: they ask the contracts"
  "$(plant core/checkpoint/checkpoint.cpp '#include "basin/core/parallel/zero/sharded_optimizer.h"'): core/'s layers outside core/parallel/ include no mode's folder: they ask the contracts"
  "$(plant core/data/dataset.h '#include "basin/core/engine/state.h"'): core/data/ includes no layer above it (model optim sharding engine parallel checkpoint train)"
  "$(plant core/optim/loss_scaler.h 'class Trainer;'): core/optim/ declares no type a layer above it defines (sharding engine parallel checkpoint train)"
  "$(plant core/model/model.h 'namespace basin { class ShardedParameters; }'): core/model/ declares no type a layer above it defines (optim sharding engine parallel checkpoint train)"
  "$(plant core/sharding/placement.h '#include "basin/core/engine/state.h"'): core/sharding/ includes no layer above it (engine parallel checkpoint train)"
  "$(plant models/gpt.cpp '#include "basin/core/train/trainer.h"'): models/ and datasets/ include no core/train/: they implement core/model/'s and core/data/'s contracts"
  "$(plant models/mlp.cpp '#include "basin/datasets/idx_file.h"'): models/ includes core/ and models/ only"
  "$(plant launch/coordinator.cpp '#include "basin/algorithms/sam/sam.h"'): launch/ includes core/ and launch/ only"
  "$(plant tokenizer/bpe.cpp '#include "basin/datasets/token_windows.h"'): tokenizer/ includes core/ and tokenizer/ only"
  "$(plant datasets/text_corpus.cpp '#include "basin/models/sampling.h"'): datasets/ includes core/, tokenizer/ and datasets/ only"
  "$(plant core/data/dataset.cpp '#include "basin/datasets/image_folder.h"'): core/ and the plug-ins include no library part (tokenizer models datasets launch)"
  "$callbacks_plant: callbacks/ includes only core/'s layers up to checkpoint/ but parallel/, and callbacks/"
  "$callbacks_plant: core/ and the plug-ins include no library part (tokenizer models datasets launch)"
  "$(plant core/base/blas.cpp '#include "basin/programs/memory_reuse.h"'): nothing includes programs/: its files are mains"
  "$(seq 401 | sed 's|^|// line |' > "$scratch/programs/long.cpp"; echo programs/long.cpp:1): 401 lines, over 400: split it by concern"
  "$(plant core/optim/group_sync.cpp 'basin::GradScaler* planted = nullptr;'): core names the plug-in type GradScaler"
  "$(plant algorithms/sam/sam.cpp '#include "basin/callbacks/grad_scaler.h"'): algorithms/ includes only core/'s layers up to checkpoint/ but parallel/, and algorithms/"
  "$(plant schedulers/step.cpp '#include "basin/core/parallel/distributed_strategy.h"'): schedulers/ includes only core/'s layers up to checkpoint/ but parallel/, and schedulers/"
  "$(plant core/engine/event.cpp '#  include  "basin/callbacks/progress.h"'): core includes a plug-in"
  "$(plant core/optim/scheduler.cpp '#include "../engine/state.h"'): basin's files are included by their basin/ path, never a relative one"
  "$(plant core/train/loss.cpp '#include <basin/basin.h>'): the library includes what it uses, never the umbrella basin.h (for programs and users)"
  "$(mkdir "$scratch/core/util"; plant core/util/planted.h '#pragma once' > /dev/null; echo core/util/): no layer of core/ (base config serialization communication data model optim sharding engine parallel checkpoint train): add it to the layers or move its files into one"
  "$(mkdir "$scratch/core/parallel/offload"; plant core/parallel/offload/planted.h '#pragma once' > /dev/null; echo core/parallel/offload/): no mode of core/parallel/ (ddp zero zero3 hsdp): add it to the modes"
  "$(mkdir "$scratch/tests"; plant tests/planted_test.cpp '#include "basin/programs/hand_loop.cpp"'): nothing includes programs/: its files are mains"
  "$(plant algorithms/sam/asam.cpp 'struct PlantedRule' > /dev/null; plant core/base/random.cpp 'basin::PlantedRule* planted_rule = nullptr;'): core names the plug-in type PlantedRule"
)
# Allowed: a plug-in named in a comment or a message, a layer including one below.
plant core/engine/engine.cpp '// SAMOptimizer calls this; "GradScaler" too' > /dev/null
plant core/config/config.cpp 'static const char* planted_message = "wrapped by SAM";' > /dev/null
plant core/model/model.cpp '#include "basin/core/communication/communicator.h"' > /dev/null
plant core/checkpoint/checkpoint.cpp '#include "basin/core/communication/communicator.h"' > /dev/null  # a layer below
plant callbacks/checkpoint.cpp '#include "basin/core/checkpoint/checkpoint_file.h"' > /dev/null  # the top layer a plug-in sees
plant core/parallel/zero3/zero3_strategy.cpp '#include "basin/core/parallel/ddp/data_parallel.h"' > /dev/null  # ddp's replicas
plant core/parallel/modes.cpp '#include "basin/core/parallel/zero3/zero3_strategy.h"' > /dev/null  # the registration
plant core/parallel/hsdp/hsdp_strategy.h '#include "basin/core/parallel/zero3/fully_sharded_model.h"' > /dev/null  # the mode it builds on
plant datasets/image_folder.cpp '#include "basin/core/data/dataset.h"' > /dev/null  # a part sits on all of core/
plant algorithms/sam/esam.cpp '#include "basin/core/model/model.h"' > /dev/null  # a contract below the engine
plant algorithms/loss/saf.cpp '#include "basin/algorithms/sam/rule_state.h"' > /dev/null  # a plug-in's own subfolder

set +e
report=$("$checker" "$scratch")
status=$?
set -e
fail=0
[ $status -eq 1 ] || { echo "self-test: checker exited $status, expected 1"; fail=1; }
for line in "${expected[@]}"; do
  grep -qxF "$line" <<< "$report" || { echo "self-test: not reported: $line"; fail=1; }
done
reported=$(grep -c . <<< "$report")
[ "$reported" -eq ${#expected[@]} ] || { echo "self-test: $reported reports for ${#expected[@]} planted:"; echo "$report"; fail=1; }
[ $fail -eq 0 ] && echo "self-test: all ${#expected[@]} planted violations reported, nothing else"
exit $fail

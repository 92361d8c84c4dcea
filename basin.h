#pragma once

// basin in one include, for a program of the user's own: the engine and its
// contracts, the distributed layer, the trainer, the SAM family (its step,
// its rule contract and make_sam_optimizer), the loss-side algorithms and
// the callbacks, in the order of core's layers. basin's own sources include
// the narrow headers instead.

#include "basin/core/config/config.h"
#include "basin/core/config/registry.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/data/dataset.h"
#include "basin/core/model/lora.h"
#include "basin/core/model/model.h"
#include "basin/core/model/peft_adapter.h"
#include "basin/core/optim/schedule.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/sharding/sharded_parameters.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"
#include "basin/core/engine/engine.h"
#include "basin/core/engine/event.h"
#include "basin/core/engine/pass_hooks.h"
#include "basin/core/engine/pass_request.h"
#include "basin/core/engine/state.h"
#include "basin/core/parallel/ddp/data_parallel.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/parallel/zero/sharded_optimizer.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/train/trainer.h"
#include "basin/algorithms/sam/pass_plan.h"
#include "basin/algorithms/sam/parameter_buffers.h"
#include "basin/algorithms/sam/rule_state.h"
#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_family.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/algorithms/sam/sam_rule.h"
#include "basin/algorithms/sam/step_view.h"
#include "basin/algorithms/loss/trajectory_loss.h"
#include "basin/callbacks/grad_scaler.h"

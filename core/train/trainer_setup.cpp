// The run's configuration: a config becomes the trainer's parts (data,
// model, optimizer, schedulers, algorithms, callbacks, the distributed job),
// built in the loop's order up to AFTER_SHARDING, so that bad input fails
// before any training.
#include "basin/core/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/optimizer.h>

#include "basin/core/base/blas.h"
#include "basin/core/base/random.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/data/data_pipeline.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/initial_weights.h"
#include "basin/core/model/model.h"
#include "basin/core/model/peft_adapter.h"
#include "basin/core/model/pretrained_keys.h"
#include "basin/core/model/unit_selection.h"
#include "basin/core/optim/optimizers.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/autocast.h"
#include "basin/core/train/generator_lock.h"
#include "basin/core/train/model_check.h"
#include "basin/core/train/step_checks.h"
#include "basin/core/train/training_closure.h"

namespace basin {

namespace {

constexpr uint64_t kAdapterStream = 0x4c6f5241;  // "LoRA"

c10::DeviceType parse_device(Params& root) {
  const std::string name = root.choice("device", "cpu", {"cpu", "cuda"});
  if (name == "cpu") return c10::DeviceType::CPU;
  if (!at::hasCUDA()) {
    throw ConfigError("config key 'device': \"cuda\" asked for, but this LibTorch has no CUDA or no GPU is visible");
  }
  return c10::DeviceType::CUDA;
}

}  // namespace

Trainer::Trainer(const Json& config, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<LoggerDestination>> loggers, std::shared_ptr<Communicator> communicator)
    : engine_(std::make_unique<Engine>(state_)) {
  build(config, std::move(callbacks), std::move(loggers), std::move(communicator));
}

Trainer::~Trainer() {
  if (model_) model_->set_unit_runner(nullptr);  // the model may outlive the trainer
}

void Trainer::build(const Json& config, std::vector<std::shared_ptr<Callback>> callbacks,
                    std::vector<std::shared_ptr<LoggerDestination>> loggers, std::shared_ptr<Communicator> communicator) {
  config_ = config;
  Params root(config, "");
  state_.seed = root.integer("seed", 0, 0);
  const int64_t threads = root.integer("threads", 0, 0, 1024);
  const c10::DeviceType device_type = parse_device(root);
  // A CUDA job puts each local rank on its own GPU.
  state_.device = device_type == c10::DeviceType::CUDA
                      ? c10::Device(device_type, static_cast<c10::DeviceIndex>(read_job_environment().local_rank))
                      : c10::Device(device_type);
  state_.precision = precision_from_name(root.string("precision", "fp32"), "precision");
  if (state_.precision == Precision::kAmpFp16 && !state_.device.is_cuda() && !compat::kCpuAutocastFp16) {
    throw ConfigError(std::string("config key 'precision': amp_fp16 needs \"device\": \"cuda\" with LibTorch ") +
                      compat::torch_version() + " (its CPU autocast has no float16; 2.5 and later have); use "
                      "amp_bf16 on CPU");
  }
  checks_ = std::make_unique<StepChecks>(root);
  state_.max_epochs = root.integer("max_epochs", 1, 1);
  state_.max_steps = root.integer("max_steps", 0, 0);
  state_.log_every = root.integer("log_every", 50, 1);
  const Loss loss = Loss::from_config(root);
  const std::optional<InitialWeights> initial_weights = initial_weights_from_config(root);
  lora_ = LoraOptions::from_config(root);
  Params data = root.object("data");
  Params model = root.object("model");
  Params optimizer = root.object("optimizer");
  const Json schedulers = root.array("schedulers");
  Params algorithms = root.object("algorithms");
  Params callback_configs = root.object("callbacks");
  Params parallel = root.object("parallel");
  root.finish();

  // The units recomputed in backward, under any mode: the model runs them.
  const UnitSelection recomputed(parallel, "activation_checkpointing");
  strategy_ = make_strategy(parallel, std::move(communicator), state_.device.is_cuda(), state_.precision);
  communicator = strategy_->communicator();
  state_.communicator = communicator;
  state_.rank = communicator ? communicator->rank() : 0;
  state_.world_size = communicator ? communicator->world_size() : 1;

  // LibTorch starts with one intra-op thread here; 0 means every core.
  const int intra_op_threads =
      threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_compute_threads(intra_op_threads);
  // LibTorch has one global generator per process, and building a trainer
  // draws from it (a dataset may; the model's initial weights do). Trainers
  // built side by side (ranks as threads) take turns from seeding it to the
  // model's last draw, or one's seeding lands inside another's draws.
  std::unique_lock<std::mutex> seeded(global_generator_mutex());
  at::manual_seed(static_cast<uint64_t>(state_.seed));

  // Data: the trainer's own keys first, then the dataset's (the factory rejects the rest).
  const std::string dataset_name = data.string("name");
  batch_size_ = data.integer("batch_size", 128, 1);
  microbatches_ = data.integer("microbatches", 1, 1);
  const bool eval_batch_given = data.has("eval_batch_size");
  eval_batch_size_ = data.integer("eval_batch_size", 1000, 1);
  const int64_t train_subset = data.integer("train_subset", 0, 0);
  const double label_noise = data.number("label_noise", 0.0, 0.0, 1.0);
  shuffle_ = data.boolean("shuffle", true);
  if (batch_size_ % microbatches_ != 0) {
    data.fail("microbatches", "a divisor of batch_size (" + std::to_string(batch_size_) + ")",
              Json(microbatches_));
  }
  data_ = std::move(*dataset_registry().create(dataset_name, data, state_.seed));
  data_.train = take_subset(data_.train, train_subset, static_cast<uint64_t>(state_.seed));
  if (data_.train.size() < batch_size_) {
    throw ConfigError("config key 'data.batch_size': " + std::to_string(batch_size_) + " is larger than the " +
                      std::to_string(data_.train.size()) + " training samples");
  }
  if (label_noise > 0 && data_.train.per_token()) {
    data.fail("label_noise", "0: the data's targets are token sequences, not class labels", Json(label_noise));
  }
  // A language model's logits are [n, T, V]: 1000 windows of them would not fit (GPT-2's at block 128: 26 GB).
  if (!eval_batch_given && data_.train.per_token()) eval_batch_size_ = batch_size_;
  if (label_noise > 0) {
    add_label_noise(data_.train.mutable_targets(), label_noise, data_.info.num_classes,
                    static_cast<uint64_t>(state_.seed));
  }
  // Each step takes batch_size samples on every rank: world_size * batch_size in all.
  state_.steps_per_epoch = data_.train.size() / (batch_size_ * state_.world_size);
  state_.train_size = data_.train.size();
  if (state_.steps_per_epoch == 0) {
    throw ConfigError("config key 'data.batch_size': " + std::to_string(batch_size_) + " per rank on " +
                      std::to_string(state_.world_size) + " ranks needs more than the " +
                      std::to_string(data_.train.size()) + " training samples");
  }
  state_.microbatch_count = microbatches_;

  at::manual_seed(static_cast<uint64_t>(state_.seed));  // the weights depend on the seed, not on the data's draws
  // A TorchScript file names its own kind: {"torchscript": "model.pt"}.
  const std::string model_name = model.has("torchscript") && !model.has("name") ? "torchscript" : model.string("name");
  // A Hugging Face directory gives the keys the config leaves out; the config keeps them, as resolved.
  const ResolvedModelKeys resolved =
      resolve_pretrained_keys(model_name, model.raw_object(), initial_weights ? initial_weights->path : std::string());
  if (!resolved.taken.empty()) {
    config_["model"] = resolved.keys;
    model = Params(resolved.keys, "model");
    model.claim("name");
    for (const std::string& key : resolved.taken) model.set_source(key, resolved.source);
  }
  model_ = model_registry().create(model_name, model, data_.info);
  seeded.unlock();
  std::vector<bool> recomputable(model_->units().size());
  for (std::size_t u = 0; u < recomputable.size(); ++u) recomputable[u] = model_->recomputable(u);
  model_->set_recomputed_units(recomputed.resolve(model_->unit_names(), recomputable));
  if (initial_weights) load_initial_weights(*model_, *initial_weights);
  if (initial_weights) base_weights_ = initial_weights->path;
  if (lora_) {
    // The adapters draw from a stream of their own, so that a run's base weights stay what they were without them.
    attach_lora(*model_, *lora_, Rng(static_cast<uint64_t>(state_.seed), kAdapterStream).next());
    if (!lora_->init_from.empty()) read_peft_adapter(*model_, *lora_, lora_->init_from);
  }
  model_->to(state_.device);
  check_model_fits_data(*model_, data_, loss, batch_size_ / microbatches_, state_.device);
  state_.outputs_given = !loss.from_model();
  state_.outputs_per_token = data_.train.per_token();
  state_.model = model_;
  state_.forward = [model = model_.get()](const at::Tensor& inputs) { return model->run(inputs); };
  state_.optimizer = make_optimizer(optimizer, *model_);
  loss_ = loss;
  closure_ = std::make_unique<TrainingClosure>(
      state_, *engine_, *model_, loss, microbatches_,
      TrainingClosure::Sync{[this](GradientSync sync) { strategy_->prepare_gradient_sync(sync); },
                            [this](GradientSync sync) { strategy_->finish_gradient_sync(sync); },
                            [this] { strategy_->abandon_gradient_sync(); },
                            strategy_->syncs_every_microbatch()});

  for (std::size_t i = 0; i < schedulers.size(); ++i) {
    Params entry(schedulers[i], "schedulers[" + std::to_string(i) + "]");
    state_.schedulers.push_back(make_scheduler(entry));
  }
  engine_->add_algorithms(algorithms);
  engine_->add_checkpoint_part({"loop", [this] { return loop_state(); },
                                [this](const c10::IValue& saved) { load_loop_state(saved); }});
  engine_->add_checkpoint_part({"config", [this] { return c10::IValue(config_.dump()); },
                                [](const c10::IValue&) {}});  // compared by resume(), before loading
  std::vector<std::shared_ptr<Callback>> configured;
  for (const std::string& name : callback_configs.keys()) {
    Params params = callback_configs.object(name);
    configured.push_back(callback_registry().create(name, params));
  }
  // fp16 needs loss scaling: the registered scaler with its defaults, unless the config has one.
  if (state_.precision == Precision::kAmpFp16 && !callback_configs.has("grad_scaler")) {
    Params defaults(Json::object(), "callbacks.grad_scaler");
    configured.push_back(callback_registry().create("grad_scaler", defaults));
  }
  callback_configs.finish();
  for (auto& callback : configured) engine_->add_callback(std::move(callback));
  for (auto& callback : callbacks) engine_->add_callback(std::move(callback));
  for (auto& logger : loggers) engine_->add_logger(std::move(logger));

  engine_->run(Event::INIT);
  wrap_for_distribution(optimizer);
  engine_->run(Event::AFTER_SHARDING);
  // An optimizer that runs its own passes (SAM) calls the trainer's checks itself.
  if (auto* pass_aware = dynamic_cast<PassAwareOptimizer*>(state_.optimizer.get())) {
    pass_aware->add_pass_hooks(checks_->pass_hooks(state_, strategy_->shards()));
  }

  // Schedulers attach to the optimizer as the algorithms left it (SAM's wrapper).
  attach_schedulers();
}

int64_t Trainer::steps_left_in_epoch() const {
  return epoch_open_ ? (data_.train.size() - epoch_samples_) / (batch_size_ * state_.world_size) : 0;
}

int64_t Trainer::run_steps() const {
  const auto& ts = state_.timestamp;
  const int64_t epochs_left = state_.max_epochs - ts.epoch - (epoch_open_ ? 1 : 0);
  int64_t steps_left = steps_left_in_epoch();
  steps_left += std::max<int64_t>(epochs_left, 0) * state_.steps_per_epoch;
  const int64_t total = ts.step + steps_left;
  return state_.max_steps > 0 ? std::min(state_.max_steps, total) : total;
}

int64_t Trainer::run_epochs() const {
  const auto& ts = state_.timestamp;
  const int64_t steps_left = run_steps() - ts.step - steps_left_in_epoch();
  int64_t epochs = ts.epoch + (epoch_open_ ? 1 : 0);  // those begun
  if (steps_left > 0) epochs += (steps_left + state_.steps_per_epoch - 1) / state_.steps_per_epoch;
  return epochs;
}

void Trainer::attach_schedulers() {
  const int64_t total_steps = run_steps(), total_epochs = run_epochs();
  for (std::size_t i = 0; i < state_.schedulers.size(); ++i) {
    auto& scheduler = *state_.schedulers[i];
    const int64_t horizon = scheduler.interval() == Scheduler::Interval::kStep ? total_steps : total_epochs;
    try {
      scheduler.attach(*state_.optimizer, horizon);
    } catch (const std::invalid_argument& error) {
      throw ConfigError("config key 'schedulers[" + std::to_string(i) + "].hyperparameter': " + error.what());
    }
  }
}

void Trainer::wrap_for_distribution(Params& optimizer_config) {
  const std::string name = optimizer_config.string("name");
  const Json settings = optimizer_config.raw_object();
  auto make_local = [name, settings](std::vector<torch::optim::OptimizerParamGroup> groups) {
    Params params(settings, "optimizer");
    params.claim("name");
    params.claim("param_groups");  // the groups come with their options already
    return optimizer_registry().create(name, params, std::move(groups));
  };
  strategy_->wrap(state_, model_->units(), make_local);
  model_->set_unit_runner(strategy_->unit_runner());
  state_.shards = strategy_->shards();
  state_.parallel_mode = strategy_->mode();
  for (auto& part : strategy_->checkpoint_parts()) engine_->add_checkpoint_part(std::move(part));
}

}  // namespace basin

namespace basin {

void Trainer::export_model(const std::string& dir) {
  strategy_->with_whole_parameters([&] {
    if (state_.rank != 0) return;
    if (!lora_) return model_->export_trained(dir);
    // The adapter alone in PEFT's layout, and the model with it merged (state_dict.pt, hf/).
    write_peft_adapter(*model_, *lora_, base_weights_, (std::filesystem::path(dir) / "adapter").string());
    const MergedAdapters merged(*model_);
    model_->export_trained(dir);
  });
  // The tokenizer goes with the model, so that the text its ids stand for can be read back
  // (basin-generate) and transformers' AutoTokenizer finds it beside the weights.
  const std::string& tokenizer = data_.info.tokenizer;
  if (state_.rank != 0 || tokenizer.empty()) return;
  namespace fs = std::filesystem;
  fs::copy_file(tokenizer, fs::path(dir) / "tokenizer.json", fs::copy_options::overwrite_existing);
  if (fs::is_directory(fs::path(dir) / "hf")) {
    fs::copy_file(tokenizer, fs::path(dir) / "hf" / "tokenizer.json", fs::copy_options::overwrite_existing);
  }
}

std::vector<at::Tensor> Trainer::whole_parameters() { return strategy_->whole_parameters(); }

}  // namespace basin

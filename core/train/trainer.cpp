#include "basin/core/train/trainer.h"

#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/optim/optimizer.h>

#include "basin/core/algorithm.h"
#include "basin/core/callback.h"
#include "basin/core/checkpoint.h"
#include "basin/core/interrupt.h"
#include "basin/core/hyperparameters.h"
#include "basin/core/loss_scaler.h"
#include "basin/core/parallel/communicator.h"
#include "basin/core/parallel/data_parallel.h"
#include "basin/core/parallel/grad_norm.h"
#include "basin/core/parallel/rendezvous.h"
#include "basin/core/parallel/sharded_optimizer.h"
#include "basin/core/scheduler.h"
#include "basin/core/torch_compat.h"
#include "basin/core/train/autocast.h"
#include "basin/core/train/data_pipeline.h"
#include "basin/core/train/initial_weights.h"
#include "basin/core/train/model.h"
#include "basin/core/train/optimizers.h"

namespace basin {

namespace {

std::mutex& global_generator_mutex() {
  static std::mutex mutex;
  return mutex;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

c10::DeviceType parse_device(Params& root) {
  const std::string name = root.choice("device", "cpu", {"cpu", "cuda"});
  if (name == "cpu") return c10::DeviceType::CPU;
  if (!at::hasCUDA()) {
    throw ConfigError("config key 'device': \"cuda\" asked for, but this LibTorch has no CUDA or no GPU is visible");
  }
  return c10::DeviceType::CUDA;
}

}  // namespace

Json FitSummary::to_json() const {
  return Json{{"steps", steps},
              {"epochs", epochs},
              {"final_train_loss", final_train_loss},
              {"test_accuracy", test_accuracy},
              {"test_loss", test_loss},
              {"skipped_steps", skipped_steps},
              {"wall_seconds", wall_seconds},
              {"interrupted", interrupted}};
}

Trainer::Trainer(const Json& config, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<LoggerDestination>> loggers, std::shared_ptr<Communicator> communicator)
    : engine_(std::make_unique<Engine>(state_)) {
  build(config, std::move(callbacks), std::move(loggers), std::move(communicator));
}

Trainer::~Trainer() = default;

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
  grad_clip_norm_ = root.number("grad_clip_norm", 0.0, 0.0);
  state_.max_epochs = root.integer("max_epochs", 1, 1);
  state_.max_steps = root.integer("max_steps", 0, 0);
  state_.log_every = root.integer("log_every", 50, 1);
  Params nonfinite = root.object("nonfinite_loss");
  skip_nonfinite_ = nonfinite.boolean("skip", true);
  max_nonfinite_steps_ = nonfinite.integer("max_consecutive", 10, 0);
  nonfinite.finish();
  const std::optional<InitialWeights> initial_weights = initial_weights_from_config(root);
  Params data = root.object("data");
  Params model = root.object("model");
  Params optimizer = root.object("optimizer");
  const Json schedulers = root.array("schedulers");
  Params algorithms = root.object("algorithms");
  Params callback_configs = root.object("callbacks");
  Params parallel = root.object("parallel");
  root.finish();

  parallel_mode_ = parallel.choice("mode", "none", {"none", "ddp", "zero1"});
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(1000 * parallel.positive("timeout_seconds", 300)));
  bucket_bytes_ = static_cast<int64_t>(parallel.positive("bucket_mb", 25) * (1 << 20));
  parallel.finish();
  if (!communicator && parallel_mode_ != "none" && in_multi_process_job()) {
    communicator = connect_job(read_job_environment(), timeout, state_.device.is_cuda());
  } else if (!communicator && parallel_mode_ == "none" && in_multi_process_job()) {
    throw ConfigError("config key 'parallel.mode': this process is one rank of a " +
                      std::string(std::getenv("WORLD_SIZE")) + "-process job (WORLD_SIZE), so it must be \"ddp\" or "
                      "\"zero1\", not \"none\"");
  }
  if (!communicator && parallel_mode_ == "zero1") {
    // A one-rank group keeps single-process zero1 on the same code path.
    communicator = make_gloo_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, timeout);
  }
  state_.communicator = communicator;
  state_.rank = communicator ? communicator->rank() : 0;
  state_.world_size = communicator ? communicator->world_size() : 1;

  // LibTorch starts with one intra-op thread here; 0 means every core.
  at::set_num_threads(threads > 0 ? static_cast<int>(threads)
                                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
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
  add_label_noise(data_.train.mutable_targets(), label_noise, data_.info.num_classes,
                  static_cast<uint64_t>(state_.seed));
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
  model_ = model_registry().create(model.string("name"), model, data_.info);
  seeded.unlock();
  if (initial_weights) load_initial_weights(*model_, *initial_weights);
  model_->to(state_.device);
  state_.model = model_;
  state_.forward = [model = model_.get()](const at::Tensor& inputs) { return model->forward(inputs); };
  state_.optimizer = make_optimizer(optimizer, *model_);

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
    pass_aware->add_pass_hooks(pass_hooks());
  }

  // Schedulers attach to the optimizer as the algorithms left it (SAM's wrapper).
  const int64_t total_steps = state_.max_steps > 0 ? std::min(state_.max_steps, state_.max_epochs * state_.steps_per_epoch)
                                                   : state_.max_epochs * state_.steps_per_epoch;
  for (std::size_t i = 0; i < state_.schedulers.size(); ++i) {
    auto& scheduler = *state_.schedulers[i];
    const int64_t epochs = (total_steps + state_.steps_per_epoch - 1) / state_.steps_per_epoch;
    const int64_t horizon = scheduler.interval() == Scheduler::Interval::kStep ? total_steps : epochs;
    try {
      scheduler.attach(*state_.optimizer, horizon);
    } catch (const std::invalid_argument& error) {
      throw ConfigError("config key 'schedulers[" + std::to_string(i) + "].hyperparameter': " + error.what());
    }
  }
}

void Trainer::agree_on_stop() {
  // A callback or a signal that stops one rank stops every rank, after the
  // same step: a rank that left alone would leave the others waiting in
  // their next collective, and their checkpoints must be of one step.
  interrupted_ = interrupt_requested();
  if (!state_.communicator || state_.communicator->world_size() == 1) return;
  std::vector<at::Tensor> flags{at::tensor({state_.stop_requested ? 1.0f : 0.0f, interrupted_ ? 1.0f : 0.0f})
                                    .to(state_.device)};
  state_.communicator->all_reduce_max(flags);
  const at::Tensor agreed = flags.front().cpu();
  state_.stop_requested = agreed[0].item<float>() > 0;
  interrupted_ = agreed[1].item<float>() > 0;
}

bool Trainer::pass_loss_finite() {
  bool finite = !pass_loss_.defined() || at::isfinite(pass_loss_).all().item<bool>();
  if (state_.communicator && state_.communicator->world_size() > 1) {
    std::vector<at::Tensor> flag{at::full({1}, finite ? 0.0f : 1.0f).to(state_.device)};
    state_.communicator->all_reduce_max(flag);
    finite = flag.front().item<float>() == 0;
  }
  if (!finite) nonfinite_in_step_ = true;
  return finite;
}

void Trainer::wrap_for_distribution(Params& optimizer_config) {
  if (!state_.communicator) return;
  data_parallel_ = std::make_unique<DataParallel>(state_.communicator, bucket_bytes_);
  data_parallel_->broadcast_model(*model_);  // replicas start from rank 0's weights and buffers
  if (parallel_mode_ != "zero1") return;
  const std::string name = optimizer_config.string("name");
  const Json settings = optimizer_config.raw_object();
  auto make_local = [name, settings](std::vector<torch::optim::OptimizerParamGroup> groups) {
    Params params(settings, "optimizer");
    params.claim("name");
    params.claim("param_groups");  // the groups come with their options already
    return optimizer_registry().create(name, params, std::move(groups));
  };
  auto sharded = std::make_shared<ShardedOptimizer>(*state_.optimizer, make_local, state_.communicator);
  sharded_ = sharded.get();
  state_.optimizer = sharded;
}

double Trainer::current_lr() const {
  const auto& groups = state_.optimizer->param_groups();
  return groups.empty() ? 0.0 : groups.front().options().get_lr();
}

std::vector<at::Tensor> Trainer::parameters() const {
  std::vector<at::Tensor> params;
  std::unordered_set<const c10::TensorImpl*> seen;  // a tied weight counts once
  for (const auto& group : state_.optimizer->param_groups()) {
    for (const auto& p : group.params()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
    }
  }
  return params;
}

std::vector<at::Tensor> Trainer::gradients() const {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());  // undefined: the parameter took no part
  }
  return grads;
}

void Trainer::sync_gradients() {
  // ZeRO-1 needs each gradient on its owner alone, except in SAM's synced
  // ascent, which perturbs every parameter with the averaged gradient.
  if (sharded_ != nullptr && state_.pass != Pass::kAscent) {
    sharded_->reduce_gradients_to_owners();
  } else {
    data_parallel_->average_gradients(parameters());
  }
}

PassHooks Trainer::pass_hooks() {
  PassHooks hooks;
  hooks.gradients_finite = [this](Pass) {
    // A grad scaler checks the gradients; without one the loss is checked.
    if (state_.scaler) return state_.scaler->unscale_and_check(gradients(), state_.communicator.get());
    return !skip_nonfinite_ || pass_loss_finite();
  };
  hooks.before_base_step = [this] {
    if (grad_clip_norm_ <= 0) return;
    if (sharded_ == nullptr) {
      clip_grad_norm(gradients(), grad_clip_norm_);
      return;
    }
    std::vector<at::Tensor> grads, params;  // under ZeRO-1 the norm is taken over shards
    for (const auto& group : state_.optimizer->param_groups()) {
      for (const auto& p : group.params()) {
        if (p.grad().defined()) {
          grads.push_back(p.grad());
          params.push_back(p);
        }
      }
    }
    clip_grad_norm(grads, grad_clip_norm_, params, sharded_);
  };
  return hooks;
}

at::Tensor Trainer::closure() {
  const PassRequest& request = state_.request;
  if (request.backward) state_.optimizer->zero_grad();  // a forward alone leaves the gradients as they are
  const int64_t parts = request.parts;
  if (parts < 1 || request.part < 0 || request.part >= parts || state_.batch.size() % (parts * microbatches_) != 0) {
    throw ConfigError("batch part " + std::to_string(request.part) + " of " + std::to_string(parts) + ": the " +
                      std::to_string(state_.batch.size()) + "-sample batch must split into " + std::to_string(parts) +
                      " parts of " + std::to_string(microbatches_) + " equal microbatches (data.batch_size)");
  }
  // The part, then the selected samples of it, then their microbatches.
  const Batch picked = requested_samples(state_.batch, request);
  const int64_t samples = picked.size();
  if (samples == 0) throw std::logic_error("the optimizer asked for a pass on no sample");
  // A request may hold fewer samples than there are microbatches.
  const int64_t count = std::min(microbatches_, samples);
  const auto inputs = picked.inputs.chunk(count);
  const auto targets = picked.targets.chunk(count);
  const auto ids = picked.ids.defined() ? picked.ids.chunk(count) : std::vector<at::Tensor>(inputs.size());
  state_.microbatch_count = static_cast<int64_t>(inputs.size());
  at::Tensor total = at::zeros({}, at::TensorOptions(at::kFloat).device(state_.device));
  std::vector<at::Tensor> sample_losses;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    state_.microbatch = {inputs[i], targets[i], ids[i]};
    state_.microbatch_index = static_cast<int64_t>(i);
    // Each microbatch carries its share of the pass's mean loss, so the
    // microbatches give the gradient of one batch of all their samples
    // (k equal microbatches: 1/k each).
    state_.microbatch_divisor = static_cast<double>(samples) / static_cast<double>(inputs[i].size(0));
    {
      AutocastGuard autocast(state_.precision, state_.device.type());
      at::AutoGradMode grad_mode(request.backward);
      engine_->run(Event::BEFORE_FORWARD);
      state_.outputs = model_->forward(state_.microbatch.inputs);
      engine_->run(Event::AFTER_FORWARD);
      engine_->run(Event::BEFORE_LOSS);
      const at::Tensor logits = state_.outputs.to(at::kFloat);  // the loss is fp32
      if (request.per_sample_losses) {
        const at::Tensor each = at::cross_entropy_loss(logits, state_.microbatch.targets, {}, at::Reduction::None);
        sample_losses.push_back(each.detach());
        state_.loss = each.mean() / state_.microbatch_divisor;
      } else {
        state_.loss = at::cross_entropy_loss(logits, state_.microbatch.targets) / state_.microbatch_divisor;
      }
      engine_->run(Event::AFTER_LOSS);
    }
    total += state_.loss.detach();
    if (!request.backward) continue;
    engine_->run(Event::BEFORE_BACKWARD);
    // Under a grad scaler the backward runs on the scaled loss, in every pass.
    (state_.scaler ? state_.scaler->scale(state_.loss) : state_.loss).backward();
    engine_->run(Event::AFTER_BACKWARD);
  }
  // Microbatches accumulate locally; ranks sync once, unless this pass's
  // gradients must stay rank-local (SAM's ascent with sync_ascent false).
  if (request.backward && data_parallel_ && !state_.skip_gradient_sync) sync_gradients();
  pass_loss_ = total;
  return request.per_sample_losses ? at::cat(sample_losses) : total;
}

at::Tensor Trainer::optimizer_step() {
  if (dynamic_cast<PassAwareOptimizer*>(state_.optimizer.get()) != nullptr) {
    return state_.optimizer->step([this] { return closure(); });
  }
  at::Tensor loss;
  {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const PassHooks hooks = pass_hooks();
  if (hooks.gradients_finite(Pass::kPlain)) {
    hooks.before_base_step();
    state_.optimizer->step();
  } else {
    state_.optimizer->zero_grad();
  }
  return loss;
}

void Trainer::train_batch(const Batch& batch) {
  const auto start = Clock::now();
  state_.batch = {batch.inputs.to(state_.device, /*non_blocking=*/true), batch.targets.to(state_.device, true), batch.ids};
  engine_->run(Event::BATCH_START);
  engine_->run(Event::BEFORE_STEP);
  const double lr = current_lr();
  nonfinite_in_step_ = false;
  at::Tensor loss = optimizer_step();
  // Buffers (BatchNorm statistics) follow rank 0's after every step, so the
  // next step, evaluation and saved outputs do not depend on the rank.
  if (data_parallel_) data_parallel_->broadcast_buffers(*model_);
  state_.step_loss = loss.defined() ? loss.detach() : at::full({}, NAN);
  state_.pass = Pass::kPlain;
  bool skipped = false;
  if (state_.scaler) {
    // One scale update per step, from every pass's verdict; a skipped step
    // still counts as a step, so schedules keep to the step count.
    skipped = state_.scaler->step_found_inf();
    state_.scaler->update();
  } else {
    // Without a scaler a non-finite loss skips the step (weights untouched).
    skipped = nonfinite_in_step_;
  }
  if (skipped) ++state_.skipped_steps;
  nonfinite_streak_ = nonfinite_in_step_ ? nonfinite_streak_ + 1 : 0;
  // A run that keeps producing them stops before anything more is saved.
  if (nonfinite_in_step_ && max_nonfinite_steps_ > 0 && nonfinite_streak_ >= max_nonfinite_steps_) {
      throw std::runtime_error("the training loss was not finite in " + std::to_string(nonfinite_streak_) +
                               " consecutive steps (up to step " + std::to_string(state_.timestamp.step + 1) +
                               "), so training stops; every checkpoint already written is intact. Lower the "
                               "learning rate, clip gradients (grad_clip_norm) or raise "
                               "nonfinite_loss.max_consecutive");
  }
  engine_->run(Event::AFTER_STEP);
  for (auto& scheduler : state_.schedulers) {
    if (scheduler->interval() == Scheduler::Interval::kStep) scheduler->step(*state_.optimizer);
  }
  auto& ts = state_.timestamp;
  ++ts.step;
  ++ts.batch_in_epoch;
  ts.samples += batch.size();
  if (!skipped) {  // the epoch's mean loss is over the steps that trained
    epoch_loss_sum_ += state_.step_loss;
    ++epoch_steps_;
  }
  const double step_seconds = seconds_since(start);
  epoch_train_seconds_ += step_seconds;
  const bool last = ts.step == state_.max_steps || ts.batch_in_epoch == state_.steps_per_epoch;
  if (ts.step % state_.log_every == 0 || last) {
    engine_->logger().emit(Json{{"step", ts.step},
                                {"epoch", ts.epoch},
                                {"loss", state_.step_loss.item<double>()},
                                {"lr", lr},
                                {"step_seconds", step_seconds},
                                {"samples_per_second", static_cast<double>(batch.size()) / step_seconds},
                                {"skipped_steps", state_.skipped_steps}});
  }
  engine_->run(Event::BATCH_END);
}

EvalResult Trainer::evaluate() {
  engine_->run(Event::EVAL_START);
  at::NoGradGuard no_grad;
  model_->eval();
  const auto& test = data_.test;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < test.size(); begin += eval_batch_size_) {
    const Batch batch = test.slice(begin, std::min(begin + eval_batch_size_, test.size()));
    const at::Tensor targets = batch.targets.to(state_.device);
    at::Tensor logits;
    {
      AutocastGuard autocast(state_.precision, state_.device.type());
      logits = model_->forward(batch.inputs.to(state_.device));
    }
    logits = logits.to(at::kFloat);
    loss_sum += at::cross_entropy_loss(logits, targets, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(targets).sum().item<int64_t>();
  }
  model_->train();
  EvalResult result;
  result.samples = test.size();
  result.accuracy = test.size() > 0 ? static_cast<double>(correct) / static_cast<double>(test.size()) : 0.0;
  result.loss = test.size() > 0 ? loss_sum / static_cast<double>(test.size()) : 0.0;
  state_.test_accuracy = result.accuracy;
  state_.test_loss = result.loss;
  engine_->run(Event::EVAL_END);
  return result;
}

void Trainer::evaluate_and_log(FitSummary& summary) {
  const auto& ts = state_.timestamp;
  const EvalResult eval = evaluate();
  summary.final_train_loss = epoch_steps_ > 0 ? epoch_loss_sum_.item<double>() / static_cast<double>(epoch_steps_) : 0.0;
  engine_->logger().emit(Json{{"epoch", ts.epoch},
                              {"step", ts.step},
                              {"train_loss", summary.final_train_loss},
                              {"test_accuracy", eval.accuracy},
                              {"test_loss", eval.loss},
                              {"train_seconds", epoch_train_seconds_}});
}

void Trainer::end_epoch(FitSummary& summary) {
  evaluate_and_log(summary);
  // Per-epoch schedulers step before EPOCH_END, so a checkpoint written
  // there holds the closed epoch whole.
  for (auto& scheduler : state_.schedulers) {
    if (scheduler->interval() == Scheduler::Interval::kEpoch) scheduler->step(*state_.optimizer);
  }
  epoch_open_ = false;
  ++epochs_completed_;
  engine_->run(Event::EPOCH_END);
  agree_on_stop();
}

FitSummary Trainer::fit() {
  const auto start = Clock::now();
  FitSummary summary;
  auto& ts = state_.timestamp;
  // Random draws during training (dropout, ...) depend only on the seed, not
  // on what ran in this process since construction; each rank draws its own,
  // reproducibly, in a process of its own (ranks as threads share the one
  // generator while they train). A resumed run continues the generators it saved.
  if (!resumed_) {
    std::lock_guard<std::mutex> seeding(global_generator_mutex());  // not inside another trainer's building
    at::manual_seed(static_cast<uint64_t>(state_.seed) + 0x5EED + static_cast<uint64_t>(state_.rank));
  }
  model_->train();
  engine_->run(Event::FIT_START);
  interrupted_ = false;
  bool done = state_.stop_requested;
  while (ts.epoch < state_.max_epochs && !done) {
    if (!epoch_open_) {  // a resumed run may start inside an epoch
      ts.batch_in_epoch = 0;
      epoch_loss_sum_ = at::zeros({}, at::TensorOptions(at::kFloat).device(state_.device));
      epoch_train_seconds_ = 0;
      epoch_steps_ = 0;
      epoch_open_ = true;
      engine_->run(Event::EPOCH_START);
    }
    // Every rank draws the same epoch order; step b's global batch is split
    // into one contiguous slice per rank (a disjoint, deterministic shard).
    // The order depends on (seed, epoch) alone, so a resumed epoch continues
    // with the batches it would have had.
    const auto order = epoch_order(data_.train.size(), static_cast<uint64_t>(state_.seed), ts.epoch, shuffle_);
    while (ts.batch_in_epoch < state_.steps_per_epoch) {
      if (state_.max_steps > 0 && ts.step >= state_.max_steps) {
        done = true;
        break;
      }
      const int64_t b = ts.batch_in_epoch;
      const auto first = order.begin() + (b * state_.world_size + state_.rank) * batch_size_;
      train_batch(data_.train.gather(std::vector<int64_t>(first, first + batch_size_)));
      agree_on_stop();
      if (interrupted_) break;
      if ((state_.max_steps > 0 && ts.step >= state_.max_steps) || state_.stop_requested) {
        done = true;
        break;
      }
    }
    summary.epochs = ts.epoch + 1;
    if (interrupted_) break;  // the epoch stays open: the resumed run finishes it
    if (ts.batch_in_epoch < state_.steps_per_epoch) {
      // Stopped inside the epoch (max_steps, a callback): evaluate, but keep
      // the epoch open, so a run extended from here continues it.
      evaluate_and_log(summary);
      break;
    }
    end_epoch(summary);
    ++ts.epoch;
    done = done || state_.stop_requested || interrupted_;
  }
  engine_->run(Event::FIT_END);
  summary.steps = ts.step;
  summary.test_accuracy = state_.test_accuracy;
  summary.test_loss = state_.test_loss;
  summary.skipped_steps = state_.skipped_steps;
  summary.interrupted = interrupted_;
  summary.epochs = std::max(summary.epochs, epochs_completed_);
  summary.wall_seconds = seconds_since(start);
  return summary;
}

}  // namespace basin

// basin-train: trains a model from a JSON config and writes the run's
// metrics.jsonl, summary.json, resolved config.json and checkpoints into a
// run directory; --resume continues a run from its checkpoint.

#include <cmath>
#include <cstdio>
#include <iostream>

#include <malloc.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/callbacks/checkpoint.h"
#include "basin/callbacks/metrics_file.h"
#include "basin/callbacks/progress.h"
#include "basin/core/base/blas.h"
#include "basin/core/base/checkpoint_error.h"
#include "basin/core/base/console.h"
#include "basin/core/base/interrupt.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_file.h"
#include "basin/core/engine/engine.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/low_precision_speed.h"
#include "basin/core/train/trainer.h"

namespace {

constexpr int kBadInput = 2;

// FNV-1a over the bytes of every parameter and buffer: equal digests mean
// bit-equal models.
uint64_t weights_digest(basin::Trainer& trainer) {
  uint64_t hash = 14695981039346656037ULL;
  auto tensors = trainer.whole_parameters();  // gathered under zero3: every rank calls it
  for (const auto& b : trainer.model().buffers()) tensors.push_back(b);
  for (const auto& p : tensors) {
    const at::Tensor bytes = p.detach().contiguous().cpu();
    const auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
    for (int64_t i = 0; i < bytes.numel() * static_cast<int64_t>(bytes.element_size()); ++i) {
      hash = (hash ^ data[i]) * 1099511628211ULL;
    }
  }
  return hash;
}

std::string hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The default checkpoint callback every basin-train run gets, so that any run
// can be resumed; null when the config has its own (the trainer builds that).
std::shared_ptr<basin::CheckpointSaver> default_checkpoint_saver(const basin::Json& config) {
  const auto callbacks = config.find("callbacks");
  if (callbacks != config.end() && callbacks->is_object() && callbacks->contains("checkpoint")) return nullptr;
  basin::Params defaults(basin::Json::object(), "callbacks.checkpoint");
  return std::make_shared<basin::CheckpointSaver>(defaults);
}

// What LibTorch computes with, said once the config has passed (bad input
// stays one line) and before training. On netlib's reference BLAS (a fresh
// Debian machine's libblas.so.3) the matrix products run about 20x slower:
// said loudly, with the fix, on each node; and so is a low precision the CPU
// computes over twice as slowly as fp32 (bf16 without bf16 instructions).
void say_what_computes(const basin::JobEnvironment& job, const basin::State& state) {
  const basin::BlasInfo blas = basin::blas_info();
  if (job.rank == 0) {
    const int threads = at::get_num_threads();
    basin::console::info(std::string("LibTorch ") + basin::compat::torch_version() + " on " + blas.describe() + ", " +
                         std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
                         (job.world_size > 1 ? " per rank" : ""));
  }
  if (blas.reference && job.local_rank == 0) {
    basin::console::warn("WARNING: LibTorch's matrix products run on netlib's REFERENCE BLAS (" + blas.library +
                         "), about 20x slower than an optimized BLAS. Fix: " + basin::kInstallOptimizedBlas);
  }
  if (job.local_rank == 0) {
    const std::string slow = basin::low_precision_speed_warning(state.precision, state.device);
    if (!slow.empty()) basin::console::warn(slow);
  }
}

}  // namespace

int main(int argc, char** argv) {
  basin::keep_freed_memory_for_reuse();
  CLI::App app{"basin-train: train a model with basin's event engine from a JSON config"};
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;
  bool overwrite = false;
  std::string resume;
  bool allow_config_change = false;
  bool reshard = false;
  std::string log_level = "info";
  bool list_algorithms = false;
  app.add_option("--config", config_path,
                 "JSON config file (see examples/configs/); with --resume, default: the checkpoint's config");
  app.add_option("--set", overrides,
                 "Override a config key: KEY=VALUE with a dotted key and a JSON value, e.g. "
                 "--set optimizer.lr=0.05 --set model.name=cnn (repeatable; bare words are strings)");
  app.add_option("--run-dir", run_dir, "Directory for metrics.jsonl, summary.json and config.json "
                                       "(default: runs/<config name>-<date>-<time>)");
  app.add_flag("--overwrite", overwrite, "Allow a --run-dir that already holds a run");
  app.add_option("--resume", resume,
                 "Continue a run: 'latest' (the newest intact checkpoint in --run-dir) or a checkpoint file");
  app.add_flag("--allow-config-change", allow_config_change,
               "Resume even where the config or the number of ranks differs from the checkpoint's in a way "
               "that makes it a different run (model, optimizer, algorithms, data, seed)");
  app.add_flag("--reshard", reshard,
               "Resume at another number of ranks or under another parallel.mode: the checkpoint's weights, "
               "optimizer and algorithm state are cut anew for this job's ranks, and training continues at the "
               "sample it stopped at, each step taking world size x batch_size samples");
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error (debug shows the engine trace)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_flag("--list-algorithms", list_algorithms,
               "Print the registered algorithms as JSON: every one, and the SAM family's optimizer-side ones");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kBadInput;
  }
  if (list_algorithms) {
    std::cout << basin::Json{{"algorithms", basin::algorithm_registry().names()},
                             {"sam_family", basin::sam_family_registry().names()}}
                     .dump()
              << std::endl;
    return 0;
  }
  basin::console::set_level(log_level);
  basin::console::set_pattern("[%H:%M:%S] %v");
  if (config_path.empty() && resume.empty()) {
    std::cerr << "basin-train: --config is required (or --resume, which takes the checkpoint's)" << std::endl;
    return kBadInput;
  }
  if (resume == "latest" && run_dir.empty()) {
    std::cerr << "basin-train: --resume latest needs --run-dir, the run to continue" << std::endl;
    return kBadInput;
  }
  // SIGINT/SIGTERM: finish the step, checkpoint, exit with kExitInterrupted.
  basin::install_interrupt_handlers();

  try {
    // In a multi-process job (basin-run, torchrun, a cluster launcher) rank 0
    // alone writes the run directory and shows progress.
    const basin::JobEnvironment job = basin::read_job_environment();
    const bool writer = job.rank == 0;
    basin::Json config;
    if (!config_path.empty()) config = basin::load_config_file(config_path);
    // --resume's checkpoint, or a restarted job's newest (its restarts reshard when it is elastic).
    basin::RunStart start = basin::choose_run_start(basin::RunDirectory(run_dir), config, resume);
    if (start.resumes && config_path.empty()) config = basin::checkpoint_config(start.point);
    reshard = reshard || start.reshard;
    if (!start.note.empty() && writer) basin::console::info(start.note);
    for (const auto& assignment : overrides) basin::apply_override(config, assignment);
    basin::RunDirectory run =
        run_dir.empty() ? basin::RunDirectory::dated(config_path.empty() ? "resumed" : config_path) : basin::RunDirectory(run_dir);
    if (writer && !start.resumes) run.check_unused(overwrite || start.reuses_directory);

    std::vector<std::shared_ptr<basin::Callback>> callbacks;
    if (auto saver = default_checkpoint_saver(config)) callbacks.push_back(saver);  // on every rank: saving is collective
    std::vector<std::shared_ptr<basin::LoggerDestination>> loggers;
    if (writer) {
      callbacks.push_back(std::make_shared<basin::Progress>(0, isatty(fileno(stderr)) != 0));
      loggers.push_back(std::make_shared<basin::MetricsFile>(run.file(basin::RunDirectory::kMetrics)));
    }
    basin::Trainer trainer(config, callbacks, loggers);  // validates everything, writes nothing
    say_what_computes(job, trainer.state());
    // Rank 0's folder on every rank: without --run-dir each rank dates its own.
    if (trainer.state().communicator) run = run.agreed(*trainer.state().communicator, trainer.state().device);
    trainer.state().run_dir = run.path();

    // Before anything is written: a refused resume leaves the run directory as it was.
    if ((start.resumes || start.restarts > 0) && trainer.state().communicator) {
      basin::check_ranks_resume_the_same(*trainer.state().communicator, trainer.state().device, start.point.path);
    }
    if (writer) {
      run.write_json(basin::RunDirectory::kConfig, config);
      // What sizes the model, so the trained model is rebuilt without the data (basin-generate).
      const basin::DatasetInfo& info = trainer.data().info;
      run.write_json(basin::RunDirectory::kDataInfo, basin::Json{{"name", config["data"].value("name", std::string())},
                                                                 {"input_shape", info.input_shape},
                                                                 {"num_classes", info.num_classes}});
      basin::console::info("run directory: " + run.path());
    }
    if (start.resumes) {
      // A zero3 checkpoint is a manifest: each rank of a zero3 job of its size
      // resumes from its own file beside it; any other job joins the files.
      // A rank that cannot read its own file stops every rank at once (read_on_every_rank).
      int64_t saved_world = 0;
      {
        const basin::StateDict checkpoint = basin::read_on_every_rank(
            trainer.state().communicator.get(), trainer.state().device, [&] {
              return basin::checkpoint_for_rank(start.point.path, start.point.checkpoint, job.world_size,
                                                trainer.strategy().rows_layout(), reshard || allow_config_change);
            });
        start.point.checkpoint = basin::new_state_dict();  // the rank's own part is all this rank keeps
        saved_world = basin::saved_world_size(checkpoint);
        trainer.resume(checkpoint, basin::ResumeOptions{allow_config_change, reshard});
      }
      // The checkpoint's tensors are copied into the run and freed: hand their pages back to the system, so
      // the heap does not keep them beside what training allocates (measured: 680 MiB on a GPT-2 medium).
      malloc_trim(0);
      if (writer) {
        const std::string resharded = saved_world == job.world_size ? "" : ", resharded from " +
                                      std::to_string(saved_world) + " ranks to " + std::to_string(job.world_size);
        basin::console::info("resumed from " + start.point.path + " at step " +
                             std::to_string(trainer.state().timestamp.step) + " (epoch " +
                             std::to_string(trainer.state().timestamp.epoch) + ")" + resharded);
      }
    }
    const basin::FitSummary summary = trainer.fit();
    if (job.world_size > 1) {
      basin::console::info("rank " + std::to_string(job.rank) + "/" + std::to_string(job.world_size) +
                       ": final weights digest " + hex16(weights_digest(trainer)));
    }
    if (summary.interrupted) {
      std::string written;
      for (const auto& callback : trainer.engine().callbacks()) {
        if (auto saver = std::dynamic_pointer_cast<basin::CheckpointSaver>(callback)) written = saver->last_written();
      }
      if (writer) {
        std::cerr << "basin-train: stopped by " << (basin::interrupt_requested() ? basin::interrupt_signal_name() : "a signal on another rank")
                  << " after step " << summary.steps << "; checkpoint " << written << "; continue with: basin-train --run-dir "
                  << run.path() << " --resume latest" << std::endl;
      }
      return basin::kExitInterrupted;
    }
    if (writer) {
      basin::Json written = summary.to_json();
      written["restarts"] = start.restarts;  // by the launcher, before this run finished
      run.write_json(basin::RunDirectory::kSummary, written);
    }
    // The trained model for Python: state_dict.pt, and model.pt for a TorchScript model (collective under zero3).
    trainer.export_model(run.path());
    if (!writer) return 0;
    // A model whose forward needs the targets gives no logits to measure an accuracy with: its loss says it.
    if (!std::isnan(summary.test_perplexity)) {
      std::cout << "test loss " << summary.test_loss << " (perplexity " << summary.test_perplexity
                << "), next-token accuracy " << summary.test_accuracy;
    } else if (std::isnan(summary.test_accuracy)) {
      std::cout << "test loss " << summary.test_loss;
    } else {
      std::cout << "test accuracy " << summary.test_accuracy;
    }
    std::cout << " after " << summary.steps << " steps ("
              << summary.epochs << " epochs, " << summary.wall_seconds << " s); run directory " << run.path()
              << std::endl;
    return 0;
  } catch (const basin::ConfigError& error) {
    std::cerr << "basin-train: " << error.what() << std::endl;
    return kBadInput;
  } catch (const basin::CheckpointError& error) {
    std::cerr << "basin-train: " << error.what() << std::endl;
    return kBadInput;
  } catch (const c10::Error& error) {
    // LibTorch's own backtrace means nothing to a user: its message alone.
    std::cerr << "basin-train: error: " << error.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "basin-train: error: " << error.what() << std::endl;
    return 1;
  }
}

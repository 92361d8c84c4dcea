// basin-train: trains a model from a JSON config and writes the run's
// metrics.jsonl, summary.json, resolved config.json and checkpoints into a
// run directory; --resume continues a run from its checkpoint.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/callbacks/checkpoint.h"
#include "basin/callbacks/metrics_file.h"
#include "basin/callbacks/progress.h"
#include "basin/core/base/blas.h"
#include "basin/core/base/console.h"
#include "basin/core/base/interrupt.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/engine.h"
#include "basin/core/parallel/communication/byte_collectives.h"
#include "basin/core/parallel/communication/communicator.h"
#include "basin/core/parallel/communication/rendezvous.h"
#include "basin/core/train/model.h"
#include "basin/core/train/trainer.h"

namespace fs = std::filesystem;

namespace {

constexpr int kBadInput = 2;

std::string default_run_dir(const std::string& config_path) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + fs::path(config_path).stem().string() + "-" + stamp;
}

// A run directory that already holds a run is never overwritten by accident.
void check_run_dir(const fs::path& dir, bool overwrite) {
  if (overwrite || !fs::exists(dir)) return;
  if (!fs::is_directory(dir)) throw basin::ConfigError("--run-dir '" + dir.string() + "' exists and is not a directory");
  for (const char* name : {"metrics.jsonl", "summary.json"}) {
    if (fs::exists(dir / name)) {
      throw basin::ConfigError("--run-dir '" + dir.string() + "' already holds a run (" + name +
                               "); choose another directory or pass --overwrite");
    }
  }
}

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

void write_json(const fs::path& path, const basin::Json& value) {
  std::ofstream out(path);
  out << value.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write '" + path.string() + "'");
}

// The config's "callbacks.checkpoint" settings; null when it has none.
const basin::Json* checkpoint_settings(const basin::Json& config) {
  const auto callbacks = config.find("callbacks");
  if (callbacks == config.end() || !callbacks->is_object()) return nullptr;
  const auto settings = callbacks->find("checkpoint");
  return settings == callbacks->end() ? nullptr : &*settings;
}

// The default checkpoint callback every basin-train run gets, so that any run
// can be resumed; null when the config has its own (the trainer builds that).
std::shared_ptr<basin::CheckpointSaver> default_checkpoint_saver(const basin::Json& config) {
  if (checkpoint_settings(config) != nullptr) return nullptr;
  basin::Params defaults(basin::Json::object(), "callbacks.checkpoint");
  return std::make_shared<basin::CheckpointSaver>(defaults);
}

// Where --resume latest looks: the folder the run's checkpoint callback writes to.
std::string checkpoint_folder(const basin::Json& config, const std::string& run_dir) {
  const basin::Json* settings = checkpoint_settings(config);
  basin::Params params(settings != nullptr ? *settings : basin::Json::object(), "callbacks.checkpoint");
  return basin::CheckpointSaver(params).folder(run_dir);
}

// The checkpoint --resume names: a file, or the newest that reads back in the run's folder.
basin::StateDict read_resume_checkpoint(const std::string& resume, const std::string& folder, std::string& path) {
  if (resume != "latest") {
    path = resume;
    return basin::read_checkpoint_file(resume);
  }
  basin::LatestCheckpoint latest = basin::read_latest_checkpoint(folder);
  for (const auto& reason : latest.rejected) {
    basin::console::warn("skipping a damaged checkpoint: " + reason);
  }
  if (!latest.rejected.empty()) basin::console::warn("falling back to the newest intact checkpoint, " + latest.path);
  path = latest.path;
  return latest.checkpoint;
}

// How many times the job's launcher restarted it (basin-run --max-restarts,
// torchrun --max-restarts): TORCHELASTIC_RESTART_COUNT, as torchrun sets it.
int restart_count() {
  const char* value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return value != nullptr ? std::max(0, std::atoi(value)) : 0;
}

// Every rank must resume from the same checkpoint: a node that does not see
// the run directory's newest (no shared file system, a lagging mount) would
// train from another step. Compared by file name (mounts may differ); a
// disagreement is refused on every rank, naming the files.
void check_ranks_resume_the_same(basin::Trainer& trainer, const std::string& path) {
  const auto& communicator = trainer.state().communicator;
  if (!communicator || communicator->world_size() < 2) return;
  const std::string mine = path.empty() ? "" : fs::path(path).filename().string();
  const auto all = basin::gather_bytes(*communicator, mine, 0, trainer.state().device);
  std::string disagreement;
  if (communicator->rank() == 0) {
    for (std::size_t r = 1; r < all.size(); ++r) {
      if (all[r] == mine) continue;
      disagreement += std::string(disagreement.empty() ? "" : "; ") + "rank " + std::to_string(r) + " sees " +
                      (all[r].empty() ? "no checkpoint" : all[r]);
    }
    if (!disagreement.empty()) {
      disagreement = "the ranks do not see the same newest checkpoint: rank 0 resumes from " +
                     (path.empty() ? std::string("none") : path) + ", " + disagreement +
                     ". Every node needs the run directory on a file system they all see";
    }
  }
  disagreement = basin::broadcast_bytes(*communicator, disagreement, 0, trainer.state().device);
  if (!disagreement.empty()) throw basin::CheckpointError(disagreement);
}

// What LibTorch computes with, said once the config has passed (bad input
// stays one line) and before training. On netlib's reference BLAS (a fresh
// Debian machine's libblas.so.3) the matrix products run about 20x slower:
// said loudly, with the fix, on each node.
void say_what_computes(const basin::JobEnvironment& job) {
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
}

// The ranks that wrote a checkpoint (1 for one without the entry).
int64_t saved_world_size(const basin::StateDict& checkpoint) {
  if (!checkpoint.contains("basin") || !checkpoint.at("basin").isGenericDict()) return 1;
  const auto meta = checkpoint.at("basin").toGenericDict();
  return meta.contains("world_size") && meta.at("world_size").isInt() ? meta.at("world_size").toInt() : 1;
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
    basin::StateDict checkpoint = basin::new_state_dict();
    std::string checkpoint_path;
    if (!config_path.empty()) config = basin::load_config_file(config_path);
    const int restarts = restart_count();
    // An elastic job (basin-run --nnodes MIN:MAX) may come back on fewer nodes: its restarts reshard.
    const char* elastic = std::getenv("BASIN_ELASTIC");
    if (restarts > 0 && elastic != nullptr && *elastic != '\0') reshard = true;
    if (restarts > 0 && resume.empty()) {
      // A restarted job continues from its newest intact checkpoint, or starts again if it wrote none.
      if (run_dir.empty()) throw basin::ConfigError("a restarted job (TORCHELASTIC_RESTART_COUNT " +
                                                    std::to_string(restarts) + ") needs --run-dir, where its checkpoints are");
      try {
        checkpoint = read_resume_checkpoint("latest", checkpoint_folder(config, run_dir), checkpoint_path);
        resume = "latest";
      } catch (const basin::CheckpointError& none) {
        if (writer) basin::console::info("restart " + std::to_string(restarts) + ": " + none.what() + "; training from the start");
        overwrite = true;
      }
    } else if (!resume.empty()) {
      checkpoint = read_resume_checkpoint(resume, checkpoint_folder(config, run_dir), checkpoint_path);
      if (config_path.empty()) {
        if (!checkpoint.contains("config") || !checkpoint.at("config").isString()) {
          throw basin::CheckpointError("checkpoint '" + checkpoint_path + "' holds no config; pass --config");
        }
        config = basin::parse_config_text(checkpoint.at("config").toStringRef(), checkpoint_path + " (its config)");
      }
    }
    for (const auto& assignment : overrides) basin::apply_override(config, assignment);
    if (run_dir.empty()) run_dir = default_run_dir(config_path.empty() ? "resumed" : config_path);
    if (writer && resume.empty()) check_run_dir(run_dir, overwrite);

    std::vector<std::shared_ptr<basin::Callback>> callbacks;
    if (auto saver = default_checkpoint_saver(config)) callbacks.push_back(saver);  // on every rank: saving is collective
    std::vector<std::shared_ptr<basin::LoggerDestination>> loggers;
    if (writer) {
      callbacks.push_back(std::make_shared<basin::Progress>(0, isatty(fileno(stderr)) != 0));
      loggers.push_back(std::make_shared<basin::MetricsFile>((fs::path(run_dir) / "metrics.jsonl").string()));
    }
    basin::Trainer trainer(config, callbacks, loggers);  // validates everything, writes nothing
    say_what_computes(job);
    trainer.state().run_dir = run_dir;

    // Before anything is written: a refused resume leaves the run directory as it was.
    if (!resume.empty() || restarts > 0) check_ranks_resume_the_same(trainer, checkpoint_path);
    if (writer) {
      fs::create_directories(run_dir);
      write_json(fs::path(run_dir) / "config.json", config);
      // What sizes the model, so the trained model is rebuilt without the data (basin-generate).
      const basin::DatasetInfo& info = trainer.data().info;
      write_json(fs::path(run_dir) / "data_info.json",
                 basin::Json{{"name", config["data"].value("name", std::string())},
                             {"input_shape", info.input_shape},
                             {"num_classes", info.num_classes}});
      basin::console::info("run directory: " + run_dir);
    }
    if (!resume.empty()) {
      // A zero3 checkpoint is a manifest: each rank of a zero3 job of its size
      // resumes from its own file beside it; any other job joins the files.
      checkpoint = basin::checkpoint_for_rank(checkpoint_path, checkpoint, job.rank, job.world_size,
                                              trainer.state().parameters_sharded, reshard || allow_config_change);
      const int64_t saved_world = saved_world_size(checkpoint);
      trainer.resume(checkpoint, basin::ResumeOptions{allow_config_change, reshard});
      checkpoint = basin::new_state_dict();  // its tensors are in the run now
      if (writer) {
        const std::string resharded = saved_world == job.world_size ? "" : ", resharded from " +
                                      std::to_string(saved_world) + " ranks to " + std::to_string(job.world_size);
        basin::console::info("resumed from " + checkpoint_path + " at step " +
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
                  << run_dir << " --resume latest" << std::endl;
      }
      return basin::kExitInterrupted;
    }
    if (writer) {
      basin::Json written = summary.to_json();
      written["restarts"] = restarts;  // by the launcher, before this run finished
      write_json(fs::path(run_dir) / "summary.json", written);
    }
    // The trained model for Python: state_dict.pt, and model.pt for a TorchScript model (collective under zero3).
    trainer.export_model(run_dir);
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
              << summary.epochs << " epochs, " << summary.wall_seconds << " s); run directory " << run_dir
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

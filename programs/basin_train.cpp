// basin-train: trains a model from a JSON config and writes the run's
// metrics.jsonl, summary.json, resolved config.json and checkpoints into a
// run directory; --resume continues a run from its checkpoint.

#include <iostream>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/callbacks/checkpoint.h"
#include "basin/callbacks/metrics_file.h"
#include "basin/callbacks/progress.h"
#include "basin/core/base/console.h"
#include "basin/core/base/interrupt.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_file.h"
#include "basin/core/config/program_error.h"
#include "basin/core/train/trainer.h"
#include "basin/core/train/what_computes.h"

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
    return code == 0 ? 0 : basin::kExitBadInput;
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
    return basin::kExitBadInput;
  }
  if (resume == "latest" && run_dir.empty()) {
    std::cerr << "basin-train: --resume latest needs --run-dir, the run to continue" << std::endl;
    return basin::kExitBadInput;
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
    if (auto saver = basin::default_checkpoint_saver(config)) callbacks.push_back(saver);  // on every rank: saving is collective
    std::vector<std::shared_ptr<basin::LoggerDestination>> loggers;
    if (writer) {
      callbacks.push_back(std::make_shared<basin::Progress>(0, isatty(fileno(stderr)) != 0));
      loggers.push_back(std::make_shared<basin::MetricsFile>(run.file(basin::RunDirectory::kMetrics)));
    }
    basin::Trainer trainer(config, callbacks, loggers);  // validates everything, writes nothing
    basin::say_what_computes(job, trainer.state());
    // Rank 0's folder on every rank: without --run-dir each rank dates its own.
    if (trainer.state().communicator) run = run.agreed(*trainer.state().communicator, trainer.state().device);
    trainer.state().run_dir = run.path();

    // Before anything is written: a refused resume leaves the run directory as it was.
    if ((start.resumes || start.restarts > 0) && trainer.state().communicator) {
      basin::check_ranks_resume_the_same(*trainer.state().communicator, trainer.state().device, start.point.path);
    }
    if (writer) {
      run.write_start(trainer.config(), trainer.data().info);
      basin::console::info("run directory: " + run.path());
    }
    if (start.resumes) trainer.resume_from(start.point, basin::ResumeOptions{allow_config_change, reshard});
    const basin::FitSummary summary = trainer.fit();
    if (job.world_size > 1) {
      basin::console::info("rank " + std::to_string(job.rank) + "/" + std::to_string(job.world_size) +
                           ": final weights digest " + trainer.weights_digest());
    }
    if (summary.interrupted) {
      if (writer) {
        std::cerr << "basin-train: stopped by " << (basin::interrupt_requested() ? basin::interrupt_signal_name() : "a signal on another rank")
                  << " after step " << summary.steps << "; checkpoint " << basin::last_checkpoint_written(trainer.engine())
                  << "; continue with: basin-train --run-dir " << run.path() << " --resume latest" << std::endl;
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
    if (writer) std::cout << summary.result_line(run.path()) << std::endl;
    return 0;
  } catch (...) {
    return basin::report_error("basin-train", std::current_exception());
  }
}

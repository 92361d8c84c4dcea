#include "basin/core/checkpoint/run_directory.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/base/console.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/communication/byte_collectives.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/config/config_file.h"
#include "basin/core/data/dataset.h"

namespace fs = std::filesystem;

namespace basin {

RunDirectory RunDirectory::dated(const std::string& config_path) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return RunDirectory("runs/" + fs::path(config_path).stem().string() + "-" + stamp);
}

RunDirectory RunDirectory::agreed(Communicator& communicator, c10::Device device) const {
  if (communicator.world_size() < 2) return *this;
  return RunDirectory(broadcast_bytes(communicator, path_, 0, device));
}

std::string RunDirectory::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

std::string RunDirectory::resolve(const std::string& dir) const {
  const fs::path folder(dir);
  return (folder.is_absolute() || path_.empty() ? folder : fs::path(path_) / folder).string();
}

std::string RunDirectory::checkpoint_folder(const Json& config) const {
  const auto callbacks = config.find("callbacks");
  if (callbacks == config.end() || !callbacks->is_object() || !callbacks->contains("checkpoint")) {
    return resolve(kCheckpoints);
  }
  // Read as the callback reads it (the same refusals, naming the key); its other keys are the callback's to check.
  Params settings(callbacks->at("checkpoint"), "callbacks.checkpoint");
  return resolve(checkpoint_dir(settings));
}

std::string RunDirectory::checkpoint_dir(Params& checkpoint_settings) {
  const std::string dir = checkpoint_settings.string("dir", kCheckpoints);
  if (dir.empty()) checkpoint_settings.fail("dir", "a folder name", Json(dir));
  return dir;
}

void RunDirectory::check_unused(bool overwrite) const {
  const fs::path dir(path_);
  if (overwrite || !fs::exists(dir)) return;
  if (!fs::is_directory(dir)) throw ConfigError("--run-dir '" + path_ + "' exists and is not a directory");
  for (const char* name : {kMetrics, kSummary}) {
    if (fs::exists(dir / name)) {
      throw ConfigError("--run-dir '" + path_ + "' already holds a run (" + name +
                        "); choose another directory or pass --overwrite");
    }
  }
}

void RunDirectory::write_start(const Json& config, const DatasetInfo& info) const {
  write_json(kConfig, config);
  const std::string data = config.contains("data") ? config.at("data").value("name", std::string()) : "";
  write_json(kDataInfo, Json{{"name", data},
                             {"input_shape", info.input_shape},
                             {"num_classes", info.num_classes}});
}

void RunDirectory::write_json(const std::string& name, const Json& value) const {
  fs::create_directories(path_);
  const std::string path = file(name);
  {
    std::ofstream out(path + ".tmp");
    out << value.dump(2) << '\n';
    if (!out) throw std::runtime_error("cannot write '" + path + "'");
  }
  fs::rename(path + ".tmp", path);
}

ResumePoint find_resume_point(const std::string& resume, const std::string& folder) {
  if (resume != "latest") return {resume, read_checkpoint_file(resume)};
  LatestCheckpoint latest = read_latest_checkpoint(folder);
  for (const auto& reason : latest.rejected) console::warn("skipping a damaged checkpoint: " + reason);
  if (!latest.rejected.empty()) console::warn("falling back to the newest intact checkpoint, " + latest.path);
  return {latest.path, latest.checkpoint};
}

Json checkpoint_config(const ResumePoint& point) {
  if (!point.checkpoint.contains("config") || !point.checkpoint.at("config").isString()) {
    throw CheckpointError("checkpoint '" + point.path + "' holds no config; pass --config");
  }
  return parse_config_text(point.checkpoint.at("config").toStringRef(), point.path + " (its config)");
}

RunStart choose_run_start(const RunDirectory& run, const Json& config, const std::string& resume) {
  RunStart start;
  start.restarts = restart_count();
  start.reshard = start.restarts > 0 && restarts_reshard();
  if (!resume.empty()) {
    start.point = find_resume_point(resume, run.checkpoint_folder(config));
    start.resumes = true;
  } else if (start.restarts > 0) {
    if (run.path().empty()) {
      throw ConfigError("a restarted job (TORCHELASTIC_RESTART_COUNT " + std::to_string(start.restarts) +
                        ") needs --run-dir, where its checkpoints are");
    }
    try {
      start.point = find_resume_point("latest", run.checkpoint_folder(config));
      start.resumes = true;
    } catch (const CheckpointError& none) {
      start.reuses_directory = true;
      start.note = "restart " + std::to_string(start.restarts) + ": " + none.what() + "; training from the start";
    }
  }
  return start;
}

int restart_count() {
  const char* value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return value != nullptr ? std::max(0, std::atoi(value)) : 0;
}

bool restarts_reshard() {
  const char* elastic = std::getenv("BASIN_ELASTIC");
  return elastic != nullptr && *elastic != '\0';
}

void check_ranks_resume_the_same(Communicator& communicator, c10::Device device, const std::string& path) {
  if (communicator.world_size() < 2) return;
  const std::string mine = path.empty() ? "" : fs::path(path).filename().string();
  const auto all = gather_bytes(communicator, mine, 0, device);
  std::string disagreement;
  if (communicator.rank() == 0) {
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
  disagreement = broadcast_bytes(communicator, disagreement, 0, device);
  if (!disagreement.empty()) throw CheckpointError(disagreement);
}

StateDict read_on_every_rank(Communicator* communicator, c10::Device device, const std::function<StateDict()>& read) {
  StateDict read_here = new_state_dict();
  std::string failure;  // this rank's, or empty
  try {
    read_here = read();
  } catch (const std::exception& error) {  // CheckpointError, or LibTorch's unpickler giving up
    if (communicator == nullptr || communicator->world_size() < 2) throw;
    failure = error.what();
  }
  if (communicator == nullptr || communicator->world_size() < 2) return read_here;
  // One round of collectives, whatever happened: a rank that failed alone
  // would otherwise leave the others waiting in the next collective until
  // parallel.timeout_seconds.
  const auto all = gather_bytes(*communicator, failure, 0, device);
  std::string message;
  if (communicator->rank() == 0) {
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty()) continue;
      message += std::string(message.empty() ? "" : "; ") + "rank " + std::to_string(r) + ": " + all[r];
    }
  }
  message = broadcast_bytes(*communicator, message, 0, device);
  if (!message.empty()) throw CheckpointError("the job cannot resume: " + message);
  return read_here;
}

}  // namespace basin

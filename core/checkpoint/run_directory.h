#pragma once

#include <functional>
#include <string>

#include <c10/core/Device.h>

#include "basin/core/base/state_dict.h"
#include "basin/core/config/json.h"

namespace basin {

class Communicator;
struct DatasetInfo;
class Params;

/// A run's folder, as basin-train lays it out and basin-generate and a
/// resumed run read it: one place for its file names, for the folder its
/// checkpoints go to, and for finding the checkpoint a run continues from
/// (as torchtitan's CheckpointManager finds and loads one).
///
///   config.json       the run's config, overrides applied
///   data_info.json    what sizes the model (the data's name, input shape, classes)
///   metrics.jsonl     one JSON line per logged step
///   summary.json      the finished run's figures
///   state_dict.pt     the trained model for Python (Model::kStateDictFile;
///                     model.pt: TorchScript; hf/: GPT-2)
///   checkpoints/      callbacks.checkpoint.dir (relative to the run, or absolute)
class RunDirectory {
 public:
  static constexpr const char* kConfig = "config.json";
  static constexpr const char* kDataInfo = "data_info.json";
  static constexpr const char* kMetrics = "metrics.jsonl";
  static constexpr const char* kSummary = "summary.json";
  /// The checkpoint callback's folder when its config names none.
  static constexpr const char* kCheckpoints = "checkpoints";

  explicit RunDirectory(std::string path) : path_(std::move(path)) {}
  /// runs/<config file's stem>-<local date>-<time>: a new run's default.
  static RunDirectory dated(const std::string& config_path);

  const std::string& path() const { return path_; }
  /// Rank 0's run directory, on every rank (a collective): a dated folder is
  /// named by each rank's own clock, and the ranks' checkpoint files must
  /// land in one folder.
  RunDirectory agreed(Communicator& communicator, c10::Device device) const;
  /// `name` inside the run directory.
  std::string file(const std::string& name) const;
  /// A folder the config names for the run (the checkpoints'): `dir`
  /// itself when absolute (or when the run has no directory), else inside it.
  std::string resolve(const std::string& dir) const;
  /// The folder the config's checkpoint callback writes to
  /// (callbacks.checkpoint.dir, default kCheckpoints).
  std::string checkpoint_folder(const Json& config) const;
  /// The checkpoint callback's "dir" from its settings (callbacks.checkpoint),
  /// default kCheckpoints; a ConfigError naming the key when empty.
  static std::string checkpoint_dir(Params& checkpoint_settings);

  /// Refuses (ConfigError naming the flag) a folder that already holds a
  /// run (metrics.jsonl or summary.json) unless `overwrite`, and a path
  /// that is no folder: a run never overwrites another by accident.
  void check_unused(bool overwrite) const;
  /// Writes `value` to `name` in the run directory (made if missing), whole
  /// or not at all (a temporary file renamed).
  void write_json(const std::string& name, const Json& value) const;
  /// What a run writes before it trains: its resolved config, and what sizes
  /// the model (kDataInfo), so the trained model is rebuilt without the data
  /// (basin-generate).
  void write_start(const Json& config, const DatasetInfo& info) const;

 private:
  std::string path_;
};

/// The checkpoint a run continues from, and the file it came from.
struct ResumePoint {
  std::string path;
  StateDict checkpoint = new_state_dict();
};

/// `resume` is "latest" (the newest checkpoint in `folder` that reads back;
/// each newer damaged one is named in a warning) or a checkpoint file.
/// Throws CheckpointError when there is none to read.
ResumePoint find_resume_point(const std::string& resume, const std::string& folder);

/// The config a checkpoint was saved with (a run resumed without --config
/// continues with it); CheckpointError naming the file when it holds none.
Json checkpoint_config(const ResumePoint& point);

/// Where a run starts: anew, from --resume's checkpoint, or, for a job its
/// launcher restarted (restart_count() > 0), from the newest checkpoint in
/// its run directory, or anew in the same directory when it wrote none yet.
struct RunStart {
  int restarts = 0;       // restart_count()
  bool resumes = false;   // `point` is the checkpoint to continue from
  bool reshard = false;   // a restart of an elastic job, which may have fewer ranks
  bool reuses_directory = false;  // a restart anew: the directory holds this run's first attempt
  ResumePoint point;
  std::string note;       // what a restart decided, for the log ("" when nothing was)
};
/// `resume` is --resume ("" when not given); `config` the run's config as
/// given (its checkpoint callback's folder is where "latest" looks).
/// Throws ConfigError for a restart without a run directory, and
/// CheckpointError when --resume names nothing that reads back.
RunStart choose_run_start(const RunDirectory& run, const Json& config, const std::string& resume);

/// How many times the job's launcher restarted it (basin-run or torchrun
/// --max-restarts): TORCHELASTIC_RESTART_COUNT, 0 when unset.
int restart_count();
/// Whether a restart must reshard: an elastic job (basin-run --nnodes
/// MIN:MAX sets BASIN_ELASTIC) may come back on fewer nodes.
bool restarts_reshard();

/// Every rank must resume from the same checkpoint: a node that does not
/// see the run directory's newest (no shared file system, a lagging mount)
/// would train from another step. Compares file names (mounts may differ)
/// over `communicator` (collective) and throws CheckpointError on every
/// rank, naming each rank's file, when they differ. `path` is empty when
/// this rank found none.
void check_ranks_resume_the_same(Communicator& communicator, c10::Device device, const std::string& path);

/// Runs `read`, this rank's part of reading a checkpoint, and agrees on the
/// outcome over `communicator` (collective; null or one rank: just reads).
/// When it throws on any rank (a damaged rank file is read by its rank
/// alone), every rank throws a CheckpointError naming each rank that failed
/// and what it said, at once rather than after a collective's timeout.
StateDict read_on_every_rank(Communicator* communicator, c10::Device device, const std::function<StateDict()>& read);

}  // namespace basin

#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "basin/core/engine/logger.h"

namespace basin {

/// Writes each logged record as one JSON line (metrics.jsonl). The file is
/// created at the first record, so a run that fails validation writes nothing.
/// A checkpoint keeps the number of records written; a resumed run cuts the
/// file back to them (dropping what the stopped run logged after its
/// checkpoint) and appends, so the file reads as one uninterrupted run.
class MetricsFile : public LoggerDestination {
 public:
  explicit MetricsFile(std::string path);

  std::string name() const override { return "metrics_file"; }
  void log_record(const Json& record) override;
  const std::string& path() const { return path_; }

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  std::string path_;
  std::ofstream out_;
  int64_t records_ = 0;
};

}  // namespace basin

#pragma once

#include <fstream>
#include <string>

#include "basin/core/logger.h"

namespace basin {

/// Writes each logged record as one JSON line (metrics.jsonl). The file is
/// created at the first record, so a run that fails validation writes nothing.
class MetricsFile : public LoggerDestination {
 public:
  explicit MetricsFile(std::string path);

  std::string name() const override { return "metrics_file"; }
  void log_record(const Json& record) override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace basin

#include "basin/callbacks/metrics_file.h"

#include <stdexcept>

namespace basin {

MetricsFile::MetricsFile(std::string path) : path_(std::move(path)) {}

void MetricsFile::log_record(const Json& record) {
  if (!out_.is_open()) {
    out_.open(path_, std::ios::out | std::ios::trunc);
    if (!out_) throw std::runtime_error("cannot write metrics file '" + path_ + "'");
  }
  // Flushed per line: a crash keeps every record written before it.
  out_ << record.dump() << '\n' << std::flush;
}

}  // namespace basin

#include "basin/callbacks/metrics_file.h"

#include <cstdio>
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
  ++records_;
}

StateDict MetricsFile::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("records", records_);
  return state;
}

void MetricsFile::load_state_dict(const StateDict& state) {
  const int64_t keep = state.at("records").toInt();
  std::vector<std::string> lines;
  {
    std::ifstream in(path_);
    for (std::string line; static_cast<int64_t>(lines.size()) < keep && std::getline(in, line);) lines.push_back(line);
  }
  // Rewritten through a temporary file: a crash here leaves the old file whole.
  const std::string temporary = path_ + ".tmp";
  {
    std::ofstream out(temporary, std::ios::out | std::ios::trunc);
    for (const auto& line : lines) out << line << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write metrics file '" + temporary + "'");
  }
  if (std::rename(temporary.c_str(), path_.c_str()) != 0) {
    throw std::runtime_error("cannot replace metrics file '" + path_ + "'");
  }
  out_.close();
  out_.open(path_, std::ios::out | std::ios::app);
  if (!out_) throw std::runtime_error("cannot write metrics file '" + path_ + "'");
  records_ = static_cast<int64_t>(lines.size());
}

}  // namespace basin

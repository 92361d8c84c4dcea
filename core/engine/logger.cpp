#include "basin/core/engine/logger.h"

namespace basin {

void Logger::add_destination(std::shared_ptr<LoggerDestination> destination) {
  destinations_.push_back(std::move(destination));
}

void Logger::log(const std::string& key, const Json& value) { pending_[key] = value; }

void Logger::emit(Json record) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (!record.contains(it.key())) record[it.key()] = it.value();
  }
  pending_ = Json::object();
  for (const auto& destination : destinations_) destination->log_record(record);
}

}  // namespace basin

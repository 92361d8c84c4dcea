#pragma once

#include <memory>
#include <vector>

#include "basin/core/config/config.h"
#include "basin/core/engine/callback.h"

namespace basin {

/// Where metric records go (a JSON-lines file, the console, ...).
/// A destination is also a Callback: it sees every event, after all others.
class LoggerDestination : public Callback {
 public:
  /// One record: the trainer's per-step and per-epoch lines, with whatever
  /// algorithms added since the previous record.
  virtual void log_record(const Json& record) = 0;
};

/// The logger algorithms and callbacks are handed.
///
/// Algorithms add named values to the pending record (`log("sam/grad_norm",
/// x)`); the loop emits the record once per logged step, so each line holds
/// the loop's figures and the algorithms' together.
class Logger {
 public:
  void add_destination(std::shared_ptr<LoggerDestination> destination);

  /// Sets `key` in the next record; a later value replaces an earlier one.
  void log(const std::string& key, const Json& value);

  /// Merges the pending values into `record`, sends it to every destination
  /// and clears the pending values.
  void emit(Json record);

  const Json& pending() const { return pending_; }

 private:
  std::vector<std::shared_ptr<LoggerDestination>> destinations_;
  Json pending_ = Json::object();
};

}  // namespace basin

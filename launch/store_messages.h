#pragma once

// What the launchers of a job write to each other in node 0's store, as
// text: an attempt's start, a node's result, the first failure, the
// verdict (store_coordinator.cpp lists the keys that hold them).

#include <chrono>
#include <string>
#include <vector>

#include "basin/launch/coordinator.h"

namespace basin::launch {

/// "run PORT NODE..." (the attempt's nodes) or "end CODE MESSAGE".
std::string start_text(const Start& start);
Start parse_start(const std::string& text);

/// "restart CODE MESSAGE" or "end CODE MESSAGE".
std::string verdict_text(const Verdict& verdict);
Verdict parse_verdict(const std::string& text);

/// "CODE BAD_INPUT INTERRUPTED WHAT" (a lost node never writes its own).
std::string result_text(const NodeResult& result);
NodeResult parse_result(const std::string& text);

/// "NODE WHAT".
std::string failure_text(int node, const std::string& what);
FirstFailure parse_failure(const std::string& text);

/// "2.5 s", for the launchers' messages.
std::string seconds(std::chrono::milliseconds duration);
/// "node 2", "nodes 1, 3".
std::string node_list(const std::vector<int>& nodes);

}  // namespace basin::launch

#include "basin/launch/store_messages.h"

#include <sstream>

namespace basin::launch {

std::string start_text(const Start& start) {
  if (!start.run) return "end " + std::to_string(start.code) + " " + start.message;
  std::string text = "run " + std::to_string(start.port);
  for (int node : start.nodes) text += " " + std::to_string(node);
  return text;
}

Start parse_start(const std::string& text) {
  std::istringstream fields(text);
  std::string kind;
  Start start;
  fields >> kind;
  if (kind == "run") {
    start.run = true;
    fields >> start.port;
    for (int node; fields >> node;) start.nodes.push_back(node);
    return start;
  }
  fields >> start.code;
  std::getline(fields >> std::ws, start.message);
  return start;
}

std::string verdict_text(const Verdict& verdict) {
  return (verdict.restart ? "restart " : "end ") + std::to_string(verdict.code) + " " + verdict.message;
}

Verdict parse_verdict(const std::string& text) {
  std::istringstream fields(text);
  std::string kind;
  Verdict verdict;
  fields >> kind >> verdict.code;
  verdict.restart = kind == "restart";
  std::getline(fields >> std::ws, verdict.message);
  return verdict;
}

std::string result_text(const NodeResult& result) {
  return std::to_string(result.code) + " " + (result.bad_input ? "1" : "0") + " " + (result.interrupted ? "1" : "0") +
         " " + result.what;
}

NodeResult parse_result(const std::string& text) {
  std::istringstream fields(text);
  NodeResult result;
  int bad_input = 0, interrupted = 0;
  fields >> result.code >> bad_input >> interrupted;
  result.bad_input = bad_input != 0;
  result.interrupted = interrupted != 0;
  std::getline(fields >> std::ws, result.what);
  return result;
}

std::string failure_text(int node, const std::string& what) { return std::to_string(node) + " " + what; }

FirstFailure parse_failure(const std::string& text) {
  FirstFailure first;
  std::istringstream fields(text);
  fields >> first.node;
  std::getline(fields >> std::ws, first.what);
  return first;
}

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000 << " s";
  return out.str();
}

std::string node_list(const std::vector<int>& nodes) {
  std::string names;
  for (int node : nodes) names += (names.empty() ? "" : ", ") + std::to_string(node);
  return (nodes.size() > 1 ? "nodes " : "node ") + names;
}

}  // namespace basin::launch

// Fuzz target: the config loader as basin-train drives it.
//
// The input is a config file's text, then any number of --set assignments,
// separated by NUL bytes (JSON text holds no raw NUL, so nothing is lost).
// The target parses the text, applies the overrides, and reads every key of
// the result through Params with each typed read, the way the trainer and
// the plug-ins do, then checks the result and every error:
//   - the only exception that may leave the loader is ConfigError, and its
//     message is one line of UTF-8, not empty, of bounded length;
//   - what loads nests no deeper than kMaxConfigDepth and survives dump()
//     and a second parse unchanged (basin-train writes it as config.json).
// A broken rule aborts, which libFuzzer reports as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "basin/core/config/config.h"

namespace {

using basin::ConfigError;
using basin::Json;
using basin::Params;

[[noreturn]] void broken(const std::string& rule, const std::string& detail) {
  std::fprintf(stderr, "config_fuzzer: %s: %s\n", rule.c_str(), detail.substr(0, 2000).c_str());
  std::abort();
}

void check_message(const ConfigError& error) {
  const std::string message = error.what();
  if (message.empty()) broken("empty message", "");
  if (message.size() > ConfigError::kMaxBytes + 3) broken("message too long", message);
  for (std::size_t pos = 0; pos < message.size();) {
    const std::size_t length = basin::utf8_sequence_length(message, pos);
    if (length == 0) broken("message not UTF-8", message);
    const auto c = static_cast<unsigned char>(message[pos]);
    if (length == 1 && (c < 0x20 || c == 0x7F)) broken("control character in message", message);
    pos += length;
  }
}

template <typename Read>
void attempt(Read&& read) {
  try {
    read();
  } catch (const ConfigError& error) {
    check_message(error);
  }
}

// Every typed read on every key, recursing into objects and into arrays of
// objects (param_groups, schedulers), as the trainer walks its sections.
void walk(const Json& object, const std::string& path) {
  Params params(object, path);
  for (const std::string& key : params.keys()) {
    attempt([&] { params.number(key, 0.0); });
    attempt([&] { params.number(key, 0.5, 0.0, 1.0); });
    attempt([&] { params.number(key); });
    attempt([&] { params.positive(key, 1.0); });
    attempt([&] { params.integer(key, 0); });
    attempt([&] { params.integer(key, 1, 1); });
    attempt([&] { params.integer(key, 0, 0, 1024); });
    attempt([&] { params.boolean(key, false); });
    attempt([&] { params.string(key); });
    attempt([&] { params.choice(key, "step", {"step", "epoch"}); });
    attempt([&] { params.numbers(key, {}); });
    attempt([&] { params.integers(key, {}); });
    attempt([&] { params.array(key); });
    attempt([&] { params.raw(key); });
    attempt([&] {
      Params child = params.object(key);
      walk(child.raw_object(), child.path());
    });
    const Json& value = object[key];
    if (value.is_array()) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (value[i].is_object()) walk(value[i], params.path_of(key + "[" + std::to_string(i) + "]"));
      }
    }
  }
  // Unknown keys: a fresh view that read only the first key rejects the rest.
  Params partial(object, path);
  if (!partial.keys().empty()) partial.claim(partial.keys().front());
  attempt([&] { partial.finish(); });
  attempt([&] { partial.string("missing"); });
  params.finish();  // every key was read
}

int depth_of(const Json& value) {
  // Iterative: the check must not itself be what overflows the stack.
  int deepest = 0;
  std::vector<std::pair<const Json*, int>> stack{{&value, 1}};
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    deepest = std::max(deepest, depth);
    for (const auto& child : *node) stack.push_back({&child, depth + 1});
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const auto nul = input.find('\0', start);
    parts.push_back(input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }

  Json config = Json::object();
  try {
    config = basin::parse_config_text(parts[0], "fuzz.json");
    if (!config.is_object()) config = Json::object();  // load_config_file refuses these
  } catch (const ConfigError& error) {
    check_message(error);
  }
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const Json before = config;
    try {
      basin::apply_override(config, parts[i]);
    } catch (const ConfigError& error) {
      check_message(error);
      if (config != before) broken("a refused override changed the config", parts[i]);
    }
  }

  if (depth_of(config) > basin::kMaxConfigDepth) broken("too deep", std::to_string(depth_of(config)));
  const std::string text = config.dump();  // throws on a string that is not UTF-8
  Json again;
  try {
    again = basin::parse_config_text(text, "config.json");
  } catch (const ConfigError& error) {
    broken("the loaded config does not load again", error.what());
  }
  if (again != config || again.dump() != text) broken("round trip changed the config", text);

  walk(config, "");
  return 0;
}

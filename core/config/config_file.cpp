// Config files and config text: read within limits, parsed strictly, each
// failure naming the file (or --set) with its line and column.
#include "basin/core/config/config_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "basin/core/config/config_error.h"
#include "basin/core/config/config_text.h"

namespace basin {

namespace {

using namespace config_text;

// "run.json:3:8" for the 0-based byte `offset` of `text`.
std::string line_and_column(const std::string& origin, const std::string& text, std::size_t offset) {
  if (offset == JsonFailure::kUnknown) return origin;
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return origin + ":" + std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

Json parse_config_text(const std::string& text, const std::string& origin) {
  JsonFailure failure;
  Json config = parse_json(text, kMaxConfigDepth, failure);
  if (failure.kind != JsonFailure::Kind::kNone) {
    throw ConfigError(line_and_column(origin, text, failure.offset) + ": " + describe(failure, failure.key));
  }
  return config;
}

Json load_config_file(const std::string& path) {
  const std::string file = "config file '" + path + "'";
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw ConfigError(file + " is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) throw ConfigError(file + " cannot be opened: " + std::strerror(errno));
  const std::string limit = std::to_string(kMaxConfigFileBytes >> 20) + " MiB";
  // A regular file says its size; a pipe or device is read up to the limit.
  const auto size = std::filesystem::file_size(path, error);
  if (!error && size > kMaxConfigFileBytes) {
    throw ConfigError(file + " is " + std::to_string(size) + " bytes; config files above " + limit + " are refused");
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const std::size_t got = std::fread(buffer, 1, sizeof buffer, in.get());
    text.append(buffer, got);
    if (text.size() > kMaxConfigFileBytes) {
      throw ConfigError(file + " holds more than " + limit + "; config files above " + limit + " are refused");
    }
    if (got < sizeof buffer) break;
  }
  if (std::ferror(in.get())) throw ConfigError(file + " cannot be read: " + std::strerror(errno));
  Json config = parse_config_text(text, path);
  if (!config.is_object()) throw ConfigError(file + ": expected a JSON object at the top level");
  return config;
}

}  // namespace basin

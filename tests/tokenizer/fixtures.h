#pragma once
// What TokenizerTest and TokenizerPartsTest read back from the fixtures that
// make_fixtures.py and make_parts_fixtures.py write with PyPI's tokenizers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace basin::test {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<int32_t> read_ids(const std::string& path) {
  const std::string bytes = read_bytes(path);
  std::vector<int32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);  // little-endian uint32, as this machine's
  return ids;
}

// Where two id lists first differ, with the ids around it.
inline std::string first_difference(const std::vector<int32_t>& basin, const std::vector<int32_t>& expected) {
  std::size_t at = 0;
  while (at < basin.size() && at < expected.size() && basin[at] == expected[at]) ++at;
  std::string out = "first difference at id " + std::to_string(at) + " of " + std::to_string(expected.size()) + ": basin";
  for (std::size_t i = at; i < std::min(basin.size(), at + 6); ++i) out += " " + std::to_string(basin[i]);
  out += ", tokenizers";
  for (std::size_t i = at; i < std::min(expected.size(), at + 6); ++i) out += " " + std::to_string(expected[i]);
  return out;
}

}  // namespace basin::test

// safetensors files: what basin writes reads back bit for bit, and a file
// whose header lies (about its own length, a tensor's byte range, its dtype
// or shape) is refused with a ConfigError naming the key, the file and the
// tensor, before a byte is trusted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/config_error.h"
#include "basin/core/serialization/safetensors_checkpoint.h"
#include "basin/core/serialization/safetensors_file.h"
#include "test_util.h"

namespace basin {
namespace {

/// A file of `header` (its length as the first 8 bytes, little-endian) then `data` bytes.
void write_file(const std::string& path, const std::string& header, const std::string& data, int64_t claimed = -1) {
  std::string bytes;
  const uint64_t length = claimed >= 0 ? static_cast<uint64_t>(claimed) : header.size();
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header + data;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(SafetensorsTest, WhatBasinWritesReadsBackBitForBitInItsOrder) {
  test::TempDir dir;
  at::manual_seed(0);
  const NamedTensors written{{"z.weight", at::randn({3, 4})},
                             {"a.half", at::randn({5}).to(at::kHalf)},
                             {"b.bf16", at::randn({2, 2}).to(at::kBFloat16)},
                             {"ids", at::arange(7, at::kLong)},
                             {"small", at::arange(6, at::kInt).view({2, 3}).to(at::kShort)},
                             {"bytes", at::arange(4, at::kByte)},
                             {"mask", at::tensor(std::vector<int64_t>{1, 0, 1}).to(at::kBool)},
                             {"double", at::randn({2}, at::kDouble)},
                             {"empty", at::zeros({0, 3})},
                             {"scalar", at::tensor(2.5)}};
  write_safetensors_file(dir.file("model.safetensors"), written, {{"format", "pt"}});
  const NamedTensors read = read_safetensors_file(dir.file("model.safetensors"), "init_from");
  ASSERT_EQ(read.size(), written.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].first, written[i].first);
    EXPECT_EQ(read[i].second.scalar_type(), written[i].second.scalar_type()) << read[i].first;
    EXPECT_TRUE(read[i].second.equal(written[i].second)) << read[i].first;
  }
  // The data starts 8-byte aligned, as the format asks.
  std::ifstream in(dir.file("model.safetensors"), std::ios::binary);
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  EXPECT_EQ(length[0] % 8, 0);
}

void expect_refused(const std::string& path, const std::vector<std::string>& words) {
  test::expect_config_error([&] { read_safetensors_file(path, "init_from"); }, words, path);
}

TEST(SafetensorsTest, AHeaderThatLiesIsRefusedNamingTheFileAndTheTensor) {
  test::TempDir dir;
  const std::string eight(8, '\0');
  auto file = [&](const std::string& name) { return dir.file(name); };
  write_file(file("long_header"), R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", eight, 1 << 20);
  expect_refused(file("long_header"), {"'init_from'", "long_header", "header of 1048576 bytes"});
  write_file(file("past_end"), R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", eight);
  expect_refused(file("past_end"), {"past_end", "tensor 'w'", "[0, 16)", "data section of 8"});
  write_file(file("overlap"),
             R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
             eight);
  expect_refused(file("overlap"), {"overlap", "'a' and 'b'", "same bytes"});
  write_file(file("size"), R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight);
  expect_refused(file("size"), {"tensor 'w'", "8 bytes", "need 12"});
  write_file(file("dtype"), R"({"w": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})", eight);
  expect_refused(file("dtype"), {"tensor 'w'", "F8_E4M3", "expected F64"});
  write_file(file("huge"), R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", eight);
  expect_refused(file("huge"), {"tensor 'w'", "shape"});
  write_file(file("negative"), R"({"w": {"dtype": "U8", "shape": [-8], "data_offsets": [0, 8]}})", eight);
  expect_refused(file("negative"), {"tensor 'w'", "shape [-8]"});
  write_file(file("backwards"), R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}})", eight);
  expect_refused(file("backwards"), {"tensor 'w'", "data_offsets [8,0]"});
  write_file(file("not_json"), "{\"w\": [", eight);
  expect_refused(file("not_json"), {"not_json", "not JSON"});
  write_file(file("list"), "[1, 2]", eight);
  expect_refused(file("list"), {"not a JSON object"});
  write_file(file("fields"), R"({"w": {"dtype": "F32"}})", eight);
  expect_refused(file("fields"), {"tensor 'w'", "without dtype, shape and data_offsets"});
  write_file(file("bool"), R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})", std::string("\x01\x02", 2));
  expect_refused(file("bool"), {"BOOL tensor 'm'"});
  write_file(file("deep"), "{\"w\": {\"dtype\": " + std::string(100000, '[') + std::string(100000, ']') + "}}", eight);
  expect_refused(file("deep"), {"deep", "nested deeper"});
  write_file(file("empty_huge"), R"({"w": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776], "data_offsets": [0, 0]}})", eight);
  expect_refused(file("empty_huge"), {"tensor 'w'", "shape"});
  std::ofstream(file("tiny"), std::ios::binary) << "abc";
  expect_refused(file("tiny"), {"tiny", "3 bytes long"});
  expect_refused(file("missing"), {"missing", "cannot be read"});
}

// A checkpoint split over files, as save_pretrained(max_shard_size=...)
// writes it: read through its index (where no whole file is beside it), the
// same tensors whichever way they are split and listed; an index that lies
// is refused naming the index and what it lies about.
TEST(SafetensorsTest, ACheckpointSplitOverFilesReadsTheSameWhateverTheSplitAndALyingIndexIsRefused) {
  test::TempDir dir;
  at::manual_seed(0);
  const at::Tensor a = at::randn({3, 4}), b = at::randn({5}).to(at::kBFloat16), c = at::randn({2, 2});
  std::filesystem::create_directories(dir.file("whole"));
  write_safetensors_file(dir.file("whole/model.safetensors"), {{"c", c}, {"a", a}, {"b", b}});
  const NamedTensors whole = read_safetensors_checkpoint(dir.file("whole"), "init_from");
  ASSERT_EQ(whole.size(), 3u);
  // One split, and another with other files and the index's entries in another order.
  auto split = [&](const std::string& name, const NamedTensors& first, const NamedTensors& second, const std::string& index) {
    std::filesystem::create_directories(dir.file(name));
    write_safetensors_file(dir.file(name + "/one.safetensors"), first);
    write_safetensors_file(dir.file(name + "/two.safetensors"), second);
    test::write_text(dir.file(name + "/model.safetensors.index.json"), index);
    return dir.file(name);
  };
  const std::string one = split("one", {{"a", a}, {"c", c}}, {{"b", b}},
                                R"({"metadata": {}, "weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})");
  const std::string other = split("other", {{"b", b}}, {{"c", c}, {"a", a}},
                                  R"({"weight_map": {"c": "two.safetensors", "b": "one.safetensors", "a": "two.safetensors"}})");
  for (const std::string& checkpoint : {one, other}) {
    const NamedTensors read = read_safetensors_checkpoint(checkpoint, "init_from");
    ASSERT_EQ(read.size(), 3u) << checkpoint;
    for (std::size_t i = 0; i < read.size(); ++i) {
      EXPECT_EQ(read[i].first, std::string(1, static_cast<char>('a' + i))) << "sorted by name, " << checkpoint;
      const auto same = std::find_if(whole.begin(), whole.end(), [&](const auto& t) { return t.first == read[i].first; });
      ASSERT_NE(same, whole.end());
      EXPECT_EQ(read[i].second.scalar_type(), same->second.scalar_type());
      EXPECT_TRUE(read[i].second.equal(same->second)) << read[i].first << ", " << checkpoint;
    }
  }
  const std::string index = one + "/model.safetensors.index.json";
  auto lies = [&](const std::string& text, const std::vector<std::string>& words) {
    test::write_text(index, text);
    std::vector<std::string> named = words;
    named.push_back("model.safetensors.index.json");
    named.push_back("init_from");
    test::expect_config_error([&] { read_safetensors_checkpoint(one, "init_from"); }, named, text);
  };
  lies(R"({"weight_map": {"a": "../whole/model.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})",
       {"'a'", "../whole/model.safetensors", "own directory"});
  lies(R"({"weight_map": {"a": "/etc/passwd", "b": "two.safetensors", "c": "one.safetensors"}})",
       {"/etc/passwd", "own directory"});
  lies(R"({"weight_map": {"a": "one/../one.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})",
       {"one/../one.safetensors", "own directory"});
  lies(R"({"weight_map": {"a": "", "b": "two.safetensors", "c": "one.safetensors"}})", {"''", "own directory"});
  lies(R"({"weight_map": {"a": "three.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})",
       {"three.safetensors", "no file of"});
  lies(R"({"weight_map": {"a": ".", "b": "two.safetensors", "c": "one.safetensors"}})", {"'.'", "own directory"});
  lies(R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}})", {"'c'", "names no file for it"});
  lies(R"({"weight_map": {"a": "one.safetensors", "b": "one.safetensors", "c": "one.safetensors"}})",
       {"'b'", "one.safetensors", "lacks it"});
  lies(R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "one.safetensors", "d": "two.safetensors"}})",
       {"'d'", "lacks it"});
  lies(R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": 3}})", {"'c'", "no file name"});
  lies(R"({"metadata": {}})", {"weight_map"});
  lies(R"({"weight_map": {}})", {"maps 0 tensors", "expected 1 to"});
  lies(R"({"weight_map": {"a": {"b": {"c": "one.safetensors"}}}})", {"nested deeper"});
  lies("{", {"not an index's JSON"});
  // Beside a whole file the index is not read, as transformers reads neither then.
  test::write_text(index, R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})");
  write_safetensors_file(one + "/model.safetensors", {{"c", c}});
  const NamedTensors beside = read_safetensors_checkpoint(one, "init_from");
  ASSERT_EQ(beside.size(), 1u);
  EXPECT_EQ(beside[0].first, "c");
  std::filesystem::remove(one + "/model.safetensors");
  // A tensor in two files: the one its index does not name it in says so.
  write_safetensors_file(one + "/two.safetensors", {{"b", b}, {"a", a}});
  lies(R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "one.safetensors"}})",
       {"'a'", "two.safetensors", "one.safetensors"});
}

}  // namespace
}  // namespace basin

// basin-tokenize: text files to the raw id files "data": {"name": "tokens"}
// reads, for corpora too large to tokenize at every start. Each file is one
// document, encoded as the "text" data encodes it (no special tokens; the
// --eos-token after each file when given), so that a run on the id file
// sees the ids a "text" run with the same tokenizer would.
//
//     basin-tokenize --tokenizer SmolLM2-135M/ --eos-token "<|endoftext|>" --out train.bin corpus/*.txt
//
// The ids are little-endian uint16 where the vocabulary fits (uint32 else,
// or as --dtype says). The output is written beside its name and renamed
// into place when whole: a refused file (not UTF-8: its name and the offset
// of the first bad byte) leaves no partial output and an older one as it was.
// Throughput (MB/s and tokens/s, one thread) goes to stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "basin/core/config/config_error.h"
#include "basin/tokenizer/tokenizer.h"

namespace {

constexpr int kBadInput = 2;
namespace fs = std::filesystem;

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw basin::ConfigError("'" + file.string() + "': cannot read it");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw basin::ConfigError("'" + file.string() + "': reading it failed");
  return text;
}

template <typename Id>
void write_ids(std::ofstream& out, const std::vector<int32_t>& ids) {
  std::vector<Id> narrow(ids.begin(), ids.end());  // little-endian, as this machine is
  out.write(reinterpret_cast<const char*>(narrow.data()), static_cast<std::streamsize>(narrow.size() * sizeof(Id)));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"basin-tokenize: text files to raw token id files (data \"tokens\")"};
  std::string tokenizer_path, out_path, dtype, eos_token;
  std::vector<std::string> inputs;
  app.add_option("--tokenizer", tokenizer_path, "a tokenizer.json, or a model directory holding one")->required();
  app.add_option("--out", out_path, "the id file to write")->required();
  app.add_option("--dtype", dtype, "uint16 or uint32 (default: uint16 where the vocabulary fits)")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app.add_option("--eos-token", eos_token, "a token to put after each file's ids");
  app.add_option("files", inputs, "the text files (UTF-8), each a document, in this order")->required();
  CLI11_PARSE(app, argc, argv);
  const fs::path partial = out_path + ".partial";
  try {
    auto tokenizer = basin::tokenizer::Tokenizer::from_file(tokenizer_path);
    if (dtype.empty()) dtype = tokenizer.vocab_size() <= 65536 ? "uint16" : "uint32";
    if (dtype == "uint16" && tokenizer.vocab_size() > 65536) {
      throw basin::ConfigError("--dtype uint16: '" + tokenizer.file() + "' has ids up to " +
                               std::to_string(tokenizer.vocab_size() - 1) + "; give uint32");
    }
    int32_t eos = -1;
    if (!eos_token.empty() && (eos = tokenizer.token_to_id(eos_token)) < 0) {
      throw basin::ConfigError("--eos-token: '" + eos_token + "' is no token of '" + tokenizer.file() + "'");
    }
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw basin::ConfigError("--out: cannot write '" + partial.string() + "'");
    uintmax_t bytes = 0, tokens = 0;
    double seconds = 0;
    for (const std::string& input : inputs) {
      const std::string text = read_file(input);
      const auto started = std::chrono::steady_clock::now();
      std::vector<int32_t> ids;
      try {
        ids = tokenizer.encode(text, /*add_special_tokens=*/false);
      } catch (const std::invalid_argument& not_utf8) {
        throw basin::ConfigError("'" + input + "': " + not_utf8.what() + "; basin-tokenize reads UTF-8 text only");
      } catch (const std::runtime_error& failed) {  // the tokenizer's regex gave up on this text
        throw std::runtime_error("tokenizing '" + input + "': " + failed.what());
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      if (eos >= 0) ids.push_back(eos);
      dtype == "uint16" ? write_ids<uint16_t>(out, ids) : write_ids<uint32_t>(out, ids);
      bytes += text.size(), tokens += ids.size();
    }
    out.close();
    if (!out) throw std::runtime_error("writing '" + partial.string() + "' failed");
    fs::rename(partial, out_path);
    std::fprintf(stderr, "basin-tokenize: %zu files, %.1f MB, %ju tokens (%s) in %.3f s: %.2f MB/s, %.0f tokens/s on one thread\n",
                 inputs.size(), bytes / 1e6, tokens, dtype.c_str(), seconds, bytes / 1e6 / std::max(seconds, 1e-9),
                 tokens / std::max(seconds, 1e-9));
    return 0;
  } catch (const basin::ConfigError& error) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    std::cerr << "basin-tokenize: " << error.what() << std::endl;
    return kBadInput;
  } catch (const std::exception& error) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    std::cerr << "basin-tokenize: error: " << error.what() << std::endl;
    return 1;
  }
}

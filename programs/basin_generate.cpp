// basin-generate: samples what a language model basin-train trained has
// learned. The run directory gives the model (config.json, state_dict.pt);
// a prompt starts the text, and each next token is drawn from the model's
// distribution, with temperature and top-k, deterministically for a seed.
// The prompt is text for a run that read text: its bytes, or its ids under
// the tokenizer the run trained with (tokenizer.json in the run directory),
// and the output is text; a run on token ids takes --ids and prints ids.
//
//     basin-generate runs/fortunes --prompt "The " --tokens 300 --temperature 0.8 --top-k 40 --seed 1
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include "basin/core/config/config_error.h"
#include "basin/core/config/program_error.h"
#include "basin/core/model/model.h"
#include "basin/models/sampling.h"
#include "basin/tokenizer/tokenizer.h"

namespace {

at::Tensor parse_ids(const std::string& text, int64_t vocabulary) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || id < 0 || id >= vocabulary) {
      throw basin::ConfigError("--ids: '" + item + "' is no token id; expected comma-separated ids 0 to " +
                               std::to_string(vocabulary - 1));
    }
    ids.push_back(id);
  }
  if (ids.empty()) throw basin::ConfigError("--ids: no id given; expected comma-separated ids");
  return at::tensor(ids, at::kLong);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"basin-generate: sample a trained language model"};
  std::string run_dir, prompt, ids;
  basin::SamplingOptions options;
  app.add_option("run_dir", run_dir, "the run directory basin-train wrote (config.json, state_dict.pt)")->required();
  auto* prompt_option = app.add_option("--prompt", prompt, "text to start from (a \"text\" run: its bytes, or its tokenizer's ids)");
  auto* ids_option = app.add_option("--ids", ids, "token ids to start from, comma-separated (a \"tokens\" run)");
  prompt_option->excludes(ids_option);
  app.add_option("--tokens", options.tokens, "how many tokens to draw")->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", options.temperature, "divides the logits; 0 takes the likeliest token")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", options.top_k, "draw among the k likeliest tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", options.seed, "the draws depend on it alone");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(1);
    const basin::TrainedModel trained = basin::load_trained_model(run_dir);
    const bool text = trained.data_name == "text";
    const std::filesystem::path tokenizer_file = std::filesystem::path(run_dir) / "tokenizer.json";
    std::optional<basin::tokenizer::Tokenizer> tokenizer;
    if (text && std::filesystem::exists(tokenizer_file)) {
      tokenizer.emplace(basin::tokenizer::Tokenizer::from_file(tokenizer_file));
    } else if (text && trained.info.num_classes != 256) {
      throw basin::ConfigError("'" + tokenizer_file.string() + "' is missing, and the run's text was tokenized (a vocabulary of " +
                               std::to_string(trained.info.num_classes) + ", not bytes); copy the tokenizer.json it trained with there");
    }
    at::Tensor start;
    if (text) {
      if (!ids.empty()) throw basin::ConfigError("--ids: this run's model reads text (data \"text\"); give --prompt");
      if (prompt.empty()) prompt = "\n";
      if (tokenizer) {
        std::vector<int32_t> encoded;
        try {
          encoded = tokenizer->encode(prompt, /*add_special_tokens=*/false);  // as the run's files were
        } catch (const std::invalid_argument& not_utf8) {
          throw basin::ConfigError(std::string("--prompt: ") + not_utf8.what());
        }
        if (encoded.empty()) throw basin::ConfigError("--prompt: '" + prompt + "' gives no tokens; give text the tokenizer reads");
        start = at::tensor(std::vector<int64_t>(encoded.begin(), encoded.end()), at::kLong);
      } else {
        start = at::from_blob(prompt.data(), {static_cast<int64_t>(prompt.size())}, at::kByte).to(at::kLong);
      }
    } else {
      if (!prompt.empty()) throw basin::ConfigError("--prompt: this run's model reads token ids; give --ids");
      start = parse_ids(ids.empty() ? "0" : ids, trained.info.num_classes);
    }
    options.context = trained.info.input_shape.at(0);
    const at::Tensor out = basin::sample_tokens(*trained.model, start, options);
    if (tokenizer) {
      const at::Tensor drawn = out.to(at::kInt).contiguous();
      std::cout << tokenizer->decode(std::vector<int32_t>(drawn.data_ptr<int32_t>(), drawn.data_ptr<int32_t>() + drawn.numel()))
                << std::endl;
    } else if (text) {
      const at::Tensor chars = out.to(at::kByte).contiguous();
      std::cout.write(reinterpret_cast<const char*>(chars.data_ptr<uint8_t>()), chars.numel());
      std::cout << std::endl;
    } else {
      for (int64_t i = 0; i < out.size(0); ++i) std::cout << (i ? "," : "") << out[i].item<int64_t>();
      std::cout << std::endl;
    }
    return 0;
  } catch (...) {
    return basin::report_error("basin-generate", std::current_exception());
  }
}

// zero3's vocabulary tables, ranks as threads: the token embedding is a
// unit of its own, whole for its lookup and again for a tied head (an
// untied head is a unit too), so no more than a table and a block are whole
// at once; the training is data parallel's.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "fully_sharded_of.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "distributed_util.h"
#include "test_util.h"
#include "zero_three_follows_ddp.h"

namespace basin {
namespace {

/// The gpt (tied), and the llama tied and untied, on `corpus`: SAM with a synced ascent, Adam, 3 steps.
std::vector<std::pair<std::string, Json>> language_models(const std::string& corpus) {
  Json gpt = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  gpt["model"] = Json::parse(R"({"name": "gpt", "n_layer": 3, "n_head": 2, "n_embd": 16})");
  gpt["data"] = {{"name", "text"}, {"train", corpus}, {"block_size", 16}, {"batch_size", 8}};
  gpt["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01})");
  gpt["max_steps"] = 3;
  Json llama = gpt;
  llama["model"] = Json::parse(R"({"name": "llama", "hidden_size": 16, "num_hidden_layers": 3,
                                   "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true})");
  Json untied = llama;
  untied["model"]["tie_word_embeddings"] = false;
  return {{"gpt", gpt}, {"llama, tied", llama}, {"llama, untied", untied}};
}

std::string write_corpus(const test::TempDir& dir) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The table is whole for its lookup and its head, " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), text);
  return dir.file("corpus.txt");
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

TEST(ZeroThreeEmbeddingTest, TheGptAndTheLlamaTiedOrNotEqualDataParallel) {
  test::TempDir dir;
  for (const auto& [what, config] : language_models(write_corpus(dir))) test::expect_zero_three_follows_ddp(config, what);
}

// Whole at once: at most the largest vocabulary table (the embedding, or an
// untied head), the largest block and the root (the position embedding and
// the final norm). With the table in the root, as it was, it stayed whole
// from the forward's start to the backward's end beside two blocks (one
// running, the next gathered ahead): that is over this bound.
TEST(ZeroThreeEmbeddingTest, NoMoreThanAVocabularyTableAndABlockAreWholeAtOnce) {
  test::TempDir dir;
  for (const auto& [what, config] : language_models(write_corpus(dir))) {
    int64_t peak = 0, table = 0, block = 0, root = 0;
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
      sharded.reset_peak();
      trainer.fit();
      EXPECT_EQ(sharded.gathered_bytes(), 0) << what << ": nothing whole at rest";
      if (rank != 0) return;
      peak = sharded.peak_gathered_bytes();
      Model& model = trainer.model();
      root = bytes_of(model.parameters());
      for (std::size_t u = 0; u < model.units().size(); ++u) {
        const int64_t bytes = bytes_of(model.units()[u]->parameters());
        root -= bytes;
        int64_t& largest = model.recomputable(u) ? block : table;  // the tables are never recomputed
        largest = std::max(largest, bytes);
      }
    });
    ASSERT_GT(table, block) << what << ": a table larger than a block shows which is whole";
    EXPECT_GE(peak, table) << what << ": the table was whole for its lookup";
    EXPECT_LE(peak, table + block + root) << what;
  }
}

/// A lookup whose backward would read the table the lookup frees: through
/// a linear layer, or an embedding of the table scaled first.
class NotALookup : public Model {
 public:
  explicit NotALookup(bool scaled) : scaled_(scaled), fc_(register_module("fc", torch::nn::Linear(4, 4))) {
    declare_unit(*fc_);
  }
  at::Tensor forward(const at::Tensor& x) override {
    return lookup(*fc_, [&] { return scaled_ ? at::embedding(fc_->weight * 2, x.to(at::kLong)) : fc_->forward(x); });
  }

 private:
  bool scaled_;
  torch::nn::Linear fc_;
};

TEST(ZeroThreeEmbeddingTest, ALookupThatIsNoEmbeddingOfItsTableIsRefusedAndLeavesNothingWhole) {
  for (const bool scaled : {false, true}) {
    test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
      NotALookup model(scaled);
      FullyShardedModel sharded(model, model.units(), communicator);
      model.set_unit_runner(&sharded);
      try {
        model.run(at::ones({2, 4}));
        ADD_FAILURE() << "a lookup " << (scaled ? "of a scaled table" : "through a linear layer") << " ran";
      } catch (const std::logic_error& refused) {
        const std::string message = refused.what();
        EXPECT_NE(message.find(scaled ? "MulBackward" : "Backward"), std::string::npos) << message;
        EXPECT_NE(message.find("not from an embedding of the unit's own table"), std::string::npos) << message;
        EXPECT_NE(message.find("run it with unit()"), std::string::npos) << message;
      }
      EXPECT_EQ(sharded.gathered_bytes(), 0);
    });
  }
}

}  // namespace
}  // namespace basin

// Activation checkpointing ("parallel.activation_checkpointing"): a unit's
// forward keeps only its input and runs again in backward. Runs with it
// equal runs without it bit for bit (dropout's masks, BatchNorm's
// statistics, autocast, SAM's two passes, every mode); a checkpointed block
// holds exactly its input for backward; and the key's refusals.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/function.h>

#include "fully_sharded_of.h"
#include "../bench/tracking_allocator.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/config/config.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/train/autocast.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

using test::max_difference;

std::string corpus() {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "Recompute, do not remember: fortune " + std::to_string(i * 3) + ".\n";
  return text;
}

/// The gpt on text, SAM with a synced ascent, 2 microbatches, under `mode`.
Json gpt_job(const std::string& corpus_file, const std::string& mode, double dropout) {
  Json config = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", mode);
  config["model"] = {{"name", "gpt"}, {"n_layer", 3}, {"n_head", 2}, {"n_embd", 16}, {"dropout", dropout}};
  config["data"] = {{"name", "text"}, {"train", corpus_file}, {"block_size", 16}, {"batch_size", 8},
                    {"microbatches", 2}};
  config["optimizer"] = Json::parse(R"({"name": "adamw", "lr": 0.01, "weight_decay": 0.1})");
  config["max_steps"] = 4;
  return config;
}

/// Whether a forward of `trainer`'s model (collective under zero3) puts a
/// unit's recompute into its graph: a checkpointed unit ran as one.
bool recomputes(Trainer& trainer) {
  AutocastGuard autocast(trainer.state().precision, trainer.state().device.type());  // as the trainer's forward
  const at::Tensor out = trainer.model().run(trainer.data().train.gather({0, 1}).inputs);
  std::vector<torch::autograd::Node*> todo{out.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name() == "basin::RecomputeBackward") return true;
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return false;
}

/// `config` trained on `world` ranks with and without `checkpointed`: every
/// rank's weights and buffers are the same bits, and the run with it did
/// recompute (the run without did not).
void expect_the_same_bits(Json config, const Json& checkpointed, const std::string& what, int world) {
  auto train = [&](const Json& job) {
    std::vector<test::Weights> held(static_cast<std::size_t>(world));
    std::vector<int> recomputed(static_cast<std::size_t>(world), -1);
    auto run = [&](int rank, std::shared_ptr<Communicator> communicator) {
      const auto r = static_cast<std::size_t>(rank);
      Trainer trainer(job, {}, {}, communicator);
      trainer.fit();
      held[r] = test::weights_of(trainer);
      for (const auto& b : trainer.model().buffers()) held[r].push_back(b.detach().clone());
      recomputed[r] = recomputes(trainer) ? 1 : 0;
    };
    if (world == 1 && job["parallel"]["mode"] == "none") {
      run(0, nullptr);
    } else {
      test::run_ranks(world, run);
    }
    const int expected = job["parallel"].contains("activation_checkpointing") ? 1 : 0;
    EXPECT_EQ(recomputed, std::vector<int>(static_cast<std::size_t>(world), expected)) << what;
    return held;
  };
  const auto plain = train(config);
  config["parallel"]["activation_checkpointing"] = checkpointed;
  const auto recomputed = train(config);
  for (int r = 0; r < world; ++r) {
    const auto rank = static_cast<std::size_t>(r);
    ASSERT_EQ(recomputed[rank].size(), plain[rank].size());
    EXPECT_EQ(max_difference(recomputed[rank], plain[rank]), 0.0) << what << ", rank " << r;
  }
}

// One process, so dropout draws from a generator of its own: the recompute
// draws the same masks, and leaves the generator where backward had it.
TEST(ActivationCheckpointingTest, TheGptWithDropoutTrainsBitForBitAsWithoutIt) {
  test::TempDir dir;
  test::write_text(dir.file("corpus.txt"), corpus());
  Json config = gpt_job(dir.file("corpus.txt"), "none", 0.2);
  for (const std::string precision : {"fp32", "amp_bf16"}) {
    config["precision"] = precision;
    expect_the_same_bits(config, true, "every block, " + precision, 1);
    expect_the_same_bits(config, Json::parse(R"(["h.1"])"), "h.1 alone, " + precision, 1);
    expect_the_same_bits(config, "h\\.[02]", "a pattern, " + precision, 1);
  }
  // The masks matter: the run without dropout ends elsewhere.
  Json without = config;
  without["model"]["dropout"] = 0.0;
  Trainer a(config), b(without);
  a.fit(), b.fit();
  EXPECT_GT(max_difference(a.whole_parameters(), b.whole_parameters()), 1e-4);
}

// Ranks as threads share one generator, so these runs have no dropout; every
// mode, SAM's two passes, the resnet's BatchNorm statistics (not updated a
// second time by the recompute) and the cnn's layers.
TEST(ActivationCheckpointingTest, EveryModeEqualsTheRunWithoutItBitForBit) {
  test::TempDir dir;
  test::write_text(dir.file("corpus.txt"), corpus());
  for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
    expect_the_same_bits(gpt_job(dir.file("corpus.txt"), mode, 0.0), true, "gpt under " + mode, 2);
    Json llama = gpt_job(dir.file("corpus.txt"), mode, 0.0);
    llama["model"] = Json::parse(R"({"name": "llama", "hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4,
                                     "num_key_value_heads": 2})");
    expect_the_same_bits(llama, true, "llama under " + mode, 2);
    Json config = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", mode);
    config["max_steps"] = 3;
    config["data"]["microbatches"] = 2;
    for (const char* model : {R"({"name": "resnet", "width": 4, "blocks": [1, 1]})",
                              R"({"name": "cnn", "channels": [4, 6], "hidden": 8})"}) {
      config["model"] = Json::parse(model);
      expect_the_same_bits(config, true, std::string(model) + " under " + mode, 2);
    }
  }
  Json bf16 = test::sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  bf16["precision"] = "amp_bf16";
  bf16["parallel"]["mixed_precision"] = Json::parse(R"({"param_dtype": "bf16", "buffers": true})");
  bf16["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1, 1]})");
  expect_the_same_bits(bf16, true, "resnet under zero3 with bf16 gathers", 2);
}

/// The CPU allocator counts bytes while this lives; LibTorch's is back after
/// it (left in place, the counting would slow every later test of a process
/// that runs them all).
class CountedAllocations {
 public:
  CountedAllocations() : previous_(c10::GetCPUAllocator()), tracker_(bench::TrackingAllocator::install()) {
    c10::SetCPUAllocator(&tracker_, /*priority=*/100);
  }
  ~CountedAllocations() { c10::SetCPUAllocator(previous_, /*priority=*/100); }
  CountedAllocations(const CountedAllocations&) = delete;
  CountedAllocations& operator=(const CountedAllocations&) = delete;
  std::size_t current() const { return tracker_.current(); }

 private:
  c10::Allocator* previous_;
  bench::TrackingAllocator& tracker_;
};

/// Bytes the CPU allocator holds after the gpt's forward (its graph alive),
/// above what it held before.
int64_t held_after_forward(int64_t layers, bool recomputed) {
  const CountedAllocations tracker;
  at::manual_seed(0);
  Params params(Json{{"n_layer", layers}, {"n_head", 4}, {"n_embd", 64}, {"dropout", 0.1}}, "model");
  auto model = model_registry().create("gpt", params, DatasetInfo{{32}, 50});
  std::vector<bool> flags(model->units().size());  // the blocks (the token embedding is never recomputed)
  for (std::size_t u = 0; u < flags.size(); ++u) flags[u] = recomputed && model->recomputable(u);
  model->set_recomputed_units(flags);
  model->train();
  const at::Tensor ids = at::randint(0, 50, {8, 32}, at::kLong);
  const auto before = static_cast<int64_t>(tracker.current());
  const at::Tensor logits = model->run(ids);
  const auto held = static_cast<int64_t>(tracker.current()) - before;
  logits.sum().backward();  // the graph runs, recomputes and all
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
  return held;
}

// What backward keeps from a checkpointed block is its input, a [8, 32, 64]
// fp32 tensor, and the generator's state for its recompute: two blocks more
// hold exactly two of each more. Without checkpointing each block keeps many
// times that (its LayerNorms', attention's and MLP's activations).
TEST(ActivationCheckpointingTest, ACheckpointedBlockHoldsExactlyItsInputForBackward) {
  const int64_t input = 8 * 32 * 64 * 4;
  const int64_t state = at::detail::getDefaultCPUGenerator().get_state().nbytes();
  const int64_t kept = held_after_forward(4, true) - held_after_forward(2, true);
  EXPECT_EQ(kept, 2 * (input + state));
  const int64_t all = held_after_forward(4, false) - held_after_forward(2, false);
  EXPECT_GE(all, 8 * kept) << "without checkpointing two blocks keep " << all << " bytes";
}

// Under zero3 the recompute uses the gather backward makes anyway: the same
// bytes move with and without it, and no more than two units are whole at once.
TEST(ActivationCheckpointingTest, UnderZeroThreeTheRecomputeGathersNothingMore) {
  test::TempDir dir;
  test::write_text(dir.file("corpus.txt"), corpus());
  Json config = gpt_job(dir.file("corpus.txt"), "zero3", 0.0);
  std::map<bool, double> moved;
  std::map<bool, int64_t> peak;
  for (const bool recomputed : {false, true}) {
    config["parallel"]["activation_checkpointing"] = recomputed;
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      test::fully_sharded_of(trainer)->reset_peak();
      const double before = communicator->bytes_moved();
      trainer.fit();
      if (rank != 0) return;
      moved[recomputed] = communicator->bytes_moved() - before;
      peak[recomputed] = test::fully_sharded_of(trainer)->peak_gathered_bytes();
    });
  }
  EXPECT_GT(moved[false], 0);
  EXPECT_EQ(moved[true], moved[false]);
  EXPECT_EQ(peak[true], peak[false]);
}

TEST(ActivationCheckpointingTest, TheKeyNamesWhatIsWrongAndListsTheUnits) {
  test::TempDir dir;
  test::write_text(dir.file("corpus.txt"), corpus());
  Json config = gpt_job(dir.file("corpus.txt"), "none", 0.0);
  auto refusal = [&](const Json& value) {
    config["parallel"]["activation_checkpointing"] = value;
    return test::trainer_config_error(config);
  };
  std::string message = refusal(Json::parse(R"(["h.0", "h.7"])"));
  EXPECT_NE(message.find("parallel.activation_checkpointing"), std::string::npos) << message;
  EXPECT_NE(message.find("\"h.7\""), std::string::npos) << message;
  EXPECT_NE(message.find("h.0, h.1, h.2"), std::string::npos) << message;
  message = refusal(Json::parse(R"(["wte"])"));  // the token embedding: a unit, never recomputed
  EXPECT_NE(message.find("\"wte\" is a unit it cannot apply to"), std::string::npos) << message;
  EXPECT_EQ(message.find("wte,"), std::string::npos) << "listed among those it can name: " << message;
  message = refusal("block.*");
  EXPECT_NE(message.find("matches no unit"), std::string::npos) << message;
  EXPECT_NE(message.find("h.0, h.1, h.2"), std::string::npos) << message;
  message = refusal(3);
  EXPECT_NE(message.find("parallel.activation_checkpointing"), std::string::npos) << message;
  EXPECT_NE(message.find("a list of unit names or a pattern"), std::string::npos) << message;
  message = refusal("h.[");
  EXPECT_NE(message.find("regular expression"), std::string::npos) << message;
}

}  // namespace
}  // namespace basin

// Cross-entropy over token targets ([n, T] next tokens, [n, T, V] logits):
// the loss's functions against log-softmax by hand, and a step's gradient as
// the mean over every counted token of the step, whatever the microbatches
// and ranks: SGD and SAM on a gpt, on one rank in one batch, and on 2 ranks in
// 2 microbatches each (ddp, zero2, zero3), with ignored tokens spread
// unevenly, all equal to a step computed by hand with plain LibTorch; and
// ESAM's choice of sequences and its reported loss.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/loss.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

constexpr int64_t kVocabulary = 11;
constexpr int64_t kTokens = 6;

Loss loss_of(const Json& value) {
  Json root{{"loss", value}};
  Params params(root, "");
  return Loss::from_config(params);
}

TEST(TokenLossTest, CrossEntropyOverTokensIsTheMeanOverTheCountedOnes) {
  at::manual_seed(0);
  const at::Tensor logits = at::randn({3, 4, 5});
  at::Tensor targets = at::randint(0, 5, {3, 4}, at::kLong);
  targets[0][1] = -1;
  targets[2][0] = -1;
  targets[2][2] = -1;
  targets[2][3] = -1;
  const Loss loss = loss_of({{"name", "cross_entropy"}, {"ignore_index", -1}});
  // By hand: -log softmax at the target, for the tokens that count.
  const at::Tensor log_p = logits.log_softmax(-1);
  double sum = 0;
  int64_t counted = 0, correct = 0;
  std::vector<double> per_sample(3, 0.0);
  std::vector<int64_t> per_sample_count(3, 0);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t y = targets[i][t].item<int64_t>();
      if (y == -1) continue;
      const double term = -log_p[i][t][y].item<double>();
      sum += term;
      per_sample[static_cast<std::size_t>(i)] += term;
      ++per_sample_count[static_cast<std::size_t>(i)];
      ++counted;
      correct += logits[i][t].argmax().item<int64_t>() == y;
    }
  }
  EXPECT_EQ(loss.count(targets), counted);
  EXPECT_EQ(counted, 8);
  EXPECT_NEAR(loss.sum(logits, targets).item<double>(), sum, 1e-5);
  EXPECT_NEAR(loss.mean(logits, targets).item<double>(), sum / static_cast<double>(counted), 1e-6);
  EXPECT_EQ(loss.correct(logits, targets).item<int64_t>(), correct);
  const at::Tensor each = loss.per_sample(logits, targets);
  ASSERT_EQ(each.sizes(), (std::vector<int64_t>{3}));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(each[static_cast<int64_t>(i)].item<double>(), per_sample[i] / static_cast<double>(per_sample_count[i]), 1e-6);
  }
  // The default ignore_index is -100, as in PyTorch.
  EXPECT_EQ(loss_of("cross_entropy").ignore_index(), -100);
}

/// 16 windows of kTokens ids; samples 0-2 keep one target each and sample 9
/// keeps two, the rest all: every rank's microbatches count differently.
void write_token_data(const std::string& path, const std::vector<int64_t>& one_target = {0, 1, 2}) {
  at::manual_seed(7);
  const at::Tensor x = at::randint(0, kVocabulary, {16, kTokens}, at::kLong);
  at::Tensor y = at::randint(0, kVocabulary, {16, kTokens}, at::kLong);
  for (int64_t i : one_target) y[i].slice(0, 1).fill_(-100);
  y[9].slice(0, 2).fill_(-100);
  c10::Dict<std::string, at::Tensor> saved;
  saved.insert("x", x);
  saved.insert("y", y);
  write_torch_save_file(path, saved);
}

Json gpt_config(const std::string& data, int64_t batch, int64_t microbatches) {
  return Json{{"seed", 5},
              {"threads", 1},
              {"max_steps", 1},
              {"data", {{"name", "tensors"}, {"train", data}, {"test", data}, {"batch_size", batch},
                        {"microbatches", microbatches}, {"shuffle", false}}},
              {"model", {{"name", "gpt"}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 8}}},
              {"optimizer", {{"name", "sgd"}, {"lr", 0.5}}}};
}

/// The gpt the trainer builds for `config` (same seed, same draws), and the data.
struct Reference {
  std::shared_ptr<Model> model;
  at::Tensor x, y;

  explicit Reference(const Json& config) {
    const c10::IValue saved = read_torch_save_file(config["data"]["train"].get<std::string>(), "data.train");
    x = saved.toGenericDict().at("x").toTensor();
    y = saved.toGenericDict().at("y").toTensor();
    at::manual_seed(config["seed"].get<uint64_t>());
    Json keys = config["model"];
    keys.erase("name");  // the trainer reads it to pick the factory
    Params params(keys, "model");
    model = model_registry().create("gpt", params, DatasetInfo{{kTokens}, kVocabulary});
  }

  /// Gradient of the mean cross-entropy over every counted token of the batch, at `weights`.
  test::Weights gradient_at(const test::Weights& weights) { return gradient_of_sum(weights, 0, 16, counted(0, 16)); }

  /// Gradient of the cross-entropy summed over the counted tokens of samples [begin, end), over `divisor`.
  test::Weights gradient_of_sum(const test::Weights& weights, int64_t begin, int64_t end, double divisor) {
    return gradient_over(weights, at::arange(begin, end), divisor);
  }

  /// The same over the samples `rows` picks.
  test::Weights gradient_over(const test::Weights& weights, const at::Tensor& rows, double divisor) {
    auto params = load(weights);
    model->zero_grad();
    const at::Tensor logits = model->forward(x.index_select(0, rows));
    (at::cross_entropy_loss(logits.reshape({-1, kVocabulary}), y.index_select(0, rows).reshape({-1}), {},
                            at::Reduction::Sum, -100) / divisor)
        .backward();
    test::Weights grads;
    for (const auto& p : params) grads.push_back(p.grad().clone());
    return grads;
  }

  /// Each sample's cross-entropy summed over its counted tokens, at `weights`.
  at::Tensor sequence_sums(const test::Weights& weights) {
    load(weights);
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(x);
    return at::cross_entropy_loss(logits.reshape({-1, kVocabulary}), y.reshape({-1}), {}, at::Reduction::None, -100)
        .view(y.sizes())
        .sum(1)
        .to(at::kDouble);
  }

  std::vector<at::Tensor> load(const test::Weights& weights) {
    auto params = model->parameters();
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(weights[i]);
    return params;
  }

  double counted(int64_t begin, int64_t end) const { return y.slice(0, begin, end).ne(-100).sum().item<double>(); }

  test::Weights weights() {
    test::Weights copies;
    for (const auto& p : model->parameters()) copies.push_back(p.detach().clone());
    return copies;
  }
};

test::Weights sgd_by_hand(Reference& reference, double lr) {
  const test::Weights w = reference.weights();
  const test::Weights g = reference.gradient_at(w);
  test::Weights next;
  for (std::size_t i = 0; i < w.size(); ++i) next.push_back(w[i] - lr * g[i]);
  return next;
}

/// SAM's ascent: w + rho g / (||g|| + 1e-12).
test::Weights ascend(const test::Weights& w, const test::Weights& g, double rho) {
  double squares = 0;
  for (const auto& t : g) squares += t.pow(2).sum().item<double>();
  test::Weights ascended;
  for (std::size_t i = 0; i < w.size(); ++i) ascended.push_back(w[i] + rho / (std::sqrt(squares) + 1e-12) * g[i]);
  return ascended;
}

/// SAM (Foret et al.): the gradient at w + rho g / ||g||, stepped from w.
test::Weights sam_by_hand(Reference& reference, double lr, double rho) {
  const test::Weights w = reference.weights();
  const test::Weights g_at_ascended = reference.gradient_at(ascend(w, reference.gradient_at(w), rho));
  test::Weights next;
  for (std::size_t i = 0; i < w.size(); ++i) next.push_back(w[i] - lr * g_at_ascended[i]);
  return next;
}

/// SAM with each rank's own ascent (the default): rank r ascends along the
/// mean over its own counted tokens, and the descent is the mean over every
/// counted token of the step, each rank's taken at its own w + e_r.
test::Weights rank_local_sam_by_hand(Reference& reference, double lr, double rho) {
  const test::Weights w = reference.weights();
  const double all = reference.counted(0, 16);
  test::Weights step(w.size());
  for (int64_t rank = 0; rank < 2; ++rank) {
    const int64_t begin = rank * 8, end = begin + 8;
    const test::Weights g = reference.gradient_of_sum(w, begin, end, reference.counted(begin, end));
    const test::Weights ascended = ascend(w, g, rho);
    const test::Weights descent = reference.gradient_of_sum(ascended, begin, end, all);
    for (std::size_t i = 0; i < w.size(); ++i) step[i] = rank == 0 ? descent[i] : step[i] + descent[i];
  }
  test::Weights next;
  for (std::size_t i = 0; i < w.size(); ++i) next.push_back(w[i] - lr * step[i]);
  return next;
}

/// ESAM with every tensor perturbed (beta 1) and gamma 0.5: the ascent along
/// the batch's token mean; the 8 sequences whose token sums rose most from w
/// to w + e (what each adds to the step's mean, not its own mean); the
/// descent at w + e on their mean, stepped from w.
test::Weights esam_by_hand(Reference& reference, double lr, double rho) {
  const test::Weights w = reference.weights();
  const test::Weights ascended = ascend(w, reference.gradient_at(w), rho);
  const at::Tensor rise = reference.sequence_sums(ascended) - reference.sequence_sums(w);
  const at::Tensor chosen = std::get<0>(std::get<1>(at::topk(rise, 8)).sort());
  // The data tells the two rankings apart: by each sequence's own mean, another 8 would descend.
  const at::Tensor tokens = reference.y.ne(-100).sum(1).to(at::kDouble);
  const at::Tensor by_mean = std::get<0>(std::get<1>(at::topk(rise / tokens, 8)).sort());
  EXPECT_FALSE(at::equal(chosen, by_mean)) << "the test data no longer separates sums from means";
  const double counted = reference.y.index_select(0, chosen).ne(-100).sum().item<double>();
  const test::Weights g = reference.gradient_over(ascended, chosen, counted);
  test::Weights next;
  for (std::size_t i = 0; i < w.size(); ++i) next.push_back(w[i] - lr * g[i]);
  return next;
}

/// Each step's loss as the trainer reports it.
class StepLosses : public Callback {
 public:
  std::string name() const override { return "step_losses"; }
  bool on_batch_end(const State& state, Logger&) override { return losses.push_back(state.step_loss.item<double>()), false; }
  std::vector<double> losses;
};

void expect_step_is_the_whole_batch_mean(const Json& extra, const test::Weights& expected, const std::string& what) {
  test::TempDir dir;
  write_token_data(dir.file("tokens.pt"));
  for (const std::string mode : {"none", "ddp", "zero2", "zero3"}) {
    const int world = mode == "none" ? 1 : 2;
    Json config = gpt_config(dir.file("tokens.pt"), 16 / world, mode == "none" ? 1 : 2);
    config.merge_patch(extra);
    if (world > 1) config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
    const auto weights = test::train_on_ranks(world, config);
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_LT(test::max_difference(weights[static_cast<std::size_t>(rank)], expected), 1e-6)
          << what << " under " << mode << " on rank " << rank;
    }
  }
}

TEST(TokenLossTest, AStepMeansEveryCountedTokenAcrossMicrobatchesAndRanks) {
  test::TempDir dir;
  write_token_data(dir.file("tokens.pt"));
  Reference reference(gpt_config(dir.file("tokens.pt"), 16, 1));
  expect_step_is_the_whole_batch_mean(Json::object(), sgd_by_hand(reference, 0.5), "SGD");
}

TEST(TokenLossTest, SamWithASyncedAscentMeansEveryCountedTokenInBothPasses) {
  test::TempDir dir;
  write_token_data(dir.file("tokens.pt"));
  Reference reference(gpt_config(dir.file("tokens.pt"), 16, 1));
  expect_step_is_the_whole_batch_mean(Json::parse(R"({"algorithms": {"sam": {"rho": 0.2, "sync_ascent": true}}})"),
                                      sam_by_hand(reference, 0.5, 0.2), "SAM");
}

TEST(TokenLossTest, SamWithRankLocalAscentsAscendsOnEachRanksTokensAndDescendsOnAll) {
  test::TempDir dir;
  write_token_data(dir.file("tokens.pt"));
  Reference reference(gpt_config(dir.file("tokens.pt"), 16, 1));
  const test::Weights expected = rank_local_sam_by_hand(reference, 0.5, 0.2);
  for (const std::string mode : {"ddp", "zero2"}) {
    Json config = gpt_config(dir.file("tokens.pt"), 8, 2);
    config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.2}})");
    config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
    const auto weights = test::train_on_ranks(2, config);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(test::max_difference(weights[static_cast<std::size_t>(rank)], expected), 1e-6)
          << "rank-local SAM under " << mode << " on rank " << rank;
    }
  }
}

TEST(TokenLossTest, EsamRanksSequencesByWhatTheyAddToTheTokenMeanAndReportsThatMean) {
  test::TempDir dir;
  write_token_data(dir.file("tokens.pt"), {0, 2, 4, 6, 8, 10, 12, 14});  // half the sequences one token long
  Json config = gpt_config(dir.file("tokens.pt"), 16, 2);
  config["algorithms"] = Json::parse(R"({"esam": {"rho": 0.2, "beta": 1, "gamma": 0.5}})");
  Reference reference(config);
  const test::Weights w = reference.weights();
  const double mean_at_w = reference.sequence_sums(w).sum().item<double>() / reference.counted(0, 16);
  const test::Weights expected = esam_by_hand(reference, 0.5, 0.2);
  auto losses = std::make_shared<StepLosses>();
  Trainer trainer(config, {losses});
  trainer.fit();
  EXPECT_LT(test::max_difference(test::weights_of(trainer), expected), 1e-6);
  ASSERT_EQ(losses->losses.size(), 1u);
  EXPECT_NEAR(losses->losses.front(), mean_at_w, 1e-5) << "the step's loss is the token mean at w";
}

}  // namespace
}  // namespace basin

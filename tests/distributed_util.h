#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <string>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "basin/core/communication/communicator.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/train/trainer.h"
#include "test_util.h"

namespace basin::test {

/// Runs `body(rank, communicator)` on `world` threads joined by a Gloo group
/// over a HashStore, as PyTorch's own c10d tests do; rethrows the first
/// exception a rank threw. Collectives time out after 60 s, so a bug fails
/// instead of hanging.
inline void run_ranks(int world, const std::function<void(int, std::shared_ptr<Communicator>)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::string> messages(static_cast<std::size_t>(world));
  // Every rank's group is made before any body runs: a body that ends at once
  // (a config refused) would close its connections while a peer still
  // connects, and the peer would fail with Gloo's "Connection closed by peer".
  std::mutex made_lock;
  std::condition_variable all_made;
  int made = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        std::shared_ptr<Communicator> communicator;
        try {
          communicator = make_gloo_communicator(store, rank, world, std::chrono::seconds(60));
        } catch (...) {
          std::lock_guard<std::mutex> hold(made_lock);
          ++made;
          all_made.notify_all();
          throw;
        }
        {
          std::unique_lock<std::mutex> hold(made_lock);
          ++made;
          all_made.notify_all();
          all_made.wait(hold, [&] { return made == world; });
        }
        body(rank, std::move(communicator));
      } catch (const std::exception& error) {
        messages[static_cast<std::size_t>(rank)] = error.what();
        errors[static_cast<std::size_t>(rank)] = std::current_exception();
      } catch (...) {
        errors[static_cast<std::size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Ranks that failed differently: each one's reason, since the one rethrown
  // may be a peer's "connection closed".
  std::vector<std::string> distinct;
  for (const auto& m : messages) {
    if (!m.empty() && std::find(distinct.begin(), distinct.end(), m) == distinct.end()) distinct.push_back(m);
  }
  if (distinct.size() > 1) {
    for (int rank = 0; rank < world; ++rank) {
      if (!messages[static_cast<std::size_t>(rank)].empty()) {
        std::fprintf(stderr, "rank %d of %d threw: %s\n", rank, world, messages[static_cast<std::size_t>(rank)].c_str());
      }
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

using Weights = std::vector<at::Tensor>;

/// The model's parameters whole (gathered under zero3: collective then).
inline Weights weights_of(Trainer& trainer) { return trainer.whole_parameters(); }

inline double max_difference(const Weights& a, const Weights& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

/// The smoke config for 5 steps with `sam` (a JSON object) as SAM's keys, under `mode`.
inline Json sam_config(const std::string& sam, const std::string& mode) {
  Json config = smoke_config();
  config["max_steps"] = 5;
  config["algorithms"] = Json::parse(R"({"sam": )" + sam + "}");
  config["parallel"] = Json::parse(R"({"mode": ")" + mode + R"(", "timeout_seconds": 60})");
  return config;
}

/// Trains `config` on `world` ranks; returns each rank's final weights.
inline std::vector<Weights> train_on_ranks(int world, const Json& config,
                                           const std::function<void(int, Trainer&)>& setup = nullptr) {
  std::vector<Weights> result(static_cast<std::size_t>(world));
  run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    if (setup) setup(rank, trainer);
    trainer.fit();
    result[static_cast<std::size_t>(rank)] = weights_of(trainer);
  });
  return result;
}

/// Makes one backward (of `pass` at `step`) produce inf in the first element
/// of one parameter's gradient (`last`: the model's last parameter, else its
/// first), from a hook on that gradient: the inf is in the gradient before
/// the ranks sync it, as an overflow in backward is. Added to one rank only.
class InjectOverflowInBackward : public Algorithm {
 public:
  InjectOverflowInBackward(int64_t step, Pass pass, bool last) : step_(step), pass_(pass), last_(last) {}
  std::string name() const override { return "inject_overflow"; }
  bool match(Event event, const State& state) const override {
    return (event == Event::BEFORE_BACKWARD || event == Event::AFTER_BACKWARD) && state.timestamp.step == step_ &&
           state.pass == pass_;
  }
  void apply(Event event, State& state, Logger&) override {
    if (event == Event::AFTER_BACKWARD) {
      param_.remove_hook(hook_);
      return;
    }
    param_ = last_ ? state.model->parameters().back() : state.model->parameters().front();
    hook_ = param_.register_hook([](const at::Tensor& grad) {
      at::Tensor overflowed = grad.clone();
      overflowed.view(-1)[0] = INFINITY;
      return overflowed;
    });
  }

 private:
  int64_t step_;
  Pass pass_;
  bool last_;
  at::Tensor param_;
  unsigned hook_ = 0;
};

}  // namespace basin::test

// ZeRO-3's runs: the model's forward and its units' runs, in the order
// they ran, which the gathers ahead follow; lookups into a table (see the header).
#include "basin/core/parallel/zero3/fully_sharded_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "basin/core/parallel/zero3/fully_sharded_unit.h"

namespace basin {

at::Tensor FullyShardedModel::run_model(const std::function<at::Tensor()>& forward) {
  const bool graph = at::GradMode::is_enabled();
  bool awaited = false;  // by an earlier forward's backward
  // Without a graph, or when the forward failed, nothing stays whole but a
  // root that an earlier forward's backward still needs (an evaluation
  // between a forward and its backward must not free what backward reads).
  auto release_all = [&] {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    root_awaits_backward_ = awaited;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if (u != declared_ || !awaited) drop(u);  // with any gather issued ahead
    }
  };
  at::Tensor out;
  try {
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      // The last forward's last run, held for a backward that did not come
      // first (an evaluation between them: that backward gathers it again).
      if (held_to_next_run_) release(*held_to_next_run_);
      if (runs_ && !runs_->empty()) previous_runs_ = *runs_;
      runs_ = std::make_shared<Runs>();
      loose_runs_ = false;
      if (graph) graph_runs_ = runs_;
      awaited = root_awaits_backward_;
      gather(declared_);  // the root: whole until its backward (or the forward's end, without autograd)
      if (graph) root_awaits_backward_ = true;
    }
    out = forward();
  } catch (...) {
    release_all();
    throw;
  }
  if (!graph) release_all();
  return out;
}

std::size_t FullyShardedModel::note_run(std::size_t u, bool read_in_backward) {
  if (!runs_) {  // units run without run_model (a loop of your own): prepare_for_backward ends their forward
    runs_ = std::make_shared<Runs>();
    loose_runs_ = true;
  }
  if (held_to_next_run_ && *held_to_next_run_ != u) release(*held_to_next_run_);  // before this run gathers
  held_to_next_run_.reset();
  runs_->push_back(Run{u, read_in_backward});
  return runs_->size() - 1;
}

std::vector<std::size_t> FullyShardedModel::gather_ahead(std::size_t position, std::size_t u) {
  std::vector<std::size_t> ahead;
  const auto most = static_cast<std::size_t>(options_.forward_prefetch);
  if (position < previous_runs_.size() && previous_runs_[position].unit == u) {
    // The previous forward came this way: the runs that followed this one there.
    for (std::size_t next = position + 1; next < previous_runs_.size() && next <= position + most; ++next) {
      ahead.push_back(previous_runs_[next].unit);
    }
  } else if (std::count_if(runs_->begin(), runs_->end(), [u](const Run& run) { return run.unit == u; }) == 1) {
    // The first forward: the units declared next, from a unit's first run (a
    // tied head's second run would gather the first block for nothing).
    for (std::size_t next = u + 1; next < declared_ && next <= u + most; ++next) ahead.push_back(next);
  }
  for (const std::size_t next : ahead) start_gather(next);
  return ahead;
}

void FullyShardedModel::reached_in_backward(const Runs& runs, std::size_t position) {
  // A looked-up unit's gradient waits for the lookup's backward, the last
  // of all, but its parameters are read by no node once backward has passed
  // every other run of it (in a chain, a run's output gradient is whole
  // only once every later run's backward is done). Freed before this run's
  // gather, so that no more than two units are whole here either.
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::size_t v = runs[i].unit;
    if (runs[i].read_in_backward || v == runs[position].unit) continue;  // not a lookup
    const bool passed = std::none_of(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(position + 1),
                                     [v](const Run& run) { return run.unit == v && run.read_in_backward; });
    if (passed) release(v);
  }
  // The forward's last run, kept whole for this: backward takes it over
  // (any other such unit waits for its own run's turn, freed).
  if (held_to_next_run_ && *held_to_next_run_ != runs[position].unit) release(*held_to_next_run_);
  held_to_next_run_.reset();
  gather(runs[position].unit);
  // Backward runs them in reverse: the reading runs before this one, issued ahead.
  std::size_t issued = 0;
  for (std::size_t q = position; q-- > 0 && issued < static_cast<std::size_t>(options_.backward_prefetch);) {
    if (!runs[q].read_in_backward) continue;
    start_gather(runs[q].unit);
    ++issued;
  }
}

at::Tensor FullyShardedModel::run_unit(std::size_t u, const std::function<at::Tensor()>& forward) {
  if (u >= declared_) throw std::logic_error("zero3: unit " + std::to_string(u) + " was never declared");
  std::vector<std::size_t> ahead;
  std::shared_ptr<Runs> runs;  // this forward's, whatever runs_ is once it returns
  std::size_t position = 0;
  at::Tensor out;
  try {
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      position = note_run(u, /*read_in_backward=*/true);
      runs = runs_;
      gather(u);
      ahead = gather_ahead(position, u);  // while this one computes
    }
    out = forward();
  } catch (...) {  // the unit, and the gathers issued ahead, freed: a failed forward holds nothing
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    drop(u);
    for (const std::size_t held : ahead) drop(held);
    throw;
  }
  const bool has_backward = at::GradMode::is_enabled() && out.requires_grad() && out.grad_fn();
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  (*runs)[position].read_in_backward = has_backward;
  if (has_backward) {
    // Backward reaches the unit's output before any of the unit's own
    // operations: the parameters they saved are gathered again then (and
    // the runs before it ahead, as backward runs them in reverse).
    out.register_hook([this, runs = std::shared_ptr<const Runs>(runs), position](const at::Tensor&) {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      reached_in_backward(*runs, position);
    });
  }
  // Kept whole to its backward when asked (no second gather); its gradients' hooks free it.
  if (!has_backward) {
    release(u);
  } else if (options_.reshard_after_forward) {
    // Freed as the next run starts. Backward begins with the forward's last
    // run: for that one no run comes, and backward finds it whole.
    held_to_next_run_ = u;
  }
  return out;
}

void FullyShardedModel::check_lookup(std::size_t u, const at::Tensor& out) const {
  // Backward must not need the parameters a lookup frees: an embedding's
  // gradient is built from the ids alone, and goes straight to the table's
  // accumulator; any other operation, before or after it, may have saved them.
  const auto& node = out.grad_fn();
  if (!node) return;  // a frozen table: no backward
  std::string culprit = node->name().rfind("EmbeddingBackward", 0) == 0 ? "" : node->name();
  for (const auto& edge : node->next_edges()) {
    const torch::autograd::Node* next = edge.function.get();
    const bool table = next == nullptr || std::any_of(units_[u]->params.begin(), units_[u]->params.end(), [&](std::size_t i) {
                         return torch::autograd::impl::try_get_grad_accumulator(full_[i]).get() == next;
                       });
    if (culprit.empty() && !table) culprit = next->name() + " (before the embedding)";
  }
  if (!culprit.empty()) {
    throw std::logic_error("zero3: unit '" + units_[u]->name + "' ran a lookup whose result comes from " + culprit +
                           ", not from an embedding of the unit's own table (at::embedding(weight, ids)); run it with unit()");
  }
}

at::Tensor FullyShardedModel::run_lookup(std::size_t u, const std::function<at::Tensor()>& forward) {
  if (u >= declared_) throw std::logic_error("zero3: unit " + std::to_string(u) + " was never declared");
  std::vector<std::size_t> ahead;
  at::Tensor out;
  try {
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      const std::size_t position = note_run(u, /*read_in_backward=*/false);
      gather(u);
      ahead = gather_ahead(position, u);
    }
    out = forward();
    check_lookup(u, out);
  } catch (...) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    drop(u);
    for (const std::size_t held : ahead) drop(held);
    throw;
  }
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // Kept whole to the backward when asked, as every unit is: its tied head then needs no gather.
  if (options_.reshard_after_forward || !at::GradMode::is_enabled()) release(u);
  return out;
}

at::Tensor FullyShardedModel::recompute_unit(std::size_t u, const std::function<at::Tensor()>& forward) {
  if (u >= declared_) throw std::logic_error("zero3: unit " + std::to_string(u) + " was never declared");
  {
    // Its output's hook gathered it as backward reached it; its gradients' hooks free it.
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    gather(u);
  }
  return forward();
}

}  // namespace basin

#include "basin/core/checkpoint/sharded_checkpoint.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/optim/optimizer_state.h"

namespace basin {

namespace {

StateDict dict_at(const StateDict& dict, const std::string& key, const std::string& file) {
  if (!dict.contains(key) || !dict.at(key).isGenericDict()) {
    throw CheckpointError("checkpoint '" + file + "' has no '" + key + "' dict");
  }
  return dict.at(key).toGenericDict();
}

std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream text;
  text << shape;
  return text.str();
}

/// Each rank's rows of one tensor, in rank order, as one tensor of `shape`.
at::Tensor join_rows(const std::vector<at::Tensor>& rows, c10::IntArrayRef shape, const std::string& what) {
  at::Tensor whole = at::cat(rows, 0);
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  if (whole.numel() != numel) throw CheckpointError(what + ": the ranks' rows do not make its shape");
  return whole.reshape(shape);
}

/// The rows of `whole` (of `shape`) that `rank` of `world_size` holds, as
/// FullyShardedModel cuts its shards.
at::Tensor cut_rows(const at::Tensor& whole, const std::vector<int64_t>& shape, int rank, int world_size) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t width = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) width *= shape[d];
  const int64_t each = (rows + world_size - 1) / world_size;
  std::vector<int64_t> piece = shape.empty() ? std::vector<int64_t>{1} : shape;
  piece[0] = std::clamp<int64_t>(rows - rank * each, 0, each);
  return whole.reshape({rows, width}).narrow(0, std::min(rows, rank * each), piece[0]).clone().view(piece);
}

/// The ranks' per-parameter states (`ranks[r]`: its rows' state by index),
/// each parameter's state whole; `where` names them in errors.
ParameterStates join_states(const std::vector<ParameterStates>& ranks, const std::vector<std::string>& numbering,
                            const StateDict& shapes, const std::string& where) {
  std::set<int64_t> indices;
  for (const auto& states : ranks) {
    for (const auto& entry : states) indices.insert(entry.key().toInt());
  }
  ParameterStates whole = new_parameter_states();
  for (const int64_t index : indices) {
    if (index < 0 || index >= static_cast<int64_t>(numbering.size())) {
      throw CheckpointError(where + " of an unknown parameter " + std::to_string(index));
    }
    const std::string& name = numbering[static_cast<std::size_t>(index)];
    const auto shape = shapes.at(name).toIntVector();
    std::vector<StateDict> held;  // the ranks that hold rows of it, in rank order
    for (const auto& states : ranks) {
      if (states.contains(index)) held.push_back(states.at(index).toGenericDict());
    }
    std::vector<std::string> keys;  // every rank's, in the order first seen
    for (const auto& state : held) {
      for (const auto& item : state) {
        if (std::find(keys.begin(), keys.end(), item.key().toStringRef()) == keys.end()) keys.push_back(item.key().toStringRef());
      }
    }
    StateDict joined = new_state_dict();
    for (const std::string& key : keys) {
      const auto first = std::find_if(held.begin(), held.end(), [&](const StateDict& state) { return state.contains(key); });
      const c10::IValue& value = first->at(key);
      // Per-element state (moments, momentum, a rule's buffers) has the shard's rows; a count is every rank's.
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        joined.insert(key, value);
        continue;
      }
      std::vector<at::Tensor> rows;
      for (const auto& state : held) {
        if (!state.contains(key)) throw CheckpointError(where + " of '" + name + "' lacks '" + key + "' on a rank");
        rows.push_back(state.at(key).toTensor());
      }
      joined.insert(key, join_rows(rows, shape, where + " '" + key + "' of '" + name + "'"));
    }
    whole.insert(index, joined);
  }
  return whole;
}

/// This rank's rows of each whole per-parameter state.
ParameterStates cut_states(const ParameterStates& whole, const RowsLayout& layout, const std::string& where) {
  ParameterStates own = new_parameter_states();
  for (const auto& entry : whole) {
    const int64_t index = entry.key().toInt();
    if (index < 0 || index >= static_cast<int64_t>(layout.numbering.size())) {
      throw CheckpointError(where + " of parameter " + std::to_string(index) + ", and this run's optimizer has " +
                            std::to_string(layout.numbering.size()));
    }
    const std::string& name = layout.numbering[static_cast<std::size_t>(index)];
    const auto& shape = layout.shapes.at(name);
    StateDict cut = new_state_dict();
    for (const auto& item : entry.value().toGenericDict()) {
      const c10::IValue& value = item.value();
      if (!value.isTensor() || (value.toTensor().dim() == 0 && !shape.empty())) {
        cut.insert(item.key(), value);
        continue;
      }
      if (value.toTensor().sizes() != c10::IntArrayRef(shape)) {
        throw CheckpointError(where + " '" + item.key().toStringRef() + "' of '" + name + "' has shape " +
                              shape_text(value.toTensor().sizes()) + ", the parameter " + shape_text(shape));
      }
      cut.insert(item.key(), cut_rows(value.toTensor(), shape, layout.rank, layout.world_size));
    }
    own.insert(index, cut);
  }
  return own;
}

/// `algorithms` with each rule's per-parameter state ("parameters") made by `change`.
template <class Change>
StateDict with_rule_states(const StateDict& algorithms, Change&& change) {
  StateDict changed = algorithms.copy();
  for (const auto& entry : algorithms) {
    if (!entry.value().isGenericDict()) continue;
    const StateDict rule = entry.value().toGenericDict();
    if (!rule.contains("parameters") || !rule.at("parameters").isGenericDict()) continue;
    StateDict copy = rule.copy();
    copy.insert_or_assign("parameters", change(entry.key().toStringRef()));
    changed.insert_or_assign(entry.key(), copy);
  }
  return changed;
}

}  // namespace

StateDict consolidate_checkpoint(const std::string& manifest_path) {
  const StateDict manifest = read_checkpoint_file(manifest_path);
  if (!is_sharded_checkpoint(manifest)) {
    throw CheckpointError("checkpoint '" + manifest_path + "' is whole already (not a zero3 manifest)");
  }
  const auto files = rank_files(manifest_path, manifest);
  std::vector<StateDict> ranks;
  for (std::size_t r = 0; r < files.size(); ++r) {
    ranks.push_back(read_checkpoint_file(files[r]));
    const auto meta = ranks.back().contains("basin") ? ranks.back().at("basin").toGenericDict() : new_state_dict();
    if (!meta.contains("rank") || meta.at("rank").toInt() != static_cast<int64_t>(r)) {
      throw CheckpointError("checkpoint '" + files[r] + "' is not rank " + std::to_string(r) + "'s file");
    }
  }

  // The parameters: rank r's rows of each, joined in rank order.
  std::vector<StateDict> shards;
  for (std::size_t r = 0; r < ranks.size(); ++r) shards.push_back(dict_at(ranks[r], "shards", files[r]));
  const StateDict shapes = dict_at(shards.front(), "shapes", files.front());
  StateDict model = dict_at(ranks.front(), "model", files.front()).copy();  // the buffers (replicated)
  for (const auto& entry : shapes) {
    const std::string& name = entry.key().toStringRef();
    std::vector<at::Tensor> rows;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const StateDict parameters = dict_at(shards[r], "parameters", files[r]);
      if (!parameters.contains(name)) throw CheckpointError("checkpoint '" + files[r] + "' lacks parameter '" + name + "'");
      rows.push_back(parameters.at(name).toTensor());
    }
    model.insert(name, join_rows(rows, entry.value().toIntVector(), "parameter '" + name + "'"));
  }

  // Per-parameter state, numbered as the optimizer numbers them ("numbering" names them).
  std::vector<std::string> numbering;
  if (!shards.front().contains("numbering") || !shards.front().at("numbering").isList()) {
    throw CheckpointError("checkpoint '" + files.front() + "': its shards have no 'numbering'");
  }
  for (const auto& name : shards.front().at("numbering").toListRef()) numbering.push_back(name.toStringRef());
  std::vector<ParameterStates> optimizer_states;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    optimizer_states.push_back(dict_at(dict_at(ranks[r], "optimizer", files[r]), "state", files[r]));
  }
  StateDict optimizer = dict_at(ranks.front(), "optimizer", files.front()).copy();
  optimizer.insert_or_assign("state", join_states(optimizer_states, numbering, shapes,
                                                  "checkpoint '" + manifest_path + "': optimizer state"));
  const StateDict algorithms = with_rule_states(dict_at(ranks.front(), "algorithms", files.front()), [&](const std::string& name) {
    std::vector<ParameterStates> rule_states;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const StateDict rule = dict_at(dict_at(ranks[r], "algorithms", files[r]), name, files[r]);
      rule_states.push_back(dict_at(rule, "parameters", files[r]));
    }
    return join_states(rule_states, numbering, shapes, "checkpoint '" + manifest_path + "': algorithm '" + name + "' state");
  });

  // Every rank's own generators, in rank order.
  c10::impl::GenericList rng(c10::AnyType::get());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].contains("rng") || !ranks[r].at("rng").isList() || ranks[r].at("rng").toListRef().empty()) {
      throw CheckpointError("checkpoint '" + files[r] + "' has no 'rng' list");
    }
    rng.push_back(ranks[r].at("rng").toListRef().front());
  }

  StateDict whole = ranks.front().copy();  // timestamp, schedulers, callbacks, loop, config: every rank's alike
  (void)whole.erase("shards");
  StateDict meta = dict_at(ranks.front(), "basin", files.front()).copy();
  (void)meta.erase("rank");
  meta.insert_or_assign("consolidated_from", manifest_path);
  whole.insert_or_assign("basin", meta);
  whole.insert_or_assign("model", model);
  whole.insert_or_assign("optimizer", optimizer);
  whole.insert_or_assign("algorithms", algorithms);
  whole.insert_or_assign("rng", rng);
  return whole;
}

StateDict cut_checkpoint(const StateDict& whole, const RowsLayout& layout) {
  if (whole.contains("shards")) {
    throw CheckpointError("checkpoint is one rank's file of a sharded checkpoint, not a whole one: join its ranks' "
                          "files first (consolidate_checkpoint)");
  }
  const std::string where = "checkpoint";
  const StateDict model = dict_at(whole, "model", where);
  StateDict buffers = new_state_dict();
  for (const auto& entry : model) {
    if (layout.shapes.count(entry.key().toStringRef()) == 0) buffers.insert(entry.key(), entry.value());
  }
  StateDict parameters = new_state_dict();
  StateDict shapes = new_state_dict();
  for (const auto& [name, shape] : layout.shapes) {
    if (!model.contains(name) || !model.at(name).isTensor()) {
      throw CheckpointError("checkpoint model lacks parameter '" + name + "'");
    }
    const at::Tensor value = model.at(name).toTensor();
    if (value.sizes() != c10::IntArrayRef(shape)) {
      throw CheckpointError("checkpoint model tensor '" + name + "' has shape " + shape_text(value.sizes()) +
                            ", this model's " + shape_text(shape));
    }
    parameters.insert(name, cut_rows(value, shape, layout.rank, layout.world_size));
    shapes.insert(name, c10::List<int64_t>(shape));
  }
  StateDict shards = new_state_dict();
  shards.insert("layout", std::string("rows"));
  shards.insert("numbering", c10::List<std::string>(layout.numbering));
  shards.insert("parameters", parameters);
  shards.insert("shapes", shapes);

  StateDict own = whole.copy();
  StateDict meta = dict_at(whole, "basin", where).copy();
  const int64_t saved_world = saved_world_size(whole);
  meta.insert_or_assign("rank", static_cast<int64_t>(layout.rank));
  meta.insert_or_assign("world_size", static_cast<int64_t>(layout.world_size));
  meta.insert_or_assign("resharded_from", saved_world);
  own.insert_or_assign("basin", meta);
  own.insert_or_assign("model", buffers);
  own.insert_or_assign("shards", shards);
  if (whole.contains("optimizer")) {
    StateDict optimizer = dict_at(whole, "optimizer", where).copy();
    optimizer.insert_or_assign("state", cut_states(dict_at(optimizer, "state", where), layout, "checkpoint optimizer state"));
    own.insert_or_assign("optimizer", optimizer);
  }
  if (whole.contains("algorithms")) {
    const StateDict algorithms = dict_at(whole, "algorithms", where);
    own.insert_or_assign("algorithms", with_rule_states(algorithms, [&](const std::string& name) {
      const StateDict rule = algorithms.at(name).toGenericDict();
      return cut_states(rule.at("parameters").toGenericDict(), layout, "checkpoint algorithm '" + name + "' state");
    }));
  }
  return own;
}

}  // namespace basin

// Reading a sharded checkpoint's rank files a tensor at a time: the rows a
// rank of another world size owns, or every row (consolidation), without
// ever holding the files whole.
#include "basin/core/checkpoint/resharding.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/state_rows.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/serialization/safe_unpickle.h"

namespace basin {

namespace {

using checkpoint_rows::dict_at;
using checkpoint_rows::Rows;
using checkpoint_rows::rows_held;
using checkpoint_rows::rows_shape;
using checkpoint_rows::shape_text;

/// A manifest's rank files, mapped: their pickles are read, their tensors not yet.
struct RankFiles {
  std::string manifest_path;
  std::vector<std::string> paths;
  std::vector<StateDict> files;
  std::vector<StateDict> shards;
  StateDict shapes = new_state_dict();  // every parameter's whole shape, in the files' order
  std::vector<std::string> numbering;   // the saving optimizer's
  std::size_t row_files = 0;            // the first files, which hold every row between them (all but under HSDP)

  StateDict part(std::size_t rank, const std::string& key) const { return dict_at(files[rank], key, paths[rank]); }
};

RankFiles open_rank_files(const std::string& manifest_path, const StateDict& manifest) {
  RankFiles ranks;
  ranks.manifest_path = manifest_path;
  ranks.paths = rank_files(manifest_path, manifest);
  ranks.row_files = static_cast<std::size_t>(rows_group_size(manifest_path, manifest));
  for (std::size_t r = 0; r < ranks.paths.size(); ++r) {
    ranks.files.push_back(read_checkpoint_file(ranks.paths[r]));
    const auto meta = ranks.files.back().contains("basin") && ranks.files.back().at("basin").isGenericDict()
                          ? ranks.files.back().at("basin").toGenericDict() : new_state_dict();
    if (!meta.contains("rank") || !meta.at("rank").isInt() || meta.at("rank").toInt() != static_cast<int64_t>(r)) {
      throw CheckpointError("checkpoint '" + ranks.paths[r] + "' is not rank " + std::to_string(r) + "'s file");
    }
    ranks.shards.push_back(ranks.part(r, "shards"));
  }
  ranks.shapes = dict_at(ranks.shards.front(), "shapes", ranks.paths.front());
  if (!ranks.shards.front().contains("numbering") || !ranks.shards.front().at("numbering").isList()) {
    throw CheckpointError("checkpoint '" + ranks.paths.front() + "': its shards have no 'numbering'");
  }
  for (const auto& name : ranks.shards.front().at("numbering").toListRef()) ranks.numbering.push_back(name.toStringRef());
  return ranks;
}

/// Rows `wanted` of the tensor of `shape` that the ranks' `pieces` make
/// when joined in rank order (a rank's piece: its rows; undefined: it holds
/// none), shaped as those rows. Each piece's pages are handed back once
/// copied from. `what` names the tensor in errors.
at::Tensor rows_of(const std::vector<at::Tensor>& pieces, const std::vector<int64_t>& shape, Rows wanted,
                   const std::string& what) {
  int64_t numel = 1;
  int64_t width = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    numel *= shape[d];
    if (d > 0) width *= shape[d];
  }
  int64_t held = 0;
  const at::Tensor* any = nullptr;
  for (const at::Tensor& piece : pieces) {
    if (!piece.defined()) continue;
    held += piece.numel();
    any = &piece;
  }
  if (held != numel || any == nullptr) throw CheckpointError(what + ": the ranks' rows do not make its shape");
  std::vector<at::Tensor> parts;
  int64_t start = 0;  // the first row of the piece at hand
  for (const at::Tensor& piece : pieces) {
    if (!piece.defined() || width == 0) continue;
    const int64_t rows = piece.numel() / width;
    const int64_t first = std::max(wanted.first, start);
    const int64_t last = std::min(wanted.first + wanted.count, start + rows);
    if (first < last) parts.push_back(piece.reshape({rows, width}).narrow(0, first - start, last - first));
    start += rows;
  }
  at::Tensor copied = parts.empty() ? at::empty({0, width}, any->options())
                                    : parts.size() == 1 ? parts.front().clone() : at::cat(parts, 0);
  for (const at::Tensor& piece : pieces) release_mapped_pages(piece);
  return copied.view(rows_shape(shape, wanted.count));
}

/// The model's parameters of `order` (name, whole shape): `rank` of
/// `world_size`'s rows of each, read from the rank files.
StateDict parameter_rows(const RankFiles& ranks, const std::vector<std::pair<std::string, std::vector<int64_t>>>& order,
                         int rank, int world_size) {
  StateDict parameters = new_state_dict();
  for (const auto& [name, shape] : order) {
    std::vector<at::Tensor> pieces;
    for (std::size_t r = 0; r < ranks.row_files; ++r) {
      const StateDict held = dict_at(ranks.shards[r], "parameters", ranks.paths[r]);
      if (!held.contains(name) || !held.at(name).isTensor()) {
        throw CheckpointError("checkpoint '" + ranks.paths[r] + "' lacks parameter '" + name + "'");
      }
      pieces.push_back(held.at(name).toTensor());
    }
    parameters.insert(name, rows_of(pieces, shape, rows_held(shape, rank, world_size),
                                    "checkpoint '" + ranks.manifest_path + "': parameter '" + name + "'"));
  }
  return parameters;
}

/// Per-parameter states (`states[r]`: rank r's, by the optimizer's index)
/// cut to `rank` of `world_size`'s rows. `numbering` names each index in
/// this run (where an index's shape is checked against the saved one's).
ParameterStates state_rows(const RankFiles& ranks, const std::vector<ParameterStates>& states,
                           const std::vector<std::string>& numbering, int rank, int world_size, const std::string& where) {
  std::set<int64_t> indices;
  for (const auto& held : states) {
    for (const auto& entry : held) indices.insert(entry.key().toInt());
  }
  ParameterStates own = new_parameter_states();
  for (const int64_t index : indices) {
    if (index < 0 || index >= static_cast<int64_t>(ranks.numbering.size())) {
      throw CheckpointError(where + " of an unknown parameter " + std::to_string(index));
    }
    if (index >= static_cast<int64_t>(numbering.size())) {
      throw CheckpointError(where + " of parameter " + std::to_string(index) + ", and this run's optimizer has " +
                            std::to_string(numbering.size()));
    }
    const std::string& saved_name = ranks.numbering[static_cast<std::size_t>(index)];
    const auto shape = ranks.shapes.at(saved_name).toIntVector();
    const std::string& name = numbering[static_cast<std::size_t>(index)];
    std::vector<std::optional<StateDict>> held;  // each rank's state of it, if it has one
    std::vector<std::string> keys;               // every rank's, in the order first seen
    for (const auto& rank_states : states) {
      held.emplace_back(rank_states.contains(index) ? std::optional<StateDict>(rank_states.at(index).toGenericDict())
                                                    : std::nullopt);
      if (!held.back()) continue;
      for (const auto& item : *held.back()) {
        if (std::find(keys.begin(), keys.end(), item.key().toStringRef()) == keys.end()) keys.push_back(item.key().toStringRef());
      }
    }
    StateDict cut = new_state_dict();
    for (const std::string& key : keys) {
      const auto first = std::find_if(held.begin(), held.end(), [&](const auto& state) { return state && state->contains(key); });
      const c10::IValue& value = (*first)->at(key);
      // Per-element state (moments, momentum, a rule's buffers) has the shard's rows; a count is every rank's.
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        cut.insert(key, value);
        continue;
      }
      if (!ranks.shapes.contains(name) || shape != ranks.shapes.at(name).toIntVector()) {
        throw CheckpointError(where + " '" + key + "' of '" + name + "' has the shape of '" + saved_name + "', " +
                              shape_text(shape) + ", not this run's parameter's");
      }
      std::vector<at::Tensor> pieces;
      for (const auto& state : held) {
        if (!state) {
          pieces.emplace_back();
        } else if (!state->contains(key) || !state->at(key).isTensor()) {
          throw CheckpointError(where + " of '" + saved_name + "' lacks '" + key + "' on a rank");
        } else {
          pieces.push_back(state->at(key).toTensor());
        }
      }
      cut.insert(key, rows_of(pieces, shape, rows_held(shape, rank, world_size), where + " '" + key + "' of '" + saved_name + "'"));
    }
    own.insert(index, cut);
  }
  return own;
}

/// The own file of the rank of `layout` (its rows, numbered as its
/// optimizer numbers them) of the rank files, its parameters in `order`.
StateDict own_file(const RankFiles& ranks, const std::vector<std::pair<std::string, std::vector<int64_t>>>& order,
                   const RowsLayout& layout) {
  const std::string& manifest_path = ranks.manifest_path;
  const std::vector<std::string>& numbering = layout.numbering;
  const int rank = layout.rank;
  const int world_size = layout.world_size;
  StateDict shapes = new_state_dict();
  for (const auto& [name, shape] : order) shapes.insert(name, c10::List<int64_t>(shape));
  StateDict shards = new_state_dict();
  shards.insert("layout", std::string("rows"));
  shards.insert("group_size", static_cast<int64_t>(world_size));
  shards.insert("numbering", c10::List<std::string>(numbering));
  shards.insert("parameters", parameter_rows(ranks, order, rank, world_size));
  shards.insert("shapes", shapes);

  std::vector<ParameterStates> optimizer_states;
  for (std::size_t r = 0; r < ranks.row_files; ++r) {
    optimizer_states.push_back(dict_at(ranks.part(r, "optimizer"), "state", ranks.paths[r]));
  }
  StateDict optimizer = ranks.part(0, "optimizer").copy();
  optimizer.insert_or_assign("state", state_rows(ranks, optimizer_states, numbering, rank, world_size,
                                                 "checkpoint '" + manifest_path + "': optimizer state"));
  const StateDict algorithms = checkpoint_rows::with_rule_states(ranks.part(0, "algorithms"), [&](const std::string& name) {
    std::vector<ParameterStates> rule_states;
    for (std::size_t r = 0; r < ranks.row_files; ++r) {
      rule_states.push_back(dict_at(dict_at(ranks.part(r, "algorithms"), name, ranks.paths[r]), "parameters", ranks.paths[r]));
    }
    return state_rows(ranks, rule_states, numbering, rank, world_size,
                      "checkpoint '" + manifest_path + "': algorithm '" + name + "' state");
  });

  // Every rank's own generators, in rank order.
  c10::impl::GenericList rng(c10::AnyType::get());
  for (std::size_t r = 0; r < ranks.files.size(); ++r) {
    const StateDict& file = ranks.files[r];
    if (!file.contains("rng") || !file.at("rng").isList() || file.at("rng").toListRef().empty()) {
      throw CheckpointError("checkpoint '" + ranks.paths[r] + "' has no 'rng' list");
    }
    rng.push_back(file.at("rng").toListRef().front());
  }

  StateDict own = ranks.files.front().copy();  // timestamp, schedulers, callbacks, loop, config: every rank's alike
  StateDict meta = ranks.part(0, "basin").copy();
  meta.insert_or_assign("rank", static_cast<int64_t>(layout.job_rank()));
  meta.insert_or_assign("world_size", static_cast<int64_t>(layout.job_size()));
  meta.insert_or_assign("resharded_from", static_cast<int64_t>(ranks.files.size()));
  own.insert_or_assign("basin", meta);
  own.insert_or_assign("model", ranks.part(0, "model"));  // the buffers (replicated)
  own.insert_or_assign("shards", shards);
  own.insert_or_assign("optimizer", optimizer);
  own.insert_or_assign("algorithms", algorithms);
  own.insert_or_assign("rng", rng);
  return own;
}

}  // namespace

StateDict reshard_rank_files(const std::string& manifest_path, const StateDict& manifest, const RowsLayout& layout) {
  const RankFiles ranks = open_rank_files(manifest_path, manifest);
  std::vector<std::pair<std::string, std::vector<int64_t>>> order;
  for (const auto& [name, shape] : layout.shapes) {
    if (!ranks.shapes.contains(name)) {
      throw CheckpointError("checkpoint '" + manifest_path + "' lacks parameter '" + name + "', which this model has");
    }
    const auto saved = ranks.shapes.at(name).toIntVector();
    if (saved != shape) {
      throw CheckpointError("checkpoint '" + manifest_path + "': parameter '" + name + "' has shape " +
                            shape_text(saved) + ", this model's " + shape_text(shape));
    }
    order.emplace_back(name, shape);
  }
  for (const auto& entry : ranks.shapes) {
    if (layout.shapes.count(entry.key().toStringRef()) == 0) {
      throw CheckpointError("checkpoint '" + manifest_path + "' has parameter '" + entry.key().toStringRef() +
                            "', which this model lacks");
    }
  }
  return own_file(ranks, order, layout);
}

StateDict join_rank_files(const std::string& manifest_path, const StateDict& manifest) {
  const RankFiles ranks = open_rank_files(manifest_path, manifest);
  std::vector<std::pair<std::string, std::vector<int64_t>>> order;
  for (const auto& entry : ranks.shapes) order.emplace_back(entry.key().toStringRef(), entry.value().toIntVector());
  RowsLayout whole;  // one rank holding every row
  whole.numbering = ranks.numbering;
  StateDict own = own_file(ranks, order, whole);

  // One rank's rows of everything are the whole: each per-element tensor gets its parameter's shape back.
  const StateDict parameters = dict_at(dict_at(own, "shards", manifest_path), "parameters", manifest_path);
  StateDict model = dict_at(own, "model", manifest_path).copy();
  for (const auto& [name, shape] : order) model.insert(name, parameters.at(name).toTensor().view(shape));
  auto whole_shapes = [&](const ParameterStates& states) {
    for (const auto& entry : states) {
      const auto shape = ranks.shapes.at(ranks.numbering[static_cast<std::size_t>(entry.key().toInt())]).toIntVector();
      StateDict state = entry.value().toGenericDict();  // a handle: changed in place
      std::vector<std::string> per_element;
      for (const auto& item : state) {
        if (item.value().isTensor() && item.value().toTensor().dim() > 0) per_element.push_back(item.key().toStringRef());
      }
      for (const auto& key : per_element) state.insert_or_assign(key, state.at(key).toTensor().view(shape));
    }
  };
  whole_shapes(dict_at(dict_at(own, "optimizer", manifest_path), "state", manifest_path));
  for (const auto& rule : dict_at(own, "algorithms", manifest_path)) {
    if (!rule.value().isGenericDict()) continue;
    const StateDict parts = rule.value().toGenericDict();
    if (parts.contains("parameters") && parts.at("parameters").isGenericDict()) whole_shapes(parts.at("parameters").toGenericDict());
  }

  StateDict meta = dict_at(ranks.files.front(), "basin", ranks.paths.front()).copy();
  (void)meta.erase("rank");
  meta.insert_or_assign("consolidated_from", manifest_path);
  own.insert_or_assign("basin", meta);
  own.insert_or_assign("model", model);
  (void)own.erase("shards");
  return own;
}

}  // namespace basin

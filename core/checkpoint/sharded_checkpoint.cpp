#include "basin/core/checkpoint/sharded_checkpoint.h"

#include <vector>

#include <ATen/ATen.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/resharding.h"
#include "basin/core/checkpoint/state_rows.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/serialization/safe_unpickle.h"

namespace basin {

namespace {

using checkpoint_rows::dict_at;
using checkpoint_rows::shape_text;

/// The rows of `whole` (of `shape`) that `rank` of `world_size` holds, as
/// FullyShardedModel cuts its shards; with `release`, `whole`'s pages are
/// handed back after (a mapped checkpoint's tensor, read once).
at::Tensor cut_rows(const at::Tensor& whole, const std::vector<int64_t>& shape, int rank, int world_size, bool release) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t width = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) width *= shape[d];
  const checkpoint_rows::Rows held = checkpoint_rows::rows_held(shape, rank, world_size);
  at::Tensor own = whole.reshape({rows, width}).narrow(0, held.first, held.count).clone().view(checkpoint_rows::rows_shape(shape, held.count));
  if (release) release_mapped_pages(whole);
  return own;
}

/// This rank's rows of each whole per-parameter state.
ParameterStates cut_states(const ParameterStates& whole, const RowsLayout& layout, const std::string& where, bool release) {
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
      cut.insert(item.key(), cut_rows(value.toTensor(), shape, layout.rank, layout.world_size, release));
    }
    own.insert(index, cut);
  }
  return own;
}

/// cut_checkpoint; with `release`, each tensor's pages are handed back once cut.
StateDict cut(const StateDict& whole, const RowsLayout& layout, bool release) {
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
    parameters.insert(name, cut_rows(value, shape, layout.rank, layout.world_size, release));
    shapes.insert(name, c10::List<int64_t>(shape));
  }
  StateDict shards = new_state_dict();
  shards.insert("layout", std::string("rows"));
  shards.insert("group_size", static_cast<int64_t>(layout.world_size));
  shards.insert("numbering", c10::List<std::string>(layout.numbering));
  shards.insert("parameters", parameters);
  shards.insert("shapes", shapes);

  StateDict own = whole.copy();
  StateDict meta = dict_at(whole, "basin", where).copy();
  const int64_t saved_world = saved_world_size(whole);
  meta.insert_or_assign("rank", static_cast<int64_t>(layout.job_rank()));
  meta.insert_or_assign("world_size", static_cast<int64_t>(layout.job_size()));
  meta.insert_or_assign("resharded_from", saved_world);
  own.insert_or_assign("basin", meta);
  own.insert_or_assign("model", buffers);
  own.insert_or_assign("shards", shards);
  if (whole.contains("optimizer")) {
    StateDict optimizer = dict_at(whole, "optimizer", where).copy();
    optimizer.insert_or_assign("state", cut_states(dict_at(optimizer, "state", where), layout, "checkpoint optimizer state", release));
    own.insert_or_assign("optimizer", optimizer);
  }
  if (whole.contains("algorithms")) {
    const StateDict algorithms = dict_at(whole, "algorithms", where);
    own.insert_or_assign("algorithms", checkpoint_rows::with_rule_states(algorithms, [&](const std::string& name) {
      const StateDict rule = algorithms.at(name).toGenericDict();
      return cut_states(rule.at("parameters").toGenericDict(), layout, "checkpoint algorithm '" + name + "' state", release);
    }));
  }
  return own;
}

}  // namespace

StateDict consolidate_checkpoint(const std::string& manifest_path) {
  const StateDict manifest = read_checkpoint_file(manifest_path);
  if (!is_sharded_checkpoint(manifest)) {
    throw CheckpointError("checkpoint '" + manifest_path + "' is whole already (not a zero3 manifest)");
  }
  return join_rank_files(manifest_path, manifest);
}

StateDict cut_checkpoint(const StateDict& whole, const RowsLayout& layout) { return cut(whole, layout, false); }

StateDict cut_checkpoint_as_read(const StateDict& whole, const RowsLayout& layout) { return cut(whole, layout, true); }

}  // namespace basin

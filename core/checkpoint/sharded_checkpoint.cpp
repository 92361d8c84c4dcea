#include "basin/core/checkpoint/sharded_checkpoint.h"

#include <vector>

#include <ATen/ATen.h>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"

namespace basin {

namespace {

StateDict dict_at(const StateDict& dict, const std::string& key, const std::string& file) {
  if (!dict.contains(key) || !dict.at(key).isGenericDict()) {
    throw CheckpointError("checkpoint '" + file + "' has no '" + key + "' dict");
  }
  return dict.at(key).toGenericDict();
}

/// Each rank's rows of one tensor, in rank order, as one tensor of `shape`.
at::Tensor join_rows(const std::vector<at::Tensor>& rows, c10::IntArrayRef shape, const std::string& what) {
  at::Tensor whole = at::cat(rows, 0);
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  if (whole.numel() != numel) throw CheckpointError(what + ": the ranks' rows do not make its shape");
  return whole.reshape(shape);
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
    const auto shape = entry.value().toIntVector();
    model.insert(name, join_rows(rows, shape, "parameter '" + name + "'"));
  }

  // The optimizer: each parameter's state tensors joined the same way
  // (numbered as the optimizer numbers them; "numbering" names them).
  std::vector<std::string> numbering;
  if (!shards.front().contains("numbering") || !shards.front().at("numbering").isList()) {
    throw CheckpointError("checkpoint '" + files.front() + "': its shards have no 'numbering'");
  }
  for (const auto& name : shards.front().at("numbering").toListRef()) numbering.push_back(name.toStringRef());
  StateDict optimizer = dict_at(ranks.front(), "optimizer", files.front()).copy();
  StateDict whole_state = new_state_dict();
  const StateDict first_state = dict_at(optimizer, "state", files.front());
  for (const auto& entry : first_state) {
    const int64_t index = entry.key().toInt();
    if (index < 0 || index >= static_cast<int64_t>(numbering.size())) {
      throw CheckpointError("checkpoint '" + files.front() + "': optimizer state of an unknown parameter " +
                            std::to_string(index));
    }
    const std::string name = numbering[static_cast<std::size_t>(index)];
    const auto shape = shapes.at(name).toIntVector();
    StateDict joined = new_state_dict();
    for (const auto& item : entry.value().toGenericDict()) {
      const c10::IValue& value = item.value();
      // Per-element state (moments, momentum) has the shard's rows; a count is the same on every rank.
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        joined.insert(item.key(), value);
        continue;
      }
      std::vector<at::Tensor> rows;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const StateDict state = dict_at(dict_at(ranks[r], "optimizer", files[r]), "state", files[r]);
        if (!state.contains(index)) throw CheckpointError("checkpoint '" + files[r] + "' lacks the optimizer state of '" + name + "'");
        rows.push_back(state.at(index).toGenericDict().at(item.key()).toTensor());
      }
      joined.insert(item.key(), join_rows(rows, shape, "optimizer state '" + item.key().toStringRef() + "' of '" + name + "'"));
    }
    whole_state.insert(index, joined);
  }
  optimizer.insert_or_assign("state", whole_state);

  StateDict whole = new_state_dict();
  StateDict meta = manifest.at("basin").toGenericDict().copy();
  (void)meta.erase("sharded");
  meta.insert("consolidated_from", manifest_path);
  whole.insert("basin", meta);
  for (const char* part : {"timestamp", "config"}) {
    if (manifest.contains(part)) whole.insert(part, manifest.at(part));
  }
  whole.insert("model", model);
  whole.insert("optimizer", optimizer);
  return whole;
}

}  // namespace basin

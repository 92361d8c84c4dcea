// Sharded checkpoints' manifests (checkpoint_file.h's last part): the rank
// files a manifest lists, the ranks its rows are cut among, and what each
// rank of a job resumes from.
#include <filesystem>
#include <string>
#include <vector>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/resharding.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"

namespace fs = std::filesystem;

namespace basin {

std::string rank_file_name(int64_t step, int rank) {
  const std::string whole = checkpoint_file_name(step);
  return whole.substr(0, whole.size() - 3) + ".rank-" + std::to_string(rank) + ".pt";
}

StateDict sharded_manifest(const StateDict& rank_zero, int64_t step, int world_size) {
  StateDict manifest = new_state_dict();
  StateDict meta = rank_zero.at("basin").toGenericDict().copy();
  (void)meta.erase("rank");
  (void)meta.erase("resharded_from");  // the manifest's rank files are of `world_size`, whoever wrote them
  StateDict sharded = new_state_dict();
  sharded.insert("layout", std::string("rows"));
  c10::List<std::string> files;
  for (int r = 0; r < world_size; ++r) files.push_back(rank_file_name(step, r));
  sharded.insert("files", files);
  // The ranks the rows are cut among: every file's but under HSDP, whose groups of them each hold every row.
  sharded.insert("group_size", rank_file_group_size(rank_zero, world_size));
  meta.insert("sharded", sharded);
  manifest.insert("basin", meta);
  for (const char* part : {"timestamp", "config", "loop"}) {
    if (rank_zero.contains(part)) manifest.insert(part, rank_zero.at(part));
  }
  return manifest;
}

bool is_sharded_checkpoint(const StateDict& checkpoint) {
  if (!checkpoint.contains("basin") || !checkpoint.at("basin").isGenericDict()) return false;
  return checkpoint.at("basin").toGenericDict().contains("sharded");
}

int64_t saved_world_size(const StateDict& checkpoint) {
  if (!checkpoint.contains("basin") || !checkpoint.at("basin").isGenericDict()) return 1;
  const StateDict meta = checkpoint.at("basin").toGenericDict();
  if (meta.contains("resharded_from") && meta.at("resharded_from").isInt()) return meta.at("resharded_from").toInt();
  return meta.contains("world_size") && meta.at("world_size").isInt() ? meta.at("world_size").toInt() : 1;
}

std::vector<std::string> rank_files(const std::string& manifest_path, const StateDict& manifest) {
  const auto sharded = manifest.at("basin").toGenericDict().at("sharded");
  if (!sharded.isGenericDict() || !sharded.toGenericDict().contains("files") ||
      !sharded.toGenericDict().at("files").isList()) {
    throw CheckpointError("checkpoint '" + manifest_path + "': its 'basin.sharded' entry lists no rank files");
  }
  std::vector<std::string> paths;
  const fs::path dir = fs::path(manifest_path).parent_path();
  for (const auto& name : sharded.toGenericDict().at("files").toListRef()) {
    if (!name.isString() || fs::path(name.toStringRef()).has_parent_path()) {
      throw CheckpointError("checkpoint '" + manifest_path + "': a rank file entry is not a file name");
    }
    paths.push_back((dir / name.toStringRef()).string());
  }
  return paths;
}

namespace {

/// rows_group_size of a manifest whose rank files were counted already.
int64_t group_size_of(const std::string& manifest_path, const StateDict& manifest, int64_t files) {
  const StateDict sharded = manifest.at("basin").toGenericDict().at("sharded").toGenericDict();
  if (!sharded.contains("group_size")) return files;  // written before HSDP: every file's rows make the whole
  const c10::IValue group = sharded.at("group_size");
  if (!group.isInt() || group.toInt() < 1 || files % group.toInt() != 0) {
    throw CheckpointError("checkpoint '" + manifest_path + "': its 'basin.sharded.group_size' is not a divisor of "
                          "its " + std::to_string(files) + " rank files");
  }
  return group.toInt();
}

}  // namespace

int64_t rows_group_size(const std::string& manifest_path, const StateDict& manifest) {
  return group_size_of(manifest_path, manifest, static_cast<int64_t>(rank_files(manifest_path, manifest).size()));
}

int64_t rank_file_group_size(const StateDict& rank_file, int64_t otherwise) {
  const c10::IValue shards = rank_file.contains("shards") ? rank_file.at("shards") : c10::IValue();
  const bool grouped = shards.isGenericDict() && shards.toGenericDict().contains("group_size") &&
                       shards.toGenericDict().at("group_size").isInt();
  return grouped ? shards.toGenericDict().at("group_size").toInt() : otherwise;
}

void check_rank_file_rows(const StateDict& rank_file, const RowsLayout& layout) {
  const int64_t group = rank_file_group_size(rank_file, layout.world_size);
  if (group == layout.world_size) return;
  throw CheckpointError("this rank's file of a sharded checkpoint holds rows cut among " + std::to_string(group) +
                        " ranks and this run cuts them among " + std::to_string(layout.world_size) +
                        ": resume from the checkpoint's manifest with resharding (basin-train --reshard)");
}

StateDict checkpoint_for_rank(const std::string& path, const StateDict& checkpoint, int world_size,
                              const std::optional<RowsLayout>& rows, bool reshard) {
  if (checkpoint.contains("shards")) return checkpoint;  // one rank's file, given itself (Trainer::resume checks its size)
  if (!is_sharded_checkpoint(checkpoint)) return rows ? cut_checkpoint_as_read(checkpoint, *rows) : checkpoint;
  const auto files = rank_files(path, checkpoint);
  const int64_t group = group_size_of(path, checkpoint, static_cast<int64_t>(files.size()));
  const bool same_world = static_cast<int>(files.size()) == world_size;
  const bool same_rows = rows && group == rows->world_size && rows->job_size() == world_size;
  if (same_world && same_rows) return read_checkpoint_file(files[static_cast<std::size_t>(rows->job_rank())]);
  if (!same_world && !reshard) {
    throw CheckpointError("checkpoint '" + path + "' holds the shards of " + std::to_string(files.size()) +
                          " ranks and this job has " + std::to_string(world_size) + ": resume with " +
                          std::to_string(files.size()) + " ranks, or reshard (basin-train --reshard), under which "
                          "a zero3 rank reads its rows from the files that hold them and another mode joins them "
                          "(basin-consolidate joins them into one file)");
  }
  if (rows && !same_rows && !reshard) {
    throw CheckpointError("checkpoint '" + path + "' cuts each parameter's rows among " + std::to_string(group) +
                          " ranks and this run among " + std::to_string(rows->world_size) +
                          " (another shard_group_size, or zero3 against hsdp): reshard (basin-train --reshard), "
                          "under which each rank reads its rows from the files that hold them");
  }
  return rows ? reshard_rank_files(path, checkpoint, *rows) : consolidate_checkpoint(path);
}

}  // namespace basin

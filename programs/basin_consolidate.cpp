// basin-consolidate: joins a zero3 run's sharded checkpoint (a manifest and
// one file per rank) into one whole file that Python's torch.load opens and
// "init_from" starts a run from.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/checkpoint/sharded_checkpoint.h"
#include "basin/core/config/program_error.h"

int main(int argc, char** argv) {
  CLI::App app{"basin-consolidate: join a zero3 checkpoint's rank files into one whole checkpoint"};
  std::string manifest, output;
  app.add_option("checkpoint", manifest, "the checkpoint's manifest, step-<step>.pt beside its .rank-<r>.pt files")
      ->required();
  app.add_option("output", output, "the whole checkpoint to write (with its .sum)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    // Writing over a file it joins (or its sum) would lose the sharded checkpoint.
    std::vector<std::string> inputs{manifest};
    for (const auto& file : basin::rank_files(manifest, basin::read_checkpoint_file(manifest))) inputs.push_back(file);
    for (const auto& input : std::vector<std::string>(inputs)) inputs.push_back(input + ".sum");
    for (const auto& input : inputs) {
      std::error_code a, b, c;
      const bool same_name = std::filesystem::weakly_canonical(input, a) == std::filesystem::weakly_canonical(output, b) && !a && !b;
      if (same_name || std::filesystem::equivalent(input, output, c)) {
        throw basin::CheckpointError("the output '" + output + "' is '" + input +
                                     "', one of the files it joins; name a new file");
      }
    }
    const basin::StateDict whole = basin::consolidate_checkpoint(manifest);
    basin::write_checkpoint_file(output, whole);
    std::cout << "basin-consolidate: " << whole.at("model").toGenericDict().size() << " tensors of "
              << whole.at("basin").toGenericDict().at("world_size").toInt() << " ranks joined into " << output
              << std::endl;
    return 0;
  } catch (...) {
    return basin::report_error("basin-consolidate", std::current_exception());
  }
}

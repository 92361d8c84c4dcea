#pragma once

namespace basin {

/// Where one tensor of a parameter lives across the ranks, as FSDP2 makes
/// it a property of the tensor (DTensor's placements): whole on every rank,
/// whole on one rank only, or split in rows with each rank holding its own.
struct Placement {
  enum class Kind { kReplicated, kOwned, kRows };

  Kind kind = Kind::kReplicated;
  int owner = -1;  // kOwned: the rank that holds it

  static Placement replicated() { return {}; }
  static Placement owned_by(int rank) { return {Kind::kOwned, rank}; }
  static Placement rows() { return {Kind::kRows, -1}; }

  bool replicated_everywhere() const { return kind == Kind::kReplicated; }
  bool in_rows() const { return kind == Kind::kRows; }
  bool owned() const { return kind == Kind::kOwned; }
};

/// A parameter's three tensors and where each lives between steps: what
/// tells the sharding modes apart, parameter by parameter.
///
///           parameter    gradient (synced)   optimizer state
///   ddp     replicated   replicated          replicated
///   zero1   replicated   replicated          owned by one rank
///   zero2   replicated   owned by one rank   owned by one rank
///   zero3   rows         rows                rows
///
/// The gradient's is that of a backward synced for every parameter
/// (GradientSync::kEverywhere: SAM's synced ascent). A backward synced where
/// the gradients are stepped (kWhereStepped) leaves the average where the
/// optimizer state is (zero1's on its owner), and one not synced (SAM's
/// rank-local ascent) each rank its own whole gradient. A placement is the
/// same on every rank.
struct ParameterPlacement {
  Placement parameter;
  Placement gradient;
  Placement optimizer_state;
};

}  // namespace basin

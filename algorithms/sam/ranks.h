#pragma once

namespace basin {

/// Among whom a reduction of the step runs.
///  kJob       the job: a value over the whole model, the same on every
///             rank. Each rank adds what it counts (ParameterShare::
///             counted_here) and one all-reduce among the ranks that share
///             the parameters completes it where they have owners: every
///             rank, or under hsdp its shard group (each group holds every
///             row alike, so every group completes the same value); where
///             no parameter has owners each rank holds it whole already.
///  kThisRank  this rank alone: its own values, whole here (the gradients
///             of a rank-local ascent, m-sharpness).
/// An ascent synced within a group of ranks (a node) adds the group between
/// the two: a rule that reduces among `ascent_ranks()` follows it unchanged.
enum class Ranks { kThisRank, kJob };

}  // namespace basin

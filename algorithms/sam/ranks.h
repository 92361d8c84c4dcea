#pragma once

namespace basin {

/// Among whom a reduction of the step runs.
///  kJob       every rank: a sum over the whole model, each rank adding what
///             it counts (ParameterShare::counted_here), one all-reduce
///             completing it where the parameters have owners.
///  kThisRank  this rank alone: its own values, whole here (the gradients
///             of a rank-local ascent, m-sharpness).
/// An ascent synced within a group of ranks (a node) adds the group between
/// the two: a rule that reduces among `ascent_ranks()` follows it unchanged.
enum class Ranks { kThisRank, kJob };

}  // namespace basin

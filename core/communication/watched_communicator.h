#pragma once

#include <memory>

#include "basin/core/communication/communicator.h"

namespace basin {

class PeerWatch;

/// A communicator that numbers and names its collectives for `watch`, and
/// turns a failed one (a timeout, a peer gone) into an error that names the
/// collective, how long it may wait, and the rank it waited for:
/// "all_reduce_sum #212 failed on rank 0 after at most 5 s: rank 1 stopped
/// answering (...)". The collectives themselves are `inner`'s.
std::shared_ptr<Communicator> watch_collectives(std::shared_ptr<Communicator> inner, std::shared_ptr<PeerWatch> watch,
                                                std::chrono::milliseconds timeout);

}  // namespace basin

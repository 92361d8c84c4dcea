// The ring collectives over Gloo's sends and receives (send_receive_rings.h).
#include "basin/core/communication/send_receive_rings.h"

#include <algorithm>

#include <ATen/ATen.h>
// Only the sends and receives of compat::CollectiveBackend: not Gloo's own header.
#if BASIN_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "basin/core/communication/flat_tensors.h"

namespace basin::rings {
namespace {

constexpr int kChunkTags = 1 << 10;   // a reduce-scatter round's tags: one per chunk
constexpr int kGatherTags = 1 << 30;  // the all-gathers' tags start here, apart from the reduce-scatters' (which may
                                      // run meanwhile)

/// The chunks a part of `numel` elements travels in: at most 8 MiB, or a 1024th of it (one tag each).
int64_t chunk_of(int64_t numel, int64_t element_size) {
  return std::max<int64_t>({(8 << 20) / element_size, (numel + kChunkTags - 1) / kChunkTags, 1});
}

int reduce_tag(int round, int64_t chunk) { return round * kChunkTags + static_cast<int>(chunk); }

}  // namespace

// N-1 rounds; in round s, rank i passes its running sum of part (i-s-1) to
// rank i+1 and adds rank i-1's running sum of part (i-s-2) to its own. Part j
// thus travels the ring once, ending summed at rank j: each rank sends every
// part but its own, (N-1)/N of the bytes on average.
void reduce_scatter(compat::CollectiveBackend& group, const Issue& issue, std::vector<at::Tensor>& parts) {
  const int n = group.getSize(), me = group.getRank();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  for (int round = 0; round < n - 1; ++round) {
    const at::Tensor outgoing = parts[static_cast<std::size_t>(((me - round - 1) % n + n) % n)].contiguous();
    at::Tensor& incoming = parts[static_cast<std::size_t>(((me - round - 2) % n + n) % n)];
    // Sender and receiver chunk one part alike: it is the same part on both.
    const int64_t out_chunk = chunk_of(outgoing.numel(), outgoing.element_size());
    std::vector<std::vector<at::Tensor>> sends;  // alive until sent
    sends.reserve(static_cast<std::size_t>((outgoing.numel() + out_chunk - 1) / out_chunk));
    std::vector<c10::intrusive_ptr<c10d::Work>> sent;
    for (int64_t at = 0, c = 0; at < outgoing.numel(); at += out_chunk, ++c) {
      sends.push_back({outgoing.narrow(0, at, std::min(out_chunk, outgoing.numel() - at))});
      sent.push_back(issue([&] { return group.send(sends.back(), next, reduce_tag(round, c)); }));
    }
    const int64_t chunk = chunk_of(incoming.numel(), incoming.element_size());
    at::Tensor space[2];
    std::vector<at::Tensor> into[2];
    auto receive = [&](int64_t c) -> c10::intrusive_ptr<c10d::Work> {
      const int64_t at = c * chunk;
      if (at >= incoming.numel()) return {};
      at::Tensor& buffer = space[c % 2];
      if (!buffer.defined()) buffer = at::empty({std::min(chunk, incoming.numel())}, incoming.options());
      into[c % 2] = {buffer.narrow(0, 0, std::min(chunk, incoming.numel() - at))};
      return issue([&] { return group.recv(into[c % 2], previous, reduce_tag(round, c)); });
    };
    auto receiving = receive(0);
    for (int64_t c = 0; receiving; ++c) {
      receiving->wait();
      auto following = receive(c + 1);  // arrives while this chunk is added
      const at::Tensor& got = into[c % 2].front();
      incoming.narrow(0, c * chunk, got.numel()).add_(got);
      receiving = std::move(following);
    }
    for (auto& s : sent) s->wait();
  }
}

// N-1 rounds; in round s, rank i passes part (i-s), which it holds, to rank
// i+1 and receives part (i-s-1) from rank i-1: every part travels the ring
// once, (N-1)/N of the bytes sent per rank on average. Each round stages the
// part it sends and the one it receives, flat.
void all_gather(compat::CollectiveBackend& group, const Issue& issue, std::vector<std::vector<at::Tensor>>& pieces) {
  const int n = group.getSize(), me = group.getRank();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  for (int round = 0; round < n - 1; ++round) {
    const auto& outgoing = pieces[static_cast<std::size_t>(((me - round) % n + n) % n)];
    const auto& incoming = pieces[static_cast<std::size_t>(((me - round - 1) % n + n) % n)];
    c10::intrusive_ptr<c10d::Work> sent;
    std::vector<at::Tensor> send;
    const int tag = kGatherTags + round;
    if (numel_of(outgoing) > 0) {
      send.push_back(at::flatten_dense_tensors(outgoing));
      sent = issue([&] { return group.send(send, next, tag); });
    }
    if (numel_of(incoming) > 0) {
      std::vector<at::Tensor> received{at::empty({numel_of(incoming)}, incoming.front().options())};
      issue([&] { return group.recv(received, previous, tag); })->wait();
      copy_from_flat(received.front(), incoming);
    }
    if (sent) sent->wait();
  }
}

}  // namespace basin::rings

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "basin/core/base/torch_compat.h"

namespace basin {

/// A collective under way on this rank: `wait()` blocks until it is done
/// here (its tensors hold the result then), rethrowing its error.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

/// The collectives training needs, over the ranks of one job. Everything
/// distributed (gradient sync, sharded optimizers, the grad scaler's
/// agreement on overflow) goes through it, so tests can run ranks as threads
/// and benchmarks can count bytes.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// In-place elementwise sum over ranks.
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors) = 0;
  /// Starts an in-place elementwise sum over ranks of `tensor` and returns
  /// at once where the backend runs collectives asynchronously (Gloo and
  /// NCCL do): gradient buckets go out while backward still runs. `tensor`
  /// must stay untouched until the returned collective is waited for. Ranks
  /// must start their collectives in the same order.
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(at::Tensor tensor);
  /// In-place elementwise maximum over ranks.
  virtual void all_reduce_max(std::vector<at::Tensor>& tensors) = 0;
  /// In-place copy of `root`'s tensors to every rank.
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  /// Reduce-scatter of uneven parts: `parts[r]` is this rank's contribution
  /// to rank r's part (flat, one dtype, the same sizes on every rank; empty
  /// parts are allowed). Afterwards `parts[rank()]` holds the elementwise sum
  /// over ranks; the other parts are left unspecified.
  virtual void reduce_scatter_sum(std::vector<at::Tensor>& parts) = 0;
  /// Starts reduce_scatter_sum(parts) and returns at once where the backend
  /// can run it in the background (ZeRO-2's buckets go out while backward
  /// runs). The parts (views into one buffer are fine) must stay untouched
  /// until the returned collective is waited for; `parts[rank()]` holds the
  /// sum then. Reduce-scatters run in the order they are started.
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(std::vector<at::Tensor> parts);
  /// All-gather of uneven parts, each made of pieces: `pieces[r]` are the
  /// tensors of rank r's part (any shapes, views allowed, one dtype; the
  /// same shapes on every rank; a part may have none), this rank filling
  /// `pieces[rank()]`. The pieces may be views into the very tensors the
  /// values are for (ZeRO-3 gathers into the parameters themselves): only a
  /// part's worth is staged at a time. Starts it and returns at once where
  /// the backend can run it in the background (the next unit's gather while
  /// this one computes); every piece holds its rank's values once it is
  /// waited for, and the pieces must stay untouched until then. Gathers run
  /// in the order they are started, apart from the reduce-scatters (on Gloo
  /// a thread of their own): each stream must be started in one order on
  /// every rank, the two may interleave differently.
  virtual std::unique_ptr<PendingCollective> start_all_gather(std::vector<std::vector<at::Tensor>> pieces) = 0;
  virtual void barrier() = 0;

  /// The ranks of this rank's color, as a communicator of their own (ranked
  /// in this one's order, from 0): HSDP's shard and replicate groups.
  /// `colors[r]` is rank r's color, the same list on every rank (as
  /// PyTorch's new_group takes the same ranks everywhere), so no rank asks
  /// another; every rank calls it, its splits in one order. Throws where
  /// the communicator cannot make groups (one made over a process group alone).
  virtual std::shared_ptr<Communicator> split(const std::vector<int>& colors);

  /// Bytes this rank has sent in collectives so far, as a bandwidth-optimal
  /// (ring) implementation sends them, averaged over ranks: an all-reduce of
  /// S bytes sends 2(N-1)/N * S, a broadcast or reduce-scatter (N-1)/N * S,
  /// so a reduce-scatter plus a broadcast from each owner (ZeRO-1's gradient
  /// and parameter traffic) costs what one all-reduce costs.
  virtual double bytes_moved() const { return bytes_moved_; }

 protected:
  enum class Pattern { kAllReduce, kOneToAllOrAllToOne };
  void count(const std::vector<at::Tensor>& tensors, Pattern pattern);

 private:
  double bytes_moved_ = 0;
};

/// Where this rank's Gloo talks: the named network interface, else the
/// interface that holds `address` (loopback by default).
struct GlooDevice {
  std::string interface;
  std::string address = "127.0.0.1";
};

/// A communicator over a Gloo process group. Ranks meet through `store`
/// (TCPStore across processes, HashStore for threads); every collective fails
/// after `timeout` instead of hanging. Ranks may be threads of one process:
/// its collectives are issued one thread at a time process-wide (LibTorch
/// 2.x's flight recorder races otherwise; issue 19).
std::shared_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     const GlooDevice& device = {});

/// The kinds of c10d process group basin drives, each in its own way: Gloo's
/// collectives are issued one thread at a time process-wide and its
/// reduce-scatters run as a ring; NCCL's are issued freely (its first
/// collective may wait for the peers) and reduce per owner.
enum class ProcessGroupKind { kGloo, kNccl };

/// How a process group of `kind` is made over a store: what a communicator
/// needs to split (its sub-groups are made the same way, over its store).
using MakeProcessGroup = std::function<c10::intrusive_ptr<compat::CollectiveBackend>(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size)>;

/// A communicator over a process group already built (`group` of `kind`);
/// make_gloo_communicator and make_nccl_communicator build theirs and call
/// this. Given the `store` its ranks met through and how its group was
/// `made`, it can split into groups of its ranks.
std::shared_ptr<Communicator> make_process_group_communicator(c10::intrusive_ptr<compat::CollectiveBackend> group,
                                                              ProcessGroupKind kind,
                                                              c10::intrusive_ptr<c10d::Store> store = {},
                                                              MakeProcessGroup made = nullptr);

/// Whether this build has NCCL (a CUDA LibTorch; see BASIN_WITH_NCCL).
bool nccl_available();

/// A communicator over an NCCL process group (CUDA tensors). Throws when
/// the build has no NCCL.
std::shared_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout);

}  // namespace basin

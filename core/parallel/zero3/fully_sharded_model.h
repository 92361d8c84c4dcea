#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/model/unit_runner.h"
#include "basin/core/parallel/ddp/gradient_ready_hooks.h"
#include "basin/core/parallel/zero3/fully_sharded_options.h"

namespace torch::nn { class Module; }
namespace torch::autograd { struct Node; }

namespace basin {

class BlockCache;
class Communicator;
class PendingCollective;

/// ZeRO-3 (FSDP-style): each rank stores a shard of every parameter, and a
/// unit's parameters exist whole only while it runs.
///
/// Shards are per parameter, along its first dimension (as FSDP2 does): with
/// d rows on N ranks, rank r holds rows [r c, (r+1) c) of c = ceil(d / N)
/// (the last ranks may hold fewer, or none; a 0-dim parameter is one row).
/// So a shard keeps the parameter's rows whole: per-row rules (gradient
/// centralization) and elementwise ones (every optimizer here) run on shards
/// unchanged, and the optimizer's groups map parameter for parameter.
///
/// At rest a parameter's storage holds no bytes. A unit's forward gathers it
/// (one all-gather of the unit's shards, the next unit's issued while this
/// one computes) and frees it as the next run starts; a hook on the unit's output gathers it
/// again when backward reaches the unit (the previous unit's issued too); once
/// every gradient of the unit is accumulated its parameters are freed and its
/// gradients reduce-scattered to their rows' owners, as backward goes on.
/// Freeing and refilling keep each parameter's storage object (its bytes are
/// swapped, its version is not bumped), so the tensors autograd saved for
/// backward see the gathered values again.
///
/// A run's unit is freed as the next run starts; the forward's last run,
/// where backward begins, is not gathered twice.
///
/// A unit may run more than once in a forward: a tied embedding is looked
/// up first (run_lookup: whole for the lookup alone, as an embedding's
/// backward reads only the ids) and runs again as the head. Gathers ahead
/// follow the order units ran in the previous forward (the declared order
/// in the first), backward's in the reverse of this forward's. A unit that
/// a lookup ran is freed as soon as backward has passed its last other run
/// (its gradient still waits for the lookup's): units are taken to run as a
/// chain, each run's output feeding the next, as the blocks of a network do.
/// The gradients are reduced in the reverse of each unit's first run.
///
/// On the CPU, gathered parameters and reduce parts (this rank's becomes its
/// gradients) take their bytes from blocks the model keeps for reuse
/// (BlockCache): blocks of one size serve every unit and step that asks for
/// it, where freed into malloc's heap they would leave holes among
/// longer-lived blocks.
///
/// Parameters under no unit form the root unit, whole from the forward's
/// start to their backward. Buffers (BatchNorm statistics) stay replicated.
///
/// With a mixed-precision policy the model's parameters take its param_dtype
/// for good (the shards stay fp32): a gather rounds each rank's rows once,
/// moves and holds half the bytes, and gradients come out in param_dtype and
/// are reduce-scattered in reduce_dtype onto the fp32 shards.
/// Every rank must run the same units in the same order, as under FSDP.
///
/// HSDP: given `replicas` (the ranks that hold this rank's rows in the
/// other shard groups, one from each), a unit's reduce-scattered rows are
/// summed over them too, in fp32, before they join the shards: a shard's
/// gradient is then the mean over every rank of the job, and the replicas'
/// shards step alike. Those all-reduces start as each reduce-scatter ends
/// and are waited for at backward's end, never from backward's hooks (a
/// rank waiting there would hold back the gathers a peer of another group
/// waits for); until then a rank holds its reduced rows of the units, its
/// shards' gradients' size in fp32.
class FullyShardedModel : public UnitRunner {
 public:
  /// `units`: the model's declared blocks, disjoint, in forward order. The
  /// model's parameters must be equal on every rank (broadcast first).
  FullyShardedModel(torch::nn::Module& model, const std::vector<torch::nn::Module*>& units,
                    std::shared_ptr<Communicator> communicator, FullyShardedOptions options = {},
                    std::shared_ptr<Communicator> replicas = nullptr);
  ~FullyShardedModel() override;
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  at::Tensor run_model(const std::function<at::Tensor()>& forward) override;
  at::Tensor run_unit(std::size_t unit, const std::function<at::Tensor()>& forward) override;
  at::Tensor run_lookup(std::size_t unit, const std::function<at::Tensor()>& forward) override;
  at::Tensor recompute_unit(std::size_t unit, const std::function<at::Tensor()>& forward) override;

  /// The model's parameters, in its order, and this rank's shard of each
  /// (a leaf the optimizer steps; its .grad the mean over ranks of its rows).
  const std::vector<at::Tensor>& parameters() const { return full_; }
  const std::vector<at::Tensor>& shards() const { return shards_; }
  const at::Tensor& shard_of(const at::Tensor& param) const;
  /// The first row of `param` that this rank's shard of it holds (0 for the
  /// model's parameter itself, which holds every row when gathered).
  int64_t first_row(const at::Tensor& param) const;

  /// The next backward is synced: its gradients go to the shards' owners.
  void prepare_for_backward();
  /// After that backward: reduce-scatters what its hooks did not, waits, and
  /// adds each row's mean over ranks to its shard's gradient (a parameter
  /// with a gradient on no rank leaves its shard's as it was).
  void finish_backward();
  /// The shards changed (an optimizer step, a checkpoint's shards loaded):
  /// a unit still whole from a forward that no backward followed (the root,
  /// the forward's last run, every unit under reshard_after_forward false,
  /// in a loop of your own) holds the old values, so it is freed.
  void shards_stepped();
  /// After a backward that threw (on every rank, as collectives fail
  /// together): drops its reduce-scatters, whole gradients and gathered
  /// parameters. The shards' gradients may hold part of it: zero them, as
  /// after any failed step. The trainer's closure calls it.
  void abandon_backward() noexcept;

  /// Every parameter whole, gathered from the shards (fp32 under any
  /// policy), in the model's order. Collective.
  std::vector<at::Tensor> whole_parameters();
  /// Runs `use` with every parameter whole in the model itself (in the
  /// shards' dtype: fp32 under a mixed-precision policy), then puts back
  /// what each held (nothing, at rest). Collective.
  void with_whole_parameters(const std::function<void()>& use);

  /// Bytes of parameters held whole on this rank now, and the most since
  /// reset_peak (read from the parameters' storages).
  int64_t gathered_bytes() const;
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes(); }
  /// Bytes of this rank's shards.
  int64_t shard_bytes() const;
  c10::Device device() const;
  /// Bytes of every block gathers and reduces have made on the CPU to reuse
  /// (kept from one unit and step to the next; it grows only when none fits).
  std::size_t cached_bytes() const;

 private:
  struct Unit;
  /// One run of a unit in a forward; only a run with a backward that reads
  /// its parameters (not a lookup) is gathered again for it.
  struct Run {
    std::size_t unit;
    bool read_in_backward;
  };
  using Runs = std::vector<Run>;

  /// Each rank's piece of parameter `i`'s rows in `whole` (its shape), this rank's filled from its shard.
  void add_pieces(std::size_t i, const at::Tensor& whole, std::vector<std::vector<at::Tensor>>& pieces) const;
  void start_gather(std::size_t unit);
  /// Notes a run in this forward's order; its place in it.
  std::size_t note_run(std::size_t unit, bool read_in_backward);
  /// Issues the gathers of the runs after this forward's `position`-th (a
  /// run of `unit`), as the previous forward ran them; the units issued.
  std::vector<std::size_t> gather_ahead(std::size_t position, std::size_t unit);
  /// Backward reached run `position` of `runs`: frees the looked-up units
  /// it has passed every other run of, and issues the gathers of the runs before it.
  void reached_in_backward(const Runs& runs, std::size_t position);
  /// Refuses a lookup whose backward could read the table it frees.
  void check_lookup(std::size_t unit, const at::Tensor& out) const;
  /// The reduce order for a backward of a forward that ran `runs`.
  void order_reduces(const Runs* runs);
  void with_master_parameters(const std::function<void()>& use);
  void gather(std::size_t unit);
  void release(std::size_t unit);
  void drop(std::size_t unit) noexcept;  // release(), even after a failed gather
  void mark_ready(std::size_t param);
  void start_ready_reduces();
  void start_reduce(std::size_t unit);
  void finish_reduce(std::size_t unit);
  /// The unit's reduced rows (`mine`: this rank's part, its rows then one
  /// flag per parameter) summed over `ranks`, added to the shards' gradients.
  void add_reduced(std::size_t unit, const at::Tensor& mine, int64_t ranks);
  void finish_replica_sum(std::size_t unit);
  void note_gathered();

  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<Communicator> replicas_;  // HSDP's: the same rows in the other shard groups; null under zero3
  FullyShardedOptions options_;
  std::vector<at::Tensor> full_;
  std::vector<at::Tensor> shards_;
  std::vector<bool> trains_;  // per parameter, as at construction: the reduce-scatter's layout depends on it
  std::vector<std::size_t> unit_of_;        // per parameter
  std::vector<std::vector<int64_t>> rows_;  // per parameter: rows of each rank
  std::unordered_map<const c10::TensorImpl*, std::size_t> index_;        // a parameter's place in full_
  std::unordered_map<const c10::TensorImpl*, std::size_t> shard_index_;  // a shard's
  std::vector<std::unique_ptr<Unit>> units_;  // declared ones, then the root (when it has parameters)
  std::size_t declared_ = 0;
  std::shared_ptr<Runs> runs_;            // this forward's (its backward's hooks hold them)
  std::shared_ptr<const Runs> graph_runs_;  // the last forward's with a graph: its backward's reduce order
  Runs previous_runs_;                    // the forward before this one's: gathers ahead follow it
  bool loose_runs_ = false;               // runs_ began outside run_model
  std::optional<std::size_t> held_to_next_run_;  // a unit whole past its run: the next run, or backward, frees it
  std::vector<std::size_t> reduce_order_;  // backward's: the last first run first, the root last
  std::size_t next_reduce_ = 0;
  bool armed_ = false;
  bool root_awaits_backward_ = false;  // a forward with a graph gathered the root; its backward frees it
  GradientReadyHooks ready_hooks_;
  std::recursive_mutex mutex_;  // hooks may run on autograd's device threads
  std::unique_ptr<BlockCache> blocks_;  // the CPU's gathered parameters and reduce parts
  int64_t peak_gathered_bytes_ = 0;
};

}  // namespace basin

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/algorithms/sam/sam.h"

namespace basin {

/// RWP's one-pass step (rwp.cpp says what it is and why): the pass at w + e,
/// e drawn per row from seeds fixed by (run seed, step, parameter, row) and
/// scaled by gamma times the row's norm (a vector's whole norm); or, with
/// "mix", the mixed form on two halves of the ranks. A variant (ARWP)
/// divides each row's scale by a value of its own.
class RWP : public SAM {
 public:
  explicit RWP(Params& params);
  std::string name() const override { return "rwp"; }

  bool ascent_pass() const override { return false; }
  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override;
  double pass_loss_weight() const override;
  /// The mixed form's step is perturbed on the other half of the ranks: a clean rank's counts too.
  bool perturbs(const std::vector<Perturbation>& perturbation) const override;

 protected:
  /// What divides the noise's scale on each of `rows` rows of `param` (the
  /// tensor this rank holds), [rows, 1] on the CPU; undefined: nothing
  /// (RWP's). With perturbs_on_owners(), asked of the parameters this rank steps alone.
  virtual at::Tensor row_divisor(const at::Tensor& /*param*/, int64_t /*rows*/) { return at::Tensor(); }
  void prepare(StepView& step, const RunFacts& run) override;

 private:
  double gamma_ = 0.01;
  uint64_t seed_ = 0;
  double mix_ = -1;         // the mixed form's lambda, the perturbed gradient's share; < 0: the one-pass form
  bool clean_rank_ = false;  // in the mixed form, this rank takes the clean gradient
};

}  // namespace basin

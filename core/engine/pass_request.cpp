#include "basin/core/engine/pass_request.h"

#include <ATen/ATen.h>

namespace basin {

Batch requested_samples(const Batch& batch, const PassRequest& request) {
  if (request.whole_batch()) return batch;
  const auto pick = [&request](const at::Tensor& whole) {
    if (!whole.defined()) return whole;
    const at::Tensor part = request.parts == 1 ? whole : whole.chunk(request.parts)[request.part];
    return request.samples.defined() ? part.index_select(0, request.samples.to(part.device())) : part;
  };
  return {pick(batch.inputs), pick(batch.targets), pick(batch.ids)};
}

}  // namespace basin

#include "basin/core/sample_selection.h"

#include <ATen/ATen.h>

namespace basin {

Batch selected(const Batch& batch, const SampleSelection& selection) {
  if (selection.whole_batch()) return batch;
  const auto pick = [&selection](const at::Tensor& whole) {
    if (!whole.defined()) return whole;
    const at::Tensor part = selection.parts == 1 ? whole : whole.chunk(selection.parts)[selection.part];
    return selection.samples.defined() ? part.index_select(0, selection.samples.to(part.device())) : part;
  };
  return {pick(batch.inputs), pick(batch.targets), pick(batch.ids)};
}

}  // namespace basin

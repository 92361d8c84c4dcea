#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "basin/core/data/dataset.h"

namespace basin {
namespace {

/// A seeded, learnable classification task for tests and smoke runs:
/// Gaussian inputs labelled by a random linear teacher (argmax of W x).
///
///     {"name": "synthetic", "train_size": 512, "test_size": 256,
///      "input_shape": [1, 8, 8], "num_classes": 4, "input_scale": 1}
///
/// "input_scale" multiplies the inputs: large values give the large
/// gradients of unnormalised data (the grad scaler's tests use it).
std::shared_ptr<DataSplits> synthetic(Params& params, int64_t seed) {
  const int64_t train_size = params.integer("train_size", 512, 1);
  const int64_t test_size = params.integer("test_size", 256, 1);
  const auto shape = params.integers("input_shape", {1, 8, 8});
  const int64_t classes = params.integer("num_classes", 4, 2);
  const int64_t data_seed = params.integer("data_seed", seed, 0);
  const double input_scale = params.positive("input_scale", 1.0);
  int64_t features = 1;
  for (int64_t d : shape) {
    if (d < 1) params.fail("input_shape", "positive dimensions", params.raw("input_shape"));
    features *= d;
  }

  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(data_seed));
  const at::Tensor teacher = at::randn({features, classes}, generator);
  auto make = [&](int64_t n) {
    const at::Tensor x = at::randn({n, features}, generator);
    const at::Tensor y = x.matmul(teacher).argmax(1);
    std::vector<int64_t> sizes = {n};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    return TensorDataset((x * input_scale).reshape(sizes).contiguous(), y);
  };
  auto splits = std::make_shared<DataSplits>();
  splits->train = make(train_size);
  splits->test = make(test_size);
  splits->info = DatasetInfo{shape, classes};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("synthetic", synthetic);

}  // namespace
}  // namespace basin

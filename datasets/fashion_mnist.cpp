#include <sys/stat.h>

#include <ATen/ATen.h>

#include "basin/core/data/dataset.h"
#include "basin/datasets/idx_file.h"

namespace basin {
namespace {

// Mean and standard deviation of the training images' pixels in [0, 1].
constexpr double kPixelMean = 0.2860;
constexpr double kPixelStd = 0.3530;

std::string required_file(const std::string& root, const std::string& name) {
  const std::string path = root + "/" + name;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    throw ConfigError("Fashion-MNIST file '" + path +
                      "' not found; install the Debian package 'dataset-fashion-mnist' or set data.root");
  }
  return path;
}

TensorDataset load_split(const std::string& root, const std::string& prefix) {
  const at::Tensor images = read_idx_file(required_file(root, prefix + "-images-idx3-ubyte.gz"));
  const at::Tensor labels = read_idx_file(required_file(root, prefix + "-labels-idx1-ubyte.gz"));
  at::Tensor inputs = ((images.to(at::kFloat) / 255.0 - kPixelMean) / kPixelStd).unsqueeze(1);
  return TensorDataset(inputs.contiguous(), labels.to(at::kLong));
}

/// Fashion-MNIST from the gzipped IDX files of Debian's dataset-fashion-mnist:
/// 60000 training and 10000 test images, 1x28x28, 10 classes, normalised.
std::shared_ptr<DataSplits> fashion_mnist(Params& params, int64_t /*seed*/) {
  const std::string root = params.string("root", "/usr/share/datasets/fashion-mnist");
  auto splits = std::make_shared<DataSplits>();
  splits->train = load_split(root, "train");
  splits->test = load_split(root, "t10k");
  splits->info = DatasetInfo{{1, 28, 28}, 10};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("fashion_mnist", fashion_mnist);

}  // namespace
}  // namespace basin

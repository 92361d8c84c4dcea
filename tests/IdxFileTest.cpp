#include <gtest/gtest.h>

#include <sys/stat.h>

#include <ATen/ATen.h>

#include "basin/core/data/dataset.h"
#include "basin/datasets/idx_file.h"
#include "test_util.h"

namespace basin {
namespace {

constexpr const char* kFashionRoot = "/usr/share/datasets/fashion-mnist";

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

TEST(IdxFileTest, RoundTripsGzippedAndPlainFiles) {
  test::TempDir dir;
  const at::Tensor images = at::arange(2 * 3 * 4, at::kLong).reshape({2, 3, 4}).to(at::kByte);
  const at::Tensor labels = at::tensor(std::vector<int64_t>{7, 250}).to(at::kByte);
  for (const std::string name : {"images.idx.gz", "images.idx"}) {
    write_idx_file(dir.file(name), images);
    const at::Tensor back = read_idx_file(dir.file(name));
    EXPECT_EQ(back.sizes(), images.sizes()) << name;
    EXPECT_TRUE(back.equal(images)) << name;
  }
  write_idx_file(dir.file("labels.gz"), labels);
  EXPECT_TRUE(read_idx_file(dir.file("labels.gz")).equal(labels));
}

TEST(IdxFileTest, HeaderIsBigEndianAsTheFormatSays) {
  test::TempDir dir;
  write_idx_file(dir.file("x.idx"), at::zeros({300}, at::kByte));
  const std::string bytes = test::read_text(dir.file("x.idx"));
  ASSERT_EQ(bytes.size(), 8u + 300u);
  EXPECT_EQ(bytes.substr(0, 4), std::string("\x00\x00\x08\x01", 4));
  EXPECT_EQ(bytes.substr(4, 4), std::string("\x00\x00\x01\x2c", 4));  // 300
}

TEST(IdxFileTest, MalformedFilesAreNamedInTheError) {
  test::TempDir dir;
  test::write_text(dir.file("bad.idx"), "not an idx file");
  write_idx_file(dir.file("short.idx"), at::zeros({10}, at::kByte));
  const std::string text = test::read_text(dir.file("short.idx"));
  test::write_text(dir.file("short.idx"), text.substr(0, text.size() - 3));
  for (const std::string name : {"bad.idx", "short.idx", "missing.idx"}) {
    try {
      read_idx_file(dir.file(name));
      FAIL() << name;
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
    }
  }
}

TEST(IdxFileTest, MissingFashionMnistNamesTheFileAndThePackage) {
  Params params(Json::parse(R"({"root": "/nonexistent/fashion"})"), "data");
  try {
    dataset_registry().create("fashion_mnist", params, 0);
    FAIL();
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("/nonexistent/fashion/train-images-idx3-ubyte.gz"), std::string::npos) << message;
    EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;
  }
}

TEST(IdxFileTest, RealFashionMnistFiles) {
  if (!exists(std::string(kFashionRoot) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian package dataset-fashion-mnist is not installed (" << kFashionRoot << ")";
  }
  const at::Tensor labels = read_idx_file(std::string(kFashionRoot) + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(labels.sizes(), at::IntArrayRef({10000}));
  // The test set is balanced: 1000 images of each of the 10 classes.
  const at::Tensor counts = at::bincount(labels.to(at::kLong));
  EXPECT_TRUE(counts.equal(at::full({10}, 1000, at::kLong)));

  Params params(Json::object(), "data");
  auto splits = dataset_registry().create("fashion_mnist", params, 0);
  EXPECT_EQ(splits->train.inputs().sizes(), at::IntArrayRef({60000, 1, 28, 28}));
  EXPECT_EQ(splits->test.size(), 10000);
  // Normalised with the training set's statistics: mean about 0, std about 1.
  EXPECT_NEAR(splits->train.inputs().mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(splits->train.inputs().std().item<double>(), 1.0, 0.01);
}

}  // namespace
}  // namespace basin

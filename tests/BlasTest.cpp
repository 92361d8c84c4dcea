// Which BLAS LibTorch's matrix products run on. A fresh Debian machine
// resolves Debian's LibTorch's libblas.so.3 to netlib's reference BLAS,
// about 20x slower on a GEMM than OpenBLAS, and nothing else would say so:
// this suite fails the build's tests there, and basin-train says which BLAS
// it runs on in its first line and warns on the reference one.
#include <gtest/gtest.h>

#include <filesystem>

#include "basin/core/base/blas.h"
#include "basin/core/base/torch_compat.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;
const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kSmoke = std::string(BASIN_SOURCE_DIR) + "/examples/configs/synthetic_smoke.json";
// Where Debian's libblas3 puts netlib's reference BLAS (the alternative of lowest priority).
const std::string kNetlibBlas = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";

TEST(BlasTest, LibTorchComputesWithAnOptimizedBlas) {
  const BlasInfo blas = blas_info();
  EXPECT_FALSE(blas.reference) << "LibTorch's matrix products run on " << blas.describe()
                               << ", about 20x slower than an optimized BLAS. Fix: " << kInstallOptimizedBlas;
  EXPECT_EQ(blas.name.find("no BLAS found"), std::string::npos) << blas.describe();
  EXPECT_EQ(blas.name.find("unrecognized"), std::string::npos) << blas.describe();
}

TEST(BlasTest, TellsTheLibrariesApartByWhatTheySayOfThemselves) {
  const std::string generic = "  - Build settings: BLAS_INFO=generic, BUILD_TYPE=RelWithDebInfo, LAPACK_INFO=generic";
  const BlasInfo netlib = classify_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", "", -1, "", generic);
  EXPECT_TRUE(netlib.reference);
  EXPECT_EQ(netlib.describe(), "reference BLAS (netlib) from /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");

  const BlasInfo openblas = classify_blas("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3",
                                          "OpenBLAS 0.3.21  DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64", 2, "", generic);
  EXPECT_FALSE(openblas.reference);
  EXPECT_EQ(openblas.describe(),
            "OpenBLAS 0.3.21 (OpenMP threading) from /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  EXPECT_EQ(classify_blas("x", "OpenBLAS 0.3.21", 1, "", generic).threading, "pthreads");
  EXPECT_EQ(classify_blas("x", "OpenBLAS 0.3.21", 0, "", generic).threading, "sequential");

  EXPECT_EQ(classify_blas("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3", "", -1, "0.9.0", generic).name, "BLIS 0.9.0");
  const BlasInfo mkl = classify_blas("", "", -1, "",
                                     "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605\n"
                                     "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release");
  EXPECT_EQ(mkl.describe(), "MKL 2024.2 (OpenMP threading) inside LibTorch");
  EXPECT_FALSE(mkl.reference);

  // An optimized BLAS in a folder of its own is not the reference one, recognized or not.
  const BlasInfo atlas = classify_blas("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3", "", -1, "", generic);
  EXPECT_FALSE(atlas.reference);
  EXPECT_EQ(atlas.name, "an unrecognized BLAS");
}

TEST(BlasTest, BasinTrainSaysWhichBlasAndWarnsOnTheReferenceOne) {
  test::TempDir dir;
  const BlasInfo blas = blas_info();
  auto run = test::run_command(kTrain + " --config " + kSmoke + " --run-dir " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto lines = test::lines_of(run.output);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.front().find(std::string("LibTorch ") + compat::torch_version() + " on " + blas.describe() + ", 1 thread"),
            std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("REFERENCE BLAS"), std::string::npos) << run.output;

  // The reference BLAS, put first on the loader's path where LibTorch links libblas.so.3.
  if (blas.library.find("libblas.so") == std::string::npos) {
    GTEST_SKIP() << "this LibTorch does not take its BLAS from libblas.so.3 (" << blas.describe() << ")";
  }
  if (!fs::exists(kNetlibBlas)) GTEST_SKIP() << "netlib's reference BLAS is not installed (" << kNetlibBlas << ")";
  fs::create_symlink(kNetlibBlas, dir.file("libblas.so.3"));
  run = test::run_command("env LD_LIBRARY_PATH=" + dir.path().string() + " " + kTrain + " --config " + kSmoke +
                          " --set max_steps=1 --run-dir " + dir.file("slow"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("on reference BLAS (netlib) from /usr/lib/x86_64-linux-gnu/blas/libblas.so.3"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("REFERENCE BLAS"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("apt-get install libopenblas0-openmp"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace basin

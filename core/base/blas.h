#pragma once

// Which BLAS LibTorch's matrix products run on. Debian's LibTorch links
// libblas.so.3, which Debian's alternatives resolve at run time: on a fresh
// machine to netlib's reference BLAS, about 20x slower on a GEMM than
// OpenBLAS. Nothing else tells a user (or a benchmark) which one they got.

#include <string>

namespace basin {

struct BlasInfo {
  std::string name;       // "OpenBLAS 0.3.21", "MKL 2024.2", "reference BLAS (netlib)", ...
  std::string library;    // the file that provides sgemm_ (links resolved), or "inside LibTorch"
  std::string threading;  // "OpenMP", "pthreads", "sequential" when the library says so, else ""
  bool reference = false; // netlib's reference implementation: warn, and fail the build's test

  /// One line: "OpenBLAS 0.3.21 (OpenMP threading) from /usr/lib/...".

  std::string describe() const;
};

/// The BLAS of this process: what the library that sgemm_ resolves to says
/// of itself (OpenBLAS, BLIS, MKL), else what LibTorch was built with
/// (at::show_config: MKL inside PyPI's LibTorch), else the file's place
/// (Debian's reference BLAS lives in .../blas/).
BlasInfo blas_info();

/// Told apart from what blas_info() reads (its rules, testable on their own):
/// the sgemm_ library's resolved path ("" if none), OpenBLAS's
/// openblas_get_config() and openblas_get_parallel() (config "" if not
/// OpenBLAS), BLIS's version ("" if not BLIS) and at::show_config()'s text.
BlasInfo classify_blas(const std::string& library, const std::string& openblas_config, int openblas_parallel,
                       const std::string& blis_version, const std::string& torch_config);

/// LibTorch's intra-op threads (at::set_num_threads), and the BLAS's with
/// them: OpenBLAS's pthreads flavour keeps a pool of its own that ignores
/// OpenMP's setting (its OpenMP flavour follows it; LibTorch sets MKL's).
void set_compute_threads(int threads);

/// What to run to get an optimized BLAS on Debian, for a warning.
extern const char* const kInstallOptimizedBlas;

}  // namespace basin

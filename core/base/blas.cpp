#include "basin/core/base/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <regex>
#include <sstream>

#include <ATen/Parallel.h>
#include <ATen/Version.h>

namespace basin {
namespace {

// The word after `key` in `text` ("BLAS_INFO=" -> "mkl"), or "".
std::string value_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size();
  return text.substr(begin, text.find_first_of(", \n", begin) - begin);
}

// The address's library, symbolic links resolved (Debian's alternatives are links).
std::string library_of(void* symbol) {
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code error;
  const auto resolved = std::filesystem::canonical(info.dli_fname, error);
  return error ? std::string(info.dli_fname) : resolved.string();
}

// A function of the library that provides sgemm_, or null. Looked up in that
// library itself: liblapack.so.3 is another alternative, and may load a
// second OpenBLAS (another threading flavour) whose symbols come first.
template <class Function>
Function function_of(const std::string& library, const char* name) {
  if (library.empty()) return nullptr;
  void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  auto* function = reinterpret_cast<Function>(dlsym(handle, name));
  dlclose(handle);  // NOLOAD took a reference on a library that stays loaded
  return function;
}

std::string sgemm_library() { return library_of(dlsym(RTLD_DEFAULT, "sgemm_")); }

}  // namespace

const char* const kInstallOptimizedBlas =
    "sudo apt-get install libopenblas0-openmp (Debian's alternatives then point libblas.so.3 at it), "
    "or bash scripts/install-deps.sh";

std::string BlasInfo::describe() const {
  std::string text = name;
  if (!threading.empty()) text += " (" + threading + " threading)";
  if (!library.empty()) text += (library == "inside LibTorch" ? " " : " from ") + library;
  return text;
}

BlasInfo classify_blas(const std::string& library, const std::string& openblas_config, int openblas_parallel,
                       const std::string& blis_version, const std::string& torch_config) {
  BlasInfo info;
  info.library = library;
  if (!openblas_config.empty()) {
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the name and version.
    std::istringstream words(openblas_config);
    std::string product, version;
    words >> product >> version;
    info.name = "OpenBLAS " + version;
    info.threading = openblas_parallel == 2 ? "OpenMP" : openblas_parallel == 1 ? "pthreads" : "sequential";
    return info;
  }
  if (!blis_version.empty()) {
    info.name = "BLIS " + blis_version;
    return info;
  }
  if (value_after(torch_config, "BLAS_INFO=") == "mkl") {
    // "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build ...": linked into LibTorch.
    std::smatch version;
    const std::regex pattern("Math Kernel Library Version ([0-9.]+)");
    info.name = std::regex_search(torch_config, version, pattern) ? "MKL " + version[1].str() : "MKL";
    info.threading = "OpenMP";
    if (info.library.empty()) info.library = "inside LibTorch";
    return info;
  }
  // Debian installs netlib's reference BLAS as .../blas/libblas.so.3.*; the
  // optimized ones live in folders named after themselves (openblas-openmp/, blis-pthread/, atlas/).
  const std::filesystem::path path(library);
  if (!library.empty() && path.parent_path().filename() == "blas" && path.filename().string().rfind("libblas.so", 0) == 0) {
    info.name = "reference BLAS (netlib)";
    info.reference = true;
    return info;
  }
  info.name = library.empty() ? "no BLAS found (LibTorch's BLAS_INFO=" + value_after(torch_config, "BLAS_INFO=") + ")"
                              : "an unrecognized BLAS";
  return info;
}

BlasInfo blas_info() {
  const std::string library = sgemm_library();
  std::string openblas_config, blis_version;
  int openblas_parallel = -1;
  if (auto get_config = function_of<char* (*)()>(library, "openblas_get_config")) openblas_config = get_config();
  if (auto get_parallel = function_of<int (*)()>(library, "openblas_get_parallel")) openblas_parallel = get_parallel();
  if (auto get_version = function_of<char* (*)()>(library, "bli_info_get_version_str")) blis_version = get_version();
  return classify_blas(library, openblas_config, openblas_parallel, blis_version, at::show_config());
}

void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  // OpenBLAS's pthreads pool would otherwise run a 1-thread rank's products on every core.
  const std::string library = sgemm_library();
  auto get_parallel = function_of<int (*)()>(library, "openblas_get_parallel");
  auto set_threads = function_of<void (*)(int)>(library, "openblas_set_num_threads");
  auto get_threads = function_of<int (*)()>(library, "openblas_get_num_threads");
  if (get_parallel == nullptr || set_threads == nullptr || get_threads == nullptr || get_parallel() != 1) return;
  // The pool is the process's: ranks run as threads of one process (tests, the hand loop) share it, and
  // resizing it while another thread multiplies is not safe. Set it once per change, under a lock.
  static std::mutex resizing;
  const std::lock_guard<std::mutex> lock(resizing);
  if (get_threads() != threads) set_threads(threads);
}

}  // namespace basin

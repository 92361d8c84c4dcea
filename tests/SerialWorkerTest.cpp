// SerialWorker: jobs run in the order posted; a job's captures are gone
// when its future is ready (a collective's tensors may be reused then).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "basin/core/communication/serial_worker.h"

namespace basin {
namespace {

TEST(SerialWorkerTest, JobsRunInTheOrderPosted) {
  SerialWorker worker;
  std::vector<int> order;
  std::vector<std::future<void>> done;
  for (int i = 0; i < 5; ++i) done.push_back(worker.post([&order, i] { order.push_back(i); }));
  for (auto& d : done) d.get();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

/// Sets its flag as it is destroyed, slowly: a destruction still under way shows.
struct SlowToLetGo {
  explicit SlowToLetGo(std::atomic<bool>& gone) : gone(gone) {}
  ~SlowToLetGo() {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gone = true;
  }
  std::atomic<bool>& gone;
};

TEST(SerialWorkerTest, AJobsCapturesAreGoneWhenItsFutureIsReady) {
  SerialWorker worker;
  for (const bool throws : {false, true}) {
    std::atomic<bool> gone{false};
    auto held = std::make_shared<SlowToLetGo>(gone);
    auto done = worker.post([held, throws] {
      if (throws) throw std::runtime_error("failed");
    });
    held.reset();  // the job's copy is the last
    done.wait();   // the future, still held, shares the job's state
    EXPECT_TRUE(gone) << (throws ? "a job that threw" : "a job that ran");
    if (throws) {
      EXPECT_THROW(done.get(), std::runtime_error);
    } else {
      done.get();
    }
  }
}

}  // namespace
}  // namespace basin

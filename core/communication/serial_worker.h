#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace basin {

/// One background thread that runs the jobs posted to it one at a time, in
/// the order they were posted: a communication stream for collectives the
/// backend runs only synchronously (Gloo's reduce-scatter ring of sends and
/// receives), so that the caller goes on computing meanwhile. The thread
/// starts with the first job; destruction drops the jobs not started,
/// waits for the one running, then joins.
class SerialWorker {
 public:
  SerialWorker() = default;
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  /// Queues `job`; the future is ready when it has run and been destroyed
  /// (and rethrows what it threw): nothing it captured is held past that.
  std::future<void> post(std::function<void()> job);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace basin

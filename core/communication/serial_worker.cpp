#include "basin/core/communication/serial_worker.h"

namespace basin {

SerialWorker::~SerialWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    // Nobody waits for them any more (a failing run, after a timeout): each
    // could wait out its own timeout. Their futures report a broken promise.
    jobs_.clear();
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::future<void> SerialWorker::post(std::function<void()> job) {
  // The job, with what it captured (a collective's tensors), is destroyed as
  // it ends, before its future is ready: whoever waited may reuse that memory.
  std::packaged_task<void()> task([job = std::move(job)]() mutable {
    const std::function<void()> running = std::move(job);
    running();
  });
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(task));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_one();
  return done;
}

void SerialWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping
    std::packaged_task<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();  // an exception lands in the job's future
    lock.lock();
  }
}

}  // namespace basin

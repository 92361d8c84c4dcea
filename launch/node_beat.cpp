// A launcher's beats in the launchers' TCPStore, and the connection to that
// store (node_beat.h).

#include "basin/launch/node_beat.h"

#include <chrono>
#include <exception>

namespace basin::launch {

c10::intrusive_ptr<c10d::TCPStore> connect(const JobShape& shape, bool server) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(shape.master_port);
  options.isServer = server;
  options.waitWorkers = false;
  options.timeout = shape.join_timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(shape.master_addr, options);
  // Every later operation gives up as a lost node would: a machine that
  // vanished answers nothing, not even a reset.
  store->setTimeout(shape.lost_after);
  return store;
}

Beat::Beat(const JobShape& shape, const std::string& counter) : store_(connect(shape, false)), counter_(counter) {
  store_->add(counter_, 1);
  thread_ = std::thread([this] { run(); });
}

Beat::~Beat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Beat::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    try {
      store_->add(counter_, 1);
    } catch (const std::exception&) {
      // node 0 is gone: the main thread finds out and says so
    }
  }
}

}  // namespace basin::launch

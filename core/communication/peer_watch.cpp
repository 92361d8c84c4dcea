#include "basin/core/communication/peer_watch.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <sstream>
#include <vector>

namespace basin {

namespace {

std::string alive_key(int rank) { return "basin/alive/" + std::to_string(rank); }
std::string progress_key(int rank) { return "basin/progress/" + std::to_string(rank); }

}  // namespace

struct PeerWatch::Shared {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds beat{1000};
  std::atomic<int64_t> count{0};
  std::atomic<const char*> name{"none"};
  std::mutex store_mutex;  // the store's client: the beat thread and explain()'s reads
  std::mutex stop_mutex;
  std::condition_variable changed;
  bool stopping = false;
  bool stopped = false;

  // Each beat: this rank's progress, then one more sign of life.
  void run() {
    std::unique_lock<std::mutex> stop_lock(stop_mutex);
    while (!stopping) {
      stop_lock.unlock();
      const std::string progress = std::to_string(count.load()) + " " + name.load();
      try {
        std::lock_guard<std::mutex> lock(store_mutex);
        store->set(progress_key(rank), std::vector<uint8_t>(progress.begin(), progress.end()));
        store->add(alive_key(rank), 1);
      } catch (const std::exception&) {
        // The store's host (rank 0) is gone: the collectives will say so.
      }
      stop_lock.lock();
      changed.wait_for(stop_lock, beat, [this] { return stopping; });
    }
    stopped = true;
    changed.notify_all();
  }

  // Every rank's beat count now, and (with `progress`) what each last started.
  std::vector<int64_t> beats(std::vector<std::string>* progress) {
    std::lock_guard<std::mutex> lock(store_mutex);
    std::vector<int64_t> counts;
    for (int r = 0; r < world_size; ++r) {
      counts.push_back(store->add(alive_key(r), 0));
      if (progress == nullptr) continue;
      std::string text;
      if (store->check({progress_key(r)})) {
        const auto bytes = store->get(progress_key(r));
        text.assign(bytes.begin(), bytes.end());
      }
      progress->push_back(text);
    }
    return counts;
  }
};

PeerWatch::PeerWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds beat)
    : shared_(std::make_shared<Shared>()) {
  shared_->store = std::move(store);
  shared_->rank = rank;
  shared_->world_size = world_size;
  shared_->beat = beat;
  thread_ = std::thread([shared = shared_] { shared->run(); });
}

PeerWatch::~PeerWatch() {
  std::unique_lock<std::mutex> lock(shared_->stop_mutex);
  shared_->stopping = true;
  shared_->changed.notify_all();
  // A beat stuck on a store that does not answer is left to end with the process.
  if (shared_->changed.wait_for(lock, shared_->beat * 3, [this] { return shared_->stopped; })) {
    lock.unlock();
    thread_.join();
  } else {
    thread_.detach();
  }
}

void PeerWatch::started(int64_t count, const char* name) {
  shared_->name.store(name);
  shared_->count.store(count);
}

std::string PeerWatch::explain(int64_t count) {
  struct Reading {
    std::vector<int64_t> before, after;
    std::vector<std::string> progress;
  };
  // Two beats and a half apart: a live rank counts at least two.
  const auto apart = shared_->beat * 5 / 2;
  std::packaged_task<Reading()> read([shared = shared_, apart] {
    Reading reading;
    reading.before = shared->beats(nullptr);
    std::this_thread::sleep_for(apart);
    reading.after = shared->beats(&reading.progress);
    return reading;
  });
  std::future<Reading> done = read.get_future();
  std::thread reader(std::move(read));
  const auto limit = apart + shared_->beat * 5;
  if (done.wait_for(limit) != std::future_status::ready) {
    reader.detach();  // it holds what it uses; the store may never answer it
    std::ostringstream message;
    message << "rank 0 stopped answering (the job's store, which it hosts, gave no answer in " << limit.count() << " ms)";
    return message.str();
  }
  reader.join();
  Reading reading;
  try {
    reading = done.get();
  } catch (const std::exception& error) {
    const std::string what = error.what();
    return "rank 0 stopped answering (the job's store, which it hosts, failed: " + what.substr(0, what.find('\n')) + ")";
  }
  std::string stopped, behind;
  for (int r = 0; r < shared_->world_size; ++r) {
    if (r == shared_->rank) continue;
    std::istringstream fields(reading.progress[static_cast<std::size_t>(r)]);
    int64_t started = 0;
    std::string name;
    fields >> started >> name;
    const std::string where = "collective #" + std::to_string(started) + ", " + name;
    if (reading.after[static_cast<std::size_t>(r)] == reading.before[static_cast<std::size_t>(r)]) {
      stopped += (stopped.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                 " stopped answering (no sign of life in " + std::to_string(apart.count()) +
                 " ms; its last beat had it at " + where + ")";
    } else if (started < count) {
      behind += (behind.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                " is alive but has not reached this collective (it is at " + where + ")";
    }
  }
  return stopped.empty() ? behind : stopped;
}

}  // namespace basin

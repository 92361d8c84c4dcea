// LibTorch alone, no basin: Gloo ranks as threads of one process, each round
// a fresh group per rank, every thread issuing its group's first broadcasts at
// once. On LibTorch 2.x this crashes in FlightRecorder::recordWithResetEnabled,
// which inserts each new group into a process-wide std::map before taking its
// lock; "serialize" issues the collectives one thread at a time, as basin's
// communicator does. See run.sh beside this file.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  const bool serialize = argc > 2 && std::string(argv[2]) == "serialize";
  std::mutex issue;
  for (int round = 0; round < rounds; ++round) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        auto options = c10d::ProcessGroupGloo::Options::create();
        options->timeout = std::chrono::seconds(20);
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, options);
        for (int i = 0; i < 4; ++i) {
          std::vector<at::Tensor> tensors{at::ones({8})};
          c10::intrusive_ptr<c10d::Work> work;
          {
            std::unique_lock<std::mutex> lock(issue, std::defer_lock);
            if (serialize) lock.lock();
            work = group->broadcast(tensors);
          }
          work->wait();  // waiting stays concurrent either way
        }
      });
    }
    for (auto& rank : ranks) rank.join();
  }
  std::printf("flight_recorder_race: %d rounds of %s issue, no crash\n", rounds,
              serialize ? "serialized" : "concurrent");
}

#pragma once

// The launchers' store: keys and values that node 0's launcher hosts and every
// launcher reaches over TCP (store_coordinator.cpp names the keys). Internal
// to basin_launch: not installed.
//
// Not c10d's TCPStore: its server (LibTorch 1.13's, and 2.x's default
// backend) is one thread that reads a request field by field with blocking
// reads, and its client sends the fields one send() at a time. A launcher
// stopped between two of them (SIGSTOP, a frozen or cut-off machine, or just
// a thread preempted there on a loaded one) held the store for every node:
// node 0 then timed out on its own store ("Socket Timeout") instead of seeing
// that node's beats stop. Here a request is one frame sent at once, and the
// server gathers each connection's bytes apart and answers whole frames only:
// a half-sent request delays no one but its sender.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

namespace basin::launch {

/// Hosts the store on `port` of every interface, from a thread of its own.
class StoreServer {
 public:
  /// Throws std::runtime_error when the port cannot be bound, saying why.
  explicit StoreServer(int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  void serve();

  int listener_ = -1;
  int wake_[2] = {-1, -1};  // closing wake_[1] ends serve()
  std::thread thread_;
};

/// One connection to the store, for one thread. A call that gets no answer
/// within `answer_within` throws std::runtime_error and drops the connection
/// (a late answer must not be read as the next call's); the next call
/// connects again.
class StoreClient {
 public:
  /// Keeps trying to connect for `connect_within` (node 0 may start later).
  StoreClient(std::string host, int port, std::chrono::milliseconds connect_within,
              std::chrono::milliseconds answer_within);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  std::optional<std::string> get(const std::string& key);  // nullopt: not set
  bool check(const std::string& key) { return get(key).has_value(); }
  /// Adds delta to the key's number (0 when unset) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);

 private:
  std::string call(char op, const std::string& key, const std::string& value);
  void connect(std::chrono::steady_clock::time_point deadline);
  void drop();

  std::string host_;
  int port_;
  std::chrono::milliseconds answer_within_;
  int fd_ = -1;
};

}  // namespace basin::launch

#pragma once

// The launchers' store: keys and values that node 0's launcher hosts and every
// launcher reaches over TCP (store_coordinator.cpp names the keys). Internal
// to basin_launch: not installed.
//
// Not c10d's TCPStore: its server (LibTorch 1.13's, and 2.x's before 2.4 made
// libuv's the default) is one thread that reads a request field by field with
// blocking reads, and its client sends the fields one send() at a time. A
// launcher stopped between two of them (SIGSTOP, a frozen or cut-off machine,
// or just a thread preempted there on a loaded one) held the store for every
// node: node 0 then timed out on its own store ("Socket Timeout") instead of
// seeing that node's beats stop. Here a request is one frame, and
// the server gathers each connection's bytes apart and answers whole frames
// only: a half-sent request delays no one but its sender.

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace basin::launch {

/// Hosts the store on `port` of every interface, from a thread of its own.
/// Each server has a random instance that its clients check on reconnecting:
/// a new job's store on the same port is not this one.
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
  std::string instance_;
  std::thread thread_;
};

/// One connection to the store, for one thread. A call that gets no answer
/// within `answer_within` throws std::runtime_error and drops the connection
/// (a late answer must not be read as the next call's); the next call
/// connects again, to the same address and the same server instance only.
/// The server closes a connection only when it stops, so once it closed
/// this one, refused a new one or another instance answered, the store is
/// gone: every later call throws at once (node 0's launcher died; a new
/// job's store on its port must get nothing of this one's).
class StoreClient {
 public:
  /// Resolves `host` and keeps trying to connect for `connect_within` (node 0
  /// may start later).
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
  std::string resolve();
  void connect(std::chrono::steady_clock::time_point deadline);
  void greet(std::chrono::steady_clock::time_point deadline);
  std::string exchange(const std::string& request, std::chrono::steady_clock::time_point deadline);
  void drop();

  std::string host_;
  int port_;
  std::chrono::milliseconds answer_within_;
  // Resolved once (a reconnect never waits on DNS); after the first connection, only the address that took it.
  std::vector<std::pair<sockaddr_storage, socklen_t>> addresses_;
  int fd_ = -1;
  bool greeted_ = false;  // this connection's server said its instance
  std::string instance_;  // the server's, from the first connection
  std::string gone_;      // why the store is gone; empty while it is not
};

}  // namespace basin::launch

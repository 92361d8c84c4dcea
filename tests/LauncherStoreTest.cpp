// The launchers' store (launch/launcher_store.h) and the liveness that
// basin-run reads from it: what must hold on a loaded machine, where a
// launcher's thread can stop anywhere for a while.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "basin/launch/coordinator.h"
#include "basin/launch/launcher_store.h"
#include "basin/launch/store_messages.h"

namespace basin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "no error";
}

// A blocking socket's reads give up after 10 s: a regression fails the test instead of hanging it.
void read_within_10s(int fd) {
  const timeval limit{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}

// A launcher stopped halfway through sending a request (SIGSTOP, a frozen
// machine, a thread preempted between two sends) once held c10d's store for
// every node: node 0 timed out on its own store instead of seeing the
// stopped node's beats stop. Here the others' calls go on at once, and the
// stopped one is answered when it goes on.
TEST(LauncherStoreTest, AHalfSentRequestHoldsUpNoOtherClient) {
  const int port = launch::free_port();
  launch::StoreServer server(port);
  const int stopped = connect_raw(port);
  // add("beat", 1) is the frame [10]['a'][4]"beat""1": its length and op go, then it stops.
  const char head[] = {0, 0, 0, 10, 'a'}, rest[] = {0, 0, 0, 4, 'b', 'e', 'a', 't', '1'};
  ASSERT_EQ(send(stopped, head, sizeof head, 0), static_cast<ssize_t>(sizeof head));
  std::this_thread::sleep_for(100ms);  // the server has read the half

  // A server held by the half would answer none of these: each call throws after its 5 s (no bound on
  // how long they take here, which a loaded machine's scheduling decides).
  launch::StoreClient client("127.0.0.1", port, 5s, 5s);
  for (int beat = 1; beat <= 20; ++beat) ASSERT_EQ(client.add("beat", 1), beat);
  client.set("attempt/0", "run 1234 0 1");
  EXPECT_EQ(client.get("attempt/0"), "run 1234 0 1");
  EXPECT_FALSE(client.get("verdict/0").has_value());

  ASSERT_EQ(send(stopped, rest, sizeof rest, 0), static_cast<ssize_t>(sizeof rest));
  read_within_10s(stopped);
  char answer[6] = {};
  ssize_t got = 0;
  for (ssize_t now = 1; got < 6 && now > 0;) {
    if ((now = recv(stopped, answer + got, sizeof answer - got, 0)) > 0) got += now;
  }
  EXPECT_EQ(std::string(answer, 6), std::string("\0\0\0\2" "21", 6));  // its beat counted after the others' 20
  close(stopped);
}

// A call that gets no answer gives up within its time, whatever the store does.
TEST(LauncherStoreTest, ACallUnansweredInTimeGivesUpInThatTime) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);  // it listens (connects succeed) and never reads
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(listen(silent, 4), 0);
  getsockname(silent, reinterpret_cast<sockaddr*>(&address), &size);
  launch::StoreClient client("127.0.0.1", ntohs(address.sin_port), 5s, 300ms);
  const auto start = Clock::now();
  try {
    client.add("beat", 1);
    ADD_FAILURE() << "a silent store answered";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("no answer within 300 ms"), std::string::npos) << error.what();
  }
  EXPECT_GE(seconds_since(start), 0.29);
  EXPECT_LT(seconds_since(start), 2.0);
  close(silent);
}

// Node 0's launcher died: node 1's later calls (its failure, its result, its
// bye) fail at once instead of each waiting out its timeout for a store that
// may come back, and none reaches the store a new job's node 0 opens on the port.
TEST(LauncherStoreTest, AStoreThatWentFailsEveryLaterCallAtOnce) {
  const int port = launch::free_port();
  auto server = std::make_unique<launch::StoreServer>(port);
  launch::StoreClient client("127.0.0.1", port, 5s, 20s);
  EXPECT_EQ(client.add("beat/1/1", 1), 1);
  server.reset();
  for (int call = 0; call < 2; ++call) {
    const auto start = Clock::now();
    EXPECT_NE(error_of([&] { client.add("beat/1/1", 1); }).find("closed the connection"), std::string::npos);
    EXPECT_LT(seconds_since(start), 10.0);  // well within the call's 20 s
  }
  launch::StoreServer next_job(port);
  const auto start = Clock::now();
  EXPECT_NE(error_of([&] { client.set("end/0/1", "0"); }).find("closed the connection"), std::string::npos);
  EXPECT_LT(seconds_since(start), 10.0);
  launch::StoreClient next_node("127.0.0.1", port, 5s, 5s);
  EXPECT_FALSE(next_node.get("end/0/1").has_value());
  EXPECT_FALSE(next_node.get("beat/1/1").has_value());
}

// A call that timed out connects again for the next, to the store it knew
// only: a launcher that outlived its job must not beat into the next job's
// store on the same port, whose server is another instance.
TEST(LauncherStoreTest, AClientConnectingAgainRefusesAnotherStoreOnItsPort) {
  const int stalled = socket(AF_INET, SOCK_STREAM, 0);  // a store that says its instance, then stalls
  const int one = 1;
  setsockopt(stalled, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(bind(stalled, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(listen(stalled, 4), 0);
  getsockname(stalled, reinterpret_cast<sockaddr*>(&address), &size);
  const int port = ntohs(address.sin_port);
  auto stalling = std::async(std::launch::async, [stalled] {
    const int fd = accept(stalled, nullptr, nullptr);
    read_within_10s(fd);
    char hello[9];  // the client's first request: [5]['h'][0] (launcher_store.cpp's frame)
    const bool greeted = recv(fd, hello, sizeof hello, MSG_WAITALL) == 9 && hello[4] == 'h';
    const char instance[] = {0, 0, 0, 5, 'o', 't', 'h', 'e', 'r'};
    if (greeted) send(fd, instance, sizeof instance, MSG_NOSIGNAL);
    for (char rest[64]; recv(fd, rest, sizeof rest, 0) > 0;) {  // the unanswered add, then the client's close
    }
    close(fd);
    return greeted;
  });
  launch::StoreClient client("127.0.0.1", port, 5s, 3s);
  EXPECT_NE(error_of([&] { client.add("beat/1/1", 1); }).find("no answer within 3000 ms"), std::string::npos);
  EXPECT_TRUE(stalling.get());
  close(stalled);

  launch::StoreServer next_job(port);
  for (int call = 0; call < 2; ++call) {
    EXPECT_NE(error_of([&] { client.add("beat/1/1", 1); }).find("another store answers"), std::string::npos);
  }
  launch::StoreClient next_node("127.0.0.1", port, 5s, 5s);
  EXPECT_FALSE(next_node.get("beat/1/1").has_value());
}

// What the store refuses (a sum past int64's range, an add to text, a request
// over its frame) fails that call only: the connection stays, nothing changes.
TEST(LauncherStoreTest, ARefusedRequestFailsThatCallOnly) {
  const int port = launch::free_port();
  launch::StoreServer server(port);
  launch::StoreClient client("127.0.0.1", port, 5s, 5s);
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(client.add("n", kMost), kMost);
  EXPECT_NE(error_of([&] { client.add("n", 1); }).find("overflows"), std::string::npos);
  client.set("text", "abc");
  EXPECT_NE(error_of([&] { client.add("text", 1); }).find("not a number"), std::string::npos);
  EXPECT_NE(error_of([&] { client.set("big", std::string(2 << 20, 'x')); }).find("over the store's limit"),
            std::string::npos);
  EXPECT_EQ(client.add("n", -1), kMost - 1);
  EXPECT_EQ(client.get("text"), "abc");
  EXPECT_FALSE(client.get("big").has_value());
}

// Node 1 may look at node 0 before node 0's first beat has landed: it gives
// node 0 the window (--node-timeout) from that first look, and only a node 0
// silent for all of it is lost. Node 0 here said the job's shape and never beats.
// The window is 5 s against the test's 1 s look: a test thread stalled for a
// few seconds on a loaded machine still finds node 1 waiting.
TEST(LauncherStoreTest, ANodeLookingBeforeNodeZerosFirstBeatGivesItTheWindow) {
  launch::JobShape shape;
  shape.nnodes = shape.min_nodes = 2;
  shape.node_rank = 1;
  shape.master_port = launch::free_port();
  shape.join_timeout = 10s;
  shape.lost_after = 5s;
  launch::StoreServer server(shape.master_port);
  launch::StoreClient node_zero("127.0.0.1", shape.master_port, 5s, 5s);
  node_zero.set("basin-run/shape", "2 1");  // store_coordinator.cpp's keys
  const auto coordinator = launch::make_store_coordinator(shape);
  const auto start = Clock::now();
  auto started = std::async(std::launch::async, [&] { return coordinator->start(0); });
  if (started.wait_for(1s) != std::future_status::timeout) {
    FAIL() << "node 1 did not wait for node 0's first beat: " << started.get().message;
  }
  node_zero.set("basin-run/attempt/0", launch::start_text({true, 1234, 0, "", {}}));
  const launch::Start begun = started.get();
  EXPECT_TRUE(begun.run) << begun.message;
  EXPECT_EQ(begun.port, 1234);
  std::string reason;
  while ((reason = coordinator->stop_reason(0)).empty() && seconds_since(start) < 20) std::this_thread::sleep_for(50ms);
  EXPECT_NE(reason.find("node 0 was lost: its launcher gave no sign of life for 5 s"), std::string::npos) << reason;
  EXPECT_GE(seconds_since(start), 4.9);
}

}  // namespace
}  // namespace basin

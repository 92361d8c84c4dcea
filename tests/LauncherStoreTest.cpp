// The launchers' store (launch/launcher_store.h) and the liveness that
// basin-run reads from it: what must hold on a loaded machine, where a
// launcher's thread can stop anywhere for a while.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "basin/launch/coordinator.h"
#include "basin/launch/launcher_store.h"
#include "basin/launch/store_messages.h"

namespace basin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

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

  launch::StoreClient client("127.0.0.1", port, 5s, 2s);
  const auto start = Clock::now();
  for (int beat = 1; beat <= 20; ++beat) EXPECT_EQ(client.add("beat", 1), beat);
  client.set("attempt/0", "run 1234 0 1");
  EXPECT_EQ(client.get("attempt/0"), "run 1234 0 1");
  EXPECT_FALSE(client.get("verdict/0").has_value());
  EXPECT_LT(seconds_since(start), 1.5);

  ASSERT_EQ(send(stopped, rest, sizeof rest, 0), static_cast<ssize_t>(sizeof rest));
  char answer[6] = {};
  ssize_t got = 0;
  for (ssize_t now = 1; got < 6 && now > 0; got += now) now = recv(stopped, answer + got, sizeof answer - got, 0);
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

// Node 1 may look at node 0 before node 0's first beat has landed: it gives
// node 0 the window (--node-timeout) from that first look, and only a node 0
// silent for all of it is lost. Node 0 here said the job's shape and never beats.
TEST(LauncherStoreTest, ANodeLookingBeforeNodeZerosFirstBeatGivesItTheWindow) {
  launch::JobShape shape;
  shape.nnodes = shape.min_nodes = 2;
  shape.node_rank = 1;
  shape.master_port = launch::free_port();
  shape.join_timeout = 10s;
  shape.lost_after = 2s;
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
  while ((reason = coordinator->stop_reason(0)).empty() && seconds_since(start) < 10) std::this_thread::sleep_for(50ms);
  EXPECT_NE(reason.find("node 0 was lost: its launcher gave no sign of life for 2 s"), std::string::npos) << reason;
  EXPECT_GE(seconds_since(start), 1.9);
}

}  // namespace
}  // namespace basin

#pragma once

// What tests of multi-process jobs share: a free port to give a launcher,
// and the final weights digests a job's ranks print.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

namespace basin::test {

/// A port no one listens at now (the OS's pick).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

/// Each rank's final weights digest in a job's output ("rank r/N: final
/// weights digest d", as basin-train logs it); empty where a rank gave none.
inline std::vector<std::string> final_digests(const std::string& output, int world_size) {
  const std::regex digest("rank (\\d+)/" + std::to_string(world_size) + ": final weights digest ([0-9a-f]{16})");
  std::vector<std::string> digests(static_cast<std::size_t>(world_size));
  for (std::sregex_iterator it(output.begin(), output.end(), digest), end; it != end; ++it) {
    const auto rank = std::stoul((*it)[1]);
    if (rank < digests.size()) digests[rank] = (*it)[2];
  }
  return digests;
}

}  // namespace basin::test

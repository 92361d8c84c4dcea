// The launchers' store (launcher_store.h). A frame is its length (4 bytes,
// network order) and then the op, the key's length (4 bytes), the key and the
// value. The server answers each whole frame with one: nothing (set), a found
// flag and the value (get), the sum in decimal (add).

#include "basin/launch/launcher_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

namespace basin::launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kSet = 's', kGet = 'g', kAdd = 'a';
constexpr uint32_t kLargestFrame = 1 << 20;  // the launchers' values are lines of text

std::string error_text(int error) { return std::strerror(error); }

void append_u32(std::string& out, std::size_t value) {
  const uint32_t net = htonl(static_cast<uint32_t>(value));
  out.append(reinterpret_cast<const char*>(&net), sizeof net);
}

uint32_t read_u32(const char* data) {
  uint32_t net = 0;
  std::memcpy(&net, data, sizeof net);
  return ntohl(net);
}

std::string framed(const std::string& body) {
  std::string out;
  append_u32(out, body.size());
  return out + body;
}

int64_t number(const std::string& text) {
  std::size_t used = 0;
  const int64_t value = std::stoll(text, &used);
  if (used != text.size()) throw std::invalid_argument("not a number: " + text);
  return value;
}

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits until fd is ready for `events`; false once the deadline has passed.
bool wait_until(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30)));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) throw std::runtime_error("poll: " + error_text(errno));
  }
}

// Every interface: IPv6's and IPv4's together where the machine has IPv6 (as
// c10d's store listens), else IPv4's.
int listen_on(int port) {
  for (const int family : {AF_INET6, AF_INET}) {
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 && family == AF_INET6) continue;
    if (fd < 0) throw std::runtime_error("socket: " + error_text(errno));
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a job started again at once gets its port
    sockaddr_storage address{};
    socklen_t size = 0;
    if (family == AF_INET6) {
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto& six = reinterpret_cast<sockaddr_in6&>(address);
      six.sin6_family = AF_INET6;
      six.sin6_addr = in6addr_any;
      six.sin6_port = htons(static_cast<uint16_t>(port));
      size = sizeof six;
    } else {
      auto& four = reinterpret_cast<sockaddr_in&>(address);
      four.sin_family = AF_INET;
      four.sin_addr.s_addr = htonl(INADDR_ANY);
      four.sin_port = htons(static_cast<uint16_t>(port));
      size = sizeof four;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
    const int error = errno;
    close(fd);
    if (family == AF_INET6 && error != EADDRINUSE) continue;  // no IPv6 here
    throw std::runtime_error("cannot listen on port " + std::to_string(port) + ": " + error_text(error));
  }
  throw std::runtime_error("cannot listen on port " + std::to_string(port));
}

struct Connection {
  int fd = -1;
  std::string in, out;  // bytes read and not yet a whole frame; answers not yet sent
  bool closing = false;
};

std::string answer(std::map<std::string, std::string>& values, const std::string& body) {
  if (body.size() < 5 || read_u32(body.data() + 1) > body.size() - 5) throw std::invalid_argument("malformed request");
  const std::string key = body.substr(5, read_u32(body.data() + 1));
  const std::string value = body.substr(5 + key.size());
  const auto found = values.find(key);
  switch (body[0]) {
    case kSet:
      values[key] = value;
      return "";
    case kGet:
      return found == values.end() ? "0" : "1" + found->second;
    case kAdd: {
      const std::string sum = std::to_string(number(value) + (found == values.end() ? 0 : number(found->second)));
      values[key] = sum;
      return sum;
    }
    default:
      throw std::invalid_argument("unknown request");
  }
}

// Reads what the connection has (never waiting), answers its whole frames and
// sends what it can of the answers; the rest waits for the next poll.
void serve_connection(std::map<std::string, std::string>& values, Connection& c) {
  char buffer[65536];
  const ssize_t got = recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
  if (got > 0) c.in.append(buffer, static_cast<std::size_t>(got));
  // A client that went is still answered for what it sent: a beat sent just before it gave up counts.
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closing = true;
  std::size_t used = 0;
  while (c.in.size() - used >= 4) {
    const uint32_t size = read_u32(c.in.data() + used);
    if (size > kLargestFrame) return void(c.closing = true);  // no launcher's: drop the connection
    if (c.in.size() - used - 4 < size) break;
    try {
      c.out += framed(answer(values, c.in.substr(used + 4, size)));
    } catch (const std::exception&) {
      return void(c.closing = true);
    }
    used += 4 + size;
  }
  c.in.erase(0, used);
  while (!c.out.empty()) {
    const ssize_t sent = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      c.out.erase(0, static_cast<std::size_t>(sent));
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else {
      if (sent == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.closing = true;
      break;
    }
  }
  if (c.out.size() > kLargestFrame) c.closing = true;  // a client that never reads its answers
}

std::string receive(int fd, std::size_t size, Clock::time_point deadline, std::chrono::milliseconds answer_within) {
  std::string data;
  char buffer[4096];
  while (data.size() < size) {
    const ssize_t got = recv(fd, buffer, std::min(sizeof buffer, size - data.size()), MSG_DONTWAIT);
    if (got > 0) {
      data.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0) {
      throw std::runtime_error("the store closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_until(fd, POLLIN, deadline)) {
        throw std::runtime_error("no answer within " + std::to_string(answer_within.count()) + " ms");
      }
    } else if (errno != EINTR) {
      throw std::runtime_error(error_text(errno));
    }
  }
  return data;
}

}  // namespace

StoreServer::StoreServer(int port) : listener_(listen_on(port)) {
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    close(listener_);
    throw std::runtime_error("pipe: " + error_text(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  close(wake_[1]);
  thread_.join();
  close(wake_[0]);
  close(listener_);
}

void StoreServer::serve() {
  std::map<std::string, std::string> values;
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  while (true) {
    fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const auto& c : connections) fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;  // the server is going
    for (std::size_t i = 0; i < connections.size(); ++i) {
      if (fds[i + 2].revents != 0) serve_connection(values, connections[i]);
    }
    for (auto& c : connections) {
      if (c.closing) close(c.fd);
    }
    connections.erase(std::remove_if(connections.begin(), connections.end(), [](const Connection& c) { return c.closing; }),
                      connections.end());
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (int fd; (fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
      no_delay(fd);
      connections.push_back({fd, "", "", false});
    }
  }
  for (const auto& c : connections) close(c.fd);
}

StoreClient::StoreClient(std::string host, int port, std::chrono::milliseconds connect_within,
                         std::chrono::milliseconds answer_within)
    : host_(std::move(host)), port_(port), answer_within_(answer_within) {
  connect(Clock::now() + connect_within);
}

StoreClient::~StoreClient() { drop(); }

void StoreClient::drop() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void StoreClient::connect(Clock::time_point deadline) {
  const std::string port = std::to_string(port_);
  while (true) {
    std::string why;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int resolved = getaddrinfo(host_.c_str(), port.c_str(), &hints, &found); resolved != 0) {
      why = gai_strerror(resolved);
    }
    for (addrinfo* address = found; address != nullptr && fd_ < 0; address = address->ai_next) {
      const int fd = socket(address->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        why = error_text(errno);
        continue;
      }
      int error = ::connect(fd, address->ai_addr, address->ai_addrlen) == 0 ? 0 : errno;
      if (error == EINPROGRESS || error == EINTR) {
        socklen_t size = sizeof error;
        error = ETIMEDOUT;
        if (wait_until(fd, POLLOUT, deadline)) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
      }
      if (error == 0) {
        no_delay(fd);
        fd_ = fd;
      } else {
        why = error_text(error);
        close(fd);
      }
    }
    if (found != nullptr) freeaddrinfo(found);
    if (fd_ >= 0) return;
    if (Clock::now() >= deadline) throw std::runtime_error("cannot connect to " + host_ + ":" + port + ": " + why);
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(100), deadline - Clock::now()));
  }
}

std::string StoreClient::call(char op, const std::string& key, const std::string& value) {
  std::string body(1, op);
  append_u32(body, key.size());
  const std::string request = framed(body + key + value);
  const auto deadline = Clock::now() + answer_within_;
  try {
    if (fd_ < 0) connect(deadline);
    // The whole request in one send (it fits the socket's buffer): never half of one on the wire.
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t now = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (now > 0) sent += static_cast<std::size_t>(now);
      else if (now < 0 && errno == EINTR) continue;
      else if (now < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw std::runtime_error(error_text(errno));
      else if (!wait_until(fd_, POLLOUT, deadline)) throw std::runtime_error("could not send within the timeout");
    }
    const uint32_t size = read_u32(receive(fd_, 4, deadline, answer_within_).data());
    if (size > kLargestFrame) throw std::runtime_error("malformed answer");
    return receive(fd_, size, deadline, answer_within_);
  } catch (const std::exception&) {
    drop();  // the answer may still come: the next call must not read it as its own
    throw;
  }
}

void StoreClient::set(const std::string& key, const std::string& value) { call(kSet, key, value); }

std::optional<std::string> StoreClient::get(const std::string& key) {
  const std::string reply = call(kGet, key, "");
  if (reply.empty()) throw std::runtime_error("malformed answer");
  return reply[0] == '1' ? std::optional<std::string>(reply.substr(1)) : std::nullopt;
}

int64_t StoreClient::add(const std::string& key, int64_t delta) { return number(call(kAdd, key, std::to_string(delta))); }

}  // namespace basin::launch

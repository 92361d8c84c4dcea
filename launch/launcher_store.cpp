// The launchers' store (launcher_store.h). A frame is its length (4 bytes,
// network order) and then the op, the key's length (4 bytes), the key and the
// value. The server answers each whole frame with one: nothing (set), a found
// flag and the value (get), the sum in decimal or nothing when it refuses
// (add), its instance (hello: a client's first request on each connection).

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
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>

namespace basin::launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kSet = 's', kGet = 'g', kAdd = 'a', kHello = 'h';
constexpr uint32_t kLargestFrame = 1 << 20;  // the launchers' values are lines of text

// strerror_r, as glibc's (char*) or POSIX's (int) is declared: the beats' thread calls it too.
[[maybe_unused]] const char* error_message(const char* text, const char*) { return text; }
[[maybe_unused]] const char* error_message(int, const char* buffer) { return buffer; }
std::string error_text(int error) {
  char buffer[256] = "unknown error";
  return error_message(strerror_r(error, buffer, sizeof buffer), buffer);
}

// The store went (its server closes a connection only when it stops), or another took its port.
struct Gone : std::runtime_error { using std::runtime_error::runtime_error; };

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
    if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) {
      close(fd);  // IPv6's alone would shut IPv4's clients out: IPv4's, then
      continue;
    }
    sockaddr_in6 six{};  // the address left zero: any
    six.sin6_family = AF_INET6;
    six.sin6_port = htons(static_cast<uint16_t>(port));
    sockaddr_in four{};
    four.sin_family = AF_INET;
    four.sin_port = six.sin6_port;
    const bool v6 = family == AF_INET6;
    const auto* address = v6 ? reinterpret_cast<sockaddr*>(&six) : reinterpret_cast<sockaddr*>(&four);
    if (bind(fd, address, v6 ? sizeof six : sizeof four) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
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

std::string answer(std::map<std::string, std::string>& values, const std::string& instance, const std::string& body) {
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
    case kAdd: {  // refused with an empty answer: a closed connection would say the store is gone
      int64_t sum = 0;
      try {
        if (__builtin_add_overflow(number(value), found == values.end() ? 0 : number(found->second), &sum)) return "";
      } catch (const std::logic_error&) {  // not a number
        return "";
      }
      return values[key] = std::to_string(sum);
    }
    case kHello:
      return instance;
    default:
      throw std::invalid_argument("unknown request");
  }
}

// Reads what the connection has (never waiting), answers its whole frames and
// sends what it can of the answers; the rest waits for the next poll.
void serve_connection(std::map<std::string, std::string>& values, const std::string& instance, Connection& c) {
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
      c.out += framed(answer(values, instance, c.in.substr(used + 4, size)));
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
    } else if (got == 0 || errno == ECONNRESET) {
      throw Gone("the store closed the connection");
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
  try {
    std::random_device random;
    instance_ = std::to_string(random()) + "." + std::to_string(random());
    if (pipe2(wake_, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + error_text(errno));
    thread_ = std::thread([this] { serve(); });
  } catch (...) {
    for (const int fd : {listener_, wake_[0], wake_[1]}) if (fd >= 0) close(fd);
    throw;
  }
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
  // Out of descriptors, the listener stays readable: it rests a while, or poll would spin.
  Clock::time_point accept_after{};
  while (true) {
    const auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(accept_after - Clock::now()).count();
    fds = {{wake_[0], POLLIN, 0}, {rest > 0 ? -1 : listener_, POLLIN, 0}};  // poll skips a negative fd
    for (const auto& c : connections) fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (poll(fds.data(), fds.size(), rest > 0 ? static_cast<int>(rest) : -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "basin-run: the launchers' store stopped: poll: %s\n", error_text(errno).c_str());
      break;
    }
    if (fds[0].revents != 0) break;  // the server is going
    for (std::size_t i = 0; i < connections.size(); ++i) {
      if (fds[i + 2].revents != 0) serve_connection(values, instance_, connections[i]);
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
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      accept_after = Clock::now() + std::chrono::milliseconds(100);
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
  greeted_ = false;
}

// Empty once host_ is resolved, else why not.
std::string StoreClient::resolve() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found); error != 0) {
    return error == EAI_SYSTEM ? error_text(errno) : gai_strerror(error);
  }
  for (addrinfo* address = found; address != nullptr; address = address->ai_next) {
    sockaddr_storage bytes{};
    std::memcpy(&bytes, address->ai_addr, std::min<std::size_t>(address->ai_addrlen, sizeof bytes));
    addresses_.emplace_back(bytes, address->ai_addrlen);
  }
  freeaddrinfo(found);
  return addresses_.empty() ? "no address" : "";
}

void StoreClient::connect(Clock::time_point deadline) {
  while (true) {
    std::string why = addresses_.empty() ? resolve() : "";
    bool refused = false;
    for (const auto& [bytes, size] : addresses_) {
      const auto* address = reinterpret_cast<const sockaddr*>(&bytes);
      const int fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        why = error_text(errno);
        continue;
      }
      int error = ::connect(fd, address, size) == 0 ? 0 : errno;
      if (error == EINPROGRESS || error == EINTR) {
        socklen_t length = sizeof error;
        error = ETIMEDOUT;
        try {
          if (wait_until(fd, POLLOUT, deadline)) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        } catch (const std::exception&) {
          close(fd);
          throw;
        }
      }
      if (error == 0) {
        no_delay(fd);
        fd_ = fd;
        addresses_ = {std::make_pair(bytes, size)};  // the next connection goes where this one went
        return;
      }
      why = error_text(error);
      refused = refused || error == ECONNREFUSED;
      close(fd);
    }
    if (refused && !instance_.empty()) throw Gone("the store refused a new connection (" + why + ")");
    if (Clock::now() >= deadline) {
      throw std::runtime_error("cannot connect to " + host_ + ":" + std::to_string(port_) + ": " + why);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(100), deadline - Clock::now()));
  }
}

// Learns the server's instance on the first connection; a later one to another instance is no connection to this store.
void StoreClient::greet(Clock::time_point deadline) {
  std::string body(1, kHello);
  append_u32(body, 0);
  const std::string instance = exchange(framed(body), deadline);
  if (instance_.empty()) {
    instance_ = instance;
  } else if (instance != instance_) {
    throw Gone("another store answers at " + host_ + ":" + std::to_string(port_) + " now: this one's launcher is gone");
  }
  greeted_ = true;
}

std::string StoreClient::exchange(const std::string& request, Clock::time_point deadline) {
  // One send where the socket's buffer takes it all; a request split on the
  // wire is still safe, as the server answers whole frames only.
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t now = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (now > 0) sent += static_cast<std::size_t>(now);
    else if (now < 0 && errno == EINTR) continue;
    else if (now < 0 && (errno == EPIPE || errno == ECONNRESET)) throw Gone("the store closed the connection");
    else if (now < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw std::runtime_error(error_text(errno));
    else if (!wait_until(fd_, POLLOUT, deadline)) throw std::runtime_error("could not send within the timeout");
  }
  const uint32_t size = read_u32(receive(fd_, 4, deadline, answer_within_).data());
  if (size > kLargestFrame) throw std::runtime_error("malformed answer");
  return receive(fd_, size, deadline, answer_within_);
}

std::string StoreClient::call(char op, const std::string& key, const std::string& value) {
  std::string body(1, op);
  append_u32(body, key.size());
  body += key + value;
  if (body.size() > kLargestFrame) throw std::runtime_error("a request over the store's limit (1 MiB), for " + key);
  if (!gone_.empty()) throw std::runtime_error(gone_);
  const auto deadline = Clock::now() + answer_within_;
  try {
    if (fd_ < 0) connect(deadline);
    if (!greeted_) greet(deadline);
    return exchange(framed(body), deadline);
  } catch (const Gone& error) {
    drop();
    gone_ = error.what();
    throw;
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

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  const std::string sum = call(kAdd, key, std::to_string(delta));
  if (sum.empty()) throw std::runtime_error("the store refused to add to " + key + ": not a number, or the sum overflows");
  return number(sum);
}

}  // namespace basin::launch

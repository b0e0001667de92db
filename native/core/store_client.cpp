// Blocking C++ client of the rendezvous store; the wire format is in
// docs/rendezvous.md and must match src/rendezvous/protocol.ts.
//
// The socket is non-blocking and every read/write waits in poll() against a
// deadline, so no call outlives its timeout by more than kReplyMargin.
#include "store_client.h"

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
#include <thread>
#include <utility>
#include <vector>

#include "errors.h"

namespace ncclnode {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum Op : uint8_t { kAuth = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5, kWait = 6, kDelete = 7 };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kUnauthorized = 2, kBadRequest = 3, kClosing = 4 };

constexpr uint32_t kMaxBody = 64u << 20;
constexpr milliseconds kDefaultServerTimeout{10 * 60 * 1000};  // what 0 means on the wire
// How long past the operation's own timeout we wait for the server to answer.
constexpr milliseconds kReplyMargin{5000};
// Non-blocking ops (SET, ADD, ...) must be answered within this.
constexpr milliseconds kRequestTimeout{30000};
constexpr milliseconds kMaxBackoff{1000};

std::string endpoint(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

std::string quoteKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", " : "") + quote(keys[i]);
  if (keys.size() > 8) out += " and " + std::to_string(keys.size() - 8) + " more";
  return out;
}

void putU8(std::vector<char>& b, uint8_t v) { b.push_back(static_cast<char>(v)); }

void putU32(std::vector<char>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void putI64(std::vector<char>& b, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void putBytes(std::vector<char>& b, const char* data, size_t n) {
  if (n > kMaxBody) throw Error(Code::InvalidArgument, "store: field of " + std::to_string(n) + " bytes exceeds the 64 MiB limit");
  putU32(b, static_cast<uint32_t>(n));
  b.insert(b.end(), data, data + n);
}

void putBytes(std::vector<char>& b, const std::string& s) { putBytes(b, s.data(), s.size()); }

uint32_t wireTimeout(milliseconds t, const std::string& what) {
  if (t.count() < 0 || t.count() > 0xffffffffLL) {
    throw Error(Code::InvalidArgument, what + ": timeout must be in 0.." + std::to_string(0xffffffffLL) +
                                           " ms, got " + std::to_string(t.count()));
  }
  return static_cast<uint32_t>(t.count());
}

// Bounds-checked reader of one reply body; errors are prefixed with `what`.
class Reader {
 public:
  Reader(const std::vector<char>& b, std::string what) : b_(b), what_(std::move(what)) {}
  uint8_t u8() { need(1); return static_cast<uint8_t>(b_[pos_++]); }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b_[pos_++])) << (8 * i);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_++])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::vector<char> bytes() {
    const uint32_t n = u32();
    need(n);
    std::vector<char> out(b_.begin() + static_cast<std::ptrdiff_t>(pos_), b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return out;
  }
  std::string str() { auto v = bytes(); return std::string(v.begin(), v.end()); }
  void end() {
    if (pos_ != b_.size()) throw Error(Code::Store, what_ + ": malformed reply (trailing bytes)");
  }

 private:
  void need(size_t n) {
    if (b_.size() - pos_ < n) throw Error(Code::Store, what_ + ": malformed reply (truncated)");
  }
  const std::vector<char>& b_;
  std::string what_;
  size_t pos_ = 0;
};

int remainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Waits for `events` on fd until deadline. Returns false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remainingMs(deadline));
    if (r > 0) return true;  // readiness or error; the following call reports which
    if (r == 0) {
      if (Clock::now() >= deadline) return false;
      continue;  // poll's wait was clamped below the deadline
    }
    if (errno != EINTR) throw Error(Code::Store, std::string("poll failed: ") + std::strerror(errno));
  }
}

// One connect attempt to one resolved address. Returns the fd, or -1 with `err` set.
int tryConnect(const addrinfo* ai, Clock::time_point deadline, std::string& err) {
  const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) { err = std::string("socket: ") + std::strerror(errno); return -1; }
  int rc;
  do rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen); while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno == EINPROGRESS) {
    if (!waitFor(fd, POLLOUT, deadline)) { ::close(fd); err = "connect timed out"; return -1; }
    int soErr = 0;
    socklen_t len = sizeof soErr;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &len);
    if (soErr != 0) { errno = soErr; rc = -1; } else { rc = 0; }
  }
  if (rc != 0) { err = std::strerror(errno); ::close(fd); return -1; }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return fd;
}

// Runs one request/reply exchange, prefixing transport errors with `what` (op,
// key(s), endpoint), and returns the reply body.
template <class Exchange>
std::vector<char> exchange(const std::string& what, Exchange&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(e.code(), what + ": " + e.what());
  }
}

// Turns a non-OK status into the matching Error.
void checkStatus(Reader& r, const std::string& what) {
  switch (const uint8_t status = r.u8()) {
    case kOk: return;
    case kTimeout: throw Error(Code::Timeout, what + ": " + r.str());
    case kUnauthorized: throw Error(Code::Unauthorized, what + ": the store refused the job token");
    case kBadRequest: throw Error(Code::Store, what + ": rejected: " + r.str());
    case kClosing: throw Error(Code::Store, what + ": the store is shutting down");
    default: throw Error(Code::Store, what + ": unknown reply status " + std::to_string(status));
  }
}

}  // namespace

StoreClient::StoreClient(std::string host, int port, std::string token, std::string clientName,
                         milliseconds connectTimeout)
    : host_(std::move(host)), port_(port) {
  const std::string ep = endpoint(host_, port_);
  if (port_ < 1 || port_ > 65535) throw Error(Code::InvalidArgument, "store: invalid port in " + ep);
  if (connectTimeout.count() <= 0) throw Error(Code::InvalidArgument, "store: connect timeout must be positive");
  std::vector<char> auth;
  putU8(auth, kAuth);
  putBytes(auth, token);
  putBytes(auth, clientName);

  const auto deadline = Clock::now() + connectTimeout;
  milliseconds backoff{50};
  std::string lastError = "no attempt made";
  // Retry while the server is not up yet: it may start after the ranks do.
  for (;;) {
    if (Clock::now() >= deadline) {
      throw Error(Code::Timeout, "could not connect to the store at " + ep + " within " +
                                     std::to_string(connectTimeout.count()) + " ms (last error: " + lastError + ")");
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) {
      lastError = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    } else {
      for (const addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next) fd_ = tryConnect(ai, deadline, lastError);
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) {
      std::vector<char> reply;
      try {
        reply = call(auth, std::max(milliseconds{1}, std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
      } catch (const Error& e) {
        if (e.code() == Code::Timeout) {
          throw Error(Code::Timeout, "store at " + ep + " did not answer AUTH within the connect timeout of " +
                                         std::to_string(connectTimeout.count()) + " ms");
        }
        lastError = e.what();  // dropped before answering: a proxy, or a server still starting; call() closed fd_
      }
      if (fd_ >= 0) {
        try {
          Reader r(reply, "store at " + ep + ": AUTH");
          checkStatus(r, "store at " + ep + ": AUTH for client " + quote(clientName));
          r.end();
          return;
        } catch (...) {
          ::close(fd_);  // the destructor does not run when the constructor throws
          fd_ = -1;
          throw;
        }
      }
    }
    std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

// Sends one request and returns the reply body. On any transport failure the
// connection is closed: the reply stream can no longer be matched to requests.
std::vector<char> StoreClient::call(const std::vector<char>& request, milliseconds timeout) {
  if (fd_ < 0) throw Error(Code::Store, "connection is closed after an earlier error");
  if (request.size() > kMaxBody) {
    throw Error(Code::InvalidArgument, "request of " + std::to_string(request.size()) + " bytes exceeds the 64 MiB limit");
  }
  const auto deadline = Clock::now() + timeout;
  auto fail = [&](Code code, const std::string& why) -> Error {
    ::close(fd_);
    fd_ = -1;
    return Error(code, why);
  };
  auto timedOut = [&]() {
    return fail(Code::Timeout, "no reply within " + std::to_string(timeout.count()) + " ms; connection closed");
  };

  std::vector<char> frame;
  frame.reserve(4 + request.size());
  putU32(frame, static_cast<uint32_t>(request.size()));
  frame.insert(frame.end(), request.begin(), request.end());
  for (size_t off = 0; off < frame.size();) {
    if (!waitFor(fd_, POLLOUT, deadline)) throw timedOut();
    const ssize_t n = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n > 0) { off += static_cast<size_t>(n); continue; }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    throw fail(Code::Store, std::string("send failed: ") + std::strerror(errno));
  }

  auto readExact = [&](char* dst, size_t len) {
    for (size_t off = 0; off < len;) {
      if (!waitFor(fd_, POLLIN, deadline)) throw timedOut();
      const ssize_t n = ::recv(fd_, dst + off, len - off, 0);
      if (n > 0) { off += static_cast<size_t>(n); continue; }
      if (n == 0) throw fail(Code::Store, "the store closed the connection");
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw fail(Code::Store, std::string("recv failed: ") + std::strerror(errno));
    }
  };
  char head[4];
  readExact(head, 4);
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(static_cast<uint8_t>(head[i])) << (8 * i);
  if (len > kMaxBody) throw fail(Code::Store, "reply of " + std::to_string(len) + " bytes exceeds the 64 MiB limit");
  std::vector<char> body(len);
  readExact(body.data(), len);
  return body;
}

void StoreClient::set(const std::string& key, const std::vector<char>& value) {
  const std::string what = "store at " + endpoint(host_, port_) + ": SET " + quote(key);
  std::vector<char> req;
  putU8(req, kSet);
  putBytes(req, key);
  putBytes(req, value.data(), value.size());
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, kRequestTimeout); });
  Reader r(reply, what);
  checkStatus(r, what);
  r.end();
}

std::vector<char> StoreClient::get(const std::string& key, milliseconds timeout) {
  const std::string what = "store at " + endpoint(host_, port_) + ": GET " + quote(key);
  const uint32_t t = wireTimeout(timeout, what);
  std::vector<char> req;
  putU8(req, kGet);
  putBytes(req, key);
  putU32(req, t);
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, (t ? timeout : kDefaultServerTimeout) + kReplyMargin); });
  Reader r(reply, what);
  checkStatus(r, what);
  auto value = r.bytes();
  r.end();
  return value;
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  const std::string what = "store at " + endpoint(host_, port_) + ": ADD " + quote(key);
  std::vector<char> req;
  putU8(req, kAdd);
  putBytes(req, key);
  putI64(req, delta);
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, kRequestTimeout); });
  Reader r(reply, what);
  checkStatus(r, what);
  const int64_t value = r.i64();
  r.end();
  return value;
}

bool StoreClient::check(const std::string& key) {
  const std::string what = "store at " + endpoint(host_, port_) + ": CHECK " + quote(key);
  std::vector<char> req;
  putU8(req, kCheck);
  putBytes(req, key);
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, kRequestTimeout); });
  Reader r(reply, what);
  checkStatus(r, what);
  const bool exists = r.u8() != 0;
  r.end();
  return exists;
}

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const std::string what = "store at " + endpoint(host_, port_) + ": WAIT " + quoteKeys(keys);
  const uint32_t t = wireTimeout(timeout, what);
  std::vector<char> req;
  putU8(req, kWait);
  putU32(req, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) putBytes(req, k);
  putU32(req, t);
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, (t ? timeout : kDefaultServerTimeout) + kReplyMargin); });
  Reader r(reply, what);
  checkStatus(r, what);
  r.end();
}

void StoreClient::remove(const std::string& key) {
  const std::string what = "store at " + endpoint(host_, port_) + ": DELETE " + quote(key);
  std::vector<char> req;
  putU8(req, kDelete);
  putBytes(req, key);
  std::lock_guard<std::mutex> lock(mu_);
  const auto reply = exchange(what, [&] { return call(req, kRequestTimeout); });
  Reader r(reply, what);
  checkStatus(r, what);
  r.u8();  // "existed": the C++ interface does not report it
  r.end();
}

}  // namespace ncclnode

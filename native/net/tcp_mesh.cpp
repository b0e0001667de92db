#include "tcp_mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "../core/errors.h"

namespace ncclnode::net {

namespace {

// What markedReceives(), oneWayPairs() and sizedReceiveBuffers() report.
std::atomic<uint64_t> markedReceiveCount{0};
std::atomic<uint64_t> oneWayCount{0};
std::atomic<uint64_t> sizedReceiveCount{0};
std::atomic<uint64_t> bouncedCount{0};
std::atomic<uint64_t> emptyReadCount{0};
std::atomic<uint64_t> dataReadCount{0};
std::atomic<uint64_t> unreadCount{0};

// Receives through the bounce buffer (receiveSome): those of this much or more, read
// this much at a time, into a destination that starts 1 to kAliasAfter - 1 bytes into a
// page, in a transfer that sends less than kBounceFrom itself.
constexpr size_t kBounceFrom = 64 * 1024;
constexpr size_t kBounceBytes = 64 * 1024;
constexpr size_t kAliasAfter = 32;

constexpr uint64_t kMagic = 0x6e6e2d7463702d32ull;  // "nn-tcp-2": the greeting carries oneWay

// What each side of a new connection sends first: a stranger (another job, a port
// scanner) that does not present the communicator's secret is dropped.
struct Hello {
  uint64_t magic;
  uint64_t secret;
  int32_t rank;
  int32_t size;
  int32_t oneWay;  // 1: this rank asks for one connection each way
  int32_t reserved;
};

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

std::string errnoText(int err) { return err ? std::strerror(err) : "connection closed"; }

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Whether a connection's two ends have one address: both ranks on this host (loopback,
// or the host's own address dialed).
bool withinHost(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t ml = sizeof mine, tl = sizeof theirs;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &ml) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &tl) != 0 || mine.ss_family != theirs.ss_family) {
    return false;
  }
  if (mine.ss_family == AF_INET) {
    return reinterpret_cast<sockaddr_in*>(&mine)->sin_addr.s_addr == reinterpret_cast<sockaddr_in*>(&theirs)->sin_addr.s_addr;
  }
  if (mine.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<sockaddr_in6*>(&mine)->sin6_addr, &reinterpret_cast<sockaddr_in6*>(&theirs)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

void setNonBlocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

// Blocking-style I/O of a whole small message on a nonblocking socket, bounded by the
// deadline. False on timeout, closed connection or error.
bool ioAll(int fd, void* buf, size_t n, bool writing, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = writing ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0 && !writing) return false;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd pfd{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const int ms = msLeft(deadline);
    if (ms == 0 || ::poll(&pfd, 1, ms) <= 0) return false;
  }
  return true;
}

std::string formatAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + " " + std::to_string(port);
}

}  // namespace

TcpMesh::TcpMesh(int rank, int size, uint64_t secret)
    : rank_(rank), size_(size), secret_(secret), sendFds_(static_cast<size_t>(size), -1), recvFds_(static_cast<size_t>(size), -1), lowat_(static_cast<size_t>(size), 1), unread_(static_cast<size_t>(size)) {
  wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_ < 0) throw Error(Code::Backend, std::string("tcp: eventfd: ") + std::strerror(errno));
}

TcpMesh::~TcpMesh() {
  for (size_t p = 0; p < sendFds_.size(); ++p) {
    if (sendFds_[p] >= 0) ::close(sendFds_[p]);
    if (recvFds_[p] >= 0 && recvFds_[p] != sendFds_[p]) ::close(recvFds_[p]);
  }
  if (wake_ >= 0) ::close(wake_);
}

void TcpMesh::abort(bool announce) {
  aborted_ = true;
  // Peers blocked on this rank see their connections drop; a transfer of ours wakes.
  // The urgent byte lets a peer that already holds this rank's message of a round tell
  // an abort from an orderly close (which follows the last round and must not fail it).
  // The byte goes on the connections this rank sends on: each peer receives, and looks
  // for it (checkAborted()), on the other end of them.
  for (int fd : sendFds_) {
    if (fd < 0) continue;
    const char bang = '!';
    if (announce) (void)::send(fd, &bang, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_RDWR);
  }
  for (size_t p = 0; p < recvFds_.size(); ++p) {
    if (recvFds_[p] >= 0 && recvFds_[p] != sendFds_[p]) ::shutdown(recvFds_[p], SHUT_RDWR);
  }
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
}

int TcpMesh::listen(const std::string& host, const std::string& iface, std::string* address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!iface.empty()) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) throw Error(Code::Backend, std::string("tcp: getifaddrs: ") + std::strerror(errno));
    for (int family : {AF_INET, AF_INET6}) {
      for (ifaddrs* i = list; i && len == 0; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family || iface != i->ifa_name) continue;
        len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        std::memcpy(&ss, i->ifa_addr, len);
      }
    }
    freeifaddrs(list);
    if (len == 0) throw Error(Code::Backend, "tcp: network interface \"" + iface + "\" has no address");
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string name = host.empty() ? "127.0.0.1" : host;
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res) throw Error(Code::Backend, "tcp: cannot resolve \"" + name + "\": " + gai_strerror(rc));
    len = res->ai_addrlen;
    std::memcpy(&ss, res->ai_addr, len);
    freeaddrinfo(res);
  }
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = 0;
  if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = 0;
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Code::Backend, std::string("tcp: socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, std::max(size_, 16)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Code::Backend, std::string("tcp: cannot listen: ") + std::strerror(err));
  }
  *address = formatAddress(ss);
  return fd;
}

void TcpMesh::connect(const std::string& host, const std::string& iface, const Rendezvous& rv,
                      const std::string& keyPrefix, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string address;
  const int lfd = listen(host, iface, &address);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closeListener{lfd};
  rv.set(keyPrefix + std::to_string(rank_), address);
  const Hello mine{kMagic, secret_, rank_, size_, oneWay_ ? 1 : 0, 0};

  // First every rank dials every lower rank and then waits for every higher one; a lower
  // rank dials its own lower ranks before it accepts, which ends at rank 0, so this always
  // completes (the kernel's backlog holds a connection meanwhile). Both greetings say
  // whether that rank asks for one connection each way; where both do, the pair's first
  // connection carries only the higher rank's bytes, and a second, which the lower rank
  // dials upwards afterwards (the highest rank dialing none, so that too completes),
  // only the lower rank's. Then a rank's sending never holds the socket its peer's bytes
  // arrive on (docs/gloo.md, "Connecting"). The accept loop takes a peer whichever half
  // it is in, so a rank that dials upwards early is answered.
  std::vector<char> apart(static_cast<size_t>(size_), 0);
  auto dial = [&](int p) {
    const std::string peer = rv.get(keyPrefix + std::to_string(p), std::chrono::milliseconds(std::max(msLeft(deadline), 1)));
    std::istringstream in(peer);
    std::string ip, port;
    in >> ip >> port;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (getaddrinfo(ip.c_str(), port.c_str(), &hints, &res) != 0 || !res) {
      throw Error(Code::Backend, "tcp: rank " + std::to_string(p) + " published an unusable address \"" + peer + "\"");
    }
    int fd = -1;
    bool theirOneWay = false;
    while (true) {
      fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        rc = (::poll(&pfd, 1, std::max(msLeft(deadline), 1)) == 1 &&
              getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0) ? 0 : -1;
      }
      Hello theirs{};
      if (rc == 0 && ioAll(fd, const_cast<Hello*>(&mine), sizeof mine, true, deadline) &&
          ioAll(fd, &theirs, sizeof theirs, false, deadline) && theirs.magic == kMagic &&
          theirs.secret == secret_ && theirs.rank == p && theirs.size == size_) {
        theirOneWay = theirs.oneWay == 1;
        break;
      }
      if (fd >= 0) ::close(fd);
      fd = -1;
      if (aborted_) break;
      if (msLeft(deadline) == 0) break;
      ::usleep(20000);
    }
    freeaddrinfo(res);
    if (aborted_) {
      if (fd >= 0) ::close(fd);
      throw Error(Code::CommAborted, "communicator was aborted while connecting");
    }
    if (fd < 0) {
      throw Error(Code::Timeout, "tcp: could not connect to rank " + std::to_string(p) + " at " + peer + " within " +
                                     std::to_string(timeout.count()) + " ms");
    }
    setNoDelay(fd);
    sizeReceiveBuffer(fd);
    const auto at = static_cast<size_t>(p);
    if (p < rank_) apart[at] = oneWay_ && theirOneWay;
    sendFds_[at] = fd;
    if (!apart[at]) recvFds_[at] = fd;
  };

  // Accepts until every rank in [from, size_) but this one has dialed in; anything that
  // does not greet like a peer not yet in is dropped.
  setNonBlocking(lfd, true);
  auto acceptFrom = [&](int from) {
    auto missing = [&] {
      int n = 0;
      for (int p = from; p < size_; ++p) n += p != rank_ && recvFds_[static_cast<size_t>(p)] < 0;
      return n;
    };
    while (missing() > 0) {
      pollfd pfd[2] = {{lfd, POLLIN, 0}, {wake_, POLLIN, 0}};
      const int ms = msLeft(deadline);
      if (aborted_) throw Error(Code::CommAborted, "communicator was aborted while connecting");
      if (ms == 0) {
        std::string which;
        for (int p = from; p < size_; ++p) {
          if (p != rank_ && recvFds_[static_cast<size_t>(p)] < 0) which += (which.empty() ? "" : ", ") + std::to_string(p);
        }
        throw Error(Code::Timeout, "tcp: ranks " + which + " did not connect within " + std::to_string(timeout.count()) +
                                       " ms");
      }
      if (::poll(pfd, 2, ms) <= 0 || !(pfd[0].revents & POLLIN)) continue;
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;
      // A stranger gets at most a second to greet, so it cannot hold the group up.
      const auto greet = std::min(deadline, Clock::now() + std::chrono::seconds(1));
      Hello theirs{};
      // A higher rank's first connection, or a lower rank's second (only of a one-way pair).
      const bool ok = ioAll(fd, &theirs, sizeof theirs, false, greet) && theirs.magic == kMagic &&
                      theirs.secret == secret_ && theirs.size == size_ && theirs.rank >= 0 && theirs.rank != rank_ &&
                      theirs.rank < size_ && recvFds_[static_cast<size_t>(theirs.rank)] < 0 &&
                      (theirs.rank > rank_ || apart[static_cast<size_t>(theirs.rank)]) &&
                      ioAll(fd, const_cast<Hello*>(&mine), sizeof mine, true, greet);
      if (!ok) {
        ::close(fd);
        continue;
      }
      setNoDelay(fd);
      sizeReceiveBuffer(fd);
      const auto peer = static_cast<size_t>(theirs.rank);
      if (theirs.rank > rank_) {
        apart[peer] = oneWay_ && theirs.oneWay == 1;
        if (!apart[peer]) sendFds_[peer] = fd;
      }
      recvFds_[peer] = fd;
    }
  };

  for (int p = 0; p < rank_; ++p) dial(p);
  acceptFrom(rank_ + 1);
  for (int p = rank_ + 1; p < size_; ++p) {
    if (apart[static_cast<size_t>(p)]) dial(p);
  }
  acceptFrom(0);
  for (const auto* fds : {&sendFds_, &recvFds_}) {
    for (int fd : *fds) {
      if (fd >= 0) setNonBlocking(fd, true);
    }
  }
  if (bounceOn_) {
    bouncePeer_.assign(static_cast<size_t>(size_), 0);
    bool any = false;
    for (int p = 0; p < size_; ++p) {
      const int fd = recvFds_[static_cast<size_t>(p)];
      any |= bouncePeer_[static_cast<size_t>(p)] = fd >= 0 && withinHost(fd);
    }
    if (any) {
      bounce_.reserve(kBounceBytes);  // touched now, not on a receive
    } else {
      bouncePeer_.clear();
    }
  }
  connected_ = true;
  oneWayCount.fetch_add(static_cast<uint64_t>(oneWayPeers()), std::memory_order_relaxed);
}

int TcpMesh::oneWayPeers() const {
  int n = 0;
  for (size_t p = 0; p < sendFds_.size(); ++p) n += sendFds_[p] >= 0 && recvFds_[p] >= 0 && sendFds_[p] != recvFds_[p];
  return n;
}

void TcpMesh::fail(int peer, const char* what, int err) {
  if (aborted_) throw TransportError(Code::CommAborted, "communicator was aborted");
  throw TransportError(Code::PeerLost, "rank " + std::to_string(peer) + " closed its connection or died (tcp " + what + ": " +
                                  errnoText(err) + ")");
}

// One poll over every connection a peer's bytes come in on, not one read per peer: an
// urgent byte that has come and not been read shows as POLLPRI, and only such a connection
// is read. Every agreement round over TCP asks, so at 4 ranks this is one system call a
// round where the reads were three; on 4 ranks sharing 2 cores, small calls without the
// reads took 0.90-0.94 of the time (bench/README.md, "Fewer reads a round").
void TcpMesh::checkAborted() {
  urgentPoll_.clear();
  for (int p = 0; p < size_; ++p) {
    const int fd = recvFds_[static_cast<size_t>(p)];
    if (fd >= 0) urgentPoll_.push_back({fd, POLLPRI, 0});
  }
  // Interrupted (-1, EINTR): as if nothing were urgent; the next round asks again.
  if (urgentPoll_.empty() || ::poll(urgentPoll_.data(), urgentPoll_.size(), 0) <= 0) return;
  for (int p = 0, k = 0; p < size_; ++p) {
    const int fd = recvFds_[static_cast<size_t>(p)];
    if (fd < 0) continue;
    if ((urgentPoll_[static_cast<size_t>(k++)].revents & POLLPRI) == 0) continue;
    char c = 0;
    // EINVAL: no urgent data; EAGAIN: none yet. Only an aborting peer sends any.
    if (::recv(fd, &c, 1, MSG_OOB | MSG_DONTWAIT) == 1) {
      throw TransportError(Code::PeerLost, "rank " + std::to_string(p) + " aborted its communicator");
    }
  }
}

void TcpMesh::keepUnread(int peer, const uint8_t* bytes, size_t n) {
  if (n == 0) return;
  Unread& u = unread_[static_cast<size_t>(peer)];
  // Ahead of whatever is left from an earlier hand-back: these were read after it was
  // taken, so they came later in the stream than the part of it already served.
  unreadCount.fetch_add(n, std::memory_order_relaxed);
  std::vector<uint8_t> next(bytes, bytes + n);
  next.insert(next.end(), u.bytes.begin() + static_cast<std::ptrdiff_t>(u.at), u.bytes.end());
  u.bytes.swap(next);
  u.at = 0;
}

// Writes bytes [done, limit) of x until they are out or the socket's buffer is full
// (drain), or once; true if any byte went.
bool TcpMesh::sendSome(Xfer& x, size_t limit, bool drain) {
  bool progressed = false;
  while (x.done < limit && (drain || !progressed)) {
    ssize_t n;
    if (x.split == 0) {
      n = ::send(sendFds_[static_cast<size_t>(x.peer)], x.data + x.done, limit - x.done, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      iovec iov[2];
      int parts = 0;
      if (x.done < x.split) iov[parts++] = {x.data + x.done, std::min(x.split, limit) - x.done};
      const size_t into = x.done > x.split ? x.done - x.split : 0;
      if (limit > x.split) iov[parts++] = {const_cast<uint8_t*>(x.tail) + into, limit - std::max(x.done, x.split)};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(parts);
      n = ::sendmsg(sendFds_[static_cast<size_t>(x.peer)], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n > 0) {
      x.done += static_cast<size_t>(n);
      progressed = true;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      fail(x.peer, "send", errno);
    }
  }
  return progressed;
}

void TcpMesh::trySend(Xfer* sends, size_t nSends, size_t upTo) {
  for (size_t i = 0; i < nSends; ++i) sendSome(sends[i], std::min(sends[i].bytes, upTo), true);
}

uint64_t markedReceives() { return markedReceiveCount.load(std::memory_order_relaxed); }
uint64_t oneWayPairs() { return oneWayCount.load(std::memory_order_relaxed); }
uint64_t sizedReceiveBuffers() { return sizedReceiveCount.load(std::memory_order_relaxed); }
uint64_t bouncedBytes() { return bouncedCount.load(std::memory_order_relaxed); }
uint64_t emptyReads() { return emptyReadCount.load(std::memory_order_relaxed); }
uint64_t dataReads() { return dataReadCount.load(std::memory_order_relaxed); }
uint64_t unreadBytes() { return unreadCount.load(std::memory_order_relaxed); }

// The kernel copies a received segment out of the pages its sender's copy put it in
// (`rep movsb` where the CPU has fast short strings). Over loopback the sender's thread
// fills those pages from their start again once the previous ones are freed, as they are
// when ranks go in step: a call's bytes come from near a page's start, byte k from about
// page offset k mod 4096. On AMD Zen (the EPYC VM of bench/README.md) that copy ran at
// half speed into a destination 1-31 bytes past the source's place in its page (4K
// aliasing: a store whose address matches a nearby later load's in its low 12 bits holds
// the load up): 2 MiB one way between two processes took 0.99-1.11 ms into a buffer 4-28
// bytes into a page, 0.33-0.38 ms at 32-4080 (bench/tcp_landing.cpp, bench/README.md
// "Where a receive lands"). malloc's and Node's large buffers start 16 bytes into a page.
// A receive into a buffer starting 1-31 bytes into a page reads into a buffer of this
// mesh's own half a page in, then copies out with glibc's memcpy: 0.58-0.62 ms. Elsewhere
// that detour cost 1.4-1.6x, so it is taken nowhere else. Nor where the transfer sends a
// block of its own as it receives (an all-gather's ring, an all-to-all, a chain's middle):
// there the straight copy took 0.77-0.88 of the detour's time at 2-128 MiB, 2 and 4 ranks
// (bench/README.md, "Straight in where a transfer also sends"); the pages' placement follows
// how the two sides' sends and reads interleave, and a rank sending while it reads is not
// the quiet one-way stream that restarts them in step.
void LandingBuffer::reserve(size_t bytes) {
  if (bytes <= size_) return;
  store_.assign(bytes + 4096, 0);
  const size_t at = reinterpret_cast<uintptr_t>(store_.data()) % 4096;
  at_ = store_.data() + (2048 + 4096 - at) % 4096;
  size_ = bytes;
}

bool aliasedLanding(const uint8_t* data) {
  const size_t at = reinterpret_cast<uintptr_t>(data) % 4096;
  return at > 0 && at < kAliasAfter;
}

// One nonblocking read for x, landing at dst; through the bounce buffer where the
// destination aliases and the transfer receives one way (mayBounce; see above): the
// bytes are at dst when it returns.
ssize_t TcpMesh::receiveSome(Xfer& x, uint8_t* dst, size_t len, bool mayBounce) {
  Unread& u = unread_[static_cast<size_t>(x.peer)];
  if (u.at < u.bytes.size()) {
    // Bytes handed back (keepUnread()) come first: they are the stream's next.
    const size_t n = std::min(len, u.bytes.size() - u.at);
    std::memcpy(dst, u.bytes.data() + u.at, n);
    u.at += n;
    if (u.at == u.bytes.size()) {
      u.bytes.clear();
      u.at = 0;
    }
    return static_cast<ssize_t>(n);
  }
  const int fd = recvFds_[static_cast<size_t>(x.peer)];
  if (!mayBounce || bouncePeer_.empty() || x.ring != 0 || x.bytes < kBounceFrom ||
      !bouncePeer_[static_cast<size_t>(x.peer)] || !aliasedLanding(x.data)) {
    const ssize_t n = ::recv(fd, dst, len, MSG_DONTWAIT);
    if (n > 0) dataReadCount.fetch_add(1, std::memory_order_relaxed);
    return n;
  }
  const ssize_t n = ::recv(fd, bounce_.data(), std::min(len, kBounceBytes), MSG_DONTWAIT);
  if (n > 0) {
    std::memcpy(dst, bounce_.data(), static_cast<size_t>(n));
    bouncedCount.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    dataReadCount.fetch_add(1, std::memory_order_relaxed);
  }
  return n;
}

// A connection within this host gets a fixed receive buffer of localRcvBuf_ (the kernel
// doubles it for its own bookkeeping and caps it at net.core.rmem_max). Left to the
// kernel's autotuning, a loopback socket's buffer started at 128 KiB and grew with the
// flow, and 2-rank all-gathers of 256 KiB took 30 or 63-75 µs a call for a whole process;
// fixed, 30 in every process (docs/gloo.md, "Connecting"). A fixed buffer is also one the
// kernel leaves alone when a receive mark is set (SO_RCVLOWAT, which otherwise clamps the
// window to the mark). Between hosts the autotuning stays, which sizes the window to the
// link's bandwidth and round trip.
void TcpMesh::sizeReceiveBuffer(int fd) {
  if (localRcvBuf_ <= 0 || !withinHost(fd)) return;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &localRcvBuf_, sizeof localRcvBuf_) == 0) {
    sizedReceiveCount.fetch_add(1, std::memory_order_relaxed);
  }
}

void TcpMesh::setLowat(int peer, int bytes) {
  int& now = lowat_[static_cast<size_t>(peer)];
  if (now == bytes) return;
  if (::setsockopt(recvFds_[static_cast<size_t>(peer)], SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes) == 0) {
    now = bytes;
    if (bytes > 1) markedReceiveCount.fetch_add(1, std::memory_order_relaxed);
  }
}

namespace {
// A receive waiting for at least this much asks the kernel not to wake it before
// wakeMark_ of it (256 KiB by default), or all of it, is in (SO_RCVLOWAT): over loopback
// the sender's CPU delivers each 64 KiB segment itself and woke a reader asleep on another
// CPU for every one (an inter-processor interrupt each, a VM exit on a virtual host).
// The kernel still wakes the reader on end of stream, an error, or a receive window or
// buffer too full for the mark to be reached, so no message can wait on it. Where the
// socket's buffer is below twice the mark the kernel grows it and clamps the window to
// the mark; its receive-buffer autotuning lifts the clamp as the flow grows
// (NCCL_NODE_TCP_RCVLOWAT=0 leaves the sockets alone: docs/gloo.md).
constexpr size_t kLowatFrom = 64 * 1024;
}  // namespace

bool TcpMesh::transfer(Xfer* sends, size_t nSends, Xfer* recvs, size_t nRecvs, Clock::time_point deadline,
                       const std::function<void(size_t)>& onRecv, Clock::time_point until,
                       const std::function<bool()>& whileWaiting) {
  bool waitingWork = static_cast<bool>(whileWaiting);
  std::vector<pollfd> pfds;
  // Every mark this transfer set goes back to 1 however it ends: other paths poll these
  // connections for a byte.
  struct LowatReset {
    TcpMesh* mesh;
    ~LowatReset() {
      for (int p = 0; p < mesh->size_; ++p) {
        if (mesh->lowat_[static_cast<size_t>(p)] != 1) mesh->setLowat(p, 1);
      }
    }
  } lowatReset{this};
  // Per transfer: whether a read or write may move bytes without waiting. A socket that
  // had nothing (EAGAIN) is tried again only once poll() says it is ready, not on every
  // pass: on 4 ranks sharing 2 cores, small calls spent more time in the kernel than
  // anywhere else, and half of each call's reads found nothing (bench/README.md, "Reads
  // that find nothing"). A read or write that moved bytes stays ready: more may follow
  // (a message's body right behind its length). While a write that moved bytes still has
  // more to move (a long transfer under way), every read is tried on every pass, and the
  // other way round, as before: each side keeps draining what the other fills.
  std::vector<uint8_t> canSend(nSends, 1), canRecv(nRecvs, 1);
  // Receives one way (this transfer sends less than a bounced receive's least): only
  // those may go through the bounce buffer (see LandingBuffer above).
  size_t sendBytes = 0;
  for (size_t i = 0; i < nSends; ++i) sendBytes += sends[i].bytes;
  const bool mayBounce = sendBytes < kBounceFrom;
  while (true) {
    if (aborted_) throw TransportError(Code::CommAborted, "communicator was aborted");
    bool progressed = false;
    bool pending = false;
    bool sending = false;    // a write moved bytes and has more to move
    bool receiving = false;  // likewise a read
    for (size_t i = 0; i < nSends; ++i) {
      // One write per pass, alternating with the reads (draining the send first measured
      // no better).
      if (canSend[i] && sends[i].done < sends[i].bytes) {
        if (sendSome(sends[i], sends[i].bytes, false)) {
          progressed = true;
          sending |= sends[i].done < sends[i].bytes;
        } else {
          canSend[i] = 0;
        }
      }
      if (sends[i].done < sends[i].bytes) pending = true;
    }
    if (sending) std::fill(canRecv.begin(), canRecv.end(), 1);
    for (size_t i = 0; i < nRecvs; ++i) {
      Xfer& x = recvs[i];
      if (x.done == x.bytes) continue;
      if (!canRecv[i]) {
        pending = true;
        continue;
      }
      size_t len = x.bytes - x.done;
      uint8_t* dst = x.data + x.done;
      if (x.ring) {
        const size_t off = x.done % x.ring;
        len = std::min(len, x.ring - off);
        dst = x.data + off;
      }
      const ssize_t n = receiveSome(x, dst, len, mayBounce);
      if (n > 0) {
        x.done += static_cast<size_t>(n);
        progressed = true;
        receiving |= x.done < x.bytes;
        if (onRecv) onRecv(i);
      } else if (n == 0) {
        fail(x.peer, "recv", 0);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        canRecv[i] = 0;
        emptyReadCount.fetch_add(1, std::memory_order_relaxed);
      } else if (errno != EINTR) {
        fail(x.peer, "recv", errno);
      }
      if (x.done < x.bytes) pending = true;
    }
    if (receiving) std::fill(canSend.begin(), canSend.end(), 1);
    if (!pending) return true;
    if (progressed) continue;
    if (waitingWork && (waitingWork = whileWaiting())) {
      // The work took a while: whatever arrived meanwhile is read on the next pass.
      std::fill(canSend.begin(), canSend.end(), 1);
      std::fill(canRecv.begin(), canRecv.end(), 1);
      continue;
    }
    pfds.clear();
    for (size_t i = 0; i < nSends; ++i) {
      if (sends[i].done < sends[i].bytes) pfds.push_back({sendFds_[static_cast<size_t>(sends[i].peer)], POLLOUT, 0});
    }
    for (size_t i = 0; i < nRecvs; ++i) {
      const Xfer& x = recvs[i];
      if (x.done >= x.bytes) continue;
      const size_t left = x.bytes - x.done;
      const bool marked = wakeMark_ > 1 && x.ring == 0 && left >= kLowatFrom;
      setLowat(x.peer, marked ? static_cast<int>(std::min(left, wakeMark_)) : 1);
      pfds.push_back({recvFds_[static_cast<size_t>(x.peer)], POLLIN, 0});
    }
    pfds.push_back({wake_, POLLIN, 0});
    const auto now = Clock::now();
    if (now >= until) return false;
    if (now >= deadline) {
      int who = -1;
      for (size_t i = 0; i < nRecvs && who < 0; ++i) {
        if (recvs[i].done < recvs[i].bytes) who = recvs[i].peer;
      }
      for (size_t i = 0; i < nSends && who < 0; ++i) {
        if (sends[i].done < sends[i].bytes) who = sends[i].peer;
      }
      throw TransportError(Code::Timeout, "rank " + std::to_string(who) + " (tcp)");
    }
    // To the nanosecond: a bounded wait on the calling thread is microseconds long.
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(deadline, until) - now).count();
    const timespec wait{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    const int rc = ::ppoll(pfds.data(), pfds.size(), &wait, nullptr);
    if (rc < 0 && errno != EINTR) throw TransportError(Code::Backend, std::string("tcp: poll: ") + std::strerror(errno));
    if (rc <= 0) continue;  // timed out or interrupted: the checks above run again
    // Ready, or failed (an error or hang-up shows on the next read or write): pfds holds the
    // unfinished sends, then the unfinished receives, in order, as built above.
    size_t k = 0;
    for (size_t i = 0; i < nSends; ++i) {
      if (sends[i].done < sends[i].bytes && pfds[k++].revents != 0) canSend[i] = 1;
    }
    for (size_t i = 0; i < nRecvs; ++i) {
      if (recvs[i].done < recvs[i].bytes && pfds[k++].revents != 0) canRecv[i] = 1;
    }
  }
}

}  // namespace ncclnode::net

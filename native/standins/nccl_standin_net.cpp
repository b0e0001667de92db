#include "nccl_standin_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace standin {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSystemError = 2, kRemoteError = 6;

using Entry = Endpoint;

void writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw NetError(kRemoteError, std::string("bootstrap send failed: ") + strerror(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void readAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw NetError(kRemoteError, "bootstrap connection closed by the peer");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

int listenOn(uint32_t addr, uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr;
  sa.sin_port = 0;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 256) != 0) {
    throw NetError(kSystemError, std::string("cannot listen: ") + strerror(errno));
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *port = sa.sin_port;
  return fd;
}

int connectTo(uint32_t addr, uint16_t port, Clock::time_point deadline, const std::atomic<bool>& aborted) {
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = addr;
    sa.sin_port = port;
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    if (aborted) throw NetError(kSystemError, "communicator aborted during init");
    if (Clock::now() > deadline) throw NetError(kSystemError, "timed out connecting to a peer during init");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int acceptOne(int lfd, Clock::time_point deadline, const std::atomic<bool>& aborted) {
  for (;;) {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
      }
    }
    if (aborted) throw NetError(kSystemError, "communicator aborted during init");
    if (Clock::now() > deadline) throw NetError(kSystemError, "timed out waiting for peers during init");
  }
}

uint32_t bindAddress() {
  const char* a = std::getenv("NCCL_STANDIN_ADDR");
  return inet_addr(a && *a ? a : "127.0.0.1");
}

}  // namespace

void makeUniqueId(UniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->magic, "NCCLSTANDIN", 12);
  id->addr = bindAddress();
  const int lfd = listenOn(id->addr, &id->port);
  id->nonce = std::random_device()();
  // The root: collects every rank's (rank, address), then sends each the table.
  std::thread([lfd] {
    std::vector<int> fds;
    std::vector<Entry> table;
    int nranks = -1;
    const auto deadline = Clock::now() + std::chrono::minutes(30);
    std::atomic<bool> never{false};
    try {
      while (nranks < 0 || static_cast<int>(fds.size()) < nranks) {
        int fd = acceptOne(lfd, deadline, never);
        int32_t hello[2];
        Entry e;
        readAll(fd, hello, sizeof hello);
        readAll(fd, &e, sizeof e);
        if (nranks < 0) { nranks = hello[0]; fds.assign(nranks, -1); fds.clear(); table.assign(nranks, Entry{}); }
        if (hello[1] >= 0 && hello[1] < nranks) table[hello[1]] = e;
        fds.push_back(fd);
      }
      for (int fd : fds) writeAll(fd, table.data(), table.size() * sizeof(Entry));
    } catch (...) {
    }
    for (int fd : fds) close(fd);
    close(lfd);
  }).detach();
}

std::vector<int> connectMesh(const UniqueId& id, int nranks, int rank, std::chrono::milliseconds timeout,
                             const std::atomic<bool>& aborted, int* listener, std::vector<Endpoint>* kept) {
  if (std::memcmp(id.magic, "NCCLSTANDIN", 12) != 0) throw NetError(4, "the unique id was not made by ncclGetUniqueId");
  const auto deadline = Clock::now() + timeout;
  Entry mine{bindAddress(), 0, 0};
  const int lfd = listenOn(mine.addr, &mine.port);
  std::vector<int> fds(nranks, -1);
  try {
    const int root = connectTo(id.addr, id.port, deadline, aborted);
    int32_t hello[2] = {nranks, rank};
    writeAll(root, hello, sizeof hello);
    writeAll(root, &mine, sizeof mine);
    std::vector<Entry> table(nranks);
    readAll(root, table.data(), table.size() * sizeof(Entry));
    close(root);
    if (kept) *kept = table;
    // Lower ranks accept, higher ranks connect; each connection starts with the rank.
    for (int j = 0; j < rank; ++j) {
      fds[j] = connectTo(table[j].addr, table[j].port, deadline, aborted);
      int32_t me = rank;
      writeAll(fds[j], &me, sizeof me);
    }
    for (int k = rank + 1; k < nranks; ++k) {
      int fd = acceptOne(lfd, deadline, aborted);
      int32_t who = -1;
      readAll(fd, &who, sizeof who);
      if (who <= rank || who >= nranks || fds[who] != -1) throw NetError(3, "bootstrap: unexpected peer");
      fds[who] = fd;
    }
  } catch (...) {
    close(lfd);
    for (int fd : fds) if (fd >= 0) close(fd);
    throw;
  }
  if (listener) *listener = lfd;
  else close(lfd);
  for (int fd : fds) if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fds;
}

std::vector<int> reconnectMesh(int listener, const std::vector<Endpoint>& table, int rank, uint64_t tag, uint64_t check,
                               const char* what, Clock::time_point deadline, const std::atomic<bool>& aborted) {
  struct Hello { uint64_t tag, check; int32_t rank, pad; };
  const int n = static_cast<int>(table.size());
  std::vector<int> fds(n, -1);
  try {
    for (int j = 0; j < rank; ++j) {
      fds[j] = connectTo(table[j].addr, table[j].port, deadline, aborted);
      Hello h{tag, check, rank, 0};
      writeAll(fds[j], &h, sizeof h);
    }
    for (int got = 0; got < n - 1 - rank;) {
      int fd = acceptOne(listener, deadline, aborted);
      Hello h{};
      try {
        readAll(fd, &h, sizeof h);
      } catch (const NetError&) {
        close(fd);
        continue;
      }
      if (h.tag != tag || h.rank <= rank || h.rank >= n || fds[h.rank] != -1) {
        close(fd);  // another mesh's (an earlier, failed attempt's) connection
        continue;
      }
      if (h.check != check) {
        close(fd);
        throw NetError(5, std::string(what) + " differs between rank " + std::to_string(rank) + " and rank " +
                              std::to_string(h.rank) + " (every member must pass the same one)");
      }
      fds[h.rank] = fd;
      ++got;
    }
  } catch (...) {
    for (int fd : fds) if (fd >= 0) close(fd);
    throw;
  }
  for (int fd : fds) if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fds;
}

void transferAll(const std::vector<int>& fds, std::vector<Xfer>& xfers, const std::atomic<bool>& aborted) {
  const int n = static_cast<int>(fds.size());
  std::vector<std::vector<Xfer*>> sends(n), recvs(n);
  for (Xfer& x : xfers) (x.send ? sends : recvs)[x.peer].push_back(&x);
  std::vector<size_t> si(n, 0), ri(n, 0);
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<int> peerOf;
    for (int p = 0; p < n; ++p) {
      while (si[p] < sends[p].size() && sends[p][si[p]]->len == 0) ++si[p];
      while (ri[p] < recvs[p].size() && recvs[p][ri[p]]->len == 0) ++ri[p];
      short ev = 0;
      if (si[p] < sends[p].size()) ev |= POLLOUT;
      if (ri[p] < recvs[p].size()) ev |= POLLIN;
      if (ev) { pfds.push_back({fds[p], ev, 0}); peerOf.push_back(p); }
    }
    if (pfds.empty()) return;
    if (aborted) throw NetError(kSystemError, "communicator aborted");
    if (poll(pfds.data(), pfds.size(), 100) < 0 && errno != EINTR) throw NetError(kSystemError, "poll failed");
    for (size_t k = 0; k < pfds.size(); ++k) {
      const int p = peerOf[k];
      if (pfds[k].revents & (POLLERR | POLLHUP | POLLNVAL) && !(pfds[k].revents & POLLIN)) {
        throw NetError(kRemoteError, "connection to rank " + std::to_string(p) + " broke (peer process exited?)");
      }
      if (pfds[k].revents & POLLOUT) {
        Xfer* x = sends[p][si[p]];
        ssize_t w = ::send(fds[p], x->buf, x->len, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
          throw NetError(kRemoteError, "send to rank " + std::to_string(p) + " failed: " + strerror(errno));
        }
        if (w > 0) { x->buf += w; x->len -= static_cast<size_t>(w); }
      }
      if (pfds[k].revents & POLLIN) {
        Xfer* x = recvs[p][ri[p]];
        ssize_t r = ::recv(fds[p], x->buf, x->len, 0);
        if (r == 0) throw NetError(kRemoteError, "rank " + std::to_string(p) + " closed its connection (peer process exited?)");
        if (r < 0 && errno != EAGAIN && errno != EINTR) {
          throw NetError(kRemoteError, "receive from rank " + std::to_string(p) + " failed: " + strerror(errno));
        }
        if (r > 0) { x->buf += r; x->len -= static_cast<size_t>(r); }
      }
    }
  }
}

}  // namespace standin

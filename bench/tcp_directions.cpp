// Two processes over loopback TCP exchange a message each way per iteration, as a
// 2-rank all-gather does: on one connection carrying both directions, or on two, one
// each way (what native/net/tcp_mesh.cpp opens). Both ends send without blocking, read
// what has come, and sleep in poll() with the receive mark the mesh sets (SO_RCVLOWAT:
// up to 256 KiB once 64 KiB or more is awaited). Each run starts a fresh pair of
// processes per layout, the layouts alternating (a connection settles in a fast or a slow
// mode for a while, so the same processes would carry one layout's state into the other's
// blocks); per layout, over every block of every run: the median of the blocks' median µs
// per exchange, their mean, and the share of blocks within 1.15x of the fastest block of
// either layout. Table and JSON.
//
//   build/tcp_directions [--bytes 524288] [--runs 8] [--blocks 16] [--iters 200] [--json out.json]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "direct_common.h"
#include "fork_pair.h"

namespace {

using bench::argOf;
using bench::die;
using bench::medianOf;

using Clock = std::chrono::steady_clock;

int listenLoopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    die("listen");
  }
  *port = ntohs(a.sin_port);
  return fd;
}

int dialLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  return fd;
}

void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One end of a layout: the socket it sends on and the one it receives on (the same one
// for a single connection).
struct Ends {
  int send;
  int recv;
  int mark = 1;
  void setMark(int bytes) {
    if (bytes == mark) return;
    ::setsockopt(recv, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes);
    mark = bytes;
  }
};

void exchange(Ends& e, const char* out, char* in, size_t bytes) {
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    bool moved = false;
    if (sent < bytes) {
      const ssize_t n = ::send(e.send, out + sent, bytes - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n), moved = true;
    }
    if (got < bytes) {
      const ssize_t n = ::recv(e.recv, in + got, bytes - got, MSG_DONTWAIT);
      if (n == 0) die("peer closed");
      if (n > 0) got += static_cast<size_t>(n), moved = true;
    }
    if (moved) continue;
    pollfd p[2];
    int np = 0;
    if (got < bytes) {
      const size_t left = bytes - got;
      e.setMark(left >= 64 * 1024 ? static_cast<int>(std::min<size_t>(left, 256 * 1024)) : 1);
      p[np++] = {e.recv, POLLIN, 0};
    }
    if (sent < bytes) {
      if (np == 1 && e.send == e.recv) {
        p[0].events |= POLLOUT;
      } else {
        p[np++] = {e.send, POLLOUT, 0};
      }
    }
    ::poll(p, static_cast<nfds_t>(np), 1000);
  }
  e.setMark(1);
}

// One gang: two fresh processes connect in `layout` (0: one connection, 1: one each way)
// and time `blocks` blocks of `iters` exchanges; rank 0's block medians come back on a pipe.
std::vector<double> gang(int layout, size_t bytes, int blocks, int iters) {
  int port = 0;
  const int lfd = listenLoopback(&port);
  const std::vector<double> perBlock = bench::forkPair([&](int rank) {
    // Rank 1 dials both connections (or the one); the first carries rank 1's bytes.
    int c[2];
    for (int i = 0; i < layout + 1; ++i) {
      c[i] = rank == 1 ? dialLoopback(port) : ::accept(lfd, nullptr, nullptr);
      if (c[i] < 0) die("accept");
      noDelay(c[i]);
    }
    Ends e = layout == 0 ? Ends{c[0], c[0]} : rank == 1 ? Ends{c[0], c[1]} : Ends{c[1], c[0]};
    std::vector<char> out(bytes, static_cast<char>(rank + 1)), in(bytes);
    for (int i = 0; i < 200; ++i) exchange(e, out.data(), in.data(), bytes);
    if (in[0] != static_cast<char>(2 - rank) || in[bytes - 1] != static_cast<char>(2 - rank)) die("wrong bytes received");
    std::vector<double> perBlock;
    for (int b = 0; b < blocks; ++b) {
      std::vector<double> us;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        exchange(e, out.data(), in.data(), bytes);
        const auto t1 = Clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        t0 = t1;
      }
      perBlock.push_back(medianOf(us));
    }
    return perBlock;
  }, 0, static_cast<size_t>(blocks));
  ::close(lfd);
  return perBlock;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = std::strtoull(argOf(argc, argv, "--bytes", "524288"), nullptr, 10);
  const int runs = std::atoi(argOf(argc, argv, "--runs", "8"));
  const int blocks = std::atoi(argOf(argc, argv, "--blocks", "16"));
  const int iters = std::atoi(argOf(argc, argv, "--iters", "200"));
  const std::string json = argOf(argc, argv, "--json", "");
  if (bytes == 0 || runs < 1 || blocks < 1 || iters < 1) {
    std::fprintf(stderr, "tcp_directions: --bytes, --runs, --blocks and --iters must be positive\n");
    return 2;
  }
  std::vector<double> perBlock[2];
  for (int run = 0; run < runs; ++run) {
    for (int k = 0; k < 2; ++k) {
      const int layout = (run + k) % 2;  // alternating which goes first
      const auto v = gang(layout, bytes, blocks, iters);
      perBlock[layout].insert(perBlock[layout].end(), v.begin(), v.end());
    }
  }
  const double fastest = std::min(*std::min_element(perBlock[0].begin(), perBlock[0].end()),
                                  *std::min_element(perBlock[1].begin(), perBlock[1].end()));
  struct Row {
    const char* name;
    double median, mean, fastShare;
  } rows[2];
  for (int l = 0; l < 2; ++l) {
    const auto& v = perBlock[l];
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    const double fast = static_cast<double>(std::count_if(v.begin(), v.end(), [&](double x) { return x <= 1.15 * fastest; }));
    rows[l] = {l == 0 ? "one connection" : "one each way", medianOf(v), mean, fast / static_cast<double>(v.size())};
  }
  std::printf("# %zu bytes each way per exchange, 2 processes over loopback, %d runs x %d blocks of %d exchanges per layout\n",
              bytes, runs, blocks, iters);
  std::printf("| layout | median of block medians, us | mean over blocks, us | blocks within 1.15x of the fastest |\n");
  std::printf("|---|---|---|---|\n");
  for (const Row& r : rows) std::printf("| %s | %.1f | %.1f | %.0f %% |\n", r.name, r.median, r.mean, 100 * r.fastShare);
  std::printf("one each way / one connection: median %.3f, mean %.3f\n", rows[1].median / rows[0].median, rows[1].mean / rows[0].mean);
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) die("json");
    std::fprintf(f, "{\"bench\":\"tcp_directions\",\"bytes\":%zu,\"runs\":%d,\"blocks\":%d,\"iters\":%d,\"rows\":[", bytes, runs,
                 blocks, iters);
    for (int l = 0; l < 2; ++l) {
      std::fprintf(f, "%s{\"layout\":\"%s\",\"medianUs\":%.2f,\"meanUs\":%.2f,\"fastShare\":%.3f,\"blockUs\":[", l ? "," : "",
                   rows[l].name, rows[l].median, rows[l].mean, rows[l].fastShare);
      for (size_t i = 0; i < perBlock[l].size(); ++i) std::fprintf(f, "%s%.1f", i ? "," : "", perBlock[l][i]);
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "],\"medianRatio\":%.3f,\"meanRatio\":%.3f}\n", rows[1].median / rows[0].median, rows[1].mean / rows[0].mean);
    std::fclose(f);
  }
  return 0;
}

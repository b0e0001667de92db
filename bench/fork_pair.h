// Processes of one bench, forked from it: each runs body(rank); the doubles the
// `reporter` rank returns come back to the parent on a pipe (exactly `count` of them).
// Used by the multi-process TCP benches (tcp_directions.cpp, tcp_landing.cpp,
// agreement_shape.cpp), whose ranks must not share a thread, a socket or an allocator
// with each other.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace bench {

// The benches' way out on a failed system call: the call's error, then exit status 1.
[[noreturn]] inline void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

inline std::vector<double> forkRanks(int ranks, const std::function<std::vector<double>(int rank)>& body, int reporter,
                                     size_t count) {
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) die("pipe");
  std::vector<pid_t> pids(static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    pids[static_cast<size_t>(rank)] = ::fork();
    if (pids[static_cast<size_t>(rank)] < 0) die("fork");
    if (pids[static_cast<size_t>(rank)] != 0) continue;
    const std::vector<double> out = body(rank);
    if (rank == reporter && ::write(pipeFds[1], out.data(), out.size() * sizeof(double)) < 0) die("write");
    std::_Exit(0);
  }
  ::close(pipeFds[1]);
  std::vector<double> out(count);
  size_t got = 0;
  auto* dst = reinterpret_cast<char*>(out.data());
  while (got < count * sizeof(double)) {
    const ssize_t n = ::read(pipeFds[0], dst + got, count * sizeof(double) - got);
    if (n <= 0) die("the reporting rank reported nothing");
    got += static_cast<size_t>(n);
  }
  ::close(pipeFds[0]);
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  return out;
}

inline std::vector<double> forkPair(const std::function<std::vector<double>(int rank)>& body, int reporter, size_t count) {
  return forkRanks(2, body, reporter, count);
}

}  // namespace bench

// What bench/gloo_direct.cpp and bench/nccl_direct.cpp share: their command line
// (<rank> <size> <dir> [iters=200] [min=8] [max=64M]) and the per-size timing (the
// median per-call time: on a shared host a few calls stall for a scheduler tick,
// which moves a mean far more than the code under test does). Also the `--name value`
// options, their comma-separated size lists, and the medians of the two-process TCP benches.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

struct DirectArgs {
  int rank = 0, size = 1;
  std::string dir;
  int iters = 200;
  size_t minBytes = 8, maxBytes = 64u << 20;

  // Fewer iterations for large sizes keep the sweep short; never fewer than 5.
  int itersFor(size_t bytes) const { return bytes >= (1u << 20) ? std::max(5, iters / 20) : iters; }
};

inline size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(v);
}

// Prints the usage line and returns false when the arguments are too few.
inline bool parseDirectArgs(int argc, char** argv, DirectArgs* a) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <rank> <size> <dir> [iters] [minbytes] [maxbytes]\n", argv[0]);
    return false;
  }
  a->rank = std::atoi(argv[1]);
  a->size = std::atoi(argv[2]);
  a->dir = argv[3];
  if (argc > 4) a->iters = std::atoi(argv[4]);
  if (argc > 5) a->minBytes = parseSize(argv[5]);
  if (argc > 6) a->maxBytes = parseSize(argv[6]);
  return true;
}

// The median of n timed calls, in microseconds: each call timed from the end of the
// one before (back to back, one clock read a call), as the addon's benchmarks time theirs.
template <class F>
double medianUs(int n, F&& call) {
  std::vector<double> us(n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    call();
    const auto t1 = std::chrono::steady_clock::now();
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    t0 = t1;
  }
  std::nth_element(us.begin(), us.begin() + n / 2, us.end());
  return us[n / 2];
}

// The value after `--name` on the command line, or `fallback`.
inline const char* argOf(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

// A comma-separated list of sizes (parseSize: 4096, 64K, 1M), as `--sizes` and `--offsets` take.
inline std::vector<size_t> sizesOf(const char* list) {
  std::vector<size_t> out;
  std::string item;
  for (const char* p = list;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!item.empty()) out.push_back(parseSize(item.c_str()));
      item.clear();
      if (*p == '\0') break;
    } else {
      item += *p;
    }
  }
  return out;
}

inline double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench

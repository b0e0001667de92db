#include "parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "../core/copy_bytes.h"

namespace ncclnode {

namespace {

// Copies bytes [begin, end) of the items' concatenation.
void copyRange(const std::vector<CopyItem>& items, size_t begin, size_t end) {
  size_t at = 0;
  for (const CopyItem& it : items) {
    const size_t lo = std::max(begin, at), hi = std::min(end, at + it.bytes);
    if (lo < hi) copyBytes(it.dst + (lo - at), it.src + (lo - at), hi - lo);
    at += it.bytes;
    if (at >= end) break;
  }
}

}  // namespace

size_t copyThreads() {
  const size_t n = std::thread::hardware_concurrency();
  return std::clamp<size_t>(n, 1, 8);
}

void parallelCopy(const std::vector<CopyItem>& items, size_t threads) {
  size_t total = 0;
  for (const CopyItem& it : items) total += it.bytes;
  // Below a few MiB a thread costs more than it saves.
  constexpr size_t kMinPerThread = 4u << 20;
  threads = std::max<size_t>(1, std::min(threads, total / kMinPerThread));
  const size_t step = (total + threads - 1) / threads;
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    helpers.emplace_back(copyRange, std::cref(items), t * step, std::min(total, (t + 1) * step));
  }
  copyRange(items, 0, std::min(total, step));
  for (auto& h : helpers) h.join();
}

}  // namespace ncclnode

#include "copy_bytes.h"

#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ncclnode {

namespace {

std::atomic<uint64_t> backwardCount{0};

// A copy whose destination starts 1-31 bytes past its source's place in a 4 KiB page runs
// forward into 4K aliasing: each load's address matches, in its low 12 bits, a store just
// issued 1-31 bytes behind it, and the core holds the load until that store is resolved.
// glibc's memcpy (rep movsb on AMD Zen from a few KiB to a few hundred) took 112-136 µs
// for 256 KiB there against 6.5-8.0 µs at other distances (bench/copy_bytes.cpp,
// bench/README.md "Copies 1-31 bytes past their source"). Node's and malloc's heap hands
// out consecutive buffers 16 bytes apart in their pages whenever their sizes are whole
// pages, so a copy from one tensor into the next is in that band. Copied from the end,
// every store lands behind the loads still to come, and nothing waits.
constexpr uintptr_t kAliasAfter = 32;
constexpr size_t kBackwardFrom = 2048;

#if defined(__x86_64__)
// Backward in 64-byte steps of unaligned loads and 16-byte-aligned stores; the few bytes
// at either end that are not a whole aligned step go through memmove. Correct where the
// destination overlaps the source from above: each step loads before it stores, and
// every earlier step stored only above what is still to be loaded.
void copyBackward(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t at = n;
  const size_t tail = reinterpret_cast<uintptr_t>(dst + n) & 15;
  at -= tail;
  std::memmove(dst + at, src + at, tail);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  while (at >= head + 64) {
    at -= 64;
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 48));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 32));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 16));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at));
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + at + 48), a);
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + at + 32), b);
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + at + 16), c);
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + at), d);
  }
  std::memmove(dst, src, at);
}

// Whether copyBytes takes its backward path for these pointers and this size (x86-64 only:
// measured there alone).
bool copiesBackward(const void* dst, const void* src, size_t n) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t apart = (d - s) & 4095;
  // A destination overlapping the source from below must be copied forward (memmove).
  return n >= kBackwardFrom && apart > 0 && apart < kAliasAfter && !(d < s && s - d < n);
}
#endif

}  // namespace

void copyBytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (copiesBackward(dst, src, n)) {
    copyBackward(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
    backwardCount.fetch_add(n, std::memory_order_relaxed);
    return;
  }
#endif
  std::memmove(dst, src, n);  // on x86-64 glibc's memcpy and memmove share one implementation
}

uint64_t backwardCopiedBytes() { return backwardCount.load(std::memory_order_relaxed); }

}  // namespace ncclnode

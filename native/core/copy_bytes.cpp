#include "copy_bytes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ncclnode {

namespace {

std::atomic<uint64_t> backwardCount{0};

// A copy whose destination starts 1-31 bytes past its source's place in a 4 KiB page runs
// forward into 4K aliasing: each load's address matches, in its low 12 bits, a store just
// issued 1-31 bytes behind it, and some cores hold the load until that store is resolved.
// On the AMD Zen VM of bench/README.md ("Copies 1-31 bytes past their source") glibc's
// memcpy (rep movsb from a few KiB to a few hundred) took 112-136 µs for 256 KiB there
// against 6.5-8.0 µs at other distances; on a Zen 5 VM (CPU family 26) 2.9-3.1 against
// 2.4-3.0, where the backward path below took 1.1-1.4x memcpy's time. So the backward path
// is taken only where aliasingStalls() measured the stall (or NCCL_NODE_COPY_BACKWARD=1).
// Node's and malloc's heap hands out consecutive buffers 16 bytes apart in their pages
// whenever their sizes are whole pages, so a copy from one tensor into the next is in that
// band. Copied from the end, every store lands behind the loads still to come, and nothing
// waits.
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

// Whether these pointers and this size are in the band the backward path is for (x86-64
// only: measured there alone); copyBytes takes it there where aliasing().backward says so.
bool inAliasingBand(const void* dst, const void* src, size_t n) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t apart = (d - s) & 4095;
  // A destination overlapping the source from below must be copied forward (memmove).
  return n >= kBackwardFrom && apart > 0 && apart < kAliasAfter && !(d < s && s - d < n);
}

// One copy the way the kernel's copy to and from user memory and glibc's memcpy of a few
// KiB to a few hundred make it on CPUs with fast strings.
void repMovsb(uint8_t* dst, const uint8_t* src, size_t n) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

// 64 KiB copied from a page's start to 16 bytes into a page, against to half a page in:
// the best of 16 tries each, alternating (a try the scheduler interrupts only loses). On
// the VMs of bench/README.md: 1.05-1.25x on the Zen 5 one; on the EPYC whose copies
// stalled, glibc's memcpy (rep movsb there) at 64 KiB took 15x and more (33.6 against
// 2.0-2.7 µs).
double measureAliasing() {
  constexpr size_t kBytes = 64 * 1024;
  constexpr size_t kPage = 4096;
  auto* store = static_cast<uint8_t*>(std::aligned_alloc(kPage, 3 * kBytes + 2 * kPage));
  if (store == nullptr) return 1.0;
  std::memset(store, 1, 3 * kBytes + 2 * kPage);
  const uint8_t* src = store;
  uint8_t* aliased = store + kBytes + kPage + 16;
  uint8_t* apart = store + 2 * kBytes + kPage + kPage / 2;
  using Clock = std::chrono::steady_clock;
  auto timed = [&](uint8_t* dst) {
    const auto t0 = Clock::now();
    repMovsb(dst, src, kBytes);
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  };
  double bestAliased = std::numeric_limits<double>::infinity();
  double bestApart = bestAliased;
  for (int i = 0; i < 16; ++i) {
    bestAliased = std::min(bestAliased, timed(aliased));
    bestApart = std::min(bestApart, timed(apart));
  }
  std::free(store);
  return bestApart > 0 ? bestAliased / bestApart : 1.0;
}
#endif

// The stall the backward path and the TCP bounce buffer avoid, where the aliased copy took
// at least twice the other: where it was 1.1-1.4x, the backward path took 1.1-1.4x memcpy's
// time and the bounce 1.4-1.8x the straight receive's (bench/README.md, "CPUs without the
// stall").
constexpr double kStallFrom = 2.0;

struct Aliasing {
  double ratio = 1.0;     // measured; 1 where not measured
  bool stalls = false;    // ratio >= kStallFrom
  bool backward = false;  // copyBytes takes its backward path in the band
  std::string envError;   // NCCL_NODE_COPY_BACKWARD's value where it is neither 1 nor 0
};

const Aliasing& aliasing() {
  static const Aliasing a = [] {
    Aliasing r;
#if defined(__x86_64__)
    r.ratio = measureAliasing();
    r.stalls = r.ratio >= kStallFrom;
#endif
    r.backward = r.stalls;
    if (const char* v = std::getenv("NCCL_NODE_COPY_BACKWARD")) {
      if (std::strcmp(v, "1") == 0 || std::strcmp(v, "0") == 0) {
        r.backward = *v == '1';
      } else {
        r.envError = std::string("NCCL_NODE_COPY_BACKWARD must be 1 or 0, got \"") + v + "\"";
      }
    }
    return r;
  }();
  return a;
}

}  // namespace

void copyBytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (inAliasingBand(dst, src, n) && aliasing().backward) {
    copyBackward(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
    backwardCount.fetch_add(n, std::memory_order_relaxed);
    return;
  }
#endif
  std::memmove(dst, src, n);  // on x86-64 glibc's memcpy and memmove share one implementation
}

uint64_t backwardCopiedBytes() { return backwardCount.load(std::memory_order_relaxed); }

double aliasingRatio() { return aliasing().ratio; }
bool aliasingStalls() { return aliasing().stalls; }
bool copiesBackwardInBand() { return aliasing().backward; }
const std::string& copyBackwardEnvError() { return aliasing().envError; }

}  // namespace ncclnode

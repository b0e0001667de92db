#include "monotonic.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ncclnode {

namespace {

// The counter runs at one rate in every power state and on every core (CPUID
// 0x80000007 EDX bit 8, "invariant TSC").
bool counterInvariant() {
  static const bool invariant = [] {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
    __get_cpuid(0x80000007, &a, &b, &c, &d);
    return (d & (1u << 8)) != 0;
#else
    return false;
#endif
  }();
  return invariant;
}

#if defined(__x86_64__)
// A pair of readings (counter, kernel clock) is taken only when the counter moved less
// than this across the kernel's read: a thread preempted in between (or a slow read)
// would skew the rate.
constexpr uint64_t kPairTicks = 4000;  // 1-2 us at 2-4 GHz; a pair is about 100 ticks apart
#endif

}  // namespace

// Read when the communicator is made: NCCL_NODE_TSC=0 keeps its stamps on the kernel's clock.
CallClock::CallClock() {
  const char* v = std::getenv("NCCL_NODE_TSC");
  counter_ = counterInvariant() && !(v && std::strcmp(v, "0") == 0);
}

double CallClock::anchor() {
#if defined(__x86_64__)
  if (counter_) {
    const uint64_t before = __rdtsc();
    const double ms = monotonicMs();
    const uint64_t after = __rdtsc();
    // A pair too far apart moves nothing: the next stamp anchors again.
    if (after >= before && after - before < kPairTicks) {
      const uint64_t ticks = before + (after - before) / 2;
      if (calibratedTicks_ == 0 || ticks <= calibratedTicks_) {
        // The first pair, or a counter that went back: measure the rate afresh.
        calibratedMs_ = ms;
        calibratedTicks_ = ticks;
        rate_ = 0;
      } else if (ms - calibratedMs_ >= kCalibrateMs) {
        rate_ = (ms - calibratedMs_) / static_cast<double>(ticks - calibratedTicks_);
        windowTicks_ = static_cast<uint64_t>(kWindowMs / rate_);
        calibratedMs_ = ms;
        calibratedTicks_ = ticks;
      }
      anchorMs_ = ms;
      anchorTicks_ = ticks;
    }
    return last_ = ms > last_ ? ms : last_;
  }
#endif
  const double ms = monotonicMs();
  return last_ = ms > last_ ? ms : last_;
}

}  // namespace ncclnode

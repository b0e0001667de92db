// The clock calls are stamped with (CLOCK_MONOTONIC, as process.hrtime() reads it), in
// milliseconds; the JS side turns a stamp into a performance.now() reading
// (src/comm/monotonic.ts). A read here costs about half of a performance.now() call.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace ncclnode {

inline double monotonicMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// monotonicMs() for the entry and exit stamps of a communicator's calls, two per call
// (an 8-byte all-reduce within a host is a few hundred ns, and on a VM's kvm-clock one
// read of the kernel's clock was 30 ns of it). Between anchors, reads of the kernel's
// clock at most kWindowMs apart, a stamp is the last anchor plus the time-stamp counter's
// ticks since, at the rate measured between anchors at least kCalibrateMs apart: what
// kvm-clock itself does between its host's updates, here over a window of 1 ms. So a
// stamp is off the kernel's clock by the rate's error over at most one window (ns), and
// never before a stamp this clock gave earlier. Without an invariant counter (CPUID), on
// other CPUs, until the rate is known, for a read past the window (an idle communicator,
// a counter that went back or jumped ahead) and with NCCL_NODE_TSC=0, a stamp is the
// kernel's clock. One clock per communicator (Engine::callClock), used on its JS thread only.
class CallClock {
 public:
  CallClock();
  double nowMs() {
#if defined(__x86_64__)
    if (rate_ > 0) {
      const uint64_t since = __rdtsc() - anchorTicks_;  // a counter behind the anchor wraps: re-anchored
      if (since < windowTicks_) {
        const double ms = anchorMs_ + static_cast<double>(since) * rate_;
        return last_ = ms > last_ ? ms : last_;
      }
    }
#endif
    return anchor();
  }

  static constexpr double kWindowMs = 1.0;
  static constexpr double kCalibrateMs = 100.0;

 private:
  double anchor();  // monotonic.cpp

  bool counter_ = false;  // the counter may carry stamps between anchors

  double anchorMs_ = 0;
  uint64_t anchorTicks_ = 0;
  double rate_ = 0;  // ms per tick; 0 until measured
  uint64_t windowTicks_ = 0;
  double calibratedMs_ = 0;  // the pair the rate is measured from
  uint64_t calibratedTicks_ = 0;
  double last_ = 0;
};

// Writes the exit time into *at however the scope is left (returned or thrown); nothing
// when at is null (no stamps registered).
struct ExitStamp {
  double* at;
  CallClock& clock;
  ~ExitStamp() {
    if (at) *at = clock.nowMs();
  }
};

}  // namespace ncclnode

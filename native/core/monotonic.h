// The clock calls are stamped with (CLOCK_MONOTONIC, as process.hrtime() reads it), in
// milliseconds; the JS side turns a stamp into a performance.now() reading
// (src/comm/monotonic.ts). A read here costs about half of a performance.now() call.
#pragma once

#include <chrono>

namespace ncclnode {

inline double monotonicMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Writes the exit time into *at however the scope is left (returned or thrown); nothing
// when at is null (no stamps registered).
struct ExitStamp {
  double* at;
  ~ExitStamp() {
    if (at) *at = monotonicMs();
  }
};

}  // namespace ncclnode

// Heartbeats for a rank whose JavaScript thread a blocking call holds. Under the
// launcher a rank's heartbeat is a JavaScript timer (src/comm/heartbeat.ts), which does
// not fire while allReduceSync() waits for late peers; the launcher would take such a
// rank for hung. While a blocking call waits (HeldBeats::Hold, Engine::runSync), a
// native thread writes the heartbeat key instead, every half interval, with the same
// JSON plus "held": true. Only then: a rank whose own JavaScript holds its loop (a
// long computation, a loop that never ends) still stops beating and is still caught,
// and a stopped process stops this thread too. One per process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace ncclnode {

struct HeldBeatsTarget {
  std::string host;
  int port = 0;
  std::string token;
  std::string key;  // the rank's heartbeat key
  int64_t pid = 0;
  std::chrono::milliseconds interval{0};
};

namespace heldbeats {

// Starts (or retargets) the thread; JS thread. The store connection is made on the
// thread when it first writes.
void start(const HeldBeatsTarget& target);
// Stops writing: waits (at most 2 s) for a beat already on its way, so that nothing
// this thread writes lands after the rank's last beat; the thread ends after it.
void stop();
// Beats written since the process started (tests, introspection).
uint64_t written();

// Marks a blocking call waiting, from construction to destruction (any thread, nested).
class Hold {
 public:
  Hold();
  ~Hold();
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
};

}  // namespace heldbeats
}  // namespace ncclnode

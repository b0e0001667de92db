// Per-communicator ring buffer of the last N operations (PyTorch's flight recorder,
// reduced): dumped as JSON on a timeout or NCCL error, and on demand, so comparing
// the ranks' records shows which rank stalled (the one whose last completed
// sequence number lags, or whose entry stays "started").
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "../core/op.h"

namespace ncclnode {

class FlightRecorder {
 public:
  // capacity from NCCL_NODE_FLIGHT_RECORDER_SIZE (default 2000; 0 disables).
  FlightRecorder(std::string name, int rank, int size);
  ~FlightRecorder();

  // Records an operation; returns its slot id for later updates.
  uint64_t begin(const Op& op, const char* what);
  // "enqueued", "started" (launched on the stream), "completed", "failed", "timeout", "aborted"
  void setState(uint64_t id, const char* state);

  std::string json() const;
  // Writes every live recorder of this process to
  // $NCCL_NODE_FLIGHT_RECORDER_DIR/nccl-node-fr-rank<R>-<pid>.json; returns the path.
  static std::string dumpAll(const std::string& reason);

 private:
  struct Entry {
    uint64_t id = 0, seq = 0;
    std::string op, dtype, state;
    size_t count = 0;
    int peer = -1;
    int64_t enqueuedUs = 0, startedUs = 0, endedUs = 0;
  };
  std::string name_;
  int rank_, size_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;
  uint64_t next_ = 0;
  uint64_t lastEnqueued_ = 0, lastStarted_ = 0, lastCompleted_ = 0;
};

}  // namespace ncclnode

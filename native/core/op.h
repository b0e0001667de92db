// One collective or point-to-point call as it travels from JavaScript to a backend
// thread and back. Built on the JS thread, run on the communicator's thread,
// settled (and destroyed) on the JS thread.
#pragma once

#include <chrono>
#include <exception>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"
#include "errors.h"

namespace ncclnode {

class Backend;

enum class OpKind : int32_t {
  AllReduce = 0,
  Broadcast = 1,
  Reduce = 2,
  AllGather = 3,
  ReduceScatter = 4,
  AllToAll = 5,
  Gather = 6,
  Scatter = 7,
  Send = 8,
  Recv = 9,
  Barrier = 10,
  Split = 11,
};
constexpr int32_t kNumOpKinds = 12;

const char* opKindName(OpKind k);  // camelCase, as the JS API names the call

// Where a buffer lives; the NCCL backend adds device memory.
enum class MemKind : int32_t { Host = 0, Device = 1 };

struct BufferView {
  void* data = nullptr;
  size_t bytes = 0;
  MemKind mem = MemKind::Host;
  int device = -1;
  // Host memory: its backing store, held while the view lives so that a detach on
  // the JS thread cannot free memory a backend thread still uses (buffers.cpp).
  std::shared_ptr<void> keep;
};

// Whether two byte ranges share a byte (an output that overlaps its input other than in place).
inline bool bytesOverlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

struct Op {
  OpKind kind = OpKind::Barrier;
  DType dtype = DType::Float32;
  RedOp redop = RedOp::Sum;
  // send may equal recv (in place), or for the gathers and scatters be this rank's own
  // block of it or hold it as its own block; otherwise the two are apart (the
  // communicator copies an input its output overlaps: comm_wrap.cpp), but for all-to-all.
  BufferView send;
  BufferView recv;
  size_t count = 0;  // elements per rank, as the README's API table defines per call
  // allToAll with per-peer counts (elements, packed in rank order); empty for the
  // equal-block form. count is then the total this rank sends.
  std::vector<uint64_t> sendCounts, recvCounts;
  int root = -1;     // root rank, or peer for send/recv
  int color = 0;     // split
  int key = 0;       // split
  // A Split op that shrinks instead (Backend::shrink): the excluded ranks, sorted.
  bool shrink = false;
  bool shrinkAbort = false;
  std::vector<int> exclude;
  std::chrono::milliseconds timeout{0};
  uint64_t seq = 0;  // per-communicator sequence number of collectives
  uint64_t p2pIndex = 0;  // send: k-th send to this peer; recv: k-th recv from it
  // A call this rank refused before submitting it (bad arguments): it still takes
  // part in the round that matches calls across ranks, carrying the reason, so the
  // other ranks fail the same operation instead of drifting out of step.
  bool rejected = false;
  Code rejectCode = Code::InvalidArgument;
  std::string rejectReason;
  // NCCL: the reduction is a sum of preMulScalar * each rank's input
  // (ncclRedOpCreatePreMulSum), carried with the op as c10d carries it with ReduceOp.
  bool hasPreMul = false;
  double preMulScalar = 1.0;
  // NCCL group boundaries (ncclGroupStart/End): a Member is issued inside the open
  // group and completes with it; an End op closes the group and completes when all
  // of the group's work is done.
  enum class Group : int32_t { None = 0, Member = 1, End = 2 };
  Group group = Group::None;
  // The engine's record of the op, handed back by a backend that completes the op
  // later from a thread of its own (Backend::launch).
  void* owner = nullptr;
  bool preposted = false;  // Backend::prepost started it on the submitting thread
  std::exception_ptr prepostError;
  // Backend::finishOnCaller got through a first round of the call and started its second
  // before handing it to the worker, which finishes that round (a two-round all-reduce
  // over TCP: gloo_agreement.cpp).
  bool secondRound = false;

  // Filled in by the worker.
  bool failed = false;
  Code errorCode = Code::Backend;
  std::string errorMessage;
  std::unique_ptr<Backend> splitResult;  // Split: the new backend, or null for no color
  // When it was submitted, for the NCCL flight recorder (a blocking call leaves it unset).
  std::chrono::steady_clock::time_point enqueued;

  void fail(Code code, std::string message) {
    failed = true;
    errorCode = code;
    errorMessage = std::move(message);
  }

  // The same call, to be queued in this one's place (a prepared call's op, kept for its
  // next run, hands a copy to the worker: Engine::startKept): every argument, its place
  // in the sequence and its prepost; nothing a run fills in. Field by field (splitResult
  // makes Op move-only): a field added to Op that describes the call belongs there too.
  std::unique_ptr<Op> copyOfCall() const;
};

}  // namespace ncclnode

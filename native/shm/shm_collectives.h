// Collectives through a host's shared-memory segment (shm_segment.h), optionally
// joined across hosts by an all-reduce among one leader per host. Free of Gloo and
// N-API: the inter-host step is a callback.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "../core/dtype.h"
#include "shm_segment.h"

namespace ncclnode {
namespace shm {

// The ranks of one communicator on this host.
struct HostGroup {
  int localRank = 0;
  int locals = 1;
  int hosts = 1;                 // hosts the communicator spans
  std::unique_ptr<Segment> seg;  // null when this host has one rank
  uint64_t step = 0;             // chunks processed so far; the same on every local rank
  // Every other local rank has finished at least this step: a rank posts step s only after
  // finishing s - 1, so seeing every rank's s (finish()) tells it without reading their
  // control lines, which the next tryPost() would otherwise pull from their caches.
  uint64_t peersDone = 0;
  size_t chunkBytes = 0;         // the same on every rank of the communicator
};

// data (count elements) := the reduction over the leaders, in place; leaders only.
using InterHost = std::function<void(void* data, size_t count, std::chrono::milliseconds left)>;

// out := in reduced over every rank of the communicator (Avg as a sum: the caller
// divides). The message goes through the segment in chunks of chunkBytes. Within a
// host, each local rank reduces 1/locals of every chunk: result = x[0] op x[1] op
// ... op x[L-1], local ranks in rank order, one rounding per op, so every rank gets
// the same bits. With interHost (hosts > 1), the leader (local rank 0) combines the
// hosts' partial results and the others copy the leader's answer out of the segment.
// With root >= 0 (one host only: a reduce) only local rank root waits for the result and
// copies it to its out; the others' out is not touched and may be null.
void allReduce(HostGroup& g, const void* in, void* out, size_t count, DType dtype, RedOp op,
               std::chrono::milliseconds timeout, const std::atomic<bool>* abort, const InterHost& interHost,
               int root = -1);

// A round's message sits in its slot behind a flag word (shm_collectives.cpp, post()):
// head + body take at most chunkBytes - kRoundFlagBytes.
constexpr size_t kRoundFlagBytes = 8;

// One host only (hosts == 1): one round in which every rank posts head + body
// (at most chunkBytes - kRoundFlagBytes together) and, once every rank's message is in,
// use(from) reads rank r's message at from(r). The round completes (the slot is released)
// even when use throws, so a verdict every rank reaches alike keeps them in step.
using Reader = std::function<const uint8_t*(int)>;
void exchange(HostGroup& g, const void* head, size_t headBytes, const void* body, size_t bodyBytes,
              std::chrono::milliseconds timeout, const std::atomic<bool>* abort,
              const std::function<void(const Reader&)>& use);

// exchange() in two halves, for a round started on the calling (JS) thread and
// finished there or on the worker. tryPost() posts head + body as the next round's
// message when that round's slot is free (every rank has finished the round two
// back) and returns its step, else 0, without waiting. arrivedWithin() polls, never
// sleeping (with yield, giving the core to any other thread that wants it between looks),
// for at most `spin` until every rank has posted round `step` (false at once
// on a poisoned segment or an abort). finish() waits for them and completes the round
// as exchange() does.
uint64_t tryPost(HostGroup& g, const void* head, size_t headBytes, const void* body, size_t bodyBytes);
bool arrivedWithin(const HostGroup& g, uint64_t step, std::chrono::nanoseconds spin, const std::atomic<bool>* abort,
                   bool yield = false);
void finish(HostGroup& g, uint64_t step, std::chrono::milliseconds timeout, const std::atomic<bool>* abort,
            const std::function<void(const Reader&)>& use);

// One host only (hosts == 1), rank r of the host = rank r of the communicator.
// out (locals x count) := every rank's in (count elements), in rank order.
void allGather(HostGroup& g, const void* in, void* out, size_t count, size_t width, std::chrono::milliseconds timeout,
               const std::atomic<bool>* abort);
// out (count) := block localRank of every rank's in (locals x count), reduced in rank
// order (x[0] op x[1] op ...), the order of the TCP path's reduce-scatter. Avg as a sum.
void reduceScatter(HostGroup& g, const void* in, void* out, size_t count, DType dtype, RedOp op,
                   std::chrono::milliseconds timeout, const std::atomic<bool>* abort);

// Where each rank's block lies in a buffer: rank r's at byte at[r], len[r] bytes long.
struct Blocks {
  const size_t* at;
  const size_t* len;
};
// One host only. Block j of out (received) := block localRank of rank j's in (its
// sent); the lengths agree pairwise (the caller checked). longest: the longest block
// of any rank, the same on every rank, so that all run the same rounds. in and out may
// be the same memory only with the same layout (an in-place all-to-all of equal blocks):
// a rank's blocks go into the segment in the round before its output's same bytes are
// written.
void allToAll(HostGroup& g, const void* in, const Blocks& sent, void* out, const Blocks& received, size_t longest,
              std::chrono::milliseconds timeout, const std::atomic<bool>* abort);

// Counters of this process, for introspection and tests.
struct Stats {
  std::atomic<uint64_t> segments{0};   // segments this process created or attached
  std::atomic<uint64_t> allReduces{0};  // all-reduces that went through shared memory
  std::atomic<uint64_t> twoLevel{0};   // of which joined hosts through leaders
  std::atomic<uint64_t> allGathers{0};
  std::atomic<uint64_t> reduceScatters{0};
  std::atomic<uint64_t> allToAlls{0};  // in rounds of pieces (a small one in the agreement round is not one)
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> fallbacks{0};  // communicators that wanted the path and fell back to TCP
  std::atomic<uint64_t> onCaller{0};   // calls completed on the calling thread (finishOnCaller)
  std::mutex mu;
  std::string lastSegment;  // name of the last segment this process created or attached
};
Stats& stats();

}  // namespace shm
}  // namespace ncclnode

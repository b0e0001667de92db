// Gloo's legacy all-gather (AllgatherRing) and reduce-scatter
// (ReduceScatterHalvingDoubling), prepared once per communicator: like the legacy
// all-reduces (gloo_algorithms.h) they register their buffers and take context
// slots when constructed, so each object is built at the same call on every rank,
// keyed by agreed fields (never a pointer), over staging buffers it owns, and
// evicted least-recently-used over the same agreed sequence.
#pragma once

#include <gloo/algorithm.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "../core/dtype.h"
#include "gloo_tuning.h"

namespace ncclnode {

// How many calls of this process took the mesh round or a legacy class, per
// collective (glooAlgoStats() on the addon: the tests show the chosen path ran).
struct GlooAlgoStats {
  std::atomic<uint64_t> meshAllReduces{0}, meshTwoRoundAllReduces{0}, meshAllGathers{0}, meshReduceScatters{0};
  std::atomic<uint64_t> legacyAllReduces{0}, legacyAllGathers{0}, legacyReduceScatters{0};
  std::atomic<uint64_t> tcpRingCalls{0};  // all-reduce, all-gather, reduce-scatter on the own ring
  std::atomic<uint64_t> glooAllGathers{0};  // gloo::allgather (Gloo's new-style all-gather)
  // All-to-alls in the agreement round (TCP), in the shared-memory segment's round, on the own connections.
  std::atomic<uint64_t> meshAllToAlls{0}, shmAllToAlls{0}, tcpAllToAlls{0};
  // Broadcasts, reduces, gathers and scatters the same ways (gloo_rooted.cpp): in the TCP
  // agreement round, through the segment (its round or further rounds), on the own connections.
  std::atomic<uint64_t> meshRooted{0}, shmRooted{0}, tcpRooted{0};
  // Broadcasts over the own connections along the binomial tree (the rest: the chain).
  std::atomic<uint64_t> tcpBroadcastTrees{0};
  // Calls whose TCP agreement round completed them on the calling thread (finishTcpOnCaller).
  std::atomic<uint64_t> tcpOnCaller{0};
  // Two-round all-reduces whose second round the calling thread started and the worker finished.
  std::atomic<uint64_t> tcpSecondRoundsToWorker{0};
  // Peers' bodies the TCP agreement round read straight into a call's output (MeshExchange::landBody).
  std::atomic<uint64_t> meshLandedBodies{0};
};
GlooAlgoStats& glooAlgoStats();

class LegacyCollectives {
 public:
  // At most maxEntries objects and (beyond the newest) maxBytes of staging.
  explicit LegacyCollectives(size_t maxEntries = 4, size_t maxBytes = size_t{256} << 20)
      : maxEntries_(maxEntries), maxBytes_(maxBytes) {}
  ~LegacyCollectives();
  // out (count x size elements) := every rank's in (count elements of `width` bytes), in rank order.
  void allGather(const std::shared_ptr<gloo::Context>& ctx, size_t width, const void* in, void* out, size_t count);
  // out (count elements) := the sum over ranks of block `rank` of in (count x size elements).
  void reduceScatter(const std::shared_ptr<gloo::Context>& ctx, DType dtype, const void* in, void* out, size_t count);
  // Whether any call ran through a legacy class.
  bool ran() const { return clock_ > 0; }

 private:
  struct Entry {
    Coll coll;
    DType dtype;  // reduce-scatter: the reduced type
    size_t width;  // all-gather: the element width (the bytes are copied, never read)
    size_t count;
    size_t bytes;
    std::unique_ptr<uint8_t[]> in, out;
    std::unique_ptr<gloo::Algorithm> impl;
    uint64_t used = 0;
  };
  Entry& entry(const std::shared_ptr<gloo::Context>& ctx, Coll coll, DType dtype, size_t width, size_t count);

  size_t maxEntries_, maxBytes_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace ncclnode

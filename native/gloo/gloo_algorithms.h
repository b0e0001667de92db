// The all-reduce algorithm per call: Gloo's new-style gloo::allreduce (ring or
// bcube) or one of its legacy classes (ring, chunked ring, halving-doubling,
// bcube). The choice is a pure function of what every rank agrees on (element
// count, dtype, op, group size and the forced algorithm), so all ranks pick the same.
#pragma once

#include <gloo/algorithm.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/dtype.h"

namespace ncclnode {

// Mesh: the whole buffer rides in the agreement round. MeshRsAg: the round carries block
// p of the buffer to peer p (a reduce-scatter), then a second round gives every peer each
// rank's reduced block (an all-gather): a ring's bytes in two exchanges. Both are only
// ever chosen by gloo_tuning.h. TcpRing: the backend's own ring over its own connections
// (native/net/tcp_ring.h).
enum class AllReduceAlgo { Auto, Ring, Bcube, LegacyRing, RingChunked, HalvingDoubling, LegacyBcube, Mesh, TcpRing, MeshRsAg };

// NCCL_NODE_GLOO_ALLREDUCE: "" or "auto", "tcp-ring", "ring", "bcube", "legacy-ring",
// "ring-chunked", "halving-doubling", "legacy-bcube"; anything else throws.
AllReduceAlgo parseAllReduceAlgo(const std::string& name);
const char* allReduceAlgoName(AllReduceAlgo a);

// Whether the legacy classes can run this dtype/op (they reduce with Gloo's own
// typed sum; Avg is a sum finished by divideInPlace).
bool legacySupports(DType dtype, RedOp op);

// The algorithm for one call with `count` elements; never Auto. A forced legacy
// algorithm that cannot run the call (dtype/op, size, group size) gives the ring.
AllReduceAlgo chooseAllReduce(AllReduceAlgo forced, size_t count, DType dtype, RedOp op, int groupSize);

inline bool isLegacy(AllReduceAlgo a) {
  return a == AllReduceAlgo::LegacyRing || a == AllReduceAlgo::RingChunked ||
         a == AllReduceAlgo::HalvingDoubling || a == AllReduceAlgo::LegacyBcube;
}

// Legacy algorithm objects, prepared once per (algorithm, dtype, count) and run on
// a staging buffer they own: the legacy classes register their buffers and take
// slots from the context when constructed, so construction must happen at the same
// call on every rank, which a key of agreed fields (never a pointer) guarantees;
// eviction is least-recently-used over the same agreed sequence.
class LegacyAllReduces {
 public:
  explicit LegacyAllReduces(size_t maxEntries = 4) : max_(maxEntries) {}
  ~LegacyAllReduces();
  // data (count elements of dtype) := the sum over ranks, in place.
  void run(const std::shared_ptr<gloo::Context>& ctx, AllReduceAlgo algo, DType dtype, void* data, size_t count);
  // Whether any call ran through a legacy class.
  bool ran() const { return clock_ > 0; }

 private:
  struct Entry {
    AllReduceAlgo algo;
    DType dtype;
    size_t count;
    std::unique_ptr<uint8_t[]> buf;
    std::unique_ptr<gloo::Algorithm> impl;
    uint64_t used = 0;
  };
  size_t max_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace ncclnode

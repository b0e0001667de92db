// Which algorithm runs an all-reduce, all-gather or reduce-scatter: a built-in table
// per size and world size (from bench/comm/sweep.ts on this project's test host),
// which a tuning file (NCCL_NODE_GLOO_TUNING, validated by src/comm/gloo/tuning.ts
// and handed over as canonical text) overrides. Every choice is a pure function of
// the table and of what every rank agrees on (count, dtype, op, world size), and
// every rank checks at connect that its table hashes like everyone else's, so all
// ranks pick the same algorithm for a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../core/dtype.h"
#include "gloo_algorithms.h"

namespace ncclnode {

enum class Coll { AllReduce, AllGather, ReduceScatter };
// mesh: the data rides in the agreement round (mesh_exchange.h); gloo: new-style
// gloo::allgather; legacy-ring: Gloo's AllgatherRing; tcp-ring: the backend's own ring
// over its own connections (native/net/tcp_ring.h).
enum class AllGatherAlgo { Mesh, Gloo, LegacyRing, TcpRing };
// mesh: every rank's whole input rides in the agreement round; alltoall: all-to-all
// of the blocks plus a local reduction in rank order; halving-doubling: Gloo's
// ReduceScatterHalvingDoubling; tcp-ring: the backend's own ring.
enum class ReduceScatterAlgo { Mesh, AllToAll, HalvingDoubling, TcpRing };

class GlooTuning {
 public:
  // Lines `<allreduce|allgather|reducescatter> <world size> <max bytes|inf> <algorithm>`;
  // "" keeps the built-in table. Throws Error(InvalidArgument) on anything else.
  explicit GlooTuning(const std::string& text = "");
  // FNV-1a 64 of the canonical text, 16 hex digits ("0000000000000000"-style for none).
  const std::string& hash() const { return hash_; }
  // The algorithm the table names for a call of `bytes` on `worldSize` ranks, "auto"
  // when no rule applies.
  const std::string& rule(Coll c, int worldSize, uint64_t bytes) const;

 private:
  struct Rule {
    uint64_t maxBytes;
    std::string algo;
  };
  std::map<std::pair<int, int>, std::vector<Rule>> rules_;
  std::string hash_;
};

// The call's size as the table counts it: all-reduce the buffer, all-gather the
// gathered output, reduce-scatter the per-rank input (count is per rank for both).
uint64_t tuningBytes(Coll c, size_t count, DType dtype, int worldSize);

// Beyond 2 ranks the largest all-reduce the agreement round carries whole (every rank's
// buffer to every peer, n-1 times the data where a ring sends 2(n-1)/n).
constexpr size_t kMeshAllReduceBytes = 64 * 1024;

// At 2 ranks the round moves what a ring moves, in one exchange, but each rank then
// reduces the whole buffer where the ring reduces half of it while the other half is on
// the wire; beyond this size the ring is the faster of the two (bench/README.md).
constexpr size_t kMeshAllReduceBytesTwoRanks = 1024 * 1024;

// Elements per rank's block when an all-reduce is split across the ranks: the first
// blocks hold this many, the last ones fewer (or none) when count does not divide.
inline size_t meshBlock(size_t count, int worldSize) {
  return (count + static_cast<size_t>(worldSize) - 1) / static_cast<size_t>(worldSize);
}

// meshBytes: what the agreement round carries besides the fingerprint at this world
// size. A named algorithm that cannot run the call gives the built-in choice.
AllReduceAlgo pickAllReduce(const GlooTuning& t, AllReduceAlgo forced, size_t count, DType dtype, RedOp op,
                            int worldSize, size_t meshBytes);
AllGatherAlgo pickAllGather(const GlooTuning& t, size_t count, DType dtype, int worldSize, size_t meshBytes);
ReduceScatterAlgo pickReduceScatter(const GlooTuning& t, size_t count, DType dtype, RedOp op, int worldSize,
                                    size_t meshBytes);

}  // namespace ncclnode

#include "gloo_tuning.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <sstream>

#include "../core/errors.h"

namespace ncclnode {

namespace {

const char* const kCollNames[] = {"allreduce", "allgather", "reducescatter"};
const char* const kAllGatherNames[] = {"mesh", "gloo", "legacy-ring", "tcp-ring"};
const char* const kReduceScatterNames[] = {"mesh", "alltoall", "halving-doubling", "tcp-ring"};
const std::string kAuto = "auto";

template <class E, size_t N>
bool lookup(const char* const (&names)[N], const std::string& name, E* out) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

bool knownAlgo(Coll c, const std::string& name) {
  if (name == kAuto) return true;
  AllGatherAlgo ag;
  ReduceScatterAlgo rs;
  switch (c) {
    case Coll::AllReduce:
      if (name == "mesh" || name == "mesh-rs-ag") return true;
      try {
        return parseAllReduceAlgo(name) != AllReduceAlgo::Auto;
      } catch (const Error&) {
        return false;
      }
    case Coll::AllGather: return lookup(kAllGatherNames, name, &ag);
    case Coll::ReduceScatter: return lookup(kReduceScatterNames, name, &rs);
  }
  return false;
}

std::string fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: offset basis and prime
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

constexpr int kTwoRoundsRanks = 4;

bool legacyCount(size_t elements, size_t bytes) {
  // The legacy classes keep element counts and byte sizes in an int.
  return elements <= static_cast<size_t>(INT_MAX) && bytes <= static_cast<size_t>(INT_MAX);
}

// The built-in choice beyond a tuning file (bench/comm/sweep.ts and build/gloo_algos at
// 2 and 4 ranks, bench/README.md): the mesh round where the call fits it (its capacity:
// mesh_exchange.cpp), beyond that the backend's own ring over its own connections. From
// C++ the ring took 0.5-0.99 of the best of Gloo's algorithms at every size from 64 KiB
// to 64 MiB on 2 ranks and 8 B to 4 MiB on 4 ranks in one session's runs (1.0-1.44 at
// 8-256 MiB on a later host), where Gloo's own choices swing with the size and the host
// (its new-style ring took seconds a call at 4 MiB on 4 ranks). The legacy
// AllgatherRing and ReduceScatterHalvingDoubling are never built in: one can return
// while its last notification is still unread by a peer, so a rank that destroys the
// communicator right after it can make that peer see ERR_PEER_LOST. They run only where
// a tuning file names them.

}  // namespace

GlooTuning::GlooTuning(const std::string& text) : hash_(fnv1a(text)) {
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    std::istringstream f(line);
    std::string coll, size, max, algo, extra;
    f >> coll >> size >> max >> algo;
    Coll c;
    int world = 0;
    uint64_t maxBytes = 0;
    bool ok = lookup(kCollNames, coll, &c) && !algo.empty() && !(f >> extra);
    try {
      world = ok ? std::stoi(size) : 0;
      maxBytes = max == "inf" ? UINT64_MAX : (ok ? std::stoull(max) : 0);
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || world < 1 || maxBytes == 0 || !knownAlgo(c, algo)) {
      throw Error(Code::InvalidArgument, "gloo tuning table line " + std::to_string(n) +
                                             ": expected \"<allreduce|allgather|reducescatter> <world size> "
                                             "<max bytes|inf> <algorithm>\", got \"" + line + "\"");
    }
    rules_[{static_cast<int>(c), world}].push_back({maxBytes, algo});
  }
}

const std::string& GlooTuning::rule(Coll c, int worldSize, uint64_t bytes) const {
  auto it = rules_.find({static_cast<int>(c), worldSize});
  if (it == rules_.end()) return kAuto;
  for (const auto& r : it->second) {
    if (bytes <= r.maxBytes) return r.algo;
  }
  return kAuto;
}

uint64_t tuningBytes(Coll c, size_t count, DType dtype, int worldSize) {
  const uint64_t b = static_cast<uint64_t>(count) * elementSize(dtype);
  return c == Coll::AllReduce ? b : b * static_cast<uint64_t>(worldSize);
}

AllReduceAlgo pickAllReduce(const GlooTuning& t, AllReduceAlgo forced, size_t count, DType dtype, RedOp op,
                            int worldSize, size_t meshBytes) {
  // A forced algorithm (NCCL_NODE_GLOO_ALLREDUCE) runs at every size, the mesh never.
  if (forced != AllReduceAlgo::Auto) return chooseAllReduce(forced, count, dtype, op, worldSize);
  const uint64_t bytes = tuningBytes(Coll::AllReduce, count, dtype, worldSize);
  // Beyond 2 ranks the round sends the whole buffer to every peer (n-1 times the data),
  // where a ring sends 2(n-1)/n: only small all-reduces ride it there.
  const size_t meshLimit = worldSize == 2 ? meshBytes : std::min<size_t>(meshBytes, kMeshAllReduceBytes);
  const bool meshFits = worldSize > 1 && bytes <= meshLimit;
  // Two rounds carry what a ring moves where each rank's block fits a round.
  const size_t block = meshBlock(count, worldSize) * elementSize(dtype);
  const bool twoRoundsFit = worldSize > 2 && block <= meshBytes;
  const std::string& name = t.rule(Coll::AllReduce, worldSize, bytes);
  if (name == "mesh" && meshFits) return AllReduceAlgo::Mesh;
  if (name == "mesh-rs-ag" && twoRoundsFit) return AllReduceAlgo::MeshRsAg;
  if (name != kAuto && name != "mesh" && name != "mesh-rs-ag") {
    const AllReduceAlgo want = parseAllReduceAlgo(name);
    // chooseAllReduce gives the ring for a legacy algorithm that cannot run the call.
    if (!isLegacy(want) || chooseAllReduce(want, count, dtype, op, worldSize) == want) return want;
  }
  // A table may name the round up to its capacity at 2 ranks; built in it stops sooner.
  if (meshFits && (worldSize > 2 || bytes <= kMeshAllReduceBytesTwoRanks)) return AllReduceAlgo::Mesh;
  // Built in where measured (3-4 ranks: 0.42-0.85 of the ring's time at 128 KiB-4 MiB, bench/README.md);
  // a tuning file can name it for larger groups.
  return twoRoundsFit && worldSize <= kTwoRoundsRanks ? AllReduceAlgo::MeshRsAg : AllReduceAlgo::TcpRing;
}

AllGatherAlgo pickAllGather(const GlooTuning& t, size_t count, DType dtype, int worldSize, size_t meshBytes) {
  if (worldSize < 2) return AllGatherAlgo::Gloo;
  const uint64_t bytes = tuningBytes(Coll::AllGather, count, dtype, worldSize);
  const bool meshFits = count * elementSize(dtype) <= meshBytes;
  const bool legacyOk = legacyCount(count * static_cast<size_t>(worldSize), bytes);
  AllGatherAlgo want;
  if (lookup(kAllGatherNames, t.rule(Coll::AllGather, worldSize, bytes), &want)) {
    if ((want != AllGatherAlgo::Mesh || meshFits) && (want != AllGatherAlgo::LegacyRing || legacyOk)) return want;
  }
  // Beyond the round the own ring, as for the other two: in alternating blocks within
  // the same processes (bench/ring_ab.cpp) it took 0.74-0.80 of gloo::allgather's time
  // at 8-256 MiB on 2 ranks and 0.81-0.90 at 8-128 MiB on 4. Separately timed runs on an
  // earlier host had gloo::allgather ahead from 32 MiB (0.71-0.82 of the ring's time), so
  // the two swing with the host; the ring keeps every large collective on the backend's
  // own connections, with their deadlines and abort handling. A tuning file names `gloo`
  // where a host measures it faster.
  return meshFits ? AllGatherAlgo::Mesh : AllGatherAlgo::TcpRing;
}

ReduceScatterAlgo pickReduceScatter(const GlooTuning& t, size_t count, DType dtype, RedOp op, int worldSize,
                                    size_t meshBytes) {
  if (worldSize < 2) return ReduceScatterAlgo::AllToAll;
  const uint64_t bytes = tuningBytes(Coll::ReduceScatter, count, dtype, worldSize);
  // The round sends each peer its own block.
  const bool meshFits = count * elementSize(dtype) <= meshBytes;
  const bool legacyOk = legacySupports(dtype, op) && legacyCount(count * static_cast<size_t>(worldSize), bytes);
  ReduceScatterAlgo want;
  if (lookup(kReduceScatterNames, t.rule(Coll::ReduceScatter, worldSize, bytes), &want)) {
    if ((want != ReduceScatterAlgo::Mesh || meshFits) && (want != ReduceScatterAlgo::HalvingDoubling || legacyOk)) {
      return want;
    }
  }
  return meshFits ? ReduceScatterAlgo::Mesh : ReduceScatterAlgo::TcpRing;
}

}  // namespace ncclnode

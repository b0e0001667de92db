// The mesh round every collective starts with: the agreement fingerprint and, for
// small all-reduces, the data (docs/gloo.md). It runs with checkCollectives off
// too: Gloo's TCP transport aborts the process from its own event-loop thread when
// a peer sends more bytes than a posted receive holds (an exception nobody can
// catch), so the byte layout of every call is compared before any data moves.
// checkCollectives decides only whether dtype, count and op are compared as well.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gloo_backend.h"

namespace ncclnode {

// Small collectives travel whole in the agreement round (gloo_tuning.h picks where):
// an all-reduce's buffer or an all-gather's input goes to every peer, a
// reduce-scatter's block p to peer p; the result is assembled locally in rank order,
// so every rank gets the same bits whatever the arrival order. The choice depends
// only on the call, the world size and the table, so ranks that agree on the call
// agree on the path.
namespace {
// An all-to-all's blocks ride in the round up to this size per peer (within what the
// round carries): the round saves one exchange of fixed cost, while the copy out of its
// slots grows with the block. Measured over TCP against the transfer of every block
// (bench/README.md): with the round at 512 KiB-1 MiB blocks, 2 and 4 ranks, 0.71-0.87 of
// the time (at 256 KiB before); at 2 MiB blocks level.
constexpr size_t kMeshAllToAllBlock = 1024 * 1024;
// A gather rides in the round up to this size a rank (where the round carries it). Both
// ways with the calling thread's wait (finishTcpOnCaller), in alternating blocks over TCP,
// the round against the fingerprint round and then one transfer (bench/README.md): 2 ranks,
// 128 KiB-1 MiB a rank, 0.39-0.80 of the time with the root fixed and 0.40-1.14 (by median,
// 2 of 8 cases above 1) with it rotating; 4 ranks, 128-512 KiB, 0.60-0.92. At 2 MiB, where
// the root receives more than it waits for on its calling thread, 0.83-0.95 with the root
// fixed but 1.22-1.25x rotating.
constexpr size_t kMeshGatherBytes = 1024 * 1024;
// A broadcast rides in the round while its root sends at most this much there (1 MiB at
// 2 ranks, 341 KiB a peer at 4; the buffer alone when every rank is on one host:
// pickBroadcastRound); beyond, the chain of pieces (gloo_rooted.cpp), which
// sends the buffer once from the root where the round sends it n-1 times. With the
// calling thread's wait (the peers receive the buffer, the root nothing), in alternating
// blocks over TCP, the round against the fingerprint round and then the chain
// (bench/README.md): 2 ranks, 128 KiB-1 MiB, 0.33-1.15 of the time (by median, the root
// rotating or fixed; 2 of 16 cases above 1); 2-4 MiB level (0.92-1.02); 4 ranks,
// 128 KiB-1 MiB, 0.49-0.91 on loopback, where the root's n-1 copies cost memory
// bandwidth alone, not a link's.
constexpr size_t kMeshBroadcastBytes = 1024 * 1024;
// Blocks larger than this that ride in the round are read straight into the output
// (landBodies); where this host's ranks outnumber its cores, larger than
// kLandBytesOversubscribed.
constexpr size_t kLandBytes = 256 * 1024;
constexpr size_t kLandBytesOversubscribed = 32 * 1024;
// The most a round may bring a rank's calling thread (finishTcpOnCaller). A round handed
// to the worker costs two thread hand-offs, which on this project's 2-core test host took
// 70-140 µs a call (2 ranks, awaited all-reduces of 32-128 KiB against the same round
// blocking: 112-187 against 21-42 µs). Against the 32 KiB of data it was limited to before,
// in alternating blocks (bench/README.md): 2 ranks, 64 KiB-1 MiB all-reduces, all-gathers,
// all-to-alls, reduce-scatters, scatters and reduces took 0.30-0.94 of the time by median;
// 4 ranks, where the round brings 64 KiB-1 MiB, 0.67-1.00 (calls beyond it, the controls,
// 0.96-1.06). Beyond it the round outlasts what the hand-off costs: 4 ranks bringing 3 MiB
// (all-gathers and reduce-scatters of 1 MiB blocks) took 1.28-1.37x on the calling thread.
constexpr size_t kCallerReceiveBytes = 1024 * 1024;
}  // namespace

// What the round brings this rank besides its peers' heads: the bodies sent to it.
size_t GlooBackend::meshReceives(const Op& op, const MeshBody& body) const {
  const size_t peers = static_cast<size_t>(cfg_.size - 1);
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  switch (op.kind) {
    case OpKind::Broadcast:
    case OpKind::Scatter:
      return root ? 0 : bytes;
    case OpKind::Gather:
    case OpKind::Reduce:
      return root ? bytes * peers : 0;
    default:
      return body.bytes * peers;  // each peer sends this rank what this rank sends it
  }
}

// A broadcast rides in the round while what its root sends there, its buffer to every
// peer, comes to at most kMeshBroadcastBytes (and each message fits the round); when every
// rank of the group is on this host (TCP over loopback, the shared-memory path off), while
// the buffer alone does: there the root's n-1 copies cost memory bandwidth, not a link's,
// and at 4 ranks over loopback the round took 0.54-0.70 of the chain's time at 512 KiB-1 MiB
// (bench/README.md, "Broadcasts within one host over TCP"). Where those ranks also
// outnumber the host's cores, at every size the round carries (4 MiB at 2-4 ranks): there
// the root's copies and the receivers' run on the same few cores whatever the shape, and
// the tree's second hop waits for its first, which waits for the fingerprints; the round
// sends while they travel. 4 ranks on 2 cores, 2-3 MiB: the round 0.70-0.73 of the tree's
// time, 3 ranks at 2 MiB 0.88 (bench/README.md, "Broadcasts up to the round's capacity
// where ranks outnumber cores"). Every rank knows the same host map (learnHosts()) and
// the host's count of online CPUs, so all take the same path.
bool GlooBackend::pickBroadcastRound(size_t bytes) const {
  if (bytes > meshBytes()) return false;
  if (oneHost_ && oversubscribed_) return true;
  const size_t sent = oneHost_ ? bytes : bytes * static_cast<size_t>(cfg_.size - 1);
  return sent <= kMeshBroadcastBytes;
}

size_t GlooBackend::meshBytes() const { return mesh_ ? mesh_->cap() - sizeof(Fingerprint) : 0; }

GlooBackend::MeshBody GlooBackend::meshBody(const Op& op) const {
  MeshBody b;
  if (cfg_.size < 2 || op.rejected) return b;
  const size_t width = elementSize(op.dtype);
  const size_t bytes = op.count * width;
  switch (op.kind) {
    case OpKind::AllReduce:
      switch (pickAllReduce(tuning_, forcedAllReduce_, op.count, op.dtype, op.redop, cfg_.size, meshBytes())) {
        case AllReduceAlgo::Mesh:
          b.carried = true;
          b.bytes = bytes;
          break;
        case AllReduceAlgo::MeshRsAg:
          // Across hosts with shared memory inside each, the two-level path moves less
          // between hosts (every rank agrees on whether there is one: setupShm).
          if (usesShm(op)) break;
          b.carried = true;
          b.bytes = b.stride = meshBlock(op.count, cfg_.size) * width;
          b.end = bytes;
          b.twoRounds = true;
          break;
        default:
          break;
      }
      return b;
    case OpKind::AllGather:
      if (pickAllGather(tuning_, op.count, op.dtype, cfg_.size, meshBytes()) == AllGatherAlgo::Mesh) {
        b.carried = true;
        b.bytes = bytes;
      }
      return b;
    case OpKind::ReduceScatter:
      if (pickReduceScatter(tuning_, op.count, op.dtype, op.redop, cfg_.size, meshBytes()) == ReduceScatterAlgo::Mesh) {
        b.carried = true;
        b.bytes = b.stride = bytes;
      }
      return b;
    case OpKind::AllToAll: {
      // Equal blocks, block p to peer p; per-peer counts go around in their own round first.
      const size_t block = op.count / static_cast<size_t>(cfg_.size) * width;
      if (op.sendCounts.empty() && block <= std::min(meshBytes(), kMeshAllToAllBlock)) {
        b.carried = true;
        b.bytes = b.stride = block;
      }
      return b;
    }
    // The rooted collectives ride where their all-to-all counterpart does: what a
    // reduce's root receives (every other rank's buffer, sent to it alone) is what an
    // all-gather's rank receives; a scatter's root sends block p to peer p as a
    // reduce-scatter's rank does. A broadcast rides while its root sends at most
    // kMeshBroadcastBytes, a gather up to kMeshGatherBytes a rank: with large blocks read
    // straight into the output (landBodies) and the rounds completed on the calling
    // threads (finishTcpOnCaller), the round beat the fingerprint round and then the
    // transfer. Ranks with nothing to send post the fingerprint alone.
    case OpKind::Broadcast:
      if (pickBroadcastRound(bytes)) {
        b.carried = true;
        if (cfg_.rank == op.root) b.bytes = bytes;
      }
      return b;
    case OpKind::Reduce:
    case OpKind::Gather:
      if (op.kind == OpKind::Gather ? bytes <= std::min(meshBytes(), kMeshGatherBytes)
                                    : pickAllGather(tuning_, op.count, op.dtype, cfg_.size, meshBytes()) ==
                                          AllGatherAlgo::Mesh) {
        b.carried = true;
        if (cfg_.rank != op.root) {
          b.bytes = bytes;
          b.to = op.root;
        }
      }
      return b;
    case OpKind::Scatter:
      if (pickReduceScatter(tuning_, op.count, op.dtype, RedOp::Sum, cfg_.size, meshBytes()) ==
          ReduceScatterAlgo::Mesh) {
        b.carried = true;
        if (cfg_.rank == op.root) b.bytes = b.stride = bytes;
      }
      return b;
    default:
      return b;
  }
}

// The result of a collective whose data rode in the round. This rank's own part comes
// from its own buffer (the round copies only small bodies into its slot).
void GlooBackend::finishMesh(const Op& op, const MeshBody& body) {
  const size_t head = sizeof(Fingerprint);
  const size_t width = elementSize(op.dtype);
  const size_t block = op.count * width;
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  const bool reduces = op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter;
  const ReduceFn fn = reduces ? reduceFunction(op.dtype, op.redop) : nullptr;
  auto peer = [&](int r) { return mesh_->bodyOf(r, head); };
  for (int r = 0; r < cfg_.size; ++r) {
    if (mesh_->landed(r)) glooAlgoStats().meshLandedBodies++;
  }
  switch (op.kind) {
    case OpKind::Broadcast:
    case OpKind::Reduce:
    case OpKind::Gather:
    case OpKind::Scatter:
      finishMeshRooted(op);
      return;
    case OpKind::AllGather:
      placeBlocks(recv, send, cfg_.rank, cfg_.size, block, peer);
      glooAlgoStats().meshAllGathers++;
      return;
    case OpKind::AllToAll: {
      // Each peer sent this rank's block alone.
      const size_t part = block / static_cast<size_t>(cfg_.size);
      placeBlocks(recv, send + static_cast<size_t>(cfg_.rank) * part, cfg_.rank, cfg_.size, part, peer);
      glooAlgoStats().meshAllToAlls++;
      return;
    }
    case OpKind::ReduceScatter:
      reduceInRankOrder(*mesh_, head, cfg_.rank, send + static_cast<size_t>(cfg_.rank) * block, cfg_.size, fn, recv,
                        op.count, width);
      glooAlgoStats().meshReduceScatters++;
      break;
    default:
      if (body.twoRounds) {
        finishTwoRounds(op);
        return;
      }
      reduceInRankOrder(*mesh_, head, cfg_.rank, send, cfg_.size, fn, recv, op.count, width);
      glooAlgoStats().meshAllReduces++;
      break;
  }
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
}

// An all-reduce in two rounds: the agreement round brought this rank block `rank` of
// every peer's buffer; it reduces that block in rank order, then a second round gives
// every peer its reduced block and brings theirs. Each block is summed once, by its
// owner, so every rank ends with the same bits. The second round's message starts with
// the all-reduce's size in bytes, the same on every rank of the call, so a rank out of
// step is named instead of misread, and each owner's block may land in its place in the
// output as the round reads it (landBodies: a block lands only after a head equal to this
// rank's own); the round sends nothing from those places.
void GlooBackend::finishTwoRounds(const Op& op) {
  postSecondRound(op);
  mesh_->wait(op.timeout);
  finishSecondRound(op);
}

namespace {
struct TwoRoundBlocks {
  size_t total, block;
  size_t at(int r) const { return std::min(total, static_cast<size_t>(r) * block); }
  size_t len(int r) const { return std::min(total - at(r), block); }
};
TwoRoundBlocks twoRoundBlocks(const Op& op, int worldSize) {
  const size_t width = elementSize(op.dtype);
  return {op.count * width, meshBlock(op.count, worldSize) * width};
}
}  // namespace

// The first round is in and agreed: this rank's block reduced into its place in the
// output, and the second round posted with it.
void GlooBackend::postSecondRound(const Op& op) {
  const size_t head = sizeof(Fingerprint);
  const size_t width = elementSize(op.dtype);
  const TwoRoundBlocks b = twoRoundBlocks(op, cfg_.size);
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  const size_t at = b.at(cfg_.rank);
  const size_t len = b.len(cfg_.rank);
  if (len > 0) {
    reduceInRankOrder(*mesh_, head, cfg_.rank, send + at, cfg_.size, reduceFunction(op.dtype, op.redop), recv + at,
                      len / width, width);
    if (op.redop == RedOp::Avg) divideInPlace(recv + at, op.dtype, len / width, cfg_.size);
  }
  const uint64_t size = b.total;
  mesh_->post(&size, sizeof size, recv + at, len);
  for (int r = 0; r < cfg_.size; ++r) {
    if (r != cfg_.rank && lands(b.len(r))) mesh_->landBody(r, recv + b.at(r), b.len(r));
  }
}

// The second round is in: every peer's reduced block in its place in the output.
void GlooBackend::finishSecondRound(const Op& op) {
  const TwoRoundBlocks b = twoRoundBlocks(op, cfg_.size);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  const uint64_t size = b.total;
  for (int r = 0; r < cfg_.size; ++r) {
    if (r == cfg_.rank) continue;
    uint64_t got = 0;
    std::memcpy(&got, mesh_->from(r), sizeof got);
    if (got != size) {
      throw Error(Code::Backend, "rank " + std::to_string(r) + " sent the second round of a " + std::to_string(got) +
                                     "-byte all-reduce where this rank's is " + std::to_string(size) +
                                     " bytes (ranks out of step)");
    }
    if (mesh_->landed(r)) {
      glooAlgoStats().meshLandedBodies++;
    } else {
      std::memcpy(recv + b.at(r), mesh_->from(r) + sizeof got, b.len(r));
    }
  }
  glooAlgoStats().meshTwoRoundAllReduces++;
}

bool GlooBackend::checking() const { return cfg_.checkAgreement && cfg_.size > 1; }

bool GlooBackend::usesMesh(const Op& op) const { return cfg_.size > 1; }

// The round's message: the fingerprint, then the data of a small all-reduce, or
// for a rejected call the reason (cut to what the round carries, NUL-terminated).
void GlooBackend::postMesh(const Op& op) {
  const Fingerprint mine = fingerprintOf(op);
  if (op.rejected) {
    // Short enough to be copied into the round's own slot (the string dies here).
    std::string why = op.rejectReason.substr(0, std::min(mesh_->cap(), MeshExchange::kCopiedBody) - sizeof mine - 1);
    mesh_->post(&mine, sizeof mine, why.c_str(), why.size() + 1);
    return;
  }
  const MeshBody body = meshBody(op);
  mesh_->post(&mine, sizeof mine, op.send.data, body.bytes, body.stride, body.end, body.to);
  if (body.carried && !body.twoRounds) {
    expectRooted(op);
    landBodies(op);
  }
}

// A rooted call whose data rides in the round: what each peer's message holds differs from
// what this rank sends (the root's buffer to the others, or the others' to the root), so the
// round is told, and reads each message whole in one go (MeshExchange::expectFrom).
void GlooBackend::expectRooted(const Op& op) {
  const bool fromRoot = op.kind == OpKind::Broadcast || op.kind == OpKind::Scatter;
  const bool toRoot = op.kind == OpKind::Gather || op.kind == OpKind::Reduce;
  if (!fromRoot && !toRoot) return;
  const size_t bytes = op.count * elementSize(op.dtype);
  for (int p = 0; p < cfg_.size; ++p) {
    if (p == cfg_.rank) continue;
    const bool body = fromRoot ? p == op.root : cfg_.rank == op.root;
    mesh_->expectFrom(p, sizeof(Fingerprint) + (body ? bytes : 0));
  }
}

// Where the round reads the peers' bodies straight into this rank's output instead of
// into their slots (MeshExchange::landBody), sparing the copy out of them: an all-gather's
// and an all-to-all's blocks, a gather's blocks on the root, and a broadcast's buffer and a
// scatter's block on the ranks other than the root.
// A block lands only where its place in the output is apart from what this rank reads of
// its input (an all-to-all in place sends from the memory its blocks would land in), and
// only beyond kLandBytes: landing takes a read of the head of its own, and at 128-256 KiB
// landing and copying were level within the noise of these measurements (0.52-1.81 by
// median over blocks) where from 512 KiB landing was ahead (over TCP, both ways in
// alternating blocks in the same processes, all-gathers, all-to-alls and scatters of
// 512 KiB-4 MiB a rank: bench/README.md). Where this host's ranks outnumber its cores the
// copy out of the slots waits for a core the other ranks want: there blocks land beyond
// 32 KiB (4 ranks on 2 cores, in separate processes against landing beyond 256 KiB:
// all-gathers of 64-256 KiB blocks and gathers of 128 KiB ones 0.82-0.92 of the time;
// bench/README.md, "Landing smaller blocks where ranks outnumber cores").
// NCCL_NODE_TCP_LAND=0 keeps every body in the slots.
bool GlooBackend::lands(size_t block) const {
  return landing_ && block > (oversubscribed_ ? kLandBytesOversubscribed : kLandBytes);
}

void GlooBackend::landBodies(const Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  size_t block = 0;      // what each landing peer sends
  size_t readBytes = 0;  // what of op.send this rank reads
  bool fromRoot = false; // the root's body alone, this rank's whole output (else peer p's at block p)
  switch (op.kind) {
    case OpKind::AllGather:
      block = readBytes = bytes;
      break;
    case OpKind::AllToAll:
      block = op.count / static_cast<size_t>(cfg_.size) * elementSize(op.dtype);  // as meshBody()
      readBytes = bytes;
      break;
    case OpKind::Gather:
      if (cfg_.rank != op.root) return;
      block = readBytes = bytes;
      break;
    case OpKind::Broadcast:
    case OpKind::Scatter:
      if (cfg_.rank == op.root) return;
      block = bytes;
      fromRoot = true;
      break;
    default:
      return;
  }
  if (!lands(block)) return;
  auto* out = static_cast<uint8_t*>(op.recv.data);
  for (int p = 0; p < cfg_.size; ++p) {
    if (p == cfg_.rank || (fromRoot && p != op.root)) continue;
    uint8_t* into = fromRoot ? out : out + static_cast<size_t>(p) * block;
    if (!bytesOverlap(into, block, op.send.data, readBytes)) mesh_->landBody(p, into, block);
  }
}

bool GlooBackend::prepost(Op& op) {
  if (!ctx_ || broken_) return false;
  if (op.send.mem == MemKind::Device || op.recv.mem == MemKind::Device || !usesMesh(op)) return false;
  if (shmSingleHost()) return shmPrepost(op);
  try {
    postMesh(op);
  } catch (...) {
    op.prepostError = std::current_exception();
  }
  op.preposted = true;
  return true;
}

// NCCL_NODE_TCP_CALLER_WAIT_US (default 1000, 0: never): how long a small call whose
// round completes it waits for its peers' messages on the calling thread. Asleep in
// poll(), not spinning, so ranks that outnumber the cores lose nothing to it; the wait
// spares the two thread hand-offs of the worker's path (to it and back), which on this
// project's 2-core test host cost more than the round: a 2-rank awaited 8-byte
// all-reduce over loopback took 46-51 µs through the worker, the same round on the
// calling thread 23-25 (bench/README.md).
std::chrono::nanoseconds GlooBackend::tcpCallerWait() {
  const char* v = std::getenv("NCCL_NODE_TCP_CALLER_WAIT_US");
  const long long us = v ? std::max(0LL, std::atoll(v)) : 1000;
  return std::chrono::microseconds(us);
}

// From the engine on the calling thread, right after prepost() put op's message on the
// wire: a call the round completes (a barrier, or data that rides in it, as the
// segment's round does within a host) waits there for its peers for a bounded time
// (caller_, adapting as the segment's poll does), and if they are in, completes as
// agree() would on the worker. A round not complete by then goes on in the worker from
// where it stopped. Only where the peers' bodies come to at most kCallerReceiveBytes.
// A two-round all-reduce (its data in both rounds) takes its second round here too,
// within what is left of the same bound: left to the worker, each round of it cost the
// two thread hand-offs (bench/README.md, "Two-round all-reduces on the calling thread").
// One whose second round is not in by then goes to the worker with that round under way
// (op.secondRound).
bool GlooBackend::finishTcpOnCaller(Op& op) {
  if (!op.preposted || op.prepostError || op.rejected || caller_.full.count() == 0 || !mesh_) return false;
  // A barrier is the round itself; another call, when its data rides in it (a zero count
  // moves nothing, but finishes in run(), after the round).
  const MeshBody body = meshBody(op);
  if (op.kind != OpKind::Barrier && !(op.count > 0 && body.carried)) return false;
  // The second round brings each peer's reduced block: at most what the first brought.
  if (meshReceives(op, body) * (body.twoRounds ? 2 : 1) > kCallerReceiveBytes) return false;
  const auto start = net::Clock::now();
  try {
    try {
      if (!mesh_->waitFor(caller_.now, op.timeout)) {
        caller_.missed();
        return false;
      }
      // The peers were in: the bound is restored whatever the second round does (the
      // peers are in the call by then; how long that round takes is the transfer's).
      const auto bound = caller_.now;
      caller_.met();
      if (body.twoRounds) {
        checkRound(op);
        postSecondRound(op);
        const auto left = bound - (net::Clock::now() - start);
        if (left.count() <= 0 || !mesh_->waitFor(left, op.timeout)) {
          op.secondRound = true;
          glooAlgoStats().tcpSecondRoundsToWorker++;
          return false;
        }
        finishSecondRound(op);
        glooAlgoStats().tcpOnCaller++;
        return true;
      }
      glooAlgoStats().tcpOnCaller++;
      agree(op);  // the round is in: the verdict and the result, no further wait
    } catch (...) {
      rethrow(op, std::current_exception());  // as run() does: a failed transfer breaks the communicator
    }
  } catch (const Error& e) {
    op.fail(e.code(), e.what());
  }
  return true;
}

// One mesh round carries every rank's fingerprint (when checking) and, for a small
// all-reduce, the data too. Every rank then holds every fingerprint, so all of them
// reach the same verdict, naming the same odd rank out. Returns true when the
// round already completed the call (a small all-reduce, or a barrier: a full
// exchange is one).
bool GlooBackend::agree(const Op& op) {
  if (!usesMesh(op)) return false;
  if (shmSingleHost()) return shmAgree(op);
  if (op.secondRound) {
    // The calling thread agreed on the first round and posted the second (finishTcpOnCaller).
    mesh_->wait(op.timeout);
    finishSecondRound(op);
    return true;
  }
  if (op.preposted) {
    if (op.prepostError) std::rethrow_exception(op.prepostError);
  } else {
    postMesh(op);
  }
  mesh_->wait(op.timeout);
  checkRound(op);
  // A zero count moves nothing (run() returns before any data step).
  const MeshBody body = meshBody(op);
  if (op.count > 0 && body.carried) {
    finishMesh(op, body);
    return true;
  }
  return op.kind == OpKind::Barrier;
}

// The verdict on the round just completed: every rank holds every fingerprint.
void GlooBackend::checkRound(const Op& op) {
  std::vector<Fingerprint> all(cfg_.size);
  for (int r = 0; r < cfg_.size; ++r) std::memcpy(&all[r], mesh_->from(r), sizeof(Fingerprint));
  checkAgreement(op, all.data(), cfg_.size, cfg_.rank, checking(), [this](int r) {
    const char* text = reinterpret_cast<const char*>(mesh_->from(r)) + sizeof(Fingerprint);
    return std::string(text, strnlen(text, mesh_->cap() - sizeof(Fingerprint)));
  });
}

}  // namespace ncclnode

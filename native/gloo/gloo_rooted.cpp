// Broadcast, reduce, gather and scatter without Gloo. Small calls ride in the agreement
// round (gloo_agreement.cpp over TCP, gloo_shm.cpp through the segment on one host);
// what is left is here: on one host, further rounds through the segment; otherwise the
// backend's own connections (native/net/), with their deadlines and abort handling.
// A reduce is the ring's reduce-scatter with each finished block sent to the root
// (net::ringReduce), or on one host the segment's all-reduce with the non-roots' result
// left in scratch. Inside the addon Gloo's
// own broadcast and reduce took 0.14-0.31 ms a call at 64 B-64 KiB on 2 ranks of this
// project's test host, where an all-reduce of the same size took 0.07-0.11 ms
// (bench/comm/checkout-ab.ts, bench/README.md).
#include <algorithm>
#include <cstring>

#include "../core/copy_bytes.h"
#include "gloo_backend.h"

namespace ncclnode {

namespace {

// A broadcast's pieces along the chain beyond 2 ranks: each rank forwards a piece while
// the next arrives, so the root's link carries the buffer once instead of once per peer.
// An eighth of the buffer, 64 KiB-1 MiB: the last rank waits for n-2 pieces more than
// the transfer itself, and every piece costs each rank one transfer call.
constexpr size_t kChainPieceMin = 64u << 10;
constexpr size_t kChainPieceMax = 1u << 20;

// A broadcast, gather or scatter once a round brought every message: part(r) is what
// rank r sent this one (a broadcast's or a scatter's root: this rank's data; a gather's
// rank: its input), mine this rank's own input. The root's own block is a copy; a
// scatter's block the round read into its place already (MeshExchange::landBody) is left
// as it is.
template <class Part>
void placeRooted(const Op& op, int rank, int size, const uint8_t* mine, Part part) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const size_t me = static_cast<size_t>(rank);
  const bool root = rank == op.root;
  auto* out = static_cast<uint8_t*>(op.recv.data);
  switch (op.kind) {
    case OpKind::Broadcast:
      if (!root) {
        if (part(op.root) != out) copyBytes(out, part(op.root), bytes);
      } else if (mine != out) {
        copyBytes(out, mine, bytes);
      }
      return;
    case OpKind::Gather:
      if (!root) return;
      copyBytes(out + me * bytes, mine, bytes);
      for (int r = 0; r < size; ++r) {
        uint8_t* to = out + static_cast<size_t>(r) * bytes;
        if (r != rank && part(r) != to) copyBytes(to, part(r), bytes);
      }
      return;
    case OpKind::Scatter:
      if (root) copyBytes(out, mine + me * bytes, bytes);
      else if (part(op.root) != out) copyBytes(out, part(op.root), bytes);
      return;
    default:
      throw Error(Code::Backend, std::string("not a broadcast, gather or scatter: ") + opKindName(op.kind));
  }
}

}  // namespace

// The agreement round carried the call (gloo_agreement.cpp, meshBody): the root combines
// or hands out what the round brought. This rank's own part comes from its own memory.
void GlooBackend::finishMeshRooted(const Op& op) {
  const size_t head = sizeof(Fingerprint);
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  if (op.kind == OpKind::Reduce) {
    if (cfg_.rank == op.root) {
      reduceInRankOrder(*mesh_, head, cfg_.rank, send, cfg_.size, reduceFunction(op.dtype, op.redop), op.recv.data,
                        op.count, elementSize(op.dtype));
      if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
    }
  } else {
    // A scatter's root sent each peer its own block alone.
    placeRooted(op, cfg_.rank, cfg_.size, send, [&](int r) { return mesh_->bodyOf(r, head); });
  }
  glooAlgoStats().meshRooted++;
}

// The segment's round carried the call (gloo_shm.cpp, shmCarries). Off the calling
// thread this rank's own part comes from its posted copy, as an all-reduce's does.
void GlooBackend::shmReadRooted(const Op& op, const shm::Reader& from, bool mineInMemory) {
  const size_t head = sizeof(Fingerprint);
  if (op.kind == OpKind::Reduce) {
    if (cfg_.rank == op.root) shmReadReduced(op, from, mineInMemory);
  } else {
    const uint8_t* mine = mineInMemory ? static_cast<const uint8_t*>(op.send.data) : from(cfg_.rank) + head;
    // A scatter's root posted its whole input: this rank's block is block `rank` of it.
    const size_t at = op.kind == OpKind::Scatter ? static_cast<size_t>(cfg_.rank) * op.count * elementSize(op.dtype) : 0;
    placeRooted(op, cfg_.rank, cfg_.size, mine, [&](int r) { return from(r) + head + at; });
  }
  glooAlgoStats().shmRooted++;
}

// Rounds through the segment after the agreement round (no fingerprint: every rank
// agreed), each one synchronisation of the host's ranks (two rounds in flight,
// shm_collectives.h): round k covers bytes [at, at + len) of `total`, a slot's worth;
// this rank posts that piece of `mine` (nothing when null) and, once every rank's is in,
// read(at, len, from) consumes them. Every rank runs every round, so they stay in step.
void GlooBackend::shmRounds(const Op& op, size_t total, const uint8_t* mine, const RoundRead& read) {
  const size_t room = shm_->chunkBytes - shm::kRoundFlagBytes;
  const auto deadline = std::chrono::steady_clock::now() + op.timeout;
  try {
    for (size_t at = 0; at < total; at += room) {
      const size_t len = std::min(room, total - at);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      // One pointer captured: std::function keeps it without allocating (a call per round).
      struct Piece {
        const RoundRead* read;
        size_t at, len;
      } piece{&read, at, len};
      shm::exchange(*shm_, nullptr, 0, mine ? mine + at : nullptr, mine ? len : 0,
                    std::max(left, std::chrono::milliseconds(1)), &aborted_,
                    [p = &piece](const shm::Reader& from) { (*p->read)(p->at, p->len, from); });
    }
  } catch (...) {
    shmFailed();
    throw;
  }
  glooAlgoStats().shmRooted++;
}

// Between the root and every peer at once over the own connections: the root's block p
// (at base + p * bytes) goes to rank p (toPeers) or comes from it; a peer's `mine` the
// other way. The root copies its own block (ownCopy(at, len) for [at, at + len) of it) a
// slice at a time whenever its sockets have nothing to move, instead of all of it before
// the transfer (after a first nonblocking write of its sends): a 2-rank gather of 32 MiB
// over loopback took 0.68 of the time (bench/README.md), its root copying while its
// peer's bytes were under way rather than sleeping in poll() once it had copied.
void GlooBackend::rootTransfer(const Op& op, uint8_t* base, uint8_t* mine, size_t bytes, bool toPeers,
                               const std::function<void(size_t, size_t)>& ownCopy) {
  const bool root = cfg_.rank == op.root;
  std::vector<net::Xfer> xfers;
  if (root) {
    xfers.reserve(static_cast<size_t>(cfg_.size));
    for (int k = 1; k < cfg_.size; ++k) {
      net::Xfer x;
      x.peer = (cfg_.rank + k) % cfg_.size;  // staggered, as the other transfers
      x.data = base + static_cast<size_t>(x.peer) * bytes;
      x.bytes = bytes;
      xfers.push_back(x);
    }
  } else {
    net::Xfer x;
    x.peer = op.root;
    x.data = mine;
    x.bytes = bytes;
    xfers.push_back(x);
  }
  const bool sends = toPeers == root;
  if (root && sends) tcp_->trySend(xfers.data(), xfers.size());
  size_t copied = root ? 0 : bytes;
  const auto copySlice = [&]() -> bool {
    if (copied == bytes) return false;
    const size_t len = std::min(kOwnCopySlice, bytes - copied);
    ownCopy(copied, len);
    copied += len;
    return true;
  };
  tcp_->transfer(sends ? xfers.data() : nullptr, sends ? xfers.size() : 0, sends ? nullptr : xfers.data(),
                 sends ? 0 : xfers.size(), deadlineOf(op), {}, net::Clock::time_point::max(), copySlice);
  if (copied < bytes) ownCopy(copied, bytes - copied);
  glooAlgoStats().tcpRooted++;
}

// The root's buffer to every rank. Through the segment: the root posts a piece a round
// and the others copy it out. Over TCP: along a chain from the root, or down a binomial
// tree where the chain's pipelining has no cores to run on (tcpBroadcastTree()).
void GlooBackend::broadcast(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  if (shmSingleHost()) {
    shmRounds(op, bytes, root ? send : nullptr, [&](size_t at, size_t len, const shm::Reader& from) {
      if (!root) copyBytes(recv + at, from(op.root), len);
    });
  } else {
    // The root only sends from its buffer.
    uint8_t* buf = root ? const_cast<uint8_t*>(send) : recv;
    if (tcpBroadcastTree()) {
      broadcastTree(op, buf, bytes);
    } else {
      broadcastChain(op, buf, bytes);
    }
    glooAlgoStats().tcpRooted++;
  }
  if (root && send != recv) copyBytes(recv, send, bytes);
}

// The tree where every rank of the group is on this host and they outnumber its cores:
// there the chain's ranks cannot all forward at once, and each of its steps waits on
// both neighbours, one of which the scheduler may not be running. 3 and 4 ranks on 2
// cores, 2 MiB: 0.82 of the chain's time, level at 8 MiB (bench/README.md, "Broadcasts
// down a tree where a host's ranks outnumber its cores"). Every rank takes the same path:
// they share the host map (learnHosts()) and the host's count of online CPUs (not the
// process's affinity, which ranks may not share), and checkTuning() holds them to it.
bool GlooBackend::tcpBroadcastTree() const {
  if (forcedBroadcastTree_) return *forcedBroadcastTree_;
  return cfg_.size > 2 && oneHost_ && oversubscribed_;
}

// Along a chain from the root in rank order, pieces forwarded as the next arrives (one
// transfer at 2 ranks): the root's link carries the buffer once.
void GlooBackend::broadcastChain(const Op& op, uint8_t* buf, size_t bytes) {
  const bool root = cfg_.rank == op.root;
  const int n = cfg_.size;
  const int pos = (cfg_.rank - op.root + n) % n;  // place on the chain
  const int next = pos + 1 < n ? (cfg_.rank + 1) % n : -1;
  const int prev = pos > 0 ? (cfg_.rank - 1 + n) % n : -1;
  const size_t piece = n == 2 ? bytes : std::clamp(bytes / 8, kChainPieceMin, kChainPieceMax);
  const size_t count = (bytes + piece - 1) / piece;
  auto len = [&](size_t k) { return std::min(piece, bytes - k * piece); };
  // Step s: receive piece s, forward piece s - 1 (the root sends piece s).
  const size_t lag = root ? 0 : 1;
  const size_t steps = count + (next >= 0 ? lag : 0);
  for (size_t s = 0; s < steps; ++s) {
    net::Xfer out, in;
    size_t nOut = 0, nIn = 0;
    if (next >= 0 && s >= lag) {
      out.peer = next;
      out.data = buf + (s - lag) * piece;
      out.bytes = len(s - lag);
      nOut = 1;
    }
    if (prev >= 0 && s < count) {
      in.peer = prev;
      in.data = buf + s * piece;
      in.bytes = len(s);
      nIn = 1;
    }
    tcp_->transfer(&out, nOut, &in, nIn, deadlineOf(op));
  }
}

// Down a binomial tree over ranks counted from the root: place v receives the whole
// buffer from v without its highest set bit, then sends it to v + 2^b for every b above
// that bit, all at once (the root: to 1, 2, 4, ...), log2(n) transfers deep.
void GlooBackend::broadcastTree(const Op& op, uint8_t* buf, size_t bytes) {
  const int n = cfg_.size;
  const int v = (cfg_.rank - op.root + n) % n;
  int high = -1;  // v's highest set bit (-1 for the root)
  while (high + 1 < 31 && (v >> (high + 1)) != 0) ++high;
  auto rankOf = [&](int place) { return (place + op.root) % n; };
  if (v > 0) {
    net::Xfer in;
    in.peer = rankOf(v & ~(1 << high));
    in.data = buf;
    in.bytes = bytes;
    tcp_->transfer(nullptr, 0, &in, 1, deadlineOf(op));
  }
  std::vector<net::Xfer> outs;
  for (int b = high + 1; b < 31 && (v | (1 << b)) < n; ++b) {
    net::Xfer out;
    out.peer = rankOf(v | (1 << b));
    out.data = buf;
    out.bytes = bytes;
    outs.push_back(out);
  }
  if (!outs.empty()) tcp_->transfer(outs.data(), outs.size(), nullptr, 0, deadlineOf(op));
  glooAlgoStats().tcpBroadcastTrees++;
}

// out (the root's output) := every rank's input reduced. Within one host the other
// ranks reduce their parts of the segment and leave; across hosts with shared memory
// inside each, the two-level all-reduce with their result in scratch.
void GlooBackend::reduce(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const bool oneHost = shmSingleHost();
  void* out = root ? op.recv.data : nullptr;
  if (!root && !oneHost) {
    scratch_.resize(bytes);
    out = scratch_.data();
  }
  if (shm_) {
    shmAllReduceInto(op, op.send.data, out, oneHost ? op.root : -1);
    glooAlgoStats().shmRooted++;
  } else {
    net::ringReduce(*tcp_, op.send.data, out, op.count, op.dtype, op.redop, op.root, deadlineOf(op), ring_);
    glooAlgoStats().tcpRooted++;
  }
  if (root && op.redop == RedOp::Avg) divideInPlace(out, op.dtype, op.count, cfg_.size);
}

// Every rank's input to the root's output, in rank order.
void GlooBackend::gather(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const size_t me = static_cast<size_t>(cfg_.rank);
  // The root's input is apart from the peers' blocks of its output, or its own block.
  const auto* in = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  if (shmSingleHost()) {
    shmRounds(op, bytes, in, [&](size_t at, size_t len, const shm::Reader& from) {
      if (!root) return;
      for (int r = 0; r < cfg_.size; ++r) {
        if (r != cfg_.rank) copyBytes(recv + static_cast<size_t>(r) * bytes + at, from(r), len);
      }
    });
    if (root) copyBytes(recv + me * bytes, in, bytes);
  } else {
    // Slices of the root's own block: in place, or apart from every block (comm_wrap.cpp
    // refuses any other overlap), so copying them while peers' blocks land is safe.
    rootTransfer(op, recv, const_cast<uint8_t*>(in), bytes, false,
                 [&](size_t at, size_t len) { copyBytes(recv + me * bytes + at, in + at, len); });
  }
}

// Block r of the root's input to rank r. Through the segment the root posts its input a
// piece a round and each rank copies out what of it is its block. The root's own block
// is a copy (none in place, where its output is that block).
void GlooBackend::scatter(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const size_t me = static_cast<size_t>(cfg_.rank);
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  if (shmSingleHost()) {
    shmRounds(op, bytes * static_cast<size_t>(cfg_.size), root ? send : nullptr,
              [&](size_t at, size_t len, const shm::Reader& from) {
                if (root) return;
                // This round's piece of the root's input, [at, at + len), against this rank's block.
                const size_t lo = std::max(at, me * bytes);
                const size_t hi = std::min(at + len, (me + 1) * bytes);
                if (lo < hi) copyBytes(recv + (lo - me * bytes), from(op.root) + (lo - at), hi - lo);
              });
    if (root) copyBytes(recv, send + me * bytes, bytes);
  } else {
    rootTransfer(op, const_cast<uint8_t*>(send), recv, bytes, true,
                 [&](size_t at, size_t len) { copyBytes(recv + at, send + me * bytes + at, len); });
  }
}

}  // namespace ncclnode

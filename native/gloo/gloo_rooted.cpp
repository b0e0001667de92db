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

#include "gloo_backend.h"

namespace ncclnode {

namespace {

// A broadcast's pieces along the chain beyond 2 ranks: each rank forwards a piece while
// the next arrives, so the root's link carries the buffer once instead of once per peer.
// An eighth of the buffer, 64 KiB-1 MiB: the last rank waits for n-2 pieces more than
// the transfer itself, and every piece costs each rank one transfer call.
constexpr size_t kChainPieceMin = 64u << 10;
constexpr size_t kChainPieceMax = 1u << 20;

size_t pieces(size_t bytes, size_t piece) { return (bytes + piece - 1) / piece; }

}  // namespace

// The agreement round carried the call (gloo_agreement.cpp, meshBody): the root combines
// or hands out what the round brought. This rank's own part comes from its own memory.
void GlooBackend::finishMeshRooted(const Op& op) {
  const size_t head = sizeof(Fingerprint);
  const size_t width = elementSize(op.dtype);
  const size_t bytes = op.count * width;
  const bool root = cfg_.rank == op.root;
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  const size_t me = static_cast<size_t>(cfg_.rank);
  switch (op.kind) {
    case OpKind::Broadcast:
      if (!root) std::memcpy(recv, mesh_->from(op.root) + head, bytes);
      else if (send != recv) std::memmove(recv, send, bytes);
      break;
    case OpKind::Reduce:
      if (!root) break;
      reduceInRankOrder(*mesh_, head, cfg_.rank, send, cfg_.size, reduceFunction(op.dtype, op.redop), recv, op.count,
                        width);
      if (op.redop == RedOp::Avg) divideInPlace(recv, op.dtype, op.count, cfg_.size);
      break;
    case OpKind::Gather:
      if (!root) break;
      std::memmove(recv + me * bytes, send, bytes);
      for (int r = 0; r < cfg_.size; ++r) {
        if (r != cfg_.rank) std::memcpy(recv + static_cast<size_t>(r) * bytes, mesh_->from(r) + head, bytes);
      }
      break;
    case OpKind::Scatter:
      if (root) std::memmove(recv, send + me * bytes, bytes);
      else std::memcpy(recv, mesh_->from(op.root) + head, bytes);
      break;
    default:
      throw Error(Code::Backend, std::string("not a rooted collective: ") + opKindName(op.kind));
  }
  glooAlgoStats().meshRooted++;
}

// The segment's round carried the call (gloo_shm.cpp, shmCarries). Off the calling
// thread this rank's own part comes from its posted copy, as an all-reduce's does.
void GlooBackend::shmReadRooted(const Op& op, const shm::Reader& from, bool mineInMemory) {
  const size_t head = sizeof(Fingerprint);
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const size_t me = static_cast<size_t>(cfg_.rank);
  auto* out = static_cast<uint8_t*>(op.recv.data);
  const uint8_t* mine = mineInMemory ? static_cast<const uint8_t*>(op.send.data) : from(cfg_.rank) + head;
  switch (op.kind) {
    case OpKind::Broadcast:
      if (!root) std::memcpy(out, from(op.root) + head, bytes);
      else if (mine != out) std::memmove(out, mine, bytes);
      break;
    case OpKind::Reduce:
      if (root) shmReadReduced(op, from, mineInMemory);
      break;
    case OpKind::Gather:
      if (!root) break;
      std::memmove(out + me * bytes, mine, bytes);
      for (int r = 0; r < cfg_.size; ++r) {
        if (r != cfg_.rank) std::memcpy(out + static_cast<size_t>(r) * bytes, from(r) + head, bytes);
      }
      break;
    case OpKind::Scatter:
      if (root) std::memmove(out, mine + me * bytes, bytes);
      else std::memcpy(out, from(op.root) + head + me * bytes, bytes);
      break;
    default:
      throw Error(Code::Backend, std::string("not a rooted collective: ") + opKindName(op.kind));
  }
  glooAlgoStats().shmRooted++;
}

size_t GlooBackend::shmRoomBytes() const { return shm_->chunkBytes - shm::kRoundFlagBytes; }

// Each round is one synchronisation of the host's ranks through the segment (two rounds
// in flight, shm_collectives.h); every rank runs every round, so they stay in step.
void GlooBackend::shmRounds(const Op& op, size_t rounds, const RoundBody& body, const RoundRead& read) {
  const auto deadline = std::chrono::steady_clock::now() + op.timeout;
  try {
    for (size_t k = 0; k < rounds; ++k) {
      const auto [data, len] = body(k);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      shm::exchange(*shm_, nullptr, 0, data, len, std::max(left, std::chrono::milliseconds(1)), &aborted_,
                    [&read, k](const shm::Reader& from) { read(k, from); });
    }
  } catch (...) {
    shmFailed();
    throw;
  }
  glooAlgoStats().shmRooted++;
}

// The root's buffer to every rank. Through the segment: the root posts a piece a round
// and the others copy it out. Over TCP: along a chain from the root in rank order,
// pieces forwarded as the next arrives (one transfer at 2 ranks).
void GlooBackend::broadcast(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  if (shmSingleHost()) {
    const size_t room = shmRoomBytes();
    auto len = [&](size_t k) { return std::min(room, bytes - k * room); };
    shmRounds(
        op, pieces(bytes, room),
        [&](size_t k) -> std::pair<const void*, size_t> {
          if (!root) return {nullptr, 0};
          return {send + k * room, len(k)};
        },
        [&](size_t k, const shm::Reader& from) {
          if (!root) std::memcpy(recv + k * room, from(op.root), len(k));
        });
  } else {
    const int n = cfg_.size;
    const int pos = (cfg_.rank - op.root + n) % n;  // place on the chain
    const int next = pos + 1 < n ? (cfg_.rank + 1) % n : -1;
    const int prev = pos > 0 ? (cfg_.rank - 1 + n) % n : -1;
    const size_t piece = n == 2 ? bytes : std::clamp(bytes / 8, kChainPieceMin, kChainPieceMax);
    const size_t count = pieces(bytes, piece);
    const uint8_t* forward = root ? send : recv;
    auto len = [&](size_t k) { return std::min(piece, bytes - k * piece); };
    // Step s: receive piece s, forward piece s - 1 (the root sends piece s).
    const size_t lag = root ? 0 : 1;
    const size_t steps = count + (next >= 0 ? lag : 0);
    for (size_t s = 0; s < steps; ++s) {
      net::Xfer out, in;
      size_t nOut = 0, nIn = 0;
      if (next >= 0 && s >= lag) {
        out.peer = next;
        out.data = const_cast<uint8_t*>(forward + (s - lag) * piece);
        out.bytes = len(s - lag);
        nOut = 1;
      }
      if (prev >= 0 && s < count) {
        in.peer = prev;
        in.data = recv + s * piece;
        in.bytes = len(s);
        nIn = 1;
      }
      tcp_->transfer(&out, nOut, &in, nIn, deadlineOf(op));
    }
    glooAlgoStats().tcpRooted++;
  }
  if (root && send != recv) std::memmove(recv, send, bytes);
}

// out (the root's output; scratch elsewhere) := every rank's input reduced.
void GlooBackend::reduce(Op& op) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const bool root = cfg_.rank == op.root;
  void* out = op.recv.data;
  if (!root) {
    scratch_.resize(bytes);
    out = scratch_.data();
  }
  if (shm_) {
    shmAllReduceInto(op, op.send.data, out);
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
    const size_t room = shmRoomBytes();
    auto len = [&](size_t k) { return std::min(room, bytes - k * room); };
    shmRounds(
        op, pieces(bytes, room), [&](size_t k) -> std::pair<const void*, size_t> { return {in + k * room, len(k)}; },
        [&](size_t k, const shm::Reader& from) {
          if (!root) return;
          for (int r = 0; r < cfg_.size; ++r) {
            if (r != cfg_.rank) std::memcpy(recv + static_cast<size_t>(r) * bytes + k * room, from(r), len(k));
          }
        });
  } else if (root) {
    std::vector<net::Xfer> recvs;
    recvs.reserve(static_cast<size_t>(cfg_.size));
    for (int k = 1; k < cfg_.size; ++k) {
      net::Xfer x;
      x.peer = (cfg_.rank + k) % cfg_.size;
      x.data = recv + static_cast<size_t>(x.peer) * bytes;
      x.bytes = bytes;
      recvs.push_back(x);
    }
    tcp_->transfer(nullptr, 0, recvs.data(), recvs.size(), deadlineOf(op));
    glooAlgoStats().tcpRooted++;
  } else {
    net::Xfer x;
    x.peer = op.root;
    x.data = const_cast<uint8_t*>(in);
    x.bytes = bytes;
    tcp_->transfer(&x, 1, nullptr, 0, deadlineOf(op));
    glooAlgoStats().tcpRooted++;
  }
  if (root) std::memmove(recv + me * bytes, in, bytes);
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
    const size_t all = bytes * static_cast<size_t>(cfg_.size);
    const size_t room = shmRoomBytes();
    auto len = [&](size_t k) { return std::min(room, all - k * room); };
    shmRounds(
        op, pieces(all, room),
        [&](size_t k) -> std::pair<const void*, size_t> {
          if (!root) return {nullptr, 0};
          return {send + k * room, len(k)};
        },
        [&](size_t k, const shm::Reader& from) {
          if (root) return;
          // This round's piece of the root's input, [k * room, + len), against this rank's block.
          const size_t lo = std::max(k * room, me * bytes);
          const size_t hi = std::min(k * room + len(k), (me + 1) * bytes);
          if (lo < hi) std::memcpy(recv + (lo - me * bytes), from(op.root) + (lo - k * room), hi - lo);
        });
  } else if (root) {
    std::vector<net::Xfer> sends;
    sends.reserve(static_cast<size_t>(cfg_.size));
    for (int k = 1; k < cfg_.size; ++k) {
      net::Xfer x;
      x.peer = (cfg_.rank + k) % cfg_.size;
      x.data = const_cast<uint8_t*>(send + static_cast<size_t>(x.peer) * bytes);
      x.bytes = bytes;
      sends.push_back(x);
    }
    tcp_->transfer(sends.data(), sends.size(), nullptr, 0, deadlineOf(op));
    glooAlgoStats().tcpRooted++;
  } else {
    net::Xfer x;
    x.peer = op.root;
    x.data = recv;
    x.bytes = bytes;
    tcp_->transfer(nullptr, 0, &x, 1, deadlineOf(op));
    glooAlgoStats().tcpRooted++;
  }
  if (root) std::memmove(recv, send + me * bytes, bytes);
}

}  // namespace ncclnode

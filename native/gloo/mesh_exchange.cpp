#include "mesh_exchange.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../core/copy_bytes.h"
#include "../core/errors.h"
#include "../net/tcp_mesh.h"

namespace ncclnode {

size_t MeshExchange::capacity(int worldSize) {
  // Each rank sends one message to each peer per call. An all-gather's or a
  // reduce-scatter's messages are the bytes a ring would move, in one exchange instead
  // of n-1 dependent steps after the agreement; an all-reduce's (the whole buffer to
  // every peer) are, at 2 ranks only (gloo_tuning.cpp keeps larger groups' all-reduces
  // to 64 KiB here). Measured on this host (bench/README.md): at 2 ranks up to 4 MiB the
  // round took 0.6-1.1 of raw Gloo's best where the ring took 1.3-2.2; at 4 ranks, 1 MiB
  // per peer took all-gathers and reduce-scatters of 512 KiB-4 MiB from 1.0-1.9 to
  // 0.67-1.47, and 4 MiB per peer took those of 6-12 MiB and two-round all-reduces of
  // 8 MiB from the ring's time to 0.6-0.8 of it (3 ranks: 0.7-0.8). The slots it keeps
  // (one per rank, touched at connect: 16 MiB at 4 ranks) bound it there; larger
  // groups, unmeasured, keep 64 KiB (16 KiB beyond 8 ranks, only the agreement header
  // beyond 64).
  constexpr size_t kHeader = 64;
  if (worldSize > 64) return kHeader;
  if (worldSize <= 4) return kHeader + 4 * 1024 * 1024;
  return kHeader + (worldSize <= 8 ? 64 * 1024 : 16 * 1024);
}

MeshExchange::MeshExchange(std::shared_ptr<gloo::Context> ctx)
    : ctx_(std::move(ctx)),
      rank_(ctx_->rank),
      size_(ctx_->size),
      cap_(capacity(size_)),
      stride_(cap_ + 8) {
  scratch_.reserve(stride_ * static_cast<size_t>(size_));
  buf_ = ctx_->createUnboundBuffer(scratch_.data(), scratch_.size());
}

MeshExchange::MeshExchange(net::TcpMesh* tcp)
    : tcp_(tcp),
      rank_(tcp->rank()),
      size_(tcp->size()),
      cap_(capacity(size_)),
      stride_(cap_ + 8) {}

void MeshExchange::prepare() {
  scratch_.reserve(stride_ * static_cast<size_t>(size_));  // touched now, once
}

MeshExchange::~MeshExchange() = default;

void MeshExchange::post(const void* head, size_t headBytes, const void* body, size_t bodyBytes, size_t bodyStride,
                        size_t bodyEnd, int bodyTo) {
  const size_t bytes = headBytes + bodyBytes;
  if (bytes > cap_) throw std::length_error("mesh exchange message exceeds its capacity");
  prepare();  // every round starts here, so the slots exist before any send or receive
  const int rank = rank_;
  const int size = size_;
  uint8_t* own = slot(rank);
  if (headBytes) std::memcpy(own, head, headBytes);
  const bool copy = !tcp_ || (bodyStride == 0 && bodyTo < 0 && bodyBytes <= kCopiedBody);
  // No landing unless asked for again (landBody) for this round.
  if (land_.size() != static_cast<size_t>(size)) {
    land_.resize(static_cast<size_t>(size));
    stage_.resize(static_cast<size_t>(size));
    landed_.resize(static_cast<size_t>(size));
  }
  std::fill(land_.begin(), land_.end(), Landing{});
  std::fill(landed_.begin(), landed_.end(), 0);
  headBytes_ = headBytes;
  expect_.assign(static_cast<size_t>(size), bytes);  // until expectFrom() says otherwise
  if (!tcp_ && (bodyStride != 0 || bodyTo >= 0)) {
    throw std::logic_error("mesh exchange over Gloo sends one body to every peer");
  }
  if (copy && bodyBytes) copyBytes(own + headBytes, body, bodyBytes);
  if (size == 1) return;
  if (tcp_) {
    const uint64_t len = bytes;
    std::memcpy(own - 8, &len, 8);
    sends_.clear();
    // A personalized body cut at bodyEnd: peer p's block may be shorter than bodyBytes
    // (or empty), so its frame needs a length, and a header, of its own.
    auto bodyFor = [&](int p) -> size_t {
      if (bodyTo >= 0) return p == bodyTo ? bodyBytes : 0;
      const size_t at = static_cast<size_t>(p) * bodyStride;
      return bodyStride == 0 ? bodyBytes : std::min(bodyBytes, bodyEnd > at ? bodyEnd - at : 0);
    };
    bool uneven = false;
    for (int p = 0; p < size; ++p) uneven = uneven || (p != rank && bodyFor(p) != bodyBytes);
    if (uneven) heads_.resize(static_cast<size_t>(size) * (8 + headBytes));
    inFlight_ = true;
    phase_ = Phase::Posted;
    for (int i = 1; i < size; ++i) {
      net::Xfer x;
      x.peer = (rank + i) % size;  // staggered, so no peer is everyone's first
      const size_t peerBody = bodyFor(x.peer);
      x.data = own - 8;
      if (uneven) {
        x.data = heads_.data() + static_cast<size_t>(x.peer) * (8 + headBytes);
        const uint64_t peerLen = headBytes + peerBody;
        std::memcpy(x.data, &peerLen, 8);
        if (headBytes) std::memcpy(x.data + 8, head, headBytes);
      }
      x.bytes = 8 + headBytes + peerBody;
      if (!copy && peerBody) {
        x.split = headBytes + 8;
        x.tail = static_cast<const uint8_t*>(body) + static_cast<size_t>(x.peer) * bodyStride;
      }
      sends_.push_back(x);
    }
    // The calling thread (often JavaScript's) puts the heads and up to kPostedBody of the
    // bodies in all on the wire (a bounded stall for that thread); the rest goes from wait().
    tcp_->trySend(sends_.data(), sends_.size(), 8 + headBytes + kPostedBody / static_cast<size_t>(size - 1));
    return;
  }
  // Every rank calls this at the same point of its collective sequence, so the
  // context's slot counter agrees across ranks.
  const uint64_t slot = ctx_->nextSlot();
  // Receives first, so a peer's send finds them posted and goes out at once.
  for (int p = 0; p < size; ++p) {
    if (p != rank) buf_->recv(p, slot, static_cast<size_t>(p) * stride_ + 8, cap_);
  }
  for (int p = 0; p < size; ++p) {
    if (p != rank) buf_->send(p, slot, static_cast<size_t>(rank) * stride_ + 8, bytes);
  }
}

void MeshExchange::expectFrom(int peer, size_t bytes) {
  if (!tcp_ || peer == rank_ || static_cast<size_t>(peer) >= expect_.size()) return;
  expect_[static_cast<size_t>(peer)] = bytes;
}

void MeshExchange::landBody(int peer, uint8_t* into, size_t bytes) {
  if (!tcp_ || peer == rank_ || headBytes_ == 0 || bytes == 0 || headBytes_ + bytes > cap_) return;
  land_[static_cast<size_t>(peer)] = Landing{into, bytes};
}

// The round's receives: each peer's 8-byte length, then its bytes, read as soon as the
// length is in, while this rank's own messages are still going out. Reading only lengths
// until the sends were done left each peer's body in this rank's socket: where the
// messages outgrow what the two ends buffer (a 4 MiB round over a link whose windows have
// not grown, between hosts) every rank's send then waits on a peer that reads nothing
// (test/shm/multinode.test.ts). The Xfers live in the exchange, so a bounded wait that
// ends early (until) leaves the rest to the next call.
bool MeshExchange::progressTcp(net::Clock::time_point deadline, net::Clock::time_point until) {
  if (phase_ == Phase::Idle) return true;
  if (phase_ == Phase::Posted) {
    recvs_.clear();
    for (int i = 1; i < size_; ++i) {
      net::Xfer x;
      x.peer = (rank_ - i + size_) % size_;
      x.data = slot(x.peer) - 8;
      // Where the body may land, the read stops at the head: the body goes to its place.
      x.bytes = 8 + (land_[static_cast<size_t>(x.peer)].into != nullptr
                         ? headBytes_
                         : std::min(expect_[static_cast<size_t>(x.peer)], std::min(cap_, kReadAhead)));
      recvs_.push_back(x);
      stage_[static_cast<size_t>(x.peer)] = Stage::Length;
    }
    phase_ = Phase::Receiving;
  }
  // A receive whose length is in becomes the receive of its message, in the same
  // transfer: whole into the slot, or, where its body may land (landBody), its head
  // first and then the body where it lands if the head is this rank's own. The first read
  // asks for the length and as much of the message as this rank expects (expectFrom(): its
  // own message's length unless told otherwise, up to kReadAhead; the head alone where the
  // body may land), so a message already in the socket comes in one read instead of two.
  // What that read took beyond the message (the peer's next bytes: its next round, or a
  // transfer after this one) goes back to the connection (keepUnread()) for the next read.
  const auto bodyNext = [this](size_t i) {
    net::Xfer& x = recvs_[i];
    const auto p = static_cast<size_t>(x.peer);
    if (stage_[p] == Stage::Length) {
      if (x.done < 8) return;
      uint64_t len = 0;
      std::memcpy(&len, x.data, 8);
      if (len > cap_) {
        throw net::TransportError(Code::Backend, "rank " + std::to_string(x.peer) + " sent a " + std::to_string(len) +
                                                     "-byte mesh message where at most " + std::to_string(cap_) +
                                                     " fit (a call this build does not know)");
      }
      const size_t whole = 8 + static_cast<size_t>(len);
      if (x.done > whole) {
        tcp_->keepUnread(x.peer, x.data + whole, x.done - whole);
        x.done = whole;
      }
      const bool lands = land_[p].into != nullptr && len == headBytes_ + land_[p].bytes;
      x.bytes = lands ? 8 + headBytes_ : whole;
      stage_[p] = lands ? Stage::Head : Stage::Body;
    }
    if (stage_[p] == Stage::Head && x.done == x.bytes) {
      const bool same = std::memcmp(slot(x.peer), slot(rank_), headBytes_) == 0;
      x.data = same ? land_[p].into : slot(x.peer) + headBytes_;
      x.bytes = land_[p].bytes;
      x.done = 0;
      landed_[p] = same;
      stage_[p] = Stage::Body;
    }
  };
  if (!tcp_->transfer(sends_.data(), sends_.size(), recvs_.data(), recvs_.size(), deadline, bodyNext, until)) {
    return false;
  }
  tcp_->checkAborted();
  phase_ = Phase::Idle;
  inFlight_ = false;
  return true;
}

bool MeshExchange::waitFor(std::chrono::nanoseconds bound, std::chrono::milliseconds timeout) {
  if (!tcp_ || size_ == 1) return false;
  const auto now = net::Clock::now();
  return progressTcp(now + timeout, now + bound);
}

void MeshExchange::wait(std::chrono::milliseconds timeout) {
  const int rank = rank_;
  const int size = size_;
  if (size == 1) return;
  if (tcp_) {
    progressTcp(net::Clock::now() + timeout, net::Clock::time_point::max());
    return;
  }
  // One deadline for the whole round, not one timeout per peer. Never pass Gloo a
  // value <= 0: -1 ms means "the context's default".
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  for (int p = 0; p < size; ++p) {
    if (p != rank && !buf_->waitRecv(left())) throw std::runtime_error("mesh exchange receive was aborted");
  }
  for (int p = 0; p < size; ++p) {
    if (p != rank && !buf_->waitSend(left())) throw std::runtime_error("mesh exchange send was aborted");
  }
}

void reduceInRankOrder(const MeshExchange& mesh, size_t offset, int rank, const void* own, int worldSize,
                       MeshReduceFn fn, void* out, size_t count, size_t elementBytes) {
  auto part = [&](int r) -> const uint8_t* {
    return r == rank ? static_cast<const uint8_t*>(own) : mesh.from(r) + offset;
  };
  const size_t bytes = count * elementBytes;
  auto* dst = static_cast<uint8_t*>(out);
  const auto* mine = static_cast<const uint8_t*>(own);
  if (!(mine < dst + bytes && dst < mine + bytes)) {
    copyBytes(out, part(0), bytes);
    for (int r = 1; r < worldSize; ++r) fn(out, out, part(r), count);
    return;
  }
  // In place: out holds this rank's own contribution until its turn in the order, so
  // each chunk is reduced in a small buffer (it stays in cache) and then written back.
  constexpr size_t kChunk = 16 * 1024;
  alignas(64) uint8_t tmp[kChunk];
  const size_t step = std::max<size_t>(1, kChunk / elementBytes) * elementBytes;
  for (size_t at = 0; at < bytes; at += step) {
    const size_t len = std::min(step, bytes - at);
    std::memcpy(tmp, part(0) + at, len);
    for (int r = 1; r < worldSize; ++r) fn(tmp, tmp, part(r) + at, len / elementBytes);
    std::memcpy(dst + at, tmp, len);
  }
}

}  // namespace ncclnode

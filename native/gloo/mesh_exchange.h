// One-round full-mesh exchange: every rank sends one message to every other rank and
// receives one from each, over the backend's own TCP connections (native/net/) or
// over Gloo's unbound buffers. Used for the
// agreement header of every collective and, for small all-reduces, the data
// itself, so a small all-reduce with agreement costs one network round instead of
// Gloo's ring (2(n-1) dependent steps) plus a separate agreement all-reduce.
// Free of N-API so bench/gloo_direct.cpp can time the same code without the addon.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "../core/copy_bytes.h"
#include "../net/tcp_mesh.h"

namespace gloo {
class Context;
namespace transport { class UnboundBuffer; }
}  // namespace gloo

namespace ncclnode {

class MeshExchange {
 public:
  // Each rank may send at most capacity(size) bytes; every receive is posted at that
  // size, so a peer that sends less (another call, a mismatched count) is read
  // safely and reported by the caller instead of overrunning a buffer.
  static size_t capacity(int worldSize);

  explicit MeshExchange(std::shared_ptr<gloo::Context> ctx);
  // Over the backend's own connections: each message goes out as an 8-byte length and
  // the bytes, so a receive reads exactly what its peer sent (or fails the round when a
  // peer announces more than the capacity).
  explicit MeshExchange(net::TcpMesh* tcp);
  ~MeshExchange();
  MeshExchange(const MeshExchange&) = delete;
  MeshExchange& operator=(const MeshExchange&) = delete;

  // Sends head (headBytes) followed by body (bodyBytes) as one message to every
  // peer and waits for every peer's message. Either part may be empty.
  void run(const void* head, size_t headBytes, const void* body, size_t bodyBytes,
           std::chrono::milliseconds timeout) {
    post(head, headBytes, body, bodyBytes);
    wait(timeout);
  }
  // The two halves of run(): post() posts every receive and every send and never
  // blocks; wait() blocks until the round is complete. The head is copied. Over TCP,
  // a body of up to kCopiedBody bytes is copied too; a larger one, or one that differs
  // per peer (bodyStride > 0: peer p gets bodyBytes from body + p * bodyStride, as a
  // reduce-scatter sends each peer its own block, cut at bodyEnd bytes from body, so the
  // last blocks of a count that does not divide evenly are shorter), is sent from the
  // caller's memory, which must stay valid and unchanged until wait() returns. With
  // bodyTo >= 0 only that peer gets the body (a gather's or a reduce's root), also from
  // the caller's memory; the others get the head alone. Over Gloo's buffers every body is
  // copied and must be the same for every peer.
  void post(const void* head, size_t headBytes, const void* body, size_t bodyBytes, size_t bodyStride = 0,
            size_t bodyEnd = SIZE_MAX, int bodyTo = -1);
  void wait(std::chrono::milliseconds timeout);
  // Over TCP: wait() for at most `bound` (within the round's timeout): true when the round
  // completed, false when the bound passed first, the round's progress kept for the next
  // waitFor() or wait() (on any thread, one at a time). Throws as wait() does.
  bool waitFor(std::chrono::nanoseconds bound, std::chrono::milliseconds timeout);

  // Allocates and touches the slots (one per rank, up to capacity() each): at once over
  // Gloo's buffers; over TCP on the first round, or earlier where the caller knows the
  // round will be used (a communicator of one host on shared memory never uses it).
  void prepare();

  // Rank r's message from the last run. This rank's own slot holds its head, and its
  // body only where post() copied it: the caller reads its own contribution from its
  // own memory.
  const uint8_t* from(int r) const { return slot(r); }
  // Over TCP, for the round post() just started (before anything waits for it): peer's
  // body is read straight into `into` (`bytes` long) instead of into its slot, sparing
  // the caller the copy out of the slot, when the peer's message is this rank's head
  // followed by exactly `bytes` (the same call, as the agreement will find); any other
  // message goes to the slot as before. `into` must stay valid until the round completes
  // and must not be memory this rank's own message is sent from.
  void landBody(int peer, uint8_t* into, size_t bytes);
  bool landed(int r) const { return landed_[static_cast<size_t>(r)] != 0; }
  // Over TCP, for the round post() just started: the message peer is expected to send (head
  // and body, `bytes`), where it differs from this rank's own (a broadcast's root sends its
  // buffer, the others their heads). The first read of a peer's message asks for its length
  // and this much more (at most kReadAhead): a hint, any length is read correctly.
  void expectFrom(int peer, size_t bytes);
  static constexpr size_t kReadAhead = 64 * 1024;
  // Where rank r's body is after the round: where it landed, or its slot after the head.
  const uint8_t* bodyOf(int r, size_t headBytes) const {
    return landed(r) ? land_[static_cast<size_t>(r)].into : slot(r) + headBytes;
  }
  static constexpr size_t kCopiedBody = 64 * 1024;
  // How much of the bodies post() writes to the peers' sockets itself (the rest in wait()).
  static constexpr size_t kPostedBody = 256 * 1024;
  // Over TCP: a round was posted and has not completed on this rank (any thread may ask).
  bool inFlight() const { return inFlight_.load(); }
  size_t cap() const { return cap_; }

 private:
  // Each rank's slot: an 8-byte length (the TCP frame header), then up to cap bytes.
  uint8_t* slot(int r) const { return scratch_.data() + static_cast<size_t>(r) * stride_ + 8; }
  // Over TCP: moves the round on until it completes (true) or `until` passes (false).
  bool progressTcp(std::chrono::steady_clock::time_point deadline, std::chrono::steady_clock::time_point until);

  std::shared_ptr<gloo::Context> ctx_;
  net::TcpMesh* tcp_ = nullptr;
  int rank_;
  int size_;
  size_t cap_;
  size_t stride_;
  net::LandingBuffer scratch_;    // size x stride: one message per rank, where receives land at full speed
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  std::vector<net::Xfer> sends_;  // TCP: this round's sends still in progress
  std::vector<net::Xfer> recvs_;  // TCP: this round's receives (each a length, then its body)
  enum class Phase { Idle, Posted, Receiving };
  Phase phase_ = Phase::Idle;     // TCP: where this round stands
  std::vector<uint8_t> heads_;    // TCP: per-peer frame headers where the bodies' lengths differ
  // TCP: where each peer's body may land (landBody) and how far its receive has got: its
  // 8-byte length, then its head (when it may land), then its body.
  struct Landing {
    uint8_t* into = nullptr;
    size_t bytes = 0;
  };
  enum class Stage : uint8_t { Length, Head, Body };
  std::vector<Landing> land_;
  std::vector<Stage> stage_;
  std::vector<uint8_t> landed_;   // per rank: its body is at land_[r].into
  size_t headBytes_ = 0;          // this round's head, compared with each landing peer's
  std::vector<size_t> expect_;    // TCP: per peer, the message this round's first read asks for (expectFrom)
  std::atomic<bool> inFlight_{false};
};

using MeshReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// out = c[0] op c[1] op ... in rank order, the same bytes on every rank whatever the
// arrival order: c[r] is rank r's message at offset, except c[rank] = own (this rank's
// contribution, read from its own memory; it may be out itself, an in-place call).
void reduceInRankOrder(const MeshExchange& mesh, size_t offset, int rank, const void* own, int worldSize,
                       MeshReduceFn fn, void* out, size_t count, size_t elementBytes);

// Block r of out := `block` bytes of rank r's message (peer(r)), this rank's own block
// first, from `own`: the peers' blocks come from the round's messages (a TCP round's
// receive slots or the shared segment's), and writing them may overwrite an input that
// overlaps the output (an in-place all-gather or all-to-all). Both rounds' all-gather
// and all-to-all results are made by this one function.
// A peer's block already in place (MeshExchange::landBody) is left as it is.
template <class Peer>
void placeBlocks(uint8_t* out, const uint8_t* own, int rank, int worldSize, size_t block, const Peer& peer) {
  copyBytes(out + static_cast<size_t>(rank) * block, own, block);
  for (int r = 0; r < worldSize; ++r) {
    uint8_t* to = out + static_cast<size_t>(r) * block;
    if (r != rank && peer(r) != to) copyBytes(to, peer(r), block);
  }
}

}  // namespace ncclnode

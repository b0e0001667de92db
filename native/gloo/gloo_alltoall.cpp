// All-to-all on the backend's own TCP connections: every rank sends each peer its block
// and receives each peer's block at once, over one transfer (native/net/tcp_mesh.h),
// with the own connections' deadlines and abort handling. Inside the addon Gloo's
// alltoall took 0.3-2.3 ms a call at 64 B-64 KiB on 2-4 ranks of this project's test
// host, this path and the rounds 0.007-0.3 ms (bench/comm/checkout-ab.ts --modes
// alltoall, bench/README.md). Equal blocks small enough ride in the agreement round
// (gloo_agreement.cpp), as a reduce-scatter's blocks do, or within one host in the
// shared-memory segment's round (gloo_shm.cpp); larger ones within one host go through
// the segment in rounds of pieces.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../core/agreement.h"
#include "../core/copy_bytes.h"
#include "gloo_backend.h"

namespace ncclnode {

// Block p of the input goes to rank p, block p of the output comes from rank p (offsets
// and lengths in bytes, packed in rank order). Where the output overlaps the input (in
// place), the blocks arrive in scratch and are copied once everything is sent: a block
// received early would otherwise overwrite one still going out.
void GlooBackend::tcpAllToAll(const Op& op, const std::vector<size_t>& sendAt, const std::vector<size_t>& sendLen,
                              const std::vector<size_t>& recvAt, const std::vector<size_t>& recvLen) {
  const int n = cfg_.size;
  const int me = cfg_.rank;
  const auto* in = static_cast<const uint8_t*>(op.send.data);
  auto* out = static_cast<uint8_t*>(op.recv.data);
  const size_t inBytes = sendAt[n - 1] + sendLen[n - 1];
  const size_t outBytes = recvAt[n - 1] + recvLen[n - 1];
  const bool staged = bytesOverlap(in, inBytes, out, outBytes);
  uint8_t* landing = out;
  if (staged) {
    scratch_.resize(outBytes);
    landing = scratch_.data();
  }
  // This rank's own block: a copy (in place, into the staging with the rest).
  copyBytes(landing + recvAt[me], in + sendAt[me], recvLen[me]);
  std::vector<net::Xfer> sends, recvs;
  sends.reserve(static_cast<size_t>(n));
  recvs.reserve(static_cast<size_t>(n));
  for (int k = 1; k < n; ++k) {
    // Peers in a rotating order, so the ranks do not all write to rank 0 first.
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    net::Xfer s;
    s.peer = to;
    s.data = const_cast<uint8_t*>(in + sendAt[to]);
    s.bytes = sendLen[to];
    sends.push_back(s);
    net::Xfer r;
    r.peer = from;
    r.data = landing + recvAt[from];
    r.bytes = recvLen[from];
    recvs.push_back(r);
  }
  tcp_->transfer(sends.data(), sends.size(), recvs.data(), recvs.size(), deadlineOf(op));
  if (staged) copyBytes(out, landing, outBytes);
  glooAlgoStats().tcpAllToAlls++;
}

// Within one host through the segment, each rank's piece of every block a round
// (shm_collectives.h): the blocks cross memory once each way instead of through
// loopback sockets. The output takes the blocks in place only where its layout is the
// input's (equal blocks, the same memory); any other overlap lands in scratch first.
void GlooBackend::shmAllToAll(const Op& op, const std::vector<size_t>& sendAt, const std::vector<size_t>& sendLen,
                              const std::vector<size_t>& recvAt, const std::vector<size_t>& recvLen, size_t longest) {
  const int n = cfg_.size;
  const auto* in = static_cast<const uint8_t*>(op.send.data);
  auto* out = static_cast<uint8_t*>(op.recv.data);
  const size_t inBytes = sendAt[n - 1] + sendLen[n - 1];
  const size_t outBytes = recvAt[n - 1] + recvLen[n - 1];
  const bool sameLayout = in == out && sendAt == recvAt && sendLen == recvLen;
  const bool staged = !sameLayout && bytesOverlap(in, inBytes, out, outBytes);
  uint8_t* landing = out;
  if (staged) {
    scratch_.resize(outBytes);
    landing = scratch_.data();
  }
  try {
    shm::allToAll(*shm_, in, {sendAt.data(), sendLen.data()}, landing, {recvAt.data(), recvLen.data()}, longest,
                  op.timeout, &aborted_);
  } catch (...) {
    shmFailed();
    throw;
  }
  if (staged) copyBytes(out, landing, outBytes);
  glooAlgoStats().shmAllToAlls++;
}

// Equal blocks: count elements in all, count / size to each rank.
void GlooBackend::allToAll(Op& op) {
  const size_t n = static_cast<size_t>(cfg_.size);
  const size_t block = op.count / n * elementSize(op.dtype);
  std::vector<size_t> at(n), len(n, block);
  for (size_t p = 0; p < n; ++p) at[p] = p * block;
  if (shmSingleHost()) shmAllToAll(op, at, len, at, len, block);
  else tcpAllToAll(op, at, len, at, len);
}

// Per-peer counts. Every rank's counts go around first (with checkCollectives off
// too) and the data moves only when each rank's sendCounts[j] equals rank j's
// recvCounts[i]: every rank reaches the same verdict, and a byte stream never carries
// a block its reader did not expect.
void GlooBackend::allToAllV(Op& op) {
  const size_t n = static_cast<size_t>(cfg_.size);
  std::vector<uint64_t> mine(op.sendCounts);
  mine.insert(mine.end(), op.recvCounts.begin(), op.recvCounts.end());
  std::vector<uint64_t> all(2 * n * n);
  net::ringAllGather(*tcp_, mine.data(), all.data(), mine.size(), sizeof(uint64_t), deadlineOf(op));
  checkPeerCounts(all, cfg_.size);
  const size_t width = elementSize(op.dtype);
  std::vector<size_t> sendAt(n), sendLen(n), recvAt(n), recvLen(n);
  size_t s = 0, r = 0;
  for (size_t p = 0; p < n; ++p) {
    sendAt[p] = s;
    sendLen[p] = op.sendCounts[p] * width;
    s += sendLen[p];
    recvAt[p] = r;
    recvLen[p] = op.recvCounts[p] * width;
    r += recvLen[p];
  }
  if (shmSingleHost()) {
    // Every rank holds every count: all run as many rounds as the longest block between
    // two ranks needs (a rank's block to itself is a copy).
    uint64_t longest = 0;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        if (i != j) longest = std::max(longest, all[i * 2 * n + j]);
      }
    }
    shmAllToAll(op, sendAt, sendLen, recvAt, recvLen, static_cast<size_t>(longest) * width);
  } else {
    tcpAllToAll(op, sendAt, sendLen, recvAt, recvLen);
  }
}

}  // namespace ncclnode

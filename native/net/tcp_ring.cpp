#include "tcp_ring.h"

#include <algorithm>
#include <cstring>

#include "../core/copy_bytes.h"

namespace ncclnode::net {

void RingScratch::prepare() {
  window.reserve(kWindow);  // touched now, not on a collective's first call
}

namespace {

// What a step does with the bytes it receives: dst := incoming op local, as they land.
struct Reduction {
  ReduceFn fn;
  const uint8_t* local;
  uint8_t* dst;
  size_t width;
  bool direct;  // receive into dst itself (dst does not alias local); else through the window
};

size_t blockBegin(size_t count, int block, int n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(count) * static_cast<unsigned>(block)) /
                             static_cast<unsigned>(n));
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// One step of the ring: sendBytes from `from` to the right-hand neighbour while
// recvBytes arrive from the left, into `into` or reduced per `red`.
void step(TcpMesh& mesh, const uint8_t* from, size_t sendBytes, uint8_t* into, size_t recvBytes, const Reduction* red,
          Clock::time_point deadline, RingScratch* scratch) {
  const int n = mesh.size();
  Xfer send;
  send.peer = mod(mesh.rank() + 1, n);
  send.data = const_cast<uint8_t*>(from);
  send.bytes = sendBytes;
  Xfer recv;
  recv.peer = mod(mesh.rank() - 1, n);
  recv.bytes = recvBytes;
  if (!red) {
    recv.data = into;
  } else if (red->direct) {
    recv.data = red->dst;
  } else {
    scratch->prepare();
    recv.data = scratch->window.data();
    recv.ring = RingScratch::kWindow;
  }
  size_t reduced = 0;
  auto onRecv = [&](size_t) {
    if (!red) return;
    const size_t upto = recv.done - recv.done % red->width;
    while (reduced < upto) {
      size_t len = upto - reduced;
      const uint8_t* incoming = red->dst + reduced;
      if (!red->direct) {
        const size_t off = reduced % recv.ring;
        len = std::min(len, recv.ring - off);
        incoming = recv.data + off;
      }
      red->fn(red->dst + reduced, incoming, red->local + reduced, len / red->width);
      reduced += len;
    }
  };
  mesh.transfer(&send, 1, &recv, 1, deadline, onRecv);
}

// The all-reduce's first half: at step s this rank passes on block rank-s (its own input
// at s = 0, after that the block it reduced the step before) and reduces block rank-s-1,
// which leaves block rank+1 fully reduced in dst (n blocks of count/n elements, the
// first ones a count that does not divide evenly shorter).
void reduceScatterSteps(TcpMesh& mesh, const uint8_t* src, uint8_t* dst, size_t count, DType dtype, RedOp op,
                        Clock::time_point deadline, RingScratch& scratch) {
  const int n = mesh.size();
  const int rank = mesh.rank();
  const size_t w = elementSize(dtype);
  auto begin = [&](int b) { return blockBegin(count, b, n) * w; };
  auto bytes = [&](int b) { return begin(b + 1) - begin(b); };
  const ReduceFn fn = reduceFunction(dtype, op);
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(rank - s, n);
    const int rb = mod(rank - s - 1, n);
    const uint8_t* from = (s == 0 ? src : dst) + begin(sb);
    Reduction red{fn, src + begin(rb), dst + begin(rb), w, src != dst};
    step(mesh, from, bytes(sb), nullptr, bytes(rb), &red, deadline, &scratch);
  }
}

}  // namespace

void ringReduce(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op, int root,
                Clock::time_point deadline, RingScratch& scratch) {
  const int n = mesh.size();
  const int rank = mesh.rank();
  const size_t w = elementSize(dtype);
  auto* dst = static_cast<uint8_t*>(out);
  if (n == 1) {
    if (in != out) copyBytes(out, in, count * w);
    return;
  }
  reduceScatterSteps(mesh, static_cast<const uint8_t*>(in), dst, count, dtype, op, deadline, scratch);
  // Block b is finished on rank b-1: each rank sends its block to the root, which has its own.
  auto begin = [&](int b) { return blockBegin(count, b, n) * w; };
  auto bytes = [&](int b) { return begin(b + 1) - begin(b); };
  if (rank != root) {
    Xfer x;
    x.peer = root;
    x.data = dst + begin(mod(rank + 1, n));
    x.bytes = bytes(mod(rank + 1, n));
    mesh.transfer(&x, 1, nullptr, 0, deadline);
    return;
  }
  std::vector<Xfer> recvs;
  recvs.reserve(static_cast<size_t>(n - 1));
  for (int r = 0; r < n; ++r) {
    if (r == rank) continue;
    Xfer x;
    x.peer = r;
    x.data = dst + begin(mod(r + 1, n));
    x.bytes = bytes(mod(r + 1, n));
    recvs.push_back(x);
  }
  mesh.transfer(nullptr, 0, recvs.data(), recvs.size(), deadline);
}

void ringAllReduce(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op,
                   Clock::time_point deadline, RingScratch& scratch) {
  const int n = mesh.size();
  const int rank = mesh.rank();
  const size_t w = elementSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (n == 1) {
    if (in != out) copyBytes(out, in, count * w);
    return;
  }
  auto begin = [&](int b) { return blockBegin(count, b, n) * w; };
  auto bytes = [&](int b) { return begin(b + 1) - begin(b); };
  reduceScatterSteps(mesh, src, dst, count, dtype, op, deadline, scratch);
  // All-gather: pass the finished blocks around, block rank+1 first.
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(rank + 1 - s, n);
    const int rb = mod(rank - s, n);
    step(mesh, dst + begin(sb), bytes(sb), dst + begin(rb), bytes(rb), nullptr, deadline, nullptr);
  }
}

void ringAllGather(TcpMesh& mesh, const void* in, void* out, size_t count, size_t width,
                   Clock::time_point deadline) {
  const int n = mesh.size();
  const int rank = mesh.rank();
  const size_t block = count * width;
  auto* dst = static_cast<uint8_t*>(out);
  if (in != dst + static_cast<size_t>(rank) * block) copyBytes(dst + static_cast<size_t>(rank) * block, in, block);
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(rank - s, n);
    const int rb = mod(rank - s - 1, n);
    step(mesh, dst + static_cast<size_t>(sb) * block, block, dst + static_cast<size_t>(rb) * block, block, nullptr,
         deadline, nullptr);
  }
}

void ringReduceScatter(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op,
                       Clock::time_point deadline, RingScratch& scratch) {
  const int n = mesh.size();
  const int rank = mesh.rank();
  const size_t w = elementSize(dtype);
  const size_t block = count * w;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (n == 1) {
    if (in != out) copyBytes(out, in, block);
    return;
  }
  const ReduceFn fn = reduceFunction(dtype, op);
  // The output may be this rank's own input block (in place): then the last step,
  // which reads that block as its local part, receives through the window.
  const bool outInInput = dst + block > src && dst < src + static_cast<size_t>(n) * block;
  if (n > 2) {
    for (auto& a : scratch.acc) a.reserve(block);
  }
  // Step s passes on block rank-s-1 (the input at s = 0, then the partial sum of the
  // step before) and reduces block rank-s-2 with the incoming partial sum; the last
  // step's block is this rank's own, reduced into out.
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(rank - s - 1, n);
    const int rb = mod(rank - s - 2, n);
    const bool last = s == n - 2;
    const uint8_t* from = s == 0 ? src + static_cast<size_t>(sb) * block : scratch.acc[(s - 1) % 2].data();
    uint8_t* into = last ? dst : scratch.acc[s % 2].data();
    Reduction red{fn, src + static_cast<size_t>(rb) * block, into, w, !(last && outInInput)};
    step(mesh, from, block, nullptr, block, &red, deadline, &scratch);
  }
}

}  // namespace ncclnode::net

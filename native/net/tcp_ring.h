// Ring collectives over the backend's own TCP connections (tcp_mesh.h): all-reduce as
// a reduce-scatter followed by an all-gather around the ring (2(n-1) steps, each
// moving 1/n of the buffer to the right-hand neighbour while receiving from the
// left), all-gather and reduce-scatter as one half each. Each block is reduced once,
// by one rank, and then copied, so every rank ends with the same bits. Received data
// is reduced as it lands, a socket read at a time, so the reduction overlaps the
// transfer; an out-of-place call receives straight into its output, an in-place one
// through a fixed window (RingScratch), so no call allocates or touches fresh memory
// beyond what a previous call of its size already did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/dtype.h"
#include "tcp_mesh.h"

namespace ncclnode::net {

struct RingScratch {
  // The receive window for in-place reductions; allocated and touched once.
  // Both at a page offset receives land in at full speed (LandingBuffer).
  static constexpr size_t kWindow = 4u << 20;
  LandingBuffer window;
  LandingBuffer acc[2];  // reduce-scatter's partial sums, ping-pong
  void prepare();
};

// out := in reduced over every rank (Sum for Avg: the caller divides). in may equal out.
void ringAllReduce(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op,
                   Clock::time_point deadline, RingScratch& scratch);
// The root's out := in reduced over every rank (Sum for Avg: the caller divides): the
// all-reduce's reduce-scatter, then each rank's finished block to the root alone, so a
// rank sends (n-1)/n + 1/n of the buffer where an all-reduce sends 2(n-1)/n. Every
// rank's out is written (the non-roots' holds partial sums: the caller gives them
// scratch). in may equal out.
void ringReduce(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op, int root,
                Clock::time_point deadline, RingScratch& scratch);
// out (size x count) := every rank's in, in rank order. in may be out's own block.
void ringAllGather(TcpMesh& mesh, const void* in, void* out, size_t count, size_t width,
                   Clock::time_point deadline);
// out (count) := block `rank` of in (size x count) reduced over every rank. out may be
// in's own block.
void ringReduceScatter(TcpMesh& mesh, const void* in, void* out, size_t count, DType dtype, RedOp op,
                       Clock::time_point deadline, RingScratch& scratch);

}  // namespace ncclnode::net

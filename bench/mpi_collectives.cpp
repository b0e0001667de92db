// Open MPI's collectives timed from C++, the baseline the shared-memory path is held
// to (Open MPI's vader BTL within a host; its TCP BTL over loopback beside it).
// Per size: MPI_Allreduce (in place), MPI_Allgather and MPI_Reduce_scatter_block,
// float32 sum, each call completing before the next, the median per-call time on
// rank 0 after 3 warm-up calls and a barrier.
//
//   mpirun -np <n> [--mca btl self,vader | --mca btl self,tcp]
//     mpi_collectives [iters=200] [min=8] [max=64M]
//
// prints one JSON object per (collective, size) on rank 0, as build/gloo_algos does
// ("algo" is "mpi"). Sizes double from min to max: the per-rank input of all-reduce and
// reduce-scatter, the gathered output of all-gather; a size below one float32 per rank
// moves one float32 per rank (bench/comm/sweep.ts counts the same way).
// Built by cmake/bench.cmake only where an MPI implementation is installed.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "direct_common.h"

namespace {

void report(int rank, const char* coll, size_t bytes, double us, int n) {
  if (rank == 0) std::printf("{\"coll\":\"%s\",\"algo\":\"mpi\",\"size\":%zu,\"us\":%.3f,\"iters\":%d}\n", coll, bytes, us, n);
  std::fflush(stdout);
}

// Warm-up, a barrier so every rank starts the timed calls together, then the median.
template <class F>
double timed(int n, F&& call) {
  for (int i = 0; i < 3; ++i) call();
  MPI_Barrier(MPI_COMM_WORLD);
  return bench::medianUs(n, call);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  bench::DirectArgs a;
  MPI_Comm_rank(MPI_COMM_WORLD, &a.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &a.size);
  if (argc > 1) a.iters = std::atoi(argv[1]);
  if (argc > 2) a.minBytes = bench::parseSize(argv[2]);
  if (argc > 3) a.maxBytes = bench::parseSize(argv[3]);

  const size_t P = static_cast<size_t>(a.size);
  std::vector<float> in(a.maxBytes / 4 + P, 1.0f), out(a.maxBytes / 4 + P, 0.0f);
  for (size_t bytes = a.minBytes; bytes <= a.maxBytes; bytes *= 2) {
    const int n = a.itersFor(bytes);
    const int count = static_cast<int>(std::max<size_t>(1, bytes / 4));
    report(a.rank, "allreduce", bytes, timed(n, [&] {
      MPI_Allreduce(MPI_IN_PLACE, in.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }), n);
    const int block = static_cast<int>(std::max<size_t>(1, bytes / 4 / P));
    report(a.rank, "allgather", bytes, timed(n, [&] {
      MPI_Allgather(in.data(), block, MPI_FLOAT, out.data(), block, MPI_FLOAT, MPI_COMM_WORLD);
    }), n);
    report(a.rank, "reducescatter", bytes, timed(n, [&] {
      MPI_Reduce_scatter_block(in.data(), out.data(), block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }), n);
  }
  MPI_Finalize();
  return 0;
}

// The backend's own TCP ring (native/net/tcp_ring.h) against every Gloo algorithm for
// the same collective and size, in the same processes, in alternating blocks: the
// comparison bench/gloo_algos.cpp cannot make. gloo_algos times each algorithm once
// per size, one after another, and a sweep then takes the fastest of six separately
// timed medians as the baseline: on a shared 2-core host, where a minute's phase moves
// large transfers by a third, that compares the addon with the luckiest of six draws.
// Here every block runs each variant `calls` times back to back, the variants in a
// rotating order (so none always follows the same one), `blocks` times; the driver
// (bench/comm/ring-ab.ts) compares the variants block by block.
//
//   ring_ab <rank> <size> <store-dir> <bytes> [blocks=7] [calls=3]
//
// float32 sum. `bytes`: the all-reduce buffer, the all-gather's gathered output, the
// reduce-scatter's per-rank input (as gloo_algos counts them). Rank 0 prints one JSON
// line per (collective, algorithm) with the mean µs per call of each block. Gloo's
// new-style ring all-reduce runs only on 2 ranks (on 4 ranks of a 2-core host it takes
// seconds a call at these sizes), the all-to-all reduce-scatter beyond 2 ranks only up
// to 32 MiB (on 4 ranks gloo::alltoall of 128 MiB took seconds a call, waiting on sends).
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "direct_common.h"
#include "gloo_bench.h"
#include "../native/net/tcp_ring.h"

namespace {

constexpr auto kTimeout = std::chrono::minutes(2);
using Ctx = std::shared_ptr<gloo::Context>;
using ncclnode::DType;
using ncclnode::RedOp;

struct Variant {
  const char* coll;
  const char* algo;
  std::function<void()> call;
  std::vector<double> us;  // per block
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <rank> <size> <store-dir> <bytes> [blocks=7] [calls=3]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), P = std::atoi(argv[2]);
  const size_t bytes = bench::parseSize(argv[4]);
  const int blocks = argc > 5 ? std::atoi(argv[5]) : 7;
  const int calls = argc > 6 ? std::atoi(argv[6]) : 3;

  gloo::rendezvous::FileStore fileStore(argv[3]);
  gloo::rendezvous::PrefixStore store("ring_ab", fileStore);
  // The legacy classes wait the context's timeout (30 s by default).
  const Ctx ctx = bench::connectGloo(rank, P, store, kTimeout);
  ncclnode::net::TcpMesh mesh(rank, P, 0x5eed);
  bench::connectOwnMesh(mesh, store, kTimeout);
  ncclnode::net::RingScratch scratch;
  scratch.prepare();
  auto deadline = [] { return ncclnode::net::Clock::now() + kTimeout; };

  // Both arrays touched here: a first write to fresh pages is a hundred times slower
  // than to touched memory on some virtual machines.
  const size_t count = std::max<size_t>(static_cast<size_t>(P), bytes / sizeof(float));
  const size_t per = count / static_cast<size_t>(P);
  std::vector<float> buf(count, 1.0f), out(count, 0.0f);
  std::vector<float*> ptrs{buf.data()};
  std::vector<const float*> inputs{buf.data()};
  const int n = static_cast<int>(count);
  gloo::AllreduceRing<float> ring(ctx, ptrs, n);
  gloo::AllreduceRingChunked<float> ringChunked(ctx, ptrs, n);
  gloo::AllreduceHalvingDoubling<float> halvingDoubling(ctx, ptrs, n);
  gloo::AllreduceBcube<float> bcube(ctx, ptrs, n);
  gloo::AllgatherRing<float> allgatherRing(ctx, inputs, out.data(), static_cast<int>(per));
  std::vector<int> recvCounts(P, static_cast<int>(per));
  gloo::ReduceScatterHalvingDoubling<float> rsHalvingDoubling(ctx, ptrs, static_cast<int>(per) * P, recvCounts);

  std::vector<Variant> v;
  v.push_back({"allreduce", "own-tcp-ring", [&] {
    ncclnode::net::ringAllReduce(mesh, buf.data(), buf.data(), count, DType::Float32, RedOp::Sum, deadline(), scratch);
  }, {}});
  if (P == 2) {
    v.push_back({"allreduce", "new-ring", [&] {
      bench::newAllreduce(ctx, buf.data(), count, gloo::AllreduceOptions::Algorithm::RING, kTimeout);
    }, {}});
  }
  v.push_back({"allreduce", "new-bcube", [&] {
    bench::newAllreduce(ctx, buf.data(), count, gloo::AllreduceOptions::Algorithm::BCUBE, kTimeout);
  }, {}});
  v.push_back({"allreduce", "legacy-ring", [&] { ring.run(); }, {}});
  v.push_back({"allreduce", "legacy-ring-chunked", [&] { ringChunked.run(); }, {}});
  v.push_back({"allreduce", "legacy-halving-doubling", [&] { halvingDoubling.run(); }, {}});
  v.push_back({"allreduce", "legacy-bcube", [&] { bcube.run(); }, {}});
  v.push_back({"allgather", "own-tcp-ring", [&] {
    ncclnode::net::ringAllGather(mesh, buf.data(), out.data(), per, sizeof(float), deadline());
  }, {}});
  v.push_back({"allgather", "new", [&] {
    gloo::AllgatherOptions o(ctx);
    o.setInput(buf.data(), per);
    o.setOutput(out.data(), per * static_cast<size_t>(P));
    o.setTimeout(kTimeout);
    gloo::allgather(o);
  }, {}});
  v.push_back({"allgather", "legacy-ring", [&] { allgatherRing.run(); }, {}});
  v.push_back({"reducescatter", "own-tcp-ring", [&] {
    ncclnode::net::ringReduceScatter(mesh, buf.data(), out.data(), per, DType::Float32, RedOp::Sum, deadline(), scratch);
  }, {}});
  if (P == 2 || bytes <= (32u << 20)) {
    v.push_back({"reducescatter", "alltoall-reduce", [&] {
      bench::allToAllReduce(ctx, buf.data(), out.data(), per, kTimeout);
    }, {}});
  }
  v.push_back({"reducescatter", "legacy-halving-doubling", [&] { rsHalvingDoubling.run(); }, {}});

  for (auto& x : v) x.call();  // warm-up: connections, Gloo's buffers, the caches
  for (int b = 0; b < blocks; ++b) {
    for (size_t k = 0; k < v.size(); ++k) {
      Variant& x = v[(k + static_cast<size_t>(b)) % v.size()];
      gloo::BarrierOptions barrier(ctx);
      gloo::barrier(barrier);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) x.call();
      x.us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
  }
  if (rank == 0) {
    for (const auto& x : v) {
      std::printf("{\"coll\":\"%s\",\"algo\":\"%s\",\"size\":%zu,\"calls\":%d,\"us\":[", x.coll, x.algo, bytes, calls);
      for (size_t b = 0; b < x.us.size(); ++b) std::printf("%s%.1f", b ? "," : "", x.us[b]);
      std::printf("]}\n");
    }
    std::fflush(stdout);
  }
  // A legacy class returns with its last send possibly still queued (gloo_algos.cpp).
  gloo::BarrierOptions done(ctx);
  gloo::barrier(done);
  return 0;
}

// Which of Gloo's algorithms is fastest per collective and size on this host: per
// size it times, on Gloo called directly from C++ (float32, sum),
//   all-reduce      new-style gloo::allreduce (ring, bcube) and the legacy classes
//                   AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling,
//                   AllreduceBcube (constructed once per buffer, as the addon's
//                   cache does);
//   all-gather      new-style gloo::allgather and legacy AllgatherRing;
//   reduce-scatter  the addon's all-to-all plus local reduction and legacy
//                   ReduceScatterHalvingDoubling;
//   all-to-all      gloo::alltoall (equal blocks; Gloo has no other);
//   broadcast, reduce, gather, scatter
//                   gloo::broadcast, gloo::reduce, gloo::gather, gloo::scatter (root 0;
//                   Gloo has one algorithm each);
//   own-tcp-ring    the addon's ring over its own TCP connections (native/net/),
//                   for each of the three: not Gloo, reported beside it so the
//                   algorithm and the addon's path around it can be told apart.
//
//   gloo_algos <rank> <size> <store-dir> [iters=200] [min=8] [max=64M] [step=2]
// prints one JSON object per (collective, algorithm, size), each the median
// per-call time on rank 0 in microseconds (the rooted ones also spanUs: the slowest
// rank's mean per call of n back to back from a common start). Sizes are the per-rank input for
// all-reduce, reduce-scatter and all-to-all, the buffer of a broadcast and a reduce, the
// gathered output for all-gather and gather, the root's input for scatter; sizes grow by
// `step` and the last one is `max`. A size smaller than one float32 per rank moves
// one float32 per rank (bench/comm/sweep.ts counts the same way). Iterations:
// `iters` below 1 MiB, iters/20 (at least 5) to 16 MiB, 3 beyond, after 3
// warm-up calls (1 from 16 MiB): a 256 MiB sweep at 4 ranks fits in minutes.
// GLOO_ALGOS_LARGE_ITERS=<n>: n calls at every size from 1 MiB instead.
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
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

constexpr auto kTimeout = std::chrono::minutes(1);
using Ctx = std::shared_ptr<gloo::Context>;

constexpr size_t kLarge = 16u << 20;

// GLOO_ALGOS_LARGE_ITERS (bench/comm/sweep.ts --large-iters): a median of 3 or 5 calls
// moved a 2 MiB broadcast between 0.76x and 1.92x raw Gloo's from one sweep to the next.
int largeIters() {
  static const int n = [] {
    const char* v = std::getenv("GLOO_ALGOS_LARGE_ITERS");
    return v ? std::max(1, std::atoi(v)) : 0;
  }();
  return n;
}

int itersFor(const bench::DirectArgs& a, size_t bytes) {
  if (largeIters() > 0 && bytes >= (1u << 20)) return largeIters();
  return bytes >= kLarge ? 3 : a.itersFor(bytes);
}

double timeIt(const Ctx& ctx, int n, const std::function<void()>& call, size_t bytes) {
  for (int i = 0, w = bytes >= kLarge ? 1 : 3; i < w; ++i) call();  // warm-up
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
  return bench::medianUs(n, call);
}

void report(int rank, const char* coll, const char* algo, size_t bytes, double us, int n, double spanUs = -1) {
  if (rank != 0) return;
  if (spanUs < 0) {
    std::printf("{\"coll\":\"%s\",\"algo\":\"%s\",\"size\":%zu,\"us\":%.3f,\"iters\":%d}\n", coll, algo, bytes, us, n);
  } else {
    std::printf("{\"coll\":\"%s\",\"algo\":\"%s\",\"size\":%zu,\"us\":%.3f,\"spanUs\":%.3f,\"iters\":%d}\n", coll, algo,
                bytes, us, spanUs, n);
  }
  std::fflush(stdout);
}

// A rooted collective's time as every rank sees it: n calls back to back from a common
// start (a barrier), each rank's time to its last call's return, the slowest rank's
// divided by n. rank 0's per-call median alone is its root's, which returns once its
// sends are written, with nothing waiting for the others: back to back it runs ahead of
// the ranks that receive.
double spanUs(const Ctx& ctx, int n, const std::function<void()>& call) {
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) call();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  gloo::AllreduceOptions o(ctx);
  o.setOutput(&us, 1);
  o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  o.setTimeout(kTimeout);
  gloo::allreduce(o);
  return us;
}

// timeIt, then spanUs, reported together.
void timeRooted(const Ctx& ctx, int rank, const char* coll, size_t bytes, int n, const std::function<void()>& call) {
  const double us = timeIt(ctx, n, call, bytes);
  report(rank, coll, "gloo", bytes, us, n, spanUs(ctx, n, call));
}

}  // namespace

int main(int argc, char** argv) {
  bench::DirectArgs args;
  if (!bench::parseDirectArgs(argc, argv, &args)) return 2;
  const size_t step = argc > 7 ? std::max(2, std::atoi(argv[7])) : 2;
  const int rank = args.rank, P = args.size;
  // GLOO_ALGOS_NEW_RING_MAX=<bytes>: time the new-style ring all-reduce only up to this
  // size (on 4 ranks of a 2-core host it takes seconds a call from 512 KiB on).
  const char* ringMax = std::getenv("GLOO_ALGOS_NEW_RING_MAX");
  const size_t ringLimit = ringMax ? std::strtoull(ringMax, nullptr, 10) : SIZE_MAX;
  // GLOO_ALGOS_ALLTOALL_MAX=<bytes>: time gloo::alltoall, alone and under the reduce-scatter's
  // alltoall-reduce, only up to this size (on 4 ranks of a 2-core host it took 325 ms a
  // call at 2 MiB, 11 s at 64 MiB, and reached Gloo's 30 s timeout at 128 MiB).
  const char* a2aMax = std::getenv("GLOO_ALGOS_ALLTOALL_MAX");
  const size_t a2aLimit = a2aMax ? std::strtoull(a2aMax, nullptr, 10) : SIZE_MAX;
  // GLOO_ALGOS_ROOTED_MAX=<bytes>: time the rooted collectives only up to this size (on 4
  // ranks of a 2-core host gloo::reduce moved about 2 MB/s at 128 MiB, the CPUs idle).
  const char* rootedMax = std::getenv("GLOO_ALGOS_ROOTED_MAX");
  const size_t rootedLimit = rootedMax ? std::strtoull(rootedMax, nullptr, 10) : SIZE_MAX;
  // GLOO_ALGOS_COLLS=<name,...>: time only these collectives (unset: all of them).
  const char* colls = std::getenv("GLOO_ALGOS_COLLS");
  const std::string only = colls ? std::string(",") + colls + "," : "";
  auto timed = [&](const char* coll) { return only.empty() || only.find(std::string(",") + coll + ",") != std::string::npos; };

  gloo::rendezvous::FileStore fileStore(args.dir);
  gloo::rendezvous::PrefixStore store("gloo_algos", fileStore);
  const Ctx ctx = bench::connectGloo(rank, P, store);
  ncclnode::net::TcpMesh mesh(rank, P, 0x5eed);
  bench::connectOwnMesh(mesh, store, kTimeout);
  ncclnode::net::RingScratch scratch;
  scratch.prepare();
  auto deadline = [] { return ncclnode::net::Clock::now() + kTimeout; };
  using ncclnode::DType;
  using ncclnode::RedOp;

  std::vector<float> buf(args.maxBytes / sizeof(float) + P, 1.0f), out(buf.size() + P, 0.0f);
  for (size_t bytes = args.minBytes; bytes <= args.maxBytes;
       bytes = bytes < args.maxBytes && bytes * step > args.maxBytes ? args.maxBytes : bytes * step) {
    const int count = std::max(1, static_cast<int>(bytes / sizeof(float)));
    const int n = itersFor(args, bytes);
    auto timeIt = [&](const Ctx& c, int iters, const std::function<void()>& call) {
      return ::timeIt(c, iters, call, bytes);
    };
    std::vector<float*> ptrs{buf.data()};
    double us;
    if (timed("allreduce")) {
      if (bytes <= ringLimit) {
        us = timeIt(ctx, n, [&] { bench::newAllreduce(ctx, buf.data(), count, gloo::AllreduceOptions::Algorithm::RING, kTimeout); });
        report(rank, "allreduce", "new-ring", bytes, us, n);
      }
      us = timeIt(ctx, n, [&] { bench::newAllreduce(ctx, buf.data(), count, gloo::AllreduceOptions::Algorithm::BCUBE, kTimeout); });
      report(rank, "allreduce", "new-bcube", bytes, us, n);
      // Each legacy class constructed once per buffer (as the addon's cache does), then run n times.
      auto legacy = [&](const char* algo, auto&& a) {
        report(rank, "allreduce", algo, bytes, timeIt(ctx, n, [&] { a.run(); }), n);
      };
      legacy("legacy-ring", gloo::AllreduceRing<float>(ctx, ptrs, count));
      legacy("legacy-ring-chunked", gloo::AllreduceRingChunked<float>(ctx, ptrs, count));
      legacy("legacy-halving-doubling", gloo::AllreduceHalvingDoubling<float>(ctx, ptrs, count));
      legacy("legacy-bcube", gloo::AllreduceBcube<float>(ctx, ptrs, count));
      us = timeIt(ctx, n, [&] {
        ncclnode::net::ringAllReduce(mesh, buf.data(), buf.data(), count, DType::Float32, RedOp::Sum, deadline(), scratch);
      });
      report(rank, "allreduce", "own-tcp-ring", bytes, us, n);
    }

    // All-gather: `bytes` is the gathered output.
    const int per = std::max(1, count / P);
    if (timed("allgather")) {
      us = timeIt(ctx, n, [&] {
        gloo::AllgatherOptions o(ctx);
        o.setInput(buf.data(), per);
        o.setOutput(out.data(), static_cast<size_t>(per) * P);
        o.setTimeout(kTimeout);
        gloo::allgather(o);
      });
      report(rank, "allgather", "new", bytes, us, n);
      {
        std::vector<const float*> in{buf.data()};
        gloo::AllgatherRing<float> a(ctx, in, out.data(), per);
        us = timeIt(ctx, n, [&] { a.run(); });
        report(rank, "allgather", "legacy-ring", bytes, us, n);
      }
      us = timeIt(ctx, n, [&] { ncclnode::net::ringAllGather(mesh, buf.data(), out.data(), per, sizeof(float), deadline()); });
      report(rank, "allgather", "own-tcp-ring", bytes, us, n);
    }

    // Reduce-scatter: `bytes` is the per-rank input, each rank keeps bytes/P.
    if (timed("reducescatter")) {
      if (bytes <= a2aLimit) {
        us = timeIt(ctx, n, [&] { bench::allToAllReduce(ctx, buf.data(), out.data(), per, kTimeout); });
        report(rank, "reducescatter", "alltoall-reduce", bytes, us, n);
      }
      {
        std::vector<int> recv(P, per);
        gloo::ReduceScatterHalvingDoubling<float> a(ctx, ptrs, per * P, recv);
        us = timeIt(ctx, n, [&] { a.run(); });
        report(rank, "reducescatter", "legacy-halving-doubling", bytes, us, n);
      }
      us = timeIt(ctx, n, [&] {
        ncclnode::net::ringReduceScatter(mesh, buf.data(), out.data(), per, DType::Float32, RedOp::Sum, deadline(), scratch);
      });
      report(rank, "reducescatter", "own-tcp-ring", bytes, us, n);
    }

    // All-to-all: `bytes` is each rank's input and output, one block per rank.
    if (timed("alltoall") && bytes <= a2aLimit) {
      us = timeIt(ctx, n, [&] { bench::glooAllToAll(ctx, buf.data(), out.data(), per, kTimeout); });
      report(rank, "alltoall", "gloo", bytes, us, n);
    }

    // The rooted collectives, root 0: a broadcast's and a reduce's buffer is `bytes`, a
    // gather's output and a scatter's input (per / P a rank) too.
    if (bytes > rootedLimit) continue;
    if (timed("broadcast")) timeRooted(ctx, rank, "broadcast", bytes, n, [&] {
      gloo::BroadcastOptions o(ctx);
      if (rank == 0) o.setInput(buf.data(), count);
      o.setOutput(out.data(), count);
      o.setRoot(0);
      o.setTimeout(kTimeout);
      gloo::broadcast(o);
    });
    if (timed("reduce")) timeRooted(ctx, rank, "reduce", bytes, n, [&] {
      gloo::ReduceOptions o(ctx);
      o.setInput(buf.data(), count);
      o.setOutput(out.data(), count);
      o.setRoot(0);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTimeout(kTimeout);
      gloo::reduce(o);
    });
    if (timed("gather")) timeRooted(ctx, rank, "gather", bytes, n, [&] {
      gloo::GatherOptions o(ctx);
      o.setInput(buf.data(), per);
      if (rank == 0) o.setOutput(out.data(), static_cast<size_t>(per) * P);
      o.setRoot(0);
      o.setTimeout(kTimeout);
      gloo::gather(o);
    });
    if (timed("scatter")) timeRooted(ctx, rank, "scatter", bytes, n, [&] {
      gloo::ScatterOptions o(ctx);
      std::vector<float*> parts;
      if (rank == 0) {
        for (int r = 0; r < P; ++r) parts.push_back(buf.data() + static_cast<size_t>(r) * per);
        o.setInputs(parts, per);
      }
      o.setOutput(out.data(), per);
      o.setRoot(0);
      o.setTimeout(kTimeout);
      gloo::scatter(o);
    });
  }
  // A legacy class returns with its last send possibly still queued: exiting at once
  // could drop it under a peer still waiting (the addon's destroy does the same).
  gloo::BarrierOptions done(ctx);
  gloo::barrier(done);
  return 0;
}

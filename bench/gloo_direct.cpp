// The baseline for the addon's per-call overhead, with no addon in between: per
// size it times, on Gloo called directly from C++,
//   ring   gloo::allreduce, Gloo's own all-reduce;
//   algo   the addon's algorithm for that size with checkCollectives off (the mesh
//          exchange of native/gloo/mesh_exchange.cpp for small sizes, else gloo::allreduce);
//   check  the same with checkCollectives on (a 32-byte fingerprint in the mesh
//          round, compared on arrival).
// The addon's time minus `algo` (or `check`) is the cost of the path from
// TypeScript to the native worker and back; everything else is the same code.
//
//   gloo_direct <rank> <size> <store-dir> [iters=200] [min=8] [max=64M]
// prints one JSON object per size: {"size":B,"ringUs":..,"algoUs":..,"checkUs":..,"iters":n},
// each the median per-call time on rank 0.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../native/gloo/mesh_exchange.h"
#include "direct_common.h"

namespace {

using Clock = std::chrono::steady_clock;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);
const ReduceFn kSum = &gloo::sum<float>;
constexpr size_t kFingerprint = 32;
constexpr auto kTimeout = std::chrono::minutes(1);

void ring(const std::shared_ptr<gloo::Context>& ctx, float* buf, size_t count) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(buf, count);
  o.setReduceFunction(kSum);
  o.setTimeout(kTimeout);
  gloo::allreduce(o);
}

// What GlooBackend::agree + allReduce do for a float sum, minus the addon.
void addonAlgorithm(const std::shared_ptr<gloo::Context>& ctx, ncclnode::MeshExchange& mesh, float* buf,
                    size_t count, bool check) {
  const size_t bytes = count * sizeof(float);
  const bool withData = ctx->size > 1 && bytes + kFingerprint <= mesh.cap();
  uint8_t fp[kFingerprint] = {7};
  const size_t head = check ? kFingerprint : 0;
  if (check || withData) mesh.run(fp, head, buf, withData ? bytes : 0, kTimeout);
  if (check) {
    for (int r = 0; r < ctx->size; ++r) {
      if (std::memcmp(mesh.from(r), fp, kFingerprint) != 0) throw std::runtime_error("fingerprints differ");
    }
  }
  if (withData) {
    ncclnode::reduceInRankOrder(mesh, head, ctx->rank, buf, ctx->size, kSum, buf, count, sizeof(float));
  } else {
    ring(ctx, buf, count);
  }
}

double timeIt(const std::shared_ptr<gloo::Context>& ctx, int n, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();  // warm-up
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
  return bench::medianUs(n, call);
}

}  // namespace

int main(int argc, char** argv) {
  bench::DirectArgs args;
  if (!bench::parseDirectArgs(argc, argv, &args)) return 2;
  const int rank = args.rank;

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fileStore(args.dir);
  gloo::rendezvous::PrefixStore store("gloo_direct", fileStore);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, args.size);
  ctx->connectFullMesh(store, device);
  ncclnode::MeshExchange mesh(ctx);

  std::vector<float> buf(args.maxBytes / sizeof(float) + 1, 1.0f);
  for (size_t bytes = args.minBytes; bytes <= args.maxBytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    const int n = args.itersFor(bytes);
    const double ringUs = timeIt(ctx, n, [&] { ring(ctx, buf.data(), count); });
    const double algoUs = timeIt(ctx, n, [&] { addonAlgorithm(ctx, mesh, buf.data(), count, false); });
    const double checkUs = timeIt(ctx, n, [&] { addonAlgorithm(ctx, mesh, buf.data(), count, true); });
    if (rank == 0) {
      std::printf("{\"size\":%zu,\"ringUs\":%.3f,\"algoUs\":%.3f,\"checkUs\":%.3f,\"iters\":%d}\n", bytes, ringUs,
                  algoUs, checkUs, n);
    }
    std::fflush(stdout);
  }
  return 0;
}

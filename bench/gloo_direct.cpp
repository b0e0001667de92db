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

namespace {

using Clock = std::chrono::steady_clock;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);
const ReduceFn kSum = &gloo::sum<float>;
constexpr size_t kFingerprint = 32;
constexpr auto kTimeout = std::chrono::minutes(1);

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(v);
}

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
    ncclnode::reduceInRankOrder(mesh, head, ctx->size, kSum, buf, count, sizeof(float));
  } else {
    ring(ctx, buf, count);
  }
}

// The median of n timed calls: on a shared host a few calls stall for a scheduler
// tick, which moves a mean far more than the code under test does.
double timeIt(const std::shared_ptr<gloo::Context>& ctx, int n, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();  // warm-up
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
  std::vector<double> us(n);
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    call();
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::nth_element(us.begin(), us.begin() + n / 2, us.end());
  return us[n / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <rank> <size> <store-dir> [iters] [minbytes] [maxbytes]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  const std::string dir = argv[3];
  const int iters = argc > 4 ? std::atoi(argv[4]) : 200;
  const size_t minBytes = argc > 5 ? parseSize(argv[5]) : 8;
  const size_t maxBytes = argc > 6 ? parseSize(argv[6]) : 64u << 20;

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fileStore(dir);
  gloo::rendezvous::PrefixStore store("gloo_direct", fileStore);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, device);
  ncclnode::MeshExchange mesh(ctx);

  std::vector<float> buf(maxBytes / sizeof(float) + 1, 1.0f);
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    // Fewer iterations for large sizes keep the sweep short; never fewer than 5.
    const int n = bytes >= (1u << 20) ? std::max(5, iters / 20) : iters;
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

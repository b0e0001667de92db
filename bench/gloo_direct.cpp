// The baseline for the addon's per-call overhead: all-reduce (float sum) on Gloo
// called directly from C++, the same algorithm the addon runs (gloo::allreduce),
// at the same sizes, with rendezvous through a FileStore directory.
//
//   gloo_direct <rank> <size> <store-dir> [iters=200] [min=8] [max=64M]
// prints one JSON object per line: {"size":B,"us":per-call microseconds}.
// bench/allreduce-overhead.ts starts it next to the addon run and takes differences.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(v);
}

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

  std::vector<float> buf(maxBytes / sizeof(float) + 1, 1.0f);
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    gloo::AllreduceOptions o(ctx);
    o.setOutput(buf.data(), count);
    o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    // Fewer iterations for large sizes keep the sweep short; never fewer than 5.
    const int n = bytes >= (1u << 20) ? std::max(5, iters / 20) : iters;
    for (int i = 0; i < 3; ++i) gloo::allreduce(o);  // warm-up
    gloo::BarrierOptions b(ctx);
    gloo::barrier(b);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) gloo::allreduce(o);
    auto t1 = std::chrono::steady_clock::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
    if (rank == 0) std::printf("{\"size\":%zu,\"us\":%.3f,\"iters\":%d}\n", bytes, us, n);
    std::fflush(stdout);
  }
  return 0;
}

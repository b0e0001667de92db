// What bench/gloo_algos.cpp and bench/ring_ab.cpp share: a Gloo context on loopback and
// the backend's own TCP mesh, both met through one rendezvous store, and the Gloo calls
// each of them times (float32 sum).
#pragma once

#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../native/net/tcp_mesh.h"

namespace bench {

// contextTimeout: what the legacy classes and options without their own timeout wait;
// zero keeps Gloo's default (30 s).
inline std::shared_ptr<gloo::Context> connectGloo(int rank, int size, gloo::rendezvous::Store& store,
                                                  std::chrono::milliseconds contextTimeout = {}) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  if (contextTimeout.count() > 0) ctx->setTimeout(contextTimeout);
  ctx->connectFullMesh(store, device);
  return ctx;
}

// The own mesh's addresses go through the same store as Gloo's.
inline void connectOwnMesh(ncclnode::net::TcpMesh& mesh, gloo::rendezvous::Store& store,
                           std::chrono::milliseconds timeout) {
  ncclnode::net::Rendezvous rv;
  rv.set = [&](const std::string& k, const std::string& v) { store.set(k, std::vector<char>(v.begin(), v.end())); };
  rv.get = [&](const std::string& k, std::chrono::milliseconds t) {
    store.wait({k}, t);
    auto v = store.get(k);
    return std::string(v.begin(), v.end());
  };
  mesh.connect("127.0.0.1", "", rv, "tcp/", timeout);
}

// New-style gloo::allreduce of buf in place with the given algorithm.
inline void newAllreduce(const std::shared_ptr<gloo::Context>& ctx, float* buf, size_t count,
                         gloo::AllreduceOptions::Algorithm a, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions o(ctx);
  o.setAlgorithm(a);
  o.setOutput(buf, count);
  o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  o.setTimeout(timeout);
  gloo::allreduce(o);
}

// gloo::alltoall of `per` elements to each rank: in (per x size) -> out (per x size).
inline void glooAllToAll(const std::shared_ptr<gloo::Context>& ctx, float* in, float* out, size_t per,
                         std::chrono::milliseconds timeout) {
  gloo::AlltoallOptions o(ctx);
  o.setInput(in, per * static_cast<size_t>(ctx->size));
  o.setOutput(out, per * static_cast<size_t>(ctx->size));
  o.setTimeout(timeout);
  gloo::alltoall(o);
}

// The reduce-scatter the addon could build from an all-to-all: the blocks, then their sum
// in rank order into block 0 of out.
inline void allToAllReduce(const std::shared_ptr<gloo::Context>& ctx, float* in, float* out, size_t per,
                           std::chrono::milliseconds timeout) {
  glooAllToAll(ctx, in, out, per, timeout);
  for (int r = 1; r < ctx->size; ++r) gloo::sum<float>(out, out, out + static_cast<size_t>(r) * per, per);
}

}  // namespace bench

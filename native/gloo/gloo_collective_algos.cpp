#include "gloo_collective_algos.h"

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/reduce_scatter.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "../core/copy_bytes.h"
#include "../core/errors.h"
#include "gloo_backend.h"

namespace ncclnode {

namespace {

template <class T>
std::unique_ptr<gloo::Algorithm> makeAllGather(const std::shared_ptr<gloo::Context>& ctx, const void* in, void* out,
                                               size_t count) {
  std::vector<const T*> ins{static_cast<const T*>(in)};
  return std::make_unique<gloo::AllgatherRing<T>>(ctx, ins, static_cast<T*>(out), static_cast<int>(count));
}

template <class T>
std::unique_ptr<gloo::Algorithm> makeReduceScatter(const std::shared_ptr<gloo::Context>& ctx, void* buf,
                                                   size_t count) {
  std::vector<T*> ptrs{static_cast<T*>(buf)};
  std::vector<int> recv(ctx->size, static_cast<int>(count));
  return std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(ctx, ptrs, static_cast<int>(count) * ctx->size,
                                                                  recv);
}

}  // namespace

GlooAlgoStats& glooAlgoStats() {
  static GlooAlgoStats s;
  return s;
}

LegacyCollectives::~LegacyCollectives() = default;

LegacyCollectives::Entry& LegacyCollectives::entry(const std::shared_ptr<gloo::Context>& ctx, Coll coll, DType dtype,
                                                   size_t width, size_t count) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.coll == coll && e.count == count &&
           (coll == Coll::AllGather ? e.width == width : e.dtype == dtype);
  });
  if (it == entries_.end()) {
    const size_t P = static_cast<size_t>(ctx->size);
    const size_t whole = count * P * width;
    // Evict before building: the sequence of calls, hence of evictions, is the same on every rank.
    auto total = [&] {
      size_t t = 0;
      for (const auto& e : entries_) t += e.bytes;
      return t;
    };
    while (!entries_.empty() && (entries_.size() >= maxEntries_ || total() + whole > maxBytes_)) {
      entries_.erase(std::min_element(entries_.begin(), entries_.end(),
                                      [](const Entry& a, const Entry& b) { return a.used < b.used; }));
    }
    Entry e{coll, dtype, width, count, whole, nullptr, std::make_unique<uint8_t[]>(whole), nullptr, 0};
    if (coll == Coll::AllGather) {
      e.in = std::make_unique<uint8_t[]>(count * width);
      switch (width) {
        case 1: e.impl = makeAllGather<uint8_t>(ctx, e.in.get(), e.out.get(), count); break;
        case 2: e.impl = makeAllGather<uint16_t>(ctx, e.in.get(), e.out.get(), count); break;
        case 4: e.impl = makeAllGather<uint32_t>(ctx, e.in.get(), e.out.get(), count); break;
        default: e.impl = makeAllGather<uint64_t>(ctx, e.in.get(), e.out.get(), count); break;
      }
    } else {
      switch (dtype) {
        case DType::Int32: e.impl = makeReduceScatter<int32_t>(ctx, e.out.get(), count); break;
        case DType::Uint32: e.impl = makeReduceScatter<uint32_t>(ctx, e.out.get(), count); break;
        case DType::Int64: e.impl = makeReduceScatter<int64_t>(ctx, e.out.get(), count); break;
        case DType::Uint64: e.impl = makeReduceScatter<uint64_t>(ctx, e.out.get(), count); break;
        case DType::Float32: e.impl = makeReduceScatter<float>(ctx, e.out.get(), count); break;
        case DType::Float64: e.impl = makeReduceScatter<double>(ctx, e.out.get(), count); break;
        default: throw Error(Code::Backend, "legacy reduce-scatter asked for an unsupported dtype");
      }
    }
    entries_.push_back(std::move(e));
    it = entries_.end() - 1;
  }
  it->used = ++clock_;
  return *it;
}

void LegacyCollectives::allGather(const std::shared_ptr<gloo::Context>& ctx, size_t width, const void* in,
                                  void* out, size_t count) {
  Entry& e = entry(ctx, Coll::AllGather, DType::Uint8, width, count);
  copyBytes(e.in.get(), in, count * width);
  e.impl->run();
  copyBytes(out, e.out.get(), e.bytes);
  glooAlgoStats().legacyAllGathers++;
}

void LegacyCollectives::reduceScatter(const std::shared_ptr<gloo::Context>& ctx, DType dtype, const void* in,
                                      void* out, size_t count) {
  const size_t width = elementSize(dtype);
  Entry& e = entry(ctx, Coll::ReduceScatter, dtype, width, count);
  copyBytes(e.out.get(), in, e.bytes);
  e.impl->run();
  // The algorithm leaves this rank's reduced block at the front of its buffer.
  copyBytes(out, e.out.get(), count * width);
  glooAlgoStats().legacyReduceScatters++;
}

// All-gather over TCP: the mesh round carried the small ones already (agree()).
void GlooBackend::allGather(Op& op) {
  const size_t width = elementSize(op.dtype);
  const AllGatherAlgo algo = pickAllGather(tuning_, op.count, op.dtype, cfg_.size, meshBytes());
  if (algo == AllGatherAlgo::LegacyRing) {
    legacyColl_.allGather(ctx_, width, op.send.data, op.recv.data, op.count);
    return;
  }
  if (algo == AllGatherAlgo::TcpRing && tcp_) {
    net::ringAllGather(*tcp_, op.send.data, op.recv.data, op.count, width, deadlineOf(op));
    glooAlgoStats().tcpRingCalls++;
    return;
  }
  auto run = [&](auto t) {
    using T = decltype(t);
    gloo::AllgatherOptions o(ctx_);
    o.setInput(static_cast<T*>(op.send.data), op.count);
    o.setOutput(static_cast<T*>(op.recv.data), op.count * cfg_.size);
    o.setTimeout(op.timeout);
    gloo::allgather(o);
  };
  switch (width) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    default: run(uint64_t{}); break;
  }
  glooAlgoStats().glooAllGathers++;
}

bool GlooBackend::legacyReduceScatter(Op& op) {
  if (pickReduceScatter(tuning_, op.count, op.dtype, op.redop, cfg_.size, meshBytes()) !=
      ReduceScatterAlgo::HalvingDoubling) {
    return false;
  }
  legacyColl_.reduceScatter(ctx_, op.dtype, op.send.data, op.recv.data, op.count);
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
  return true;
}

}  // namespace ncclnode

namespace ncclnode {

// Every rank publishes the hash of its algorithm table and its broadcast's path over
// TCP (NCCL_NODE_TCP_BROADCAST, tcpBroadcastTree()) and reads everyone's: ranks that
// differ would pick different algorithms for the same call and hang or overrun each
// other, so every rank fails init instead, naming both sides.
void GlooBackend::checkTuning(std::chrono::milliseconds timeout) {
  if (cfg_.size < 2) return;
  const std::string base = cfg_.prefix + "tuning/";
  const std::string broadcast = tcpBroadcastTree() ? "tree" : "chain";
  const std::string mine = tuning_.hash() + "\n" + broadcast;
  store_->set(base + std::to_string(cfg_.rank), std::vector<char>(mine.begin(), mine.end()));
  for (int r = 0; r < cfg_.size; ++r) {
    if (r == cfg_.rank) continue;
    const auto v = store_->get(base + std::to_string(r), timeout);
    const std::string theirs(v.begin(), v.end());
    if (theirs != mine) {
      // Every rank sees a mismatch when any pair differs, and all of them must fail
      // with this error, not with a lost store: rank 0 may host the store, and its
      // process closes the store as soon as init fails. So every rank first counts
      // itself in ("seen") and waits for all; then the others count themselves out
      // ("left"), their last use of the store, and rank 0 fails only once they have.
      // Both waits are capped: a peer that died never arrives.
      const auto until = std::chrono::steady_clock::now() + std::min(timeout, std::chrono::milliseconds(5000));
      const auto waitFor = [&](const std::string& key, int64_t add, int64_t want) {
        for (int64_t n = store_->add(base + key, add); n < want && std::chrono::steady_clock::now() < until;
             n = store_->add(base + key, 0)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      };
      waitFor("seen", 1, cfg_.size);
      if (cfg_.rank == 0) {
        waitFor("left", 0, cfg_.size - 1);
      } else {
        store_->add(base + "left", 1);
      }
      const size_t cut = theirs.find('\n');
      const std::string theirHash = theirs.substr(0, cut);
      const std::string theirBroadcast = cut == std::string::npos ? "?" : theirs.substr(cut + 1);
      const std::string who = "rank " + std::to_string(cfg_.rank) + " has ";
      const std::string peer = ", rank " + std::to_string(r) + " has ";
      if (theirHash != tuning_.hash()) {
        throw Error(Code::InvalidArgument, "ranks use different gloo algorithm tables (NCCL_NODE_GLOO_TUNING): " + who +
                                               "table hash " + tuning_.hash() + peer + theirHash +
                                               "; give every rank the same file (or none)");
      }
      throw Error(Code::InvalidArgument, "ranks send broadcasts over TCP differently (NCCL_NODE_TCP_BROADCAST): " + who +
                                             broadcast + peer + theirBroadcast +
                                             "; give every rank the same value (or none)");
    }
  }
}

}  // namespace ncclnode

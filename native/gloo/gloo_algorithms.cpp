#include "gloo_algorithms.h"

#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "../core/copy_bytes.h"
#include "../core/errors.h"

namespace ncclnode {

namespace {

struct Named {
  const char* name;
  AllReduceAlgo algo;
};
constexpr Named kNames[] = {
    {"auto", AllReduceAlgo::Auto},
    {"tcp-ring", AllReduceAlgo::TcpRing},
    {"ring", AllReduceAlgo::Ring},
    {"bcube", AllReduceAlgo::Bcube},
    {"legacy-ring", AllReduceAlgo::LegacyRing},
    {"ring-chunked", AllReduceAlgo::RingChunked},
    {"halving-doubling", AllReduceAlgo::HalvingDoubling},
    {"legacy-bcube", AllReduceAlgo::LegacyBcube},
};

template <class T>
std::unique_ptr<gloo::Algorithm> make(const std::shared_ptr<gloo::Context>& ctx, AllReduceAlgo algo, void* buf,
                                      int count) {
  std::vector<T*> ptrs{static_cast<T*>(buf)};
  switch (algo) {
    case AllReduceAlgo::LegacyRing: return std::make_unique<gloo::AllreduceRing<T>>(ctx, ptrs, count);
    case AllReduceAlgo::RingChunked: return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx, ptrs, count);
    case AllReduceAlgo::HalvingDoubling:
      return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs, count);
    case AllReduceAlgo::LegacyBcube: return std::make_unique<gloo::AllreduceBcube<T>>(ctx, ptrs, count);
    default: throw Error(Code::Backend, "not a legacy all-reduce algorithm");
  }
}

}  // namespace

AllReduceAlgo parseAllReduceAlgo(const std::string& name) {
  if (name.empty()) return AllReduceAlgo::Auto;
  for (const auto& n : kNames) {
    if (name == n.name) return n.algo;
  }
  throw Error(Code::InvalidArgument,
              "NCCL_NODE_GLOO_ALLREDUCE must be one of auto, tcp-ring, ring, bcube, legacy-ring, ring-chunked, "
              "halving-doubling, legacy-bcube; got \"" + name + "\"");
}

const char* allReduceAlgoName(AllReduceAlgo a) {
  for (const auto& n : kNames) {
    if (n.algo == a) return n.name;
  }
  return "?";
}

bool legacySupports(DType dtype, RedOp op) {
  if (op != RedOp::Sum && op != RedOp::Avg) return false;
  switch (dtype) {
    case DType::Int32: case DType::Uint32: case DType::Int64: case DType::Uint64:
    case DType::Float32: case DType::Float64:
      return true;
    default:
      return false;
  }
}

AllReduceAlgo chooseAllReduce(AllReduceAlgo forced, size_t count, DType dtype, RedOp op, int groupSize) {
  // Legacy classes count elements in an int; past that, or for a dtype/op they
  // cannot reduce, the new-style ring runs whatever was forced.
  // Legacy bcube (base 2) returns wrong sums on a group whose size is not a power
  // of two (measured: 3 ranks), so it runs only on those. Legacy ring has every rank
  // add the others' buffers in its own order: from 3 ranks on the ranks' results
  // differ in the last bits (measured), so it runs only on 2, where a + b == b + a.
  if (isLegacy(forced)) {
    const bool pow2 = groupSize > 0 && (groupSize & (groupSize - 1)) == 0;
    const bool ok = legacySupports(dtype, op) && count <= static_cast<size_t>(INT_MAX) &&
                    (forced != AllReduceAlgo::LegacyBcube || pow2) &&
                    (forced != AllReduceAlgo::LegacyRing || groupSize <= 2);
    return ok ? forced : AllReduceAlgo::Ring;
  }
  if (forced != AllReduceAlgo::Auto) return forced;
  // Two sweeps of bench/gloo_algos on a shared 2-core host (bench/README.md) showed
  // no legacy algorithm ahead of the new-style ring consistently at any size from
  // 64 KiB to 64 MiB, and the ring held the lead at 32-64 MiB in both: it stays the
  // default until a quieter host measures otherwise.
  return AllReduceAlgo::Ring;
}

LegacyAllReduces::~LegacyAllReduces() = default;

void LegacyAllReduces::run(const std::shared_ptr<gloo::Context>& ctx, AllReduceAlgo algo, DType dtype, void* data,
                           size_t count) {
  const size_t bytes = count * elementSize(dtype);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.algo == algo && e.dtype == dtype && e.count == count;
  });
  if (it == entries_.end()) {
    if (entries_.size() >= max_) {
      entries_.erase(std::min_element(entries_.begin(), entries_.end(),
                                      [](const Entry& a, const Entry& b) { return a.used < b.used; }));
    }
    Entry e{algo, dtype, count, std::make_unique<uint8_t[]>(bytes), nullptr, 0};
    const int n = static_cast<int>(count);
    switch (dtype) {
      case DType::Int32: e.impl = make<int32_t>(ctx, algo, e.buf.get(), n); break;
      case DType::Uint32: e.impl = make<uint32_t>(ctx, algo, e.buf.get(), n); break;
      case DType::Int64: e.impl = make<int64_t>(ctx, algo, e.buf.get(), n); break;
      case DType::Uint64: e.impl = make<uint64_t>(ctx, algo, e.buf.get(), n); break;
      case DType::Float32: e.impl = make<float>(ctx, algo, e.buf.get(), n); break;
      case DType::Float64: e.impl = make<double>(ctx, algo, e.buf.get(), n); break;
      default: throw Error(Code::Backend, "legacy all-reduce asked for an unsupported dtype");
    }
    entries_.push_back(std::move(e));
    it = entries_.end() - 1;
  }
  it->used = ++clock_;
  copyBytes(it->buf.get(), data, bytes);
  it->impl->run();
  copyBytes(data, it->buf.get(), bytes);
}

}  // namespace ncclnode

// The benchmark's verifiable data on host memory (the Gloo backend's buffers): the
// per-element bodies of verifiable_defs.h, which the CUDA kernels and the stand-in
// libcuda also run, spread over the host's cores. The TypeScript generator
// (src/nccl-tests/verifiable.ts) stays the reference; this is the fast path, because
// preparing and checking 256 MiB element by element in JavaScript takes minutes
// where the timed collectives take seconds.
#include "host_verifiable.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "../core/dtype.h"
#include "../core/errors.h"
#include "../core/js_errors.h"
#include "../io/parallel_copy.h"
#include "host_verifiable_fast.h"
#include "verifiable_defs.h"

namespace ncclnode {

namespace {

// Below this many elements a thread costs more than it saves.
constexpr uint64_t kMinPerThread = 1 << 16;

// Runs body(lo, hi) over [0, n) in equal parts, one per thread, the calling thread included.
template <typename Body>
void parallelFor(uint64_t n, const Body& body) {
  const uint64_t threads = std::max<uint64_t>(1, std::min<uint64_t>(copyThreads(), n / kMinPerThread));
  const uint64_t step = (n + threads - 1) / threads;
  std::vector<std::thread> helpers;
  for (uint64_t t = 1; t < threads; ++t) helpers.emplace_back([&, t] { body(std::min(n, t * step), std::min(n, (t + 1) * step)); });
  body(0, std::min(n, step));
  for (auto& h : helpers) h.join();
}

struct HostSpan {
  uint8_t* data;
  size_t bytes;
};

HostSpan spanArg(const Napi::Value& v, const char* call, const char* what) {
  if (!v.IsTypedArray()) throw Error(Code::InvalidArgument, std::string(call) + ": " + what + " must be a TypedArray");
  auto a = v.As<Napi::TypedArray>();
  Napi::ArrayBuffer ab = a.ArrayBuffer();
  if (ab.ByteLength() < a.ByteOffset() + a.ByteLength() || (a.ByteLength() > 0 && ab.Data() == nullptr)) {
    throw Error(Code::InvalidArgument, std::string(call) + ": " + what + " is detached");
  }
  return {static_cast<uint8_t*>(ab.Data()) + a.ByteOffset(), a.ByteLength()};
}

int intArg(const Napi::Value& v, const char* call, const char* what, int lo, int hi) {
  if (!v.IsNumber()) throw Error(Code::InvalidArgument, std::string(call) + ": " + what + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (d != static_cast<int>(d) || d < lo || d > hi) {
    throw Error(Code::InvalidArgument, std::string(call) + ": " + what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], received " + std::to_string(d));
  }
  return static_cast<int>(d);
}

// The dtypes verifiable_defs.h covers (int8 .. bfloat16); fp8 is not one of them.
int dtypeArg(const Napi::Value& v, const char* call) { return intArg(v, call, "dtype", 0, kNumVerifiableDTypes - 1); }

// verifiablePrepareHost(buf, dtype, op, nranks, rank, seed, offset): rank's input (rank >= 0)
// or the expected result (rank -1) for elements offset.. of the whole buffer.
Napi::Value PrepareHost(const Napi::CallbackInfo& info) {
  constexpr const char* call = "verifiablePrepareHost";
  return guard(info.Env(), [&]() -> Napi::Value {
    const HostSpan b = spanArg(info[0], call, "buffer");
    const int dtype = dtypeArg(info[1], call);
    const int op = intArg(info[2], call, "op", 0, kVOpNil);
    const int nranks = intArg(info[3], call, "nranks", 1, 1 << 30);
    const int rank = intArg(info[4], call, "rank", -1, nranks - 1);
    if (!info[5].IsNumber() || !info[6].IsNumber()) throw Error(Code::InvalidArgument, std::string(call) + ": seed and offset must be numbers");
    // The seed enters the hash as JS's `seed | 0` does: its low 32 bits.
    const uint32_t seed = static_cast<uint32_t>(info[5].As<Napi::Number>().Int32Value());
    const double offsetD = info[6].As<Napi::Number>().DoubleValue();
    if (!(offsetD >= 0 && offsetD <= 9007199254740991.0) || offsetD != static_cast<double>(static_cast<uint64_t>(offsetD))) {
      throw Error(Code::InvalidArgument, std::string(call) + ": offset must be a safe non-negative integer, received " + std::to_string(offsetD));
    }
    const uint64_t offset = static_cast<uint64_t>(offsetD);
    const size_t w = elementSize(static_cast<DType>(dtype));
    if (b.bytes % w != 0) throw Error(Code::SizeMismatch, std::string(call) + ": the buffer is not a whole number of elements");
    if (op == kVOpNil) {
      parallelFor(b.bytes / w, [&](uint64_t lo, uint64_t hi) {
        for (uint64_t i = lo; i < hi; ++i) vStoreNil(b.data, i, dtype, seed, offset + i);
      });
      return info.Env().Undefined();
    }
    const VGen g(dtype, op, nranks, seed);
    // The hash takes the element index's low 32 bits, as JS's `idx | 0` does.
    vWithTypes(dtype, op, [&](auto dt, auto vop) {
      constexpr int DT = decltype(dt)::value, OP = decltype(vop)::value;
      parallelFor(b.bytes / w, [&](uint64_t lo, uint64_t hi) {
        if (rank >= 0) {
          for (uint64_t i = lo; i < hi; ++i) vStore(b.data, i, DT, g.input<DT, OP>(rank, static_cast<uint32_t>(offset + i)));
        } else {
          for (uint64_t i = lo; i < hi; ++i) vStore(b.data, i, DT, g.expected<DT, OP>(static_cast<uint32_t>(offset + i)));
        }
      });
    });
    return info.Env().Undefined();
  });
}

// verifiableCompareHost(actual, expected, dtype, op) -> number of wrong elements.
Napi::Value CompareHost(const Napi::CallbackInfo& info) {
  constexpr const char* call = "verifiableCompareHost";
  return guard(info.Env(), [&]() -> Napi::Value {
    const HostSpan a = spanArg(info[0], call, "actual");
    const HostSpan e = spanArg(info[1], call, "expected");
    const int dtype = dtypeArg(info[2], call);
    const int op = intArg(info[3], call, "op", 0, kVOpNil);
    if (a.bytes != e.bytes) throw Error(Code::SizeMismatch, std::string(call) + ": actual and expected differ in size");
    const uint64_t n = a.bytes / elementSize(static_cast<DType>(dtype));
    std::atomic<uint64_t> total{0};
    parallelFor(n, [&](uint64_t lo, uint64_t hi) {
      uint64_t w = 0;
      for (uint64_t i = lo; i < hi; ++i) w += vWrong(a.data, e.data, i, dtype, op) ? 1 : 0;
      total += w;
    });
    return Napi::Number::New(info.Env(), static_cast<double>(total.load()));
  });
}

}  // namespace

void registerHostVerifiable(Napi::Env env, Napi::Object exports) {
  exports.Set("verifiablePrepareHost", Napi::Function::New(env, PrepareHost, "verifiablePrepareHost"));
  exports.Set("verifiableCompareHost", Napi::Function::New(env, CompareHost, "verifiableCompareHost"));
}

}  // namespace ncclnode

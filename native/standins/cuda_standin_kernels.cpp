// Host twins of native/kernels/kernels.cu. Each computes exactly what the CUDA
// kernel defines (same formulas, same rounding), on the stand-in's host memory.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../core/dtype.h"
#include "../kernels/kernel_defs.h"
#include "../kernels/verifiable_defs.h"
#include "cuda_standin_kernels.h"
#include "standin_cuda_ext.h"

namespace {

using namespace ncclnode;

struct Kernel { const char* name; int id; };
const Kernel kKernels[] = {
    {"nccl_node_fill", 0}, {"nccl_node_verify", 1}, {"nccl_node_cast_f32_bf16", 2},
    {"nccl_node_cast_f32_f16", 3}, {"nccl_node_cast_bf16_f32", 4}, {"nccl_node_cast_f16_f32", 5},
    {"nccl_node_checksum", 6}, {"nccl_node_verifiable_prepare", 7}, {"nccl_node_verifiable_compare", 8},
};

struct Module { std::vector<int> present; };

size_t imageSize(const void* image) {
  uint32_t magic;
  std::memcpy(&magic, image, 4);
  if (magic == 0xBA55ED50u) {  // nvcc fatbin: u32 magic, u16 version, u16 header size, u64 body size
    uint16_t header;
    uint64_t body;
    std::memcpy(&header, static_cast<const char*>(image) + 6, 2);
    std::memcpy(&body, static_cast<const char*>(image) + 8, 8);
    return header + body;
  }
  return std::strlen(static_cast<const char*>(image));  // PTX text
}

bool contains(const char* data, size_t n, const std::string& word) {
  for (const char* p = data; p + word.size() <= data + n; ++p) {
    p = static_cast<const char*>(memchr(p, word[0], data + n - p));
    if (!p || p + word.size() > data + n) return false;
    // Whole names only: nccl_node_fill must not match inside a longer name.
    if (std::memcmp(p, word.data(), word.size()) == 0) {
      const char after = p + word.size() < data + n ? p[word.size()] : '\0';
      if (!(isalnum(static_cast<unsigned char>(after)) || after == '_')) return true;
    }
  }
  return false;
}

template <class T>
T* dev(CUdeviceptr p, size_t n) { return static_cast<T*>(cuStandinHostPtr(p, n * sizeof(T))); }

template <class P>
P arg(void** params, int i) { P v; std::memcpy(&v, params[i], sizeof v); return v; }

// Stores an integer value as one element of `dtype` (ints wrap, floats round to nearest even).
void fillOneFrom(void* out, int64_t raw, int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::Int8: case DType::Uint8: { uint8_t v = static_cast<uint8_t>(raw); std::memcpy(out, &v, 1); break; }
    case DType::Int32: case DType::Uint32: { uint32_t v = static_cast<uint32_t>(raw); std::memcpy(out, &v, 4); break; }
    case DType::Int64: case DType::Uint64: { uint64_t v = static_cast<uint64_t>(raw); std::memcpy(out, &v, 8); break; }
    case DType::Float16: { uint16_t v = nnFloatToHalf(static_cast<float>(raw)); std::memcpy(out, &v, 2); break; }
    case DType::Bfloat16: { uint16_t v = nnFloatToBf16(static_cast<float>(raw)); std::memcpy(out, &v, 2); break; }
    case DType::Float32: { float v = static_cast<float>(raw); std::memcpy(out, &v, 4); break; }
    case DType::Float64: { double v = static_cast<double>(raw); std::memcpy(out, &v, 8); break; }
    case DType::Float8e4m3: case DType::Float8e5m2: {
      const uint8_t v = ncclnode::floatToFp8(static_cast<double>(raw), static_cast<DType>(dtype));
      std::memcpy(out, &v, 1);
      break;
    }
  }
}

void fillOne(void* base, uint64_t i, int dtype, int rank, uint64_t seed) {
  const size_t w = elementSize(static_cast<DType>(dtype));
  fillOneFrom(static_cast<char*>(base) + i * w, kernelValue(i, rank, seed, dtype), dtype);
}

// nccl_node_verifiable_prepare / _compare: the kernels' per-element bodies
// (verifiable_defs.h) in a loop, with the parameter checks a launch would fail on.
int prepareVerifiable(int id, void** params, std::function<void()>* work) {
  constexpr int kInvalid = 1;
  const bool prepare = id == 7;
  const uint64_t n = arg<uint64_t>(params, prepare ? 1 : 2);
  const int dtype = arg<int>(params, prepare ? 2 : 3);
  const int op = arg<int>(params, prepare ? 3 : 4);
  if (dtype < 0 || dtype >= kNumDTypes || op < 0 || op > kVOpNil) return kInvalid;
  const size_t w = elementSize(static_cast<DType>(dtype));
  if (prepare) {
    char* dst = dev<char>(arg<CUdeviceptr>(params, 0), n * w);
    const int nranks = arg<int>(params, 4), rank = arg<int>(params, 5);
    const uint32_t seed = arg<uint32_t>(params, 6);
    const uint64_t offset = arg<uint64_t>(params, 7);
    if ((n && !dst) || nranks < 1) return kInvalid;
    *work = [=] { for (uint64_t i = 0; i < n; ++i) vPrepare(dst, i, dtype, op, nranks, rank, seed, offset); };
    return 0;
  }
  const char* actual = dev<char>(arg<CUdeviceptr>(params, 0), n * w);
  const char* expected = dev<char>(arg<CUdeviceptr>(params, 1), n * w);
  auto* errors = dev<unsigned long long>(arg<CUdeviceptr>(params, 5), 1);
  if ((n && (!actual || !expected)) || !errors) return kInvalid;
  *work = [=] {
    unsigned long long wrong = 0;
    for (uint64_t i = 0; i < n; ++i) wrong += vWrong(actual, expected, i, dtype, op) ? 1 : 0;
    *errors += wrong;  // the kernel adds with atomicAdd
  };
  return 0;
}

}  // namespace

void* standinModuleLoad(const void* image) {
  const size_t n = imageSize(image);
  auto* m = new Module();
  for (const Kernel& k : kKernels) {
    if (contains(static_cast<const char*>(image), n, k.name)) m->present.push_back(k.id);
  }
  if (m->present.empty()) { delete m; return nullptr; }
  return m;
}

void* standinModuleFunction(void* module, const char* name) {
  auto* m = static_cast<Module*>(module);
  if (!m || !name) return nullptr;
  for (const Kernel& k : kKernels) {
    if (std::strcmp(k.name, name) != 0) continue;
    for (int id : m->present) if (id == k.id) return const_cast<Kernel*>(&k);
  }
  return nullptr;
}

int standinPrepareLaunch(void* fn, void** params, std::function<void()>* work) {
  const int id = static_cast<Kernel*>(fn)->id;
  constexpr int kInvalid = 1;
  if (id == 0 || id == 1) {
    const CUdeviceptr buf = arg<CUdeviceptr>(params, 0);
    const uint64_t n = arg<uint64_t>(params, 1);
    const int dtype = arg<int>(params, 2);
    if (dtype < 0 || dtype >= kNumDTypes) return kInvalid;
    const size_t w = elementSize(static_cast<DType>(dtype));
    char* data = dev<char>(buf, n * w);
    if (!data && n) return kInvalid;
    if (id == 0) {
      const int rank = arg<int>(params, 3);
      const uint64_t seed = arg<uint64_t>(params, 4);
      *work = [=] { for (uint64_t i = 0; i < n; ++i) fillOne(data, i, dtype, rank, seed); };
    } else {
      const int nranks = arg<int>(params, 3);
      const uint64_t seed = arg<uint64_t>(params, 4);
      auto* errors = dev<unsigned long long>(arg<CUdeviceptr>(params, 5), 1);
      if (!errors) return kInvalid;
      *work = [=] {
        std::vector<char> expect(w);
        for (uint64_t i = 0; i < n; ++i) {
          int64_t sum = 0;
          for (int r = 0; r < nranks; ++r) sum += kernelValue(i, r, seed, dtype);
          // The expected element is the sum rounded to the dtype, as the kernel does.
          fillOneFrom(expect.data(), sum, dtype);
          if (std::memcmp(expect.data(), data + i * w, w) != 0) ++*errors;
        }
      };
    }
    return 0;
  }
  if (id >= 2 && id <= 5) {
    const uint64_t n = arg<uint64_t>(params, 2);
    const bool fromF32 = id <= 3;
    const bool bf16 = id == 2 || id == 4;
    void* in = cuStandinHostPtr(arg<CUdeviceptr>(params, 0), n * (fromF32 ? 4 : 2));
    void* out = cuStandinHostPtr(arg<CUdeviceptr>(params, 1), n * (fromF32 ? 2 : 4));
    if (n && (!in || !out)) return kInvalid;
    *work = [=] {
      for (uint64_t i = 0; i < n; ++i) {
        if (fromF32) {
          const float f = static_cast<float*>(in)[i];
          static_cast<uint16_t*>(out)[i] = bf16 ? nnFloatToBf16(f) : nnFloatToHalf(f);
        } else {
          const uint16_t h = static_cast<uint16_t*>(in)[i];
          static_cast<float*>(out)[i] = bf16 ? nnBf16ToFloat(h) : nnHalfToFloat(h);
        }
      }
    };
    return 0;
  }
  if (id == 7 || id == 8) return prepareVerifiable(id, params, work);
  // checksum: sum over i of (byte[i] + 1) * (i + 1), modulo 2^64
  const uint64_t bytes = arg<uint64_t>(params, 1);
  auto* in = dev<uint8_t>(arg<CUdeviceptr>(params, 0), bytes);
  auto* out = dev<unsigned long long>(arg<CUdeviceptr>(params, 2), 1);
  if ((bytes && !in) || !out) return kInvalid;
  *work = [=] {
    unsigned long long sum = 0;
    for (uint64_t i = 0; i < bytes; ++i) sum += (in[i] + 1ULL) * (i + 1ULL);
    *out += sum;  // the kernel accumulates with atomicAdd into *out
  };
  return 0;
}

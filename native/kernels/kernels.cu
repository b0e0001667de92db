// CUDA kernels the runtime needs. Built by nvcc into a fatbin (cmake/gpu.cmake) that
// the addon loads with cuModuleLoadData; the stand-in libcuda runs host twins of
// these (native/standins/cuda_standin_kernels.cpp) with the same definitions.
// extern "C": the names are the lookup keys for cuModuleGetFunction.
#include "kernel_defs.h"
#include "optim_defs.h"
#include "verifiable_defs.h"

namespace {

__device__ void storeValue(void* base, unsigned long long i, int dtype, long long raw) {
  switch (dtype) {
    case 0: case 1: static_cast<unsigned char*>(base)[i] = static_cast<unsigned char>(raw); break;
    case 2: case 3: static_cast<unsigned int*>(base)[i] = static_cast<unsigned int>(raw); break;
    case 4: case 5: static_cast<unsigned long long*>(base)[i] = static_cast<unsigned long long>(raw); break;
    case 6: static_cast<uint16_t*>(base)[i] = nnFloatToHalf(static_cast<float>(raw)); break;
    case 7: static_cast<float*>(base)[i] = static_cast<float>(raw); break;
    case 8: static_cast<double*>(base)[i] = static_cast<double>(raw); break;
    case 9: static_cast<uint16_t*>(base)[i] = nnFloatToBf16(static_cast<float>(raw)); break;
  }
}

__device__ bool equalsValue(const void* base, unsigned long long i, int dtype, long long raw) {
  switch (dtype) {
    case 0: case 1: return static_cast<const unsigned char*>(base)[i] == static_cast<unsigned char>(raw);
    case 2: case 3: return static_cast<const unsigned int*>(base)[i] == static_cast<unsigned int>(raw);
    case 4: case 5: return static_cast<const unsigned long long*>(base)[i] == static_cast<unsigned long long>(raw);
    case 6: return static_cast<const uint16_t*>(base)[i] == nnFloatToHalf(static_cast<float>(raw));
    case 7: return static_cast<const float*>(base)[i] == static_cast<float>(raw);
    case 8: return static_cast<const double*>(base)[i] == static_cast<double>(raw);
    case 9: return static_cast<const uint16_t*>(base)[i] == nnFloatToBf16(static_cast<float>(raw));
  }
  return false;
}

}  // namespace

#define GRID_STRIDE(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

// The benchmark's fill: element i of rank `rank` = kernelValue(i, rank, seed, dtype).
extern "C" __global__ void nccl_node_fill(void* dst, unsigned long long n, int dtype, int rank, unsigned long long seed) {
  GRID_STRIDE(i, n) storeValue(dst, i, dtype, kernelValue(i, rank, seed, dtype));
}

// Counts elements that differ from the all-reduce (sum) of every rank's fill.
extern "C" __global__ void nccl_node_verify(const void* buf, unsigned long long n, int dtype, int nranks,
                                            unsigned long long seed, unsigned long long* errors) {
  GRID_STRIDE(i, n) {
    long long sum = 0;
    for (int r = 0; r < nranks; ++r) sum += kernelValue(i, r, seed, dtype);
    if (!equalsValue(buf, i, dtype, sum)) atomicAdd(errors, 1ULL);
  }
}

extern "C" __global__ void nccl_node_cast_f32_bf16(const float* in, uint16_t* out, unsigned long long n) {
  GRID_STRIDE(i, n) out[i] = nnFloatToBf16(in[i]);
}
extern "C" __global__ void nccl_node_cast_f32_f16(const float* in, uint16_t* out, unsigned long long n) {
  GRID_STRIDE(i, n) out[i] = nnFloatToHalf(in[i]);
}
extern "C" __global__ void nccl_node_cast_bf16_f32(const uint16_t* in, float* out, unsigned long long n) {
  GRID_STRIDE(i, n) out[i] = nnBf16ToFloat(in[i]);
}
extern "C" __global__ void nccl_node_cast_f16_f32(const uint16_t* in, float* out, unsigned long long n) {
  GRID_STRIDE(i, n) out[i] = nnHalfToFloat(in[i]);
}

// Checksum of a byte range: sum over i of (byte[i] + 1) * (i + 1), modulo 2^64 —
// order-independent, so a grid-stride reduction with atomicAdd is exact.
extern "C" __global__ void nccl_node_checksum(const unsigned char* in, unsigned long long bytes, unsigned long long* out) {
  unsigned long long local = 0;
  GRID_STRIDE(i, bytes) local += (in[i] + 1ULL) * (i + 1ULL);
  atomicAdd(out, local);
}

// The benchmark's verifiable data (verifiable_defs.h, the twin of src/nccl-tests/verifiable.ts):
// element i of rank `rank`'s input for elements offset + i, or with rank < 0 the
// expected result over nranks ranks. op: 0 sum, 1 prod, 2 max, 3 min, 4 avg, 5 copy.
extern "C" __global__ void nccl_node_verifiable_prepare(void* dst, unsigned long long n, int dtype, int op, int nranks,
                                                        int rank, unsigned int seed, unsigned long long offset) {
  GRID_STRIDE(i, n) vPrepare(dst, i, dtype, op, nranks, rank, seed, offset);
}

// Adds to *errors the elements of `actual` that differ from `expected` (bits as
// unsigned integers; 2 ULP allowed for floating-point avg).
extern "C" __global__ void nccl_node_verifiable_compare(const void* actual, const void* expected, unsigned long long n,
                                                        int dtype, int op, unsigned long long* errors) {
  unsigned long long local = 0;
  GRID_STRIDE(i, n) local += vWrong(actual, expected, i, dtype, op) ? 1 : 0;
  if (local) atomicAdd(errors, local);
}

// ---- The training step (optim_defs.h): no shard leaves the GPU. ----

// dst += src, float32 (gradient accumulation).
extern "C" __global__ void nccl_node_add_f32(float* dst, const float* src, unsigned long long n) {
  GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], src[i]);
}

// buf *= c in double, rounded once to float32 (gradient clipping).
extern "C" __global__ void nccl_node_scale_f32(float* buf, double c, unsigned long long n) {
  GRID_STRIDE(i, n) buf[i] = static_cast<float>(__dmul_rn(static_cast<double>(buf[i]), c));
}

// partials[c] = sum of squares of chunk c (kSumSquaresChunk elements), in order.
extern "C" __global__ void nccl_node_sumsq_chunks(const float* in, unsigned long long n, double* partials) {
  const unsigned long long chunks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
  GRID_STRIDE(c, chunks) {
    const unsigned long long end = (c + 1) * kSumSquaresChunk < n ? (c + 1) * kSumSquaresChunk : n;
    partials[c] = nnChunkSumSquares(in, c * kSumSquaresChunk, end);
  }
}

// out[0] = the n partials summed in order (one thread: n is small).
extern "C" __global__ void nccl_node_sum_f64(const double* in, unsigned long long n, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0;
  for (unsigned long long i = 0; i < n; ++i) s = __dadd_rn(s, in[i]);
  out[0] = s;
}

extern "C" __global__ void nccl_node_adamw_f32(float* p, const float* g, float* m, float* v, unsigned long long n,
                                               NnAdamW o) {
  GRID_STRIDE(i, n) nnAdamWStep(p, g, m, v, i, o);
}

extern "C" __global__ void nccl_node_sgd_f32(float* p, const float* g, float* buf, unsigned long long n, NnSgd o) {
  GRID_STRIDE(i, n) nnSgdStep(p, g, buf, i, o);
}

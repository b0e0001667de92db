// Element types and reduction operators. Numbering follows ncclDataType_t and
// ncclRedOp_t so the NCCL backend passes them through unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclnode {

enum class DType : int32_t {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bfloat16 = 9,
  Float8e4m3 = 10,  // OCP E4M3 ("fn": no infinities, NaN = S.1111.111), NCCL >= 2.24
  Float8e5m2 = 11,  // OCP E5M2 (IEEE-like), NCCL >= 2.24
};
constexpr int32_t kNumDTypes = 12;

enum class RedOp : int32_t { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4 };
constexpr int32_t kNumRedOps = 5;

size_t elementSize(DType t);
const char* dtypeName(DType t);
const char* redOpName(RedOp op);
bool isFloating(DType t);

// out[i] = a[i] (op) b[i]; out may alias a or b. 16-bit floats are combined in
// float32 and rounded to nearest-even, one rounding per call.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);
// Avg reduces as Sum; divideInPlace finishes it.
ReduceFn reduceFunction(DType t, RedOp op);
void divideInPlace(void* data, DType t, size_t n, int divisor);

// fp8 as CUDA converts it: exact decode; encode rounds to nearest-even and saturates
// to the largest finite value (__NV_SATFINITE), NaN stays NaN.
float fp8ToFloat(uint8_t v, DType t);
uint8_t floatToFp8(double f, DType t);

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);

}  // namespace ncclnode

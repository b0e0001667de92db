// Definitions shared by the CUDA kernels (kernels.cu) and their host twins (the
// stand-in libcuda): what "fill" writes, so "verify" and tests agree on it.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__
#define NN_HD __host__ __device__
#else
#define NN_HD
#endif

// Element i of rank `rank`'s fill pattern: a small integer, exact in every dtype
// (float16 and bfloat16 included), so sums over ranks compare bit for bit.
// Unsigned dtypes (uint8 = 1, uint32 = 3, uint64 = 5) get 0..30, the rest -15..15.
NN_HD inline int64_t kernelValue(uint64_t i, int rank, uint64_t seed, int dtype) {
  const int64_t v = static_cast<int64_t>((i * 7 + static_cast<uint64_t>(rank) * 13 + seed) % 31);
  const bool isUnsigned = dtype == 1 || dtype == 3 || dtype == 5;
  return isUnsigned ? v : v - 15;
}

// float <-> float16 / bfloat16, round to nearest even: one definition for the
// kernels and their host twins, written out so no CUDA header is needed.
NN_HD inline uint32_t nnFloatBits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
NN_HD inline float nnBitsFloat(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }

NN_HD inline uint16_t nnFloatToHalf(float f) {
  const uint32_t x = nnFloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);       // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);      // >= 65520 rounds to infinity
  if (a < 0x38800000u) {                                                   // half subnormal or zero
    if (a <= 0x33000000u) return static_cast<uint16_t>(sign);              // <= 2^-25: ties to even 0
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (a - 0x38000000u) >> 13;                                    // rebias 127 -> 15
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;                  // a carry may reach infinity
  return static_cast<uint16_t>(sign | r);
}

NN_HD inline float nnHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return nnBitsFloat(sign);
    e = 113;
    while (!(m & 0x400u)) { m <<= 1; --e; }
    return nnBitsFloat(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  if (e == 31) return nnBitsFloat(sign | 0x7f800000u | (m << 13));
  return nnBitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

NN_HD inline uint16_t nnFloatToBf16(float f) {
  uint32_t u = nnFloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

NN_HD inline float nnBf16ToFloat(uint16_t h) { return nnBitsFloat(static_cast<uint32_t>(h) << 16); }

// The benchmark's verifiable data (src/nccl-tests/verifiable.ts) for the CUDA kernels and
// their host twins in the stand-in libcuda. The TypeScript generator is the reference:
// every step below is the same operation in the same IEEE double arithmetic (or the
// same 32-bit integer arithmetic), so device and host produce identical bits. Values
// are exact by construction (integers below 2^53, short mantissas times powers of
// two); only avg's division and the final rounding to the dtype are inexact, and
// those are single correctly-rounded operations on both sides.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernel_defs.h"

// The data types these generators cover: int8 .. bfloat16 (not fp8 yet).
enum { kNumVerifiableDTypes = 10 };

// Op codes: the project's RedOp (sum 0, prod 1, max 2, min 3, avg 4) plus "nil", a copy.
enum { kVOpSum = 0, kVOpProd = 1, kVOpMax = 2, kVOpMin = 3, kVOpAvg = 4, kVOpNil = 5 };

struct VLayout {
  int bytes;
  bool isFloat, isSigned;
  int bits;  // mantissa bits (floats) or value bits (integers)
  int emin, emax;
};

// DType codes as native/core/dtype.h: int8 uint8 int32 uint32 int64 uint64 f16 f32 f64 bf16.
NN_HD inline VLayout vLayout(int dtype) {
  switch (dtype) {
    case 0: return {1, false, true, 8, 0, 0};
    case 1: return {1, false, false, 8, 0, 0};
    case 2: return {4, false, true, 32, 0, 0};
    case 3: return {4, false, false, 32, 0, 0};
    case 4: return {8, false, true, 64, 0, 0};
    case 5: return {8, false, false, 64, 0, 0};
    case 6: return {2, true, true, 10, -20, 4};
    case 7: return {4, true, true, 23, -30, 30};
    case 8: return {8, true, true, 52, -60, 60};
    default: return {2, true, true, 7, -20, 20};  // 9: bfloat16
  }
}

// hash3 of verifiable.ts: Math.imul and >>> are uint32 multiply and shift.
NN_HD inline uint32_t vHash3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = ((a ^ 0x9e3779b9u) * 0x85ebca6bu) ^ b;
  h = ((h ^ (h >> 16)) * 0xc2b2ae35u) ^ c;
  h = (h ^ (h >> 13)) * 0x27d4eb2du;
  h = (h ^ (h >> 15)) * 0x165667b1u;
  return h ^ (h >> 16);
}

// A uniform integer in [0, n): (hi21 * 2^32 + lo) % n, exact below 2^53 in JS too.
// idx enters hash3 as JS's `idx | 0`: its low 32 bits.
NN_HD inline uint64_t vBelow(double n, uint32_t seed, uint64_t idx, uint32_t salt) {
  const uint64_t hi = vHash3(seed, static_cast<uint32_t>(idx), salt) % (1u << 21);
  return ((hi << 32) + vHash3(seed, static_cast<uint32_t>(idx), salt + 1)) % static_cast<uint64_t>(n);
}
NN_HD inline double vBelowD(double n, uint32_t seed, uint64_t idx, uint32_t salt) {
  return static_cast<double>(vBelow(n, seed, idx, salt));
}

NN_HD inline double vPow2(int e) { return ldexp(1.0, e); }
NN_HD inline uint32_t vRankSeed(uint32_t seed, int rank) { return vHash3(seed, static_cast<uint32_t>(rank), 7); }

NN_HD inline double vSumInput(const VLayout& l, int n, int rank, uint32_t seed, uint64_t idx) {
  const uint32_t rs = vRankSeed(seed, rank);
  if (!l.isFloat) {
    const int bits = l.bits < 52 ? l.bits : 52;
    if (l.isSigned) {
      const double half = fmax(1.0, floor(vPow2(bits - 1) / n));
      return vBelowD(2 * half, rs, idx, 11) - half;
    }
    return vBelowD(fmax(1.0, floor((vPow2(bits) - 1) / n)), rs, idx, 11);
  }
  const double half = fmax(1.0, floor(vPow2(l.bits) / n));
  const int e = l.emin + static_cast<int>(vBelow(l.emax - l.emin + 1, seed, idx, 13));
  return (vBelowD(2 * half, rs, idx, 11) - half) * vPow2(e);
}

NN_HD inline double vProdInput(const VLayout& l, int n, int rank, uint32_t seed, uint64_t idx) {
  const int chosen = static_cast<int>(vBelow(n, seed, idx, 17));
  const uint32_t rs = vRankSeed(seed, rank);
  const double sign = l.isSigned && (vHash3(rs, static_cast<uint32_t>(idx), 19) & 1u) ? -1.0 : 1.0;
  if (!l.isFloat) {
    if (rank != chosen) return sign;
    const double max = vPow2((l.bits < 52 ? l.bits : 52) - (l.isSigned ? 1 : 0)) - 1;
    return sign * (1 + vBelowD(max, seed, idx, 23));
  }
  if (rank != chosen) return sign * (n <= 8 && (vHash3(rs, static_cast<uint32_t>(idx), 29) & 1u) ? 2.0 : 1.0);
  const double m = 1 + vBelowD(vPow2(l.bits), seed, idx, 23) / vPow2(l.bits);
  return sign * m * vPow2(static_cast<int>(vBelow(9, seed, idx, 31)) - 4);
}

NN_HD inline double vAnyInput(const VLayout& l, int rank, uint32_t seed, uint64_t idx) {
  const uint32_t rs = vRankSeed(seed, rank);
  if (!l.isFloat) {
    const int bits = l.bits < 52 ? l.bits : 52;
    return vBelowD(vPow2(bits), rs, idx, 37) - (l.isSigned ? vPow2(bits - 1) : 0.0);
  }
  const double m = 1 + vBelowD(vPow2(l.bits), rs, idx, 41) / vPow2(l.bits);
  const int e = l.emin + static_cast<int>(vBelow(l.emax - l.emin + 1, rs, idx, 43));
  return ((vHash3(rs, static_cast<uint32_t>(idx), 47) & 1u) ? -1.0 : 1.0) * m * vPow2(e);
}

NN_HD inline double vInputValue(const VLayout& l, int op, int n, int rank, uint32_t seed, uint64_t idx) {
  if (op == kVOpSum || op == kVOpAvg) return vSumInput(l, n, rank, seed, idx);
  if (op == kVOpProd) return vProdInput(l, n, rank, seed, idx);
  return vAnyInput(l, rank, seed, idx);
}

// The reduction over ranks 0..n-1 in rank order, as expectedValue does it.
NN_HD inline double vExpectedValue(const VLayout& l, int op, int n, uint32_t seed, uint64_t idx) {
  double acc = vInputValue(l, op, n, 0, seed, idx);
  for (int r = 1; r < n; ++r) {
    const double v = vInputValue(l, op, n, r, seed, idx);
    if (op == kVOpSum || op == kVOpAvg) acc += v;
    else if (op == kVOpProd) acc *= v;
    else if (op == kVOpMin) acc = v < acc ? v : acc;  // Math.min: no NaN or -0 is ever generated
    else acc = v > acc ? v : acc;
  }
  if (op != kVOpAvg) return acc;
  return l.isFloat ? acc / n : trunc(acc / n);
}

// store() of verifiable.ts: integers wrap modulo the width (TypedArray assignment and
// the int64 two-word split); half and bfloat16 round to float32 first, as floatToHalf does.
NN_HD inline void vStore(void* base, uint64_t i, int dtype, double v) {
  switch (dtype) {
    case 0: case 1: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case 2: case 3: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(static_cast<int64_t>(v)); break;
    case 4: case 5: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
    case 6: static_cast<uint16_t*>(base)[i] = nnFloatToHalf(static_cast<float>(v)); break;
    case 7: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case 8: static_cast<double*>(base)[i] = v; break;
    default: static_cast<uint16_t*>(base)[i] = nnFloatToBf16(static_cast<float>(v)); break;
  }
}

// nilBits: random bits for copies; floats get a finite exponent (no NaN payloads).
NN_HD inline void vStoreNil(void* base, uint64_t i, int dtype, uint32_t seed, uint64_t idx) {
  const VLayout l = vLayout(dtype);
  const uint32_t x = static_cast<uint32_t>(idx);
  const uint32_t h = vHash3(seed, x, 53);
  if (l.bytes == 8) {
    const uint64_t hi = l.isFloat ? ((h & 0x800fffffu) | 0x3ff00000u) : h;
    static_cast<uint64_t*>(base)[i] = (hi << 32) | vHash3(seed, x, 59);
  } else if (l.bytes == 1) {
    static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(h);
  } else if (l.bytes == 4) {
    static_cast<uint32_t*>(base)[i] = l.isFloat ? ((h & 0x807fffffu) | 0x3f800000u) : h;
  } else {
    static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(l.bits == 10 ? ((h & 0x83ffu) | 0x3c00u) : ((h & 0x807fu) | 0x3f80u));
  }
}

// Element i of a prepared buffer: rank's input (rank >= 0) or the expected result
// (rank < 0) for elements offset + i. For nil both are the copy pattern.
NN_HD inline void vPrepare(void* base, uint64_t i, int dtype, int op, int n, int rank, uint32_t seed, uint64_t offset) {
  if (op == kVOpNil) { vStoreNil(base, i, dtype, seed, offset + i); return; }
  const VLayout l = vLayout(dtype);
  const double v = rank >= 0 ? vInputValue(l, op, n, rank, seed, offset + i) : vExpectedValue(l, op, n, seed, offset + i);
  vStore(base, i, dtype, v);
}

// countWrong for one element: the bits as unsigned integers of the element width
// differ by more than the tolerance (2 ULP for floating-point avg, else 0).
NN_HD inline bool vWrong(const void* actual, const void* expected, uint64_t i, int dtype, int op) {
  const VLayout l = vLayout(dtype);
  const uint64_t tol = l.isFloat && op == kVOpAvg ? 2 : 0;
  uint64_t a, e;
  switch (l.bytes) {
    case 1: a = static_cast<const uint8_t*>(actual)[i]; e = static_cast<const uint8_t*>(expected)[i]; break;
    case 2: a = static_cast<const uint16_t*>(actual)[i]; e = static_cast<const uint16_t*>(expected)[i]; break;
    case 4: a = static_cast<const uint32_t*>(actual)[i]; e = static_cast<const uint32_t*>(expected)[i]; break;
    default: a = static_cast<const uint64_t*>(actual)[i]; e = static_cast<const uint64_t*>(expected)[i]; break;
  }
  return (a > e ? a - e : e - a) > tol;
}

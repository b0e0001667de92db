// The verifiable data of verifiable_defs.h for host memory, with every per-call constant
// taken out of the per-element loop: rank seeds, the layout's limits, powers of two (a
// table instead of ldexp), and the moduli of vBelow (a mask for powers of two, else a
// multiplication by the reciprocal corrected to the exact remainder, instead of a 64-bit
// division). Values shared by every rank of an element (sum's exponent, prod's chosen
// rank) are drawn once per element for the expected result. The arithmetic that makes
// each value is the same as in verifiable_defs.h, operation for operation, so the bits
// are identical (test/bench/verifiable.test.ts compares them with the TypeScript
// reference); only the work around it is gone, which makes preparing 256 MiB a
// fraction of a second instead of seconds.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "verifiable_defs.h"

namespace ncclnode {

// x % d for x < 2^53 and 1 <= d <= 2^53, exactly, without a division.
struct VMod {
  uint64_t d;
  uint64_t mask;
  double inv;
  bool pow2;
  explicit VMod(double n = 1) : d(static_cast<uint64_t>(n)), mask(d - 1), inv(1.0 / static_cast<double>(d)), pow2((d & (d - 1)) == 0) {}
  uint64_t operator()(uint64_t x) const {
    if (pow2) return x & mask;
    // The product is within a few units of the true quotient (both operands are exact
    // doubles); the remainder is then brought into [0, d) by whole steps of d.
    const int64_t q = static_cast<int64_t>(static_cast<double>(x) * inv);
    int64_t r = static_cast<int64_t>(x) - q * static_cast<int64_t>(d);
    while (r < 0) r += static_cast<int64_t>(d);
    while (r >= static_cast<int64_t>(d)) r -= static_cast<int64_t>(d);
    return static_cast<uint64_t>(r);
  }
};

// vLayout as a constant expression (the same table), for the templates below.
constexpr VLayout vLayoutC(int dtype) {
  return dtype == 0 ? VLayout{1, false, true, 8, 0, 0}
       : dtype == 1 ? VLayout{1, false, false, 8, 0, 0}
       : dtype == 2 ? VLayout{4, false, true, 32, 0, 0}
       : dtype == 3 ? VLayout{4, false, false, 32, 0, 0}
       : dtype == 4 ? VLayout{8, false, true, 64, 0, 0}
       : dtype == 5 ? VLayout{8, false, false, 64, 0, 0}
       : dtype == 6 ? VLayout{2, true, true, 10, -20, 4}
       : dtype == 7 ? VLayout{4, true, true, 23, -30, 30}
       : dtype == 8 ? VLayout{8, true, true, 52, -60, 60}
                    : VLayout{2, true, true, 7, -20, 20};
}

// vBelow with its modulus precomputed.
inline uint64_t vBelowM(const VMod& m, uint32_t seed, uint32_t x, uint32_t salt) {
  const uint64_t hi = vHash3(seed, x, salt) & ((1u << 21) - 1);
  return m((hi << 32) + vHash3(seed, x, salt + 1));
}

// One call's constants: the layout, the op, the rank count, and what the generators
// derive from them. The element functions take the dtype and op as template
// arguments, so each (dtype, op) pair compiles to a loop without their branches.
struct VGen {
  VLayout l;
  int op, n;
  uint32_t seed;
  std::vector<uint32_t> rs;  // vRankSeed(seed, r) for every rank
  double half = 0;           // sum: the bound of the drawn integers
  VMod sumK, expo, chosen, prodInt, mant, nine, anyK;
  double anyShift = 0;       // min/max integers: subtracted for signed types
  double mantScale = 1;      // 2^bits
  double p2[128];            // 2^(emin + k)
  double p2prod[9];          // 2^(k - 4)

  VGen(int dtype, int op_, int n_, uint32_t seed_) : l(vLayout(dtype)), op(op_), n(n_), seed(seed_), rs(static_cast<size_t>(n_)) {
    for (int r = 0; r < n; ++r) rs[r] = vRankSeed(seed, r);
    const int ibits = l.bits < 52 ? l.bits : 52;
    if (!l.isFloat) {
      half = l.isSigned ? fmax(1.0, floor(vPow2(ibits - 1) / n)) : fmax(1.0, floor((vPow2(ibits) - 1) / n));
      sumK = VMod(l.isSigned ? 2 * half : half);
      prodInt = VMod(vPow2(ibits - (l.isSigned ? 1 : 0)) - 1);
      anyK = VMod(vPow2(ibits));
      anyShift = l.isSigned ? vPow2(ibits - 1) : 0.0;
    } else {
      half = fmax(1.0, floor(vPow2(l.bits) / n));
      sumK = VMod(2 * half);
      mantScale = vPow2(l.bits);
      mant = VMod(mantScale);
    }
    expo = VMod(l.emax - l.emin + 1);
    for (int k = 0; k <= l.emax - l.emin && k < 128; ++k) p2[k] = vPow2(l.emin + k);
    chosen = VMod(n);
    nine = VMod(9);
    for (int k = 0; k < 9; ++k) p2prod[k] = vPow2(k - 4);
  }

  // vSumInput; `pe` is 2^e for floats (drawn from seed and idx alone, shared by all ranks).
  template <int DT>
  double sum(int rank, uint32_t x, double pe) const {
    constexpr VLayout l = vLayoutC(DT);
    const double k = static_cast<double>(vBelowM(sumK, rs[rank], x, 11));
    if (!l.isFloat) return l.isSigned ? k - half : k;
    return (k - half) * pe;
  }
  double sumPow(uint32_t x) const { return p2[vBelowM(expo, seed, x, 13)]; }

  // vProdInput; `ch` is the chosen rank of this element.
  template <int DT>
  double prod(int rank, uint32_t x, int ch) const {
    constexpr VLayout l = vLayoutC(DT);
    const uint32_t r = rs[rank];
    const double sign = l.isSigned && (vHash3(r, x, 19) & 1u) ? -1.0 : 1.0;
    if (!l.isFloat) {
      if (rank != ch) return sign;
      return sign * (1 + static_cast<double>(vBelowM(prodInt, seed, x, 23)));
    }
    if (rank != ch) return sign * (n <= 8 && (vHash3(r, x, 29) & 1u) ? 2.0 : 1.0);
    const double m = 1 + static_cast<double>(vBelowM(mant, seed, x, 23)) / mantScale;
    return sign * m * p2prod[vBelowM(nine, seed, x, 31)];
  }
  int prodChosen(uint32_t x) const { return static_cast<int>(vBelowM(chosen, seed, x, 17)); }

  // vAnyInput (min and max).
  template <int DT>
  double any(int rank, uint32_t x) const {
    constexpr VLayout l = vLayoutC(DT);
    const uint32_t r = rs[rank];
    if (!l.isFloat) return static_cast<double>(vBelowM(anyK, r, x, 37)) - anyShift;
    const double m = 1 + static_cast<double>(vBelowM(mant, r, x, 41)) / mantScale;
    const double pe = p2[vBelowM(expo, r, x, 43)];
    return ((vHash3(r, x, 47) & 1u) ? -1.0 : 1.0) * m * pe;
  }

  // vInputValue for one rank.
  template <int DT, int OP>
  double input(int rank, uint32_t x) const {
    constexpr VLayout l = vLayoutC(DT);
    if (OP == kVOpSum || OP == kVOpAvg) return sum<DT>(rank, x, l.isFloat ? sumPow(x) : 1.0);
    if (OP == kVOpProd) return prod<DT>(rank, x, prodChosen(x));
    return any<DT>(rank, x);
  }

  // vExpectedValue: the same values combined in rank order.
  template <int DT, int OP>
  double expected(uint32_t x) const {
    constexpr VLayout l = vLayoutC(DT);
    if (OP == kVOpSum || OP == kVOpAvg) {
      const double pe = l.isFloat ? sumPow(x) : 1.0;
      double acc = sum<DT>(0, x, pe);
      for (int r = 1; r < n; ++r) acc += sum<DT>(r, x, pe);
      if (OP == kVOpSum) return acc;
      return l.isFloat ? acc / n : trunc(acc / n);
    }
    if (OP == kVOpProd) {
      const int ch = prodChosen(x);
      double acc = prod<DT>(0, x, ch);
      for (int r = 1; r < n; ++r) acc *= prod<DT>(r, x, ch);
      return acc;
    }
    double acc = any<DT>(0, x);
    for (int r = 1; r < n; ++r) {
      const double v = any<DT>(r, x);
      acc = OP == kVOpMin ? (v < acc ? v : acc) : (v > acc ? v : acc);
    }
    return acc;
  }
};

}  // namespace ncclnode

namespace ncclnode {

// Calls f(std::integral_constant<int, dtype>, std::integral_constant<int, op>) for op 0..4.
template <int DT, typename F>
void vWithOp(int op, F&& f) {
  switch (op) {
    case kVOpSum: f(std::integral_constant<int, DT>{}, std::integral_constant<int, kVOpSum>{}); break;
    case kVOpProd: f(std::integral_constant<int, DT>{}, std::integral_constant<int, kVOpProd>{}); break;
    case kVOpMax: f(std::integral_constant<int, DT>{}, std::integral_constant<int, kVOpMax>{}); break;
    case kVOpMin: f(std::integral_constant<int, DT>{}, std::integral_constant<int, kVOpMin>{}); break;
    default: f(std::integral_constant<int, DT>{}, std::integral_constant<int, kVOpAvg>{}); break;
  }
}

template <typename F>
void vWithTypes(int dtype, int op, F&& f) {
  switch (dtype) {
    case 0: vWithOp<0>(op, f); break;
    case 1: vWithOp<1>(op, f); break;
    case 2: vWithOp<2>(op, f); break;
    case 3: vWithOp<3>(op, f); break;
    case 4: vWithOp<4>(op, f); break;
    case 5: vWithOp<5>(op, f); break;
    case 6: vWithOp<6>(op, f); break;
    case 7: vWithOp<7>(op, f); break;
    case 8: vWithOp<8>(op, f); break;
    default: vWithOp<9>(op, f); break;
  }
}

}  // namespace ncclnode

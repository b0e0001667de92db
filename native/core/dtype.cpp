#include "dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace ncclnode {

size_t elementSize(DType t) {
  switch (t) {
    case DType::Int8: case DType::Uint8: case DType::Float8e4m3: case DType::Float8e5m2: return 1;
    case DType::Float16: case DType::Bfloat16: return 2;
    case DType::Int32: case DType::Uint32: case DType::Float32: return 4;
    case DType::Int64: case DType::Uint64: case DType::Float64: return 8;
  }
  return 0;
}

const char* dtypeName(DType t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16",
                                "float8e4m3", "float8e5m2"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDTypes ? names[i] : "unknown";
}

const char* redOpName(RedOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? names[i] : "unknown";
}

bool isFloating(DType t) {
  return t == DType::Float16 || t == DType::Float32 || t == DType::Float64 || t == DType::Bfloat16 ||
         t == DType::Float8e4m3 || t == DType::Float8e5m2;
}

namespace {

struct Fp8Format {
  int mantissaBits, bias;
  bool ieee;     // E5M2: all-ones exponent is Inf/NaN; E4M3: only S.1111.111 is NaN
  double maxFinite;
  uint8_t nan;
};
constexpr Fp8Format kE4M3{3, 7, false, 448.0, 0x7f};
constexpr Fp8Format kE5M2{2, 15, true, 57344.0, 0x7f};
const Fp8Format& fp8Format(DType t) { return t == DType::Float8e4m3 ? kE4M3 : kE5M2; }

}  // namespace

float fp8ToFloat(uint8_t v, DType t) {
  const Fp8Format& f = fp8Format(t);
  const int expBits = 7 - f.mantissaBits;
  const int expMax = (1 << expBits) - 1;
  const double sign = (v & 0x80) ? -1.0 : 1.0;
  const int e = (v >> f.mantissaBits) & expMax;
  const int m = v & ((1 << f.mantissaBits) - 1);
  if (f.ieee && e == expMax) return m ? NAN : static_cast<float>(sign * INFINITY);
  if (!f.ieee && e == expMax && m == (1 << f.mantissaBits) - 1) return NAN;
  const double scale = std::ldexp(1.0, -f.mantissaBits);
  if (e == 0) return static_cast<float>(sign * m * scale * std::ldexp(1.0, 1 - f.bias));
  return static_cast<float>(sign * (1.0 + m * scale) * std::ldexp(1.0, e - f.bias));
}

uint8_t floatToFp8(double x, DType t) {
  const Fp8Format& f = fp8Format(t);
  if (std::isnan(x)) return f.nan;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(x);
  if (a >= f.maxFinite) a = f.maxFinite;  // saturate (Inf included)
  // The spacing of representable values around a: subnormal below 2^(1-bias).
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int minExp = 1 - f.bias;
  const int unitExp = std::max(e - 1, minExp) - f.mantissaBits;
  const double q = std::nearbyint(std::ldexp(a, -unitExp));  // ties to even (default rounding mode)
  const double r = std::ldexp(q, unitExp);
  if (r == 0) return sign;
  int re;
  std::frexp(r, &re);
  const int expBits = std::max(re - 1, minExp) + f.bias;  // biased exponent, 1 for subnormals' scale
  const bool subnormal = re - 1 < minExp;
  const int mant = static_cast<int>(std::ldexp(r, -(std::max(re - 1, minExp) - f.mantissaBits))) -
                   (subnormal ? 0 : (1 << f.mantissaBits));
  return sign | static_cast<uint8_t>(((subnormal ? 0 : expBits) << f.mantissaBits) | mant);
}

// _Float16 conversions go through libgcc's IEEE round-to-nearest-even routines.
float halfToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

uint16_t floatToHalf(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

namespace {

// Integers wrap modulo 2^bits as on the GPU; computing in the unsigned type keeps
// signed overflow defined.
template <class T, bool = std::is_integral<T>::value>
struct Wide { using type = T; };
template <class T>
struct Wide<T, true> { using type = typename std::make_unsigned<decltype(T() + T())>::type; };

struct Sum {
  template <class T> static T apply(T a, T b) {
    using W = typename Wide<T>::type;
    return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
  }
};
struct Prod {
  template <class T> static T apply(T a, T b) {
    using W = typename Wide<T>::type;
    return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
  }
};
struct Max { template <class T> static T apply(T a, T b) { return std::max(a, b); } };
struct Min { template <class T> static T apply(T a, T b) { return std::min(a, b); } };

template <class T, class Op>
void reduceNative(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], y[i]);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), class Op>
void reduceHalf(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FromF(Op::apply(ToF(x[i]), ToF(y[i])));
}

// NCCL reduces fp8 by widening both operands to half, combining in half (one
// rounding), and narrowing back with saturation; an exact double intermediate
// rounded once to half is the same value.
// Max and min as __hmax/__hmin: a NaN operand yields the other one.
template <class Op> double applyFp8(double a, double b) { return Op::apply(a, b); }
template <> double applyFp8<Max>(double a, double b) { return std::fmax(a, b); }
template <> double applyFp8<Min>(double a, double b) { return std::fmin(a, b); }

template <DType T, class Op>
void reduceFp8(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint8_t*>(out);
  auto* x = static_cast<const uint8_t*>(a);
  auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    const double v = applyFp8<Op>(fp8ToFloat(x[i], T), fp8ToFloat(y[i], T));
    o[i] = floatToFp8(static_cast<double>(static_cast<_Float16>(v)), T);
  }
}

template <class Op>
ReduceFn forType(DType t) {
  switch (t) {
    case DType::Int8: return reduceNative<int8_t, Op>;
    case DType::Uint8: return reduceNative<uint8_t, Op>;
    case DType::Int32: return reduceNative<int32_t, Op>;
    case DType::Uint32: return reduceNative<uint32_t, Op>;
    case DType::Int64: return reduceNative<int64_t, Op>;
    case DType::Uint64: return reduceNative<uint64_t, Op>;
    case DType::Float32: return reduceNative<float, Op>;
    case DType::Float64: return reduceNative<double, Op>;
    case DType::Float16: return reduceHalf<halfToFloat, floatToHalf, Op>;
    case DType::Bfloat16: return reduceHalf<bf16ToFloat, floatToBf16, Op>;
    case DType::Float8e4m3: return reduceFp8<DType::Float8e4m3, Op>;
    case DType::Float8e5m2: return reduceFp8<DType::Float8e5m2, Op>;
  }
  return nullptr;
}

template <class T>
void divideNative(void* data, size_t n, int d) {
  auto* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <DType T>
void divideFp8(void* data, size_t n, int d) {
  auto* p = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = floatToFp8(fp8ToFloat(p[i], T) / static_cast<float>(d), T);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divideHalf(void* data, size_t n, int d) {
  auto* p = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) / static_cast<float>(d));
}

}  // namespace

ReduceFn reduceFunction(DType t, RedOp op) {
  switch (op) {
    case RedOp::Sum: case RedOp::Avg: return forType<Sum>(t);
    case RedOp::Prod: return forType<Prod>(t);
    case RedOp::Max: return forType<Max>(t);
    case RedOp::Min: return forType<Min>(t);
  }
  return nullptr;
}

void divideInPlace(void* data, DType t, size_t n, int d) {
  switch (t) {
    case DType::Int8: return divideNative<int8_t>(data, n, d);
    case DType::Uint8: return divideNative<uint8_t>(data, n, d);
    case DType::Int32: return divideNative<int32_t>(data, n, d);
    case DType::Uint32: return divideNative<uint32_t>(data, n, d);
    case DType::Int64: return divideNative<int64_t>(data, n, d);
    case DType::Uint64: return divideNative<uint64_t>(data, n, d);
    case DType::Float32: return divideNative<float>(data, n, d);
    case DType::Float64: return divideNative<double>(data, n, d);
    case DType::Float16: return divideHalf<halfToFloat, floatToHalf>(data, n, d);
    case DType::Bfloat16: return divideHalf<bf16ToFloat, floatToBf16>(data, n, d);
    case DType::Float8e4m3: return divideFp8<DType::Float8e4m3>(data, n, d);
    case DType::Float8e5m2: return divideFp8<DType::Float8e5m2>(data, n, d);
  }
}

}  // namespace ncclnode

#include "dtype.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace ncclnode {

size_t elementSize(DType t) {
  switch (t) {
    case DType::Int8: case DType::Uint8: return 1;
    case DType::Float16: case DType::Bfloat16: return 2;
    case DType::Int32: case DType::Uint32: case DType::Float32: return 4;
    case DType::Int64: case DType::Uint64: case DType::Float64: return 8;
  }
  return 0;
}

const char* dtypeName(DType t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDTypes ? names[i] : "unknown";
}

const char* redOpName(RedOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? names[i] : "unknown";
}

bool isFloating(DType t) {
  return t == DType::Float16 || t == DType::Float32 || t == DType::Float64 || t == DType::Bfloat16;
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
  }
  return nullptr;
}

template <class T>
void divideNative(void* data, size_t n, int d) {
  auto* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
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
  }
}

}  // namespace ncclnode

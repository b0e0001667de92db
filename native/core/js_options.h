// Reading fields of an options object that src/ has already validated with zod:
// only the types are re-checked here, with a fallback for absent fields.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace ncclnode {

inline std::string str(const Napi::Object& o, const char* key, const std::string& fallback = "") {
  Napi::Value v = o.Get(key);
  return v.IsString() ? v.As<Napi::String>().Utf8Value() : fallback;
}

inline int64_t num(const Napi::Object& o, const char* key, int64_t fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().Int64Value() : fallback;
}

inline double dbl(const Napi::Object& o, const char* key, double fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
}

inline bool flagOr(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = o.Get(key);
  return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : fallback;
}

}  // namespace ncclnode

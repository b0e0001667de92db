// The V8 value behind a Node-API value, for the few places that need V8 itself
// (buffers.cpp: backing stores; prepared_call.cpp: detach watches). Ties the including
// file to the Node.js major version the addon is built for (see buffers.cpp).
#pragma once

#include <napi.h>
#include <v8.h>

#include <cstring>

namespace ncclnode {

// napi_value is a v8::Local<v8::Value> in disguise (Node's own
// v8impl::V8LocalValueFromJsValue does exactly this copy).
inline v8::Local<v8::Value> toV8(const Napi::Value& value) {
  napi_value raw = value;
  v8::Local<v8::Value> local;
  static_assert(sizeof local == sizeof raw, "napi_value and v8::Local differ in size");
  std::memcpy(static_cast<void*>(&local), &raw, sizeof raw);
  return local;
}

}  // namespace ncclnode

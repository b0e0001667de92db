// Builds the JS-side error objects native code rejects and throws with: a plain
// Error carrying `code`, which src/errors.ts turns into an NcclNodeError.
#pragma once

#include <napi.h>

#include <string>

#include "errors.h"

namespace ncclnode {

Napi::Error makeError(Napi::Env env, Code code, const std::string& message);

// Runs f; a native Error becomes a thrown JS error with its code.
template <class F>
auto guard(Napi::Env env, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    makeError(env, e.code(), e.what()).ThrowAsJavaScriptException();
  } catch (const std::exception& e) {
    makeError(env, Code::Backend, e.what()).ThrowAsJavaScriptException();
  }
  return decltype(f())();
}

}  // namespace ncclnode

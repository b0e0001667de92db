// Builds the JS-side error objects native code rejects and throws with: an
// NcclNodeError (the class src/native.ts hands over with setErrorConstructor),
// made with the stable code and the message, so JavaScript gets it as thrown.
#pragma once

#include <napi.h>

#include <string>

#include "errors.h"

namespace ncclnode {

// new NcclNodeError(codeName(code), message); before setErrorConstructor, a plain
// Error with a `code` property. JS thread only.
Napi::Error makeError(Napi::Env env, Code code, const std::string& message);

// setErrorConstructor(ctor): remembers the class for this environment.
Napi::Value SetErrorConstructor(const Napi::CallbackInfo& info);

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

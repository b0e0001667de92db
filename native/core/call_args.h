// A native method's arguments, read once from Node-API into a fixed array. For the
// communicator's per-call methods (submit, submitSync), whose cost is counted in
// hundreds of nanoseconds: Napi::CallbackInfo allocates on the heap for more than six
// arguments (submit takes fourteen), and an ObjectWrap method unwraps `this` on every
// call, a private-symbol lookup V8 makes through its runtime (perf: about a tenth of
// a 1-rank submit). Functions made with makeFastMethod() get their communicator from
// the function's data instead.
#pragma once

#include <napi.h>

#include <cstddef>

namespace ncclnode {

class CallArgs {
 public:
  static constexpr size_t kMax = 16;

  // data, when given, receives the function's data pointer.
  // Node-API fills the slots past the last argument with undefined.
  CallArgs(napi_env env, napi_callback_info info, void** data = nullptr) : env_(env) {
    size_t argc = kMax;
    napi_get_cb_info(env, info, &argc, argv_, nullptr, data);
    argc_ = argc < kMax ? argc : kMax;
  }
  explicit CallArgs(const Napi::CallbackInfo& info) : env_(info.Env()) {
    argc_ = info.Length() < kMax ? info.Length() : kMax;
    for (size_t i = 0; i < kMax; ++i) argv_[i] = info[i];
  }

  Napi::Env Env() const { return Napi::Env(env_); }
  size_t Length() const { return argc_; }
  // Undefined past the last argument, as Napi::CallbackInfo gives it.
  Napi::Value operator[](size_t i) const { return i < kMax ? Napi::Value(env_, argv_[i]) : Env().Undefined(); }

 private:
  napi_env env_;
  napi_value argv_[kMax];
  size_t argc_ = 0;
};

}  // namespace ncclnode

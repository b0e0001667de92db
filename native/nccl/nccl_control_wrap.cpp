#include "nccl_control_wrap.h"

#include "../core/buffers.h"
#include "../core/js_errors.h"
#include "../cuda/gpu_env.h"
#include "nccl_backend.h"

namespace ncclnode {

namespace {

BufferView deviceArg(const Napi::Value& v, const char* call) {
  BufferView view;
  if (!deviceBufferView(v, &view)) throw Error(Code::InvalidArgument, std::string(call) + ": expected a DeviceBuffer");
  return view;
}

void* handleArg(const Napi::Value& v) {
  if (!v.IsBigInt()) throw Error(Code::InvalidArgument, "expected a registration handle (bigint)");
  bool lossless = false;
  return reinterpret_cast<void*>(v.As<Napi::BigInt>().Uint64Value(&lossless));
}

}  // namespace

Napi::Function NcclControlWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeNcclControl",
                     {InstanceMethod<&NcclControlWrap::TakeChild>("takeChild"),
                      InstanceMethod<&NcclControlWrap::Register>("register"),
                      InstanceMethod<&NcclControlWrap::Deregister>("deregister"),
                      InstanceMethod<&NcclControlWrap::RegisterHost>("registerHost"),
                      InstanceMethod<&NcclControlWrap::WindowRegister>("windowRegister"),
                      InstanceMethod<&NcclControlWrap::WindowDeregister>("windowDeregister"),
                      InstanceMethod<&NcclControlWrap::FlightRecord>("flightRecord")});
}

Napi::Object NcclControlWrap::New(Napi::Env env, std::shared_ptr<NcclControl> ctl) {
  auto* holder = new std::shared_ptr<NcclControl>(std::move(ctl));
  auto ext = Napi::External<std::shared_ptr<NcclControl>>::New(env, holder,
                                                               [](Napi::Env, std::shared_ptr<NcclControl>* h) { delete h; });
  return gpuEnv(env).ncclControlCtor.New({ext});
}

NcclControlWrap::NcclControlWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NcclControlWrap>(info) {
  if (!info[0].IsExternal()) {
    makeError(info.Env(), Code::InvalidArgument, "NativeNcclControl is made by createNccl").ThrowAsJavaScriptException();
    return;
  }
  ctl_ = *info[0].As<Napi::External<std::shared_ptr<NcclControl>>>().Data();
}

Napi::Value NcclControlWrap::TakeChild(const Napi::CallbackInfo& info) {
  auto child = ctl_->popChild();
  if (!child) return info.Env().Null();
  return New(info.Env(), std::move(child));
}

// ncclCommRegister: local, cheap; run under the communicator lock so it never
// overlaps the worker's NCCL calls (NCCL is not thread-safe per communicator).
Napi::Value NcclControlWrap::Register(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    BufferView v = deviceArg(info[0], "register");
    void* handle = nullptr;
    ctl_->withBackend([&](NcclBackend& b) {
      b.withComm([&](const NcclApi& api, ncclComm comm) {
        ncclCheck(api, api.need(api.CommRegister, "ncclCommRegister", 21900)(comm, v.data, v.bytes, &handle),
                  "ncclCommRegister", comm);
      });
      b.holdRegistered(handle, std::move(v.keep));
    });
    return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));
  });
}

// Host memory the caller page-locked (PinnedHostBuffer): ncclCommRegister accepts
// it for network transports; deregistered with Deregister like a device buffer.
Napi::Value NcclControlWrap::RegisterHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsArrayBuffer()) throw Error(Code::InvalidArgument, "registerHost: expected a pinned ArrayBuffer");
    BufferView v = hostViewOf(info[0], "registerHost");
    if (v.bytes == 0) throw Error(Code::InvalidArgument, "registerHost: the buffer is empty");
    void* handle = nullptr;
    ctl_->withBackend([&](NcclBackend& b) {
      b.withComm([&](const NcclApi& api, ncclComm comm) {
        ncclCheck(api, api.need(api.CommRegister, "ncclCommRegister", 21900)(comm, v.data, v.bytes, &handle),
                  "ncclCommRegister", comm);
      });
      b.holdRegistered(handle, std::move(v.keep));
    });
    return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));
  });
}

Napi::Value NcclControlWrap::Deregister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    void* handle = handleArg(info[0]);
    std::shared_ptr<void> memory;  // freed, if it was disposed, once NCCL let go and the lock is released
    ctl_->withBackend([&](NcclBackend& b) {
      b.withComm([&](const NcclApi& api, ncclComm comm) {
        ncclCheck(api, api.need(api.CommDeregister, "ncclCommDeregister", 21900)(comm, handle), "ncclCommDeregister", comm);
      });
      memory = b.takeRegistered(handle);
    });
    return env.Undefined();
  });
}

// Symmetric memory (NCCL >= 2.27). Collective in NCCL: every rank must register.
Napi::Value NcclControlWrap::WindowRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    BufferView v = deviceArg(info[0], "windowRegister");
    const int flags = info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 1;  // NCCL_WIN_COLL_SYMMETRIC
    ncclWindow win = nullptr;
    ctl_->withBackend([&](NcclBackend& b) {
      b.withComm([&](const NcclApi& api, ncclComm comm) {
        ncclCheck(api, api.need(api.CommWindowRegister, "ncclCommWindowRegister", 22700)(comm, v.data, v.bytes, &win, flags),
                  "ncclCommWindowRegister", comm);
      });
      if (win) b.holdRegistered(win, std::move(v.keep));
    });
    // Since 2.29.2 a NULL window means the system cannot register windows.
    if (!win) throw Error(Code::Unavailable, "ncclCommWindowRegister: this system does not support symmetric windows");
    return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(win)));
  });
}

Napi::Value NcclControlWrap::WindowDeregister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto win = static_cast<ncclWindow>(handleArg(info[0]));
    std::shared_ptr<void> memory;  // as in Deregister
    ctl_->withBackend([&](NcclBackend& b) {
      b.withComm([&](const NcclApi& api, ncclComm comm) {
        ncclCheck(api, api.need(api.CommWindowDeregister, "ncclCommWindowDeregister", 22700)(comm, win),
                  "ncclCommWindowDeregister", comm);
      });
      memory = b.takeRegistered(win);
    });
    return env.Undefined();
  });
}

Napi::Value NcclControlWrap::FlightRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    std::string json;
    ctl_->withBackend([&](NcclBackend& b) { json = b.recorder().json(); });
    return Napi::String::New(env, json);
  });
}

}  // namespace ncclnode

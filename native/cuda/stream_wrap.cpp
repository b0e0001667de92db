#include "stream_wrap.h"

#include "../core/js_errors.h"
#include "device_buffer.h"
#include "gpu_env.h"
#include "poller.h"

namespace ncclnode {

const napi_type_tag kStreamTag = {0x6e63636c6e6f6465ULL, 0x73747265616d0002ULL};
const napi_type_tag kEventTag = {0x6e63636c6e6f6465ULL, 0x6576656e74000003ULL};

bool hasTag(Napi::Env env, const Napi::Value& v, const napi_type_tag& tag) {
  if (!v.IsObject()) return false;
  bool result = false;
  napi_check_object_type_tag(env, v, &tag, &result);
  return result;
}

Napi::Function StreamWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeStream",
                     {InstanceMethod<&StreamWrap::Synchronize>("synchronize"),
                      InstanceMethod<&StreamWrap::Query>("query"),
                      InstanceMethod<&StreamWrap::WaitEvent>("waitEvent"),
                      InstanceMethod<&StreamWrap::Destroy>("destroy"),
                      InstanceAccessor<&StreamWrap::GetDevice>("device")});
}

StreamWrap::StreamWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StreamWrap>(info) {
  Napi::Env env = info.Env();
  try {
    device_ = info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
    useDevice(device_);
    cuCheck(cuda().cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
    napi_type_tag_object(env, info.This(), &kStreamTag);
  } catch (const Error& e) {
    makeError(env, e.code(), e.what()).ThrowAsJavaScriptException();
  }
}

StreamWrap::~StreamWrap() { destroy(); }

void StreamWrap::destroy() {
  if (!stream_) return;
  try {
    useDevice(device_);
    cuda().cuStreamDestroy(stream_);  // queued work still completes
  } catch (...) {
  }
  stream_ = nullptr;
}

CUstream StreamWrap::handle() const {
  if (!stream_) throw Error(Code::InvalidArgument, "the Stream was destroyed");
  return stream_;
}

Napi::Value StreamWrap::Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    return gpuEnv(env).poller->afterStream(env, device_, handle(), nullptr, {Value()});
  });
}

Napi::Value StreamWrap::Query(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUresult r = cuda().cuStreamQuery(handle());
    if (r != kCudaNotReady) cuCheck(r, "cuStreamQuery");
    return Napi::Boolean::New(env, r == kCudaSuccess);
  });
}

Napi::Value StreamWrap::WaitEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!hasTag(env, info[0], kEventTag)) throw Error(Code::InvalidArgument, "waitEvent: expected an Event");
    useDevice(device_);
    cuCheck(cuda().cuStreamWaitEvent(handle(), EventWrap::Unwrap(info[0].As<Napi::Object>())->handle(), 0),
            "cuStreamWaitEvent");
    return env.Undefined();
  });
}

Napi::Value StreamWrap::Destroy(const Napi::CallbackInfo& info) {
  destroy();
  return info.Env().Undefined();
}

Napi::Function EventWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeEvent",
                     {InstanceMethod<&EventWrap::Record>("record"), InstanceMethod<&EventWrap::Query>("query"),
                      InstanceMethod<&EventWrap::Synchronize>("synchronize"),
                      InstanceMethod<&EventWrap::ElapsedMs>("elapsedMs"),
                      InstanceMethod<&EventWrap::Destroy>("destroy")});
}

EventWrap::EventWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EventWrap>(info) {
  Napi::Env env = info.Env();
  try {
    device_ = info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
    const bool timing = info[1].ToBoolean().Value();
    useDevice(device_);
    cuCheck(cuda().cuEventCreate(&event_, timing ? 0 : kEventDisableTiming), "cuEventCreate");
    napi_type_tag_object(env, info.This(), &kEventTag);
  } catch (const Error& e) {
    makeError(env, e.code(), e.what()).ThrowAsJavaScriptException();
  }
}

EventWrap::~EventWrap() {
  if (!event_) return;
  try {
    useDevice(device_);
    cuda().cuEventDestroy(event_);
  } catch (...) {
  }
}

CUevent EventWrap::handle() const {
  if (!event_) throw Error(Code::InvalidArgument, "the Event was destroyed");
  return event_;
}

Napi::Value EventWrap::Record(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    lastStream_ = streamArg(info[0]);
    useDevice(device_);
    cuCheck(cuda().cuEventRecord(handle(), lastStream_), "cuEventRecord");
    return env.Undefined();
  });
}

Napi::Value EventWrap::Query(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUresult r = cuda().cuEventQuery(handle());
    if (r != kCudaNotReady) cuCheck(r, "cuEventQuery");
    return Napi::Boolean::New(env, r == kCudaSuccess);
  });
}

// Resolves once the work before the last record() is done: a fresh event recorded
// behind it on the same stream is what the poller watches.
Napi::Value EventWrap::Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    handle();
    return gpuEnv(env).poller->afterStream(env, device_, lastStream_, nullptr, {Value()});
  });
}

Napi::Value EventWrap::ElapsedMs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!hasTag(env, info[0], kEventTag)) throw Error(Code::InvalidArgument, "elapsedMs: expected an Event");
    float ms = 0;
    cuCheck(cuda().cuEventElapsedTime(&ms, handle(), EventWrap::Unwrap(info[0].As<Napi::Object>())->handle()),
            "cuEventElapsedTime");
    return Napi::Number::New(env, ms);
  });
}

Napi::Value EventWrap::Destroy(const Napi::CallbackInfo& info) {
  if (event_) {
    try { useDevice(device_); cuda().cuEventDestroy(event_); } catch (...) {}
    event_ = nullptr;
  }
  return info.Env().Undefined();
}

}  // namespace ncclnode

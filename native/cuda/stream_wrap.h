// NativeStream: a CUDA stream (non-blocking) whose synchronize() is a promise
// settled by the poller thread; NativeEvent: a CUDA event for ordering and timing.
#pragma once

#include <napi.h>

#include "cuda_api.h"

namespace ncclnode {

class StreamWrap : public Napi::ObjectWrap<StreamWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit StreamWrap(const Napi::CallbackInfo& info);  // (device)
  ~StreamWrap() override;
  CUstream handle() const;
  int device() const { return device_; }

 private:
  void destroy();
  Napi::Value Synchronize(const Napi::CallbackInfo& info);
  Napi::Value Query(const Napi::CallbackInfo& info);
  Napi::Value WaitEvent(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), device_); }

  CUstream stream_ = nullptr;
  int device_ = 0;
};

class EventWrap : public Napi::ObjectWrap<EventWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit EventWrap(const Napi::CallbackInfo& info);  // (device, timing)
  ~EventWrap() override;
  CUevent handle() const;

 private:
  Napi::Value Record(const Napi::CallbackInfo& info);
  Napi::Value Query(const Napi::CallbackInfo& info);
  Napi::Value Synchronize(const Napi::CallbackInfo& info);
  Napi::Value ElapsedMs(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);

  CUevent event_ = nullptr;
  CUstream lastStream_ = nullptr;
  int device_ = 0;
};

extern const napi_type_tag kEventTag;

}  // namespace ncclnode

// NativeNcclControl: the JS handle on a communicator's NcclControl (split children,
// registration, flight record).
#pragma once

#include <napi.h>

#include <memory>

#include "nccl_control.h"

namespace ncclnode {

class NcclControlWrap : public Napi::ObjectWrap<NcclControlWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object New(Napi::Env env, std::shared_ptr<NcclControl> ctl);
  explicit NcclControlWrap(const Napi::CallbackInfo& info);

 private:
  Napi::Value TakeChild(const Napi::CallbackInfo& info); // () -> NativeNcclControl | null
  Napi::Value Register(const Napi::CallbackInfo& info);  // (deviceBuffer) -> bigint handle
  Napi::Value Deregister(const Napi::CallbackInfo& info);
  Napi::Value RegisterHost(const Napi::CallbackInfo& info);  // (pinned ArrayBuffer) -> bigint handle
  Napi::Value WindowRegister(const Napi::CallbackInfo& info);  // (deviceBuffer, flags) -> bigint
  Napi::Value WindowDeregister(const Napi::CallbackInfo& info);
  Napi::Value FlightRecord(const Napi::CallbackInfo& info);    // () -> JSON text of this communicator

  std::shared_ptr<NcclControl> ctl_;
};

}  // namespace ncclnode

// NVML health: placeholder until the NVML binding lands (see docs/gpu.md).
#include <napi.h>

#include "../core/js_errors.h"

namespace ncclnode {

void registerNvml(Napi::Env env, Napi::Object exports) {
  exports.Set("health", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
    makeError(info.Env(), Code::Unavailable, "health() is not implemented yet").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }, "health"));
}

}  // namespace ncclnode

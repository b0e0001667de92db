// Module entry: the one file above core and every backend. It sets up core's
// per-environment state, then lets each part register its exports; the surface it
// builds is typed in src/native/contract.ts. Core includes no backend header
// (test/contract/imports.test.ts checks); backends reach core through its headers
// and, for device memory, through core's DeviceMemoryRecognizer.
#include <napi.h>

#include "../core/addon_data.h"
#include "../core/comm_wrap.h"
#include "../core/dtype.h"
#include "../core/engine.h"
#include "../core/js_errors.h"
#include "../cuda/gpu_env.h"
#include "../gloo/gloo_addon.h"
#include "../io/io_addon.h"
#include "../kernels/host_verifiable.h"

namespace ncclnode {

namespace {

Napi::Value HalfRoundTrip(const Napi::CallbackInfo& info) {
  // Exposes the native 16-bit conversions so tests can hold them to the JS reference.
  Napi::Env env = info.Env();
  const float f = info[0].As<Napi::Number>().FloatValue();
  const bool bf16 = info[1].ToBoolean().Value();
  const uint16_t h = bf16 ? floatToBf16(f) : floatToHalf(f);
  return Napi::Number::New(env, h);
}

void Teardown(void* arg) {
  auto* data = static_cast<AddonData*>(arg);
  for (Engine* e : data->engines) e->teardown();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);
  Napi::Function ctor = CommWrap::Init(env);
  data->commCtor = Napi::Persistent(ctor);
  env.AddCleanupHook(Teardown, static_cast<void*>(data));
  exports.Set("NativeComm", ctor);
  exports.Set("setErrorConstructor", Napi::Function::New(env, SetErrorConstructor, "setErrorConstructor"));
  exports.Set("floatTo16", Napi::Function::New(env, HalfRoundTrip, "floatTo16"));
  exports.Set("napiVersion", Napi::Number::New(env, NAPI_VERSION));
  registerGloo(env, exports);  // createGloo (native/gloo)
  registerGpu(env, exports);   // DeviceBuffer, Stream, Event, createNccl, health (native/cuda, nccl, nvml, kernels)
  registerIo(env, exports);    // checkpoint writer/reader, crc32c (native/io)
  registerHostVerifiable(env, exports);  // the benchmark's verifiable data on host memory (native/kernels)
  return exports;
}

}  // namespace

}  // namespace ncclnode

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return ncclnode::Init(env, exports); }

NODE_API_MODULE(nccl_node, InitModule)

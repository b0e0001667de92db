// Module entry: registers the native surface that src/native.ts describes.
#include <napi.h>

#include "addon_data.h"
#include "comm_wrap.h"
#include "dtype.h"
#include "engine.h"
#include "js_errors.h"
#include "js_options.h"
#include "../gloo/gloo_backend.h"
#include "../cuda/gpu_env.h"
#include "../io/io_addon.h"

namespace ncclnode {

AddonData& addonData(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

namespace {

// createGloo({rank, size, storeHost, storePort, token, prefix, hostname, iface,
//             timeoutMs, checkAgreement}) -> Promise<NativeComm>
// Options arrive validated by src/comm/options.ts; only types are re-checked here.
Napi::Value CreateGloo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsObject()) throw Error(Code::InvalidArgument, "createGloo: expected an options object");
    auto o = info[0].As<Napi::Object>();
    GlooConfig cfg;
    cfg.rank = static_cast<int>(num(o, "rank", -1));
    cfg.size = static_cast<int>(num(o, "size", 0));
    if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size) {
      throw Error(Code::InvalidArgument, "createGloo: expected 0 <= rank < size, received rank " +
                                             std::to_string(cfg.rank) + " size " + std::to_string(cfg.size));
    }
    cfg.prefix = str(o, "prefix", "nccl-node/gloo/");
    cfg.hostname = str(o, "hostname");
    cfg.iface = str(o, "iface");
    cfg.storeHost = str(o, "storeHost", "127.0.0.1");
    cfg.storePort = static_cast<int>(num(o, "storePort", 0));
    cfg.token = str(o, "token");
    Napi::Value check = o.Get("checkAgreement");
    cfg.checkAgreement = !check.IsBoolean() || check.As<Napi::Boolean>().Value();
    const int64_t timeoutMs = num(o, "timeoutMs", 600000);
    Napi::Object comm = CommWrap::Wrap(env, std::make_unique<GlooBackend>(cfg, nullptr));
    return CommWrap::Unwrap(comm)->Connect(env, timeoutMs);
  });
}

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
  exports.Set("createGloo", Napi::Function::New(env, CreateGloo, "createGloo"));
  exports.Set("floatTo16", Napi::Function::New(env, HalfRoundTrip, "floatTo16"));
  exports.Set("napiVersion", Napi::Number::New(env, NAPI_VERSION));
  registerGpu(env, exports);  // DeviceBuffer, Stream, Event, createNccl, health (native/cuda/gpu_addon.cpp)
  registerIo(env, exports);   // checkpoint writer/reader, crc32c (native/io/io_addon.cpp)
  return exports;
}

}  // namespace

}  // namespace ncclnode

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return ncclnode::Init(env, exports); }

NODE_API_MODULE(nccl_node, InitModule)

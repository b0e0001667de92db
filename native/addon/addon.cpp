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
#include "../core/errors.h"
#include "../core/held_beats.h"
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

// heldBeatsStart({host, port, token, key, pid, intervalMs}): src/comm/heartbeat.ts.
Napi::Value HeldBeatsStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsObject()) throw Error(Code::InvalidArgument, "heldBeatsStart: expected an options object");
    Napi::Object o = info[0].As<Napi::Object>();
    auto text = [&](const char* name) {
      Napi::Value v = o.Get(name);
      if (!v.IsString() || v.As<Napi::String>().Utf8Value().empty()) {
        throw Error(Code::InvalidArgument, std::string("heldBeatsStart: ") + name + " must be a non-empty string");
      }
      return v.As<Napi::String>().Utf8Value();
    };
    auto number = [&](const char* name, double lo, double hi) {
      Napi::Value v = o.Get(name);
      const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
      if (!(d >= lo && d <= hi) || d != static_cast<double>(static_cast<int64_t>(d))) {
        throw Error(Code::InvalidArgument, std::string("heldBeatsStart: ") + name + " must be an integer in " +
                                               std::to_string(static_cast<int64_t>(lo)) + ".." +
                                               std::to_string(static_cast<int64_t>(hi)));
      }
      return static_cast<int64_t>(d);
    };
    HeldBeatsTarget t;
    t.host = text("host");
    t.port = static_cast<int>(number("port", 1, 65535));
    t.token = text("token");
    t.key = text("key");
    t.pid = number("pid", 0, 1ll << 40);
    t.interval = std::chrono::milliseconds(number("intervalMs", 1, 24ll * 3600 * 1000));
    heldbeats::start(t);
    return env.Undefined();
  });
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
  exports.Set("heldBeatsStart", Napi::Function::New(env, HeldBeatsStart, "heldBeatsStart"));
  exports.Set("heldBeatsStop", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
    heldbeats::stop();
    return info.Env().Undefined();
  }, "heldBeatsStop"));
  exports.Set("heldBeatsWritten", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
    return Napi::Number::New(info.Env(), static_cast<double>(heldbeats::written()));
  }, "heldBeatsWritten"));
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

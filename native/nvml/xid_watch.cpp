// onXid(callback): one std::thread per watch waits in nvmlEventSetWait_v2 with a
// short timeout (so stop() returns within ~kWaitMs) and hands each event to JS
// through a TypedThreadSafeFunction. The TSFN is unref'd: a watch never keeps the
// process alive. Watches live in a registry until stop() or environment teardown
// (a cleanup hook), so dropping the handle does not silently end a watch.
#include <napi.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../core/js_errors.h"
#include "nvml_api.h"

namespace ncclnode {

namespace {

constexpr unsigned kWaitMs = 100;
constexpr unsigned long long kWatchedEvents =
    kNvmlEventXid | kNvmlEventDbe | kNvmlEventGpuUnavailable | kNvmlEventRecoveryAction;

struct XidEvent {
  int device = -1;
  unsigned long long eventType = 0, data = 0;
  unsigned gpuInstanceId = 0, computeInstanceId = 0;
  std::string error;  // set when the wait itself failed; the watch then ends
};

struct Watch;
void callJs(Napi::Env env, Napi::Function cb, Watch* ctx, XidEvent* ev);
using Tsfn = Napi::TypedThreadSafeFunction<Watch, XidEvent, callJs>;

struct Watch {
  napi_env env = nullptr;
  const NvmlApi* api = nullptr;
  nvmlEventSet set = nullptr;
  std::vector<nvmlDevice> devices;  // index = NVML device index
  std::vector<std::string> uuids;
  Tsfn tsfn;
  std::thread thread;
  std::atomic<bool> stopping{false};

  void run() {
    while (!stopping.load()) {
      nvmlEventData d{};
      const nvmlReturn r = api->EventSetWait(set, &d, kWaitMs);
      if (r == kNvmlTimeout) continue;
      auto* ev = new XidEvent();
      if (r != kNvmlSuccess) {
        ev->error = std::string("nvmlEventSetWait_v2 failed: ") + NvmlApi::name(r);
      } else {
        for (size_t i = 0; i < devices.size(); i++) if (devices[i] == d.device) ev->device = static_cast<int>(i);
        ev->eventType = d.eventType;
        ev->data = d.eventData;
        ev->gpuInstanceId = d.gpuInstanceId;
        ev->computeInstanceId = d.computeInstanceId;
      }
      const bool fatal = !ev->error.empty();
      if (tsfn.NonBlockingCall(ev) != napi_ok) delete ev;
      if (fatal) return;  // a broken event set will not recover; the JS side learns why
    }
  }
};

void callJs(Napi::Env env, Napi::Function cb, Watch* w, XidEvent* ev) {
  std::unique_ptr<XidEvent> owned(ev);
  if (!env || !cb || !ev) return;  // the TSFN is being torn down
  Napi::Object o = Napi::Object::New(env);
  if (!ev->error.empty()) {
    o.Set("error", ev->error);
  } else {
    o.Set("device", ev->device);
    o.Set("uuid", ev->device >= 0 && static_cast<size_t>(ev->device) < w->uuids.size()
                      ? Napi::Value(Napi::String::New(env, w->uuids[ev->device])) : env.Null());
    o.Set("eventType", static_cast<double>(ev->eventType));
    o.Set("data", static_cast<double>(ev->data));
    o.Set("gpuInstanceId", ev->gpuInstanceId);
    o.Set("computeInstanceId", ev->computeInstanceId);
  }
  cb.Call({o});
}

std::mutex regMu;
std::map<Watch*, std::unique_ptr<Watch>>& registry() {
  static auto* m = new std::map<Watch*, std::unique_ptr<Watch>>();
  return *m;
}

void stopWatch(Watch* w) {
  std::unique_ptr<Watch> owned;
  {
    std::lock_guard<std::mutex> l(regMu);
    auto it = registry().find(w);
    if (it == registry().end()) return;  // already stopped
    owned = std::move(it->second);
    registry().erase(it);
  }
  owned->stopping = true;
  if (owned->thread.joinable()) owned->thread.join();  // at most one kWaitMs wait
  if (owned->api->EventSetFree) owned->api->EventSetFree(owned->set);
  owned->tsfn.Release();
}

void cleanupHook(void* arg) { stopWatch(static_cast<Watch*>(arg)); }

Napi::Value OnXid(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsFunction()) throw Error(Code::InvalidArgument, "onXid: expected a callback function");
    const NvmlApi& a = nvml();
    if (!a.EventSetCreate || !a.DeviceRegisterEvents || !a.EventSetWait || !a.DeviceGetSupportedEventTypes) {
      throw Error(Code::Unavailable, "onXid: this libnvidia-ml has no event API (nvmlEventSetWait_v2)");
    }
    auto w = std::make_unique<Watch>();
    w->env = env;
    w->api = &a;
    nvmlReturn r = a.EventSetCreate(&w->set);
    if (r != kNvmlSuccess) throw Error(Code::Nvml, std::string("nvmlEventSetCreate failed: ") + NvmlApi::name(r));
    unsigned n = 0;
    a.DeviceGetCount(&n);
    int registered = 0;
    for (unsigned i = 0; i < n; i++) {
      nvmlDevice d = nullptr;
      char uuid[96] = {0};
      unsigned long long supported = 0;
      if (a.DeviceGetHandleByIndex(i, &d) != kNvmlSuccess) d = nullptr;
      if (d && a.DeviceGetUUID) a.DeviceGetUUID(d, uuid, sizeof uuid);
      w->devices.push_back(d);
      w->uuids.push_back(uuid);
      if (!d || a.DeviceGetSupportedEventTypes(d, &supported) != kNvmlSuccess) continue;
      const unsigned long long mask = supported & kWatchedEvents;
      if ((mask & kNvmlEventXid) && a.DeviceRegisterEvents(d, mask, w->set) == kNvmlSuccess) registered++;
    }
    if (registered == 0) {
      if (a.EventSetFree) a.EventSetFree(w->set);
      throw Error(Code::Unavailable, "onXid: none of the " + std::to_string(n) +
                                         " GPUs reports Xid events (NVML_ERROR_NOT_SUPPORTED)");
    }
    Watch* raw = w.get();
    w->tsfn = Tsfn::New(env, info[0].As<Napi::Function>(), "nccl-node:xid", 0, 1, raw);
    w->tsfn.Unref(env);
    {
      std::lock_guard<std::mutex> l(regMu);
      registry()[raw] = std::move(w);
    }
    raw->thread = std::thread([raw] { raw->run(); });
    napi_add_env_cleanup_hook(env, cleanupHook, raw);
    Napi::Object handle = Napi::Object::New(env);
    handle.Set("devices", registered);
    handle.Set("stop", Napi::Function::New(env, [raw](const Napi::CallbackInfo& ci) -> Napi::Value {
      bool live = false;
      {
        std::lock_guard<std::mutex> l(regMu);
        live = registry().count(raw) != 0;
      }
      if (live) {
        napi_remove_env_cleanup_hook(ci.Env(), cleanupHook, raw);
        stopWatch(raw);
      }
      return ci.Env().Undefined();
    }, "stop"));
    return handle;
  });
}

}  // namespace

void registerXid(Napi::Env env, Napi::Object exports) {
  exports.Set("onXid", Napi::Function::New(env, OnXid, "onXid"));
}

}  // namespace ncclnode

// The GPU half of the addon's exports. Nothing here touches a GPU library until a
// function is called, so the addon loads on machines without CUDA, NCCL or NVML.
#include <atomic>
#include <cstdio>
#include <memory>
#include <map>
#include <mutex>

#include "../core/buffers.h"
#include "../core/v8_value.h"
#include "../core/comm_wrap.h"
#include "../core/js_errors.h"
#include "../core/js_options.h"
#include "../nccl/flight_recorder.h"
#include "../nccl/nccl_backend.h"
#include "../nccl/nccl_control_wrap.h"
#include "device_buffer.h"
#include "gpu_env.h"
#include "poller.h"
#include "stream_wrap.h"

namespace ncclnode {

void registerKernels(Napi::Env env, Napi::Object exports);  // native/kernels/kernels.cpp
void registerNvml(Napi::Env env, Napi::Object exports);     // native/nvml/health.cpp

namespace {

std::mutex envMu;
std::map<napi_env, GpuEnv*>& envs() {
  static auto* m = new std::map<napi_env, GpuEnv*>();
  return *m;
}

void cleanup(void* arg) {
  auto* e = static_cast<std::pair<napi_env, GpuEnv*>*>(arg);
  {
    std::lock_guard<std::mutex> l(envMu);
    envs().erase(e->first);
  }
  delete e->second->poller;
  delete e->second;
  delete e;
}

// createNccl({rank, size, device, storeHost, storePort, token, prefix, timeoutMs, keepOnFault})
//   -> Promise<NativeComm>, with comm.gpuControl = NativeNcclControl
Napi::Value CreateNccl(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsObject()) throw Error(Code::InvalidArgument, "createNccl: expected an options object");
    auto o = info[0].As<Napi::Object>();
    NcclConfig cfg;
    cfg.rank = static_cast<int>(num(o, "rank", -1));
    cfg.size = static_cast<int>(num(o, "size", 0));
    cfg.device = static_cast<int>(num(o, "device", 0));
    if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size) {
      throw Error(Code::InvalidArgument, "createNccl: expected 0 <= rank < size");
    }
    cfg.prefix = str(o, "prefix", "nccl-node/nccl/world/");
    cfg.storeHost = str(o, "storeHost", "127.0.0.1");
    cfg.storePort = static_cast<int>(num(o, "storePort", 0));
    cfg.token = str(o, "token");
    const Napi::Value keep = o.Get("keepOnFault");
    if (!keep.IsUndefined() && !keep.IsBoolean()) throw Error(Code::InvalidArgument, "createNccl: keepOnFault must be a boolean");
    cfg.keepOnFault = keep.IsBoolean() && keep.As<Napi::Boolean>().Value();
    cuda();
    const int n = deviceCount();
    if (cfg.device < 0 || cfg.device >= n) {
      throw Error(Code::InvalidArgument, "createNccl: device " + std::to_string(cfg.device) +
                                             " (LOCAL_RANK) does not exist; this machine has " + std::to_string(n) + " GPUs");
    }
    auto ctl = std::make_shared<NcclControl>();
    Napi::Object comm = CommWrap::Wrap(env, std::make_unique<NcclBackend>(cfg, nullptr, ctl));
    comm.Set("gpuControl", NcclControlWrap::New(env, ctl));
    return CommWrap::Unwrap(comm)->Connect(env, num(o, "timeoutMs", 600000));
  });
}

// The optional NCCL features the loaded library enables: the loader leaves a pointer
// null when the symbol is missing or newer than the library's version says.
Napi::Object NcclFeatures(Napi::Env env, const NcclApi& a) {
  const struct { const char* name; bool on; } features[] = {
      {"register", a.CommRegister && a.CommDeregister},
      {"symmetricWindows", a.CommWindowRegister && a.CommWindowDeregister},
      {"memAlloc", a.MemAlloc && a.MemFree},
      {"alltoall", a.AlltoAll != nullptr},
      {"gather", a.Gather != nullptr},
      {"scatter", a.Scatter != nullptr},
      {"shrink", a.CommShrink != nullptr},
      {"revoke", a.CommRevoke != nullptr},
      {"finalize", a.CommFinalize != nullptr},
  };
  Napi::Object out = Napi::Object::New(env);
  for (const auto& f : features) out.Set(f.name, Napi::Boolean::New(env, f.on));
  return out;
}

// gpuInfo() -> what loads here, without throwing: {cuda, nccl, devices, ...}
Napi::Value GpuInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  std::string why;
  const CudaApi* cu = tryCuda(&why);
  out.Set("cuda", Napi::Boolean::New(env, cu != nullptr));
  if (!cu) out.Set("cudaError", why);
  int devices = 0, driver = 0;
  if (cu) {
    cu->cuDeviceGetCount(&devices);
    cu->cuDriverGetVersion(&driver);
  }
  out.Set("devices", devices);
  out.Set("driverVersion", driver);
  // Each device in CUDA's order (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER): its name and its
  // PCI address as sysfs spells it ("0000:3b:00.0"), where the launcher finds its NUMA node.
  Napi::Array gpus = Napi::Array::New(env);
  for (int i = 0; cu && i < devices; ++i) {
    CUdevice dev = 0;
    char name[256] = {0};
    int domain = 0, bus = 0, device = 0;
    if (cu->cuDeviceGet(&dev, i) != kCudaSuccess || cu->cuDeviceGetName(name, sizeof name - 1, dev) != kCudaSuccess ||
        cu->cuDeviceGetAttribute(&domain, kAttrPciDomainId, dev) != kCudaSuccess ||
        cu->cuDeviceGetAttribute(&bus, kAttrPciBusId, dev) != kCudaSuccess ||
        cu->cuDeviceGetAttribute(&device, kAttrPciDeviceId, dev) != kCudaSuccess) {
      break;  // a device the driver will not describe: the list stops short of `devices`
    }
    char pci[32];
    std::snprintf(pci, sizeof pci, "%04x:%02x:%02x.0", domain, bus, device);
    Napi::Object g = Napi::Object::New(env);
    g.Set("name", std::string(name));
    g.Set("pciBusId", std::string(pci));
    gpus.Set(static_cast<uint32_t>(i), g);
  }
  out.Set("gpus", gpus);
  why.clear();
  const NcclApi* nc = tryNccl(&why);
  out.Set("nccl", Napi::Boolean::New(env, nc != nullptr));
  if (nc) {
    out.Set("ncclVersion", nc->versionString());
    out.Set("ncclVersionCode", nc->version);
    out.Set("ncclFeatures", NcclFeatures(env, *nc));
  } else {
    out.Set("ncclError", why);
  }
  return out;
}

// allocPinned(bytes, device) -> ArrayBuffer / unpinHost(arrayBuffer, device): page-locked
// host memory that JS reads and writes directly. A new ArrayBuffer's memory is
// registered with cuMemHostRegister, and the registration holds V8's backing store (a
// std::shared_ptr) until it is undone: by unpinHost, or by a finalizer when the
// ArrayBuffer is collected. Without that hold V8 frees a collected (or transferred and
// resized) ArrayBuffer with its range still registered, the next allocation at that
// address cannot be pinned, and the driver's map of the address space goes stale
// (cuMemAlloc answered CUDA_ERROR_ALREADY_MAPPED on an H200).
struct PinnedBlock {
  std::shared_ptr<v8::BackingStore> store;
  void* ptr = nullptr;
  int device = 0;
  std::atomic<bool> registered{false};
};
std::mutex pinnedMu;
std::map<void*, PinnedBlock*>& pinnedBlocks() {
  static auto* m = new std::map<void*, PinnedBlock*>();
  return *m;
}

// Unregisters once (unpinHost or the finalizer, whichever comes first).
void unregisterBlock(PinnedBlock* b) {
  if (!b->registered.exchange(false)) return;
  useDevice(b->device);
  cuCheck(cuda().cuMemHostUnregister(b->ptr), "cuMemHostUnregister");
}

void finalizePinned(Napi::Env, PinnedBlock* b) {
  try {
    unregisterBlock(b);
  } catch (...) {  // the context is gone (teardown): nothing is registered any more
  }
  {
    std::lock_guard<std::mutex> l(pinnedMu);
    auto it = pinnedBlocks().find(b->ptr);
    if (it != pinnedBlocks().end() && it->second == b) pinnedBlocks().erase(it);
  }
  delete b;  // lets go of the backing store: V8 may free the memory now
}

Napi::Value AllocPinned(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const double d = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 1 && d <= 9007199254740991.0) || d != static_cast<double>(static_cast<size_t>(d))) {
      throw Error(Code::InvalidArgument, "PinnedHostBuffer: byteLength must be a positive integer");
    }
    const int device = info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 0;
    useDevice(device);
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, static_cast<size_t>(d));
    auto* b = new PinnedBlock();
    b->store = toV8(ab).As<v8::ArrayBuffer>()->GetBackingStore();
    b->ptr = b->store->Data();
    b->device = device;
    try {
      cuCheck(cuda().cuMemHostRegister(b->ptr, b->store->ByteLength(), 1 /* PORTABLE */), "cuMemHostRegister");
    } catch (...) {
      delete b;
      throw;
    }
    b->registered = true;
    {
      std::lock_guard<std::mutex> l(pinnedMu);
      pinnedBlocks()[b->ptr] = b;
    }
    ab.AddFinalizer(finalizePinned, b);
    return ab;
  });
}

Napi::Value UnpinHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsArrayBuffer()) throw Error(Code::InvalidArgument, "unpinHost: expected an ArrayBuffer");
    void* data = info[0].As<Napi::ArrayBuffer>().Data();
    PinnedBlock* b = nullptr;
    {
      std::lock_guard<std::mutex> l(pinnedMu);
      auto it = pinnedBlocks().find(data);
      if (it != pinnedBlocks().end()) b = it->second;
    }
    if (!b) throw Error(Code::InvalidArgument, "unpinHost: not the memory of a live PinnedHostBuffer (was its ArrayBuffer transferred?)");
    unregisterBlock(b);
    return env.Undefined();
  });
}

Napi::Value DumpFlightRecords(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string reason = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "requested";
    return Napi::String::New(env, FlightRecorder::dumpAll(reason));
  });
}

}  // namespace

GpuEnv& gpuEnv(Napi::Env env) {
  std::lock_guard<std::mutex> l(envMu);
  return *envs().at(env);
}

void registerGpu(Napi::Env env, Napi::Object exports) {
  auto* data = new GpuEnv();
  {
    std::lock_guard<std::mutex> l(envMu);
    envs()[env] = data;
  }
  env.AddCleanupHook(cleanup, new std::pair<napi_env, GpuEnv*>(env, data));
  data->poller = new Poller(env);
  Napi::Function buf = DeviceBufferWrap::Init(env);
  Napi::Function stream = StreamWrap::Init(env);
  Napi::Function event = EventWrap::Init(env);
  Napi::Function ctl = NcclControlWrap::Init(env);
  data->deviceBufferCtor = Napi::Persistent(buf);
  data->streamCtor = Napi::Persistent(stream);
  data->eventCtor = Napi::Persistent(event);
  data->ncclControlCtor = Napi::Persistent(ctl);
  exports.Set("NativeDeviceBuffer", buf);
  exports.Set("NativeStream", stream);
  exports.Set("NativeEvent", event);
  exports.Set("createNccl", Napi::Function::New(env, CreateNccl, "createNccl"));
  exports.Set("gpuInfo", Napi::Function::New(env, GpuInfo, "gpuInfo"));
  exports.Set("allocPinned", Napi::Function::New(env, AllocPinned, "allocPinned"));
  exports.Set("unpinHost", Napi::Function::New(env, UnpinHost, "unpinHost"));
  exports.Set("dumpFlightRecords", Napi::Function::New(env, DumpFlightRecords, "dumpFlightRecords"));
  registerKernels(env, exports);
  registerNvml(env, exports);
  setDeviceMemoryRecognizer(deviceBufferView);  // collectives and file I/O take NativeDeviceBuffers
}

}  // namespace ncclnode

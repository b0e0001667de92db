#include "cuda_api.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "../core/errors.h"
#include "dl.h"

namespace ncclnode {

namespace {

struct Loaded {
  CudaApi api;
  bool ok = false;
  std::string why;
};

template <class F>
bool bind(void* lib, F& fn, const char* name, std::string* missing) {
  fn = reinterpret_cast<F>(symbol(lib, name));
  if (!fn && missing) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return fn != nullptr;
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    CudaApi& a = l.api;
    a.lib = openLibrary("NCCL_NODE_LIBCUDA", "libcuda.so.1", "the CUDA driver (libcuda.so.1)", &l.why);
    if (!a.lib) return;
    const char* env = std::getenv("NCCL_NODE_LIBCUDA");
    a.path = env && *env ? env : "libcuda.so.1";
    std::string missing;
    bind(a.lib, a.cuInit, "cuInit", &missing);
    bind(a.lib, a.cuDriverGetVersion, "cuDriverGetVersion", &missing);
    bind(a.lib, a.cuGetErrorName, "cuGetErrorName", &missing);
    bind(a.lib, a.cuGetErrorString, "cuGetErrorString", &missing);
    bind(a.lib, a.cuDeviceGetCount, "cuDeviceGetCount", &missing);
    bind(a.lib, a.cuDeviceGet, "cuDeviceGet", &missing);
    bind(a.lib, a.cuDeviceGetName, "cuDeviceGetName", &missing);
    bind(a.lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", &missing);
    bind(a.lib, a.cuDeviceTotalMem, "cuDeviceTotalMem_v2", &missing);
    bind(a.lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", &missing);
    bind(a.lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", &missing);
    bind(a.lib, a.cuMemAlloc, "cuMemAlloc_v2", &missing);
    bind(a.lib, a.cuMemFree, "cuMemFree_v2", &missing);
    bind(a.lib, a.cuMemsetD8Async, "cuMemsetD8Async", &missing);
    bind(a.lib, a.cuMemHostRegister, "cuMemHostRegister_v2", &missing);
    bind(a.lib, a.cuMemHostUnregister, "cuMemHostUnregister", &missing);
    bind(a.lib, a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", &missing);
    bind(a.lib, a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", &missing);
    bind(a.lib, a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", &missing);
    bind(a.lib, a.cuStreamCreate, "cuStreamCreate", &missing);
    bind(a.lib, a.cuStreamDestroy, "cuStreamDestroy_v2", &missing);
    bind(a.lib, a.cuStreamQuery, "cuStreamQuery", &missing);
    bind(a.lib, a.cuStreamWaitEvent, "cuStreamWaitEvent", &missing);
    bind(a.lib, a.cuEventCreate, "cuEventCreate", &missing);
    bind(a.lib, a.cuEventRecord, "cuEventRecord", &missing);
    bind(a.lib, a.cuEventQuery, "cuEventQuery", &missing);
    bind(a.lib, a.cuEventDestroy, "cuEventDestroy_v2", &missing);
    // CUDA 12.8 added the _v2 name and 13.0 dropped the plain one.
    if (!bind(a.lib, a.cuEventElapsedTime, "cuEventElapsedTime_v2", nullptr)) {
      bind(a.lib, a.cuEventElapsedTime, "cuEventElapsedTime", &missing);
    }
    bind(a.lib, a.cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", nullptr);
    bind(a.lib, a.cuModuleLoadData, "cuModuleLoadData", nullptr);
    bind(a.lib, a.cuModuleGetFunction, "cuModuleGetFunction", nullptr);
    bind(a.lib, a.cuLaunchKernel, "cuLaunchKernel", nullptr);
    if (!missing.empty()) {
      l.why = "the CUDA driver at " + a.path + " lacks " + missing + "; set NCCL_NODE_LIBCUDA to a complete libcuda";
      return;
    }
    const CUresult r = a.cuInit(0);
    if (r != kCudaSuccess) {
      l.why = "cuInit failed: " + cuErrorText(r) + " (no usable GPU or driver)";
      return;
    }
    l.ok = true;
  });
  return l;
}

}  // namespace

const CudaApi* tryCuda(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

const CudaApi& cuda() {
  std::string why;
  const CudaApi* a = tryCuda(&why);
  if (!a) throw Error(Code::Unavailable, why);
  return *a;
}

std::string cuErrorText(CUresult r) {
  const CudaApi& a = loaded().api;
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.cuGetErrorName) a.cuGetErrorName(r, &name);
  if (a.cuGetErrorString) a.cuGetErrorString(r, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(r);
  if (text) s += std::string(" (") + text + ")";
  return s;
}

void cuCheck(CUresult r, const char* call) {
  if (r != kCudaSuccess) throw Error(Code::Cuda, std::string(call) + ": " + cuErrorText(r));
}

int deviceCount() {
  int n = 0;
  cuCheck(cuda().cuDeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

void useDevice(int ordinal) {
  thread_local int current = -1;
  if (current == ordinal) return;
  const CudaApi& a = cuda();
  static std::mutex mu;
  static std::vector<CUcontext> contexts;  // primary contexts, retained for the process lifetime
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    const int n = deviceCount();
    if (ordinal < 0 || ordinal >= n) {
      throw Error(Code::InvalidArgument, "device " + std::to_string(ordinal) + " does not exist (this machine has " +
                                             std::to_string(n) + " GPUs)");
    }
    if (contexts.size() < static_cast<size_t>(n)) contexts.resize(n, nullptr);
    if (!contexts[ordinal]) {
      CUdevice dev = 0;
      cuCheck(a.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
      cuCheck(a.cuDevicePrimaryCtxRetain(&contexts[ordinal], dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = contexts[ordinal];
  }
  cuCheck(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  current = ordinal;
}

}  // namespace ncclnode

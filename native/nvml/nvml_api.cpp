#include "nvml_api.h"

#include <mutex>

#include "../core/errors.h"
#include "../cuda/dl.h"

namespace ncclnode {

const char* NvmlApi::name(nvmlReturn r) {
  static const char* const names[] = {
      "NVML_SUCCESS", "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_SUPPORTED",
      "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_ALREADY_INITIALIZED", "NVML_ERROR_NOT_FOUND",
      "NVML_ERROR_INSUFFICIENT_SIZE", "NVML_ERROR_INSUFFICIENT_POWER", "NVML_ERROR_DRIVER_NOT_LOADED",
      "NVML_ERROR_TIMEOUT", "NVML_ERROR_IRQ_ISSUE", "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND",
      "NVML_ERROR_CORRUPTED_INFOROM", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED",
      "NVML_ERROR_OPERATING_SYSTEM", "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "NVML_ERROR_IN_USE", "NVML_ERROR_MEMORY",
      "NVML_ERROR_NO_DATA", "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", "NVML_ERROR_INSUFFICIENT_RESOURCES",
      "NVML_ERROR_FREQ_NOT_SUPPORTED", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED",
      "NVML_ERROR_NOT_READY", "NVML_ERROR_GPU_NOT_FOUND", "NVML_ERROR_INVALID_STATE",
      "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED"};
  if (r >= 0 && r < static_cast<int>(sizeof names / sizeof names[0])) return names[r];
  return "NVML_ERROR_UNKNOWN";
}

namespace {

struct Loaded {
  NvmlApi api;
  bool ok = false;
  bool initFailed = false;
  std::string why;
};

template <class F>
void bind(NvmlApi& a, F& fn, const char* name) { fn = reinterpret_cast<F>(symbol(a.lib, name)); }

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    NvmlApi& a = l.api;
    a.lib = openLibrary("NCCL_NODE_LIBNVML", "libnvidia-ml.so.1", "NVML (libnvidia-ml.so.1)", &l.why);
    if (!a.lib) return;
    // Versioned names, as nvml.h maps them (reference §13.1).
    bind(a, a.Init, "nvmlInit_v2");
    bind(a, a.Shutdown, "nvmlShutdown");
    bind(a, a.ErrorString, "nvmlErrorString");
    bind(a, a.SystemGetDriverVersion, "nvmlSystemGetDriverVersion");
    bind(a, a.SystemGetNVMLVersion, "nvmlSystemGetNVMLVersion");
    bind(a, a.SystemGetCudaDriverVersion, "nvmlSystemGetCudaDriverVersion");
    bind(a, a.DeviceGetCount, "nvmlDeviceGetCount_v2");
    bind(a, a.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    bind(a, a.DeviceGetName, "nvmlDeviceGetName");
    bind(a, a.DeviceGetUUID, "nvmlDeviceGetUUID");
    bind(a, a.DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3");
    bind(a, a.DeviceGetEccMode, "nvmlDeviceGetEccMode");
    bind(a, a.DeviceGetTotalEccErrors, "nvmlDeviceGetTotalEccErrors");
    bind(a, a.DeviceGetRetiredPages, "nvmlDeviceGetRetiredPages");
    bind(a, a.DeviceGetRetiredPagesPendingStatus, "nvmlDeviceGetRetiredPagesPendingStatus");
    bind(a, a.DeviceGetRemappedRows, "nvmlDeviceGetRemappedRows");
    bind(a, a.DeviceGetCurrentClocksEventReasons, "nvmlDeviceGetCurrentClocksEventReasons");
    // Drivers older than the rename only have the "throttle" spelling; same signature.
    if (!a.DeviceGetCurrentClocksEventReasons) {
      bind(a, a.DeviceGetCurrentClocksEventReasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    }
    bind(a, a.DeviceGetTemperatureV, "nvmlDeviceGetTemperatureV");
    bind(a, a.DeviceGetTemperature, "nvmlDeviceGetTemperature");
    bind(a, a.DeviceGetPowerUsage, "nvmlDeviceGetPowerUsage");
    bind(a, a.DeviceGetEnforcedPowerLimit, "nvmlDeviceGetEnforcedPowerLimit");
    bind(a, a.DeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates");
    bind(a, a.DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo_v2");
    bind(a, a.DeviceGetPcieReplayCounter, "nvmlDeviceGetPcieReplayCounter");
    bind(a, a.DeviceGetNvLinkState, "nvmlDeviceGetNvLinkState");
    bind(a, a.DeviceGetNvLinkErrorCounter, "nvmlDeviceGetNvLinkErrorCounter");
    bind(a, a.DeviceGetGpuFabricInfoV, "nvmlDeviceGetGpuFabricInfoV");
    bind(a, a.EventSetCreate, "nvmlEventSetCreate");
    bind(a, a.DeviceGetSupportedEventTypes, "nvmlDeviceGetSupportedEventTypes");
    bind(a, a.DeviceRegisterEvents, "nvmlDeviceRegisterEvents");
    bind(a, a.EventSetWait, "nvmlEventSetWait_v2");
    bind(a, a.EventSetFree, "nvmlEventSetFree");
    if (!a.Init || !a.DeviceGetCount || !a.DeviceGetHandleByIndex) {
      l.why = "the loaded libnvidia-ml lacks nvmlInit_v2 / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2; "
              "set NCCL_NODE_LIBNVML to a real libnvidia-ml.so.1";
      return;
    }
    const nvmlReturn r = a.Init();
    if (r != kNvmlSuccess) {
      l.initFailed = true;
      l.why = std::string("nvmlInit_v2 failed: ") + NvmlApi::name(r) +
              (a.ErrorString ? std::string(" (") + a.ErrorString(r) + ")" : "");
      return;
    }
    // Never nvmlShutdown: the watcher thread may still be in nvmlEventSetWait at
    // exit, and the driver tears NVML down with the process anyway.
    l.ok = true;
  });
  return l;
}

}  // namespace

const NvmlApi* tryNvml(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

const NvmlApi& nvml() {
  Loaded& l = loaded();
  if (!l.ok) throw Error(l.initFailed ? Code::Nvml : Code::Unavailable, l.why);
  return l.api;
}

}  // namespace ncclnode

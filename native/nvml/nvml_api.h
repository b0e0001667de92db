// libnvidia-ml.so.1's API, declared from NVIDIA's NVML documentation (no nvml.h; the
// layouts are checked against the documented numbers in test/abi/abi_check.cpp) and resolved with dlopen/dlsym by the versioned export names the header
// maps to (nvmlInit -> nvmlInit_v2, ...). Every per-device query is optional: a
// missing symbol is treated like NVML_ERROR_NOT_SUPPORTED, i.e. "unavailable".
#pragma once

#include <string>

namespace ncclnode {

using nvmlReturn = int;
struct nvmlDeviceOpaque;
using nvmlDevice = nvmlDeviceOpaque*;
struct nvmlEventSetOpaque;
using nvmlEventSet = nvmlEventSetOpaque*;

constexpr nvmlReturn kNvmlSuccess = 0, kNvmlInvalidArgument = 2, kNvmlNotSupported = 3, kNvmlTimeout = 10,
                     kNvmlFunctionNotFound = 13;
constexpr unsigned long long kNvmlEventXid = 0x8, kNvmlEventDbe = 0x2, kNvmlEventGpuUnavailable = 0x4000,
                             kNvmlEventRecoveryAction = 0x8000;
constexpr unsigned kNvmlNvlinkMaxLinks = 36;

// The version word of a versioned struct: sizeof | (version << 24) (NVML_STRUCT_VERSION).
constexpr unsigned nvmlStructVersion(unsigned size, unsigned v) { return size | (v << 24); }

struct nvmlPciInfoV3 {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlMemoryV2 { unsigned version; unsigned long long total, reserved, free, used; };
struct nvmlUtilization { unsigned gpu, memory; };
struct nvmlTemperatureV1 { unsigned version; int sensorType; int temperature; };
struct nvmlGpuFabricInfoV3 {
  unsigned version;
  unsigned char clusterUuid[16];
  nvmlReturn status;
  unsigned cliqueId;
  unsigned char state;
  unsigned healthMask;
  unsigned char healthSummary;
};
struct nvmlEventData {
  nvmlDevice device;
  unsigned long long eventType, eventData;
  unsigned gpuInstanceId, computeInstanceId;
};
static_assert(sizeof(nvmlPciInfoV3) == 68, "nvmlPciInfo_t layout");
static_assert(sizeof(nvmlMemoryV2) == 40, "nvmlMemory_v2_t layout");
static_assert(sizeof(nvmlGpuFabricInfoV3) == 40, "nvmlGpuFabricInfo_v3_t layout");
static_assert(sizeof(nvmlEventData) == 32, "nvmlEventData_t layout");

struct NvmlApi {
  void* lib = nullptr;
  nvmlReturn (*Init)();
  nvmlReturn (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn);
  nvmlReturn (*SystemGetDriverVersion)(char*, unsigned);
  nvmlReturn (*SystemGetNVMLVersion)(char*, unsigned);
  nvmlReturn (*SystemGetCudaDriverVersion)(int*);
  nvmlReturn (*DeviceGetCount)(unsigned*);
  nvmlReturn (*DeviceGetHandleByIndex)(unsigned, nvmlDevice*);
  nvmlReturn (*DeviceGetName)(nvmlDevice, char*, unsigned);
  nvmlReturn (*DeviceGetUUID)(nvmlDevice, char*, unsigned);
  nvmlReturn (*DeviceGetPciInfo)(nvmlDevice, nvmlPciInfoV3*);
  nvmlReturn (*DeviceGetEccMode)(nvmlDevice, int*, int*);
  nvmlReturn (*DeviceGetTotalEccErrors)(nvmlDevice, int, int, unsigned long long*);
  nvmlReturn (*DeviceGetRetiredPages)(nvmlDevice, int, unsigned*, unsigned long long*);
  nvmlReturn (*DeviceGetRetiredPagesPendingStatus)(nvmlDevice, int*);
  nvmlReturn (*DeviceGetRemappedRows)(nvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*);
  nvmlReturn (*DeviceGetCurrentClocksEventReasons)(nvmlDevice, unsigned long long*);
  nvmlReturn (*DeviceGetTemperatureV)(nvmlDevice, nvmlTemperatureV1*);
  nvmlReturn (*DeviceGetTemperature)(nvmlDevice, int, unsigned*);  // deprecated in 13.0; fallback
  nvmlReturn (*DeviceGetPowerUsage)(nvmlDevice, unsigned*);
  nvmlReturn (*DeviceGetEnforcedPowerLimit)(nvmlDevice, unsigned*);
  nvmlReturn (*DeviceGetUtilizationRates)(nvmlDevice, nvmlUtilization*);
  nvmlReturn (*DeviceGetMemoryInfo)(nvmlDevice, nvmlMemoryV2*);
  nvmlReturn (*DeviceGetPcieReplayCounter)(nvmlDevice, unsigned*);
  nvmlReturn (*DeviceGetNvLinkState)(nvmlDevice, unsigned, int*);
  nvmlReturn (*DeviceGetNvLinkErrorCounter)(nvmlDevice, unsigned, int, unsigned long long*);
  nvmlReturn (*DeviceGetGpuFabricInfoV)(nvmlDevice, nvmlGpuFabricInfoV3*);
  nvmlReturn (*EventSetCreate)(nvmlEventSet*);
  nvmlReturn (*DeviceGetSupportedEventTypes)(nvmlDevice, unsigned long long*);
  nvmlReturn (*DeviceRegisterEvents)(nvmlDevice, unsigned long long, nvmlEventSet);
  nvmlReturn (*EventSetWait)(nvmlEventSet, nvmlEventData*, unsigned);
  nvmlReturn (*EventSetFree)(nvmlEventSet);

  // "NVML_ERROR_NOT_SUPPORTED"-style name of a return code, for messages and reports.
  static const char* name(nvmlReturn r);
};

// Loaded and initialised once (nvmlInit_v2) per process; null (with *why) when the
// library is missing, lacks the required symbols or nvmlInit fails.
const NvmlApi* tryNvml(std::string* why);
// As tryNvml, but throws Error(Unavailable / Nvml).
const NvmlApi& nvml();

}  // namespace ncclnode

// Checks the project's own declarations of NVIDIA's ABIs (native/nccl/nccl_api.h,
// native/cuda/cuda_api.h, native/io/cufile_api.h, native/nvml/nvml_api.h) against the
// real headers, which only this test sees (scripts/fetch-reference.sh fetches them).
// Compiled by test/abi/abi.test.ts: a wrong declaration is a compile error naming the
// function and the argument; main() then does what needs running (the config
// initializer's bytes, and dlsym of every loader name in the real libraries).
//
// Adding a function to a loader = one line in the matching *_FUNCTIONS table below
// (abi.test.ts fails when a loader binds a name the tables lack).

#include <dlfcn.h>

#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// The project's declarations come first: cuda.h #defines API names to versioned
// symbols (cuMemAlloc -> cuMemAlloc_v2), which would rename the CudaApi fields too.
#include "core/dtype.h"
#include "cuda/cuda_api.h"
#include "io/cufile_api.h"
#include "nccl/nccl_api.h"
#include "nvml/nvml_api.h"

// X(field, "name the loader dlsyms"): cuda.h must map `field` to exactly that symbol.
#define CUDA_FUNCTIONS(X)                                          \
  X(cuInit, "cuInit")                                              \
  X(cuDriverGetVersion, "cuDriverGetVersion")                      \
  X(cuGetErrorName, "cuGetErrorName")                              \
  X(cuGetErrorString, "cuGetErrorString")                          \
  X(cuDeviceGetCount, "cuDeviceGetCount")                          \
  X(cuDeviceGet, "cuDeviceGet")                                    \
  X(cuDeviceGetName, "cuDeviceGetName")                            \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                  \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2")                       \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")          \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                            \
  X(cuMemAlloc, "cuMemAlloc_v2")                                   \
  X(cuMemFree, "cuMemFree_v2")                                     \
  X(cuMemsetD8Async, "cuMemsetD8Async")                            \
  X(cuMemHostRegister, "cuMemHostRegister_v2")                     \
  X(cuMemHostUnregister, "cuMemHostUnregister")                    \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                     \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                     \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                     \
  X(cuStreamCreate, "cuStreamCreate")                              \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                         \
  X(cuStreamQuery, "cuStreamQuery")                                \
  X(cuStreamWaitEvent, "cuStreamWaitEvent")                        \
  X(cuEventCreate, "cuEventCreate")                                \
  X(cuEventRecord, "cuEventRecord")                                \
  X(cuEventQuery, "cuEventQuery")                                  \
  X(cuEventDestroy, "cuEventDestroy_v2")                           \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2")                   \
  X(cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange") \
  X(cuModuleLoadData, "cuModuleLoadData")                          \
  X(cuModuleGetFunction, "cuModuleGetFunction")                    \
  X(cuLaunchKernel, "cuLaunchKernel")
// Older names a loader falls back to: X(field, "name", the PFN_ typedef of that version).
#define CUDA_FALLBACKS(X) X(cuEventElapsedTime, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000)

// Bound outside the loaders: X(cuda.h name, "name dlsym'd", the type the call site casts to).
#define CUDA_OTHERS(X) \
  X(cuStreamSynchronize, "cuStreamSynchronize", ncclnode::CUresult (*)(ncclnode::CUstream))  // io/device_copy.cpp

// X(NcclApi field, nccl.h function); the loader dlsyms the function's own name.
#define NCCL_FUNCTIONS(X)                               \
  X(GetVersion, ncclGetVersion)                         \
  X(GetUniqueId, ncclGetUniqueId)                       \
  X(CommInitRankConfig, ncclCommInitRankConfig)         \
  X(CommSplit, ncclCommSplit)                           \
  X(CommFinalize, ncclCommFinalize)                     \
  X(CommDestroy, ncclCommDestroy)                       \
  X(CommAbort, ncclCommAbort)                           \
  X(CommCount, ncclCommCount)                           \
  X(CommUserRank, ncclCommUserRank)                     \
  X(CommGetAsyncError, ncclCommGetAsyncError)           \
  X(GetErrorString, ncclGetErrorString)                 \
  X(GetLastError, ncclGetLastError)                     \
  X(GroupStart, ncclGroupStart)                         \
  X(GroupEnd, ncclGroupEnd)                             \
  X(AllReduce, ncclAllReduce)                           \
  X(Broadcast, ncclBroadcast)                           \
  X(Reduce, ncclReduce)                                 \
  X(AllGather, ncclAllGather)                           \
  X(ReduceScatter, ncclReduceScatter)                   \
  X(Send, ncclSend)                                     \
  X(Recv, ncclRecv)                                     \
  X(RedOpCreatePreMulSum, ncclRedOpCreatePreMulSum)     \
  X(RedOpDestroy, ncclRedOpDestroy)                     \
  X(MemAlloc, ncclMemAlloc)                             \
  X(MemFree, ncclMemFree)                               \
  X(CommRegister, ncclCommRegister)                     \
  X(CommDeregister, ncclCommDeregister)                 \
  X(CommWindowRegister, ncclCommWindowRegister)         \
  X(CommWindowDeregister, ncclCommWindowDeregister)     \
  X(AlltoAll, ncclAlltoAll)                             \
  X(Gather, ncclGather)                                 \
  X(Scatter, ncclScatter)                               \
  X(CommShrink, ncclCommShrink)                         \
  X(CommRevoke, ncclCommRevoke)

// X(CufileApi field, cufile.h name, "name the loader dlsyms"); cufile.h maps the name to it.
#define CUFILE_FUNCTIONS(X)                                              \
  X(DriverOpen, cuFileDriverOpen, "cuFileDriverOpen")                    \
  X(DriverClose, cuFileDriverClose, "cuFileDriverClose_v2")              \
  X(HandleRegister, cuFileHandleRegister, "cuFileHandleRegister")        \
  X(HandleDeregister, cuFileHandleDeregister, "cuFileHandleDeregister")  \
  X(BufRegister, cuFileBufRegister, "cuFileBufRegister")                 \
  X(BufDeregister, cuFileBufDeregister, "cuFileBufDeregister")           \
  X(Read, cuFileRead, "cuFileRead")                                      \
  X(Write, cuFileWrite, "cuFileWrite")
#define CUFILE_FALLBACKS(X) X(DriverClose, "cuFileDriverClose")

// ncclConfig_t, field by field, in declaration order.
#define NCCL_CONFIG_FIELDS(X)                                                                              \
  X(size) X(magic) X(version) X(blocking) X(cgaClusterSize) X(minCTAs) X(maxCTAs) X(netName) X(splitShare) \
  X(trafficClass) X(commName) X(collnetEnable) X(CTAPolicy) X(shrinkShare) X(nvlsCTAs)                     \
  X(nChannelsPerNetPeer) X(nvlinkCentricSched) X(graphUsageMode) X(numRmaCtx) X(maxP2pPeers)               \
  X(graphStreamOrdering)

// The CudaApi field types, captured under names cuda.h does not touch.
namespace proj {
#define CAPTURE(field, ...) using p_##field = decltype(ncclnode::CudaApi::field);
CUDA_FUNCTIONS(CAPTURE)
#undef CAPTURE
}  // namespace proj

#ifdef ABI_CHECK_SELFTEST
// abi.test.ts compiles this once to prove that a wrong declaration does not compile:
// the datatype passed as a pointer, and two config fields swapped.
namespace wrong {
struct NcclApi {
  ncclnode::ncclResult (*AllReduce)(const void*, void*, size_t, int*, int, ncclnode::ncclComm, ncclnode::CUstream);
};
struct Config {
  size_t size;
  unsigned magic, version;
  int blocking, cgaClusterSize, maxCTAs, minCTAs;
};
}  // namespace wrong
#endif

#include <cudaTypedefs.h>  // includes cuda.h
#include <cufile.h>
#include <nccl.h>

namespace abi {

enum class Class { Void, Integer, Floating, Pointer, Aggregate, Other };

template <class T>
constexpr Class classOf() {
  if constexpr (std::is_void_v<T>) return Class::Void;
  else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) return Class::Integer;
  else if constexpr (std::is_floating_point_v<T>) return Class::Floating;
  else if constexpr (std::is_pointer_v<T>) return Class::Pointer;
  else if constexpr (std::is_class_v<T> || std::is_union_v<T>) return Class::Aggregate;
  else return Class::Other;
}

template <class T, class = void>
struct complete : std::false_type {};
template <class T>
struct complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

// Same ABI class, size and alignment. Pointers: to void, to an opaque type or to a
// function, any pointer will do; to a complete object type, the pointees must match
// in turn (an int* for a size_t* is wrong; an int* for an enum* is fine).
template <class P, class R>
constexpr bool sameAbi() {
  using p = std::remove_cv_t<P>;
  using r = std::remove_cv_t<R>;
  if constexpr (classOf<p>() != classOf<r>()) return false;
  else if constexpr (std::is_void_v<p>) return true;
  else if constexpr (sizeof(p) != sizeof(r) || alignof(p) != alignof(r)) return false;
  else if constexpr (std::is_pointer_v<p>) {
    using pp = std::remove_cv_t<std::remove_pointer_t<p>>;
    using rp = std::remove_cv_t<std::remove_pointer_t<r>>;
    if constexpr (std::is_void_v<pp> || std::is_void_v<rp> || std::is_function_v<pp> || std::is_function_v<rp> ||
                  !complete<pp>::value || !complete<rp>::value)
      return true;
    else return sameAbi<pp, rp>();
  } else if constexpr (std::is_class_v<p>) return std::is_trivially_copyable_v<p> && std::is_trivially_copyable_v<r>;
  else return true;
}

// A failing static_assert here names the function (Tag), the 0-based argument index
// and both types in the compiler's "required from" lines.
template <class Tag, size_t Index, class Project, class Real>
struct Argument {
  static_assert(sameAbi<Project, Real>(), "argument differs from the real header in ABI class, size or alignment");
  static constexpr bool ok = sameAbi<Project, Real>();
};
template <class Tag, class Project, class Real>
struct Return {
  static_assert(sameAbi<Project, Real>(), "return type differs from the real header in ABI class, size or alignment");
  static constexpr bool ok = sameAbi<Project, Real>();
};

template <class Tag, class Project, class Real>
struct Function;
template <class Tag, class PR, class RR, class... PA, class... RA>
struct Function<Tag, PR (*)(PA...), RR (*)(RA...)> {
  static_assert(sizeof...(PA) == sizeof...(RA), "argument count differs from the real header");
  template <size_t... I>
  static constexpr bool arguments(std::index_sequence<I...>) {
    return (true && ... &&
            Argument<Tag, I, std::tuple_element_t<I, std::tuple<PA...>>, std::tuple_element_t<I, std::tuple<RA...>>>::ok);
  }
  static constexpr bool check() {
    if constexpr (sizeof...(PA) != sizeof...(RA)) return false;
    else return Return<Tag, PR, RR>::ok && arguments(std::index_sequence_for<PA...>{});
  }
};

constexpr bool streq(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

}  // namespace abi

#define STR(x) #x
#define XSTR(x) STR(x)  // after macro expansion: XSTR(cuMemAlloc) is "cuMemAlloc_v2"

// ---- Functions -------------------------------------------------------------------

namespace tag {
#define DECLARE_TAG(field, ...) struct p_##field;
CUDA_FUNCTIONS(DECLARE_TAG)
#undef DECLARE_TAG
#define DECLARE_TAG(field, fn) struct fn;
NCCL_FUNCTIONS(DECLARE_TAG)
#undef DECLARE_TAG
#define DECLARE_TAG(fn, ...) struct fn;
CUDA_OTHERS(DECLARE_TAG)
#undef DECLARE_TAG
#define DECLARE_TAG(field, fn, ...) struct fn;
CUFILE_FUNCTIONS(DECLARE_TAG)
#undef DECLARE_TAG
}  // namespace tag

#define CHECK_CUDA(field, name)                                                                                 \
  static_assert(abi::Function<tag::p_##field, proj::p_##field, decltype(&::field)>::check(),                   \
                "CudaApi::" #field " differs from cuda.h");                                                    \
  static_assert(abi::streq(XSTR(field), name), "CudaApi::" #field ": the loader dlsyms " name                  \
                                                ", but cuda.h maps " #field " to another symbol");
CUDA_FUNCTIONS(CHECK_CUDA)

#define CHECK_CUDA_FALLBACK(field, name, pfn)                                          \
  static_assert(abi::Function<tag::p_##field, proj::p_##field, pfn>::check(),          \
                "CudaApi::" #field " differs from " #pfn " (the fallback " name ")");
CUDA_FALLBACKS(CHECK_CUDA_FALLBACK)

#define CHECK_CUDA_OTHER(fn, name, type)                                                                  \
  static_assert(abi::Function<tag::fn, type, decltype(&::fn)>::check(), #fn ": the call site's type differs"); \
  static_assert(abi::streq(XSTR(fn), name), #fn ": cuda.h maps it to another symbol than " name);
CUDA_OTHERS(CHECK_CUDA_OTHER)

#define CHECK_NCCL(field, fn)                                                                             \
  static_assert(abi::Function<tag::fn, decltype(ncclnode::NcclApi::field), decltype(&::fn)>::check(),    \
                "NcclApi::" #field " differs from nccl.h's " #fn);
NCCL_FUNCTIONS(CHECK_NCCL)

#define CHECK_CUFILE(field, fn, name)                                                                      \
  static_assert(abi::Function<tag::fn, decltype(ncclnode::CufileApi::field), decltype(&::fn)>::check(),   \
                "CufileApi::" #field " differs from cufile.h's " #fn);                                     \
  static_assert(abi::streq(XSTR(fn), name), "CufileApi::" #field ": the loader dlsyms " name               \
                                             ", but cufile.h maps " #fn " to another symbol");
CUFILE_FUNCTIONS(CHECK_CUFILE)

#ifdef ABI_CHECK_SELFTEST
static_assert(abi::Function<tag::ncclAllReduce, decltype(wrong::NcclApi::AllReduce), decltype(&::ncclAllReduce)>::check(),
              "selftest: a pointer for a by-value enum");
static_assert(offsetof(wrong::Config, minCTAs) == offsetof(ncclConfig_t, minCTAs), "selftest: config field order");
#endif

// ---- Structs ---------------------------------------------------------------------

#define SAME_SIZE(P, R) \
  static_assert(sizeof(P) == sizeof(R) && alignof(P) == alignof(R), #P " differs in size or alignment from " #R);
#define SAME_FIELD(P, R, pf, rf)                                                                           \
  static_assert(offsetof(P, pf) == offsetof(R, rf), #P "::" #pf " is not at " #R "::" #rf "'s offset"); \
  static_assert(abi::sameAbi<decltype(P::pf), decltype(R::rf)>(), #P "::" #pf " differs in type from " #R "::" #rf);

SAME_SIZE(ncclnode::ncclConfigV23007, ncclConfig_t)
#define CONFIG_FIELD(f) SAME_FIELD(ncclnode::ncclConfigV23007, ncclConfig_t, f, f)
NCCL_CONFIG_FIELDS(CONFIG_FIELD)
SAME_SIZE(ncclnode::ncclUniqueIdBytes, ncclUniqueId)
SAME_FIELD(ncclnode::ncclUniqueIdBytes, ncclUniqueId, internal, internal)

SAME_SIZE(ncclnode::CUfileError, CUfileError_t)
SAME_FIELD(ncclnode::CUfileError, CUfileError_t, err, err)
SAME_FIELD(ncclnode::CUfileError, CUfileError_t, cu_err, cu_err)
SAME_SIZE(ncclnode::CUfileDescr, CUfileDescr_t)
SAME_FIELD(ncclnode::CUfileDescr, CUfileDescr_t, type, type)
SAME_FIELD(ncclnode::CUfileDescr, CUfileDescr_t, handle, handle)
SAME_FIELD(ncclnode::CUfileDescr, CUfileDescr_t, fs_ops, fs_ops)
SAME_FIELD(decltype(ncclnode::CUfileDescr::handle), decltype(CUfileDescr_t::handle), fd, fd)
SAME_FIELD(decltype(ncclnode::CUfileDescr::handle), decltype(CUfileDescr_t::handle), handle, handle)
static_assert(abi::sameAbi<ncclnode::CUfileHandle, CUfileHandle_t>(), "CUfileHandle_t");

// CUDA handle and scalar types.
static_assert(abi::sameAbi<ncclnode::CUresult, CUresult>(), "CUresult");
static_assert(abi::sameAbi<ncclnode::CUdevice, CUdevice>(), "CUdevice");
static_assert(abi::sameAbi<ncclnode::CUdeviceptr, CUdeviceptr>(), "CUdeviceptr");
// Opaque handles (the project's are its own incomplete structs): pointers, nothing more.
static_assert(abi::sameAbi<ncclnode::CUstream, CUstream>() && abi::sameAbi<ncclnode::CUevent, CUevent>() &&
                  abi::sameAbi<ncclnode::CUcontext, CUcontext>() && abi::sameAbi<ncclnode::CUmodule, CUmodule>() &&
                  abi::sameAbi<ncclnode::CUfunction, CUfunction>(),
              "CUDA handle types are pointers");

// NVML: no header is fetched. Sizes and offsets as NVIDIA's NVML API reference
// (docs.nvidia.com/deploy/nvml-api, "Device Structs"/nvml.h of CUDA 12.x-13.x) defines
// them on LP64: nvmlPciInfo_t {char busIdLegacy[16]; unsigned domain, bus, device,
// pciDeviceId, pciSubSystemId; char busId[32];}, nvmlMemory_v2_t {unsigned version;
// unsigned long long total, reserved, free, used;}, nvmlUtilization_t {unsigned gpu,
// memory;}, nvmlTemperature_v1_t {unsigned version; nvmlTemperatureSensors_t sensorType;
// int temperature;}, nvmlGpuFabricInfo_v3_t {unsigned version; unsigned char
// clusterUuid[16]; nvmlReturn_t status; unsigned cliqueId; nvmlGpuFabricState_t state
// (unsigned char); unsigned healthMask; unsigned char healthSummary;}, nvmlEventData_t
// {nvmlDevice_t device; unsigned long long eventType, eventData; unsigned gpuInstanceId,
// computeInstanceId;}; versions are NVML_STRUCT_VERSION(name, v) = sizeof | v << 24.
#define AT(T, f, off) static_assert(offsetof(ncclnode::T, f) == (off), #T "::" #f " is not at offset " #off);
static_assert(sizeof(ncclnode::nvmlPciInfoV3) == 68, "nvmlPciInfo_t is 68 bytes");
AT(nvmlPciInfoV3, busIdLegacy, 0) AT(nvmlPciInfoV3, domain, 16) AT(nvmlPciInfoV3, bus, 20)
AT(nvmlPciInfoV3, device, 24) AT(nvmlPciInfoV3, pciDeviceId, 28) AT(nvmlPciInfoV3, pciSubSystemId, 32)
AT(nvmlPciInfoV3, busId, 36)
static_assert(sizeof(ncclnode::nvmlMemoryV2) == 40, "nvmlMemory_v2_t is 40 bytes");
AT(nvmlMemoryV2, version, 0) AT(nvmlMemoryV2, total, 8) AT(nvmlMemoryV2, reserved, 16) AT(nvmlMemoryV2, free, 24)
AT(nvmlMemoryV2, used, 32)
static_assert(ncclnode::nvmlStructVersion(sizeof(ncclnode::nvmlMemoryV2), 2) == 0x02000028, "nvmlMemory_v2");
static_assert(sizeof(ncclnode::nvmlUtilization) == 8, "nvmlUtilization_t is 8 bytes");
AT(nvmlUtilization, gpu, 0) AT(nvmlUtilization, memory, 4)
static_assert(sizeof(ncclnode::nvmlTemperatureV1) == 12, "nvmlTemperature_v1_t is 12 bytes");
AT(nvmlTemperatureV1, version, 0) AT(nvmlTemperatureV1, sensorType, 4) AT(nvmlTemperatureV1, temperature, 8)
static_assert(sizeof(ncclnode::nvmlGpuFabricInfoV3) == 40, "nvmlGpuFabricInfo_v3_t is 40 bytes");
AT(nvmlGpuFabricInfoV3, version, 0) AT(nvmlGpuFabricInfoV3, clusterUuid, 4) AT(nvmlGpuFabricInfoV3, status, 20)
AT(nvmlGpuFabricInfoV3, cliqueId, 24) AT(nvmlGpuFabricInfoV3, state, 28) AT(nvmlGpuFabricInfoV3, healthMask, 32)
AT(nvmlGpuFabricInfoV3, healthSummary, 36)
static_assert(sizeof(ncclnode::nvmlEventData) == 32, "nvmlEventData_t is 32 bytes");
AT(nvmlEventData, device, 0) AT(nvmlEventData, eventType, 8) AT(nvmlEventData, eventData, 16)
AT(nvmlEventData, gpuInstanceId, 24) AT(nvmlEventData, computeInstanceId, 28)
// nvmlReturn_t and nvmlEventType* values, from the same reference.
static_assert(ncclnode::kNvmlSuccess == 0 && ncclnode::kNvmlInvalidArgument == 2 && ncclnode::kNvmlNotSupported == 3 &&
                  ncclnode::kNvmlTimeout == 10 && ncclnode::kNvmlFunctionNotFound == 13,
              "NVML_SUCCESS 0, NVML_ERROR_INVALID_ARGUMENT 2, _NOT_SUPPORTED 3, _TIMEOUT 10, _FUNCTION_NOT_FOUND 13");
static_assert(ncclnode::kNvmlEventDbe == 0x2 && ncclnode::kNvmlEventXid == 0x8 && ncclnode::kNvmlEventGpuUnavailable == 0x4000 &&
                  ncclnode::kNvmlEventRecoveryAction == 0x8000,
              "nvmlEventTypeDoubleBitEccError 0x2, XidCriticalError 0x8, GpuUnavailableError 0x4000, GpuRecoveryAction 0x8000");

// ---- Enums and constants ---------------------------------------------------------

#define SAME_VALUE(ours, theirs) static_assert((ours) == (theirs), #ours " != " #theirs);
SAME_VALUE(ncclnode::kNcclSuccess, ncclSuccess)
SAME_VALUE(ncclnode::kNcclInvalidArgument, ncclInvalidArgument)
SAME_VALUE(ncclnode::kNcclRemoteError, ncclRemoteError)
SAME_VALUE(ncclnode::kNcclInProgress, ncclInProgress)
SAME_VALUE(ncclnode::kNcclTimeout, ncclTimeout)
SAME_VALUE(ncclnode::kNcclShrinkDefault, NCCL_SHRINK_DEFAULT)
SAME_VALUE(ncclnode::kNcclShrinkAbort, NCCL_SHRINK_ABORT)
SAME_VALUE(ncclnode::kNcclScalarHostImmediate, ncclScalarHostImmediate)
SAME_VALUE(NCCL_VERSION_CODE, 23007)  // the fetched header is the release nccl_api.h follows
SAME_VALUE(NCCL_CONFIG_UNDEF_INT, INT_MIN)
#define DTYPE(ours, theirs) SAME_VALUE(static_cast<int>(ncclnode::DType::ours), theirs)
DTYPE(Int8, ncclInt8) DTYPE(Uint8, ncclUint8) DTYPE(Int32, ncclInt32) DTYPE(Uint32, ncclUint32)
DTYPE(Int64, ncclInt64) DTYPE(Uint64, ncclUint64) DTYPE(Float16, ncclFloat16) DTYPE(Float32, ncclFloat32)
DTYPE(Float64, ncclFloat64) DTYPE(Bfloat16, ncclBfloat16)
DTYPE(Float8e4m3, ncclFloat8e4m3) DTYPE(Float8e5m2, ncclFloat8e5m2)
SAME_VALUE(ncclFloat8e4m3, 10) SAME_VALUE(ncclFloat8e5m2, 11)
SAME_VALUE(ncclnode::kNumDTypes, ncclNumTypes)
#define REDOP(ours, theirs) SAME_VALUE(static_cast<int>(ncclnode::RedOp::ours), theirs)
REDOP(Sum, ncclSum) REDOP(Prod, ncclProd) REDOP(Max, ncclMax) REDOP(Min, ncclMin) REDOP(Avg, ncclAvg)
SAME_VALUE(ncclnode::kNumRedOps, ncclNumOps)

SAME_VALUE(ncclnode::kCudaSuccess, CUDA_SUCCESS)
SAME_VALUE(ncclnode::kCudaNotReady, CUDA_ERROR_NOT_READY)
SAME_VALUE(ncclnode::kStreamNonBlocking, CU_STREAM_NON_BLOCKING)
SAME_VALUE(ncclnode::kEventDisableTiming, CU_EVENT_DISABLE_TIMING)
SAME_VALUE(ncclnode::kAttrPciBusId, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
SAME_VALUE(ncclnode::kAttrPciDeviceId, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
SAME_VALUE(ncclnode::kAttrPciDomainId, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)
SAME_VALUE(ncclnode::kAttrCcMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
SAME_VALUE(ncclnode::kAttrCcMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
SAME_VALUE(ncclnode::kMemRangeHandleTypeDmaBufFd, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)

SAME_VALUE(ncclnode::kCufileSuccess, CU_FILE_SUCCESS)
SAME_VALUE(ncclnode::kCufileHandleTypeOpaqueFd, CU_FILE_HANDLE_TYPE_OPAQUE_FD)
// Every CUfileOpError code has its own name in the project's table.
#define CUFILE_OP(code, name, text) \
  static_assert(ncclnode::cufileErrorName(code) && abi::streq(ncclnode::cufileErrorName(code), #name), "cufileErrorName: " #name);
CUFILEOP_STATUS_ENTRIES
#undef CUFILE_OP

// ---- What needs running ------------------------------------------------------------

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

void exported(void* lib, const char* library, const char* name) {
  char line[256];
  std::snprintf(line, sizeof line, "%s exports %s", library, name);
  expect(lib && dlsym(lib, name), line);
}

}  // namespace

// argv: <real libnccl.so.2> <real libcufile.so.0>
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: abi_check <libnccl.so.2> <libcufile.so.0>\n");
    return 2;
  }
  static const ncclConfig_t reference = NCCL_CONFIG_INITIALIZER;  // static: padding is zero
  const ncclnode::ncclConfigV23007 ours = ncclnode::ncclConfigInit();
  expect(std::memcmp(&ours, &reference, sizeof reference) == 0, "ncclConfigInit() == NCCL_CONFIG_INITIALIZER, byte for byte");

  void* nccl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!nccl) std::printf("FAIL dlopen %s: %s\n", argv[1], dlerror()), ++failures;
#define EXPORTED_NCCL(field, fn) exported(nccl, "libnccl.so.2", #fn);
  NCCL_FUNCTIONS(EXPORTED_NCCL)
  int version = 0;
  expect(nccl && reinterpret_cast<decltype(&::ncclGetVersion)>(dlsym(nccl, "ncclGetVersion"))(&version) == ncclSuccess &&
             version == NCCL_VERSION_CODE,
         "the real libnccl's ncclGetVersion matches nccl.h's NCCL_VERSION_CODE");

  void* cufile = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!cufile) std::printf("FAIL dlopen %s: %s\n", argv[2], dlerror()), ++failures;
#define EXPORTED_CUFILE(field, fn, name) exported(cufile, "libcufile.so.0", name);
  CUFILE_FUNCTIONS(EXPORTED_CUFILE)
#define EXPORTED_CUFILE_FALLBACK(field, name) exported(cufile, "libcufile.so.0", name);
  CUFILE_FALLBACKS(EXPORTED_CUFILE_FALLBACK)

  // The project's own loader, pointed at the real library: every symbol binds.
  setenv("NCCL_NODE_LIBNCCL", argv[1], 1);
  std::string why;
  const ncclnode::NcclApi* api = ncclnode::tryNccl(&why);
  expect(api != nullptr, api ? "tryNccl() loads the real libnccl" : ("tryNccl(): " + why).c_str());
  if (api) {
#define BOUND(field, fn) expect(api->field != nullptr, "NcclApi::" #field " bound to the real " #fn);
    NCCL_FUNCTIONS(BOUND)
  }
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}

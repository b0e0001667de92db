// libnccl.so.2's host API, declared from the NCCL ABI reference (no nccl.h) and
// resolved with dlopen/dlsym. The minimum is NCCL 2.18 (ncclCommSplit); every newer
// symbol is optional and gated on both dlsym and ncclGetVersion, so a feature says
// "needs NCCL >= x.y" instead of crashing on an older library.
#pragma once

#include <cstddef>
#include <string>

#include "../cuda/cuda_api.h"

namespace ncclnode {

using ncclResult = int;
struct ncclCommOpaque;
using ncclComm = ncclCommOpaque*;
struct ncclWindowOpaque;
using ncclWindow = ncclWindowOpaque*;
struct ncclUniqueIdBytes { char internal[128]; };  // passed by value, as the ABI says

constexpr ncclResult kNcclSuccess = 0, kNcclInvalidArgument = 4, kNcclRemoteError = 6, kNcclInProgress = 7,
                     kNcclTimeout = 8;
constexpr int kNcclShrinkDefault = 0, kNcclShrinkAbort = 1;  // ncclCommShrink's flags
constexpr int kNcclScalarHostImmediate = 1;
constexpr int kMinNccl = 21800;

// ncclConfig_t as of 2.30.7 (96 bytes on LP64); older libraries read only their prefix.
struct ncclConfigV23007 {
  size_t size;
  unsigned magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char* netName;
  int splitShare, trafficClass;
  const char* commName;
  int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched;
  int graphUsageMode, numRmaCtx, maxP2pPeers, graphStreamOrdering;
};
static_assert(sizeof(ncclConfigV23007) == 96, "ncclConfig_t layout");
ncclConfigV23007 ncclConfigInit();  // NCCL_CONFIG_INITIALIZER

struct NcclApi {
  void* lib = nullptr;
  int version = 0;  // NCCL_VERSION code, e.g. 21806
  ncclResult (*GetVersion)(int*);
  ncclResult (*GetUniqueId)(ncclUniqueIdBytes*);
  ncclResult (*CommInitRankConfig)(ncclComm*, int, ncclUniqueIdBytes, int, ncclConfigV23007*);
  ncclResult (*CommSplit)(ncclComm, int, int, ncclComm*, ncclConfigV23007*);
  ncclResult (*CommFinalize)(ncclComm);
  ncclResult (*CommDestroy)(ncclComm);
  ncclResult (*CommAbort)(ncclComm);
  ncclResult (*CommCount)(ncclComm, int*);
  ncclResult (*CommUserRank)(ncclComm, int*);
  ncclResult (*CommGetAsyncError)(ncclComm, ncclResult*);
  const char* (*GetErrorString)(ncclResult);
  const char* (*GetLastError)(ncclComm);
  ncclResult (*GroupStart)();
  ncclResult (*GroupEnd)();
  ncclResult (*AllReduce)(const void*, void*, size_t, int, int, ncclComm, CUstream);
  ncclResult (*Broadcast)(const void*, void*, size_t, int, int, ncclComm, CUstream);
  ncclResult (*Reduce)(const void*, void*, size_t, int, int, int, ncclComm, CUstream);
  ncclResult (*AllGather)(const void*, void*, size_t, int, ncclComm, CUstream);
  ncclResult (*ReduceScatter)(const void*, void*, size_t, int, int, ncclComm, CUstream);
  ncclResult (*Send)(const void*, size_t, int, int, ncclComm, CUstream);
  ncclResult (*Recv)(void*, size_t, int, int, ncclComm, CUstream);
  ncclResult (*RedOpCreatePreMulSum)(int*, void*, int, int, ncclComm);
  ncclResult (*RedOpDestroy)(int, ncclComm);
  // Optional (newer than 2.18).
  ncclResult (*MemAlloc)(void**, size_t);                                   // 2.19
  ncclResult (*MemFree)(void*);                                             // 2.19
  ncclResult (*CommRegister)(ncclComm, void*, size_t, void**);              // 2.19
  ncclResult (*CommDeregister)(ncclComm, void*);                            // 2.19
  ncclResult (*CommWindowRegister)(ncclComm, void*, size_t, ncclWindow*, int);  // 2.27
  ncclResult (*CommWindowDeregister)(ncclComm, ncclWindow);                 // 2.27
  ncclResult (*AlltoAll)(const void*, void*, size_t, int, ncclComm, CUstream);   // 2.28
  ncclResult (*Gather)(const void*, void*, size_t, int, int, ncclComm, CUstream);  // 2.28
  ncclResult (*Scatter)(const void*, void*, size_t, int, int, ncclComm, CUstream); // 2.28
  ncclResult (*CommShrink)(ncclComm, int*, int, ncclComm*, ncclConfigV23007*, int);  // 2.27
  ncclResult (*CommRevoke)(ncclComm, int);                                  // 2.28.7

  // Throws Error(Unavailable) "<feature> needs NCCL >= x.y (loaded: a.b.c)" when fn is null.
  template <class F>
  F need(F fn, const char* feature, int since) const {
    if (!fn) missing(feature, since);
    return fn;
  }
  [[noreturn]] void missing(const char* feature, int since) const;
  std::string versionString() const;
};

const NcclApi& nccl();                         // throws Error(Unavailable)
const NcclApi* tryNccl(std::string* why);
std::string ncclVersionString(int code);

// Throws Error(Nccl) "<call>: <error string>: <last error>".
void ncclCheck(const NcclApi& api, ncclResult r, const char* call, ncclComm comm);
std::string ncclErrorText(const NcclApi& api, ncclResult r, ncclComm comm);

}  // namespace ncclnode

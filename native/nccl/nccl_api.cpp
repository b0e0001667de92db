#include "nccl_api.h"

#include <climits>
#include <cstring>
#include <mutex>

#include "../core/errors.h"
#include "../cuda/dl.h"

namespace ncclnode {

std::string ncclVersionString(int code) {
  // NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

ncclConfigV23007 ncclConfigInit() {
  ncclConfigV23007 c;
  std::memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.magic = 0xcafebeef;
  c.version = 23007;
  int* ints[] = {&c.blocking, &c.cgaClusterSize, &c.minCTAs, &c.maxCTAs, &c.splitShare, &c.trafficClass,
                 &c.collnetEnable, &c.CTAPolicy, &c.shrinkShare, &c.nvlsCTAs, &c.nChannelsPerNetPeer,
                 &c.nvlinkCentricSched, &c.graphUsageMode, &c.numRmaCtx, &c.maxP2pPeers, &c.graphStreamOrdering};
  for (int* i : ints) *i = INT_MIN;  // NCCL_CONFIG_UNDEF_INT
  return c;
}

namespace {

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string why;
};

template <class F>
void bind(NcclApi& a, F& fn, const char* name, int since, std::string* missing) {
  fn = reinterpret_cast<F>(symbol(a.lib, name));
  // A symbol the loaded version does not document counts as absent (an honest
  // version gate, and how the stand-in hides newer features).
  if (fn && since > a.version) fn = nullptr;
  if (!fn && missing) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    NcclApi& a = l.api;
    a.lib = openLibrary("NCCL_NODE_LIBNCCL", "libnccl.so.2", "NCCL (libnccl.so.2)", &l.why);
    if (!a.lib) return;
    std::string missing;
    a.GetVersion = reinterpret_cast<decltype(a.GetVersion)>(symbol(a.lib, "ncclGetVersion"));
    if (!a.GetVersion || a.GetVersion(&a.version) != kNcclSuccess) {
      l.why = "the loaded libnccl does not answer ncclGetVersion; set NCCL_NODE_LIBNCCL to a real libnccl.so.2";
      return;
    }
    if (a.version < kMinNccl) {
      l.why = "NCCL " + ncclVersionString(a.version) + " is too old: nccl-node needs NCCL >= 2.18 (ncclCommSplit)";
      return;
    }
    bind(a, a.GetUniqueId, "ncclGetUniqueId", 0, &missing);
    bind(a, a.CommInitRankConfig, "ncclCommInitRankConfig", 0, &missing);
    bind(a, a.CommSplit, "ncclCommSplit", 0, &missing);
    bind(a, a.CommFinalize, "ncclCommFinalize", 0, &missing);
    bind(a, a.CommDestroy, "ncclCommDestroy", 0, &missing);
    bind(a, a.CommAbort, "ncclCommAbort", 0, &missing);
    bind(a, a.CommCount, "ncclCommCount", 0, &missing);
    bind(a, a.CommUserRank, "ncclCommUserRank", 0, &missing);
    bind(a, a.CommGetAsyncError, "ncclCommGetAsyncError", 0, &missing);
    bind(a, a.GetErrorString, "ncclGetErrorString", 0, &missing);
    bind(a, a.GetLastError, "ncclGetLastError", 0, &missing);
    bind(a, a.GroupStart, "ncclGroupStart", 0, &missing);
    bind(a, a.GroupEnd, "ncclGroupEnd", 0, &missing);
    bind(a, a.AllReduce, "ncclAllReduce", 0, &missing);
    bind(a, a.Broadcast, "ncclBroadcast", 0, &missing);
    bind(a, a.Reduce, "ncclReduce", 0, &missing);
    bind(a, a.AllGather, "ncclAllGather", 0, &missing);
    bind(a, a.ReduceScatter, "ncclReduceScatter", 0, &missing);
    bind(a, a.Send, "ncclSend", 0, &missing);
    bind(a, a.Recv, "ncclRecv", 0, &missing);
    bind(a, a.RedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum", 0, &missing);
    bind(a, a.RedOpDestroy, "ncclRedOpDestroy", 0, &missing);
    bind(a, a.MemAlloc, "ncclMemAlloc", 21900, nullptr);
    bind(a, a.MemFree, "ncclMemFree", 21900, nullptr);
    bind(a, a.CommRegister, "ncclCommRegister", 21900, nullptr);
    bind(a, a.CommDeregister, "ncclCommDeregister", 21900, nullptr);
    bind(a, a.CommWindowRegister, "ncclCommWindowRegister", 22700, nullptr);
    bind(a, a.CommWindowDeregister, "ncclCommWindowDeregister", 22700, nullptr);
    bind(a, a.AlltoAll, "ncclAlltoAll", 22800, nullptr);
    bind(a, a.Gather, "ncclGather", 22800, nullptr);
    bind(a, a.Scatter, "ncclScatter", 22800, nullptr);
    bind(a, a.CommShrink, "ncclCommShrink", 22700, nullptr);
    bind(a, a.CommRevoke, "ncclCommRevoke", 22807, nullptr);
    if (!missing.empty()) {
      l.why = "the loaded libnccl (" + ncclVersionString(a.version) + ") lacks " + missing;
      return;
    }
    l.ok = true;
  });
  return l;
}

}  // namespace

void NcclApi::missing(const char* feature, int since) const {
  throw Error(Code::Unavailable, std::string(feature) + " needs NCCL >= " + ncclVersionString(since).substr(0, ncclVersionString(since).rfind('.')) +
                                     " (loaded: NCCL " + ncclVersionString(version) + ")");
}

std::string NcclApi::versionString() const { return ncclVersionString(version); }

const NcclApi* tryNccl(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

const NcclApi& nccl() {
  std::string why;
  const NcclApi* a = tryNccl(&why);
  if (!a) throw Error(Code::Unavailable, why);
  return *a;
}

std::string ncclErrorText(const NcclApi& api, ncclResult r, ncclComm comm) {
  const char* s = api.GetErrorString ? api.GetErrorString(r) : nullptr;
  std::string out = s ? s : "NCCL error " + std::to_string(r);
  const char* last = api.GetLastError ? api.GetLastError(comm) : nullptr;
  if (last && *last) out += std::string(": ") + last;
  return out;
}

void ncclCheck(const NcclApi& api, ncclResult r, const char* call, ncclComm comm) {
  if (r == kNcclSuccess || r == kNcclInProgress) return;
  throw Error(r == kNcclInvalidArgument ? Code::InvalidArgument : Code::Nccl,
              std::string(call) + ": " + ncclErrorText(api, r, comm));
}

}  // namespace ncclnode

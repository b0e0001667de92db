// Stand-in for libnccl.so.2: NCCL's host API with the real names and C ABI, running
// real collectives between processes over a TCP mesh (nccl_standin_net.cpp). Every
// operation becomes host work on the caller's CUDA stream through the stand-in
// libcuda, so it completes asynchronously and is observed with events, as on a GPU.
//
// Test knobs (environment):
//   NCCL_STANDIN_VERSION=21806   the NCCL_VERSION code to report; functions newer than
//                                it fail with ncclInvalidUsage ("needs NCCL >= x.y")
//   NCCL_STANDIN_LAUNCH_DELAY_US=200
//                                how long after a call on a nonblocking communicator
//                                NCCL's thread launches its work (the call returns
//                                ncclInProgress meanwhile, as NCCL 2.30 does)
//   NCCL_STANDIN_RUN_US=0       how long each call's (or group's) work occupies the stream
//                                before it moves data, as a large collective's kernel would
//   NCCL_STANDIN_FAULT=<action>:<Collective>:<rank>[:<nth>]
//                                action hang (stop moving data until aborted) or exit
//                                (the process dies), at the nth (default 1st) call of
//                                e.g. AllReduce on that rank of a communicator
#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nccl_standin_comm.h"

using namespace standin;

namespace {

std::mutex globalMu;
std::string globalLastError;
thread_local std::string lastErrorCopy;

int emulatedVersion() {
  const char* v = std::getenv("NCCL_STANDIN_VERSION");
  return v && *v ? std::atoi(v) : 23007;
}

std::string versionText(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100);
}

// Backstop for callers that ignore ncclGetVersion: a hidden function answers
// ncclInvalidUsage with a message naming the version it needs.
bool hidden(Comm* comm, const char* fn, int since) {
  if (emulatedVersion() >= since) return false;
  setError(comm, std::string(fn) + " needs NCCL >= " + versionText(since) + " (this stand-in emulates " +
                     std::to_string(emulatedVersion()) + ")");
  return true;
}

}  // namespace

namespace standin {
void setError(Comm* comm, const std::string& msg) {
  std::lock_guard<std::mutex> lock(globalMu);
  globalLastError = msg;
  if (comm) comm->lastError = msg;
}
}  // namespace standin

extern "C" {

int ncclGetVersion(int* v) {
  if (!v) return kInvalidArgument;
  *v = emulatedVersion();
  return kSuccess;
}

const char* ncclGetErrorString(int r) {
  switch (r) {
    case 0: return "no error";
    case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case 3: return "internal error - please report this issue to the NCCL developers";
    case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    case 8: return "timeout";
    default: return "unknown result code";
  }
}

// NCCL keeps one last-error text for the whole process; the argument is unused.
const char* ncclGetLastError(ncclComm_t) {
  std::lock_guard<std::mutex> lock(globalMu);
  lastErrorCopy = globalLastError;
  return lastErrorCopy.c_str();
}

int ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return kInvalidArgument;
  try {
    makeUniqueId(reinterpret_cast<UniqueId*>(id));
  } catch (const NetError& e) {
    setError(nullptr, e.what());
    return e.result;
  }
  return kSuccess;
}

int ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, Config* config) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) {
    setError(nullptr, "ncclCommInitRankConfig: invalid rank " + std::to_string(rank) + " of " + std::to_string(nranks));
    return kInvalidArgument;
  }
  int blocking = 1;
  if (config) {
    if (config->magic != 0xcafebeef) {
      setError(nullptr, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
      return kInvalidArgument;
    }
    if (config->version >= 21400 && config->blocking != INT32_MIN) blocking = config->blocking;
    if (blocking != 0 && blocking != 1) { setError(nullptr, "config.blocking must be 0 or 1"); return kInvalidArgument; }
  }
  *out = startComm(reinterpret_cast<const UniqueId&>(id), nranks, rank, blocking == 1);
  return blocking ? (*out)->asyncError.load() : kInProgress;
}

int ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, nullptr);
}

int ncclCommGetAsyncError(ncclComm_t comm, int* err) {
  if (!comm || !err) return kInvalidArgument;
  *err = comm->asyncError.load();
  return kSuccess;
}

int ncclCommCount(ncclComm_t comm, int* n) { if (!comm) return kInvalidArgument; *n = comm->nranks; return kSuccess; }
int ncclCommUserRank(ncclComm_t comm, int* r) { if (!comm) return kInvalidArgument; *r = comm->rank; return kSuccess; }
int ncclCommCuDevice(ncclComm_t comm, int* d) { if (!comm) return kInvalidArgument; *d = 0; return kSuccess; }

int ncclCommAbort(ncclComm_t comm) {
  if (!comm) return kSuccess;
  freeComm(comm, true);
  return kSuccess;
}
int ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return kSuccess;
  // Destroy on a communicator still in progress is refused and does nothing.
  if (comm->asyncError.load() == kInProgress) {
    setError(comm, "ncclCommDestroy: communicator is still in progress (finalize or abort it first)");
    return kInvalidArgument;
  }
  freeComm(comm, false);
  return kSuccess;
}
// Flushes the communicator's work: in progress until everything issued has finished.
int ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return kInvalidArgument;
  if (int rc = checkIdle(comm, "ncclCommFinalize")) return rc;
  auto drain = [comm] { while (comm->pending.load() > (comm->blocking ? 0 : 1)) std::this_thread::sleep_for(std::chrono::microseconds(200)); };
  if (!comm->blocking) return later(comm, drain);
  drain();
  return kSuccess;
}

int ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, Config* config) {
  if (!comm || !out) return kInvalidArgument;
  int blocking = comm->blocking ? 1 : 0;
  if (config && config->magic == 0xcafebeef && config->blocking != INT32_MIN) blocking = config->blocking;
  return splitComm(comm, color, key, out, blocking == 1);
}

// Argument checks as NCCL's: every excluded rank in range, none twice, not the caller
// (an excluded rank does not call it), not all of them.
int ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, Config* config,
                   int shrinkFlags) {
  if (hidden(comm, "ncclCommShrink", 22700)) return kInvalidUsage;
  auto bad = [comm](const std::string& m) { setError(comm, "ncclCommShrink: " + m); return kInvalidArgument; };
  if (!comm) return bad("comm is NULL");
  if (!newcomm) return bad("newcomm is NULL");
  if (shrinkFlags != 0 && shrinkFlags != 1) {
    return bad("shrinkFlags must be NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1), got " + std::to_string(shrinkFlags));
  }
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList)) {
    return bad("excludeRanksList must hold excludeRanksCount (" + std::to_string(excludeRanksCount) + ") ranks");
  }
  std::vector<int> exclude(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::sort(exclude.begin(), exclude.end());
  for (size_t i = 0; i < exclude.size(); ++i) {
    const int r = exclude[i];
    if (r < 0 || r >= comm->nranks) {
      return bad("excludeRanksList holds rank " + std::to_string(r) + ", outside 0.." + std::to_string(comm->nranks - 1));
    }
    if (i > 0 && exclude[i - 1] == r) return bad("excludeRanksList holds rank " + std::to_string(r) + " twice");
    if (r == comm->rank) return bad("excludeRanksList holds the calling rank " + std::to_string(r));
  }
  if (static_cast<int>(exclude.size()) >= comm->nranks) return bad("excludeRanksList excludes every rank");
  int blocking = comm->blocking ? 1 : 0;
  if (config) {
    if (config->magic != 0xcafebeef) return bad("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    if (config->blocking != INT32_MIN) blocking = config->blocking;
    if (blocking != 0 && blocking != 1) return bad("config.blocking must be 0 or 1");
  }
  return shrinkComm(comm, exclude, newcomm, blocking == 1, shrinkFlags == 1);
}

int ncclGroupStart() { ++groupDepth(); return kSuccess; }
int ncclGroupEnd() {
  if (groupDepth() <= 0) { setError(nullptr, "ncclGroupEnd without ncclGroupStart"); return kInvalidUsage; }
  if (--groupDepth() == 0) return flushGroup();
  return kSuccess;
}

int ncclAllReduce(const void* s, void* r, size_t count, int dt, int op, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::AllReduce, s, r, count, dt, op, -1});
}
int ncclBroadcast(const void* s, void* r, size_t count, int dt, int root, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::Broadcast, s, r, count, dt, 0, root});
}
int ncclBcast(void* buf, size_t count, int dt, int root, ncclComm_t comm, CUstream st) {
  return ncclBroadcast(buf, buf, count, dt, root, comm, st);
}
int ncclReduce(const void* s, void* r, size_t count, int dt, int op, int root, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::Reduce, s, r, count, dt, op, root});
}
int ncclAllGather(const void* s, void* r, size_t count, int dt, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::AllGather, s, r, count, dt, 0, -1});
}
int ncclReduceScatter(const void* s, void* r, size_t count, int dt, int op, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::ReduceScatter, s, r, count, dt, op, -1});
}
int ncclSend(const void* s, size_t count, int dt, int peer, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::Send, s, nullptr, count, dt, 0, peer});
}
int ncclRecv(void* r, size_t count, int dt, int peer, ncclComm_t comm, CUstream st) {
  return enqueue(comm, st, Call{Kind::Recv, nullptr, r, count, dt, 0, peer});
}
int ncclAlltoAll(const void* s, void* r, size_t count, int dt, ncclComm_t comm, CUstream st) {
  if (hidden(comm, "ncclAlltoAll", 22800)) return kInvalidUsage;
  return enqueue(comm, st, Call{Kind::AllToAll, s, r, count, dt, 0, -1});
}
int ncclGather(const void* s, void* r, size_t count, int dt, int root, ncclComm_t comm, CUstream st) {
  if (hidden(comm, "ncclGather", 22800)) return kInvalidUsage;
  return enqueue(comm, st, Call{Kind::Gather, s, r, count, dt, 0, root});
}
int ncclScatter(const void* s, void* r, size_t count, int dt, int root, ncclComm_t comm, CUstream st) {
  if (hidden(comm, "ncclScatter", 22800)) return kInvalidUsage;
  return enqueue(comm, st, Call{Kind::Scatter, s, r, count, dt, 0, root});
}

int ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, ncclComm_t comm) {
  if (!op || !scalar || !comm || dt < 0 || dt > 11) return kInvalidArgument;
  if (int rc = checkIdle(comm, "ncclRedOpCreatePreMulSum")) return rc;
  void* src = residence == 1 ? scalar : cuStandinHostPtr(reinterpret_cast<CUdeviceptr>(scalar), 8);
  if (!src) { setError(comm, "ncclRedOpCreatePreMulSum: scalar is not a device pointer"); return kInvalidArgument; }
  std::lock_guard<std::mutex> lock(comm->mu);
  const int id = comm->nextOp++;
  comm->premul[id] = scalarToDouble(src, dt);
  *op = id;
  return kSuccess;
}
int ncclRedOpDestroy(int op, ncclComm_t comm) {
  if (!comm) return kInvalidArgument;
  if (int rc = checkIdle(comm, "ncclRedOpDestroy")) return rc;
  std::lock_guard<std::mutex> lock(comm->mu);
  return comm->premul.erase(op) ? kSuccess : kInvalidArgument;
}

int ncclMemAlloc(void** ptr, size_t bytes) {
  if (hidden(nullptr, "ncclMemAlloc", 21900)) return kInvalidUsage;
  CUdeviceptr p = 0;  // NCCL allocates at the driver's granularity: page-aligned
  if (cuStandinMemAllocAligned(&p, bytes) != 0) { setError(nullptr, "ncclMemAlloc: cuMemAlloc failed"); return kUnhandledCuda; }
  *ptr = reinterpret_cast<void*>(p);
  return kSuccess;
}
int ncclMemFree(void* ptr) {
  if (hidden(nullptr, "ncclMemFree", 21900)) return kInvalidUsage;
  return cuMemFree_v2(reinterpret_cast<CUdeviceptr>(ptr)) == 0 ? kSuccess : kInvalidArgument;
}

int ncclCommRegister(ncclComm_t comm, void* buf, size_t bytes, void** handle) {
  if (hidden(comm, "ncclCommRegister", 21900)) return kInvalidUsage;
  if (!comm || !handle) return kInvalidArgument;
  if (int rc = checkIdle(comm, "ncclCommRegister")) return rc;
  // Device memory must be a live allocation; a canonical (host) address is taken
  // as page-locked host memory, which the stand-in cannot check further.
  const bool host = (reinterpret_cast<uintptr_t>(buf) >> 47) == 0;
  if (!buf || (!host && !cuStandinHostPtr(reinterpret_cast<CUdeviceptr>(buf), bytes))) {
    setError(comm, "ncclCommRegister: buffer is neither device memory nor host memory");
    return kInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  *handle = new char(0);
  comm->registered[*handle] = host ? std::pair<uintptr_t, size_t>{0, 0} : std::pair<uintptr_t, size_t>{reinterpret_cast<uintptr_t>(buf), bytes};
  return kSuccess;
}
int ncclCommDeregister(ncclComm_t comm, void* handle) {
  if (hidden(comm, "ncclCommDeregister", 21900)) return kInvalidUsage;
  if (!comm) return kInvalidArgument;
  if (int rc = checkIdle(comm, "ncclCommDeregister")) return rc;
  std::lock_guard<std::mutex> lock(comm->mu);
  auto it = comm->registered.find(handle);
  if (it == comm->registered.end()) { setError(comm, "ncclCommDeregister: unknown handle"); return kInvalidArgument; }
  const auto range = it->second;
  comm->registered.erase(it);
  delete static_cast<char*>(handle);
  // The stand-in never reuses a device address, so a range that is no longer memory was freed.
  if (range.second && !cuStandinHostPtr(range.first, range.second)) {
    char at[32];
    std::snprintf(at, sizeof at, "%#llx", static_cast<unsigned long long>(range.first));
    setError(comm, std::string("ncclCommDeregister: the buffer registered at ") + at +
                       " was freed before it was deregistered (NCCL's registration outlived the memory)");
    return kInvalidUsage;
  }
  return kSuccess;
}
int ncclCommWindowRegister(ncclComm_t comm, void* buf, size_t bytes, void** win, int flags) {
  if (hidden(comm, "ncclCommWindowRegister", 22700)) return kInvalidUsage;
  if (!comm || !win || reinterpret_cast<uintptr_t>(buf) % 4096 != 0) {
    setError(comm, "ncclCommWindowRegister: buffer must be 4096-byte aligned (NCCL_WIN_REQUIRED_ALIGNMENT)");
    return kInvalidArgument;
  }
  if (!cuStandinHostPtr(reinterpret_cast<CUdeviceptr>(buf), bytes)) {
    setError(comm, "ncclCommWindowRegister: buffer is not device memory");
    return kInvalidArgument;
  }
  if (int rc = checkIdle(comm, "ncclCommWindowRegister")) return rc;
  auto reg = [comm, win, buf, bytes] {
    std::lock_guard<std::mutex> lock(comm->mu);
    void* h = new char(1);
    comm->registered[h] = {reinterpret_cast<uintptr_t>(buf), bytes};
    *win = h;
  };
  // Nonblocking: *win is written later by NCCL's thread, as the real library does.
  if (!comm->blocking) { *win = nullptr; return later(comm, reg); }
  reg();
  return kSuccess;
}
int ncclCommWindowDeregister(ncclComm_t comm, void* win) { return ncclCommDeregister(comm, win); }

}  // extern "C"

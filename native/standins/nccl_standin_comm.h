// The stand-in libnccl's communicator and its operations (see nccl_standin.cpp).
#pragma once

#include <atomic>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nccl_standin_net.h"
#include "standin_cuda_ext.h"

extern "C" int cuMemAlloc_v2(CUdeviceptr*, size_t);
extern "C" int cuStandinMemAllocAligned(CUdeviceptr*, size_t);
extern "C" int cuMemFree_v2(CUdeviceptr);

namespace standin {

enum : int {
  kSuccess = 0, kUnhandledCuda = 1, kSystemError = 2, kInternalError = 3, kInvalidArgument = 4,
  kInvalidUsage = 5, kRemoteError = 6, kInProgress = 7, kTimeout = 8,
};

struct Config {  // the prefix of ncclConfig_t every version shares
  size_t size;
  unsigned magic, version;
  int blocking;
};

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Send, Recv };
const char* kindName(Kind k);

struct Call {
  Kind kind;
  const void* send;  // device pointers as the caller passed them
  void* recv;
  size_t count;
  int dtype, op, root;  // root: the peer for Send/Recv
};

struct Comm {
  int rank = 0, nranks = 1;
  bool blocking = true;
  std::vector<int> fds;
  // The bootstrap's part a shrink reuses: this rank's listener, every rank's endpoint,
  // and a tag all members share (the unique id's nonce), so a shrink can connect the
  // survivors afresh instead of reusing data connections a failed operation left dirty.
  int listenFd = -1;
  std::vector<Endpoint> table;
  uint64_t meshTag = 0;
  int shrinks = 0;  // shrinks started on this communicator (all survivors count alike)
  // ncclInProgress while initialising and while a deferred launch (a nonblocking
  // communicator's collective, group end, split, finalize, window) is not done.
  std::atomic<int> asyncError{kInProgress};
  std::atomic<bool> aborted{false};
  std::atomic<int> pending{0};  // enqueued operations not finished yet
  std::thread init;
  std::mutex mu;  // guards the members below
  std::string lastError;
  std::map<int, double> premul;  // ncclRedOpCreatePreMulSum operators
  int nextOp = 5;                // ncclNumOps: user operators start here
  // Registration handles -> the range registered ({0, 0} for host memory, which the
  // stand-in cannot check): a device range freed before ncclCommDeregister is refused
  // there, as the stale registration it leaves in real NCCL is undefined behaviour.
  std::map<void*, std::pair<uintptr_t, size_t>> registered;
  std::map<int, int> calls;      // per collective kind, for fault injection
  int splits = 0;
};

}  // namespace standin

typedef standin::Comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

namespace standin {

void setError(Comm* comm, const std::string& msg);
// Records an asynchronous error unless one is already recorded (it sticks).
void failComm(Comm* comm, int result);
// NCCL's rule for nonblocking communicators: nothing may be called while the previous
// call is still in progress. Returns ncclInvalidArgument (and records it as the
// communicator's error, as NCCL does) or ncclSuccess.
int checkIdle(Comm* comm, const char* fn);
// Runs work from NCCL's own thread a little later, the communicator in progress
// meanwhile; returns ncclInProgress. NCCL_STANDIN_LAUNCH_DELAY_US sets the delay.
int later(Comm* comm, std::function<void()> work);
Comm* startComm(const UniqueId& id, int nranks, int rank, bool blocking);
void freeComm(Comm* comm, bool abort);
int splitComm(Comm* comm, int color, int key, Comm** out, bool blocking);
// ncclCommShrink after its argument checks (nccl_standin_shrink.cpp): `exclude` sorted.
int shrinkComm(Comm* comm, const std::vector<int>& exclude, Comm** out, bool blocking, bool abortParent);
int enqueue(Comm* comm, CUstream stream, const Call& call);
int& groupDepth();
int flushGroup();
double scalarToDouble(const void* p, int dtype);

}  // namespace standin

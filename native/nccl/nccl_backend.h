// GPU backend on NCCL (loaded at run time). One nonblocking NCCL communicator and one
// CUDA stream per communicator, and two threads, as ProcessGroupNCCL:
// - the launcher (the engine's worker, launch()) issues the NCCL call and waits
//   until NCCL has launched it (a nonblocking communicator answers ncclInProgress
//   and launches the kernel later from its own thread; until ncclCommGetAsyncError
//   leaves ncclInProgress nothing may be recorded on the stream and no other NCCL
//   call may be made on the communicator), records the op's event (from a small
//   pool) and moves on to the next op, so ops queue back to back on the stream;
// - the watchdog (watch()) polls the in-flight ops' events together with
//   ncclCommGetAsyncError and each op's deadline, and completes the ops in issue
//   order. On an error or timeout it aborts the communicator, marks it broken, dumps
//   the flight record and fails every op in flight (ERR_NCCL / ERR_TIMEOUT for the
//   one at fault, ERR_COMM_ABORTED for the rest).
// An op keeps its buffers (and the JS references to them) until it completes. No
// prepost: the launcher never waits for completion, so the JS thread need not
// launch ahead of it (and NCCL's group depth is per thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "../core/backend.h"
#include "../core/store_client.h"
#include "flight_recorder.h"
#include "nccl_api.h"
#include "nccl_control.h"

namespace ncclnode {

struct NcclConfig {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::string prefix;  // store key prefix unique to this communicator
  std::string storeHost;
  int storePort = 0;
  std::string token;
  // On a fault the watchdog fails the operations but leaves the NCCL communicator to
  // its owner instead of aborting it, so that ncclCommShrink(NCCL_SHRINK_ABORT) can
  // still make the survivors' communicator from it (without ncclCommShrink in the
  // library it aborts, as by default). Children inherit it.
  bool keepOnFault = false;
};

class NcclBackend : public Backend {
 public:
  NcclBackend(NcclConfig cfg, std::shared_ptr<StoreClient> store, std::shared_ptr<NcclControl> ctl);
  ~NcclBackend() override;

  const char* name() const override { return "nccl"; }
  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  std::string version() const override;

  void connect(std::chrono::milliseconds timeout) override;
  void run(Op& op) override;
  bool launch(Op& op) override;
  // Every op goes through the launcher: it holds the device and NCCL's group state.
  bool completesOnCaller(const Op&) const override { return false; }
  std::unique_ptr<Backend> split(int color, int key, std::chrono::milliseconds timeout) override;
  bool supportsShrink() const override;
  std::unique_ptr<Backend> shrink(const std::vector<int>& exclude, bool abortParent,
                                  std::chrono::milliseconds timeout) override;
  void abort() override;
  bool broken() const override { return broken_.load(); }

  // For registration from the JS thread: f(comm) under the communicator lock, once
  // the communicator is idle; an output f's call fills in later (a window) is
  // written by the time withComm returns.
  void withComm(const std::function<void(const NcclApi&, ncclComm)>& f);
  // The memory under a registration (BufferView::keep), held until it is deregistered
  // or the communicator is destroyed: NCCL keeps mappings of a registered buffer, so a
  // DeviceBuffer disposed while registered must not be freed (nor its address reused)
  // under them. Called from NcclControl::withBackend (its lock guards the map).
  void holdRegistered(void* handle, std::shared_ptr<void> memory) { registered_[handle] = std::move(memory); }
  std::shared_ptr<void> takeRegistered(void* handle);
  const FlightRecorder& recorder() const { return fr_; }

 private:
  void issue(Op& op);
  void p2pFallback(Op& op);
  void allToAllV(Op& op);
  using Deadline = std::chrono::steady_clock::time_point;
  // Polls comm's state, releasing `lock` (on commMu_) between polls, until it leaves
  // ncclInProgress. Throws on an error, an abort, or the deadline (aborting comm).
  void awaitProgress(std::unique_lock<std::mutex>& lock, ncclComm comm, Deadline deadline, const char* what);
  void waitReady(ncclComm comm, Deadline deadline, const char* what);
  ncclComm awaitChild(std::unique_lock<std::mutex>& lock, ncclComm* slot, Deadline deadline, const char* what,
                      bool watchParent = true);
  // comm_ out of ncclInProgress (a no-op when no call left it there); under commMu_.
  void settle(std::unique_lock<std::mutex>& lock, Deadline deadline, const char* what);
  void releaseRedOps();  // under commMu_, comm_ settled
  // Fails an op the launcher could not put in flight, after the ops ahead of it.
  [[noreturn]] void launchFailed(const Error& e, uint64_t frId, bool fatal);
  std::string dumpNote(const std::string& message);
  // Waits until every op in flight has completed or failed.
  void drain();
  // The watchdog thread's loop.
  void watch();
  // Fails every op in flight: `culprit` (an index, or -1 for none) with code and
  // message, the others with ERR_COMM_ABORTED; aborts the communicator first.
  void failInFlight(Code code, const std::string& message, long culprit, const char* state);
  CUevent takeEvent();  // under flightMu_
  void abortComm();
  // A fault: abortComm(), or with keepOnFault (and ncclCommShrink) only marks broken.
  void faultComm();
  // Wraps a communicator made from this one (split, shrink) in a backend of its own.
  std::unique_ptr<Backend> adopt(ncclComm child, const std::string& prefix);
  // Checks the result of an NCCL call on comm_; ncclInProgress marks comm_ pending.
  ncclResult call(ncclResult r, const char* what);
  void finalizeAndDestroy();

  NcclConfig cfg_;
  const NcclApi& api_;
  std::shared_ptr<StoreClient> store_;
  std::shared_ptr<NcclControl> ctl_;
  mutable std::mutex commMu_;  // serialises NCCL calls on comm_ between the worker and abort()
  ncclComm comm_ = nullptr;
  bool commAborted_ = false;  // under commMu_
  bool pending_ = false;      // under commMu_: comm_ answered ncclInProgress and has not settled
  std::vector<int> redOpsToRelease_;  // under commMu_: pre-multiplied sums freed once settled
  // Guarded by NcclControl's backend lock: JS-thread registration runs under it, and the
  // destructor detaches under it first. Freed after the destructor destroyed comm_.
  std::map<void*, std::shared_ptr<void>> registered_;
  CUstream stream_ = nullptr;
  // The ops in flight, in issue (= stream) order, each with its event and deadline.
  struct InFlight {
    Op* op;
    uint64_t frId;
    CUevent event;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex flightMu_;
  std::condition_variable flightCv_;
  std::deque<InFlight> inFlight_;   // under flightMu_
  std::vector<CUevent> freeEvents_;  // under flightMu_: recorded events come back here
  std::vector<CUevent> events_;      // under flightMu_: every event made, destroyed with the backend
  bool stopWatchdog_ = false;        // under flightMu_
  std::thread watchdog_;
  CUdeviceptr barrierBuf_ = 0;
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  // A shrink with NCCL_SHRINK_ABORT is under way: the watchdog fails what is in flight.
  std::atomic<bool> terminating_{false};
  bool inGroup_ = false;
  int splits_ = 0;
  FlightRecorder fr_;
};

}  // namespace ncclnode

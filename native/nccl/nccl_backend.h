// GPU backend on NCCL (loaded at run time). One nonblocking NCCL communicator and one
// CUDA stream per communicator; run() issues the NCCL call, waits until NCCL has
// launched it (a nonblocking communicator answers ncclInProgress and launches the
// kernel later from its own thread; until ncclCommGetAsyncError leaves
// ncclInProgress nothing may be recorded on the stream and no other NCCL call may be
// made on the communicator), then records an event and polls it together with
// ncclCommGetAsyncError and the op's deadline. That polling loop, on the
// communicator's own worker thread (never the libuv pool), is the watchdog: on an
// error or timeout it aborts the communicator, marks it broken, dumps the flight
// record and fails the op with ERR_NCCL / ERR_TIMEOUT.
#pragma once

#include <atomic>
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
  bool prepost(Op& op) override;
  std::unique_ptr<Backend> split(int color, int key, std::chrono::milliseconds timeout) override;
  void abort() override;
  bool broken() const override { return broken_.load(); }

  // For registration from the JS thread: f(comm) under the communicator lock, once
  // the communicator is idle; an output f's call fills in later (a window) is
  // written by the time withComm returns.
  void withComm(const std::function<void(const NcclApi&, ncclComm)>& f);
  const FlightRecorder& recorder() const { return fr_; }

 private:
  void launch(Op& op, const OpTag& tag);
  void p2pFallback(Op& op);
  void allToAllV(Op& op);
  using Deadline = std::chrono::steady_clock::time_point;
  // Polls comm's state, releasing `lock` (on commMu_) between polls, until it leaves
  // ncclInProgress. Throws on an error, an abort, or the deadline (aborting comm).
  void awaitProgress(std::unique_lock<std::mutex>& lock, ncclComm comm, Deadline deadline, const char* what);
  void waitReady(ncclComm comm, Deadline deadline, const char* what);
  // comm_ out of ncclInProgress (a no-op when no call left it there); under commMu_.
  void settle(std::unique_lock<std::mutex>& lock, Deadline deadline, const char* what);
  void releaseRedOps();  // under commMu_, comm_ settled
  void waitDone(Op& op, uint64_t frId);
  // Launches op on the communicator's stream (group bookkeeping included). Returns
  // the flight-record id, or nothing when the op only joined an open group.
  std::optional<uint64_t> start(Op& op);
  [[noreturn]] void fatal(Code code, const std::string& message, uint64_t frId, const char* state);
  void abortComm();
  // Checks the result of an NCCL call on comm_; ncclInProgress marks comm_ pending.
  ncclResult call(ncclResult r, const char* what);
  void finalizeAndDestroy();

  NcclConfig cfg_;
  const NcclApi& api_;
  std::shared_ptr<StoreClient> store_;
  std::shared_ptr<NcclControl> ctl_;
  std::mutex commMu_;  // serialises NCCL calls on comm_ between the worker and abort()
  ncclComm comm_ = nullptr;
  bool commAborted_ = false;  // under commMu_
  bool pending_ = false;      // under commMu_: comm_ answered ncclInProgress and has not settled
  std::vector<int> redOpsToRelease_;  // under commMu_: pre-multiplied sums freed once settled
  CUstream stream_ = nullptr;
  CUevent event_ = nullptr;
  CUdeviceptr barrierBuf_ = 0;
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  bool inGroup_ = false;
  std::optional<uint64_t> preposted_;  // flight-record id of the op prepost() launched
  uint64_t ordinal_ = 0;  // ops seen by run()/split(), matching the JS side's count
  int splits_ = 0;
  FlightRecorder fr_;
};

}  // namespace ncclnode

#include "nccl_backend.h"

#include <cstring>
#include <sstream>
#include <thread>

#include "../core/dtype.h"
#include "../cuda/dl.h"

namespace ncclnode {

namespace {

using Clock = std::chrono::steady_clock;

const char* ncclOpName(OpKind k) { return opKindName(k); }

void* dptr(const BufferView& v) { return reinterpret_cast<void*>(v.data); }

// The pause between polls of NCCL's state (awaitProgress, awaitChild): yield the core
// for the first few, then sleep, doubling up to 1 ms.
struct Backoff {
  std::chrono::microseconds nap{10};
  void pause() {
    if (nap < std::chrono::microseconds(200)) std::this_thread::yield();
    else std::this_thread::sleep_for(nap);
    if (nap < std::chrono::milliseconds(1)) nap *= 2;
  }
};

// The pre-multiplied-sum scalar in the op's dtype, as ncclRedOpCreatePreMulSum reads it.
std::vector<char> scalarBytes(double s, DType t) {
  std::vector<char> out(8, 0);
  auto put = [&](auto v) { std::memcpy(out.data(), &v, sizeof v); };
  switch (t) {
    case DType::Int8: put(static_cast<int8_t>(s)); break;
    case DType::Uint8: put(static_cast<uint8_t>(s)); break;
    case DType::Int32: put(static_cast<int32_t>(s)); break;
    case DType::Uint32: put(static_cast<uint32_t>(s)); break;
    case DType::Int64: put(static_cast<int64_t>(s)); break;
    case DType::Uint64: put(static_cast<uint64_t>(s)); break;
    case DType::Float16: put(floatToHalf(static_cast<float>(s))); break;
    case DType::Bfloat16: put(floatToBf16(static_cast<float>(s))); break;
    case DType::Float8e4m3: case DType::Float8e5m2: put(floatToFp8(s, t)); break;
    case DType::Float32: put(static_cast<float>(s)); break;
    case DType::Float64: put(s); break;
  }
  return out;
}

}  // namespace

void NcclControl::withBackend(const std::function<void(NcclBackend&)>& f) {
  std::lock_guard<std::mutex> l(backendMu_);
  if (!backend_) throw Error(Code::CommDestroyed, "the communicator was destroyed");
  f(*backend_);
}

NcclBackend::NcclBackend(NcclConfig cfg, std::shared_ptr<StoreClient> store, std::shared_ptr<NcclControl> ctl)
    : cfg_(std::move(cfg)), api_(nccl()), store_(std::move(store)), ctl_(std::move(ctl)),
      fr_(cfg_.prefix, cfg_.rank, cfg_.size) {
  ctl_->attach(this);
}

NcclBackend::~NcclBackend() {
  ctl_->attach(nullptr);
  {
    std::lock_guard<std::mutex> lock(flightMu_);
    stopWatchdog_ = true;
  }
  flightCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  try {
    useDevice(cfg_.device);
    finalizeAndDestroy();
    const CudaApi& cu = cuda();
    if (barrierBuf_) cu.cuMemFree(barrierBuf_);
    for (CUevent e : events_) cu.cuEventDestroy(e);
    if (stream_) cu.cuStreamDestroy(stream_);
  } catch (...) {
  }
}

std::shared_ptr<void> NcclBackend::takeRegistered(void* handle) {
  auto it = registered_.find(handle);
  if (it == registered_.end()) return nullptr;
  auto memory = std::move(it->second);
  registered_.erase(it);
  return memory;
}

std::string NcclBackend::version() const { return "nccl " + api_.versionString(); }

ncclResult NcclBackend::call(ncclResult r, const char* what) {
  if (r == kNcclInProgress) {
    pending_ = true;
    return r;
  }
  ncclCheck(api_, r, what, comm_);
  return r;
}

// How long registration from the JS thread waits for an operation NCCL has not
// launched yet (not for its completion: a launch waits at most for peers' first
// connection set-up).
constexpr std::chrono::seconds kSettleForRegistration{300};
// How long a destroy lets ncclCommFinalize flush the communicator before aborting it.
constexpr std::chrono::seconds kFinalizeTimeout{10};

void NcclBackend::withComm(const std::function<void(const NcclApi&, ncclComm)>& f) {
  std::unique_lock<std::mutex> lock(commMu_);
  if (!comm_ || commAborted_) throw Error(Code::CommAborted, "the communicator is not usable");
  useDevice(cfg_.device);
  const auto deadline = Clock::now() + kSettleForRegistration;
  settle(lock, deadline, "registration");
  f(api_, comm_);
  // f's call may have answered ncclInProgress (ncclCommWindowRegister fills its
  // handle from NCCL's thread): settle while f's caller still holds the output.
  ncclResult state = kNcclSuccess;
  api_.CommGetAsyncError(comm_, &state);
  if (state == kNcclInProgress) pending_ = true;
  settle(lock, deadline, "registration");
}

void NcclBackend::awaitProgress(std::unique_lock<std::mutex>& lock, ncclComm comm, Deadline deadline,
                                const char* what) {
  Backoff backoff;
  for (;;) {
    if (aborted_ || (comm == comm_ && commAborted_)) {
      throw Error(Code::CommAborted, std::string(what) + ": the communicator was aborted");
    }
    ncclResult state = kNcclInProgress;
    api_.CommGetAsyncError(comm, &state);
    if (state == kNcclSuccess) return;
    if (state != kNcclInProgress) {
      broken_ = true;
      throw Error(Code::Nccl, std::string(what) + ": " + ncclErrorText(api_, state, comm));
    }
    if (Clock::now() > deadline) {
      broken_ = true;
      api_.CommAbort(comm);
      if (comm == comm_) commAborted_ = true;
      throw Error(Code::Timeout, std::string(what) + ": NCCL did not finish in time (a peer may not have joined)");
    }
    lock.unlock();  // abort() and the other thread's calls may run meanwhile
    backoff.pause();
    lock.lock();
  }
}

void NcclBackend::waitReady(ncclComm comm, Deadline deadline, const char* what) {
  std::unique_lock<std::mutex> lock(commMu_);
  awaitProgress(lock, comm, deadline, what);
}

// NCCL's thread stores a split's or shrink's new communicator into the caller's slot
// (a release store) when it exists. With a nonblocking parent that is after the call
// returned, and nothing orders it before the parent's return to ncclSuccess: NCCL 2.28
// on an H200 reported the parent done with the slot still NULL. So the slot itself is
// polled, beside the parent's state for a failure and the deadline for a hang. When
// this throws, NCCL may still write the slot: the caller leaves its memory to NCCL.
// watchParent false: a parent taken in whatever state its fault left it (a shrink
// with abort), whose state says nothing about the child.
ncclComm NcclBackend::awaitChild(std::unique_lock<std::mutex>& lock, ncclComm* slot, Deadline deadline,
                                 const char* what, bool watchParent) {
  Backoff backoff;
  for (;;) {
    if (ncclComm child = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) return child;
    if (aborted_ || commAborted_) throw Error(Code::CommAborted, std::string(what) + ": the communicator was aborted");
    ncclResult state = kNcclInProgress;
    if (watchParent) api_.CommGetAsyncError(comm_, &state);
    if (state != kNcclSuccess && state != kNcclInProgress) {
      broken_ = true;
      throw Error(Code::Nccl, std::string(what) + ": " + ncclErrorText(api_, state, comm_));
    }
    if (Clock::now() > deadline) {
      broken_ = true;
      api_.CommAbort(comm_);
      commAborted_ = true;
      throw Error(Code::Timeout, std::string(what) + ": NCCL wrote no new communicator in time (a peer may not have joined)");
    }
    lock.unlock();
    backoff.pause();
    lock.lock();
  }
}

void NcclBackend::settle(std::unique_lock<std::mutex>& lock, Deadline deadline, const char* what) {
  if (!pending_) return;
  awaitProgress(lock, comm_, deadline, what);
  pending_ = false;
}

void NcclBackend::releaseRedOps() {
  for (int op : redOpsToRelease_) api_.RedOpDestroy(op, comm_);
  redOpsToRelease_.clear();
}

// As ProcessGroupNCCL's shutdown: ncclCommFinalize flushes what was issued (the
// communicator is in progress until then), after which ncclCommDestroy does not
// block. NCCL refuses to destroy a communicator in progress, and a broken one may
// never quiesce: anything but a clean finalize ends in ncclCommAbort.
void NcclBackend::finalizeAndDestroy() {
  std::unique_lock<std::mutex> lock(commMu_);
  if (!comm_ || commAborted_) {
    comm_ = nullptr;
    return;
  }
  bool clean = !broken_;
  if (clean) {
    try {
      const auto deadline = Clock::now() + kFinalizeTimeout;
      settle(lock, deadline, "ncclCommFinalize");
      releaseRedOps();
      call(api_.CommFinalize(comm_), "ncclCommFinalize");
      settle(lock, deadline, "ncclCommFinalize");
      clean = api_.CommDestroy(comm_) == kNcclSuccess;
    } catch (const Error&) {
      clean = false;
    }
  }
  if (!clean && !commAborted_) api_.CommAbort(comm_);
  comm_ = nullptr;
}

void NcclBackend::connect(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  try {
    useDevice(cfg_.device);
    const CudaApi& cu = cuda();
    if (!store_) {
      store_ = std::make_shared<StoreClient>(cfg_.storeHost, cfg_.storePort, cfg_.token,
                                             "rank " + std::to_string(cfg_.rank), timeout);
    }
    // The unique id travels over the job's rendezvous store, never a side channel.
    ncclUniqueIdBytes id;
    const std::string key = cfg_.prefix + "ncclUniqueId";
    if (cfg_.rank == 0) {
      call(api_.GetUniqueId(&id), "ncclGetUniqueId");
      store_->set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      auto bytes = store_->get(key, timeout);
      if (bytes.size() != sizeof id.internal) throw Error(Code::Store, "the stored NCCL unique id has the wrong size");
      std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    }
    cuCheck(cu.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
    cuCheck(cu.cuMemAlloc(&barrierBuf_, 4), "cuMemAlloc");
    ncclConfigV23007 config = ncclConfigInit();
    config.blocking = 0;  // nonblocking, so abort is safe (NCCL docs)
    config.commName = cfg_.prefix.c_str();
    {
      std::lock_guard<std::mutex> lock(commMu_);
      if (aborted_) throw Error(Code::CommAborted, "init: the communicator was aborted");
      call(api_.CommInitRankConfig(&comm_, cfg_.size, id, cfg_.rank, &config), "ncclCommInitRankConfig");
    }
    waitReady(comm_, deadline, "ncclCommInitRankConfig");
  } catch (...) {
    broken_ = true;
    throw;
  }
}

void NcclBackend::abort() {
  aborted_ = true;
  abortComm();
}

void NcclBackend::abortComm() {
  broken_ = true;
  std::lock_guard<std::mutex> lock(commMu_);
  if (comm_ && !commAborted_) {
    api_.CommAbort(comm_);
    commAborted_ = true;
  }
}

std::string NcclBackend::dumpNote(const std::string& message) {
  try {
    return " (the watchdog aborted the communicator; flight record: " + FlightRecorder::dumpAll(message) + ")";
  } catch (const Error& e) {
    return std::string(" (the watchdog aborted the communicator; ") + e.what() + ")";
  }
}

// The engine launches through launch() and is called back when an op completes;
// there is no blocking form.
void NcclBackend::run(Op&) {
  throw Error(Code::Backend, "the nccl backend runs operations through launch()");
}

CUevent NcclBackend::takeEvent() {
  if (!freeEvents_.empty()) {
    CUevent e = freeEvents_.back();
    freeEvents_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  cuCheck(cuda().cuEventCreate(&e, kEventDisableTiming), "cuEventCreate");
  events_.push_back(e);
  return e;
}

void NcclBackend::drain() {
  std::unique_lock<std::mutex> lock(flightMu_);
  flightCv_.wait(lock, [this] { return inFlight_.empty(); });
}

// The launcher: issues op and waits only until NCCL has launched it, records the
// op's event and hands it to the watchdog. A group member is issued into the open
// group and completes at once (its work completes with the group's end op).
bool NcclBackend::launch(Op& op) {
  useDevice(cfg_.device);
  const bool member = op.group == Op::Group::Member;
  const bool end = op.group == Op::Group::End;
  const char* what = end ? "groupEnd" : ncclOpName(op.kind);
  const uint64_t frId = fr_.begin(op, what);
  const auto deadline = Clock::now() + op.timeout;
  CUevent event = nullptr;
  {
    std::unique_lock<std::mutex> lock(commMu_);
    bool issued = false;
    try {
      if (!comm_ || commAborted_) throw Error(Code::CommAborted, "the communicator was aborted");
      // Only after registration raced ahead of the launcher is comm_ still pending.
      settle(lock, deadline, what);
      if (member && !inGroup_) {
        call(api_.GroupStart(), "ncclGroupStart");
        inGroup_ = true;
      }
      if (end) {
        if (inGroup_) {
          inGroup_ = false;
          call(api_.GroupEnd(), "ncclGroupEnd");
        }
      } else {
        issue(op);
      }
      issued = true;
      fr_.setState(frId, "enqueued");
      if (member) return false;
      // The event may only be recorded once NCCL has put the kernel on the stream.
      settle(lock, deadline, what);
      releaseRedOps();
      {
        std::lock_guard<std::mutex> fl(flightMu_);
        event = takeEvent();
      }
      cuCheck(cuda().cuEventRecord(event, stream_), "cuEventRecord");
    } catch (const Error& e) {
      if (event) {
        std::lock_guard<std::mutex> fl(flightMu_);
        freeEvents_.push_back(event);
      }
      lock.unlock();
      launchFailed(e, frId, issued);
    }
  }
  fr_.setState(frId, "started");
  {
    std::lock_guard<std::mutex> fl(flightMu_);
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
    inFlight_.push_back({&op, frId, event, Clock::now() + op.timeout});
  }
  flightCv_.notify_all();
  return true;  // op belongs to the watchdog now
}

// A call NCCL refused fails by itself (the communicator stays usable after bad
// arguments); a launch that never settled faults the communicator. Either way the
// ops already in flight settle first, so ops settle in issue order.
void NcclBackend::launchFailed(const Error& e, uint64_t frId, bool fatal) {
  if (e.code() == Code::CommAborted) {
    drain();
    fr_.setState(frId, "aborted");
    throw e;
  }
  if (!fatal) {
    if (e.code() != Code::InvalidArgument && e.code() != Code::Unavailable) broken_ = true;
    drain();
    fr_.setState(frId, "failed");
    throw e;
  }
  // As for a fault found in flight: a communicator kept for ncclCommShrink stays (broken)
  // for the shrink, which terminates its work first; any other one is aborted now.
  faultComm();
  drain();
  fr_.setState(frId, e.code() == Code::Timeout ? "timeout" : "failed");
  throw Error(e.code(), e.what() + dumpNote(e.what()));
}

void NcclBackend::faultComm() {
  if (cfg_.keepOnFault && api_.CommShrink) {
    broken_ = true;
    return;
  }
  abortComm();
}

void NcclBackend::failInFlight(Code code, const std::string& message, long culprit, const char* state) {
  if (code != Code::CommAborted) faultComm();
  std::deque<InFlight> ops;
  {
    std::lock_guard<std::mutex> lock(flightMu_);
    ops.swap(inFlight_);
  }
  std::string full = message;
  if (culprit >= 0) {
    fr_.setState(ops[culprit].frId, state);
    full += dumpNote(message);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = *ops[i].op;
    if (static_cast<long>(i) == culprit) {
      op.fail(code, full);
    } else {
      fr_.setState(ops[i].frId, "aborted");
      op.fail(Code::CommAborted, culprit >= 0 ? "the watchdog aborted the communicator after another operation failed: " + full
                                              : message);
    }
  }
  {
    std::lock_guard<std::mutex> lock(flightMu_);
    for (const InFlight& f : ops) freeEvents_.push_back(f.event);
  }
  for (const InFlight& f : ops) complete_(*f.op);
  flightCv_.notify_all();
}

// The watchdog: completes the ops in flight in order as their events fire; polls
// NCCL's asynchronous error and every op's deadline meanwhile.
void NcclBackend::watch() {
  const CudaApi& cu = cuda();
  try {
    useDevice(cfg_.device);
  } catch (...) {
  }
  // Small collectives finish in tens of microseconds, and a sleep costs at least
  // the timer slack (~50 us): poll hot, yielding the core, for a short window after
  // a launch or completion, then back off to naps that double up to 1 ms.
  Clock::time_point spinUntil;
  auto nap = std::chrono::microseconds(20);
  std::unique_lock<std::mutex> fl(flightMu_);
  for (;;) {
    if (inFlight_.empty()) {
      flightCv_.wait(fl, [this] { return stopWatchdog_ || !inFlight_.empty(); });
      spinUntil = Clock::now() + std::chrono::microseconds(200);
      nap = std::chrono::microseconds(20);
    }
    if (inFlight_.empty()) return;
    if (stopWatchdog_) {  // destroyed with ops in flight (environment teardown)
      fl.unlock();
      abortComm();
      failInFlight(Code::CommAborted, "the communicator was destroyed", -1, "aborted");
      fl.lock();
      continue;
    }
    const InFlight front = inFlight_.front();
    const auto now = Clock::now();
    long expired = -1;
    for (size_t i = 0; i < inFlight_.size(); ++i) {
      if (now > inFlight_[i].deadline) {
        expired = static_cast<long>(i);
        break;
      }
    }
    const int64_t expiredMs = expired >= 0 ? inFlight_[expired].op->timeout.count() : 0;
    fl.unlock();
    const CUresult done = cu.cuEventQuery(front.event);
    ncclResult async = kNcclSuccess;
    std::string lastError;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(commMu_);
      if (commAborted_ || aborted_ || !comm_ || terminating_) {
        aborted = true;
      } else {
        api_.CommGetAsyncError(comm_, &async);
        if (async != kNcclSuccess && async != kNcclInProgress) lastError = ncclErrorText(api_, async, comm_);
      }
    }
    if (aborted) {
      failInFlight(Code::CommAborted, terminating_ ? "ncclCommShrink(NCCL_SHRINK_ABORT) terminated the communicator's operations"
                                                   : "the communicator was aborted", -1, "aborted");
    } else if (!lastError.empty()) {
      failInFlight(Code::Nccl, "NCCL reported an asynchronous error: " + lastError, 0, "failed");
    } else if (done == kCudaSuccess) {
      fr_.setState(front.frId, "completed");
      {
        std::lock_guard<std::mutex> lock(flightMu_);
        inFlight_.pop_front();
        freeEvents_.push_back(front.event);
      }
      complete_(*front.op);
      flightCv_.notify_all();
      spinUntil = Clock::now() + std::chrono::microseconds(200);
      nap = std::chrono::microseconds(20);
    } else if (done != kCudaNotReady) {
      failInFlight(Code::Cuda, "cuEventQuery: " + cuErrorText(done), 0, "failed");
    } else if (expired >= 0) {
      std::ostringstream s;
      s << "timed out after " << expiredMs << " ms: the operation did not complete on the GPU"
        << " (a peer may be stalled; compare the ranks' flight records)";
      failInFlight(Code::Timeout, s.str(), expired, "timeout");
    } else if (Clock::now() < spinUntil) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::milliseconds(1)) nap *= 2;
    }
    fl.lock();
  }
}

void NcclBackend::issue(Op& op) {
  const int dt = static_cast<int>(op.dtype);
  int redop = static_cast<int>(op.redop);
  if (op.kind != OpKind::Barrier && ((op.send.data && op.send.mem != MemKind::Device) ||
                                     (op.recv.data && op.recv.mem != MemKind::Device))) {
    throw Error(Code::InvalidArgument, "the nccl backend works on DeviceBuffers; received host memory "
                                       "(copy it with DeviceBuffer.from(typedArray))");
  }
  bool premul = false;
  if (op.hasPreMul) {
    auto scalar = scalarBytes(op.preMulScalar, op.dtype);
    call(api_.RedOpCreatePreMulSum(&redop, scalar.data(), dt, kNcclScalarHostImmediate, comm_),
         "ncclRedOpCreatePreMulSum");
    premul = true;
  }
  const size_t n = static_cast<size_t>(cfg_.size);
  void* s = dptr(op.send);
  void* r = dptr(op.recv);
  switch (op.kind) {
    case OpKind::AllReduce: call(api_.AllReduce(s, r, op.count, dt, redop, comm_, stream_), "ncclAllReduce"); break;
    case OpKind::Broadcast: call(api_.Broadcast(s, r, op.count, dt, op.root, comm_, stream_), "ncclBroadcast"); break;
    case OpKind::Reduce: call(api_.Reduce(s, r, op.count, dt, redop, op.root, comm_, stream_), "ncclReduce"); break;
    case OpKind::AllGather: call(api_.AllGather(s, r, op.count, dt, comm_, stream_), "ncclAllGather"); break;
    case OpKind::ReduceScatter:
      call(api_.ReduceScatter(s, r, op.count, dt, redop, comm_, stream_), "ncclReduceScatter");
      break;
    case OpKind::AllToAll:
      if (!op.sendCounts.empty()) allToAllV(op);
      else if (api_.AlltoAll) call(api_.AlltoAll(s, r, op.count / n, dt, comm_, stream_), "ncclAlltoAll");
      else p2pFallback(op);
      break;
    case OpKind::Gather:
      if (api_.Gather) call(api_.Gather(s, r, op.count, dt, op.root, comm_, stream_), "ncclGather");
      else p2pFallback(op);
      break;
    case OpKind::Scatter:
      if (api_.Scatter) call(api_.Scatter(s, r, op.count, dt, op.root, comm_, stream_), "ncclScatter");
      else p2pFallback(op);
      break;
    case OpKind::Send: call(api_.Send(s, op.count, dt, op.root, comm_, stream_), "ncclSend"); break;
    case OpKind::Recv: call(api_.Recv(r, op.count, dt, op.root, comm_, stream_), "ncclRecv"); break;
    case OpKind::Barrier:
      // As ProcessGroupNCCL does: a one-element all-reduce on the communicator's stream.
      call(api_.AllReduce(reinterpret_cast<void*>(barrierBuf_), reinterpret_cast<void*>(barrierBuf_), 1, 7, 0, comm_,
                          stream_), "ncclAllReduce (barrier)");
      break;
    case OpKind::Split: throw Error(Code::InvalidArgument, "split is not a data operation");
  }
  // Freed once the call that uses it has settled (NCCL takes no call meanwhile).
  if (premul) redOpsToRelease_.push_back(redop);
}

// AllToAll / Gather / Scatter before NCCL 2.28: grouped sends and receives, as
// PyTorch does; the local block is a device-to-device copy.
void NcclBackend::p2pFallback(Op& op) {
  const CudaApi& cu = cuda();
  const int dt = static_cast<int>(op.dtype);
  const int me = cfg_.rank;
  const size_t n = static_cast<size_t>(cfg_.size);
  const size_t count = op.kind == OpKind::AllToAll ? op.count / n : op.count;
  const size_t bytes = count * elementSize(op.dtype);
  auto at = [](const BufferView& v, size_t off) { return reinterpret_cast<CUdeviceptr>(v.data) + off; };
  call(api_.GroupStart(), "ncclGroupStart");
  for (int p = 0; p < cfg_.size; ++p) {
    const bool self = p == me;
    if (op.kind == OpKind::AllToAll) {
      if (self) { cuCheck(cu.cuMemcpyDtoDAsync(at(op.recv, p * bytes), at(op.send, p * bytes), bytes, stream_), "cuMemcpyDtoDAsync"); continue; }
      call(api_.Send(reinterpret_cast<void*>(at(op.send, p * bytes)), count, dt, p, comm_, stream_), "ncclSend");
      call(api_.Recv(reinterpret_cast<void*>(at(op.recv, p * bytes)), count, dt, p, comm_, stream_), "ncclRecv");
    } else if (op.kind == OpKind::Gather) {
      if (me != op.root) { if (p == op.root) call(api_.Send(dptr(op.send), count, dt, p, comm_, stream_), "ncclSend"); continue; }
      if (self) { cuCheck(cu.cuMemcpyDtoDAsync(at(op.recv, p * bytes), at(op.send, 0), bytes, stream_), "cuMemcpyDtoDAsync"); continue; }
      call(api_.Recv(reinterpret_cast<void*>(at(op.recv, p * bytes)), count, dt, p, comm_, stream_), "ncclRecv");
    } else {
      if (me != op.root) { if (p == op.root) call(api_.Recv(dptr(op.recv), count, dt, p, comm_, stream_), "ncclRecv"); continue; }
      if (self) { cuCheck(cu.cuMemcpyDtoDAsync(at(op.recv, 0), at(op.send, p * bytes), bytes, stream_), "cuMemcpyDtoDAsync"); continue; }
      call(api_.Send(reinterpret_cast<void*>(at(op.send, p * bytes)), count, dt, p, comm_, stream_), "ncclSend");
    }
  }
  call(api_.GroupEnd(), "ncclGroupEnd");
}

// All-to-all with per-peer counts, as PyTorch's all_to_all_single with split sizes:
// grouped sends and receives at each peer's offset, zero counts skipped, the local
// block a device-to-device copy. NCCL has no way to check that rank i's
// sendCounts[j] matches rank j's recvCounts[i]; that is the caller's promise.
void NcclBackend::allToAllV(Op& op) {
  const CudaApi& cu = cuda();
  const int dt = static_cast<int>(op.dtype);
  const size_t width = elementSize(op.dtype);
  auto at = [](const BufferView& v, size_t off) { return reinterpret_cast<CUdeviceptr>(v.data) + off; };
  size_t sendOff = 0, recvOff = 0;  // bytes
  call(api_.GroupStart(), "ncclGroupStart");
  for (int p = 0; p < cfg_.size; ++p) {
    const size_t sc = op.sendCounts[p], rc = op.recvCounts[p];
    if (p == cfg_.rank) {
      if (sc > 0) cuCheck(cu.cuMemcpyDtoDAsync(at(op.recv, recvOff), at(op.send, sendOff), sc * width, stream_), "cuMemcpyDtoDAsync");
    } else {
      if (sc > 0) call(api_.Send(reinterpret_cast<void*>(at(op.send, sendOff)), sc, dt, p, comm_, stream_), "ncclSend");
      if (rc > 0) call(api_.Recv(reinterpret_cast<void*>(at(op.recv, recvOff)), rc, dt, p, comm_, stream_), "ncclRecv");
    }
    sendOff += sc * width;
    recvOff += rc * width;
  }
  call(api_.GroupEnd(), "ncclGroupEnd");
}

std::unique_ptr<Backend> NcclBackend::split(int color, int key, std::chrono::milliseconds timeout) {
  useDevice(cfg_.device);
  drain();  // ops settle in issue order: the split after the ops before it
  const auto deadline = Clock::now() + timeout;
  // A nonblocking parent returns from ncclCommSplit before the child exists and NCCL's
  // thread writes it later (awaitChild): the slot lives on the heap until then.
  struct SplitArgs {
    ncclComm child = nullptr;
    ncclConfigV23007 config = ncclConfigInit();
  };
  auto args = std::make_unique<SplitArgs>();
  args->config.blocking = 0;
  ncclComm child = nullptr;
  {
    std::unique_lock<std::mutex> lock(commMu_);
    if (!comm_ || commAborted_) throw Error(Code::CommAborted, "the communicator was aborted");
    try {
      settle(lock, deadline, "ncclCommSplit");
      call(api_.CommSplit(comm_, color < 0 ? -1 : color, key, &args->child, &args->config), "ncclCommSplit");
      if (color >= 0) child = awaitChild(lock, &args->child, deadline, "ncclCommSplit");
      pending_ = true;  // the parent may still be in progress, whatever the call answered
      settle(lock, deadline, "ncclCommSplit");
    } catch (...) {
      // NCCL's thread may still write into args after a timeout or an abort; a child
      // already written goes with the failed parent.
      (void)args.release();
      if (child) api_.CommAbort(child);
      throw;
    }
    // Without a color NCCL's thread may still store NULL into the slot after the
    // parent settled (nothing says when): those few bytes are left to it.
    if (color < 0) (void)args.release();
  }
  const int id = splits_++;
  if (color < 0) return nullptr;
  waitReady(child, deadline, "ncclCommSplit (child)");
  return adopt(child, cfg_.prefix + "split" + std::to_string(id) + "/c" + std::to_string(color) + "/");
}

std::unique_ptr<Backend> NcclBackend::adopt(ncclComm child, const std::string& prefix) {
  NcclConfig cc = cfg_;
  // The child's rank and size come from NCCL (split: ordered by key, then parent
  // rank; shrink: the survivors in parent order).
  ncclCheck(api_, api_.CommCount(child, &cc.size), "ncclCommCount", child);
  ncclCheck(api_, api_.CommUserRank(child, &cc.rank), "ncclCommUserRank", child);
  cc.prefix = prefix;
  auto ctl = std::make_shared<NcclControl>();
  auto backend = std::make_unique<NcclBackend>(cc, store_, ctl);
  backend->comm_ = child;
  try {
    const CudaApi& cu = cuda();
    cuCheck(cu.cuStreamCreate(&backend->stream_, kStreamNonBlocking), "cuStreamCreate");
    cuCheck(cu.cuMemAlloc(&backend->barrierBuf_, 4), "cuMemAlloc");
  } catch (...) {
    backend->broken_ = true;
    throw;
  }
  ctl_->pushChild(ctl);
  return backend;
}

bool NcclBackend::supportsShrink() const {
  if (!api_.CommShrink) return false;
  std::lock_guard<std::mutex> lock(commMu_);
  return comm_ && !commAborted_ && !aborted_;
}

// ncclCommShrink on the worker thread. With abortParent, the ops still in flight fail
// first (NCCL stops their kernels, which must not then look completed), and the parent
// is taken in whatever state its fault left it: no settle, no wait on a peer.
std::unique_ptr<Backend> NcclBackend::shrink(const std::vector<int>& exclude, bool abortParent,
                                             std::chrono::milliseconds timeout) {
  api_.need(api_.CommShrink, "ncclCommShrink", 22700);
  useDevice(cfg_.device);
  const auto deadline = Clock::now() + timeout;
  if (abortParent) {
    broken_ = true;  // its work is terminated: nothing more runs on it
    terminating_ = true;
    flightCv_.notify_all();
  }
  drain();  // without abort: the shrink after the ops before it
  // NCCL may read the list and config, and write the child, after a nonblocking call returns.
  struct ShrinkArgs {
    ncclComm child = nullptr;
    ncclConfigV23007 config = ncclConfigInit();
    std::vector<int> exclude;
  };
  auto args = std::make_unique<ShrinkArgs>();
  args->config.blocking = 0;
  args->exclude = exclude;
  ncclComm child = nullptr;
  {
    std::unique_lock<std::mutex> lock(commMu_);
    if (!comm_ || commAborted_) throw Error(Code::CommAborted, "the NCCL communicator was aborted; form a new one instead");
    try {
      if (!abortParent) settle(lock, deadline, "ncclCommShrink");
      pending_ = false;
      const ncclResult r = api_.CommShrink(comm_, args->exclude.data(), static_cast<int>(args->exclude.size()), &args->child,
                                           &args->config, abortParent ? kNcclShrinkAbort : kNcclShrinkDefault);
      if (r != kNcclSuccess && r != kNcclInProgress) {
        throw Error(r == kNcclInvalidArgument ? Code::InvalidArgument : Code::Nccl,
                    "ncclCommShrink: " + ncclErrorText(api_, r, comm_));
      }
      // NCCL 2.28 writes the child from its own thread, as for a split (awaitChild).
      child = awaitChild(lock, &args->child, deadline, "ncclCommShrink", !abortParent);
      if (r == kNcclInProgress && !abortParent) {
        pending_ = true;
        settle(lock, deadline, "ncclCommShrink");
      }
    } catch (...) {
      (void)args.release();  // NCCL's thread may still write into it
      throw;
    }
  }
  const int id = splits_++;
  try {
    waitReady(child, deadline, "ncclCommShrink (new communicator)");
  } catch (const Error& e) {
    if (e.code() != Code::Timeout) api_.CommAbort(child);  // a timeout has aborted it already
    throw;
  }
  return adopt(child, cfg_.prefix + "shrink" + std::to_string(id) + "/");
}

}  // namespace ncclnode

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
  try {
    useDevice(cfg_.device);
    finalizeAndDestroy();
    const CudaApi& cu = cuda();
    if (barrierBuf_) cu.cuMemFree(barrierBuf_);
    if (event_) cu.cuEventDestroy(event_);
    if (stream_) cu.cuStreamDestroy(stream_);
  } catch (...) {
  }
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
  auto nap = std::chrono::microseconds(10);
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
    if (nap < std::chrono::microseconds(200)) std::this_thread::yield();
    else std::this_thread::sleep_for(nap);
    if (nap < std::chrono::milliseconds(1)) nap *= 2;
    lock.lock();
  }
}

void NcclBackend::waitReady(ncclComm comm, Deadline deadline, const char* what) {
  std::unique_lock<std::mutex> lock(commMu_);
  awaitProgress(lock, comm, deadline, what);
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
    cuCheck(cu.cuEventCreate(&event_, kEventDisableTiming), "cuEventCreate");
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

void NcclBackend::fatal(Code code, const std::string& message, uint64_t frId, const char* state) {
  abortComm();
  fr_.setState(frId, state);
  std::string where;
  try {
    where = "; flight record: " + FlightRecorder::dumpAll(message);
  } catch (const Error& e) {
    where = std::string("; ") + e.what();
  }
  throw Error(code, message + " (the watchdog aborted the communicator" + where + ")");
}

void NcclBackend::run(Op& op) {
  std::optional<uint64_t> frId;
  if (op.preposted) {
    if (op.prepostError) std::rethrow_exception(op.prepostError);
    frId = preposted_;
    preposted_.reset();
  } else {
    frId = start(op);
  }
  if (!frId) return;  // joined an open group: completes with the group's end
  waitDone(op, *frId);
  fr_.setState(*frId, "completed");
}

// NCCL calls only enqueue work on a stream, so the submitting thread can make them
// itself while the worker is idle (as torch.distributed launches on the caller's
// thread); the worker then only waits for the event.
bool NcclBackend::prepost(Op& op) {
  // NCCL's group depth is per thread: calls inside group() stay on the worker.
  if (broken_ || inGroup_ || ctl_->peekKind(ordinal_) != OpTag::None) return false;
  try {
    preposted_ = start(op);
  } catch (...) {
    op.prepostError = std::current_exception();
  }
  op.preposted = true;
  return true;
}

std::optional<uint64_t> NcclBackend::start(Op& op) {
  useDevice(cfg_.device);
  const OpTag tag = ctl_->take(ordinal_++);
  const bool groupEnd = tag.kind == OpTag::GroupEnd;
  const uint64_t frId = fr_.begin(op, groupEnd ? "groupEnd" : ncclOpName(op.kind));
  {
    std::unique_lock<std::mutex> lock(commMu_);
    if (!comm_ || commAborted_) throw Error(Code::CommAborted, "the communicator was aborted");
    try {
      // Ops are waited for in order, so the previous one has settled; this only
      // matters after registration raced ahead of the worker.
      settle(lock, Clock::now() + op.timeout, ncclOpName(op.kind));
      if (tag.kind == OpTag::InGroup && !inGroup_) {
        call(api_.GroupStart(), "ncclGroupStart");
        inGroup_ = true;
      }
      if (groupEnd) {
        if (inGroup_) {
          inGroup_ = false;
          call(api_.GroupEnd(), "ncclGroupEnd");
        }
      } else {
        launch(op, tag);
      }
      fr_.setState(frId, "enqueued");
      if (tag.kind == OpTag::InGroup) return std::nullopt;  // completes with the group's end
    } catch (const Error& e) {
      fr_.setState(frId, "failed");
      if (e.code() != Code::InvalidArgument && e.code() != Code::Unavailable) broken_ = true;
      throw;
    }
  }
  return frId;
}

void NcclBackend::waitDone(Op& op, uint64_t frId) {
  const CudaApi& cu = cuda();
  const auto deadline = Clock::now() + op.timeout;
  {
    // The event may only be recorded once NCCL has put the kernel on the stream.
    std::unique_lock<std::mutex> lock(commMu_);
    std::string failure;
    Code code = Code::Nccl;
    try {
      settle(lock, deadline, ncclOpName(op.kind));
      releaseRedOps();
      cuCheck(cu.cuEventRecord(event_, stream_), "cuEventRecord");
    } catch (const Error& e) {
      if (e.code() == Code::CommAborted) {
        fr_.setState(frId, "aborted");
        throw;
      }
      failure = e.what();
      code = e.code();
    }
    lock.unlock();
    if (!failure.empty()) fatal(code, failure, frId, code == Code::Timeout ? "timeout" : "failed");
  }
  fr_.setState(frId, "started");
  // Small collectives finish in tens of microseconds, and a sleep costs at least
  // the timer slack (~50 us): poll hot, yielding the core, for a short window, then
  // back off to naps that double up to 1 ms.
  const auto spinUntil = Clock::now() + std::chrono::microseconds(200);
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    const CUresult done = cu.cuEventQuery(event_);
    ncclResult async = kNcclSuccess;
    std::string lastError;
    {
      std::lock_guard<std::mutex> lock(commMu_);
      if (commAborted_ || aborted_) {
        fr_.setState(frId, "aborted");
        throw Error(Code::CommAborted, "the communicator was aborted");
      }
      api_.CommGetAsyncError(comm_, &async);
      if (async != kNcclSuccess && async != kNcclInProgress) lastError = ncclErrorText(api_, async, comm_);
    }
    if (!lastError.empty()) fatal(Code::Nccl, "NCCL reported an asynchronous error: " + lastError, frId, "failed");
    if (done == kCudaSuccess) return;
    if (done != kCudaNotReady) fatal(Code::Cuda, "cuEventQuery: " + cuErrorText(done), frId, "failed");
    if (Clock::now() > deadline) {
      std::ostringstream s;
      s << "timed out after " << op.timeout.count() << " ms: the operation did not complete on the GPU"
        << " (a peer may be stalled; compare the ranks' flight records)";
      fatal(Code::Timeout, s.str(), frId, "timeout");
    }
    if (Clock::now() < spinUntil) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::milliseconds(1)) nap *= 2;
  }
}

void NcclBackend::launch(Op& op, const OpTag& tag) {
  const int dt = static_cast<int>(op.dtype);
  int redop = static_cast<int>(op.redop);
  if (op.kind != OpKind::Barrier && ((op.send.data && op.send.mem != MemKind::Device) ||
                                     (op.recv.data && op.recv.mem != MemKind::Device))) {
    throw Error(Code::InvalidArgument, "the nccl backend works on DeviceBuffers; received host memory "
                                       "(copy it with DeviceBuffer.from(typedArray))");
  }
  bool premul = false;
  if (tag.preMulSum) {
    auto scalar = scalarBytes(tag.scalar, op.dtype);
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
  ctl_->take(ordinal_++);
  const auto deadline = Clock::now() + timeout;
  // A nonblocking parent returns from ncclCommSplit before the child exists and NCCL's
  // thread writes it (reading the config) later: both live on the heap until then.
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
      settle(lock, deadline, "ncclCommSplit");
    } catch (...) {
      // NCCL's thread may still write into args after a timeout or an abort.
      (void)args.release();
      throw;
    }
    child = args->child;
  }
  const int id = splits_++;
  if (color < 0) return nullptr;
  if (!child) throw Error(Code::Nccl, "ncclCommSplit returned no communicator for color " + std::to_string(color));
  waitReady(child, deadline, "ncclCommSplit (child)");
  NcclConfig cc = cfg_;
  // The child's rank and size come from NCCL (ordered by key, then parent rank).
  ncclCheck(api_, api_.CommCount(child, &cc.size), "ncclCommCount", child);
  ncclCheck(api_, api_.CommUserRank(child, &cc.rank), "ncclCommUserRank", child);
  cc.prefix = cfg_.prefix + "split" + std::to_string(id) + "/c" + std::to_string(color) + "/";
  auto ctl = std::make_shared<NcclControl>();
  auto backend = std::make_unique<NcclBackend>(cc, store_, ctl);
  backend->comm_ = child;
  try {
    const CudaApi& cu = cuda();
    cuCheck(cu.cuStreamCreate(&backend->stream_, kStreamNonBlocking), "cuStreamCreate");
    cuCheck(cu.cuEventCreate(&backend->event_, kEventDisableTiming), "cuEventCreate");
    cuCheck(cu.cuMemAlloc(&backend->barrierBuf_, 4), "cuMemAlloc");
  } catch (...) {
    backend->broken_ = true;
    throw;
  }
  ctl_->pushChild(ctl);
  return backend;
}

}  // namespace ncclnode

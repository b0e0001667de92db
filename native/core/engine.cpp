#include "engine.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "buffers.h"
#include "held_beats.h"
#include "js_errors.h"

namespace ncclnode {

Engine::Engine(Napi::Env env, std::unique_ptr<Backend> backend, SplitFactory splitFactory)
    : backend_(std::move(backend)), name_(backend_->name()), version_(backend_->version()),
      rank_(backend_->rank()), size_(backend_->size()),
      splitFactory_(splitFactory) {
  const char* onCaller = std::getenv("NCCL_NODE_INLINE_COMPLETION");
  onCaller_ = onCaller == nullptr || std::strcmp(onCaller, "0") != 0;
  tsfn_ = Tsfn::New(env, "nccl-node-engine", 0, 1, this);
  tsfn_.Unref(env);  // an idle communicator keeps nothing alive
  backend_->setCompletion([this](Op& op) { completeLater(op); });
  worker_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    idle_.wait(lock, [this] { return concurrent_ == 0; });
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (!released_) tsfn_.Release();
}

Napi::Promise Engine::submit(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin) {
  p->awaited = true;
  auto promise = promiseOf(env, *p).As<Napi::Promise>();
  enqueue(env, std::move(p), pin);
  return promise;
}

Napi::Value Engine::submitCall(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>& pin) {
  p->awaited = true;
  if (runsOnCaller(*p->op)) return runOnCaller(env, std::move(p), pin);
  return enqueue(env, std::move(p), &pin);
}

Napi::Value Engine::promiseOf(Napi::Env env, Pending& p) {
  if (!p.deferred) p.deferred.emplace(Napi::Promise::Deferred::New(env));
  return p.deferred->Promise();
}

Napi::Value Engine::settleHere(Napi::Env env, Pending* p) {
  Napi::Value result = p->awaited && p->op->failed ? promiseOf(env, *p) : env.Undefined();
  settleOnJs(env, p);
  return result;
}

// Above this many bytes an op goes to the worker even when it could run here: the
// copy (an out-of-place op) would hold up the JS thread longer than the hand-off costs.
constexpr size_t kOnCallerBytes = 64 * 1024;

bool Engine::runsOnCaller(const Op& op) const {
  return onCaller_ && inFlight_ == 0 && backend_ && !aborted_ && !destroyed_ && op.kind != OpKind::Split &&
         !op.rejected && op.count * elementSize(op.dtype) <= kOnCallerBytes && !backend_->concurrent(op) &&
         backend_->completesOnCaller(op);
}

Napi::Value Engine::runOnCaller(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>& pin) {
  Op& op = *p->op;
  op.enqueued = std::chrono::steady_clock::now();
  op.owner = p.get();
  ++inFlight_;
  if (execute(*p)) {
    // A backend that kept the op in flight after all: it settles through the
    // thread-safe function like any other (p is the backend's until then).
    Napi::Value promise = promiseOf(env, *p);
    pin(*p);
    p.release();
    if (inFlight_ == 1 && !aborted_) tsfn_.Ref(env);
    return promise;
  }
  return settleHere(env, p.release());
}

void Engine::runSync(std::unique_ptr<Pending> p) {
  if (!runBlocking(*p)) {
    // blocking() backends never keep an op in flight; one that did would own p now.
    p.release();
    throw Error(Code::Backend, "the backend kept a blocking call in flight");
  }
}

// Writes the entry time where the caller asked for it, once.
static void stampEntry(double*& entry, CallClock& clock) {
  if (entry) *entry = clock.nowMs();
  entry = nullptr;
}

bool Engine::runBlocking(Pending& p, double* entry) {
  Op& op = *p.op;
  op.owner = &p;
  // Nothing unsettled (inFlight_, this thread's own count) means nothing queued and the
  // worker idle: no lock to take. Every op on the worker is unsettled until its
  // settlement runs on this thread.
  if (inFlight_ > 0) {
    // Earlier calls still queued or running on the worker go first, as on every rank;
    // their promises settle after this returns (their results are in place by then).
    // Each has its own deadline, so this wait ends. The worker is then idle and leaves
    // the backend alone. Point-to-point calls on threads of their own keep running, as
    // they do beside the worker's next collective: one may wait for a peer's send that
    // comes only after that peer's part of this call.
    // While this thread waits, the rank's heartbeat comes from held_beats.h.
    stampEntry(entry, callClock_);  // before waiting for them
    std::unique_lock<std::mutex> lock(mu_);
    syncWaiting_ = true;
    if (!queue_.empty() || busy_) {
      heldbeats::Hold held;
      idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
    }
    syncWaiting_ = false;
  }
  // The prepost and the bounded poll first (a shared-memory round's fast path), then
  // the backend's own wait, on this thread, for as long as the op's timeout allows.
  const bool posted = !aborted_ && !destroyed_ && !backend_->broken() && backend_->prepost(op);
  stampEntry(entry, callClock_);
  const bool done = posted && finishHere(op);
  if (!done) {
    heldbeats::Hold held;
    if (execute(p)) return false;
  }
  if (!op.failed) return true;
  throw Error(op.errorCode, failureOf(op));
}

std::string Engine::failureOf(const Op& op) const {
  std::ostringstream s;
  s << opKindName(op.kind) << " failed on rank " << rank_ << " of " << size_ << " (collective #" << op.seq
    << "): " << op.errorMessage;
  return s.str();
}

bool Engine::startKept(Napi::Env env, Pending& kept, const std::function<void(Pending&)>& pin, Napi::Value* result,
                       double* entry, bool* completed) {
  Op& op = *kept.op;
  if (onCaller_ && inFlight_ == 0 && backend_ && !aborted_ && !destroyed_ && !backend_->broken()) {
    // Nothing unsettled: nothing queued, the worker idle (as in runBlocking).
    op.owner = &kept;
    bool done = false;
    const bool posted = backend_->prepost(op);
    stampEntry(entry, callClock_);
    if (posted) {
      done = finishHere(op);
    } else if (runsOnCaller(op)) {
      if (execute(kept)) return false;
      done = true;
    }
    if (done) {
      if (!op.failed) {
        *result = env.Undefined();
        *completed = true;
      } else {
        auto failed = Napi::Promise::Deferred::New(env);
        failed.Reject(makeError(env, op.errorCode, failureOf(op)).Value());
        *result = failed.Promise();
      }
      return true;
    }
  }
  // Preposted and not finished here (a late peer), or behind calls still unsettled:
  // the worker finishes a copy, from where the prepost left it.
  stampEntry(entry, callClock_);
  auto copy = std::make_unique<Pending>();
  copy->op = op.copyOfCall();
  copy->awaited = true;
  *result = enqueue(env, std::move(copy), &pin);
  *completed = result->IsUndefined();
  return true;
}

// After prepost(): the backend's bounded attempt to complete op on this thread.
bool Engine::finishHere(Op& op) {
  if (!backend_->finishOnCaller(op)) return false;
  noteFailure(op);
  return true;
}

void Engine::submitRejected(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin) {
  enqueue(env, std::move(p), pin);
}

Napi::Value Engine::enqueue(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin) {
  p->op->enqueued = std::chrono::steady_clock::now();
  p->op->owner = p.get();
  const bool first = inFlight_++ == 0;  // nothing earlier unsettled
  if (first && !aborted_) tsfn_.Ref(env);
  bool posted = false;
  Napi::Value result = env.Undefined();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (p->destroy) destroyed_ = true;
    // Nothing ahead of it: let the backend put this rank's part on the wire now,
    // from this thread, instead of after the worker wakes up.
    if (queue_.empty() && !busy_ && backend_ && !aborted_ && !p->connect && !p->destroy && !p->op->preposted &&
        p->op->kind != OpKind::Split && !backend_->concurrent(*p->op) &&
        (!p->op->rejected || backend_->sharesRejections())) {
      posted = backend_->prepost(*p->op);
    }
    if (!(posted && first && onCaller_ && p->awaited)) {
      // Made before the worker can see p; it settles on this thread in any case.
      if (p->awaited) result = promiseOf(env, *p);
      if (pin) (*pin)(*p);
      queue_.push_back(p.release());
      posted = false;
    }
  }
  if (posted) {
    // The queue is still empty and the worker idle (only this thread queues), so
    // the op may finish here, outside the lock, and be settled in issue order.
    Op& op = *p->op;
    if (finishHere(op)) return settleHere(env, p.release());
    result = promiseOf(env, *p);
    if (pin) (*pin)(*p);
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(p.release());
  }
  cv_.notify_one();
  return result;
}

uint64_t Engine::nextP2P(bool send, int peer) {
  auto& v = send ? sends_ : recvs_;
  if (v.size() != static_cast<size_t>(size_)) v.assign(size_, 0);
  return v[peer]++;
}

void Engine::abort(Napi::Env env) {
  aborted_ = true;
  // The JS side has already rejected everything pending; an operation the backend
  // cannot interrupt must not keep the process alive until its deadline.
  if (!released_) tsfn_.Unref(env);
  if (backend_) backend_->abort();
  cv_.notify_all();
}

bool Engine::teardown() {
  aborted_ = true;
  if (backend_) backend_->quit();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A backend stuck in a call that abort() cannot interrupt (a store read) must not
  // hold up process exit; its memory is left to the exiting process.
  auto idle = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_ && concurrent_ == 0;
  };
  for (int i = 0; i < 200 && !idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  released_ = true;  // the environment releases its thread-safe functions itself
  if (idle()) {
    if (worker_.joinable()) worker_.join();
    return true;
  }
  if (worker_.joinable()) worker_.detach();
  leaked_ = true;
  return false;
}

void Engine::loop() {
  for (;;) {
    Pending* p = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;
      p = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    if (!p->connect && !p->destroy && backend_->concurrent(*p->op)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
        if (syncWaiting_) idle_.notify_all();
      }
      runConcurrently(p);
      continue;
    }
    const bool later = execute(*p);  // p may be settled and gone when true
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      if (syncWaiting_) idle_.notify_all();
    }
    if (later) continue;
    const bool last = p->destroy;
    if (tsfn_.BlockingCall(p) != napi_ok) {
      // The environment is going away: the JS objects in p die with it.
    }
    if (last) break;
  }
  finished_ = true;
}

void Engine::runConcurrently(Pending* p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++concurrent_;
  }
  std::thread([this, p] {
    execute(*p);
    tsfn_.BlockingCall(p);
    leaveConcurrent();
  }).detach();
}

void Engine::leaveConcurrent() {
  std::lock_guard<std::mutex> lock(mu_);
  // Only the waits for concurrent_ == 0 listen here: a notify on cv_ would wake the
  // idle worker (a context switch) for every op that runs on the JS thread.
  if (--concurrent_ == 0) idle_.notify_all();  // under the lock: the engine may be destroyed right after
}

// The first failure of a communicator names why later calls fail (execute()); a
// rejected call's failure is the caller's, not the communicator's.
void Engine::noteFailure(const Op& op) {
  if (!op.failed || op.rejected) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (firstFailure_.empty()) firstFailure_ = op.errorMessage;
}

// Called by the backend's own thread for an op launch() kept in flight.
void Engine::completeLater(Op& op) {
  noteFailure(op);
  tsfn_.BlockingCall(static_cast<Pending*>(op.owner));
  leaveConcurrent();
}

bool Engine::execute(Pending& p) {
  Op& op = *p.op;
  try {
    if (p.destroy) {
      // Everything queued before has run; wait for point-to-point stragglers.
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [this] { return concurrent_ == 0; });
      lock.unlock();
      if (backend_ && !aborted_ && !backend_->broken()) {
        try {
          backend_->finish();
        } catch (...) {
          // The communicator goes away either way; its peers see the connections close.
        }
      }
    } else if (aborted_) {
      throw Error(Code::CommAborted, "the communicator was aborted");
    } else if (backend_->broken() && !p.connect && !(op.shrink && op.shrinkAbort)) {
      std::string first;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = firstFailure_.empty() ? "an operation failed" : firstFailure_;
      }
      throw Error(Code::CommAborted, "the communicator is unusable after an earlier failure: " + first);
    } else if (p.connect) {
      backend_->connect(op.timeout);
    } else if (op.rejected && !backend_->sharesRejections()) {
      throw Error(op.rejectCode, op.rejectReason);
    } else if (op.kind == OpKind::Split && op.shrink) {
      op.splitResult = backend_->shrink(op.exclude, op.shrinkAbort, op.timeout);
    } else if (op.kind == OpKind::Split) {
      op.splitResult = backend_->split(op.color, op.key, op.timeout);
    } else {
      // Counted before launch: the backend may complete the op before launch returns.
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++concurrent_;
      }
      bool later = false;
      try {
        later = backend_->launch(op);
      } catch (...) {
        leaveConcurrent();
        throw;
      }
      if (later) return true;
      leaveConcurrent();
    }
  } catch (const Error& e) {
    op.fail(e.code(), e.what());
  } catch (const std::exception& e) {
    op.fail(Code::Backend, e.what());
  } catch (...) {
    op.fail(Code::Backend, "unknown native exception");
  }
  noteFailure(op);
  return false;
}

void Engine::settle(Napi::Env env, Napi::Function, Engine* self, Pending* p) {
  if (env == nullptr) return;  // teardown: leak p rather than touch dead handles
  self->settleOnJs(env, p);
}

void Engine::settleOnJs(Napi::Env env, Pending* raw) {
  std::unique_ptr<Pending> p(raw);
  Napi::HandleScope scope(env);
  Op& op = *p->op;
  auto call = [&] { return std::string(p->connect ? "init" : op.shrink ? "shrink" : opKindName(op.kind)); };
  if (!p->deferred) {
    // No promise: a rejected call's stand-in (the caller already has its error), or a
    // call that completed before submitCall() returned (the caller got undefined).
  } else if (!op.failed && ((!p->sendRef.IsEmpty() && detachedNow(p->sendRef.Value())) ||
                            (!p->recvRef.IsEmpty() && detachedNow(p->recvRef.Value())))) {
    // The memory stayed alive (buffers.cpp) and the operation completed on every
    // rank, but this rank's results went to the memory's new owner.
    std::ostringstream s;
    s << call() << " failed on rank " << rank_ << " of " << size_
      << ": the buffer's ArrayBuffer was detached (transferred) while the operation ran; the operation completed "
         "on every rank, but its result went with the transferred memory. Keep buffers attached until the Work settles";
    p->deferred->Reject(makeError(env, Code::InvalidArgument, s.str()).Value());
  } else if (op.failed) {
    std::ostringstream s;
    s << call() << " failed on rank " << rank_ << " of " << size_;
    if (!p->connect && op.kind != OpKind::Send && op.kind != OpKind::Recv && op.kind != OpKind::Split) {
      s << " (collective #" << op.seq << ")";
    }
    s << ": " << op.errorMessage;
    p->deferred->Reject(makeError(env, op.errorCode, s.str()).Value());
  } else if (op.kind == OpKind::Split && !p->connect) {
    if (op.splitResult) {
      p->deferred->Resolve(splitFactory_(env, std::move(op.splitResult), p->owner.Value()));
    } else {
      p->deferred->Resolve(env.Null());
    }
  } else if (p->connect) {
    p->deferred->Resolve(p->owner.Value());
  } else {
    p->deferred->Resolve(env.Undefined());
  }
  if (--inFlight_ == 0 && !released_) tsfn_.Unref(env);
  if (p->destroy) {
    if (worker_.joinable()) worker_.join();
    backend_.reset();  // closes connections now rather than at garbage collection
    tsfn_.Release();
    released_ = true;
  }
}

}  // namespace ncclnode

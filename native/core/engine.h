// A communicator's engine: the worker thread that runs its operations in issue
// order, and the thread-safe function that settles their promises on the JS thread.
// Operations never touch libuv's shared thread pool.
#pragma once

#include <napi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "monotonic.h"
#include "op.h"

namespace ncclnode {

class Engine;

// What the JS thread keeps for one submitted operation until it settles.
struct Pending {
  std::unique_ptr<Op> op;
  // Made when the caller gets a promise: at submit(), or for a call (submitCall) only
  // once it is queued or has failed; empty for a rejected op's stand-in.
  std::optional<Napi::Promise::Deferred> deferred;
  Napi::ObjectReference owner;  // the communicator object: alive while work is in flight
  Napi::Reference<Napi::Value> sendRef, recvRef;  // the caller's buffers: checked for a detach at settle
  bool connect = false;         // the first operation: join the group
  bool destroy = false;         // the last one: stop the thread
  bool awaited = false;         // the caller awaits its outcome (not a stand-in)
};

class Engine {
 public:
  using SplitFactory = Napi::Value (*)(Napi::Env, std::unique_ptr<Backend>, const Napi::Object& parent);

  Engine(Napi::Env env, std::unique_ptr<Backend> backend, SplitFactory splitFactory);
  ~Engine();

  // JS thread only.
  // pin, when given, takes the references that keep p's communicator and buffers alive
  // (see runOnCaller) if p is queued, not when the backend completes it on this thread.
  Napi::Promise submit(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin = nullptr);
  // submit() for a collective or point-to-point call: undefined when it completed, successfully,
  // before this returned (on this thread: its promise is never made, the one allocation and
  // two global handles a call would otherwise cost), else its promise (queued, in flight or
  // failed).
  Napi::Value submitCall(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>& pin);
  // Whether submit() may run `op` on this thread and settle it at once: nothing of
  // this communicator queued or unsettled (so settlement stays in issue order and
  // the worker is idle), and an op the backend completes there (Backend::completesOnCaller).
  bool runsOnCaller(const Op& op) const;
  // Runs p on this thread; its promise is settled when this returns, unless the backend
  // keeps it in flight after all: then pin(p) takes the references that keep its
  // communicator and buffers alive until it settles on the worker.
  Napi::Value runOnCaller(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>& pin);
  // A blocking call: runs p on this thread, after whatever of this communicator is
  // queued or running, and returns when it completed, throwing its failure. The caller
  // has checked blocking(); the op is in the sequence.
  void runSync(std::unique_ptr<Pending> p);
  // runSync's call on a Pending its caller keeps (a prepared call, run again and
  // again): true when it completed; false when the backend kept it in flight after
  // all, which then owns p (the caller must release it). `entry`, when given, gets the
  // call's entry time (monotonicMs()), read once this rank's message is out where the
  // backend posts it first: the read then overlaps the peers' messages in flight
  // instead of delaying this rank's own (on a VM's kvm-clock a read is about 30 ns,
  // a tenth of a small round within a host).
  bool runBlocking(Pending& p, double* entry = nullptr);
  // A prepared call made without blocking (PreparedCall::start): `kept`, already in the
  // sequence, completes on this thread as submitCall() completes a call there (nothing
  // of this communicator unsettled, the prepost and the bounded finishHere, or a group
  // of one); otherwise a copy of its op is queued as submitCall() queues a call (pin
  // taking the copy's references), and `kept` stays as it was for the next run.
  // *result is then what submitCall() returns: undefined (completed), a rejected
  // promise (failed here) or the copy's promise. False when the backend kept `kept` in
  // flight after all, which then owns it (never for a blocking() backend). `entry` as
  // for runBlocking(); *completed tells whether *result is undefined (without asking it).
  bool startKept(Napi::Env env, Pending& kept, const std::function<void(Pending&)>& pin, Napi::Value* result,
                 double* entry, bool* completed);
  bool blocking() const { return backend_ && backend_->blocking(); }
  // Queues the stand-in of a call this rank rejected (Op::rejected); nothing to await.
  void submitRejected(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin = nullptr);
  void abort(Napi::Env env);
  bool destroyed() const { return destroyed_; }
  bool aborted() const { return aborted_.load(); }
  // Cached at construction: the backend object goes away at destroy().
  const std::string& backendName() const { return name_; }
  const std::string& backendVersion() const { return version_; }
  bool broken() const { return backend_ && backend_->broken(); }
  bool supportsShrink() const { return backend_ && !destroyed_ && !aborted_ && backend_->supportsShrink(); }
  uint64_t nextSeq() { return seq_++; }
  // Index of the next send to / recv from a peer; both sides count alike.
  uint64_t nextP2P(bool send, int peer);
  size_t inFlight() const { return inFlight_; }
  // The clock this communicator's calls are stamped with (JS thread only).
  CallClock& callClock() { return callClock_; }

  // Environment teardown: stop without touching JS. Returns false when the worker
  // could not be stopped and the engine must be leaked rather than deleted.
  bool teardown();
  bool leaked() const { return leaked_; }

 private:
  void loop();
  // Returns true when the backend completes the op later (completeLater).
  bool execute(Pending& p);
  // JS thread, after the backend preposted op: whether it completed op here.
  bool finishHere(Op& op);
  void noteFailure(const Op& op);
  // "allReduce failed on rank R of N (collective #S): why", for a collective that failed.
  std::string failureOf(const Op& op) const;
  void completeLater(Op& op);
  void leaveConcurrent();
  void runConcurrently(Pending* p);
  static void settle(Napi::Env env, Napi::Function, Engine* self, Pending* p);
  void settleOnJs(Napi::Env env, Pending* p);
  // Queues p, or completes it on this thread where the backend can (prepost, finishHere);
  // returns what submitCall() does.
  Napi::Value enqueue(Napi::Env env, std::unique_ptr<Pending> p, const std::function<void(Pending&)>* pin);
  // p completed on this thread: undefined when it succeeded, else its rejected promise.
  Napi::Value settleHere(Napi::Env env, Pending* p);
  // p's promise, made now if it has none.
  static Napi::Value promiseOf(Napi::Env env, Pending& p);

  std::unique_ptr<Backend> backend_;
  std::string name_, version_;
  int rank_, size_;
  SplitFactory splitFactory_;
  using Tsfn = Napi::TypedThreadSafeFunction<Engine, Pending, &Engine::settle>;
  Tsfn tsfn_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;    // the worker: an op queued, or stop_
  std::condition_variable idle_;  // concurrent_ dropped to 0, or the worker went idle (runSync)
  bool syncWaiting_ = false;      // under mu_: runSync waits for the worker to go idle
  std::deque<Pending*> queue_;
  bool stop_ = false;
  bool busy_ = false;  // under mu_: the worker is running an operation
  // NCCL_NODE_INLINE_COMPLETION=0 sends every op through the worker (for comparison).
  bool onCaller_ = true;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> finished_{false};
  bool destroyed_ = false;
  bool released_ = false;  // tsfn released (after destroy or teardown)
  bool leaked_ = false;
  size_t inFlight_ = 0;  // JS thread: submitted but not settled
  CallClock callClock_;  // JS thread
  uint64_t seq_ = 0;     // JS thread: collective sequence numbers
  std::vector<uint64_t> sends_, recvs_;  // JS thread: per-peer point-to-point counters
  // under mu_: operations running on threads of their own or in flight in the backend
  size_t concurrent_ = 0;
  std::string firstFailure_;  // under mu_
};

}  // namespace ncclnode

// The interface every backend implements (Gloo, NCCL). A backend is used
// by exactly one thread at a time: the communicator's worker. It may block.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "op.h"

namespace ncclnode {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string version() const = 0;

  // Joins the group (rendezvous, connections). Throws Error.
  virtual void connect(std::chrono::milliseconds timeout) = 0;

  // Runs one operation to completion. Throws Error; on a fault that leaves the
  // group unusable (peer lost, timeout) the backend marks itself broken().
  virtual void run(Op& op) = 0;

  // Starts op and returns true when the backend completes it later: it then calls
  // the completion the engine installed, once per op, in issue order, from a thread
  // of its own, and does not touch op afterwards. Returns false when op ran to
  // completion here. Lets a backend keep several operations in flight (NCCL queues
  // them on its stream) while the worker launches the next.
  virtual bool launch(Op& op) {
    run(op);
    return false;
  }
  // Whether launch() runs every collective to completion on the thread that calls it
  // (the default launch() does), so a blocking call (Engine::runSync) can run one on
  // the JS thread. False for a backend that keeps operations in flight.
  virtual bool blocking() const { return false; }
  using Completion = std::function<void(Op&)>;
  void setCompletion(Completion c) { complete_ = std::move(c); }

  // Operations that may run concurrently with later ones (point-to-point), each on
  // a thread of its own, so a send and the matching peer's send cannot deadlock.
  virtual bool concurrent(const Op& op) const { return false; }

  // Whether run() takes a rejected op (Op::rejected) and tells the other ranks, so
  // that they fail the same operation and stay in step. Backends that cannot (no
  // agreement round) never see rejected ops; the engine fails them locally.
  virtual bool sharesRejections() const { return false; }

  // Called on the submitting (JS) thread when the worker is idle and nothing is
  // queued: may start the network part of `op` without blocking, so peers receive
  // this rank's data without waiting for the worker to wake; run() then finishes
  // it. Never called for split or concurrent() operations. Returns whether it
  // started anything. Must not throw: a failure is kept in op.prepostError for run().
  virtual bool prepost(Op& op) { return false; }

  // Called on the submitting (JS) thread right after prepost() started `op`, when
  // nothing earlier of this communicator is unsettled: may complete `op` there when
  // what it waits for arrives within a short bound (tens of microseconds), sparing
  // the hand-off to the worker and back. Returns true when `op` is complete (a
  // failure recorded with op.fail()); false leaves it to run(). Must not throw, and
  // must not wait beyond its bound.
  virtual bool finishOnCaller(Op& op) { return false; }

  // Whether `op` may run to completion on the submitting (JS) thread, when nothing of
  // this communicator is queued or unsettled: a group of one rank (no peer to wait
  // for, nothing that can hang), host memory only, outside any group, on a backend
  // whose launch() completes what it runs (the default one). The engine then settles
  // the op before submit() returns, without the round trip through the worker thread
  // and the thread-safe function. A backend that keeps ops in flight, or needs its
  // own thread for them (a current device), answers false.
  virtual bool completesOnCaller(const Op& op) const {
    return size() == 1 && op.send.mem == MemKind::Host && op.recv.mem == MemKind::Host &&
           op.group == Op::Group::None;
  }

  // Makes a new backend for the ranks sharing `color`, ordered by (key, rank).
  // Collective over this backend's group. Returns null for a negative color.
  virtual std::unique_ptr<Backend> split(int color, int key, std::chrono::milliseconds timeout) = 0;

  // Whether shrink() can work now: the library has it and the communicator it
  // would shrink is still there (NCCL >= 2.27, not aborted). Called on the JS thread.
  virtual bool supportsShrink() const { return false; }

  // A new backend of this group's ranks minus `exclude` (sorted, checked by the
  // caller), the survivors keeping their order. Collective over the survivors only.
  // abortParent: terminate this backend's work first (it may be broken: a peer died
  // or hung) instead of waiting for it. Throws Error.
  virtual std::unique_ptr<Backend> shrink(const std::vector<int>& exclude, bool abortParent,
                                          std::chrono::milliseconds timeout) {
    throw Error(Code::Unavailable, std::string("the ") + name() + " backend cannot shrink a communicator");
  }

  // Called once by destroy on the worker thread, after every queued operation ran,
  // unless the communicator was aborted or is broken: lets the backend settle what its
  // last operation left in flight before its connections close. Errors are ignored.
  virtual void finish() {}

  // Unblocks a thread stuck in run(): closes connections or aborts the library's
  // communicator. Called from another thread; must be safe concurrently with run().
  virtual void abort() = 0;
  // The process is going away with the communicator still open (environment teardown,
  // no destroy()): unblock as abort() does, but the peers see a closed connection, not
  // an abort, so a round of theirs that already holds every message still completes.
  virtual void quit() { abort(); }

  virtual bool broken() const = 0;

 protected:
  Completion complete_;
};

}  // namespace ncclnode

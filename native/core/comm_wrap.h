// The JS-visible communicator: a thin wrapper that checks arguments, builds an Op
// and hands it to the Engine. One class, one file pair.
#pragma once

#include <napi.h>

#include <memory>

#include "call_args.h"
#include "engine.h"

namespace ncclnode {

class CommWrap : public Napi::ObjectWrap<CommWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  // Wraps a backend in a new JS communicator (used by the backend factories and split).
  static Napi::Object Wrap(Napi::Env env, std::unique_ptr<Backend> backend);
  static Napi::Value WrapSplit(Napi::Env env, std::unique_ptr<Backend> backend, const Napi::Object& parent);

  explicit CommWrap(const Napi::CallbackInfo& info);
  ~CommWrap() override;

  // Queues the connect step; resolves with this object once the group is joined.
  Napi::Promise Connect(Napi::Env env, int64_t timeoutMs);

 private:
  // submit and submitSync are own properties of each communicator object, functions
  // whose data is the communicator (makeFastMethod: no unwrap of `this` per call).
  Napi::Value Submit(const CallArgs& info);
  Napi::Value submit(const CallArgs& info, OpKind kind);
  Napi::Value SubmitSync(const CallArgs& info);
  Napi::Value PrepareSync(const Napi::CallbackInfo& info);
  // build() for a blocking call (submitSync, prepareSync): a collective, on a blocking()
  // backend, on host memory.
  std::unique_ptr<Pending> buildBlocking(const CallArgs& info, OpKind kind, bool* hasSend, bool* ownRecv,
                                         bool hold, bool prepared = false);
  // hold: the host views keep their memory (BufferView::keep); a blocking call, over
  // before JavaScript runs again, needs no reference.
  // prepared: the op runs again and again (prepareSync), so an input its output overlaps
  // cannot be copied once at the call (overlappedInput, comm_wrap.cpp): such a call is refused.
  std::unique_ptr<Pending> build(const CallArgs& info, OpKind kind, bool* hasSend, bool* ownRecv,
                                 bool hold = true, bool prepared = false);
  void sequence(Op& op);
  std::string refusal(OpKind kind, const Error& e) const;
  void queueRejected(Napi::Env env, OpKind kind, Code code, const std::string& reason, int root,
                     std::chrono::milliseconds timeout);
  void pin(const CallArgs& info, Pending& p, bool hasSend, bool ownRecv);
  // Defines name on this communicator's object as a function that calls (this->*method)
  // with the communicator from the function's data; a call after the communicator is
  // gone (the function kept beyond its object) throws ERR_COMM_DESTROYED.
  void makeFastMethod(const char* name, Napi::Value (CommWrap::*method)(const CallArgs&));
  Napi::Value Reject(const Napi::CallbackInfo& info);
  Napi::Value StampInto(const Napi::CallbackInfo& info);
  Napi::Value Shrink(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value GetRank(const Napi::CallbackInfo& info);
  Napi::Value GetSize(const Napi::CallbackInfo& info);
  Napi::Value GetBackend(const Napi::CallbackInfo& info);
  Napi::Value GetVersion(const Napi::CallbackInfo& info);
  Napi::Value GetInFlight(const Napi::CallbackInfo& info);
  Napi::Value GetState(const Napi::CallbackInfo& info);
  Napi::Value GetSupportsShrink(const Napi::CallbackInfo& info);

  friend class PreparedCall;  // runs its op on engine_, in this communicator's sequence

  std::unique_ptr<Engine> engine_;
  // What the fast methods' functions hold: nulled when this communicator goes away.
  struct Link {
    CommWrap* comm;
  };
  std::shared_ptr<Link> link_ = std::make_shared<Link>(Link{this});
  // stampInto(): where submit() and submitSync() leave a call's entry time and, for one
  // completed before it returned, its exit time (the JS side then reads no clock itself).
  BufferView stampsView_;
  double* stamps_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace ncclnode

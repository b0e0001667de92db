#include "prepared_call.h"

#include <chrono>

#include "comm_wrap.h"
#include "js_errors.h"
#include "monotonic.h"
#include "v8_value.h"

namespace ncclnode {

namespace {

// An array's ArrayBuffer, watched for a detach with one handle and one bit read: the
// views hold the memory itself (BufferView::keep), so a transfer cannot free it, but
// the results would then land out of the caller's sight. A SharedArrayBuffer never
// detaches; an empty watch has nothing to watch.
class DetachWatch {
 public:
  void watch(v8::Isolate* isolate, const Napi::Value& value) {
    if (value.IsUndefined() || value.IsNull()) return;
    v8::Local<v8::Value> local = toV8(value);
    if (local->IsArrayBufferView()) local = local.As<v8::ArrayBufferView>()->Buffer();
    if (local->IsArrayBuffer()) buffer_.Reset(isolate, local.As<v8::ArrayBuffer>());
  }
  bool detached(v8::Isolate* isolate) const { return !buffer_.IsEmpty() && buffer_.Get(isolate)->WasDetached(); }
  void reset() { buffer_.Reset(); }

 private:
  v8::Global<v8::ArrayBuffer> buffer_;
};

}  // namespace

class PreparedCall {
 public:
  PreparedCall(CommWrap* comm, const Napi::Object& commObject, std::unique_ptr<Pending> p, BufferView stamps)
      : comm_(comm), commRef_(Napi::Persistent(commObject)), p_(std::move(p)), stamps_(std::move(stamps)) {}

  Napi::Value run(Napi::Env env);
  Napi::Value start(Napi::Env env);
  void free();

  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  DetachWatch send, recv;
  // The caller's arrays as prepared: a copy of the op handed to the worker (start())
  // references them as a submitted call does its own, for the detach check at settle.
  Napi::Reference<Napi::Value> sendArray, recvArray;

 private:
  // The checks of run() and start(), a refusal telling the other ranks; then the op,
  // reset from its last run and given its place in the sequence.
  void ready(Napi::Env env);
  void readyOrStamp(Napi::Env env, double* stamps) {
    try {
      ready(env);
    } catch (...) {
      stamps[0] = comm_->engine_->callClock().nowMs();
      throw;
    }
  }

  CommWrap* comm_;
  Napi::ObjectReference commRef_;  // keeps the communicator (and its engine) alive
  std::unique_ptr<Pending> p_;
  BufferView stamps_;
  bool freed_ = false;
};

void PreparedCall::ready(Napi::Env env) {
  if (!p_) throw Error(Code::Backend, "the prepared call was lost to an earlier failure of its backend");
  Op& op = *p_->op;
  Engine& engine = *comm_->engine_;
  try {
    if (engine.destroyed()) throw Error(Code::CommDestroyed, "the communicator was destroyed");
    if (engine.aborted()) throw Error(Code::CommAborted, "the communicator was aborted");
    if (freed_) throw Error(Code::InvalidArgument, "the prepared call was freed (free()); prepare it again");
    if (send.detached(isolate) || recv.detached(isolate)) {
      throw Error(Code::InvalidArgument, "an ArrayBuffer of the prepared call was detached (transferred) since it "
                                         "was prepared; expected the memory it was prepared with, received a "
                                         "detached buffer");
    }
  } catch (const Error& e) {
    const std::string why = comm_->refusal(op.kind, e);
    if (e.code() != Code::CommDestroyed && e.code() != Code::CommAborted) {
      comm_->queueRejected(env, op.kind, e.code(), why, op.root, op.timeout);
    }
    throw Error(e.code(), why);
  }
  // The same op again: only what the last run wrote is reset.
  op.failed = false;
  op.errorCode = Code::Backend;
  op.errorMessage.clear();
  op.preposted = false;
  op.prepostError = nullptr;
  op.secondRound = false;
  comm_->sequence(op);
}

// The entry stamp is the engine's to write, once this rank's message is out (runBlocking);
// a refusal before that writes it here.
Napi::Value PreparedCall::run(Napi::Env env) {
  return guard(env, [&]() -> Napi::Value {
    double* stamps = static_cast<double*>(stamps_.data);
    ExitStamp exit{stamps + 1, comm_->engine_->callClock()};
    readyOrStamp(env, stamps);
    if (!comm_->engine_->runBlocking(*p_, stamps)) {
      // Never for a blocking() backend; the backend would own p_ now.
      p_.release();
      throw Error(Code::Backend, "the backend kept a blocking call in flight");
    }
    return env.Undefined();
  });
}

// start(): the same call, not blocking (MPI_Start on a persistent collective): undefined
// when it completed before returning, else a promise of its outcome (Engine::startKept).
// The exit stamp is written only for a call that completed; the entry stamp as run()'s.
Napi::Value PreparedCall::start(Napi::Env env) {
  return guard(env, [&]() -> Napi::Value {
    double* stamps = static_cast<double*>(stamps_.data);
    readyOrStamp(env, stamps);
    const std::function<void(Pending&)> pin = [this](Pending& copy) {
      copy.owner = Napi::Persistent(commRef_.Value());
      if (!sendArray.IsEmpty()) copy.sendRef = Napi::Persistent(sendArray.Value());
      if (!recvArray.IsEmpty()) copy.recvRef = Napi::Persistent(recvArray.Value());
    };
    Napi::Value result;
    bool completed = false;
    if (!comm_->engine_->startKept(env, *p_, pin, &result, stamps, &completed)) {
      p_.release();
      throw Error(Code::Backend, "the backend kept a prepared call in flight");
    }
    if (completed) stamps[1] = comm_->engine_->callClock().nowMs();
    return result;
  });
}

// The communicator stays referenced: a run() after this still tells the other ranks.
void PreparedCall::free() {
  if (p_ && !freed_) {
    p_->op->send = BufferView();
    p_->op->recv = BufferView();
    send.reset();
    recv.reset();
    sendArray.Reset();
    recvArray.Reset();
  }
  freed_ = true;
}

Napi::Object newPreparedCall(Napi::Env env, CommWrap* comm, const Napi::Object& commObject,
                             std::unique_ptr<Pending> p, const Napi::Value& send, const Napi::Value& recv,
                             BufferView stamps) {
  using Shared = std::shared_ptr<PreparedCall>;
  auto call = std::make_shared<PreparedCall>(comm, commObject, std::move(p), std::move(stamps));
  call->send.watch(call->isolate, send);
  call->recv.watch(call->isolate, recv);
  if (!send.IsUndefined()) call->sendArray = Napi::Persistent(send);
  if (!recv.IsUndefined()) call->recvArray = Napi::Persistent(recv);
  // Each function owns a share of the call: either may outlive the object and the other.
  auto bind = [&](const char* name, napi_callback cb) {
    auto* share = new Shared(call);
    napi_value raw = nullptr;
    NAPI_THROW_IF_FAILED(env, napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, share, &raw), Napi::Function());
    Napi::Function f(env, raw);
    f.AddFinalizer([](Napi::Env, Shared* s) { delete s; }, share);
    return f;
  };
  Napi::Object self = Napi::Object::New(env);
  self.Set("run", bind("run", [](napi_env e, napi_callback_info info) -> napi_value {
    void* data = nullptr;
    napi_get_cb_info(e, info, nullptr, nullptr, nullptr, &data);
    return (*static_cast<Shared*>(data))->run(Napi::Env(e));
  }));
  self.Set("start", bind("start", [](napi_env e, napi_callback_info info) -> napi_value {
    void* data = nullptr;
    napi_get_cb_info(e, info, nullptr, nullptr, nullptr, &data);
    return (*static_cast<Shared*>(data))->start(Napi::Env(e));
  }));
  self.Set("free", bind("free", [](napi_env e, napi_callback_info info) -> napi_value {
    void* data = nullptr;
    napi_get_cb_info(e, info, nullptr, nullptr, nullptr, &data);
    (*static_cast<Shared*>(data))->free();
    return Napi::Env(e).Undefined();
  }));
  return self;
}

}  // namespace ncclnode

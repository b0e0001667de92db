#include "comm_wrap.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "addon_data.h"
#include "buffers.h"
#include "copy_bytes.h"
#include "v8_value.h"
#include "js_errors.h"
#include "monotonic.h"
#include "prepared_call.h"

namespace ncclnode {

namespace {

size_t need(const BufferView& v, size_t elements, size_t width, const char* what, const char* call) {
  const size_t bytes = elements * width;
  if (v.bytes < bytes) {
    std::ostringstream s;
    s << what << " holds " << v.bytes << " bytes, expected at least " << bytes << " ("
      << elements << " elements of " << width << " bytes)";
    throw Error(Code::SizeMismatch, s.str());
  }
  return bytes;
}

// A number argument within lo..hi (a fraction is cut toward zero, as Int32Value does);
// read from V8 directly: the call path reads eight of these per call.
int32_t intArg(const CallArgs& info, size_t i, const char* name, int32_t lo, int32_t hi) {
  v8::Local<v8::Value> v = toV8(info[i]);
  if (!v->IsNumber()) throw Error(Code::InvalidArgument, std::string(name) + ": expected a number");
  const double d = v.As<v8::Number>()->Value();
  if (!(d >= lo && d <= hi)) {
    std::ostringstream s;
    s << name << ": expected " << lo << ".." << hi << ", received " << d;
    throw Error(Code::InvalidArgument, s.str());
  }
  return static_cast<int32_t>(d);
}

// Per-peer element counts of allToAll: one non-negative integer per rank.
std::vector<uint64_t> countsArg(const Napi::Value& v, size_t n, const char* name, const char* call) {
  if (!v.IsArray()) throw Error(Code::InvalidArgument, std::string(name) + " must be an array");
  auto a = v.As<Napi::Array>();
  if (a.Length() != n) {
    std::ostringstream s;
    s << name << " has " << a.Length() << " entries, expected one per rank (" << n << ")";
    throw Error(Code::SizeMismatch, s.str());
  }
  std::vector<uint64_t> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    Napi::Value e = a.Get(i);
    const double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0 && d <= 9007199254740991.0) || d != static_cast<double>(static_cast<uint64_t>(d))) {
      std::ostringstream s;
      s << name << "[" << i << "] must be a non-negative integer";
      throw Error(Code::InvalidArgument, s.str());
    }
    out[i] = static_cast<uint64_t>(d);
  }
  return out;
}

// A Float64Array of 2 where calls leave their entry and exit times (stampInto, prepareSync),
// held for as long as the view lives.
BufferView stampsOf(const Napi::Value& v) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      v.As<Napi::TypedArray>().ElementLength() != 2) {
    throw Error(Code::InvalidArgument, "stamps: expected a Float64Array of 2 elements");
  }
  return viewOf(v, "stamps", true);
}

// Capped so that need()'s byte count cannot wrap around with many huge entries.
uint64_t sum(const std::vector<uint64_t>& v, const char* name, const char* call) {
  uint64_t t = 0;
  for (uint64_t x : v) {
    t += x;
    if (t > (1ULL << 53)) throw Error(Code::SizeMismatch, std::string(name) + " add up to more than 2^53 elements");
  }
  return t;
}

// The bytes of op's input that its output overlaps other than in place (the same
// memory; for the gathers and scatters the input as this rank's own block of the output,
// or the output as its own block of the input), else 0. Such an output would be written
// while a backend still reads the input, whatever the algorithm; NCCL leaves these calls
// undefined. Non-roots of a rooted collective write nothing their input overlaps, and
// all-to-all stages its blocks itself (gloo_alltoall.cpp).
size_t overlappedInput(const Op& op, int rank, size_t n) {
  const bool rooted = op.kind == OpKind::Broadcast || op.kind == OpKind::Reduce || op.kind == OpKind::Gather ||
                      op.kind == OpKind::Scatter;
  if (op.count == 0 || (rooted && op.root != rank)) return 0;
  const size_t block = op.count * elementSize(op.dtype);
  const auto* in = static_cast<const uint8_t*>(op.send.data);
  const auto* out = static_cast<const uint8_t*>(op.recv.data);
  const size_t own = static_cast<size_t>(rank) * block;
  switch (op.kind) {
    case OpKind::AllReduce:
    case OpKind::Broadcast:
    case OpKind::Reduce:
      return in != out && bytesOverlap(in, block, out, block) ? block : 0;
    case OpKind::AllGather:
    case OpKind::Gather:
      return in != out + own && bytesOverlap(in, block, out, block * n) ? block : 0;
    case OpKind::ReduceScatter:
    case OpKind::Scatter:
      return out != in + own && bytesOverlap(in, block * n, out, block) ? block * n : 0;
    default:
      return 0;
  }
}

}  // namespace

Napi::Function CommWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeComm",
                     {
                         InstanceMethod<&CommWrap::PrepareSync>("prepareSync"),
                         InstanceMethod<&CommWrap::Reject>("reject"),
                         InstanceMethod<&CommWrap::StampInto>("stampInto"),
                         InstanceMethod<&CommWrap::Shrink>("shrink"),
                         InstanceMethod<&CommWrap::Abort>("abort"),
                         InstanceMethod<&CommWrap::Destroy>("destroy"),
                         InstanceAccessor<&CommWrap::GetRank>("rank"),
                         InstanceAccessor<&CommWrap::GetSize>("size"),
                         InstanceAccessor<&CommWrap::GetBackend>("backend"),
                         InstanceAccessor<&CommWrap::GetVersion>("version"),
                         InstanceAccessor<&CommWrap::GetInFlight>("inFlight"),
                         InstanceAccessor<&CommWrap::GetState>("state"),
                         InstanceAccessor<&CommWrap::GetSupportsShrink>("supportsShrink"),
                     });
}

Napi::Object CommWrap::Wrap(Napi::Env env, std::unique_ptr<Backend> backend) {
  auto ext = Napi::External<Backend>::New(env, backend.release());
  return addonData(env).commCtor.New({ext});
}

Napi::Value CommWrap::WrapSplit(Napi::Env env, std::unique_ptr<Backend> backend, const Napi::Object&) {
  return Wrap(env, std::move(backend));
}

CommWrap::CommWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CommWrap>(info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsExternal()) {
    makeError(env, Code::InvalidArgument, "NativeComm is created by init(), not by new").ThrowAsJavaScriptException();
    return;
  }
  std::unique_ptr<Backend> backend(info[0].As<Napi::External<Backend>>().Data());
  rank_ = backend->rank();
  size_ = backend->size();
  engine_ = std::make_unique<Engine>(env, std::move(backend), &CommWrap::WrapSplit);
  addonData(env).engines.insert(engine_.get());
  makeFastMethod("submit", &CommWrap::Submit);
  makeFastMethod("submitSync", &CommWrap::SubmitSync);
}

void CommWrap::makeFastMethod(const char* name, Napi::Value (CommWrap::*method)(const CallArgs&)) {
  struct Data {
    std::shared_ptr<Link> link;
    Napi::Value (CommWrap::*method)(const CallArgs&);
  };
  auto* data = new Data{link_, method};
  napi_callback call = [](napi_env env, napi_callback_info cbinfo) -> napi_value {
    void* raw = nullptr;
    const CallArgs args(env, cbinfo, &raw);
    const auto* d = static_cast<const Data*>(raw);
    CommWrap* self = d->link->comm;
    if (self == nullptr) {
      makeError(Napi::Env(env), Code::CommDestroyed, "the communicator is gone").ThrowAsJavaScriptException();
      return nullptr;
    }
    return (self->*(d->method))(args);
  };
  Napi::Env env = Env();
  napi_value fn = nullptr;
  if (napi_create_function(env, name, NAPI_AUTO_LENGTH, call, data, &fn) != napi_ok) {
    delete data;
    throw Napi::Error::New(env, std::string("could not make the communicator's ") + name);
  }
  Napi::Function f(env, fn);
  f.AddFinalizer([](Napi::Env, Data* d) { delete d; }, data);
  Value().DefineProperty(Napi::PropertyDescriptor::Value(name, f, napi_default));
}

CommWrap::~CommWrap() {
  link_->comm = nullptr;
  if (!engine_) return;
  addonData(Env()).engines.erase(engine_.get());
  if (engine_->leaked()) {
    engine_.release();  // its detached worker may still run; the process is exiting
  } else {
    engine_->abort(Env());
    engine_.reset();
  }
}

Napi::Promise CommWrap::Connect(Napi::Env env, int64_t timeoutMs) {
  auto p = std::make_unique<Pending>();
  p->op = std::make_unique<Op>();
  p->op->timeout = std::chrono::milliseconds(timeoutMs);
  p->connect = true;
  p->deferred.emplace(Napi::Promise::Deferred::New(env));
  p->owner = Napi::Persistent(Value());
  return engine_->submit(env, std::move(p));
}

// submit(kind, dtype, redop, send, recv, count, rootOrPeer, timeoutMs, color, key, sendCounts, recvCounts,
// preMulScalar, group); the count arrays make allToAll the variable-size form, and count is then ignored;
// preMulScalar (a number) makes a sum a pre-multiplied sum; group is Op::Group (NCCL's group boundaries).
// Returns undefined for a call that completed, successfully, before submit() returned, else a promise
// (Engine::submitCall).
Napi::Value CommWrap::Submit(const CallArgs& info) {
  Napi::Env env = info.Env();
  if (stamps_) stamps_[0] = engine_->callClock().nowMs();
  return guard(env, [&]() -> Napi::Value {
    const auto kind = static_cast<OpKind>(intArg(info, 0, "kind", 0, kNumOpKinds - 1));
    try {
      Napi::Value result = submit(info, kind);
      if (stamps_ && result.IsUndefined()) stamps_[1] = engine_->callClock().nowMs();
      return result;
    } catch (const Error& e) {
      throw Error(e.code(), refusal(kind, e));
    }
  });
}

// stampInto(stamps): a Float64Array of 2, held from now on, where each submit() and
// submitSync() writes its entry time ([0]) and, for a call that completed before it
// returned (submit: when it returns undefined; submitSync: always, failed or not), its
// exit time ([1]), in monotonicMs() (as the engine's CallClock reads it).
Napi::Value CommWrap::StampInto(const Napi::CallbackInfo& callInfo) {
  const CallArgs info(callInfo);
  return guard(info.Env(), [&]() -> Napi::Value {
    stampsView_ = stampsOf(info[0]);
    stamps_ = static_cast<double*>(stampsView_.data);
    return info.Env().Undefined();
  });
}

// reject(kind, code, message, rootOrPeer, timeoutMs): this rank refused a call
// (bad arguments) that the other ranks may have made correctly. A stand-in takes
// its place in the sequence so the other ranks fail the same operation with the
// reason, and later calls still line up (Op::rejected).
Napi::Value CommWrap::Reject(const Napi::CallbackInfo& callInfo) {
  const CallArgs info(callInfo);
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (engine_->destroyed() || engine_->aborted()) return env.Undefined();
    const auto kind = static_cast<OpKind>(intArg(info, 0, "kind", 0, kNumOpKinds - 1));
    const Code code = codeFromName(info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "");
    const std::string reason = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "rejected";
    const int root = info[3].IsNumber() ? info[3].As<Napi::Number>().Int32Value() : -1;
    queueRejected(env, kind, code, reason, root, std::chrono::milliseconds(intArg(info, 4, "timeoutMs", 1, INT32_MAX)));
    return env.Undefined();
  });
}

// Every refusal names the call and the rank, as the JS layer's own do.
std::string CommWrap::refusal(OpKind kind, const Error& e) const {
  std::ostringstream s;
  s << opKindName(kind) << " on rank " << rank_ << " of " << size_ << ": " << e.what();
  return s.str();
}

void CommWrap::queueRejected(Napi::Env env, OpKind kind, Code code, const std::string& reason, int root,
                             std::chrono::milliseconds timeout) {
  auto p = std::make_unique<Pending>();
  p->op = std::make_unique<Op>();
  Op& op = *p->op;
  op.kind = kind;
  op.rejected = true;
  op.rejectCode = code;
  op.rejectReason = reason;
  op.root = root;
  op.timeout = timeout;
  if (kind == OpKind::Send || kind == OpKind::Recv) {
    // Without a valid peer there is nobody to tell.
    if (op.root < 0 || op.root >= size_ || op.root == rank_) return;
  } else {
    op.root = -1;
  }
  sequence(op);
  p->owner = Napi::Persistent(Value());
  engine_->submitRejected(env, std::move(p));
}

// submitSync(kind, dtype, redop, send, recv, count, root, timeoutMs): a collective run
// to completion on this thread, after the calls of this communicator before it, which
// blocks until every rank has joined it or its timeout passes; returns undefined or
// throws its failure. For host memory on a backend whose operations complete where
// they are launched (Gloo). A call refused here (those conditions, bad arguments)
// leaves a stand-in in the sequence, as reject() does, so the other ranks fail the
// same call.
Napi::Value CommWrap::SubmitSync(const CallArgs& info) {
  Napi::Env env = info.Env();
  if (stamps_) stamps_[0] = engine_->callClock().nowMs();
  ExitStamp exit{stamps_ ? stamps_ + 1 : nullptr, engine_->callClock()};
  return guard(env, [&]() -> Napi::Value {
    const auto kind = static_cast<OpKind>(intArg(info, 0, "kind", 0, kNumOpKinds - 1));
    const auto timeout = std::chrono::milliseconds(intArg(info, 7, "timeoutMs", 1, INT32_MAX));
    std::unique_ptr<Pending> p;
    try {
      bool hasSend = false, ownRecv = false;
      p = buildBlocking(info, kind, &hasSend, &ownRecv, false);
    } catch (const Error& e) {
      const std::string why = refusal(kind, e);
      if (e.code() != Code::CommDestroyed && e.code() != Code::CommAborted) {
        queueRejected(env, kind, e.code(), why, info[6].IsNumber() ? info[6].As<Napi::Number>().Int32Value() : -1,
                      timeout);
      }
      throw Error(e.code(), why);
    }
    sequence(*p->op);
    // Nothing can detach or free the buffers while this thread is held: no references.
    engine_->runSync(std::move(p));
    return env.Undefined();
  });
}

std::unique_ptr<Pending> CommWrap::buildBlocking(const CallArgs& info, OpKind kind, bool* hasSend,
                                                 bool* ownRecv, bool hold, bool prepared) {
  if (kind == OpKind::Send || kind == OpKind::Recv || kind == OpKind::Split) {
    throw Error(Code::InvalidArgument, "a blocking call is a collective, not send, recv or split");
  }
  if (!engine_->destroyed() && !engine_->aborted() && !engine_->blocking()) {
    throw Error(Code::Unavailable, "the " + engine_->backendName() +
                                       " backend does not run blocking calls (its operations complete "
                                       "on the device); await the non-blocking call instead");
  }
  std::unique_ptr<Pending> p = build(info, kind, hasSend, ownRecv, hold, prepared);
  if (p->op->send.mem != MemKind::Host || p->op->recv.mem != MemKind::Host) {
    throw Error(Code::InvalidArgument, "a blocking call takes host memory, received a device buffer");
  }
  return p;
}

// prepareSync(kind, dtype, redop, send, recv, count, root, timeoutMs, stamps): submitSync()'s
// call checked and built once, returned as a NativePreparedCall whose run() makes it
// and writes its entry and exit times into stamps (a Float64Array of 2).
// The views hold their memory (a resizable ArrayBuffer is refused: it could shrink
// between runs) and are referenced for a detach check at each run. Preparing takes
// no place in the sequence: a refusal here concerns this rank alone.
Napi::Value CommWrap::PrepareSync(const Napi::CallbackInfo& callInfo) {
  const CallArgs info(callInfo);
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const auto kind = static_cast<OpKind>(intArg(info, 0, "kind", 0, kNumOpKinds - 1));
    try {
      bool hasSend = false, ownRecv = false;
      std::unique_ptr<Pending> p = buildBlocking(info, kind, &hasSend, &ownRecv, true, true);
      BufferView stamps = stampsOf(info[8]);
      return newPreparedCall(env, this, Value(), std::move(p), hasSend ? info[3] : env.Undefined(),
                             ownRecv ? info[4] : env.Undefined(), std::move(stamps));
    } catch (const Error& e) {
      throw Error(e.code(), refusal(kind, e));
    }
  });
}

// The op submit() and submitSync() describe, every argument checked; not yet in the
// communicator's sequence (sequence()).
std::unique_ptr<Pending> CommWrap::build(const CallArgs& info, OpKind kind, bool* hasSendOut,
                                         bool* ownRecvOut, bool hold, bool prepared) {
  {
    const char* call = opKindName(kind);
    if (engine_->destroyed()) {
      throw Error(Code::CommDestroyed, "the communicator was destroyed");
    }
    if (engine_->aborted()) throw Error(Code::CommAborted, "the communicator was aborted");
    auto p = std::make_unique<Pending>();
    p->op = std::make_unique<Op>();
    Op& op = *p->op;
    op.kind = kind;
    op.dtype = static_cast<DType>(intArg(info, 1, "dtype", 0, kNumDTypes - 1));
    op.redop = static_cast<RedOp>(intArg(info, 2, "op", 0, kNumRedOps - 1));
    if (!info[5].IsNumber()) throw Error(Code::InvalidArgument, "count must be a number");
    const double count = info[5].As<Napi::Number>().DoubleValue();
    if (count < 0 || count > 9007199254740991.0) throw Error(Code::InvalidArgument, "bad count");
    op.count = static_cast<size_t>(count);
    op.root = intArg(info, 6, "root", -1, size_ - 1);
    op.timeout = std::chrono::milliseconds(intArg(info, 7, "timeoutMs", 1, INT32_MAX));
    if (kind == OpKind::Split) {
      op.color = intArg(info, 8, "color", INT32_MIN, INT32_MAX);
      op.key = intArg(info, 9, "key", INT32_MIN, INT32_MAX);
    }
    if (info.Length() > 12 && !info[12].IsUndefined() && !info[12].IsNull()) {
      if (!info[12].IsNumber()) throw Error(Code::InvalidArgument, "preMulScalar must be a number");
      if ((kind != OpKind::AllReduce && kind != OpKind::ReduceScatter) || op.redop != RedOp::Sum) {
        throw Error(Code::InvalidArgument, "a pre-multiplied sum is an allReduce or reduceScatter with op 'sum'");
      }
      op.hasPreMul = true;
      op.preMulScalar = info[12].As<Napi::Number>().DoubleValue();
    }
    if (info.Length() > 13 && !info[13].IsUndefined()) {
      op.group = static_cast<Op::Group>(intArg(info, 13, "group", 0, 2));
      if (op.group != Op::Group::None && kind == OpKind::Split) {
        throw Error(Code::InvalidArgument, "split cannot be part of a group");
      }
    }
    const size_t w = elementSize(op.dtype);
    const size_t n = static_cast<size_t>(size_);
    const bool isRoot = op.root == rank_;
    const bool hasSend = !info[3].IsUndefined() && !info[3].IsNull();
    const bool hasRecv = !info[4].IsUndefined() && !info[4].IsNull();
    const bool ownRecv = hasRecv && !(hasSend && info[4].StrictEquals(info[3]));
    if (hasSend) op.send = viewOf(info[3], kind == OpKind::Send || kind == OpKind::Recv ? "buffer" : "send buffer", hold);
    if (ownRecv) {
      op.recv = viewOf(info[4], kind == OpKind::Send || kind == OpKind::Recv ? "buffer" : "receive buffer", hold);
    } else if (hasRecv) {
      op.recv = op.send;
    }
    if (!hasSend) op.send = op.recv;
    if (!hasRecv) op.recv = op.send;
    switch (kind) {
      case OpKind::AllReduce: need(op.send, op.count, w, "input", call); need(op.recv, op.count, w, "output", call); break;
      case OpKind::Broadcast: need(op.recv, op.count, w, "buffer", call); if (isRoot) need(op.send, op.count, w, "input", call); break;
      case OpKind::Reduce: need(op.send, op.count, w, "input", call); if (isRoot) need(op.recv, op.count, w, "output", call); break;
      case OpKind::AllGather: need(op.send, op.count, w, "input", call); need(op.recv, op.count * n, w, "output", call); break;
      case OpKind::ReduceScatter: need(op.send, op.count * n, w, "input", call); need(op.recv, op.count, w, "output", call); break;
      case OpKind::AllToAll:
        if (info.Length() > 10 && !info[10].IsUndefined()) {
          op.sendCounts = countsArg(info[10], n, "sendCounts", call);
          op.recvCounts = countsArg(info[11], n, "recvCounts", call);
          // The local block is a copy: a length that differs would be cut or overrun.
          if (op.sendCounts[rank_] != op.recvCounts[rank_]) {
            std::ostringstream s;
            s << "sendCounts[" << rank_ << "] (" << op.sendCounts[rank_] << ") must equal recvCounts["
              << rank_ << "] (" << op.recvCounts[rank_] << "), the block this rank keeps";
            throw Error(Code::SizeMismatch, s.str());
          }
          op.count = sum(op.sendCounts, "sendCounts", call);
          need(op.send, op.count, w, "input", call);
          need(op.recv, sum(op.recvCounts, "recvCounts", call), w, "output", call);
          break;
        }
        if (op.count % n != 0) throw Error(Code::SizeMismatch, "element count must be a multiple of the world size");
        need(op.send, op.count, w, "input", call); need(op.recv, op.count, w, "output", call); break;
      case OpKind::Gather: need(op.send, op.count, w, "input", call); if (isRoot) need(op.recv, op.count * n, w, "output", call); break;
      case OpKind::Scatter: need(op.recv, op.count, w, "output", call); if (isRoot) need(op.send, op.count * n, w, "input", call); break;
      case OpKind::Send: need(op.send, op.count, w, "buffer", call); break;
      case OpKind::Recv: need(op.recv, op.count, w, "buffer", call); break;
      case OpKind::Barrier: case OpKind::Split: break;
    }
    if ((kind == OpKind::Send || kind == OpKind::Recv) && (op.root < 0 || op.root == rank_)) {
      throw Error(Code::InvalidArgument, "peer must be another rank");
    }
    if (const size_t bytes = overlappedInput(op, rank_, n)) {
      // Read from a copy taken now, held by the view as the caller's memory is.
      if (op.send.mem != MemKind::Host || op.recv.mem != MemKind::Host || prepared) {
        throw Error(Code::InvalidArgument,
                    std::string("the output overlaps the input without being in place (the same memory") +
                        (kind == OpKind::AllReduce || kind == OpKind::Reduce || kind == OpKind::Broadcast
                             ? ")"
                             : ", or the input as this rank's own block)") +
                        (prepared ? "; a prepared call reruns on the same memory: prepare it in place or apart"
                                  : "; device memory is not copied: use separate buffers"));
      }
      std::shared_ptr<uint8_t[]> copy(new uint8_t[bytes]);
      copyBytes(copy.get(), op.send.data, bytes);
      op.send.data = copy.get();
      op.send.bytes = bytes;
      op.send.keep = std::move(copy);
    }
    *hasSendOut = hasSend;
    *ownRecvOut = ownRecv;
    return p;
  }
}

// Its place in the sequence every rank counts alike.
void CommWrap::sequence(Op& op) {
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
    op.p2pIndex = engine_->nextP2P(op.kind == OpKind::Send, op.root);
  } else {
    op.seq = engine_->nextSeq();
  }
}

Napi::Value CommWrap::submit(const CallArgs& info, OpKind kind) {
  Napi::Env env = info.Env();
  {
    bool hasSend = false, ownRecv = false;
    auto p = build(info, kind, &hasSend, &ownRecv);
    Op& op = *p->op;
    sequence(op);
    // An op completed before this returns needs no references: the caller's arguments
    // keep the buffers and this communicator alive, and nothing can detach them
    // meanwhile. One that is queued (or that the backend keeps in flight after all)
    // takes them then: pin().
    // One pointer captured: std::function keeps it without allocating.
    struct Args { CommWrap* self; const CallArgs* info; bool send, recv; } args{this, &info, hasSend, ownRecv};
    const std::function<void(Pending&)> pinning = [a = &args](Pending& kept) { a->self->pin(*a->info, kept, a->send, a->recv); };
    return engine_->submitCall(env, std::move(p), pinning);
  }
}

// What keeps an op's communicator and buffers alive until it settles on the worker.
void CommWrap::pin(const CallArgs& info, Pending& p, bool hasSend, bool ownRecv) {
  p.owner = Napi::Persistent(Value());
  if (hasSend) p.sendRef = Napi::Persistent(info[3]);
  if (ownRecv) p.recvRef = Napi::Persistent(info[4]);
}

// shrink(excludeRanks, abort, timeoutMs) -> Promise<NativeComm>: a communicator of the
// other ranks (ncclCommShrink). Every argument is checked here, before anything is
// queued, and the refusal names what was expected and what came.
Napi::Value CommWrap::Shrink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    try {
      if (engine_->destroyed()) throw Error(Code::CommDestroyed, "the communicator was destroyed");
      if (engine_->aborted()) throw Error(Code::CommAborted, "the communicator was aborted; form a new one instead");
      if (!info[0].IsArray()) throw Error(Code::InvalidArgument, "excludeRanks must be an array of ranks");
      auto a = info[0].As<Napi::Array>();
      std::vector<int> exclude;
      for (uint32_t i = 0; i < a.Length(); ++i) {
        Napi::Value e = a.Get(i);
        const double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
        if (!(d >= 0 && d < size_) || d != static_cast<double>(static_cast<int>(d))) {
          std::ostringstream s;
          s << "excludeRanks[" << i << "] must be a rank 0.." << size_ - 1 << ", received "
            << (e.IsNumber() ? std::to_string(d) : std::string("a ") + (e.IsString() ? "string" : "non-number"));
          throw Error(Code::InvalidArgument, s.str());
        }
        const int r = static_cast<int>(d);
        if (r == rank_) {
          throw Error(Code::InvalidArgument, "excludeRanks holds this rank (" + std::to_string(r) +
                                                 "): an excluded rank does not take part in the shrink");
        }
        exclude.push_back(r);
      }
      std::sort(exclude.begin(), exclude.end());
      for (size_t i = 1; i < exclude.size(); ++i) {
        if (exclude[i] == exclude[i - 1]) throw Error(Code::InvalidArgument, "excludeRanks holds rank " + std::to_string(exclude[i]) + " twice");
      }
      if (!info[1].IsBoolean()) throw Error(Code::InvalidArgument, "abort must be a boolean");
      const bool abortParent = info[1].As<Napi::Boolean>().Value();
      auto p = std::make_unique<Pending>();
      p->op = std::make_unique<Op>();
      Op& op = *p->op;
      op.timeout = std::chrono::milliseconds(intArg(CallArgs(info), 2, "timeoutMs", 1, INT32_MAX));
      if (!engine_->supportsShrink()) {
        throw Error(Code::Unavailable,
                    engine_->backendName() != "nccl"
                        ? "the " + engine_->backendName() + " backend cannot shrink a communicator; form a new one instead"
                        : "the NCCL communicator (" + engine_->backendVersion() +
                              ") cannot shrink: that needs NCCL >= 2.27 (ncclCommShrink) and a communicator that was not "
                              "aborted; form a new communicator instead");
      }
      if (engine_->broken() && !abortParent) {
        throw Error(Code::CommAborted, "the communicator is broken after an earlier failure: shrink it with abort: true");
      }
      op.kind = OpKind::Split;
      op.shrink = true;
      op.shrinkAbort = abortParent;
      op.exclude = std::move(exclude);
      p->deferred.emplace(Napi::Promise::Deferred::New(env));
      p->owner = Napi::Persistent(Value());
      return engine_->submit(env, std::move(p));
    } catch (const Error& e) {
      std::ostringstream s;
      s << "shrink on rank " << rank_ << " of " << size_ << ": " << e.what();
      throw Error(e.code(), s.str());
    }
  });
}

Napi::Value CommWrap::Abort(const Napi::CallbackInfo& info) {
  if (!engine_->destroyed()) engine_->abort(info.Env());
  return info.Env().Undefined();
}

Napi::Value CommWrap::Destroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (engine_->destroyed()) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Resolve(env.Undefined());
    return d.Promise();
  }
  auto p = std::make_unique<Pending>();
  p->op = std::make_unique<Op>();
  p->op->kind = OpKind::Barrier;
  p->destroy = true;
  p->deferred.emplace(Napi::Promise::Deferred::New(env));
  p->owner = Napi::Persistent(Value());
  return engine_->submit(env, std::move(p));
}

Napi::Value CommWrap::GetRank(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), rank_); }
Napi::Value CommWrap::GetSize(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), size_); }
Napi::Value CommWrap::GetBackend(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), engine_->backendName());
}
Napi::Value CommWrap::GetVersion(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), engine_->backendVersion());
}
Napi::Value CommWrap::GetInFlight(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(engine_->inFlight()));
}
Napi::Value CommWrap::GetSupportsShrink(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), engine_->supportsShrink());
}
Napi::Value CommWrap::GetState(const Napi::CallbackInfo& info) {
  const char* s = engine_->destroyed() ? "destroyed" : engine_->aborted() ? "aborted" : engine_->broken() ? "broken" : "ok";
  return Napi::String::New(info.Env(), s);
}

}  // namespace ncclnode

#include "op.h"

#include "backend.h"

namespace ncclnode {

const char* opKindName(OpKind k) {
  static const char* names[] = {"allReduce", "broadcast", "reduce", "allGather",
                                "reduceScatter", "allToAll", "gather", "scatter",
                                "send", "recv", "barrier", "split"};
  int i = static_cast<int>(k);
  return i >= 0 && i < kNumOpKinds ? names[i] : "unknown";
}

std::unique_ptr<Op> Op::copyOfCall() const {
  auto c = std::make_unique<Op>();
  c->kind = kind;
  c->dtype = dtype;
  c->redop = redop;
  c->send = send;
  c->recv = recv;
  c->count = count;
  c->sendCounts = sendCounts;
  c->recvCounts = recvCounts;
  c->root = root;
  c->color = color;
  c->key = key;
  c->shrink = shrink;
  c->shrinkAbort = shrinkAbort;
  c->exclude = exclude;
  c->timeout = timeout;
  c->seq = seq;
  c->p2pIndex = p2pIndex;
  c->rejected = rejected;
  c->rejectCode = rejectCode;
  c->rejectReason = rejectReason;
  c->hasPreMul = hasPreMul;
  c->preMulScalar = preMulScalar;
  c->group = group;
  c->preposted = preposted;
  c->prepostError = prepostError;
  c->secondRound = secondRound;
  c->enqueued = enqueued;
  return c;
}

}  // namespace ncclnode

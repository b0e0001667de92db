// Point-to-point on Gloo: a header/acknowledgement handshake before the data, so
// a send and a recv that disagree on size or dtype fail on both sides.
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <sstream>
#include <string>

#include "gloo_backend.h"

namespace ncclnode {

namespace {

// Slots above Gloo's own prefixes, for our point-to-point traffic. Gloo matches
// slots per pair and direction, so the k-th send from A to B meets B's k-th recv
// from A on slot prefix|k.
constexpr uint64_t kP2PHeaderSlot = 0xfcULL << 56;
constexpr uint64_t kP2PAckSlot = 0xfdULL << 56;
constexpr uint64_t kP2PDataSlot = 0xfeULL << 56;
constexpr uint64_t kP2PIndexMask = 0xffffffffffffULL;

struct P2PHeader {
  int32_t dtype;  // or, with ok == kRejected, the Code the side refused its call with
  int32_t ok;     // header: 1, or kRejected; ack: 1 when the receiver accepts, 0, or kRejected
  uint64_t count;
};
// The side that sent it refused its call locally (Op::rejected): the handshake
// still runs, so both sides fail and the next send/recv pair lines up.
constexpr int32_t kRejected = -1;

std::string rejectedText(int peer, const char* call, const P2PHeader& h) {
  std::ostringstream s;
  const int code = h.dtype;
  s << "rank " << peer << " rejected its matching " << call << " ("
    << (code >= 0 && code < kNumCodes ? codeName(static_cast<Code>(code)) : "unknown")
    << "; its own error says why), so no data moved";
  return s.str();
}

Code rejectedCode(const P2PHeader& h) {
  return codeFromNumber(h.dtype);
}

}  // namespace

// The sender announces dtype and count; the receiver answers with an ack carrying
// its own, and the data moves only when they agree, so a mismatch fails on both
// sides with the same facts instead of truncating or overrunning a buffer.
void GlooBackend::send(Op& op) {
  const int peer = op.root;
  const uint64_t k = op.p2pIndex & kP2PIndexMask;
  P2PHeader mine{static_cast<int32_t>(op.dtype), 1, op.count};
  if (op.rejected) mine = P2PHeader{static_cast<int32_t>(op.rejectCode), kRejected, 0};
  P2PHeader ack{};
  auto hdr = ctx_->createUnboundBuffer(&mine, sizeof mine);
  auto ackBuf = ctx_->createUnboundBuffer(&ack, sizeof ack);
  ackBuf->recv(peer, kP2PAckSlot | k);
  hdr->send(peer, kP2PHeaderSlot | k);
  hdr->waitSend(op.timeout);
  ackBuf->waitRecv(op.timeout);
  if (op.rejected) return;
  if (ack.ok == kRejected) throw Error(rejectedCode(ack), rejectedText(peer, "recv", ack));
  if (!ack.ok) {
    std::ostringstream s;
    s << "send to rank " << peer << ": sending " << op.count << " x " << dtypeName(op.dtype)
      << ", the peer's matching recv expects " << ack.count << " x " << dtypeName(static_cast<DType>(ack.dtype));
    throw Error(Code::SizeMismatch, s.str());
  }
  if (op.count == 0) return;
  auto data = ctx_->createUnboundBuffer(op.send.data, op.count * elementSize(op.dtype));
  data->send(peer, kP2PDataSlot | k);
  data->waitSend(op.timeout);
}

void GlooBackend::recv(Op& op) {
  const int peer = op.root;
  const uint64_t k = op.p2pIndex & kP2PIndexMask;
  P2PHeader theirs{};
  auto hdr = ctx_->createUnboundBuffer(&theirs, sizeof theirs);
  hdr->recv(peer, kP2PHeaderSlot | k);
  hdr->waitRecv(op.timeout);
  const bool ok = !op.rejected && theirs.ok == 1 && theirs.dtype == static_cast<int32_t>(op.dtype) &&
                  theirs.count == op.count;
  P2PHeader ack{static_cast<int32_t>(op.dtype), ok ? 1 : 0, op.count};
  if (op.rejected) ack = P2PHeader{static_cast<int32_t>(op.rejectCode), kRejected, 0};
  auto ackBuf = ctx_->createUnboundBuffer(&ack, sizeof ack);
  ackBuf->send(peer, kP2PAckSlot | k);
  ackBuf->waitSend(op.timeout);
  if (op.rejected) return;
  if (theirs.ok == kRejected) throw Error(rejectedCode(theirs), rejectedText(peer, "send", theirs));
  if (!ok) {
    std::ostringstream s;
    s << "recv from rank " << peer << ": expected " << op.count << " x " << dtypeName(op.dtype)
      << ", the peer's matching send has " << theirs.count << " x " << dtypeName(static_cast<DType>(theirs.dtype));
    throw Error(Code::SizeMismatch, s.str());
  }
  if (op.count == 0) return;
  auto data = ctx_->createUnboundBuffer(op.recv.data, op.count * elementSize(op.dtype));
  data->recv(peer, kP2PDataSlot | k);
  data->waitRecv(op.timeout);
}

}  // namespace ncclnode

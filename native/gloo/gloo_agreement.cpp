// The mesh round every collective starts with: the agreement fingerprint and, for
// small all-reduces, the data (docs/gloo.md). It runs with checkCollectives off
// too: Gloo's TCP transport aborts the process from its own event-loop thread when
// a peer sends more bytes than a posted receive holds (an exception nobody can
// catch), so the byte layout of every call is compared before any data moves.
// checkCollectives decides only whether dtype, count and op are compared as well.
#include <cstring>
#include <string>
#include <vector>

#include "gloo_backend.h"

namespace ncclnode {

// Small all-reduces travel whole to every peer and are reduced locally in rank
// order: one round instead of Gloo's ring. The choice depends only on the call and
// the world size, so ranks that agree on the call agree on the path.
bool GlooBackend::meshAllReduce(const Op& op) const {
  // A forced algorithm runs at every size, so it can be tested and measured there.
  return op.kind == OpKind::AllReduce && cfg_.size > 1 && forcedAllReduce_ == AllReduceAlgo::Auto &&
         op.count * elementSize(op.dtype) + sizeof(Fingerprint) <= mesh_->cap();
}

bool GlooBackend::checking() const { return cfg_.checkAgreement && cfg_.size > 1; }

bool GlooBackend::usesMesh(const Op& op) const { return cfg_.size > 1; }

// The round's message: the fingerprint, then the data of a small all-reduce, or
// for a rejected call the reason (cut to what the round carries, NUL-terminated).
void GlooBackend::postMesh(const Op& op) {
  const Fingerprint mine = fingerprintOf(op);
  if (op.rejected) {
    std::string why = op.rejectReason.substr(0, mesh_->cap() - sizeof mine - 1);
    mesh_->post(&mine, sizeof mine, why.c_str(), why.size() + 1);
    return;
  }
  const size_t bytes = meshAllReduce(op) ? op.count * elementSize(op.dtype) : 0;
  mesh_->post(&mine, sizeof mine, op.send.data, bytes);
}

bool GlooBackend::prepost(Op& op) {
  if (!ctx_ || broken_ || shmSingleHost()) return false;
  if (op.send.mem == MemKind::Device || op.recv.mem == MemKind::Device || !usesMesh(op)) return false;
  try {
    postMesh(op);
  } catch (...) {
    op.prepostError = std::current_exception();
  }
  op.preposted = true;
  return true;
}

// One mesh round carries every rank's fingerprint (when checking) and, for a small
// all-reduce, the data too. Every rank then holds every fingerprint, so all of them
// reach the same verdict, naming the same odd rank out. Returns true when the
// round already completed the call (a small all-reduce, or a barrier: a full
// exchange is one).
bool GlooBackend::agree(const Op& op) {
  if (!usesMesh(op)) return false;
  if (shmSingleHost()) return shmAgree(op);
  if (op.preposted) {
    if (op.prepostError) std::rethrow_exception(op.prepostError);
  } else {
    postMesh(op);
  }
  mesh_->wait(op.timeout);
  std::vector<Fingerprint> all(cfg_.size);
  for (int r = 0; r < cfg_.size; ++r) std::memcpy(&all[r], mesh_->from(r), sizeof(Fingerprint));
  checkAgreement(op, all, cfg_.rank, checking(), [this](int r) {
    const char* text = reinterpret_cast<const char*>(mesh_->from(r)) + sizeof(Fingerprint);
    return std::string(text, strnlen(text, mesh_->cap() - sizeof(Fingerprint)));
  });
  if (meshAllReduce(op)) {
    const size_t head = sizeof(Fingerprint);
    reduceInRankOrder(*mesh_, head, cfg_.size, reduceFunction(op.dtype, op.redop), op.recv.data, op.count,
                      elementSize(op.dtype));
    if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
    return true;
  }
  return op.kind == OpKind::Barrier;
}

}  // namespace ncclnode

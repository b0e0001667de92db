// The mesh round every collective starts with: the agreement fingerprint and, for
// small all-reduces, the data (docs/gloo.md).
#include <cstring>
#include <vector>

#include "gloo_backend.h"

namespace ncclnode {

// Small all-reduces travel whole to every peer and are reduced locally in rank
// order: one round instead of Gloo's ring. The choice depends only on the call and
// the world size, so ranks that agree on the call agree on the path.
bool GlooBackend::meshAllReduce(const Op& op) const {
  return op.kind == OpKind::AllReduce && cfg_.size > 1 &&
         op.count * elementSize(op.dtype) + sizeof(Fingerprint) <= mesh_->cap();
}

bool GlooBackend::checking() const { return cfg_.checkAgreement && cfg_.size > 1; }

bool GlooBackend::usesMesh(const Op& op) const { return checking() || meshAllReduce(op); }

// The round's message: the fingerprint when checking, then the data of a small all-reduce.
void GlooBackend::postMesh(const Op& op) {
  const Fingerprint mine = fingerprintOf(op);
  const size_t bytes = meshAllReduce(op) ? op.count * elementSize(op.dtype) : 0;
  mesh_->post(&mine, checking() ? sizeof mine : 0, op.send.data, bytes);
}

bool GlooBackend::prepost(Op& op) {
  if (!ctx_ || broken_) return false;
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
  if (op.preposted) {
    if (op.prepostError) std::rethrow_exception(op.prepostError);
  } else {
    postMesh(op);
  }
  mesh_->wait(op.timeout);
  if (checking()) {
    std::vector<Fingerprint> all(cfg_.size);
    for (int r = 0; r < cfg_.size; ++r) std::memcpy(&all[r], mesh_->from(r), sizeof(Fingerprint));
    checkAgreement(op, all, cfg_.rank);
  }
  if (meshAllReduce(op)) {
    const size_t head = checking() ? sizeof(Fingerprint) : 0;
    reduceInRankOrder(*mesh_, head, cfg_.size, reduceFunction(op.dtype, op.redop), op.recv.data, op.count,
                      elementSize(op.dtype));
    if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
    return true;
  }
  return op.kind == OpKind::Barrier;
}

}  // namespace ncclnode

// The mesh round every collective starts with: the agreement fingerprint and, for
// small all-reduces, the data (docs/gloo.md). It runs with checkCollectives off
// too: Gloo's TCP transport aborts the process from its own event-loop thread when
// a peer sends more bytes than a posted receive holds (an exception nobody can
// catch), so the byte layout of every call is compared before any data moves.
// checkCollectives decides only whether dtype, count and op are compared as well.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gloo_backend.h"

namespace ncclnode {

// Small collectives travel whole in the agreement round (gloo_tuning.h picks where):
// an all-reduce's buffer or an all-gather's input goes to every peer, a
// reduce-scatter's block p to peer p; the result is assembled locally in rank order,
// so every rank gets the same bits whatever the arrival order. The choice depends
// only on the call, the world size and the table, so ranks that agree on the call
// agree on the path.
size_t GlooBackend::meshBytes() const { return mesh_ ? mesh_->cap() - sizeof(Fingerprint) : 0; }

size_t GlooBackend::meshBody(const Op& op) const {
  if (cfg_.size < 2 || op.rejected) return 0;
  const size_t bytes = op.count * elementSize(op.dtype);
  switch (op.kind) {
    case OpKind::AllReduce:
      return pickAllReduce(tuning_, forcedAllReduce_, op.count, op.dtype, op.redop, cfg_.size, meshBytes()) ==
                     AllReduceAlgo::Mesh ? bytes : 0;
    case OpKind::AllGather:
      return pickAllGather(tuning_, op.count, op.dtype, cfg_.size, meshBytes()) == AllGatherAlgo::Mesh ? bytes : 0;
    case OpKind::ReduceScatter:
      return pickReduceScatter(tuning_, op.count, op.dtype, op.redop, cfg_.size, meshBytes()) ==
                     ReduceScatterAlgo::Mesh ? bytes : 0;
    default:
      return 0;
  }
}

// The result of a collective whose data rode in the round. This rank's own part comes
// from its own buffer (the round copies only small bodies into its slot).
void GlooBackend::finishMesh(const Op& op) {
  const size_t head = sizeof(Fingerprint);
  const size_t width = elementSize(op.dtype);
  const size_t block = op.count * width;
  const auto* send = static_cast<const uint8_t*>(op.send.data);
  auto* recv = static_cast<uint8_t*>(op.recv.data);
  const ReduceFn fn = op.kind == OpKind::AllGather ? nullptr : reduceFunction(op.dtype, op.redop);
  switch (op.kind) {
    case OpKind::AllGather:
      for (int r = 0; r < cfg_.size; ++r) {
        const uint8_t* from = r == cfg_.rank ? send : mesh_->from(r) + head;
        // memmove: an in-place all-gather's input is its own block of the output.
        std::memmove(recv + static_cast<size_t>(r) * block, from, block);
      }
      glooAlgoStats().meshAllGathers++;
      return;
    case OpKind::ReduceScatter:
      reduceInRankOrder(*mesh_, head, cfg_.rank, send + static_cast<size_t>(cfg_.rank) * block, cfg_.size, fn, recv,
                        op.count, width);
      glooAlgoStats().meshReduceScatters++;
      break;
    default:
      reduceInRankOrder(*mesh_, head, cfg_.rank, send, cfg_.size, fn, recv, op.count, width);
      glooAlgoStats().meshAllReduces++;
      break;
  }
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
}

bool GlooBackend::checking() const { return cfg_.checkAgreement && cfg_.size > 1; }

bool GlooBackend::usesMesh(const Op& op) const { return cfg_.size > 1; }

// The round's message: the fingerprint, then the data of a small all-reduce, or
// for a rejected call the reason (cut to what the round carries, NUL-terminated).
void GlooBackend::postMesh(const Op& op) {
  const Fingerprint mine = fingerprintOf(op);
  if (op.rejected) {
    // Short enough to be copied into the round's own slot (the string dies here).
    std::string why = op.rejectReason.substr(0, std::min(mesh_->cap(), MeshExchange::kCopiedBody) - sizeof mine - 1);
    mesh_->post(&mine, sizeof mine, why.c_str(), why.size() + 1);
    return;
  }
  const size_t body = meshBody(op);
  mesh_->post(&mine, sizeof mine, op.send.data, body, op.kind == OpKind::ReduceScatter ? body : 0);
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
  // A zero count moves nothing (run() returns before any data step).
  if (op.count > 0 && meshBody(op) > 0) {
    finishMesh(op);
    return true;
  }
  return op.kind == OpKind::Barrier;
}

}  // namespace ncclnode

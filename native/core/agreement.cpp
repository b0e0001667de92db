#include "agreement.h"

#include <sstream>

namespace ncclnode {

namespace {

bool usesRoot(OpKind k) {
  return k == OpKind::Broadcast || k == OpKind::Reduce || k == OpKind::Gather || k == OpKind::Scatter;
}

bool usesRedOp(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter;
}

// allToAll with per-peer counts marks its fingerprint in the (otherwise unused)
// redop field: its totals differ across ranks by design, so count is left out and
// the counts are checked pairwise by the backend.
constexpr uint8_t kPerPeerCounts = 1;

bool perPeer(const Fingerprint& f) {
  return static_cast<OpKind>(f.kind) == OpKind::AllToAll && f.redop == kPerPeerCounts;
}

std::string describe(const Fingerprint& f) {
  std::ostringstream s;
  auto kind = static_cast<OpKind>(f.kind);
  s << opKindName(kind) << " #" << f.seq;
  if (perPeer(f)) {
    s << " with per-rank counts of " << dtypeName(static_cast<DType>(f.dtype));
    return s.str();
  }
  if (f.dtype >= kNumDTypes) {
    s << " of " << f.count << " elements of an unknown dtype (" << int(f.dtype) << ")";
    return s.str();
  }
  s << " of " << f.count << " x " << dtypeName(static_cast<DType>(f.dtype));
  if (usesRedOp(kind)) s << " op " << redOpName(static_cast<RedOp>(f.redop));
  if (usesRoot(kind)) s << " root " << f.root;
  return s.str();
}

}  // namespace

static_assert(kNumCodes < 255 && kNumDTypes < 256, "a fingerprint carries these in a byte");

uint64_t bytesOf(const Fingerprint& f) {
  return f.dtype < kNumDTypes ? f.count * elementSize(static_cast<DType>(f.dtype)) : ~uint64_t{0};
}

Fingerprint fingerprintOf(const Op& op) {
  Fingerprint f{};
  f.seq = op.seq;
  f.count = op.count;
  f.kind = static_cast<uint8_t>(op.kind);
  f.dtype = static_cast<uint8_t>(op.dtype);
  f.redop = usesRedOp(op.kind) ? static_cast<uint8_t>(op.redop) : 0;
  f.root = usesRoot(op.kind) ? op.root : -1;
  if (op.kind == OpKind::AllToAll && !op.sendCounts.empty()) {
    f.redop = kPerPeerCounts;
    f.count = 0;
  }
  if (op.kind == OpKind::Barrier || op.kind == OpKind::Split) {
    f.count = 0;
    f.dtype = 0;
  }
  if (op.rejected) f.rejected = static_cast<uint8_t>(1 + static_cast<int>(op.rejectCode));
  return f;
}

void checkAgreement(const Op& op, const Fingerprint* all, int size, int myRank, bool strict,
                    const std::function<std::string(int)>& reasonOf) {
  const size_t n = static_cast<size_t>(size);
  if (op.rejected) throw Error(op.rejectCode, op.rejectReason);
  const Fingerprint mine = fingerprintOf(op);
  if (allMatch(mine, all, size)) return;
  // The lowest rejecting rank, so that every rank names the same one.
  for (size_t r = 0; r < n; ++r) {
    if (all[r].rejected == 0) continue;
    const int code = all[r].rejected - 1;
    std::ostringstream s;
    s << "rank " << r << " rejected its " << opKindName(static_cast<OpKind>(all[r].kind)) << " #" << all[r].seq
      << " before it reached the wire, so this one fails with it: " << reasonOf(static_cast<int>(r));
    throw Error(codeFromNumber(code), s.str());
  }
  for (size_t r = 0; r < n; ++r) {
    const Fingerprint& f = all[r];
    const bool layout = f.seq == mine.seq && bytesOf(f) == bytesOf(mine) && f.kind == mine.kind && f.root == mine.root &&
                        perPeer(f) == perPeer(mine);
    if (layout && (!strict || (f.count == mine.count && f.dtype == mine.dtype && f.redop == mine.redop))) continue;
    std::ostringstream s;
    s << "ranks disagree on the call: expected " << describe(mine) << " (as rank " << myRank
      << " called it), received " << describe(f) << " from rank " << r;
    throw Error(Code::SizeMismatch, s.str());
  }
}

void checkPeerCounts(const std::vector<uint64_t>& all, int size) {
  const size_t n = static_cast<size_t>(size);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const uint64_t sends = all[i * 2 * n + j];
      const uint64_t expects = all[j * 2 * n + n + i];
      if (sends == expects) continue;
      std::ostringstream s;
      s << "ranks disagree on the allToAll counts: rank " << i << " sends " << sends << " elements to rank " << j
        << " (its sendCounts[" << j << "]), rank " << j << " expects " << expects << " from rank " << i
        << " (its recvCounts[" << i << "])";
      throw Error(Code::SizeMismatch, s.str());
    }
  }
}

}  // namespace ncclnode

// Cross-rank agreement on what a collective is. Each rank contributes a fingerprint
// of its call; a rank whose call differs (another collective, dtype, count, root or
// op, or a different sequence number) fails on every rank with ERR_SIZE_MISMATCH
// naming both sides, instead of exchanging garbage or hanging.
#pragma once

#include <cstdint>
#include <vector>

#include "op.h"

namespace ncclnode {

struct Fingerprint {
  uint64_t seq;
  uint64_t count;
  int32_t kind;
  int32_t dtype;
  int32_t redop;
  int32_t root;
};
static_assert(sizeof(Fingerprint) == 32, "fingerprint is exchanged as raw bytes");

Fingerprint fingerprintOf(const Op& op);

// Throws Error(SizeMismatch) when any rank's fingerprint differs from ours.
void checkAgreement(const Op& op, const std::vector<Fingerprint>& all, int myRank);

// allToAll with per-peer counts: `all` holds every rank's sendCounts then
// recvCounts (2 x size entries per rank, in rank order). Throws Error(SizeMismatch)
// on the first pair where rank i's sendCounts[j] differs from rank j's
// recvCounts[i]; every rank holds the same table, so every rank throws the same.
void checkPeerCounts(const std::vector<uint64_t>& all, int size);

}  // namespace ncclnode

// Cross-rank agreement on what a collective is. Each rank contributes a fingerprint
// of its call; a rank whose call differs (another collective, dtype, count, root or
// op, or a different sequence number) fails on every rank with ERR_SIZE_MISMATCH
// naming both sides, instead of exchanging garbage, hanging or overrunning a
// buffer. A rank that refused its call locally (Op::rejected) sends a fingerprint
// marked rejected, and every rank fails that operation with its reason.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "op.h"

namespace ncclnode {

// 24 bytes, so that through the shared-memory segment the round's flag word, the
// fingerprint and up to 32 bytes of a small all-reduce's data share one cache line
// (shm_collectives.cpp: one line transfer per peer and round instead of two at 16-32 B).
// The byte count is not sent: it is count x the dtype's size (bytesOf).
struct Fingerprint {
  uint64_t seq;
  uint64_t count;
  int32_t root;
  uint8_t kind;
  uint8_t dtype;
  uint8_t redop;
  uint8_t rejected;  // 0, or 1 + the Code this rank refused its call with
};
static_assert(sizeof(Fingerprint) == 24, "fingerprint is exchanged as raw bytes");

// What the call moves on its rank's side (count x element size), or ~0 for a dtype this
// build does not know (a peer's garbage: it matches nothing).
uint64_t bytesOf(const Fingerprint& f);

Fingerprint fingerprintOf(const Op& op);

// Every one of the `size` fingerprints in `all` is `mine`, byte for byte: the usual case,
// which checkAgreement() passes without looking further (none is a refusal when `mine`
// is not). Inline for the callers that check it first to skip building checkAgreement's
// arguments.
inline bool allMatch(const Fingerprint& mine, const Fingerprint* all, int size) {
  int same = 0;
  for (int r = 0; r < size; ++r) same += std::memcmp(&all[r], &mine, sizeof mine) == 0;
  return same == size;
}

// Throws when any rank's fingerprint differs from ours. A rejected fingerprint
// fails with the rejecting rank's code and reason (reasonOf(r)); otherwise
// Error(SizeMismatch). `strict` (checkCollectives) compares every field; without it
// only what decides how many bytes move where (sequence, call, byte count, root),
// so that no rank ever receives more than it posted for, but a same-sized call
// with another dtype or reduction op goes through.
// `all` holds `size` fingerprints, rank order.
void checkAgreement(const Op& op, const Fingerprint* all, int size, int myRank, bool strict,
                    const std::function<std::string(int)>& reasonOf);

// allToAll with per-peer counts: `all` holds every rank's sendCounts then
// recvCounts (2 x size entries per rank, in rank order). Throws Error(SizeMismatch)
// on the first pair where rank i's sendCounts[j] differs from rank j's
// recvCounts[i]; every rank holds the same table, so every rank throws the same.
void checkPeerCounts(const std::vector<uint64_t>& all, int size);

}  // namespace ncclnode

#include "shm_collectives.h"

#include <algorithm>
#include <cstring>

#include <sched.h>

#include "../core/copy_bytes.h"

namespace ncclnode {
namespace shm {

Stats& stats() {
  static Stats s;
  return s;
}

namespace {
// A round's message starts with a flag word (post() below); the chunked collectives put
// their data at the same place. A chunk shorter than the word would leave the old flag's
// other bytes there, and such a word differs from the flag of the round two steps later
// in its low byte alone: one value in 256 read as that round's message while the slot
// still held the old one. The word is cleared before the data goes in, so a slot holding
// data never has a flag's top byte (setupShm() sets the nonce's top bit).
void clearFlag(uint8_t* slot) { __atomic_store_n(reinterpret_cast<uint64_t*>(slot), 0, __ATOMIC_RELAXED); }
}  // namespace

void allReduce(HostGroup& g, const void* in, void* out, size_t count, DType dtype, RedOp op,
               std::chrono::milliseconds timeout, const std::atomic<bool>* abort, const InterHost& interHost,
               int root) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  const size_t width = elementSize(dtype);
  const size_t chunkElems = std::max<size_t>(1, g.chunkBytes / width);
  const ReduceFn fn = reduceFunction(dtype, op);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const bool twoLevel = g.hosts > 1;
  stats().allReduces++;
  if (twoLevel) stats().twoLevel++;
  stats().bytes += count * width;

  if (!g.seg) {
    // Alone on this host: the leaders' step is the whole operation.
    if (src != dst) copyBytes(dst, src, count * width);
    for (size_t off = 0; off < count; off += chunkElems) {
      interHost(dst + off * width, std::min(chunkElems, count - off), left());
    }
    return;
  }

  Segment& seg = *g.seg;
  const int L = g.locals;
  const int me = g.localRank;
  Waiter w(seg, me, deadline, abort, timeout);
  w.enter();
  RankCtl& mine = seg.ctl(me);
  for (size_t off = 0; off < count; off += chunkElems) {
    const size_t n = std::min(chunkElems, count - off);
    const uint64_t s = ++g.step;
    const int b = static_cast<int>(s & 1);
    // Slot b was last used at step s-2: every rank must have finished it.
    if (s > 2) w.all(&RankCtl::done, s - 2);
    clearFlag(seg.slot(me, b));
    copyBytes(seg.slot(me, b), src + off * width, n * width);
    publish(mine, &RankCtl::posted, s);
    w.all(&RankCtl::posted, s);
    const size_t lo = n * me / L;
    const size_t hi = n * (me + 1) / L;
    if (hi > lo) {
      uint8_t* res = seg.result(b) + lo * width;
      fn(res, seg.slot(0, b) + lo * width, seg.slot(1, b) + lo * width, hi - lo);
      for (int j = 2; j < L; ++j) fn(res, res, seg.slot(j, b) + lo * width, hi - lo);
    }
    publish(mine, &RankCtl::reduced, s);
    if (root >= 0 && me != root) {
      // A reduce's other ranks are done with the round once their part is in: the root
      // reads the result before it marks the round done, and nobody writes slot b or
      // result b again before every rank has.
      publish(mine, &RankCtl::done, s);
      continue;
    }
    if (!twoLevel) {
      w.all(&RankCtl::reduced, s);
    } else if (me == 0) {
      w.all(&RankCtl::reduced, s);
      interHost(seg.result(b), n, left());
      publish(mine, &RankCtl::bcast, s);
    } else {
      w.one(0, &RankCtl::bcast, s);
    }
    copyBytes(dst + off * width, seg.result(b), n * width);
    publish(mine, &RankCtl::done, s);
  }
}

namespace {
// A round's message goes into its slot behind a flag word, written last: the step,
// mixed with the segment's nonce. A peer polls that word, in the same cache line as the
// message's first 56 bytes, so one transfer of that line both tells it the message is
// in and brings a small all-reduce's whole message (flag, 24-byte fingerprint, up to 32
// bytes of data: gloo_shm.cpp); polling the rank's posted counter instead took one
// transfer for the counter and another for the message after it, and the counter's line
// bounces with every done as well. The nonce keeps what other collectives leave in a
// slot (they use its first word as data, cleared first: clearFlag()) from reading as a
// flag: eight bytes of data equal to step ^ nonce would have to be guessed, and fewer
// leave a zero top byte. The posted counter is still written, after the flag, for the
// waits that watch it.
uint64_t roundFlag(const Segment& seg, uint64_t s) { return s ^ seg.nonce(); }
uint64_t* flagOf(uint8_t* slot) { return reinterpret_cast<uint64_t*>(slot); }

void post(HostGroup& g, uint64_t s, const void* head, size_t headBytes, const void* body, size_t bodyBytes) {
  Segment& seg = *g.seg;
  uint8_t* slot = seg.slot(g.localRank, static_cast<int>(s & 1));
  uint8_t* msg = slot + kRoundFlagBytes;
  if (headBytes) std::memcpy(msg, head, headBytes);
  if (bodyBytes) copyBytes(msg + headBytes, body, bodyBytes);
  __atomic_store_n(flagOf(slot), roundFlag(seg, s), __ATOMIC_RELEASE);
  publish(seg.ctl(g.localRank), &RankCtl::posted, s);
}

bool allReached(const Segment& seg, int me, std::atomic<uint64_t> RankCtl::*field, uint64_t value) {
  for (int r = 0; r < seg.locals(); ++r) {
    if (r != me && (seg.ctl(r).*field).load(std::memory_order_acquire) < value) return false;
  }
  return true;
}

// Every other rank's message of round s is in (its flag is there).
bool allPosted(const Segment& seg, int me, uint64_t s) {
  const uint64_t want = roundFlag(seg, s);
  const int b = static_cast<int>(s & 1);
  for (int r = 0; r < seg.locals(); ++r) {
    if (r != me && __atomic_load_n(flagOf(seg.slot(r, b)), __ATOMIC_ACQUIRE) != want) return false;
  }
  return true;
}
}  // namespace

void exchange(HostGroup& g, const void* head, size_t headBytes, const void* body, size_t bodyBytes,
              std::chrono::milliseconds timeout, const std::atomic<bool>* abort,
              const std::function<void(const Reader&)>& use) {
  Segment& seg = *g.seg;
  Waiter w(seg, g.localRank, std::chrono::steady_clock::now() + timeout, abort, timeout);
  w.enter();
  const uint64_t s = ++g.step;
  if (s > 2 && g.peersDone < s - 2) w.all(&RankCtl::done, s - 2);
  post(g, s, head, headBytes, body, bodyBytes);
  finish(g, s, timeout, abort, use);
}

uint64_t tryPost(HostGroup& g, const void* head, size_t headBytes, const void* body, size_t bodyBytes) {
  Segment& seg = *g.seg;
  const uint64_t s = g.step + 1;
  if (seg.poisoned() || (s > 2 && g.peersDone < s - 2 && !allReached(seg, g.localRank, &RankCtl::done, s - 2))) {
    return 0;
  }
  g.step = s;
  post(g, s, head, headBytes, body, bodyBytes);
  return s;
}

bool arrivedWithin(const HostGroup& g, uint64_t step, std::chrono::nanoseconds spin, const std::atomic<bool>* abort,
                   bool yield) {
  const Segment& seg = *g.seg;
  // The clock is read from the 32nd poll on, every 32 polls (a poll is a few loads of
  // shared lines, a clock read about as long as 20): peers that are already in, or in
  // within those polls, cost no clock read at all. The bound counts from that first read.
  std::chrono::steady_clock::time_point until{};
  for (unsigned i = 1;; ++i) {
    if (allPosted(seg, g.localRank, step)) return true;
    if ((i & 31) == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (i == 32) until = now + spin;
      if (now >= until || seg.poisoned() || (abort && abort->load())) return false;
    }
    if (yield) {
      sched_yield();
    } else {
      cpuRelax();
    }
  }
}

void finish(HostGroup& g, uint64_t step, std::chrono::milliseconds timeout, const std::atomic<bool>* abort,
            const std::function<void(const Reader&)>& use) {
  Segment& seg = *g.seg;
  const int b = static_cast<int>(step & 1);
  RankCtl& mine = seg.ctl(g.localRank);
  // After arrivedWithin() every rank is in: no deadline (a clock read) to set up. The
  // posted counters the Waiter watches are written after the flags.
  if (!allPosted(seg, g.localRank, step)) {
    Waiter w(seg, g.localRank, std::chrono::steady_clock::now() + timeout, abort, timeout);
    w.all(&RankCtl::posted, step);
  }
  g.peersDone = std::max(g.peersDone, step - 1);
  try {
    use([&](int r) -> const uint8_t* { return seg.slot(r, b) + kRoundFlagBytes; });
  } catch (...) {
    publish(mine, &RankCtl::done, step);
    throw;
  }
  publish(mine, &RankCtl::done, step);
}

void allGather(HostGroup& g, const void* in, void* out, size_t count, size_t width, std::chrono::milliseconds timeout,
               const std::atomic<bool>* abort) {
  Segment& seg = *g.seg;
  const int L = g.locals;
  const int me = g.localRank;
  Waiter w(seg, me, std::chrono::steady_clock::now() + timeout, abort, timeout);
  w.enter();
  RankCtl& mine = seg.ctl(me);
  const size_t chunkElems = std::max<size_t>(1, g.chunkBytes / width);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  stats().allGathers++;
  stats().bytes += count * width * L;
  for (size_t off = 0; off < count; off += chunkElems) {
    const size_t n = std::min(chunkElems, count - off);
    const uint64_t s = ++g.step;
    const int b = static_cast<int>(s & 1);
    if (s > 2) w.all(&RankCtl::done, s - 2);
    clearFlag(seg.slot(me, b));
    copyBytes(seg.slot(me, b), src + off * width, n * width);
    publish(mine, &RankCtl::posted, s);
    // Copy each peer's part as soon as it is there, not after the slowest.
    for (int k = 0; k < L; ++k) {
      const int j = (me + k) % L;
      if (j != me) w.one(j, &RankCtl::posted, s);
      copyBytes(dst + (static_cast<size_t>(j) * count + off) * width, seg.slot(j, b), n * width);
    }
    publish(mine, &RankCtl::done, s);
  }
}

namespace {
// `rounds` synchronisations of the host's ranks through the two slots: in each,
// fill(slot, k) writes this rank's message of round k into its slot, and once every
// rank's is in, take(b, k) reads them (slot b of every rank). What reduce-scatter and
// all-to-all share: each rank's message is its piece of every rank's block.
template <typename Fill, typename Take>
void pieceRounds(HostGroup& g, std::chrono::milliseconds timeout, const std::atomic<bool>* abort, size_t rounds,
                 Fill fill, Take take) {
  Segment& seg = *g.seg;
  Waiter w(seg, g.localRank, std::chrono::steady_clock::now() + timeout, abort, timeout);
  w.enter();
  RankCtl& mine = seg.ctl(g.localRank);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t s = ++g.step;
    const int b = static_cast<int>(s & 1);
    if (s > 2) w.all(&RankCtl::done, s - 2);
    clearFlag(seg.slot(g.localRank, b));
    fill(seg.slot(g.localRank, b), k);
    publish(mine, &RankCtl::posted, s);
    w.all(&RankCtl::posted, s);
    take(b, k);
    publish(mine, &RankCtl::done, s);
  }
}
}  // namespace

void reduceScatter(HostGroup& g, const void* in, void* out, size_t count, DType dtype, RedOp op,
                   std::chrono::milliseconds timeout, const std::atomic<bool>* abort) {
  Segment& seg = *g.seg;
  const int L = g.locals;
  const int me = g.localRank;
  const size_t width = elementSize(dtype);
  // A slot holds this rank's piece of every rank's block for one step.
  const size_t chunkElems = std::max<size_t>(1, g.chunkBytes / width / L);
  const ReduceFn fn = reduceFunction(dtype, op);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  stats().reduceScatters++;
  stats().bytes += count * width * L;
  auto piece = [&](size_t k) { return std::min(chunkElems, count - k * chunkElems); };
  pieceRounds(
      g, timeout, abort, (count + chunkElems - 1) / chunkElems,
      [&](uint8_t* slot, size_t k) {
        const size_t off = k * chunkElems, n = piece(k);
        for (int d = 0; d < L; ++d) {
          copyBytes(slot + static_cast<size_t>(d) * n * width, src + (static_cast<size_t>(d) * count + off) * width,
                      n * width);
        }
      },
      [&](int b, size_t k) {
        // The output may alias this rank's input: everything it needs of it is staged.
        const size_t n = piece(k);
        const size_t at = static_cast<size_t>(me) * n * width;
        uint8_t* o = dst + k * chunkElems * width;
        if (L == 1) {
          copyBytes(o, seg.slot(0, b) + at, n * width);
        } else {
          fn(o, seg.slot(0, b) + at, seg.slot(1, b) + at, n);
          for (int j = 2; j < L; ++j) fn(o, o, seg.slot(j, b) + at, n);
        }
      });
}

void allToAll(HostGroup& g, const void* in, const Blocks& sent, void* out, const Blocks& received, size_t longest,
              std::chrono::milliseconds timeout, const std::atomic<bool>* abort) {
  Segment& seg = *g.seg;
  const int L = g.locals;
  const int me = g.localRank;
  // Each peer's piece at a fixed place in the slot, whatever the blocks' lengths.
  const size_t piece = std::max<size_t>(64, g.chunkBytes / static_cast<size_t>(L) / 64 * 64);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // Bytes [k * piece, ...) of a block of len bytes in round k.
  auto cut = [&](size_t len, size_t k) { return len > k * piece ? std::min(piece, len - k * piece) : 0; };
  stats().allToAlls++;
  for (int j = 0; j < L; ++j) stats().bytes += received.len[j];
  pieceRounds(
      g, timeout, abort, (longest + piece - 1) / piece,
      [&](uint8_t* slot, size_t k) {
        for (int d = 0; d < L; ++d) {
          const size_t n = d == me ? 0 : cut(sent.len[d], k);
          if (n) copyBytes(slot + static_cast<size_t>(d) * piece, src + sent.at[d] + k * piece, n);
        }
      },
      [&](int b, size_t k) {
        for (int j = 0; j < L; ++j) {
          const size_t n = j == me ? 0 : cut(received.len[j], k);
          if (n) copyBytes(dst + received.at[j] + k * piece, seg.slot(j, b) + static_cast<size_t>(me) * piece, n);
        }
      });
  // This rank's own block last: the rounds write only the others' blocks, so in place
  // (the same layout) it is still where the input had it.
  copyBytes(dst + received.at[me], src + sent.at[me], received.len[me]);
}

}  // namespace shm
}  // namespace ncclnode

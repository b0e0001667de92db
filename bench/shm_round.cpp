// The shared-memory round a small blocking all-reduce makes (native/shm/shm_collectives.h:
// tryPost, arrivedWithin, finish; the fingerprint as the head, the data as the body,
// every rank's body reduced in rank order as GlooBackend::shmRead does), called from C++
// with no addon, no N-API and no JavaScript: the floor under allReduceSync() in
// bench/shm/allreduce.ts, beside Open MPI's shared memory. float32 sum, back to back.
//
//   shm_round <ranks> <iters> <min bytes> <max bytes>
//
// Forks ranks - 1 children on one segment; sizes double from min up to max (at most the
// 32 KiB the calling thread's round carries); rank 0 prints one JSON line per size:
// {"size":..,"us":..}, the median per call.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../native/core/agreement.h"
#include "../native/core/dtype.h"
#include "../native/shm/shm_collectives.h"

using namespace ncclnode;

namespace {

constexpr size_t kHead = sizeof(Fingerprint);  // the round's head, as the addon sends it
constexpr size_t kMaxBody = 32 * 1024;

double roundUs(shm::HostGroup& g, const std::vector<float>& in, std::vector<float>& out, int iters) {
  using Clock = std::chrono::steady_clock;
  const ReduceFn sum = reduceFunction(DType::Float32, RedOp::Sum);
  uint8_t head[kHead] = {};
  const size_t bytes = in.size() * sizeof(float);
  std::vector<double> us(static_cast<size_t>(iters));
  auto t0 = Clock::now();
  for (int i = -iters / 10; i < iters; ++i) {
    uint64_t step = 0;
    const auto giveUp = Clock::now() + std::chrono::seconds(30);
    while ((step = shm::tryPost(g, head, kHead, in.data(), bytes)) == 0) {
      shm::cpuRelax();
      if (Clock::now() > giveUp) {
        std::fprintf(stderr, "shm_round: rank %d: the round's slot never came free (a rank gone?)\n", g.localRank);
        std::exit(1);
      }
    }
    shm::arrivedWithin(g, step, std::chrono::milliseconds(1), nullptr);
    shm::finish(g, step, std::chrono::seconds(30), nullptr, [&](const shm::Reader& from) {
      std::memcpy(out.data(), from(0) + kHead, bytes);
      for (int r = 1; r < g.locals; ++r) sum(out.data(), out.data(), from(r) + kHead, in.size());
    });
    // From the end of the call before (one clock read a call, as bench/direct_common.h).
    const auto t1 = Clock::now();
    if (i >= 0) us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    t0 = t1;
  }
  std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
  return us[static_cast<size_t>(iters / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: shm_round <ranks> <iters> <min bytes> <max bytes>\n");
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  const int iters = std::max(10, std::atoi(argv[2]));
  const size_t minBytes = std::max<size_t>(4, std::strtoull(argv[3], nullptr, 10));
  const size_t maxBytes = std::min<size_t>(kMaxBody, std::strtoull(argv[4], nullptr, 10));
  const std::string name = "/nccl-node-shm-round-" + std::to_string(getpid());
  const uint64_t nonce = static_cast<uint64_t>(getpid()) * 2654435761u;
  auto created = shm::Segment::create(name, ranks, kHead + kMaxBody, nonce);
  int me = 0;
  std::vector<pid_t> children;
  for (int r = 1; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      me = r;
      // A rank whose parent is gone would wait for it forever: it goes too.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1) return 1;
      break;
    }
    children.push_back(pid);
  }
  shm::HostGroup g;
  g.localRank = me;
  g.locals = ranks;
  // As the addon's slots: whole cache lines, the round's flag word in front.
  g.chunkBytes = (shm::kRoundFlagBytes + kHead + kMaxBody + 63) / 64 * 64;
  if (me == 0) {
    g.seg = std::move(created);
  } else {
    (void)created.release();  // the creator's mapping in this child: left mapped, never unlinked here
    g.seg = shm::Segment::attach(name, ranks, me, nonce);
  }
  g.seg->attached();
  // Two passes over the sizes, the first unreported: a cold first pass (page faults,
  // caches, the clock's speed) runs several times slower at every size.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
      std::vector<float> in(bytes / sizeof(float), static_cast<float>(me + 1)), out(in.size());
      const double us = roundUs(g, in, out, iters);
      if (out[0] != static_cast<float>(ranks * (ranks + 1) / 2)) {
        std::fprintf(stderr, "shm_round: rank %d got %g at %zu bytes\n", me, out[0], bytes);
        return 1;
      }
      if (me == 0 && pass == 1) std::printf("{\"size\":%zu,\"us\":%.3f}\n", bytes, us);
    }
  }
  if (me != 0) return 0;
  int failed = 0;
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}

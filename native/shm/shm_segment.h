// A POSIX shared-memory segment shared by the ranks of one communicator on one
// host: a header, one control block per local rank (sequence counters), two
// staging slots per rank and two result slots, each slot one chunk. Names come
// from the job (token and store address) and the communicator's store prefix, so
// two jobs never meet in one segment. The segment is unlinked as soon as every
// local rank has mapped it: a job killed later leaves nothing in /dev/shm.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../core/errors.h"

namespace ncclnode {
namespace shm {

// A pause in a spin-wait loop: eases the sibling hyper-thread and the memory bus.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One cache line per rank, so a rank's stores never bounce another rank's line.
// The counters are written only through publish().
struct alignas(64) RankCtl {
  std::atomic<uint64_t> posted{0};   // step whose input this rank has staged
  std::atomic<uint64_t> reduced{0};  // step whose slice of the result this rank has written
  std::atomic<uint64_t> done{0};     // step whose result this rank has copied out
  std::atomic<uint64_t> bcast{0};    // leader only: step whose inter-host result is in place
  // Per counter above, in their order: ranks asleep on it (a futex wait on its low half,
  // Waiter::one). Written only by a rank about to sleep or just woken, so this rank's read
  // after each store hits its own line.
  std::atomic<uint32_t> sleepers[4]{};
};

// The sleepers of one of a rank's counters.
inline std::atomic<uint32_t>& sleepersOf(RankCtl& ctl, std::atomic<uint64_t> RankCtl::*field) {
  const auto at = reinterpret_cast<const char*>(&(ctl.*field)) - reinterpret_cast<const char*>(&ctl);
  return ctl.sleepers[at / sizeof(std::atomic<uint64_t>)];
}

// A rank's counter := value, waking any rank asleep on it. The store is ordered before
// the read of `sleepers` (by a fence, or by the sleeper's membarrier: shm_segment.cpp),
// as a sleeper's increment is before its last look at the counter: either this rank sees
// the sleeper and wakes it, or the sleeper sees the value and does not sleep (and a wake
// that comes before its futex call finds the counter changed, so that call returns at once).
void publish(RankCtl& ctl, std::atomic<uint64_t> RankCtl::*field, uint64_t value);

// This process's futex naps and wakes (for introspection and tests).
struct WaitStats {
  std::atomic<uint64_t> naps{0};       // futex waits entered (Waiter::one)
  std::atomic<uint64_t> napsWoken{0};  // of which ended by a wake (a peer's publish() or poison())
  std::atomic<uint64_t> wakes{0};      // publish() calls that found a sleeper and woke it
};
WaitStats& waitStats();

struct alignas(64) Header {
  uint64_t magic;
  uint64_t nonce;  // drawn by the creator, published through the store: a stale segment never matches
  uint32_t locals;
  uint32_t reserved;
  uint64_t chunkBytes;
  uint64_t totalBytes;
  std::atomic<uint32_t> attached;  // ranks that have mapped the segment (the last one unlinks it)
  std::atomic<uint32_t> unlinked;
  std::atomic<int32_t> poison;     // 0, or 1 + the error code of the rank that failed an operation
};

class Segment {
 public:
  // The creator (lowest local rank): a segment left with the same name by a killed
  // job is unlinked and replaced. Throws Error(Unavailable) when the system refuses
  // (no /dev/shm, not enough space: the space is reserved here, never on first touch).
  static std::unique_ptr<Segment> create(const std::string& name, int locals, size_t chunkBytes, uint64_t nonce);
  // Another local rank: maps the segment the creator announced and checks it is that one.
  static std::unique_ptr<Segment> attach(const std::string& name, int locals, int me, uint64_t nonce);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Counts this rank as mapped; the last of the local ranks unlinks the name.
  void attached();
  // Whether local rank r still holds its segment open (an open-file-description lock
  // per rank, released by the kernel when the process dies, whatever its pid namespace).
  bool alive(int r) const;
  // Wakes every local rank's waits with an error (a rank failed or aborted).
  void poison(Code code);
  int poisoned() const { return hdr_->poison.load(std::memory_order_acquire); }

  size_t chunk() const { return hdr_->chunkBytes; }
  uint64_t nonce() const { return hdr_->nonce; }
  int locals() const { return static_cast<int>(hdr_->locals); }
  RankCtl& ctl(int r) const { return ctl_[r]; }
  uint8_t* slot(int r, int buf) const { return data_ + (static_cast<size_t>(r) * 2 + buf) * hdr_->chunkBytes; }
  uint8_t* result(int buf) const { return data_ + (static_cast<size_t>(hdr_->locals) * 2 + buf) * hdr_->chunkBytes; }
  const std::string& name() const { return name_; }

  static size_t bytesFor(int locals, size_t chunkBytes);

 private:
  Segment(std::string name, int fd, void* base, size_t bytes, int me);
  void lockOwn();

  std::string name_;
  int fd_;
  void* base_;
  size_t bytes_;
  int me_;
  Header* hdr_;
  RankCtl* ctl_;
  uint8_t* data_;
};

// Waits on the peers' counters of one segment: a short spin, then yields, then a
// futex wait the peer's publish() ends (bounded, so the checks below still run). Every wait ends at the operation's deadline, on the
// communicator's abort flag, on a poisoned segment, or when a peer has died.
class Waiter {
 public:
  Waiter(Segment& seg, int me, std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort,
         std::chrono::milliseconds timeout)
      : seg_(seg), me_(me), deadline_(deadline), abort_(abort), timeout_(timeout) {}
  // At the start of an operation: fails at once on a segment a rank has marked failed
  // (no operation can complete without every rank), as a call on closed TCP pairs does.
  void enter() const;
  // Until every other local rank's counter `field` has reached `value`.
  void all(std::atomic<uint64_t> RankCtl::*field, uint64_t value);
  // Until local rank r's counter has.
  void one(int r, std::atomic<uint64_t> RankCtl::*field, uint64_t value);

 private:
  Segment& seg_;
  int me_;
  std::chrono::steady_clock::time_point deadline_;
  const std::atomic<bool>* abort_;
  std::chrono::milliseconds timeout_;
};

}  // namespace shm
}  // namespace ncclnode

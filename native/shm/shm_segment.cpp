#include "shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>
#include <thread>

namespace ncclnode {
namespace shm {

namespace {

constexpr uint64_t kMagic = 0x6e63636c73686d32ull;  // "ncclshm2": RankCtl has its sleepers

std::string sysError(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// The futex word of a counter: its low 32 bits, which change with every new step (a
// wait never spans 2^32 steps). Shared (not FUTEX_PRIVATE): the ranks are processes.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a counter's futex word is its low half");
static_assert(offsetof(RankCtl, posted) == 0 && offsetof(RankCtl, reduced) == 8 && offsetof(RankCtl, done) == 16 &&
                  offsetof(RankCtl, bcast) == 24 && sizeof(RankCtl) == 64,
              "sleepersOf() indexes the counters by offset; a rank's control stays one line");
uint32_t* futexWord(std::atomic<uint64_t>& counter) { return reinterpret_cast<uint32_t*>(&counter); }

void futexWake(std::atomic<uint64_t>& counter) {
  syscall(SYS_futex, futexWord(counter), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// The store-then-load order publish() needs, split unevenly between the two sides: a
// fence after every counter store would wait for the store to leave the core, and the
// counter's line is in the peer's cache (it polls it), so the fence waited for a
// cross-core transfer on every call (17 % of an awaited 8-byte all-reduce's samples at
// 2 ranks, perf). Instead a process registers for membarrier(GLOBAL_EXPEDITED) once,
// its stores go without the fence, and a rank about to sleep runs the barrier on every
// registered process's running threads (Linux >= 4.16, about 1.5 us here), once per
// nap (a nap lasts up to a millisecond). A process the kernel refuses keeps the fence.
std::atomic<bool> gLightPublish{false};

// Once per process: a registration belongs to the process's memory, and a child forked
// after it (bench/shm_round.cpp forks its ranks) starts with this flag set but may not be
// registered itself, so the pid that registered is remembered with it.
void registerLightPublish() {
  static std::atomic<pid_t> registered{0};
  const pid_t me = getpid();
  if (registered.load(std::memory_order_relaxed) == me) return;
  const bool ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  gLightPublish.store(ok, std::memory_order_relaxed);
  registered.store(me, std::memory_order_relaxed);
}

// What a rank about to sleep runs after counting itself among the sleepers: false
// when the kernel refused it, and a registered process's store may then go unseen by
// this rank's last look and unwoken (its naps are kept short).
bool heavyBarrier() { return syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0; }

size_t headerBytes(int locals) { return sizeof(Header) + static_cast<size_t>(locals) * sizeof(RankCtl); }

}  // namespace

size_t Segment::bytesFor(int locals, size_t chunkBytes) {
  const size_t head = (headerBytes(locals) + 4095) / 4096 * 4096;
  return head + (static_cast<size_t>(locals) * 2 + 2) * chunkBytes;
}

Segment::Segment(std::string name, int fd, void* base, size_t bytes, int me)
    : name_(std::move(name)), fd_(fd), base_(base), bytes_(bytes), me_(me) {
  hdr_ = static_cast<Header*>(base_);
  ctl_ = reinterpret_cast<RankCtl*>(static_cast<uint8_t*>(base_) + sizeof(Header));
  const size_t head = (headerBytes(static_cast<int>(hdr_->locals)) + 4095) / 4096 * 4096;
  data_ = static_cast<uint8_t*>(base_) + head;
}

Segment::~Segment() {
  // A rank that never attached (it died while connecting) leaves the name behind;
  // the creator removes it on the way out.
  if (me_ == 0 && hdr_->unlinked.exchange(1) == 0) shm_unlink(name_.c_str());
  munmap(base_, bytes_);
  close(fd_);
}

std::unique_ptr<Segment> Segment::create(const std::string& name, int locals, size_t chunkBytes, uint64_t nonce) {
  const size_t bytes = bytesFor(locals, chunkBytes);
  // Pages are reserved up front: a huge chunk setting must not take the host's memory.
  constexpr size_t kMaxBytes = size_t{1} << 30;
  if (bytes > kMaxBytes) {
    std::ostringstream s;
    s << "a segment of " << bytes << " bytes (" << locals << " ranks x 2 + 2 chunks of " << chunkBytes
      << ") exceeds the 1 GiB limit; lower NCCL_NODE_SHM_CHUNK";
    throw Error(Code::Unavailable, s.str());
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Only a job with this token, store address and communicator could have made
    // it, and this one is being made now: it is a dead job's leftover.
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) throw Error(Code::Unavailable, sysError("shm_open " + name, errno));
  int rc = ftruncate(fd, static_cast<off_t>(bytes));
  if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  else rc = errno;
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    std::ostringstream s;
    s << "reserving " << bytes << " bytes of shared memory for " << name;
    throw Error(Code::Unavailable, sysError(s.str(), rc));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw Error(Code::Unavailable, sysError("mmap " + name, err));
  }
  auto* h = new (base) Header();
  h->magic = kMagic;
  h->nonce = nonce;
  h->locals = static_cast<uint32_t>(locals);
  h->chunkBytes = chunkBytes;
  h->totalBytes = bytes;
  h->attached.store(0);
  h->unlinked.store(0);
  h->poison.store(0);
  auto* ctl = reinterpret_cast<RankCtl*>(static_cast<uint8_t*>(base) + sizeof(Header));
  for (int r = 0; r < locals; ++r) new (&ctl[r]) RankCtl();
  std::unique_ptr<Segment> seg(new Segment(name, fd, base, bytes, 0));
  seg->lockOwn();
  registerLightPublish();
  return seg;
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, int locals, int me, uint64_t nonce) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw Error(Code::Unavailable, sysError("shm_open " + name, errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Header))) {
    close(fd);
    throw Error(Code::Unavailable, "shared-memory segment " + name + " is not the one announced (size)");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throw Error(Code::Unavailable, sysError("mmap " + name, err));
  }
  auto* h = static_cast<Header*>(base);
  if (h->magic != kMagic || h->nonce != nonce || h->locals != static_cast<uint32_t>(locals) ||
      h->totalBytes != bytes) {
    munmap(base, bytes);
    close(fd);
    throw Error(Code::Unavailable, "shared-memory segment " + name + " is not the one announced (header)");
  }
  std::unique_ptr<Segment> seg(new Segment(name, fd, base, bytes, me));
  seg->lockOwn();
  registerLightPublish();
  return seg;
}

void Segment::lockOwn() {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = me_;
  fl.l_len = 1;
  if (fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    throw Error(Code::Unavailable, sysError("locking shared-memory segment " + name_, errno));
  }
}

void Segment::attached() {
  if (hdr_->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == hdr_->locals &&
      hdr_->unlinked.exchange(1) == 0) {
    shm_unlink(name_.c_str());
  }
}

bool Segment::alive(int r) const {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = r;
  fl.l_len = 1;
  if (fcntl(fd_, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: rely on the deadline
  return fl.l_type != F_UNLCK;
}

WaitStats& waitStats() {
  static WaitStats s;
  return s;
}

void publish(RankCtl& ctl, std::atomic<uint64_t> RankCtl::*field, uint64_t value) {
  (ctl.*field).store(value, std::memory_order_release);
  if (gLightPublish.load(std::memory_order_relaxed)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the sleeper's heavyBarrier() does the rest
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  if (sleepersOf(ctl, field).load(std::memory_order_relaxed) != 0) {
    futexWake(ctl.*field);
    waitStats().wakes.fetch_add(1, std::memory_order_relaxed);
  }
}

void Segment::poison(Code code) {
  int32_t expected = 0;
  hdr_->poison.compare_exchange_strong(expected, static_cast<int32_t>(code) + 1, std::memory_order_acq_rel);
  // Whoever sleeps on any counter wakes to the mark now, not at its wait's bound.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r = 0; r < locals(); ++r) {
    RankCtl& c = ctl_[r];
    for (auto field : {&RankCtl::posted, &RankCtl::reduced, &RankCtl::done, &RankCtl::bcast}) {
      if (sleepersOf(c, field).load(std::memory_order_relaxed) != 0) futexWake(c.*field);
    }
  }
}

namespace {
// A rank that timed out poisons the segment with Timeout: the others fail with the
// same code (a hang, as on the TCP path, not a lost peer) instead of waiting for their
// own deadlines; any other mark means a rank failed or aborted.
// The deadline is named as the timing-out rank's own message names it: every rank's
// call has the same one.
[[noreturn]] void failPoisoned(int p, std::chrono::milliseconds timeout) {
  const Code cause = static_cast<Code>(p - 1);
  if (cause == Code::Timeout) {
    std::ostringstream s;
    s << "timed out after " << timeout.count()
      << " ms: another rank on this host reached that deadline in this operation (a rank never reached it)";
    throw Error(Code::Timeout, s.str());
  }
  throw Error(Code::PeerLost, std::string("a rank on this host failed or aborted its part of the operation (") +
                                  codeName(cause) + ")");
}
}  // namespace

void Waiter::enter() const {
  if (int p = seg_.poisoned()) failPoisoned(p, timeout_);
}

// A counter that has reached its value is always taken, on a poisoned segment too:
// the rank that marked it may have done so after its own part of this operation was
// complete (it returned, then aborted), and over TCP the data it had delivered is
// still received. Only a wait that would need more from the ranks fails on the mark.
void Waiter::one(int r, std::atomic<uint64_t> RankCtl::*field, uint64_t value) {
  RankCtl& peer = seg_.ctl(r);
  std::atomic<uint64_t>& c = peer.*field;
  if (c.load(std::memory_order_acquire) >= value) return;
  if (int p = seg_.poisoned()) failPoisoned(p, timeout_);
  using clock = std::chrono::steady_clock;
  auto lastCheck = clock::now();
  for (unsigned spins = 0;; ++spins) {
    if (c.load(std::memory_order_acquire) >= value) return;
    if (spins < 128) {
      cpuRelax();
      continue;
    }
    // More ranks than cores is common (the tests, a laptop): give the core away,
    // briefly: a rank that keeps yielding still takes its share of a busy core
    // from the ranks it waits for.
    if (spins < 128 + 256) {
      sched_yield();
      if ((spins & 63) != 0) continue;
    } else {
      // Asleep until the peer publishes this counter (or marks the segment), at most a
      // nap: the checks below (an abort flag nobody marked the segment for, a dead
      // peer, the deadline) run between naps. The peer wakes it as soon as the value
      // lands, where sleeps of growing length (up to 500 us) used to notice it up to a
      // sleep late. Without the barrier (a kernel that refuses it) a registered peer's
      // store could go unseen and unwoken: naps are then kept to 50 us.
      std::atomic<uint32_t>& sleepers = sleepersOf(peer, field);
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const long napNs = heavyBarrier() ? 1000000 : 50000;
      const uint64_t seen = c.load(std::memory_order_seq_cst);
      if (seen < value && !seg_.poisoned()) {
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - clock::now()).count();
        const long nap = static_cast<long>(std::max<long long>(1000, std::min<long long>(left, napNs)));
        struct timespec ts {0, nap};
        waitStats().naps.fetch_add(1, std::memory_order_relaxed);
        if (syscall(SYS_futex, futexWord(c), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0) == 0) {
          waitStats().napsWoken.fetch_add(1, std::memory_order_relaxed);
        }
      }
      sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
    // The counter first: it may have arrived during the sleep, just before a mark.
    if (c.load(std::memory_order_acquire) >= value) return;
    if (abort_ && abort_->load()) throw Error(Code::CommAborted, "communicator was aborted");
    if (int p = seg_.poisoned()) failPoisoned(p, timeout_);
    const auto now = clock::now();
    if (now - lastCheck > std::chrono::milliseconds(5)) {
      lastCheck = now;
      if (!seg_.alive(r)) {
        seg_.poison(Code::PeerLost);
        throw Error(Code::PeerLost, "local rank " + std::to_string(r) +
                                        " closed its shared-memory segment or died");
      }
    }
    if (now > deadline_) {
      seg_.poison(Code::Timeout);
      std::ostringstream s;
      s << "timed out after " << timeout_.count() << " ms waiting for local rank " << r << " in shared memory";
      throw Error(Code::Timeout, s.str());
    }
  }
}

void Waiter::all(std::atomic<uint64_t> RankCtl::*field, uint64_t value) {
  for (int r = 0; r < seg_.locals(); ++r) {
    if (r != me_) one(r, field, value);
  }
}

}  // namespace shm
}  // namespace ncclnode

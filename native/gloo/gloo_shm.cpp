// The shared-memory path of the Gloo backend (docs/gloo.md, "Shared memory within
// a host"): which ranks share a host, the segment per host, and the all-reduce that
// goes through it instead of TCP on loopback.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "../core/copy_bytes.h"
#include "gloo_backend.h"

namespace ncclnode {

namespace {

std::string readLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string nsInode(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 ? std::to_string(st.st_ino) : "?";
}

// Ranks may share memory when they run under one kernel (boot id), see one
// /dev/shm (mount namespace) and, so that network-namespace "nodes" on one machine
// stay separate hosts as the network sees them, one network namespace.
std::string hostIdentity() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return std::string(name) + "|" + readLine("/proc/sys/kernel/random/boot_id") + "|net:" +
         nsInode("/proc/self/ns/net") + "|mnt:" + nsInode("/proc/self/ns/mnt");
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// On unless NCCL_NODE_SHM is 0 (or false, off); 1, true, on or unset: on. Every rank of
// a job has the same environment, so all take the same branch.
bool shmEnabled() {
  const char* v = std::getenv("NCCL_NODE_SHM");
  if (v == nullptr) return true;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 || std::strcmp(v, "off") == 0);
}

size_t chunkBytes() {
  const char* v = std::getenv("NCCL_NODE_SHM_CHUNK");
  long long n = v ? std::atoll(v) : 0;
  if (n <= 0) n = 512 * 1024;
  n = std::max<long long>(n, 256);
  return static_cast<size_t>((n + 63) / 64 * 64);
}

// How long a small call polls for the host's other ranks on the calling thread before
// handing the wait to the worker: NCCL_NODE_SHM_CALLER_SPIN_US (default 1000, 0: never).
// A hand-off costs two thread wake-ups (the worker's, then the event loop's when the call
// settles): 70-110 us for a peer late by milliseconds (bench/shm/late-peer.ts; the worker
// naps until the peer's store wakes it, shm_segment.cpp), while a 50 us bound handed off
// 0.4-1.3 % of back-to-back calls that then took 31-50 % of the time (bench/README.md,
// "Shared memory within a host").
std::chrono::nanoseconds callerSpin(int locals) {
  const char* v = std::getenv("NCCL_NODE_SHM_CALLER_SPIN_US");
  const long long us = v ? std::max(0LL, std::atoll(v)) : 1000;
  if (locals < 2) return std::chrono::nanoseconds(0);
  return std::chrono::microseconds(us);
}

// When the host's ranks outnumber its cores the rank polled for may be waiting for this
// very core: the poll then yields it between looks (sched_yield) instead of holding it.
// It used to be off there, every call going through the worker: 4 ranks on 2 cores,
// awaited 8-byte all-reduces took 30-51 µs that way and 7-16 yielding (bench/README.md).
bool callerYields(int locals) {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores != 0 && static_cast<unsigned>(locals) > cores;
}

// The largest all-reduce the agreement round carries: every rank then reduces all of
// it from every rank's slot (locals x bytes read), in one synchronisation instead of
// the chunked path's three. 512 KiB read per rank: 256 KiB at 2 ranks, 128 KiB at 4
// (bench/README.md, "Shared memory within a host").
size_t shmRoundBytes(int locals) {
  return std::max<size_t>(32 * 1024, (512 * 1024) / static_cast<size_t>(std::max(locals, 1)));
}

void logFallbackOnce(const std::string& why) {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    std::fprintf(stderr, "nccl-node: shared-memory path off, collectives between ranks of a host use TCP (%s)\n",
                 why.c_str());
  }
}

}  // namespace

// Every rank's host identity, from the store: which ranks share a host decides the TCP
// connections' layout (oneWayConnections()) and the shared-memory segments (setupShm()).
void GlooBackend::learnHosts(std::chrono::milliseconds timeout) {
  const std::string base = cfg_.prefix + "host/";
  const std::string mine = hostIdentity();
  store_->set(base + std::to_string(cfg_.rank), std::vector<char>(mine.begin(), mine.end()));
  hostIds_.assign(static_cast<size_t>(cfg_.size), std::string());
  for (int r = 0; r < cfg_.size; ++r) {
    auto v = store_->get(base + std::to_string(r), timeout);
    hostIds_[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
  }
  oneHost_ = std::all_of(hostIds_.begin(), hostIds_.end(), [&](const std::string& id) { return id == hostIds_[0]; });
  const auto here = static_cast<unsigned>(std::count(hostIds_.begin(), hostIds_.end(), hostIds_[static_cast<size_t>(cfg_.rank)]));
  const unsigned cores = std::thread::hardware_concurrency();
  oversubscribed_ = cores != 0 && here > cores;
}

// One TCP connection each way with a peer (when the peer asks too) unless this host runs
// more of the group's ranks than it has cores: there a pair's two connections cost a
// bare acknowledgement per message, which the single connection carries on the reply's
// data, and on 4 ranks over 2 cores small calls took 1.08x the time
// (bench/README.md, "One connection each way"). NCCL_NODE_TCP_CONNECTIONS_PER_PAIR
// decides instead when set.
bool GlooBackend::oneWayConnections() const {
  if (pairConnections_ != 0) return pairConnections_ == 2;
  return !oversubscribed_;
}

// Collective over the group, after the TCP mesh is up. Every rank takes the same
// branch: the host map comes from the store, and the segments' fate from one
// all-gather of a status byte.
void GlooBackend::setupShm(std::chrono::milliseconds timeout) {
  if (cfg_.size < 2 || !shmEnabled()) return;
  const std::string base = cfg_.prefix + "shm/";
  const std::vector<std::string>& ids = hostIds_;  // learnHosts(), from connectTcp()
  std::map<std::string, int> hostIndex;  // by first rank: host 0 holds rank 0
  std::vector<int> hostOf(cfg_.size);
  for (int r = 0; r < cfg_.size; ++r) {
    auto it = hostIndex.emplace(ids[r], static_cast<int>(hostIndex.size())).first;
    hostOf[r] = it->second;
  }
  const int hosts = static_cast<int>(hostIndex.size());
  if (hosts == cfg_.size) return;  // one rank per host: nothing to share
  std::vector<int> local;          // this host's ranks, in rank order
  for (int r = 0; r < cfg_.size; ++r) {
    if (hostOf[r] == hostOf[cfg_.rank]) local.push_back(r);
  }
  auto group = std::make_unique<shm::HostGroup>();
  group->localRank = static_cast<int>(std::find(local.begin(), local.end(), cfg_.rank) - local.begin());
  group->locals = static_cast<int>(local.size());
  group->hosts = hosts;
  group->chunkBytes = chunkBytes();

  uint8_t ok = 1;
  std::string why;
  if (group->locals > 1) {
    const std::string key = base + "seg/" + std::to_string(hostOf[cfg_.rank]);
    if (group->localRank == 0) {
      const std::string name = "/nccl-node-" + hex(fnv1a(cfg_.token + "\n" + cfg_.storeHost + ":" +
                                                         std::to_string(cfg_.storePort))) +
                               "-" + hex(fnv1a(cfg_.prefix)) + "-h" + std::to_string(hostOf[cfg_.rank]);
      std::random_device rd;
      // The top bit set: a round's flag (step ^ nonce) then never looks like a chunk of
      // fewer than 8 bytes over a cleared flag word (shm_collectives.cpp, clearFlag()).
      const uint64_t nonce =
          ((static_cast<uint64_t>(rd()) << 32 | rd()) ^ static_cast<uint64_t>(getpid())) | (uint64_t{1} << 63);
      std::string announce;
      try {
        group->seg = shm::Segment::create(name, group->locals, group->chunkBytes, nonce);
        group->seg->attached();
        announce = "ok " + hex(nonce) + " " + name;
      } catch (const Error& e) {
        ok = 0;
        why = e.what();
        announce = "fail " + why;
      }
      store_->set(key, std::vector<char>(announce.begin(), announce.end()));
    } else {
      auto v = store_->get(key, timeout);
      std::istringstream in(std::string(v.begin(), v.end()));
      std::string status, nonceHex, name;
      in >> status >> nonceHex >> name;
      if (status != "ok") {
        ok = 0;
        why = "the host's first rank could not create the segment";
      } else {
        try {
          group->seg = shm::Segment::attach(name, group->locals, group->localRank,
                                            std::strtoull(nonceHex.c_str(), nullptr, 16));
          group->seg->attached();
        } catch (const Error& e) {
          ok = 0;
          why = e.what();
        }
      }
    }
  }
  std::vector<uint8_t> all(cfg_.size);
  allGatherBytes(&ok, 1, all.data(), timeout);
  if (std::find(all.begin(), all.end(), 0) != all.end()) {
    shm::stats().fallbacks++;
    logFallbackOnce(why.empty() ? "a segment could not be set up on another rank's host" : why);
    return;  // the segment, if any, is unmapped (and its name removed) here
  }
  if (group->seg) {
    shm::stats().segments++;
    std::lock_guard<std::mutex> lock(shm::stats().mu);
    shm::stats().lastSegment = group->seg->name();
  }
  // The hosts' leaders combine their partial results over the backend's own
  // connections (native/net/), a ring of one rank per host.
  if (hosts > 1 && group->localRank == 0) openTcp(hostOf[cfg_.rank], hosts, base + "leaders/tcp/", &leaders_, timeout);
  caller_.set(callerSpin(group->locals));  // over TCP between hosts, connect() sets its own
  callerYield_ = callerYields(group->locals);
  std::lock_guard<std::mutex> lock(ctxMu_);  // abort() may run on another thread
  shm_ = std::move(group);
  shmCarryLimit_ = std::min(shmRoundCap(), shmRoundBytes(shm_->locals));
}

// A forced Gloo algorithm keeps its TCP path so that it can be measured; small
// all-reduces have finished in the agreement round by now.
bool GlooBackend::usesShm(const Op& op) const {
  return shm_ && op.kind == OpKind::AllReduce && forcedAllReduce_ == AllReduceAlgo::Auto && op.count > 0;
}

void GlooBackend::shmAllReduce(Op& op) {
  shmAllReduceInto(op, op.send.data, op.recv.data);
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
}

void GlooBackend::shmAllReduceInto(const Op& op, const void* in, void* out, int root) {
  shm::InterHost inter = [&](void* data, size_t count, std::chrono::milliseconds left) {
    net::ringAllReduce(*leaders_, data, data, count, op.dtype, op.redop, net::Clock::now() + left, ring_);
  };
  try {
    shm::allReduce(*shm_, in, out, op.count, op.dtype, op.redop, op.timeout, &aborted_, inter, root);
  } catch (...) {
    shmFailed();
    throw;
  }
}

// The other ranks of this host wake on the poisoned segment, the other hosts'
// leaders on their closed connections: nobody waits for the deadline.
void GlooBackend::shmFailed() {
  broken_ = true;
  if (shm_->seg) shm_->seg->poison(Code::PeerLost);
  std::lock_guard<std::mutex> lock(ctxMu_);
  if (leaders_) leaders_->abort();
}

// The agreement round through the segment on a single host, carrying small
// all-reduces as the TCP mesh round does (gloo_agreement.cpp), reduced in rank order.
// `carries`: shmCarries(op), which the caller has already asked.
GlooBackend::ShmMessage GlooBackend::shmMessage(const Op& op, bool carries) const {
  ShmMessage m;
  m.head = fingerprintOf(op);
  if (op.rejected) {
    m.rejected = true;
    m.why = op.rejectReason.substr(0, shmRoundCap() - 1);
    m.bodyBytes = m.why.size() + 1;
  } else if (carries) {
    // A broadcast's or a scatter's data is the root's alone; a scatter's root posts every block.
    const bool rootOnly = op.kind == OpKind::Broadcast || op.kind == OpKind::Scatter;
    if (!rootOnly || cfg_.rank == op.root) {
      m.data = op.send.data;
      m.bodyBytes = shmPostedBytes(op);
    }
  }
  return m;
}

// What a rank that posts its input puts in its slot: a scatter's and a reduce-scatter's
// input holds a block for every rank.
size_t GlooBackend::shmPostedBytes(const Op& op) const {
  const bool blocks = op.kind == OpKind::Scatter || op.kind == OpKind::ReduceScatter;
  return op.count * elementSize(op.dtype) * (blocks ? static_cast<size_t>(cfg_.size) : 1);
}

// An all-reduce whose data rides in the round, an all-gather or a reduce-scatter (each
// rank posts its input; an all-gather copies every rank's, a reduce-scatter reduces block
// `rank` of every rank's), an all-to-all of equal blocks (each rank posts its whole input
// and takes its own block from every peer's slot), or a rooted collective
// (gloo_rooted.cpp): a broadcast's root posts its buffer, a scatter's root its whole
// input, a reduce's and a gather's ranks their inputs, for the root to combine.
bool GlooBackend::shmCarries(const Op& op) const {
  if (op.rejected || op.count == 0) return false;
  if (shmPostedBytes(op) > shmCarryLimit_) return false;
  switch (op.kind) {
    case OpKind::AllReduce:
      return forcedAllReduce_ == AllReduceAlgo::Auto;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
      return shmSingleHost();
    case OpKind::AllToAll:
      return op.sendCounts.empty() && shmSingleHost();
    case OpKind::Broadcast:
    case OpKind::Reduce:
    case OpKind::Gather:
    case OpKind::Scatter:
      return shmSingleHost();
    default:
      return false;
  }
}

// A small all-reduce's whole message shares its flag's cache line (shm_collectives.cpp):
// with the 48-byte fingerprint this had, 16-32 B took a second line and 0.87-0.90 of the
// time per call went with it (bench/README.md).
static_assert(shm::kRoundFlagBytes + sizeof(Fingerprint) + 32 <= 64, "flag, fingerprint and 32 B in one line");

// What a slot holds beside the fingerprint.
size_t GlooBackend::shmRoundCap() const { return shm_->chunkBytes - shm::kRoundFlagBytes - sizeof(Fingerprint); }

// Every rank's message is in: the verdict, then a small all-reduce's result (`carries`:
// shmCarries(op)).
void GlooBackend::shmRead(const Op& op, const shm::Reader& from, bool mineInMemory, bool carries) {
  const size_t cap = shmRoundCap();
  // On the stack for the usual few ranks of a host: this runs once per call.
  Fingerprint few[8];
  std::vector<Fingerprint> many;
  Fingerprint* all = few;
  if (cfg_.size > 8) {
    many.resize(static_cast<size_t>(cfg_.size));
    all = many.data();
  }
  // On the calling thread this rank's own parts come from its own memory, not from its
  // slot: the slot's line was just written, and a read of it waits for that write to
  // take the line back from the peer that read it two rounds ago (perf: most of this
  // function's time). Elsewhere JavaScript may have run since the post (and changed an
  // input it should not have): every rank then reduces the posted copies, so that all
  // still get the same bits.
  const Fingerprint mine = fingerprintOf(op);
  for (int r = 0; r < cfg_.size; ++r) {
    if (r == cfg_.rank && mineInMemory) all[r] = mine;
    else std::memcpy(&all[r], from(r), sizeof(Fingerprint));
  }
  // Unless all match (and this rank's own is no refusal), checkAgreement names the disagreement.
  if (op.rejected || !allMatch(mine, all, cfg_.size)) {
    checkAgreement(op, all, cfg_.size, cfg_.rank, checking(), [&](int r) {
      const char* text = reinterpret_cast<const char*>(from(r)) + sizeof(Fingerprint);
      return std::string(text, strnlen(text, cap));
    });
  }
  if (!carries) return;
  switch (op.kind) {
    case OpKind::AllToAll: {
      const size_t block = op.count / static_cast<size_t>(cfg_.size) * elementSize(op.dtype);
      shmReadBlocks(op, from, mineInMemory, block, static_cast<size_t>(cfg_.rank) * block);
      glooAlgoStats().shmAllToAlls++;
      return;
    }
    case OpKind::AllGather:
      shmReadBlocks(op, from, mineInMemory, op.count * elementSize(op.dtype), 0);
      shm::stats().allGathers++;
      shm::stats().bytes += op.count * elementSize(op.dtype) * static_cast<size_t>(cfg_.size);
      return;
    case OpKind::AllReduce:
      shmReadReduced(op, from, mineInMemory);
      shm::stats().allReduces++;
      shm::stats().bytes += op.count * elementSize(op.dtype);
      return;
    case OpKind::ReduceScatter:
      shmReadReduced(op, from, mineInMemory);
      shm::stats().reduceScatters++;
      shm::stats().bytes += shmPostedBytes(op);
      return;
    default:
      shmReadRooted(op, from, mineInMemory);
      return;
  }
}

// op.recv := every rank's posted input reduced in rank order (a small all-reduce, or a
// small reduce on its root); for a reduce-scatter, block `rank` of every rank's input.
void GlooBackend::shmReadReduced(const Op& op, const shm::Reader& from, bool mineInMemory) {
  const size_t bytes = op.count * elementSize(op.dtype);
  const size_t at = sizeof(Fingerprint) + (op.kind == OpKind::ReduceScatter ? static_cast<size_t>(cfg_.rank) * bytes : 0);
  const ReduceFn fn = reduceFunction(op.dtype, op.redop);
  auto* out = static_cast<uint8_t*>(op.recv.data);
  const auto* mine = static_cast<const uint8_t*>(op.send.data) + (at - sizeof(Fingerprint));
  auto part = [&](int r) { return r == cfg_.rank ? mine : from(r) + at; };
  // In rank order, x0 op x1 op ..., on every rank alike. This rank's input is read from
  // its own memory unless the output overwrites it before its turn: in place on a rank
  // after the second, or input and output overlapping otherwise.
  const bool apart = out + bytes <= mine || mine + bytes <= out;
  if (mineInMemory && (apart || cfg_.rank == 0)) {
    if (out != part(0)) copyBytes(out, part(0), bytes);
    for (int r = 1; r < cfg_.size; ++r) fn(out, out, part(r), op.count);
  } else if (mineInMemory && out == mine && cfg_.rank == 1) {
    fn(out, part(0), out, op.count);  // element by element: each input read before its output is written
    for (int r = 2; r < cfg_.size; ++r) fn(out, out, part(r), op.count);
  } else {
    copyBytes(out, from(0) + at, bytes);
    for (int r = 1; r < cfg_.size; ++r) fn(out, out, from(r) + at, op.count);
  }
  if (op.redop == RedOp::Avg) divideInPlace(out, op.dtype, op.count, cfg_.size);
}

// Block r of op.recv := `block` bytes at `at` in rank r's posted input (placeBlocks):
// an all-gather's whole input (at 0), an all-to-all's block `rank` of it. Off the
// calling thread this rank's own block comes from its posted copy, as an all-reduce's does.
void GlooBackend::shmReadBlocks(const Op& op, const shm::Reader& from, bool mineInMemory, size_t block, size_t at) {
  auto* out = static_cast<uint8_t*>(op.recv.data);
  const uint8_t* own = mineInMemory ? static_cast<const uint8_t*>(op.send.data) : from(cfg_.rank) + sizeof(Fingerprint);
  placeBlocks(out, own + at, cfg_.rank, cfg_.size, block, [&](int r) { return from(r) + sizeof(Fingerprint) + at; });
}

// Completes the round op's message went out in (step), or, with step 0, posts it and
// completes it. A verdict (a mismatched or refused call) leaves the group usable; a
// lost or silent peer does not.
// True when the round completed the call: a barrier, or a call whose data rides in it.
bool GlooBackend::shmFinish(const Op& op, uint64_t step, bool mineInMemory) {
  // One pointer captured: std::function keeps it without allocating (this runs per call).
  struct Round {
    GlooBackend* self;
    const Op& op;
    bool verdict;
    bool mineInMemory;
    bool carries;
  } round{this, op, false, mineInMemory, shmCarries(op)};
  auto use = [r = &round](const shm::Reader& from) {
    r->verdict = true;  // every message arrived: what follows is the same on every rank
    r->self->shmRead(r->op, from, r->mineInMemory, r->carries);
  };
  try {
    if (step != 0) {
      shm::finish(*shm_, step, op.timeout, &aborted_, use);
    } else {
      const ShmMessage m = shmMessage(op, round.carries);
      shm::exchange(*shm_, &m.head, sizeof m.head, m.body(), m.bodyBytes, op.timeout, &aborted_, use);
    }
  } catch (...) {
    if (!round.verdict) shmFailed();
    throw;
  }
  return op.kind == OpKind::Barrier || round.carries;
}

bool GlooBackend::shmAgree(const Op& op) {
  uint64_t step = 0;
  if (shmPosted_ != 0) {
    step = shmPosted_;
    shmPosted_ = 0;
  }
  return shmFinish(op, step);
}

// From prepost() on the calling thread: a call the round completes goes into the
// segment now, when its slot is free, so that finishOnCaller() can complete it there.
// Up to 32 KiB a rank's block (an all-reduce's buffer, a reduce-scatter's output) only:
// beyond, reducing every rank's copy on this thread takes long enough that a peer falls
// behind into its own hand-offs, and each rank's spinning JS thread then holds the core a
// peer's worker needs (measured 3x slower than the worker alone at 64-128 KiB on 2 ranks
// of 2 cores; bench/README.md).
bool GlooBackend::shmPrepost(Op& op) {
  constexpr size_t kCallerBytes = 32 * 1024;
  if (op.rejected || shmPosted_ != 0 || op.count * elementSize(op.dtype) > kCallerBytes) return false;
  const bool carries = shmCarries(op);
  if (!carries && op.kind != OpKind::Barrier) return false;  // the round does not complete it
  const ShmMessage m = shmMessage(op, carries);
  shmPosted_ = shm::tryPost(*shm_, &m.head, sizeof m.head, m.body(), m.bodyBytes);
  if (shmPosted_ == 0) return false;
  op.preposted = true;
  return true;
}

// A small collective between ranks of one host is over in microseconds once every
// rank has posted: poll for them for a bounded time on this (the JS) thread, and if
// they are in, complete the call here instead of waking the worker and settling
// through it (two thread hand-offs, each 5-30 us on a busy host).
// The bound adapts: a poll that found the others in restores it, one that gave up
// quarters it (to a single look at the counters), so a rank whose peers arrive late
// (compute between calls, more ranks than free cores) stops paying for the poll.
// (Doubling it back instead of restoring it was measured too: after a stall both
// ranks' bounds shrank together and stayed short for hundreds of calls, each handed
// off; 0.971-0.9997 of calls on the caller against 0.9995-0.9998.)
bool GlooBackend::finishOnCaller(Op& op) {
  if (!shmSingleHost()) return finishTcpOnCaller(op);
  if (shmPosted_ == 0 || !op.preposted || caller_.full.count() == 0) return false;
  if (!shm::arrivedWithin(*shm_, shmPosted_, caller_.now, &aborted_, callerYield_)) {
    caller_.missed();
    return false;
  }
  caller_.met();
  shm::stats().onCaller++;
  const uint64_t step = shmPosted_;
  shmPosted_ = 0;
  try {
    shmFinish(op, step, true);
  } catch (const Error& e) {
    op.fail(e.code(), e.what());
  } catch (const std::exception& e) {
    op.fail(Code::Backend, e.what());
  }
  return true;
}

void GlooBackend::shmAbort() {
  std::lock_guard<std::mutex> lock(ctxMu_);
  if (shm_ && shm_->seg) shm_->seg->poison(Code::CommAborted);
  if (leaders_) leaders_->abort(!quitting_);
}

void GlooBackend::shmAllGather(Op& op) {
  try {
    shm::allGather(*shm_, op.send.data, op.recv.data, op.count, elementSize(op.dtype), op.timeout, &aborted_);
  } catch (...) {
    shmFailed();
    throw;
  }
}

void GlooBackend::shmReduceScatter(Op& op) {
  try {
    shm::reduceScatter(*shm_, op.send.data, op.recv.data, op.count, op.dtype, op.redop, op.timeout, &aborted_);
  } catch (...) {
    shmFailed();
    throw;
  }
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
}

}  // namespace ncclnode

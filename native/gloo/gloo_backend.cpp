#include "gloo_backend.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "../core/copy_bytes.h"
#include "gloo_store.h"

namespace ncclnode {

namespace {

// Gloo's typed setters only use sizeof(T); pick an unsigned type of the element's
// width and keep the real dtype for the reduction function.
template <class F>
void withWidth(size_t width, F&& f) {
  switch (width) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

// NCCL_NODE_TCP_CONNECTIONS_PER_PAIR: 1 or 2; unset: 0 (chosen per host).
int parsePairConnections(const char* v) {
  if (v == nullptr) return 0;
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "2") == 0) return *v - '0';
  throw Error(Code::InvalidArgument, std::string("NCCL_NODE_TCP_CONNECTIONS_PER_PAIR must be 1 or 2, got \"") + v + "\"");
}

// NCCL_NODE_TCP_BROADCAST: chain (false) or tree (true); unset: none (tcpBroadcastTree()'s rule).
std::optional<bool> parseBroadcastTree(const char* v) {
  if (v == nullptr) return std::nullopt;
  if (std::strcmp(v, "chain") == 0) return false;
  if (std::strcmp(v, "tree") == 0) return true;
  throw Error(Code::InvalidArgument, std::string("NCCL_NODE_TCP_BROADCAST must be chain or tree, got \"") + v + "\"");
}

// NCCL_NODE_TCP_BOUNCE: 1 or 0; unset: on where this CPU's copies stall 1-31 bytes past
// their source's place in a page (aliasingStalls(), copy_bytes.h), as the kernel's copy into
// a destination near a page's start then does (net::aliasedLanding).
bool parseBounce(const char* v) {
  if (v == nullptr) return aliasingStalls();
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "0") == 0) return *v == '1';
  throw Error(Code::InvalidArgument, std::string("NCCL_NODE_TCP_BOUNCE must be 1 or 0, got \"") + v + "\"");
}

// NCCL_NODE_TCP_RCVLOWAT and NCCL_NODE_TCP_RCVBUF: a byte count, 0 (none: the kernel's
// default) to 64 MiB; unset: `def`.
size_t parseByteCount(const char* name, const char* v, size_t def) {
  if (v == nullptr) return def;
  constexpr unsigned long long kMax = 64ull << 20;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = *v >= '0' && *v <= '9' ? std::strtoull(v, &end, 10) : 0;
  if (end == nullptr || *end != '\0' || errno != 0 || n > kMax) {
    throw Error(Code::InvalidArgument, std::string(name) + " must be a byte count from 0 (the kernel's default) to " +
                                           std::to_string(kMax) + ", got \"" + v + "\"");
  }
  return static_cast<size_t>(n);
}

}  // namespace

GlooBackend::GlooBackend(GlooConfig config, std::shared_ptr<StoreClient> store)
    : cfg_(std::move(config)), store_(std::move(store)) {
  // A bad value fails connect(), where errors reach the caller of init().
  const char* forced = std::getenv("NCCL_NODE_GLOO_ALLREDUCE");
  try {
    forcedAllReduce_ = parseAllReduceAlgo(forced ? forced : "");
  } catch (const Error& e) {
    forcedError_ = e.what();
  }
  const char* land = std::getenv("NCCL_NODE_TCP_LAND");
  landing_ = !(land && std::strcmp(land, "0") == 0);
  try {
    wakeMark_ = parseByteCount("NCCL_NODE_TCP_RCVLOWAT", std::getenv("NCCL_NODE_TCP_RCVLOWAT"), net::TcpMesh::kDefaultWakeMark);
    localRcvBuf_ = static_cast<int>(parseByteCount("NCCL_NODE_TCP_RCVBUF", std::getenv("NCCL_NODE_TCP_RCVBUF"),
                                                   net::TcpMesh::kDefaultLocalReceiveBuffer));
    pairConnections_ = parsePairConnections(std::getenv("NCCL_NODE_TCP_CONNECTIONS_PER_PAIR"));
    bounce_ = parseBounce(std::getenv("NCCL_NODE_TCP_BOUNCE"));
    forcedBroadcastTree_ = parseBroadcastTree(std::getenv("NCCL_NODE_TCP_BROADCAST"));
    if (!copyBackwardEnvError().empty()) throw Error(Code::InvalidArgument, copyBackwardEnvError());
  } catch (const Error& e) {
    tcpEnvError_ = e.what();
  }
  try {
    tuning_ = GlooTuning(cfg_.tuning);
  } catch (const Error& e) {
    tuningError_ = e.what();
  }
}

GlooBackend::~GlooBackend() = default;

std::string GlooBackend::version() const {
  std::ostringstream s;
  s << "gloo " << GLOO_VERSION_MAJOR << "." << GLOO_VERSION_MINOR << "." << GLOO_VERSION_PATCH;
  return s.str();
}

void GlooBackend::connect(std::chrono::milliseconds timeout) {
  gloo::transport::tcp::attr attr;
  if (!cfg_.iface.empty()) {
    attr.iface = cfg_.iface;
  } else {
    attr.hostname = cfg_.hostname.empty() ? "127.0.0.1" : cfg_.hostname;
  }
  try {
    if (!forcedError_.empty()) throw Error(Code::InvalidArgument, forcedError_);
    if (!tuningError_.empty()) throw Error(Code::InvalidArgument, tuningError_);
    if (!tcpEnvError_.empty()) throw Error(Code::InvalidArgument, tcpEnvError_);
    if (!store_) {
      store_ = std::make_shared<StoreClient>(cfg_.storeHost, cfg_.storePort, cfg_.token,
                                             "rank " + std::to_string(cfg_.rank), timeout);
    }
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(cfg_.rank, cfg_.size);
    ctx->setTimeout(timeout);
    GlooStore store(store_, cfg_.prefix, timeout);
    ctx->connectFullMesh(store, device_);
    connectTcp(timeout);
    {
      std::lock_guard<std::mutex> lock(ctxMu_);
      if (aborted_) throw Error(Code::CommAborted, "communicator was aborted while connecting");
      mesh_ = tcp_ ? std::make_unique<MeshExchange>(tcp_.get()) : std::make_unique<MeshExchange>(ctx);
      ctx_ = ctx;
    }
    checkTuning(timeout);
    setupShm(timeout);
    // The round's slots (up to 4 MiB a rank) are touched now rather than in a first call,
    // and not at all where every call takes shared memory.
    if (!shmSingleHost()) {
      mesh_->prepare();
      caller_.set(tcpCallerWait());
    }
  } catch (const Error&) {
    broken_ = true;
    throw;
  } catch (const std::exception& e) {
    broken_ = true;
    throw Error(Code::Backend, std::string("gloo could not connect the group: ") + e.what());
  }
}

// The backend's own connections: every rank listens on the address Gloo uses, publishes
// it in the store and dials the lower ranks. A connection must present a secret derived
// from the job token and this communicator's store prefix, so another job or another
// communicator never lands on it.
void GlooBackend::connectTcp(std::chrono::milliseconds timeout) {
  if (cfg_.size < 2) return;
  learnHosts(timeout);
  openTcp(cfg_.rank, cfg_.size, cfg_.prefix + "tcp/", &tcp_, timeout);
  ring_.prepare();
}

// The mesh goes into *slot (under the lock abort() takes) before it connects, so an
// abort() meanwhile wakes the connecting thread.
void GlooBackend::openTcp(int rank, int size, const std::string& keyPrefix, std::unique_ptr<net::TcpMesh>* slot,
                          std::chrono::milliseconds timeout) {
  uint64_t secret = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char c : cfg_.token + "\n" + keyPrefix + "\n" + cfg_.storeHost + ":" + std::to_string(cfg_.storePort)) {
    secret = (secret ^ c) * 0x100000001b3ull;
  }
  net::TcpMesh* tcp = nullptr;
  {
    std::lock_guard<std::mutex> lock(ctxMu_);
    if (aborted_) throw Error(Code::CommAborted, "communicator was aborted while connecting");
    *slot = std::make_unique<net::TcpMesh>(rank, size, secret);
    tcp = slot->get();
    tcp->setWakeMark(wakeMark_);
    tcp->setLocalReceiveBuffer(localRcvBuf_);
    tcp->setOneWay(oneWayConnections());
    tcp->setBounce(bounce_);
  }
  net::Rendezvous rv;
  rv.set = [this](const std::string& k, const std::string& v) { store_->set(k, std::vector<char>(v.begin(), v.end())); };
  rv.get = [this](const std::string& k, std::chrono::milliseconds t) {
    const auto v = store_->get(k, t);
    return std::string(v.begin(), v.end());
  };
  const std::string host = cfg_.iface.empty() && cfg_.hostname.empty() ? "127.0.0.1" : cfg_.hostname;
  tcp->connect(host, cfg_.iface, rv, keyPrefix, timeout);
}

net::Clock::time_point GlooBackend::deadlineOf(const Op& op) const { return net::Clock::now() + op.timeout; }

// A legacy Gloo class returns once its own part is done, its last send possibly
// still queued in Gloo's transport: a rank that closed its connections right then
// would drop that message, and the peer waiting for it would fail with ERR_PEER_LOST.
// So a communicator that ran one meets every peer in one more mesh round before it
// closes: a peer enters that round only after its own last call completed, which
// needed every message sent to it, and the round's own sends are waited for. Bounded:
// a peer that destroys much later (or never) costs at most kFinishWait.
void GlooBackend::finish() {
  static constexpr std::chrono::milliseconds kFinishWait{10000};
  if (!(legacy_.ran() || legacyColl_.ran()) || !mesh_ || broken_) return;
  const uint8_t bye = 1;
  mesh_->run(&bye, 1, nullptr, 0, kFinishWait);
}

void GlooBackend::quit() {
  quitting_ = true;
  abort();
}

void GlooBackend::abort() {
  aborted_ = true;
  broken_ = true;
  std::shared_ptr<gloo::Context> ctx;
  {
    std::lock_guard<std::mutex> lock(ctxMu_);
    ctx = ctx_;
  }
  shmAbort();
  {
    std::lock_guard<std::mutex> lock(ctxMu_);
    // Announced only with a round of this rank's in flight: peers that complete that round
    // from its message must fail it as this rank does. After a completed round they keep
    // their result and see the closed connections at their next call.
    if (tcp_) tcp_->abort(!quitting_ && mesh_ && mesh_->inFlight());
  }
  if (!ctx) return;
  // Closing every pair makes the peers see their connections drop. Closing alone does
  // not wake a thread of ours waiting on a pair whose peer is alive but silent (stopped,
  // hung): only an exception signalled on the pair fails its pending operations. Gloo's
  // TCP pair signals one when asked to switch a closed pair to sync mode ("Socket
  // unexpectedly closed"), through the public interface; a pair that failed already
  // just rethrows its exception.
  for (int r = 0; r < cfg_.size; ++r) {
    if (r == cfg_.rank) continue;
    try {
      auto& pair = ctx->getPair(r);
      if (!pair) continue;
      pair->close();
      pair->setSync(true, false);
    } catch (...) {
    }
  }
}

void GlooBackend::rethrow(const Op& op, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const net::TransportError& ex) {
    // The backend's own connections are out of step after any failure on them.
    broken_ = true;
    if (aborted_ || ex.code() == Code::CommAborted) throw Error(Code::CommAborted, "communicator was aborted");
    if (ex.code() == Code::Timeout) {
      std::ostringstream s;
      s << "timed out after " << op.timeout.count() << " ms waiting for " << ex.what();
      throw Error(Code::Timeout, s.str());
    }
    throw Error(ex.code(), ex.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    std::string what = ex.what();
    broken_ = true;
    if (aborted_) throw Error(Code::CommAborted, "communicator was aborted: " + what);
    if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
      std::ostringstream s;
      s << "timed out after " << op.timeout.count() << " ms waiting for peers (" << what << ")";
      throw Error(Code::Timeout, s.str());
    }
    if (dynamic_cast<const gloo::IoException*>(&ex) != nullptr) {
      throw Error(Code::PeerLost, "a peer closed its connection or died (" + what + ")");
    }
    throw Error(Code::Backend, "gloo: " + what);
  }
}

void GlooBackend::allGatherBytes(const void* in, size_t bytes, void* out, std::chrono::milliseconds timeout) {
  gloo::AllgatherOptions o(ctx_);
  o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
  o.setOutput(static_cast<uint8_t*>(out), bytes * cfg_.size);
  o.setTimeout(timeout);
  gloo::allgather(o);
}

void GlooBackend::run(Op& op) {
  if (!ctx_) throw Error(Code::CommAborted, "communicator is not connected");
  if (op.send.mem == MemKind::Device || op.recv.mem == MemKind::Device) {
    throw Error(Code::InvalidArgument,
                "the gloo backend works on host memory, received a DeviceBuffer; use a communicator made with "
                "init({backend: 'nccl'}) or copy the data to the host first");
  }
  try {
    if (op.kind != OpKind::Send && op.kind != OpKind::Recv && agree(op)) return;
    if (op.rejected) {
      // A collective's agreement round has already failed every rank; point-to-point
      // tells the one peer in its handshake.
      if (op.kind == OpKind::Send) send(op);
      if (op.kind == OpKind::Recv) recv(op);
      throw Error(op.rejectCode, op.rejectReason);
    }
    // Per-peer counts: a rank that sends nothing may still receive, so it always runs.
    if (op.count == 0 && op.kind != OpKind::Barrier && op.kind != OpKind::Send && op.kind != OpKind::Recv &&
        op.sendCounts.empty()) {
      return;
    }
    const size_t width = elementSize(op.dtype);
    const bool inPlace = op.send.data == op.recv.data;
    if (cfg_.size == 1 && op.kind != OpKind::Send && op.kind != OpKind::Recv) {
      // One rank: every collective's result is its input (an average divides by one), so
      // a copy or nothing; Gloo's one-rank paths build options, buffers and a reduction
      // per call to the same end. Counts were checked against both buffers (CommWrap).
      if (!inPlace && op.kind != OpKind::Barrier) copyBytes(op.recv.data, op.send.data, op.count * width);
      return;
    }
    switch (op.kind) {
      case OpKind::AllReduce:
        if (usesShm(op)) {
          shmAllReduce(op);
          break;
        }
        allReduce(op);
        break;
      case OpKind::Broadcast:
        broadcast(op);
        break;
      case OpKind::Reduce:
        reduce(op);
        break;
      case OpKind::AllGather:
        if (shmSingleHost()) {
          shmAllGather(op);
          break;
        }
        allGather(op);
        break;
      case OpKind::ReduceScatter:
        if (shmSingleHost()) {
          shmReduceScatter(op);
          break;
        }
        reduceScatter(op);
        break;
      case OpKind::AllToAll:
        if (!op.sendCounts.empty()) {
          allToAllV(op);
          break;
        }
        allToAll(op);
        break;
      case OpKind::Gather:
        gather(op);
        break;
      case OpKind::Scatter:
        scatter(op);
        break;
      case OpKind::Send:
        send(op);
        break;
      case OpKind::Recv:
        recv(op);
        break;
      case OpKind::Barrier: {
        gloo::BarrierOptions o(ctx_);
        o.setTimeout(op.timeout);
        gloo::barrier(o);
        break;
      }
      case OpKind::Split:
        throw Error(Code::InvalidArgument, "split is not a data operation");
    }
  } catch (...) {
    rethrow(op, std::current_exception());
  }
}

void GlooBackend::allReduce(Op& op) {
  const size_t width = elementSize(op.dtype);
  AllReduceAlgo algo = pickAllReduce(tuning_, forcedAllReduce_, op.count, op.dtype, op.redop, cfg_.size, meshBytes());
  if (algo == AllReduceAlgo::TcpRing && !tcp_) algo = AllReduceAlgo::Ring;  // one rank: nothing to connect
  if (algo == AllReduceAlgo::TcpRing) {
    net::ringAllReduce(*tcp_, op.send.data, op.recv.data, op.count, op.dtype, op.redop, deadlineOf(op), ring_);
    glooAlgoStats().tcpRingCalls++;
  } else if (isLegacy(algo)) {
    // The legacy classes reduce in place with the context's timeout (set at connect).
    if (op.send.data != op.recv.data) copyBytes(op.recv.data, op.send.data, op.count * width);
    legacy_.run(ctx_, algo, op.dtype, op.recv.data, op.count);
    glooAlgoStats().legacyAllReduces++;
  } else {
    withWidth(width, [&](auto t) {
      using T = decltype(t);
      gloo::AllreduceOptions o(ctx_);
      // Unset, Gloo picks its ring: the default path stays exactly what it was.
      if (algo == AllReduceAlgo::Bcube) o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      if (op.send.data != op.recv.data) o.setInput(static_cast<T*>(op.send.data), op.count);
      o.setOutput(static_cast<T*>(op.recv.data), op.count);
      o.setReduceFunction(reduceFunction(op.dtype, op.redop));
      o.setTimeout(op.timeout);
      gloo::allreduce(o);
    });
  }
  if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
}

// Reduce-scatter beyond the agreement round: Gloo's legacy class or the own ring when
// the table picks them (the ring by default), else an all-to-all of the chunks followed
// by a local reduction in rank order (the same bytes on the wire as a ring, and a
// reduction order independent of the transport and the ring's position).
void GlooBackend::reduceScatter(Op& op) {
  if (legacyReduceScatter(op)) return;
  if (tcp_ && pickReduceScatter(tuning_, op.count, op.dtype, op.redop, cfg_.size, meshBytes()) ==
                  ReduceScatterAlgo::TcpRing) {
    net::ringReduceScatter(*tcp_, op.send.data, op.recv.data, op.count, op.dtype, op.redop, deadlineOf(op), ring_);
    if (op.redop == RedOp::Avg) divideInPlace(op.recv.data, op.dtype, op.count, cfg_.size);
    glooAlgoStats().tcpRingCalls++;
    return;
  }
  const size_t width = elementSize(op.dtype);
  const size_t chunk = op.count * width;
  scratch_.resize(chunk * cfg_.size);
  withWidth(width, [&](auto t) {
    using T = decltype(t);
    gloo::AlltoallOptions o(ctx_);
    o.setInput(static_cast<T*>(op.send.data), op.count * cfg_.size);
    o.setOutput(reinterpret_cast<T*>(scratch_.data()), op.count * cfg_.size);
    o.setTimeout(op.timeout);
    gloo::alltoall(o);
  });
  ReduceFn fn = reduceFunction(op.dtype, op.redop);
  // Accumulate in scratch chunk 0 so an in-place output never aliases an input.
  for (int r = 1; r < cfg_.size; ++r) fn(scratch_.data(), scratch_.data(), scratch_.data() + r * chunk, op.count);
  if (op.redop == RedOp::Avg) divideInPlace(scratch_.data(), op.dtype, op.count, cfg_.size);
  copyBytes(op.recv.data, scratch_.data(), chunk);
}

std::unique_ptr<Backend> GlooBackend::split(int color, int key, std::chrono::milliseconds timeout) {
  Op probe;
  probe.kind = OpKind::Split;
  probe.timeout = timeout;
  const int id = splits_++;
  std::vector<int32_t> all(2 * cfg_.size);
  try {
    agree(probe);
    int32_t mine[2] = {color, key};
    allGatherBytes(mine, sizeof mine, all.data(), timeout);
  } catch (...) {
    rethrow(probe, std::current_exception());
  }
  if (color < 0) return nullptr;
  std::vector<std::pair<int32_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < cfg_.size; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  GlooConfig child = cfg_;
  child.size = static_cast<int>(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == cfg_.rank) child.rank = static_cast<int>(i);
  }
  child.prefix = cfg_.prefix + "split" + std::to_string(id) + "/c" + std::to_string(color) + "/";
  auto backend = std::make_unique<GlooBackend>(child, store_);
  backend->connect(timeout);
  return backend;
}

}  // namespace ncclnode

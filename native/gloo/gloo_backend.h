// CPU backend on Gloo's TCP transport. One gloo context per communicator; calls run
// one at a time on the communicator's worker thread. Beside Gloo's pairs the backend
// keeps its own TCP connections (native/net/), which carry the agreement round, the
// ring all-reduce, all-gather and reduce-scatter, all-to-all, and broadcast, reduce,
// gather and scatter (docs/gloo.md).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../core/agreement.h"
#include "../core/backend.h"
#include "../core/store_client.h"
#include "gloo_algorithms.h"
#include "gloo_collective_algos.h"
#include "gloo_tuning.h"
#include "mesh_exchange.h"
#include "../net/tcp_mesh.h"
#include "../net/tcp_ring.h"
#include "../shm/shm_collectives.h"

namespace gloo {
class Context;
namespace transport { class Device; }
}  // namespace gloo

namespace ncclnode {

struct GlooConfig {
  int rank = 0;
  int size = 1;
  std::string prefix;    // store key prefix unique to this communicator
  std::string hostname;  // address peers use to reach this rank
  std::string iface;     // or a network interface name
  bool checkAgreement = true;
  // The job's store; the client connects on the worker thread, never on the JS
  // thread, because rank 0 may host the store in this very process.
  std::string storeHost;
  int storePort = 0;
  std::string token;
  // The algorithm table (gloo_tuning.h): canonical text from NCCL_NODE_GLOO_TUNING, "" built in.
  std::string tuning;
};

class GlooBackend : public Backend {
 public:
  GlooBackend(GlooConfig config, std::shared_ptr<StoreClient> store);
  ~GlooBackend() override;

  const char* name() const override { return "gloo"; }
  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  std::string version() const override;

  void connect(std::chrono::milliseconds timeout) override;
  void run(Op& op) override;
  std::unique_ptr<Backend> split(int color, int key, std::chrono::milliseconds timeout) override;
  void abort() override;
  void quit() override;
  void finish() override;
  bool broken() const override { return broken_.load(); }
  bool concurrent(const Op& op) const override { return op.kind == OpKind::Send || op.kind == OpKind::Recv; }
  bool blocking() const override { return true; }
  bool sharesRejections() const override { return true; }
  bool prepost(Op& op) override;
  bool finishOnCaller(Op& op) override;
  bool finishTcpOnCaller(Op& op);
  static std::chrono::nanoseconds tcpCallerWait();

 private:
  bool agree(const Op& op);
  void checkRound(const Op& op);
  bool checking() const;  // checkCollectives on a group of more than one rank: compare every field
  bool usesMesh(const Op& op) const;
  void postMesh(const Op& op);
  // What the mesh round carries besides the fingerprint, and what of a call's data goes
  // there (bytes 0: the data moves afterwards, gloo_tuning.h chose another path).
  struct MeshBody {
    bool carried = false;     // the round completes the call (every rank alike)
    size_t bytes = 0;         // this rank's to each peer (the most, with a stride)
    size_t stride = 0;        // > 0: peer p gets its own block, from p * stride
    size_t end = SIZE_MAX;    // ... cut at this many bytes of the buffer
    bool twoRounds = false;   // an all-reduce whose blocks come back in a second round
    int to = -1;              // >= 0: the body goes to this rank alone (a reduce's or a gather's root)
  };
  size_t meshBytes() const;
  MeshBody meshBody(const Op& op) const;
  size_t meshReceives(const Op& op, const MeshBody& body) const;
  bool pickBroadcastRound(size_t bytes) const;
  void landBodies(const Op& op);
  void expectRooted(const Op& op);
  bool lands(size_t block) const;
  void finishMesh(const Op& op, const MeshBody& body);
  void finishTwoRounds(const Op& op);
  void postSecondRound(const Op& op);
  void finishSecondRound(const Op& op);
  void finishMeshRooted(const Op& op);  // gloo_rooted.cpp
  void allGatherBytes(const void* in, size_t bytes, void* out, std::chrono::milliseconds timeout);
  void allReduce(Op& op);
  void connectTcp(std::chrono::milliseconds timeout);
  // Own connections among `size` members: this rank is `rank` there; keys under keyPrefix.
  void openTcp(int rank, int size, const std::string& keyPrefix, std::unique_ptr<net::TcpMesh>* slot,
               std::chrono::milliseconds timeout);
  net::Clock::time_point deadlineOf(const Op& op) const;
  void allGather(Op& op);  // gloo_collective_algos.cpp
  void reduceScatter(Op& op);
  bool legacyReduceScatter(Op& op);  // gloo_collective_algos.cpp; false: not chosen for this call
  void checkTuning(std::chrono::milliseconds timeout);  // every rank's table hashes alike
  // gloo_alltoall.cpp: over the own connections (byte offsets and lengths per peer).
  void allToAll(Op& op);
  void allToAllV(Op& op);
  void tcpAllToAll(const Op& op, const std::vector<size_t>& sendAt, const std::vector<size_t>& sendLen,
                   const std::vector<size_t>& recvAt, const std::vector<size_t>& recvLen);
  // gloo_rooted.cpp: broadcast, reduce, gather and scatter beyond the agreement round,
  // through the segment on one host, else over the own connections.
  void broadcast(Op& op);
  bool tcpBroadcastTree() const;
  void broadcastChain(const Op& op, uint8_t* buf, size_t bytes);
  void broadcastTree(const Op& op, uint8_t* buf, size_t bytes);
  void reduce(Op& op);
  void gather(Op& op);
  void scatter(Op& op);
  // Rounds through the segment after the agreement round (one host), a slot's worth of
  // `total` bytes each: this rank posts its piece of `mine` (nothing when null), read()
  // takes every rank's (gloo_rooted.cpp).
  using RoundRead = std::function<void(size_t at, size_t len, const shm::Reader& from)>;
  void shmRounds(const Op& op, size_t total, const uint8_t* mine, const RoundRead& read);
  // The root's block p to or from rank p over the own connections, at once; the root's
  // own block copied by ownCopy(at, len), a slice of kOwnCopySlice at a time while the
  // sockets wait.
  void rootTransfer(const Op& op, uint8_t* base, uint8_t* mine, size_t bytes, bool toPeers,
                    const std::function<void(size_t, size_t)>& ownCopy);
  static constexpr size_t kOwnCopySlice = 256 * 1024;
  void send(Op& op);
  void recv(Op& op);
  [[noreturn]] void rethrow(const Op& op, std::exception_ptr e);
  // Shared memory between the ranks of a host (gloo_shm.cpp, docs/gloo.md).
  void setupShm(std::chrono::milliseconds timeout);
  void learnHosts(std::chrono::milliseconds timeout);
  bool oneWayConnections() const;
  bool usesShm(const Op& op) const;
  void shmAllReduce(Op& op);
  // in -> out reduced over every rank through the segment (two levels across hosts); Avg as a sum.
  // root >= 0 (one host): a reduce, out only the root's (shm::allReduce).
  void shmAllReduceInto(const Op& op, const void* in, void* out, int root = -1);
  bool shmSingleHost() const { return shm_ && shm_->hosts == 1; }
  void shmAllGather(Op& op);
  void shmReduceScatter(Op& op);
  void shmFailed();
  void shmAbort();  // from abort(): wakes the host's ranks and the other hosts' leaders
  bool shmAgree(const Op& op);
  // The segment's agreement round (gloo_shm.cpp): what op posts there, whether the
  // round completes op (a small all-reduce, a barrier), and reading the round.
  struct ShmMessage {
    Fingerprint head;
    std::string why;  // a rejected call's reason, NUL-terminated in the body
    const void* data = nullptr;  // a small all-reduce's input
    size_t bodyBytes = 0;
    bool rejected = false;
    const void* body() const { return rejected ? why.c_str() : data; }
  };
  ShmMessage shmMessage(const Op& op, bool carries) const;
  bool shmCarries(const Op& op) const;
  size_t shmPostedBytes(const Op& op) const;
  size_t shmRoundCap() const;
  // mineInMemory: this rank's parts are read from op's own memory rather than from its
  // slot (the calling thread, with no JavaScript run since the post: the memory still
  // holds what was posted).
  void shmRead(const Op& op, const shm::Reader& from, bool mineInMemory, bool carries);
  void shmAllToAll(const Op& op, const std::vector<size_t>& sendAt, const std::vector<size_t>& sendLen,
                   const std::vector<size_t>& recvAt, const std::vector<size_t>& recvLen, size_t longest);
  void shmReadReduced(const Op& op, const shm::Reader& from, bool mineInMemory);
  void shmReadBlocks(const Op& op, const shm::Reader& from, bool mineInMemory, size_t block, size_t at);
  void shmReadRooted(const Op& op, const shm::Reader& from, bool mineInMemory);  // gloo_rooted.cpp
  bool shmFinish(const Op& op, uint64_t step, bool mineInMemory = false);
  bool shmPrepost(Op& op);

  GlooConfig cfg_;
  std::shared_ptr<StoreClient> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> ctx_;
  std::mutex ctxMu_;  // guards ctx_ against abort() racing connect()
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> quitting_{false};  // quit(): the peers are not told of an abort
  int splits_ = 0;
  std::vector<uint8_t> scratch_;  // reduceScatter and in-place allToAll staging, a non-root's reduce output
  std::unique_ptr<MeshExchange> mesh_;  // agreement headers and small all-reduces
  std::unique_ptr<net::TcpMesh> tcp_;   // the backend's own connections (null at one rank)
  net::RingScratch ring_;
  // NCCL_NODE_GLOO_ALLREDUCE at construction: every rank of a job has the same environment.
  AllReduceAlgo forcedAllReduce_ = AllReduceAlgo::Auto;
  std::string forcedError_;
  LegacyAllReduces legacy_;
  GlooTuning tuning_;
  std::string tuningError_;
  LegacyCollectives legacyColl_;
  std::unique_ptr<shm::HostGroup> shm_;       // null: every collective goes over TCP
  std::unique_ptr<net::TcpMesh> leaders_;     // one rank per host, when the group spans hosts
  uint64_t shmPosted_ = 0;  // the segment round prepost() started for the next op, 0: none
  // The most a rank's message in the segment's round carries (shmCarries): fixed once
  // the segment is set up, and read on every call.
  size_t shmCarryLimit_ = 0;
  // How long finishOnCaller() waits for its peers on the calling thread before leaving a
  // call to the worker (JS thread only): through the segment NCCL_NODE_SHM_CALLER_SPIN_US,
  // over TCP NCCL_NODE_TCP_CALLER_WAIT_US; 0: never. The bound adapts: restored when the
  // peers were in, quartered each time they were not, so a rank whose peers come late
  // stops paying for the wait.
  struct CallerBound {
    std::chrono::nanoseconds full{0};
    std::chrono::nanoseconds now{0};
    void set(std::chrono::nanoseconds bound) { full = now = bound; }
    void met() { now = full; }
    void missed() { now /= 4; }
  } caller_;
  // Through the segment: the poll yields the core between looks (the host's ranks
  // outnumber its cores).
  bool callerYield_ = false;
  bool landing_ = true;  // NCCL_NODE_TCP_LAND: the TCP round reads large blocks into outputs (landBodies)
  // NCCL_NODE_TCP_RCVLOWAT: the receive mark of every TcpMesh this backend opens.
  size_t wakeMark_ = net::TcpMesh::kDefaultWakeMark;
  // NCCL_NODE_TCP_RCVBUF: the receive buffer of its connections within the host.
  int localRcvBuf_ = net::TcpMesh::kDefaultLocalReceiveBuffer;
  // NCCL_NODE_TCP_CONNECTIONS_PER_PAIR: 1, 2, or 0 (unset): 2 where this host's ranks of
  // the group fit its cores (learnHosts()).
  int pairConnections_ = 0;
  bool bounce_ = false;  // NCCL_NODE_TCP_BOUNCE
  std::optional<bool> forcedBroadcastTree_;  // NCCL_NODE_TCP_BROADCAST; unset: tcpBroadcastTree()'s rule
  std::string tcpEnvError_;  // the first bad NCCL_NODE_TCP_* value
  // Per rank, its host's identity (learnHosts(): the store, before the TCP connections).
  std::vector<std::string> hostIds_;
  bool oneHost_ = false;  // every rank of the group on this host (learnHosts())
  // This host runs more of the group's ranks than it has cores (learnHosts()).
  bool oversubscribed_ = false;
};

}  // namespace ncclnode

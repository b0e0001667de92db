// The CPU backend's own TCP connections, one or two per pair of ranks, for the collectives'
// bulk data between hosts (tcp_ring.h). Why not Gloo's pairs: Gloo's TCP transport
// moves every byte through its event-loop thread, which then wakes the thread waiting
// on the buffer; on a host with few cores that hand-off, and the loop thread's own
// spinning in epoll_wait, cost more than the transfer itself (bench/README.md). Here
// the communicator's worker thread reads and writes the sockets itself with poll(),
// as NCCL's socket transport does from its proxy thread, and reduces received data
// as it lands.
//
// Free of N-API and of the store client, so bench/tcp_ring.cpp can time the same code.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/types.h>

#include "../core/errors.h"

namespace ncclnode::net {

// A failure on the connections once they carry data (peer lost, timeout, abort, a
// malformed message): the byte streams are out of step afterwards, so the backend
// marks the communicator broken.
class TransportError : public Error {
 public:
  using Error::Error;
};

using Clock = std::chrono::steady_clock;

// How ranks find each other: set publishes this rank's address, get waits for a
// peer's (throwing on timeout). The backend passes the job's store.
struct Rendezvous {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key, std::chrono::milliseconds timeout)> get;
};

// One transfer to or from a peer: bytes move between data and the peer's socket
// until done == bytes. A receive with ring > 0 lands in a circular buffer of that
// many bytes at data (the caller consumes it in onRecv before the next read).
struct Xfer {
  int peer = -1;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t done = 0;
  size_t ring = 0;
  // A send of two parts, one byte stream: bytes [0, split) from data, the rest from tail
  // (a header and the caller's buffer without copying the buffer). 0: all from data.
  size_t split = 0;
  const uint8_t* tail = nullptr;
};

// Receives this process put to sleep under a mark above one byte (SO_RCVLOWAT set by
// transfer()), over every mesh: the tests see the mark in use, or off.
uint64_t markedReceives();
// Peers connected one connection each way, summed over every mesh this process connected.
uint64_t oneWayPairs();
// Connections within a host given a fixed receive buffer (setLocalReceiveBuffer()), summed
// over every mesh this process connected.
uint64_t sizedReceiveBuffers();
// Bytes received through the bounce buffer (setBounce()), over every mesh.
uint64_t bouncedBytes();
// Reads transfer() made that found nothing to read (EAGAIN), over every mesh.
uint64_t emptyReads();
// Reads from a socket that moved bytes (not those served from bytes handed back), and the
// bytes handed back (TcpMesh::keepUnread()), over every mesh.
uint64_t dataReads();
uint64_t unreadBytes();

// Whether a receive into `data` from a connection within this host goes through the
// bounce buffer (setBounce(), in a transfer that receives one way): its page offset lies
// where the kernel's copy out of the socket runs at half speed on AMD Zen (tcp_mesh.cpp,
// receiveSome).
bool aliasedLanding(const uint8_t* data);

// Memory this code receives into itself, starting half a page into a page, where no
// receive aliases (aliasedLanding); allocated and touched when it grows, never shrunk.
class LandingBuffer {
 public:
  void reserve(size_t bytes);
  uint8_t* data() const { return at_; }
  size_t size() const { return size_; }

 private:
  std::vector<uint8_t> store_;
  uint8_t* at_ = nullptr;
  size_t size_ = 0;
};

class TcpMesh {
 public:
  // secret: a value every rank of this communicator shares (from the job token and the
  // communicator's store prefix); a connection that does not present it is dropped.
  TcpMesh(int rank, int size, uint64_t secret);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  // Listens on `host` (a name or a numeric address) or, when `iface` is set, on that
  // interface's first address; publishes it under "<keyPrefix><rank>"; connects to
  // every peer: one connection per pair carrying both directions, or, where both ranks
  // of the pair were set oneWay, one connection each way (each rank sending on the one it
  // dialed). Throws Error(Timeout | Backend | CommAborted).
  void connect(const std::string& host, const std::string& iface, const Rendezvous& rv,
               const std::string& keyPrefix, std::chrono::milliseconds timeout);

  // Moves every send and receive concurrently until all are done. onRecv(i) runs after
  // each read into recvs[i]. Throws TransportError: PeerLost when a peer closes or resets its
  // connection, Timeout past the deadline (the message names the peer), CommAborted after abort().
  // A failed transfer leaves the byte streams out of step: the caller marks the
  // communicator broken. With `until` before the deadline: returns false once it has
  // passed with something still to move (a bounded wait, no failure: each Xfer's done
  // says how far it got, and a later call with the same Xfers goes on from there);
  // true when all is done. With whileWaiting: each time a pass moved nothing, it runs
  // instead of sleeping in poll() (a piece of the caller's own work, such as a copy), and
  // the pass is retried; once it returns false (nothing left of that work) the transfer
  // sleeps as it would without it.
  bool transfer(Xfer* sends, size_t nSends, Xfer* recvs, size_t nRecvs, Clock::time_point deadline,
                const std::function<void(size_t)>& onRecv = {}, Clock::time_point until = Clock::time_point::max(),
                const std::function<bool()>& whileWaiting = {});

  // One pass of nonblocking writes of at most the first upTo bytes of each transfer,
  // never waiting (the caller's thread posts a call's messages this way, as far as is
  // cheap); transfer() finishes what the sockets did not take.
  void trySend(Xfer* sends, size_t nSends, size_t upTo = SIZE_MAX);

  // Any thread: wakes a transfer in progress, which throws Error(CommAborted), and shuts
  // every connection down. With announce, first one urgent (out-of-band) byte on each,
  // which tells the peers it was an abort (checkAborted()), not an orderly close.
  void abort(bool announce = true);

  // Throws TransportError(PeerLost) when a peer has aborted with a round in flight (its
  // urgent byte is here). A byte stream delivers what a peer sent before it aborted, so a
  // round can complete with the message of a rank that failed that very round; the
  // agreement round asks after each round.
  void checkAborted();

  // Hands back bytes a receive from `peer` took beyond the message it was reading (a read
  // that asked for more than the message turned out to hold: MeshExchange reads a message's
  // length with what usually follows it). The next receives from that peer, in any
  // transfer, get them first, in stream order, before anything more is read from the socket.
  void keepUnread(int peer, const uint8_t* bytes, size_t n);

  // The most a receive of 64 KiB or more asks the kernel to hold it asleep for
  // (SO_RCVLOWAT, transfer()); 0: no mark, the reader wakes as each segment lands.
  // Before connect(); the backend passes NCCL_NODE_TCP_RCVLOWAT.
  void setWakeMark(size_t bytes) { wakeMark_ = bytes; }
  // Before connect(): whether this rank asks for one connection each way with every peer
  // (a pair gets them when both ranks ask; docs/gloo.md "Connecting").
  void setOneWay(bool on) { oneWay_ = on; }
  // Before connect(): the receive buffer (SO_RCVBUF) a connection whose two ends are on
  // this host gets; 0: the kernel's autotuning, as between hosts. The backend passes
  // NCCL_NODE_TCP_RCVBUF.
  void setLocalReceiveBuffer(int bytes) { localRcvBuf_ = bytes; }
  static constexpr int kDefaultLocalReceiveBuffer = 4 << 20;
  // Before connect(): receives of 64 KiB or more from a peer on this host into a
  // destination aliasedLanding() marks, in a transfer that sends less than that itself, go
  // through a buffer of this mesh's own, at a page offset the kernel copies to at full
  // speed, then are copied out (transfer()). The backend
  // passes NCCL_NODE_TCP_BOUNCE (unset: on where this CPU's copies stall there, aliasingStalls()).
  void setBounce(bool on) { bounceOn_ = on; }
  // After connect(): peers this rank has one connection each way with.
  int oneWayPeers() const;
  static constexpr size_t kDefaultWakeMark = 256 * 1024;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool connected() const { return connected_; }

 private:
  [[noreturn]] void fail(int peer, const char* what, int err);
  void setLowat(int peer, int bytes);
  void sizeReceiveBuffer(int fd);
  bool sendSome(Xfer& x, size_t limit, bool drain);
  ssize_t receiveSome(Xfer& x, uint8_t* dst, size_t len, bool mayBounce);
  int listen(const std::string& host, const std::string& iface, std::string* address);

  int rank_;
  int size_;
  uint64_t secret_;
  // Per peer (-1 for this rank): the connection this rank's bytes to the peer go on, and
  // the one the peer's come in on: the same one, or (a one-way pair) the one this rank
  // dialed and the one the peer dialed.
  std::vector<int> sendFds_;
  std::vector<int> recvFds_;
  std::vector<int> lowat_;  // per peer: the SO_RCVLOWAT transfer() left set (1: the default)
  // Per peer: bytes read from its stream and handed back (keepUnread()), from `at` on.
  struct Unread {
    std::vector<uint8_t> bytes;
    size_t at = 0;
  };
  std::vector<Unread> unread_;
  std::vector<pollfd> urgentPoll_;  // checkAborted()'s poll set
  size_t wakeMark_ = kDefaultWakeMark;
  int localRcvBuf_ = kDefaultLocalReceiveBuffer;
  bool oneWay_ = true;
  bool bounceOn_ = false;
  LandingBuffer bounce_;          // reserved by connect() where some peer is bounced from
  std::vector<char> bouncePeer_;  // per peer: bounce receives from it (bounceOn_, within this host)
  int wake_ = -1;         // eventfd written by abort()
  std::atomic<bool> aborted_{false};
  bool connected_ = false;
};

}  // namespace ncclnode::net

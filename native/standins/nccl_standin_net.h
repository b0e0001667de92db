// Sockets for the stand-in libnccl: the bootstrap (unique id -> full TCP mesh between
// the ranks' processes) and a poll loop that moves many transfers at once, so
// grouped sends and receives progress together as they do in NCCL.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace standin {

struct UniqueId {          // the 128-byte ncclUniqueId, as the stand-in fills it
  char magic[12];          // "NCCLSTANDIN"
  uint32_t addr;           // root's IPv4 address, network order
  uint64_t nonce;
  uint16_t port;           // root's port, network order
  char rest[128 - 26];
};
static_assert(sizeof(UniqueId) == 128, "unique id size");

// Thrown by the network layer; `result` is the ncclResult_t to report.
struct NetError : std::runtime_error {
  int result;
  NetError(int r, const std::string& m) : std::runtime_error(m), result(r) {}
};

// A rank's listening address, as the bootstrap table carries it.
struct Endpoint { uint32_t addr; uint16_t port; uint16_t pad; };

// Starts a root listener (in a detached thread) that hands every rank the address
// table once all have checked in; fills *id.
void makeUniqueId(UniqueId* id);

// Joins the group: checks in with the root, then connects to every other rank.
// Returns one connected, nonblocking socket per rank (-1 for self). With `listener`,
// this rank's listening socket stays open and is handed back with every rank's
// endpoint, as NCCL's bootstrap keeps its own for later shrinks.
std::vector<int> connectMesh(const UniqueId& id, int nranks, int rank, std::chrono::milliseconds timeout,
                             const std::atomic<bool>& aborted, int* listener = nullptr,
                             std::vector<Endpoint>* table = nullptr);

// A fresh mesh among the ranks of `table` (this rank is `rank`), through the
// listeners those ranks kept: lower ranks accept, higher ranks connect, and each
// connection opens with {tag, check, rank}. A connection with another tag (a stale
// attempt) is dropped; one with another `check` throws NetError(ncclInvalidUsage)
// naming `what`. Gives up at the deadline or once `aborted` is set.
std::vector<int> reconnectMesh(int listener, const std::vector<Endpoint>& table, int rank, uint64_t tag, uint64_t check,
                               const char* what, std::chrono::steady_clock::time_point deadline,
                               const std::atomic<bool>& aborted);

struct Xfer {
  int peer;
  bool send;
  char* buf;
  size_t len;
};

// Moves every transfer; per peer, sends go out in list order and receives arrive in
// list order. Throws NetError(ncclRemoteError) when a peer's connection breaks and
// NetError(ncclSystemError) once `aborted` is set.
void transferAll(const std::vector<int>& fds, std::vector<Xfer>& xfers, const std::atomic<bool>& aborted);

}  // namespace standin

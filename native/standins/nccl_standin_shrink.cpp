// ncclCommShrink in the stand-in libnccl: a new communicator of the parent's ranks
// minus the excluded ones, collective over the survivors only (an excluded rank never
// calls it; it may be dead). New ranks are the survivors' parent ranks in order.
//
// The survivors connect a fresh mesh through the listeners the parent's bootstrap kept
// (nccl_standin_net.cpp reconnectMesh) rather than over the parent's data connections:
// after a failed collective those may still hold a partial message, and a dead peer's
// connection is broken. Every survivor checks that the others passed the same list.
//
// NCCL_SHRINK_DEFAULT needs a healthy, idle parent and waits for its work to finish.
// NCCL_SHRINK_ABORT first terminates the parent's work (a collective stuck on a dead
// or hung peer returns at once, as after ncclCommAbort) without waiting on any peer;
// the parent then accepts no more operations and is left to ncclCommAbort/Destroy.
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nccl_standin_comm.h"

namespace standin {

namespace {

// FNV-1a over the parent's size and the sorted list: what every survivor must agree on.
uint64_t fingerprint(int nranks, const std::vector<int>& exclude) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  mix(static_cast<uint64_t>(nranks));
  for (int r : exclude) mix(static_cast<uint64_t>(r));
  return h;
}

void waitIdle(Comm* c) {
  while (c->pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

int shrinkComm(Comm* c, const std::vector<int>& exclude, Comm** out, bool blocking, bool abortParent) {
  *out = nullptr;
  if (abortParent) {
    // Stops the stream's work on the parent: transfers poll this flag, a hung
    // collective waits on it. No peer is asked anything.
    c->aborted = true;
    if (c->init.joinable()) c->init.join();  // an unfinished init gives up on the flag too
    waitIdle(c);
  } else {
    if (int rc = checkIdle(c, "ncclCommShrink")) return rc;
    const int state = c->asyncError.load();
    if (state != kSuccess) {
      setError(c, "ncclCommShrink: the parent communicator has an error (" + std::to_string(state) +
                      "); shrink it with NCCL_SHRINK_ABORT");
      return kInvalidUsage;
    }
    if (c->aborted) {
      setError(c, "ncclCommShrink: the parent's operations were terminated by an earlier NCCL_SHRINK_ABORT");
      return kInvalidUsage;
    }
    waitIdle(c);
  }
  if (c->listenFd < 0) {
    setError(c, "ncclCommShrink: the parent communicator never finished its initialisation");
    return kInvalidUsage;
  }
  auto* child = new Comm();
  child->blocking = blocking;
  child->nranks = c->nranks - static_cast<int>(exclude.size());
  size_t e = 0;
  for (int r = 0, next = 0; r < c->nranks; ++r) {
    if (e < exclude.size() && exclude[e] == r) { ++e; continue; }
    if (r == c->rank) child->rank = next;
    child->table.push_back(c->table[r]);
    ++next;
  }
  // The child answers on the same listening socket (its own descriptor), so a later
  // shrink of the child finds every survivor where the parent's table says.
  child->listenFd = dup(c->listenFd);
  const uint64_t check = fingerprint(c->nranks, exclude);
  child->meshTag = c->meshTag * 1099511628211ULL + static_cast<uint64_t>(++c->shrinks);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(30);
  auto connect = [child, check, deadline] {
    try {
      child->fds = reconnectMesh(child->listenFd, child->table, child->rank, child->meshTag, check,
                                 "ncclCommShrink: the exclude list", deadline, child->aborted);
      child->asyncError = kSuccess;
    } catch (const NetError& err) {
      setError(child, std::string("ncclCommShrink: ") + err.what());
      child->asyncError = err.result;
    }
  };
  *out = child;  // as ncclCommInitRankConfig: the handle at once, in progress until connected
  if (!blocking) {
    child->init = std::thread(connect);
    return kInProgress;
  }
  connect();
  return child->asyncError.load();
}

}  // namespace standin

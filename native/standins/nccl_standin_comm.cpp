#include "nccl_standin_comm.h"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <chrono>
#include <cstring>
#include <memory>
#include <sys/socket.h>

#include "../core/dtype.h"

namespace standin {

using ncclnode::DType;

const char* kindName(Kind k) {
  static const char* names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                "AllToAll", "Gather", "Scatter", "Send", "Recv"};
  return names[static_cast<int>(k)];
}

namespace {

size_t width(int dtype) { return ncclnode::elementSize(static_cast<DType>(dtype)); }

// One operation, ready to run on the stream: host addresses resolved at enqueue.
struct Plan {
  Call call;
  char* send = nullptr;
  char* recv = nullptr;
  double scale = 0;  // premulsum factor; 0 = plain op
};

struct Batch {
  Comm* comm;
  std::vector<Plan> plans;
};

struct Deferred { Comm* comm; CUstream stream; Call call; };
thread_local std::vector<Deferred> grouped;

// NCCL_STANDIN_FAULT=<hang|exit>:<Collective>:<rank>[:<nth>]
bool faultHits(Comm* comm, Kind k, std::string* action) {
  const char* f = std::getenv("NCCL_STANDIN_FAULT");
  if (!f || !*f) return false;
  std::string spec(f);
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    size_t c = spec.find(':', pos);
    parts.push_back(spec.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (parts.size() < 3 || strcasecmp(parts[1].c_str(), kindName(k)) != 0) return false;
  if (std::atoi(parts[2].c_str()) != comm->rank) return false;
  const int nth = parts.size() > 3 ? std::atoi(parts[3].c_str()) : 1;
  int n;
  { std::lock_guard<std::mutex> l(comm->mu); n = ++comm->calls[static_cast<int>(k)]; }
  *action = parts[0];
  return n == nth;
}

void scale(char* data, int dtype, size_t n, double s) {
  for (size_t i = 0; i < n; ++i) {
    char* p = data + i * width(dtype);
    switch (static_cast<DType>(dtype)) {
      case DType::Int8: { int8_t v; memcpy(&v, p, 1); v = int8_t(v * int64_t(s)); memcpy(p, &v, 1); break; }
      case DType::Uint8: { uint8_t v; memcpy(&v, p, 1); v = uint8_t(v * uint64_t(s)); memcpy(p, &v, 1); break; }
      case DType::Int32: { int32_t v; memcpy(&v, p, 4); v = int32_t(v * int64_t(s)); memcpy(p, &v, 4); break; }
      case DType::Uint32: { uint32_t v; memcpy(&v, p, 4); v = uint32_t(v * uint64_t(s)); memcpy(p, &v, 4); break; }
      case DType::Int64: { int64_t v; memcpy(&v, p, 8); v = v * int64_t(s); memcpy(p, &v, 8); break; }
      case DType::Uint64: { uint64_t v; memcpy(&v, p, 8); v = v * uint64_t(s); memcpy(p, &v, 8); break; }
      case DType::Float16: { uint16_t v; memcpy(&v, p, 2); v = ncclnode::floatToHalf(ncclnode::halfToFloat(v) * float(s)); memcpy(p, &v, 2); break; }
      case DType::Bfloat16: { uint16_t v; memcpy(&v, p, 2); v = ncclnode::floatToBf16(ncclnode::bf16ToFloat(v) * float(s)); memcpy(p, &v, 2); break; }
      case DType::Float8e4m3: case DType::Float8e5m2: {  // in half, as NCCL's fp8 pre-multiply
        const DType t = static_cast<DType>(dtype);
        const double v = ncclnode::fp8ToFloat(static_cast<uint8_t>(*p), t) * double(_Float16(s));
        *p = static_cast<char>(ncclnode::floatToFp8(double(_Float16(v)), t));
        break;
      }
      case DType::Float32: { float v; memcpy(&v, p, 4); v = v * float(s); memcpy(p, &v, 4); break; }
      case DType::Float64: { double v; memcpy(&v, p, 8); v = v * s; memcpy(p, &v, 8); break; }
    }
  }
}

// Reduces n contributions laid out back to back in `all` into out, in rank order, so
// every rank gets bit-identical results.
void reduceAll(char* out, char* all, int n, size_t count, const Plan& p) {
  const size_t bytes = count * width(p.call.dtype);
  const int op = p.scale != 0 ? 0 : p.call.op;
  if (p.scale != 0) scale(all, p.call.dtype, count * n, p.scale);
  auto fn = ncclnode::reduceFunction(static_cast<DType>(p.call.dtype), static_cast<ncclnode::RedOp>(op));
  for (int r = 1; r < n; ++r) fn(all, all, all + r * bytes, count);
  if (op == 4) ncclnode::divideInPlace(all, static_cast<DType>(p.call.dtype), count, n);
  memmove(out, all, bytes);
}

// Runs one batch (a call, or a whole group) on the stream thread: every plan's
// transfers move together, then each plan finishes locally.
void runBatch(Batch& b) {
  Comm* c = b.comm;
  const int state = c->asyncError.load();
  if (c->aborted || (state != kSuccess && state != kInProgress)) return;  // like kernels after an abort
  // NCCL_STANDIN_RUN_US: how long each batch occupies the stream before it moves
  // data, as a large collective's kernel would (lets tests see ops queue up).
  static const long runUs = [] {
    const char* v = std::getenv("NCCL_STANDIN_RUN_US");
    return v && *v ? std::atol(v) : 0L;
  }();
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(runUs);
       !c->aborted && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(runUs, 1000L)));
  }
  const int n = c->nranks, me = c->rank;
  std::vector<Xfer> xfers;
  std::vector<std::unique_ptr<std::vector<char>>> scratch(b.plans.size());
  for (size_t i = 0; i < b.plans.size(); ++i) {
    Plan& p = b.plans[i];
    std::string action;
    if (faultHits(c, p.call.kind, &action)) {
      if (action == "exit") _exit(17);
      if (action == "hang") {
        while (!c->aborted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return;
      }
    }
    const size_t bytes = p.call.count * width(p.call.dtype);
    auto tmp = [&](size_t sz) { scratch[i] = std::make_unique<std::vector<char>>(sz); return scratch[i]->data(); };
    switch (p.call.kind) {
      case Kind::AllReduce: case Kind::Reduce: {
        if (p.call.kind == Kind::Reduce && me != p.call.root) { xfers.push_back({p.call.root, true, p.send, bytes}); break; }
        char* all = tmp(bytes * n);
        memcpy(all + me * bytes, p.send, bytes);
        for (int r = 0; r < n; ++r) {
          if (r == me) continue;
          if (p.call.kind == Kind::AllReduce) xfers.push_back({r, true, p.send, bytes});
          xfers.push_back({r, false, all + r * bytes, bytes});
        }
        break;
      }
      case Kind::ReduceScatter: {
        char* all = tmp(bytes * n);
        memcpy(all + me * bytes, p.send + me * bytes, bytes);
        for (int r = 0; r < n; ++r) {
          if (r == me) continue;
          xfers.push_back({r, true, p.send + r * bytes, bytes});
          xfers.push_back({r, false, all + r * bytes, bytes});
        }
        break;
      }
      case Kind::Broadcast:
        if (me == p.call.root) {
          for (int r = 0; r < n; ++r) if (r != me) xfers.push_back({r, true, p.send, bytes});
          if (p.send != p.recv) memmove(p.recv, p.send, bytes);
        } else {
          xfers.push_back({p.call.root, false, p.recv, bytes});
        }
        break;
      case Kind::AllGather: case Kind::AllToAll: {
        const bool a2a = p.call.kind == Kind::AllToAll;
        const size_t chunk = bytes;  // AlltoAll's count is per peer, like AllGather's
        memmove(p.recv + me * chunk, p.send + (a2a ? me * chunk : 0), chunk);
        for (int r = 0; r < n; ++r) {
          if (r == me) continue;
          xfers.push_back({r, true, p.send + (a2a ? r * chunk : 0), chunk});
          xfers.push_back({r, false, p.recv + r * chunk, chunk});
        }
        break;
      }
      case Kind::Gather:
        if (me != p.call.root) { xfers.push_back({p.call.root, true, p.send, bytes}); break; }
        memmove(p.recv + me * bytes, p.send, bytes);
        for (int r = 0; r < n; ++r) if (r != me) xfers.push_back({r, false, p.recv + r * bytes, bytes});
        break;
      case Kind::Scatter:
        if (me != p.call.root) { xfers.push_back({p.call.root, false, p.recv, bytes}); break; }
        memmove(p.recv, p.send + me * bytes, bytes);
        for (int r = 0; r < n; ++r) if (r != me) xfers.push_back({r, true, p.send + r * bytes, bytes});
        break;
      case Kind::Send: xfers.push_back({p.call.root, true, p.send, bytes}); break;
      case Kind::Recv: xfers.push_back({p.call.root, false, p.recv, bytes}); break;
    }
  }
  try {
    transferAll(c->fds, xfers, c->aborted);
  } catch (const NetError& e) {
    setError(c, std::string("rank ") + std::to_string(me) + ": " + e.what());
    failComm(c, e.result);
    return;
  }
  for (size_t i = 0; i < b.plans.size(); ++i) {
    Plan& p = b.plans[i];
    const bool reduces = p.call.kind == Kind::AllReduce || p.call.kind == Kind::ReduceScatter ||
                         (p.call.kind == Kind::Reduce && me == p.call.root);
    if (reduces) reduceAll(p.recv, scratch[i]->data(), n, p.call.count, p);
  }
}

void runBatchThunk(void* arg) {
  std::unique_ptr<Batch> b(static_cast<Batch*>(arg));
  runBatch(*b);
  b->comm->pending--;
}

// Resolves a call's device pointers and checks its arguments, as NCCL does at enqueue.
int plan(Comm* c, const Call& call, Plan* out) {
  if (!c) return kInvalidArgument;
  if (call.dtype < 0 || call.dtype > 11) { setError(c, "invalid data type"); return kInvalidArgument; }
  const size_t n = c->nranks, bytes = call.count * width(call.dtype);
  const bool rooted = call.kind == Kind::Broadcast || call.kind == Kind::Reduce || call.kind == Kind::Gather ||
                      call.kind == Kind::Scatter || call.kind == Kind::Send || call.kind == Kind::Recv;
  if (rooted && (call.root < 0 || call.root >= c->nranks)) { setError(c, "invalid root/peer"); return kInvalidArgument; }
  const bool isRoot = call.root == c->rank;
  size_t sendBytes = bytes, recvBytes = bytes;
  switch (call.kind) {
    case Kind::AllGather: recvBytes = bytes * n; break;
    case Kind::AllToAll: sendBytes = recvBytes = bytes * n; break;
    case Kind::ReduceScatter: sendBytes = bytes * n; break;
    case Kind::Gather: recvBytes = isRoot ? bytes * n : 0; break;
    case Kind::Scatter: sendBytes = isRoot ? bytes * n : 0; break;
    case Kind::Reduce: recvBytes = isRoot ? bytes : 0; break;
    case Kind::Broadcast: sendBytes = isRoot ? bytes : 0; break;
    case Kind::Send: recvBytes = 0; break;
    case Kind::Recv: sendBytes = 0; break;
    default: break;
  }
  out->call = call;
  auto resolve = [&](const void* p, size_t b, const char* what, char** dst) {
    if (b == 0) return true;
    *dst = static_cast<char*>(cuStandinHostPtr(reinterpret_cast<CUdeviceptr>(p), b));
    if (!*dst) setError(c, std::string(kindName(call.kind)) + ": " + what + " is not a device allocation of " + std::to_string(b) + " bytes");
    return *dst != nullptr;
  };
  if (!resolve(call.send, sendBytes, "sendbuff", &out->send) || !resolve(call.recv, recvBytes, "recvbuff", &out->recv)) {
    return kInvalidArgument;
  }
  if (call.op >= 5) {
    std::lock_guard<std::mutex> l(c->mu);
    auto it = c->premul.find(call.op);
    if (it == c->premul.end()) { setError(c, "unknown reduction operator"); return kInvalidArgument; }
    out->scale = it->second;
  } else if (call.op < 0) {
    return kInvalidArgument;
  }
  return kSuccess;
}

int submit(Comm* c, CUstream stream, std::vector<Plan> plans) {
  auto* b = new Batch{c, std::move(plans)};
  c->pending++;
  cuStandinEnqueue(stream, runBatchThunk, b);
  return kSuccess;
}

}  // namespace

int& groupDepth() {
  thread_local int depth = 0;
  return depth;
}

void failComm(Comm* c, int result) {
  int cur = c->asyncError.load();
  while ((cur == kSuccess || cur == kInProgress) && !c->asyncError.compare_exchange_weak(cur, result)) {
  }
}

int checkIdle(Comm* c, const char* fn) {
  const int state = c->asyncError.load();
  if (state != kInProgress) return kSuccess;
  setError(c, std::string(fn) + ": Attempt to use communicator before the previous operation returned ncclSuccess");
  failComm(c, kInvalidArgument);
  return kInvalidArgument;
}

int later(Comm* c, std::function<void()> work) {
  static const long delayUs = [] {
    const char* v = std::getenv("NCCL_STANDIN_LAUNCH_DELAY_US");
    return v && *v ? std::atol(v) : 200L;
  }();
  c->asyncError = kInProgress;
  c->pending++;
  std::thread([c, work = std::move(work)] {
    std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
    work();
    int expected = kInProgress;
    c->asyncError.compare_exchange_strong(expected, kSuccess);
    c->pending--;
  }).detach();
  return kInProgress;
}

int enqueue(Comm* c, CUstream stream, const Call& call) {
  if (!c) return kInvalidArgument;
  if (c->aborted) {  // a shrink with NCCL_SHRINK_ABORT terminated this communicator's work
    setError(c, std::string(kindName(call.kind)) + ": the communicator's operations were terminated by ncclCommShrink(NCCL_SHRINK_ABORT)");
    return kInvalidUsage;
  }
  if (int rc = checkIdle(c, kindName(call.kind))) return rc;
  Plan p;
  if (int rc = plan(c, call, &p)) return rc;
  if (groupDepth() > 0) {
    grouped.push_back({c, stream, call});
    return kSuccess;
  }
  // A nonblocking communicator launches the kernel later, from NCCL's thread.
  if (!c->blocking) return later(c, [c, stream, p] { submit(c, stream, {p}); });
  return submit(c, stream, {p});
}

int flushGroup() {
  std::vector<Deferred> calls;
  calls.swap(grouped);
  // One batch per (communicator, stream), in issue order.
  int rc = kSuccess;
  while (!calls.empty()) {
    Comm* c = calls.front().comm;
    CUstream s = calls.front().stream;
    std::vector<Plan> plans;
    std::vector<Deferred> rest;
    for (const Deferred& d : calls) {
      if (d.comm != c || d.stream != s) { rest.push_back(d); continue; }
      Plan p;
      if (int bad = plan(c, d.call, &p)) return bad;
      plans.push_back(p);
    }
    if (c->blocking) {
      submit(c, s, std::move(plans));
    } else {
      later(c, [c, s, plans] { submit(c, s, plans); });
      rc = kInProgress;
    }
    calls.swap(rest);
  }
  return rc;
}

double scalarToDouble(const void* p, int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::Int8: return *static_cast<const int8_t*>(p);
    case DType::Uint8: return *static_cast<const uint8_t*>(p);
    case DType::Int32: return *static_cast<const int32_t*>(p);
    case DType::Uint32: return *static_cast<const uint32_t*>(p);
    case DType::Int64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::Uint64: return static_cast<double>(*static_cast<const uint64_t*>(p));
    case DType::Float16: return ncclnode::halfToFloat(*static_cast<const uint16_t*>(p));
    case DType::Bfloat16: return ncclnode::bf16ToFloat(*static_cast<const uint16_t*>(p));
    case DType::Float8e4m3: case DType::Float8e5m2:
      return ncclnode::fp8ToFloat(*static_cast<const uint8_t*>(p), static_cast<DType>(dtype));
    case DType::Float32: return *static_cast<const float*>(p);
    case DType::Float64: return *static_cast<const double*>(p);
  }
  return 0;
}

namespace {

void connectInto(Comm* c, const UniqueId& id) {
  try {
    c->fds = connectMesh(id, c->nranks, c->rank, std::chrono::minutes(30), c->aborted, &c->listenFd, &c->table);
    c->meshTag = id.nonce;
    c->asyncError = kSuccess;
  } catch (const NetError& e) {
    setError(c, std::string("init: ") + e.what());
    c->asyncError = e.result;
  }
}

}  // namespace

Comm* startComm(const UniqueId& id, int nranks, int rank, bool blocking) {
  auto* c = new Comm();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  if (blocking) connectInto(c, id);
  else c->init = std::thread([c, id] { connectInto(c, id); });
  return c;
}

void freeComm(Comm* c, bool abort) {
  if (abort) {
    c->aborted = true;
    for (int fd : c->fds) if (fd >= 0) shutdown(fd, SHUT_RDWR);  // peers see the connection break
  }
  if (c->init.joinable()) c->init.join();
  while (c->pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int fd : c->fds) if (fd >= 0) close(fd);
  if (c->listenFd >= 0) close(c->listenFd);
  for (auto& r : c->registered) delete static_cast<char*>(r.first);
  delete c;
}

namespace {

// The host-side part of a split: agree on colors and keys over the parent's mesh,
// hand each new group an id from its first member, then connect the child.
int doSplit(Comm* c, int color, int key, Comm* child, const std::function<void()>& agreed) {
  const int n = c->nranks, me = c->rank;
  std::vector<int32_t> all(2 * n);
  all[2 * me] = color;
  all[2 * me + 1] = key;
  std::vector<Xfer> xfers;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    xfers.push_back({r, true, reinterpret_cast<char*>(&all[2 * me]), 8});
    xfers.push_back({r, false, reinterpret_cast<char*>(&all[2 * r]), 8});
  }
  try {
    transferAll(c->fds, xfers, c->aborted);
    std::vector<int> leader(n, -1);
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n && all[2 * r] >= 0; ++q) {
        if (all[2 * q] == all[2 * r]) { leader[r] = q; break; }
      }
    }
    UniqueId id{};
    std::vector<UniqueId> ids(n);
    xfers.clear();
    if (color >= 0 && leader[me] == me) {
      makeUniqueId(&id);
      for (int r = 0; r < n; ++r) {
        if (r != me && leader[r] == me) { ids[r] = id; xfers.push_back({r, true, reinterpret_cast<char*>(&ids[r]), sizeof id}); }
      }
    } else if (color >= 0) {
      xfers.push_back({leader[me], false, reinterpret_cast<char*>(&id), sizeof id});
    }
    transferAll(c->fds, xfers, c->aborted);
    if (agreed) agreed();
    if (!child) return kSuccess;
    std::vector<std::pair<int, int>> members;  // (key, parent rank), NCCL's order
    for (int r = 0; r < n; ++r) if (all[2 * r] == color) members.push_back({all[2 * r + 1], r});
    std::sort(members.begin(), members.end());
    child->nranks = static_cast<int>(members.size());
    for (size_t i = 0; i < members.size(); ++i) if (members[i].second == me) child->rank = static_cast<int>(i);
    connectInto(child, id);
    return child->asyncError.load();
  } catch (const NetError& e) {
    setError(c, std::string("split: ") + e.what());
    failComm(c, e.result);
    if (child) { setError(child, std::string("split: ") + e.what()); child->asyncError = e.result; }
    return e.result;
  }
}

}  // namespace

int splitComm(Comm* c, int color, int key, Comm** out, bool blocking) {
  *out = nullptr;
  if (int rc = checkIdle(c, "ncclCommSplit")) return rc;
  if (c->asyncError.load() != kSuccess) return kInvalidUsage;
  while (c->pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Comm* child = color >= 0 ? new Comm() : nullptr;
  if (child) child->blocking = blocking;
  if (!c->blocking) {
    // As NCCL with a nonblocking parent: the call returns at once with *out still
    // NULL, and the parent reports ncclInProgress. NCCL's thread writes the child once
    // the ranks agreed, and nothing orders that write after the parent's return to
    // ncclSuccess: NCCL 2.28 on an H200 left *out NULL when the parent already read
    // success. So the parent settles first here and the slot is written
    // NCCL_STANDIN_SPLIT_CHILD_LAG_US (2000) later; the child then finishes its own
    // initialisation.
    static const long lagUs = [] {
      const char* v = std::getenv("NCCL_STANDIN_SPLIT_CHILD_LAG_US");
      return v && *v ? std::atol(v) : 2000L;
    }();
    return later(c, [c, color, key, child, out] {
      doSplit(c, color, key, child, [&] {
        int expected = kInProgress;
        c->asyncError.compare_exchange_strong(expected, kSuccess);
        std::this_thread::sleep_for(std::chrono::microseconds(lagUs));
        __atomic_store_n(out, child, __ATOMIC_RELEASE);
      });
    });
  }
  const int rc = doSplit(c, color, key, child, nullptr);
  *out = child;
  return rc;
}

}  // namespace standin

// Stand-in for libcuda.so.1: the driver entry points nccl-node uses, with the real
// names and C ABI, so CI runs the GPU code path without a GPU. "Device memory" is
// host memory (memfd-backed, so dmabuf export hands out a real fd) behind device
// pointers in a non-canonical address range: dereferencing one on the host faults,
// and every copy checks its range against the allocation table. Each stream is an
// in-order queue executed by its own thread, so asynchrony, events and polling are
// as real as on a GPU. Kernels: see cuda_standin_kernels.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_standin_kernels.h"
#include "standin_cuda_ext.h"

struct CUevent_st;

namespace {

enum : int {
  OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_DEVICE = 101,
  INVALID_IMAGE = 200, INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600,
  HOST_MEMORY_ALREADY_REGISTERED = 712, HOST_MEMORY_NOT_REGISTERED = 713, NOT_SUPPORTED = 801,
};

constexpr CUdeviceptr kBase = 0x9000000000000000ULL;  // non-canonical: host loads fault
constexpr size_t kAlign = 4096;
// cuMemAlloc promises 256-byte alignment, not pages: allocations start 256 bytes past a
// page boundary so code that assumes page alignment fails here as it would on a GPU.
constexpr size_t kAllocSkew = 256;

std::atomic<bool> initialized{false};
int numDevices() {
  const char* e = std::getenv("CUDA_STANDIN_DEVICES");
  return e ? std::atoi(e) : 8;
}

struct Context { int device; };
Context contexts[64];
thread_local Context* current = nullptr;

struct Alloc { void* host; size_t bytes; int fd; int device; size_t skew; };
std::mutex allocMu;
std::map<CUdeviceptr, Alloc> allocs;
CUdeviceptr nextPtr = kBase;

void* hostOf(CUdeviceptr p, size_t bytes) {
  std::lock_guard<std::mutex> lock(allocMu);
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (p + bytes > it->first + it->second.bytes || p < it->first) return nullptr;
  return static_cast<char*>(it->second.host) + (p - it->first);
}

// One executor thread per stream: work runs in issue order, off the caller's thread.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  bool busy = false, stop = false;
  std::thread thread;
  Stream() : thread([this] { loop(); }) {}
  ~Stream() {
    { std::lock_guard<std::mutex> l(mu); stop = true; }
    cv.notify_all();
    thread.join();
  }
  void loop() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      cv.wait(l, [this] { return stop || !work.empty(); });
      if (work.empty()) return;
      auto fn = std::move(work.front());
      work.pop_front();
      busy = true;
      l.unlock();
      fn();
      l.lock();
      busy = false;
      cv.notify_all();
    }
  }
  void push(std::function<void()> fn) {
    { std::lock_guard<std::mutex> l(mu); work.push_back(std::move(fn)); }
    cv.notify_all();
  }
  bool idle() { std::lock_guard<std::mutex> l(mu); return work.empty() && !busy; }
  void drain() { std::unique_lock<std::mutex> l(mu); cv.wait(l, [this] { return work.empty() && !busy; }); }
};

Stream* defaultStream() {
  static Stream* s = new Stream();  // leaked: lives as long as the process
  return s;
}
Stream* streamOf(CUstream s) { return s ? reinterpret_cast<Stream*>(s) : defaultStream(); }

struct Event {
  bool timing = true;  // false with CU_EVENT_DISABLE_TIMING
  std::atomic<uint64_t> recorded{0}, completed{0};
  std::chrono::steady_clock::time_point when;
};
std::mutex eventMu;
std::condition_variable eventCv;

int checkCtx() {
  if (!initialized) return NOT_INITIALIZED;
  return current ? OK : INVALID_CONTEXT;
}

}  // namespace

extern "C" {

int cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  initialized = true;
  return OK;
}
// CUDA_STANDIN_DRIVER_VERSION=12080 plays an older driver (default: CUDA 13.0, R580).
int cuDriverGetVersion(int* v) {
  if (!v) return INVALID_VALUE;
  const char* e = std::getenv("CUDA_STANDIN_DRIVER_VERSION");
  *v = e && *e ? std::atoi(e) : 13000;
  return OK;
}
int cuGetErrorName(int r, const char** s) {
  static const std::map<int, const char*> names = {
      {OK, "CUDA_SUCCESS"}, {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"}, {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
      {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"}, {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"}, {INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
      {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"}, {NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
      {NOT_READY, "CUDA_ERROR_NOT_READY"}, {NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
      {HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
      {HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"}};
  auto it = names.find(r);
  if (!s) return INVALID_VALUE;
  *s = it == names.end() ? nullptr : it->second;
  return it == names.end() ? INVALID_VALUE : OK;
}
int cuGetErrorString(int r, const char** s) {
  const char* name = nullptr;
  int rc = cuGetErrorName(r, &name);
  if (s) *s = rc == OK ? "stand-in driver error" : nullptr;
  return rc;
}
int cuDeviceGetCount(int* n) { if (!initialized) return NOT_INITIALIZED; *n = numDevices(); return OK; }
int cuDeviceGet(int* d, int ordinal) {
  if (!initialized) return NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= numDevices()) return INVALID_DEVICE;
  *d = ordinal;
  return OK;
}
int cuDeviceGetName(char* name, int len, int dev) {
  if (dev < 0 || dev >= numDevices()) return INVALID_DEVICE;
  snprintf(name, len, "nccl-node stand-in GPU %d", dev);
  return OK;
}
int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev >= numDevices()) return INVALID_DEVICE;
  switch (attr) {
    case 33: *v = 0x18 + dev; return OK;   // PCI bus id
    case 34: *v = 0; return OK;            // PCI device id
    case 50: *v = 0; return OK;            // PCI domain id
    case 75: *v = 9; return OK;            // compute capability 9.0
    case 76: *v = 0; return OK;
    case 16: *v = 132; return OK;          // multiprocessors
    default: *v = 0; return OK;
  }
}
int cuDeviceTotalMem_v2(size_t* b, int dev) { *b = size_t(80) << 30; return dev < numDevices() ? OK : INVALID_DEVICE; }
int cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (!initialized) return NOT_INITIALIZED;
  if (dev < 0 || dev >= numDevices() || dev >= 64) return INVALID_DEVICE;
  contexts[dev].device = dev;
  *ctx = &contexts[dev];
  return OK;
}
int cuCtxSetCurrent(void* ctx) { current = static_cast<Context*>(ctx); return OK; }
int cuCtxGetCurrent(void** ctx) { *ctx = current; return OK; }

}  // extern "C"

namespace {

// One allocation: a memfd mapping of whole pages; the device pointer sits `skew` bytes
// into it (0 for page-aligned allocations, as ncclMemAlloc's granularity gives).
int allocate(CUdeviceptr* p, size_t bytes, size_t skew) {
  if (int rc = checkCtx()) return rc;
  if (!p || bytes == 0) return INVALID_VALUE;
  const size_t usable = (bytes + 255) / 256 * 256;
  const size_t mapped = (usable + skew + kAlign - 1) / kAlign * kAlign;
  const int fd = memfd_create("cuda-standin", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, mapped) != 0) { if (fd >= 0) close(fd); return OUT_OF_MEMORY; }
  void* host = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (host == MAP_FAILED) { close(fd); return OUT_OF_MEMORY; }
  std::lock_guard<std::mutex> lock(allocMu);
  *p = nextPtr + skew;
  nextPtr += mapped + kAlign;  // a guard gap: off-by-one ranges never hit a neighbour
  allocs[*p] = Alloc{static_cast<char*>(host) + skew, usable, fd, current->device, skew};
  return OK;
}

}  // namespace

extern "C" {

int cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return allocate(p, bytes, kAllocSkew); }
int cuStandinMemAllocAligned(CUdeviceptr* p, size_t bytes) { return allocate(p, bytes, 0); }
int cuMemFree_v2(CUdeviceptr p) {
  if (int rc = checkCtx()) return rc;
  std::lock_guard<std::mutex> lock(allocMu);
  auto it = allocs.find(p);
  if (it == allocs.end()) return INVALID_VALUE;
  const Alloc& a = it->second;
  munmap(static_cast<char*>(a.host) - a.skew, (a.bytes + a.skew + kAlign - 1) / kAlign * kAlign);
  close(a.fd);
  allocs.erase(it);
  return OK;
}
int cuMemGetInfo_v2(size_t* free, size_t* total) { *free = *total = size_t(80) << 30; return OK; }

// The driver refuses to page-lock a range that overlaps one already registered, and
// to unregister an address that no registration starts at.
std::mutex hostRegMu;
std::map<uintptr_t, size_t> hostRegistered;
int cuMemHostRegister_v2(void* p, size_t bytes, unsigned) {
  if (!p || !bytes) return INVALID_VALUE;
  if (int rc = checkCtx()) return rc;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(hostRegMu);
  auto next = hostRegistered.lower_bound(a);
  if (next != hostRegistered.end() && next->first < a + bytes) return HOST_MEMORY_ALREADY_REGISTERED;
  if (next != hostRegistered.begin() && std::prev(next)->first + std::prev(next)->second > a) {
    return HOST_MEMORY_ALREADY_REGISTERED;
  }
  hostRegistered[a] = bytes;
  return OK;
}
int cuMemHostUnregister(void* p) {
  if (!p) return INVALID_VALUE;
  if (int rc = checkCtx()) return rc;
  std::lock_guard<std::mutex> lock(hostRegMu);
  return hostRegistered.erase(reinterpret_cast<uintptr_t>(p)) ? OK : HOST_MEMORY_NOT_REGISTERED;
}

int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  if (int rc = checkCtx()) return rc;
  void* d = hostOf(dst, n);
  if (!d || (!src && n)) return INVALID_VALUE;
  streamOf(s)->push([=] { std::memcpy(d, src, n); });
  return OK;
}
int cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  if (int rc = checkCtx()) return rc;
  void* h = hostOf(src, n);
  if (!h || (!dst && n)) return INVALID_VALUE;
  streamOf(s)->push([=] { std::memcpy(dst, h, n); });
  return OK;
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if (int rc = checkCtx()) return rc;
  void* d = hostOf(dst, n);
  void* h = hostOf(src, n);
  if (!d || !h) return INVALID_VALUE;
  streamOf(s)->push([=] { std::memmove(d, h, n); });
  return OK;
}
int cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  if (int rc = checkCtx()) return rc;
  void* d = hostOf(dst, n);
  if (!d) return INVALID_VALUE;
  streamOf(s)->push([=] { std::memset(d, v, n); });
  return OK;
}

int cuStreamCreate(CUstream* s, unsigned flags) {
  if (int rc = checkCtx()) return rc;
  if (!s || flags > 1) return INVALID_VALUE;
  *s = reinterpret_cast<CUstream>(new Stream());
  return OK;
}
int cuStreamDestroy_v2(CUstream s) {
  if (!s) return INVALID_HANDLE;
  Stream* st = streamOf(s);
  st->drain();  // the driver lets queued work finish before the stream goes away
  delete st;
  return OK;
}
int cuStreamQuery(CUstream s) { return streamOf(s)->idle() ? OK : NOT_READY; }
int cuStreamSynchronize(CUstream s) { streamOf(s)->drain(); return OK; }

int cuEventCreate(CUevent_st** e, unsigned flags) {
  if (int rc = checkCtx()) return rc;
  auto* ev = new Event();
  ev->timing = (flags & 2) == 0;
  *e = reinterpret_cast<CUevent_st*>(ev);
  return OK;
}
int cuEventDestroy_v2(CUevent_st* e) { delete reinterpret_cast<Event*>(e); return OK; }
int cuEventRecord(CUevent_st* ev, CUstream s) {
  if (!ev) return INVALID_HANDLE;
  Event* e = reinterpret_cast<Event*>(ev);
  const uint64_t gen = ++e->recorded;
  streamOf(s)->push([e, gen] {
    e->when = std::chrono::steady_clock::now();
    { std::lock_guard<std::mutex> l(eventMu); e->completed = gen; }
    eventCv.notify_all();
  });
  return OK;
}
int cuEventQuery(CUevent_st* ev) {
  Event* e = reinterpret_cast<Event*>(ev);
  return e->completed.load() >= e->recorded.load() ? OK : NOT_READY;
}
int cuEventSynchronize(CUevent_st* ev) {
  Event* e = reinterpret_cast<Event*>(ev);
  const uint64_t gen = e->recorded.load();
  std::unique_lock<std::mutex> l(eventMu);
  eventCv.wait(l, [&] { return e->completed.load() >= gen; });
  return OK;
}
int cuStreamWaitEvent(CUstream s, CUevent_st* ev, unsigned) {
  Event* e = reinterpret_cast<Event*>(ev);
  const uint64_t gen = e->recorded.load();
  streamOf(s)->push([e, gen] {
    std::unique_lock<std::mutex> l(eventMu);
    eventCv.wait(l, [&] { return e->completed.load() >= gen; });
  });
  return OK;
}
static int elapsed(float* ms, CUevent_st* a, CUevent_st* b) {
  Event* x = reinterpret_cast<Event*>(a);
  Event* y = reinterpret_cast<Event*>(b);
  if (!ms || !x || !y) return INVALID_VALUE;
  // As the driver: events without timing, or never recorded, have no time to compare.
  if (!x->timing || !y->timing || x->recorded.load() == 0 || y->recorded.load() == 0) return INVALID_HANDLE;
  if (cuEventQuery(a) != OK || cuEventQuery(b) != OK) return NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(y->when - x->when).count();
  return OK;
}
int cuEventElapsedTime(float* ms, CUevent_st* a, CUevent_st* b) { return elapsed(ms, a, b); }
int cuEventElapsedTime_v2(float* ms, CUevent_st* a, CUevent_st* b) { return elapsed(ms, a, b); }

// dmabuf export: a dup of the allocation's memfd, so the fd maps the live bytes (from
// the allocation's first page). The range must be page-aligned and inside one allocation.
int cuMemGetHandleForAddressRange(void* handle, CUdeviceptr p, unsigned long long bytes, int type,
                                  unsigned long long flags) {
  if (int rc = checkCtx()) return rc;
  if (type != 1 || flags != 0 || !handle) return INVALID_VALUE;
  if (p % kAlign != 0 || bytes % kAlign != 0) return INVALID_VALUE;  // the driver wants page granularity
  std::lock_guard<std::mutex> lock(allocMu);
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return INVALID_VALUE;
  --it;
  if (p < it->first || p + bytes > it->first + it->second.bytes) return INVALID_VALUE;
  *static_cast<int*>(handle) = dup(it->second.fd);
  return OK;
}

int cuStandinEnqueue(CUstream s, void (*fn)(void*), void* arg) {
  streamOf(s)->push([fn, arg] { fn(arg); });
  return OK;
}
void* cuStandinHostPtr(CUdeviceptr p, size_t bytes) { return hostOf(p, bytes); }

// Modules: the image must contain a known kernel's name; launches run its host twin.
int cuModuleLoadData(void** module, const void* image) {
  if (int rc = checkCtx()) return rc;
  if (!image) return INVALID_VALUE;
  *module = standinModuleLoad(image);
  return *module ? OK : INVALID_IMAGE;
}
int cuModuleGetFunction(void** fn, void* module, const char* name) {
  *fn = standinModuleFunction(module, name);
  return *fn ? OK : NOT_FOUND;
}
int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, CUstream s, void** params, void** extra) {
  if (int rc = checkCtx()) return rc;
  if (!fn || !params || extra) return INVALID_VALUE;
  std::function<void()> work;
  const int rc = standinPrepareLaunch(fn, params, &work);
  if (rc != 0) return rc;
  streamOf(s)->push(std::move(work));
  return OK;
}

}  // extern "C"

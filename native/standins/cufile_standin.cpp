// Stand-in libcufile.so.0 (GPUDirect Storage) for machines without a GPU: the
// real cuFile C ABI (declared here, no NVIDIA headers), moving bytes between a
// file and the stand-in libcuda's "device" memory, which lives in host memory
// (cuStandinHostPtr), with plain pread/pwrite. Enough to test a writer's GDS
// path and its fallback; it models none of GDS's performance.
// Test knobs: CUFILE_STANDIN_FAIL=<driver|handle|buf|write|read> makes that call
// fail as the real library can (driver open refused, handle refused, I/O error);
// CUFILE_STANDIN_LOG=<file> appends one line per call ("write <bytes> <fileOff>"),
// so a test sees independently that data went through cuFile.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "standin_cuda_ext.h"

extern "C" {
// cufile.h: CUfileError_t is {CUfileOpError err; CUresult cu_err;}, both ints; 0 is success.
struct CUfileError_t {
  int err;
  int cu_err;
};
// CUfileOpError values of cufile.h (CUFILEOP_BASE_ERR 5000).
enum {
  CU_FILE_SUCCESS = 0, CU_FILE_DRIVER_NOT_INITIALIZED = 5001, CU_FILE_PLATFORM_NOT_SUPPORTED = 5007,
  CU_FILE_IO_NOT_SUPPORTED = 5008, CU_FILE_INVALID_FILE_OPEN_FLAG = 5019, CU_FILE_INVALID_VALUE = 5022,
  CU_FILE_MEMORY_NOT_REGISTERED = 5024, CU_FILE_HANDLE_NOT_REGISTERED = 5027,
};
enum { CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1 };
struct CUfileDescr_t {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
typedef void* CUfileHandle_t;
}

namespace {
std::mutex mu;
int opens = 0;                         // cuFileDriverOpen/Close nest, as in the real library
std::map<uintptr_t, size_t> regions;  // registered device buffers: base -> length

CUfileError_t status(int e) { return CUfileError_t{e, 0}; }
bool failing(const char* call) {
  const char* f = std::getenv("CUFILE_STANDIN_FAIL");
  return f && std::strcmp(f, call) == 0;
}
void logCall(const char* call, size_t bytes, off_t off) {
  const char* path = std::getenv("CUFILE_STANDIN_LOG");
  if (!path || !*path) return;
  std::lock_guard<std::mutex> l(mu);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %zu %lld\n", call, bytes, static_cast<long long>(off));
    std::fclose(f);
  }
}
bool driverOpen() {
  std::lock_guard<std::mutex> l(mu);
  return opens > 0;
}
// Host address of [base + off, +n) of "device" memory, or null if outside an allocation.
void* hostOf(const void* base, off_t off, size_t n) {
  return cuStandinHostPtr(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(base) + off), n);
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) CUfileError_t cuFileDriverOpen(void) {
  if (failing("driver")) return status(CU_FILE_PLATFORM_NOT_SUPPORTED);  // e.g. nvidia-fs not loaded
  std::lock_guard<std::mutex> l(mu);
  opens++;
  return status(CU_FILE_SUCCESS);
}

__attribute__((visibility("default"))) CUfileError_t cuFileDriverClose(void) {
  std::lock_guard<std::mutex> l(mu);
  if (opens == 0) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
  opens--;
  return status(CU_FILE_SUCCESS);
}

// cufile.h maps cuFileDriverClose to cuFileDriverClose_v2 (reference-counted); the
// real library exports both names, so does this one.
__attribute__((visibility("default"))) CUfileError_t cuFileDriverClose_v2(void) { return cuFileDriverClose(); }

__attribute__((visibility("default"))) CUfileError_t cuFileHandleRegister(CUfileHandle_t* fh, CUfileDescr_t* d) {
  if (!driverOpen()) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (!fh || !d || d->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD || d->handle.fd < 0) return status(CU_FILE_INVALID_VALUE);
  // GDS's direct path needs O_DIRECT (the real library refuses other fds unless
  // configured for compatibility mode, which this stand-in does not model).
  const int fl = fcntl(d->handle.fd, F_GETFL);
  if (fl < 0) return status(CU_FILE_INVALID_VALUE);
  if (!(fl & O_DIRECT)) return status(CU_FILE_INVALID_FILE_OPEN_FLAG);
  if (failing("handle")) return status(CU_FILE_IO_NOT_SUPPORTED);  // e.g. a file system GDS does not support
  // The real library moves unaligned ranges through its own bounce buffers; here the
  // bytes go through a buffered descriptor of the same file (an O_DIRECT pwrite of
  // an unaligned host range would fail with EINVAL).
  const int io = open(("/proc/self/fd/" + std::to_string(d->handle.fd)).c_str(), (fl & O_ACCMODE) | O_CLOEXEC);
  if (io < 0) return status(CU_FILE_INVALID_VALUE);
  *fh = new int(io);
  logCall("handle", 0, 0);
  return status(CU_FILE_SUCCESS);
}

__attribute__((visibility("default"))) void cuFileHandleDeregister(CUfileHandle_t fh) {
  if (!fh) return;
  close(*static_cast<int*>(fh));
  delete static_cast<int*>(fh);
}

__attribute__((visibility("default"))) CUfileError_t cuFileBufRegister(const void* base, size_t length, int /*flags*/) {
  if (!driverOpen()) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (!hostOf(base, 0, length)) return status(CU_FILE_INVALID_VALUE);  // not device memory
  if (failing("buf")) return status(CU_FILE_INVALID_VALUE);
  std::lock_guard<std::mutex> l(mu);
  regions[reinterpret_cast<uintptr_t>(base)] = length;
  return status(CU_FILE_SUCCESS);
}

__attribute__((visibility("default"))) CUfileError_t cuFileBufDeregister(const void* base) {
  std::lock_guard<std::mutex> l(mu);
  return status(regions.erase(reinterpret_cast<uintptr_t>(base)) ? CU_FILE_SUCCESS : CU_FILE_MEMORY_NOT_REGISTERED);
}

// Like the real calls: bytes moved; -1 with errno for a system error, -CU_FILE_* for a cuFile one.
__attribute__((visibility("default"))) ssize_t cuFileRead(CUfileHandle_t fh, void* base, size_t size, off_t fileOff, off_t devOff) {
  if (!fh) return -CU_FILE_HANDLE_NOT_REGISTERED;
  void* p = hostOf(base, devOff, size);
  if (!p) return -CU_FILE_INVALID_VALUE;  // not device memory, or the range runs past the allocation
  if (failing("read")) return errno = EIO, -1;
  logCall("read", size, fileOff);
  size_t done = 0;
  while (done < size) {
    ssize_t r = pread(*static_cast<int*>(fh), static_cast<char*>(p) + done, size - done, fileOff + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? -1 : static_cast<ssize_t>(done);  // EOF: a short read, as pread
    done += r;
  }
  return static_cast<ssize_t>(done);
}

__attribute__((visibility("default"))) ssize_t cuFileWrite(CUfileHandle_t fh, const void* base, size_t size, off_t fileOff, off_t devOff) {
  if (!fh) return -CU_FILE_HANDLE_NOT_REGISTERED;
  const void* p = hostOf(base, devOff, size);
  if (!p) return -CU_FILE_INVALID_VALUE;
  if (failing("write")) return errno = EIO, -1;
  logCall("write", size, fileOff);
  size_t done = 0;
  while (done < size) {
    ssize_t r = pwrite(*static_cast<int*>(fh), static_cast<const char*>(p) + done, size - done, fileOff + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    done += r;
  }
  return static_cast<ssize_t>(done);
}
}

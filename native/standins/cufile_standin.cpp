// Stand-in libcufile.so.0 (GPUDirect Storage) for machines without a GPU: the
// real cuFile C ABI (declared here, no NVIDIA headers), moving bytes between a
// file and the stand-in libcuda's "device" memory, which lives in host memory
// (cuStandinHostPtr), with plain pread/pwrite. Enough to test a writer's GDS
// path and its fallback; it models none of GDS's performance.
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "standin_cuda_ext.h"

extern "C" {
// cufile.h: CUfileError_t is {CUfileOpError err; CUresult cu_err;}, both ints; 0 is success.
struct CUfileError_t {
  int err;
  int cu_err;
};
enum { CU_FILE_SUCCESS = 0, CU_FILE_DRIVER_NOT_INITIALIZED = 5001, CU_FILE_INVALID_VALUE = 5022, CU_FILE_MEMORY_NOT_REGISTERED = 5011 };
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

__attribute__((visibility("default"))) CUfileError_t cuFileHandleRegister(CUfileHandle_t* fh, CUfileDescr_t* d) {
  if (!driverOpen()) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (!fh || !d || d->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD || d->handle.fd < 0) return status(CU_FILE_INVALID_VALUE);
  *fh = new int(d->handle.fd);
  return status(CU_FILE_SUCCESS);
}

__attribute__((visibility("default"))) void cuFileHandleDeregister(CUfileHandle_t fh) { delete static_cast<int*>(fh); }

__attribute__((visibility("default"))) CUfileError_t cuFileBufRegister(const void* base, size_t length, int /*flags*/) {
  if (!driverOpen()) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (!hostOf(base, 0, length)) return status(CU_FILE_INVALID_VALUE);  // not device memory
  std::lock_guard<std::mutex> l(mu);
  regions[reinterpret_cast<uintptr_t>(base)] = length;
  return status(CU_FILE_SUCCESS);
}

__attribute__((visibility("default"))) CUfileError_t cuFileBufDeregister(const void* base) {
  std::lock_guard<std::mutex> l(mu);
  return status(regions.erase(reinterpret_cast<uintptr_t>(base)) ? CU_FILE_SUCCESS : CU_FILE_MEMORY_NOT_REGISTERED);
}

// Like the real calls: bytes moved, or -1 with errno set (negative CU_FILE codes are not modelled).
__attribute__((visibility("default"))) ssize_t cuFileRead(CUfileHandle_t fh, void* base, size_t size, off_t fileOff, off_t devOff) {
  void* p = fh ? hostOf(base, devOff, size) : nullptr;
  if (!p) return errno = EINVAL, -1;
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
  const void* p = fh ? hostOf(base, devOff, size) : nullptr;
  if (!p) return errno = EINVAL, -1;
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

// Synchronous copies between host memory and one device's memory on a private
// stream, for the I/O threads: the fallback writer stages device segments through
// its blocks, the GDS writer copies each block back to the host for its CRC, and
// reads land in DeviceBuffers. Plain C++ over the dlopened driver (cuda_api.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../cuda/cuda_api.h"

namespace ncclnode {

class DeviceCopier {
 public:
  // Makes `device` current on this thread and creates the stream. Throws Error(Unavailable | Cuda).
  explicit DeviceCopier(int device);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  int device() const { return device_; }
  // Page-locks [p, p+n) for this copier's lifetime (cuMemHostRegister), so copies to
  // and from it are DMA and truly asynchronous. Best effort: a refusal (locked-memory
  // limit) leaves it pageable, which is slower but still correct. Free it after the copier.
  void pin(void* p, size_t n);
  // Queued on the stream; the host memory must stay untouched until sync().
  void toHostAsync(void* dst, CUdeviceptr src, size_t n);
  void toDeviceAsync(CUdeviceptr dst, const void* src, size_t n);
  void sync();
  void toHost(void* dst, CUdeviceptr src, size_t n) { toHostAsync(dst, src, n); sync(); }
  void toDevice(CUdeviceptr dst, const void* src, size_t n) { toDeviceAsync(dst, src, n); sync(); }

 private:
  int device_;
  CUstream stream_ = nullptr;
  CUresult (*sync_)(CUstream) = nullptr;
  std::vector<void*> pinned_;
};

}  // namespace ncclnode

#include "device_copy.h"

#include "../core/errors.h"
#include "../cuda/dl.h"

namespace ncclnode {

DeviceCopier::DeviceCopier(int device) : device_(device) {
  const CudaApi& api = cuda();
  useDevice(device);
  // cuStreamSynchronize is not in CudaApi (the GPU half polls events instead); an I/O
  // thread may block, so it resolves the symbol itself.
  sync_ = reinterpret_cast<CUresult (*)(CUstream)>(symbol(api.lib, "cuStreamSynchronize"));
  if (!sync_) throw Error(Code::Unavailable, "the CUDA driver " + api.path + " lacks cuStreamSynchronize");
  cuCheck(api.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
}

DeviceCopier::~DeviceCopier() {
  if (!stream_) return;
  sync_(stream_);
  cuda().cuStreamDestroy(stream_);
  for (void* p : pinned_) cuda().cuMemHostUnregister(p);
}

void DeviceCopier::pin(void* p, size_t n) {
  if (cuda().cuMemHostRegister(p, n, 0) == kCudaSuccess) pinned_.push_back(p);
}

void DeviceCopier::toHostAsync(void* dst, CUdeviceptr src, size_t n) {
  if (n) cuCheck(cuda().cuMemcpyDtoHAsync(dst, src, n, stream_), "cuMemcpyDtoHAsync");
}

void DeviceCopier::toDeviceAsync(CUdeviceptr dst, const void* src, size_t n) {
  if (n) cuCheck(cuda().cuMemcpyHtoDAsync(dst, src, n, stream_), "cuMemcpyHtoDAsync");
}

void DeviceCopier::sync() { cuCheck(sync_(stream_), "cuStreamSynchronize"); }

}  // namespace ncclnode

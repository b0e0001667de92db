// NativeDeviceBuffer: one device allocation (cuMemAlloc, or ncclMemAlloc on NCCL >=
// 2.19 when asked), with async copies to and from host memory and other buffers.
// src/gpu/device-buffer.ts adds dtype and length on top.
#pragma once

#include <napi.h>

#include <memory>

#include "cuda_api.h"

namespace ncclnode {

// One device allocation, freed when the last holder lets go: the DeviceBuffer that
// made it until dispose(), and every communicator op that was handed it
// (BufferView::keep) until the op settles, and each checkpoint I/O call likewise (io_queue.h,
// IoHold). So a buffer disposed under a queued collective is freed after the
// collective, not under it (cuMemFree itself waits for work already on the GPU, but
// not for an op still waiting in a communicator's queue).
struct DeviceAllocation {
  CUdeviceptr ptr = 0;
  int device = 0;
  bool ncclMem = false;
  DeviceAllocation() = default;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  ~DeviceAllocation();
};

class DeviceBufferWrap : public Napi::ObjectWrap<DeviceBufferWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  // (byteLength, device, useNcclMemAlloc), or (parent, byteOffset, byteLength): a view
  // into the parent's memory that keeps the parent alive and never frees.
  explicit DeviceBufferWrap(const Napi::CallbackInfo& info);
  ~DeviceBufferWrap() override;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  bool disposed() const { return ptr_ == 0 || (parentWrap_ && parentWrap_->disposed()); }
  // The allocation this buffer (or view) lies in, for an op to hold while it runs.
  std::shared_ptr<DeviceAllocation> allocation() const { return parentWrap_ ? parentWrap_->alloc_ : alloc_; }

 private:
  void free();
  CUdeviceptr checked(const char* call) const;
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value CopyFromHost(const Napi::CallbackInfo& info);   // (view, dstOffset, stream?) -> Promise
  Napi::Value CopyToHost(const Napi::CallbackInfo& info);     // (view, srcOffset, stream?) -> Promise
  Napi::Value CopyFromDevice(const Napi::CallbackInfo& info); // (src, bytes, dstOffset, srcOffset, stream?) -> Promise
  Napi::Value Memset(const Napi::CallbackInfo& info);         // (byte, stream?) -> Promise
  Napi::Value ExportDmabuf(const Napi::CallbackInfo& info);   // (offset, bytes) -> fd
  Napi::Value GetPtr(const Napi::CallbackInfo& info);
  Napi::Value GetBytes(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetDisposed(const Napi::CallbackInfo& info);
  Napi::Value GetAllocator(const Napi::CallbackInfo& info);

  CUdeviceptr ptr_ = 0;  // 0 once disposed
  std::shared_ptr<DeviceAllocation> alloc_;  // owners only; views reach the owner's
  size_t bytes_ = 0;
  int device_ = 0;
  bool ncclMem_ = false;
  DeviceBufferWrap* parentWrap_ = nullptr;  // views only; parent_ keeps it alive
  Napi::ObjectReference parent_;
};

// The stream argument of an async call: a NativeStream, or undefined for the null stream.
CUstream streamArg(const Napi::Value& v);

}  // namespace ncclnode

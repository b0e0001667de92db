// NativeDeviceBuffer: one device allocation (cuMemAlloc, or ncclMemAlloc on NCCL >=
// 2.19 when asked), with async copies to and from host memory and other buffers.
// src/gpu/device-buffer.ts adds dtype and length on top.
#pragma once

#include <napi.h>

#include "cuda_api.h"

namespace ncclnode {

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

  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  int device_ = 0;
  bool ncclMem_ = false;
  DeviceBufferWrap* parentWrap_ = nullptr;  // views only; parent_ keeps it alive
  Napi::ObjectReference parent_;
};

// The stream argument of an async call: a NativeStream, or undefined for the null stream.
CUstream streamArg(const Napi::Value& v);

}  // namespace ncclnode

#include "device_buffer.h"

#include <unistd.h>

#include "../core/buffers.h"
#include "../core/js_errors.h"
#include "../nccl/nccl_api.h"
#include "gpu_env.h"
#include "poller.h"
#include "stream_wrap.h"

namespace ncclnode {

namespace {

size_t sizeArg(const Napi::Value& v, const char* what) {
  if (!v.IsNumber()) throw Error(Code::InvalidArgument, std::string(what) + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (d < 0 || d > 9007199254740991.0 || d != static_cast<double>(static_cast<size_t>(d))) {
    throw Error(Code::InvalidArgument, std::string(what) + " must be a non-negative integer");
  }
  return static_cast<size_t>(d);
}

void checkRange(size_t off, size_t n, size_t size, const char* call) {
  if (off > size || n > size - off) {
    throw Error(Code::SizeMismatch, std::string(call) + ": " + std::to_string(n) + " bytes at offset " +
                                        std::to_string(off) + " do not fit in a buffer of " + std::to_string(size) + " bytes");
  }
}

}  // namespace

const napi_type_tag kDeviceBufferTag = {0x6e63636c6e6f6465ULL, 0x6465766275660001ULL};

CUstream streamArg(const Napi::Value& v) {
  if (v.IsUndefined() || v.IsNull()) return nullptr;
  if (!hasTag(v.Env(), v, kStreamTag)) throw Error(Code::InvalidArgument, "stream: expected a Stream");
  return StreamWrap::Unwrap(v.As<Napi::Object>())->handle();
}

bool deviceBufferView(const Napi::Value& value, BufferView* out) {
  if (!value.IsObject() || !hasTag(value.Env(), value, kDeviceBufferTag)) return false;
  auto* b = DeviceBufferWrap::Unwrap(value.As<Napi::Object>());
  if (b->disposed()) throw Error(Code::InvalidArgument, "the DeviceBuffer was disposed");
  out->data = reinterpret_cast<void*>(b->ptr());
  out->bytes = b->bytes();
  out->mem = MemKind::Device;
  out->device = b->device();
  out->keep = b->allocation();  // disposed meanwhile, the memory lives until the op settles
  return true;
}

DeviceAllocation::~DeviceAllocation() {
  if (!ptr) return;
  try {
    useDevice(device);
    if (ncclMem) nccl().MemFree(reinterpret_cast<void*>(ptr));
    else cuda().cuMemFree(ptr);
  } catch (...) {
  }
}

Napi::Function DeviceBufferWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeDeviceBuffer",
                     {InstanceMethod<&DeviceBufferWrap::Dispose>("dispose"),
                      InstanceMethod<&DeviceBufferWrap::CopyFromHost>("copyFromHost"),
                      InstanceMethod<&DeviceBufferWrap::CopyToHost>("copyToHost"),
                      InstanceMethod<&DeviceBufferWrap::CopyFromDevice>("copyFromDevice"),
                      InstanceMethod<&DeviceBufferWrap::Memset>("memset"),
                      InstanceMethod<&DeviceBufferWrap::ExportDmabuf>("exportDmabuf"),
                      InstanceAccessor<&DeviceBufferWrap::GetPtr>("ptr"),
                      InstanceAccessor<&DeviceBufferWrap::GetBytes>("byteLength"),
                      InstanceAccessor<&DeviceBufferWrap::GetDevice>("device"),
                      InstanceAccessor<&DeviceBufferWrap::GetDisposed>("disposed"),
                      InstanceAccessor<&DeviceBufferWrap::GetAllocator>("allocator")});
}

DeviceBufferWrap::DeviceBufferWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceBufferWrap>(info) {
  Napi::Env env = info.Env();
  try {
    if (info[0].IsObject() && hasTag(env, info[0], kDeviceBufferTag)) {
      auto* parent = DeviceBufferWrap::Unwrap(info[0].As<Napi::Object>());
      if (parent->disposed()) throw Error(Code::InvalidArgument, "DeviceBuffer view: the parent was disposed");
      const size_t off = sizeArg(info[1], "byteOffset");
      bytes_ = sizeArg(info[2], "byteLength");
      checkRange(off, bytes_, parent->bytes_, "DeviceBuffer view");
      if (bytes_ == 0) throw Error(Code::InvalidArgument, "DeviceBuffer view: byteLength must be at least 1");
      ptr_ = parent->ptr_ + off;
      device_ = parent->device_;
      ncclMem_ = parent->ncclMem_;
      parentWrap_ = parent->parentWrap_ ? parent->parentWrap_ : parent;  // views of views share the owner
      parent_ = Napi::Persistent(parent->parentWrap_ ? parent->parent_.Value() : info[0].As<Napi::Object>());
      napi_type_tag_object(env, info.This(), &kDeviceBufferTag);
      return;
    }
    bytes_ = sizeArg(info[0], "byteLength");
    device_ = info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 0;
    ncclMem_ = info[2].ToBoolean().Value();
    if (bytes_ == 0) throw Error(Code::InvalidArgument, "DeviceBuffer: byteLength must be at least 1");
    useDevice(device_);
    auto alloc = std::make_shared<DeviceAllocation>();
    alloc->device = device_;
    if (ncclMem_) {
      const NcclApi& api = nccl();
      void* p = nullptr;
      ncclCheck(api, api.need(api.MemAlloc, "ncclMemAlloc", 21900)(&p, bytes_), "ncclMemAlloc", nullptr);
      alloc->ptr = reinterpret_cast<CUdeviceptr>(p);
      alloc->ncclMem = true;
    } else {
      cuCheck(cuda().cuMemAlloc(&alloc->ptr, bytes_), "cuMemAlloc");
    }
    ptr_ = alloc->ptr;
    alloc_ = std::move(alloc);
    napi_type_tag_object(env, info.This(), &kDeviceBufferTag);
  } catch (const Error& e) {
    makeError(env, e.code(), e.what()).ThrowAsJavaScriptException();
  }
}

DeviceBufferWrap::~DeviceBufferWrap() { free(); }

void DeviceBufferWrap::free() {
  // A view only forgets its address; the owner lets go of the allocation, which is
  // freed now unless an op in flight still holds it (then when that op settles).
  ptr_ = 0;
  alloc_.reset();
}

CUdeviceptr DeviceBufferWrap::checked(const char* call) const {
  if (disposed()) throw Error(Code::InvalidArgument, std::string(call) + ": the DeviceBuffer was disposed");
  return ptr_;
}

Napi::Value DeviceBufferWrap::Dispose(const Napi::CallbackInfo& info) {
  free();
  return info.Env().Undefined();
}

Napi::Value DeviceBufferWrap::CopyFromHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUdeviceptr p = checked("copyFromHost");
    BufferView h = hostViewOf(info[0], "copyFromHost");
    const size_t off = sizeArg(info[1], "offset");
    checkRange(off, h.bytes, bytes_, "copyFromHost");
    CUstream s = streamArg(info[2]);
    useDevice(device_);
    if (h.bytes) cuCheck(cuda().cuMemcpyHtoDAsync(p + off, h.data, h.bytes, s), "cuMemcpyHtoDAsync");
    // The copy may still read the host memory after this returns (pinned memory): hold it.
    return gpuEnv(env).poller->afterStream(env, device_, s, [memory = h.keep](Napi::Env e) { return e.Undefined(); },
                                           {info[0], Value()});
  });
}

Napi::Value DeviceBufferWrap::CopyToHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUdeviceptr p = checked("copyToHost");
    BufferView h = hostViewOf(info[0], "copyToHost");
    const size_t off = sizeArg(info[1], "offset");
    checkRange(off, h.bytes, bytes_, "copyToHost");
    CUstream s = streamArg(info[2]);
    useDevice(device_);
    if (h.bytes) cuCheck(cuda().cuMemcpyDtoHAsync(h.data, p + off, h.bytes, s), "cuMemcpyDtoHAsync");
    Napi::Reference<Napi::Value> target = Napi::Persistent(info[0]);
    auto keep = std::make_shared<Napi::Reference<Napi::Value>>(std::move(target));
    // The memory is held until the copy is done; a destination transferred meanwhile got
    // the data on its new owner's side, which is reported rather than lost silently.
    return gpuEnv(env).poller->afterStream(env, device_, s, [keep, memory = h.keep](Napi::Env) -> Napi::Value {
      if (detachedNow(keep->Value())) throw detachedDestination("copyToHost");
      return keep->Value();
    }, {info[0], Value()});
  });
}

Napi::Value DeviceBufferWrap::CopyFromDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUdeviceptr p = checked("copyFromDevice");
    BufferView src;
    if (!deviceBufferView(info[0], &src)) throw Error(Code::InvalidArgument, "copyFromDevice: expected a DeviceBuffer");
    const size_t n = sizeArg(info[1], "byteLength");
    const size_t dstOff = sizeArg(info[2], "dstOffset");
    const size_t srcOff = sizeArg(info[3], "srcOffset");
    checkRange(dstOff, n, bytes_, "copyFromDevice");
    checkRange(srcOff, n, src.bytes, "copyFromDevice");
    CUstream s = streamArg(info[4]);
    useDevice(device_);
    if (n) cuCheck(cuda().cuMemcpyDtoDAsync(p + dstOff, reinterpret_cast<CUdeviceptr>(src.data) + srcOff, n, s),
                   "cuMemcpyDtoDAsync");
    return gpuEnv(env).poller->afterStream(env, device_, s, nullptr, {info[0], Value()});
  });
}

Napi::Value DeviceBufferWrap::Memset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUdeviceptr p = checked("fill");
    const unsigned char byte = static_cast<unsigned char>(info[0].As<Napi::Number>().Uint32Value());
    CUstream s = streamArg(info[1]);
    useDevice(device_);
    cuCheck(cuda().cuMemsetD8Async(p, byte, bytes_, s), "cuMemsetD8Async");
    return gpuEnv(env).poller->afterStream(env, device_, s, nullptr, {Value()});
  });
}

// GPUDirect RDMA / storage: the range as a dmabuf file descriptor the caller owns.
Napi::Value DeviceBufferWrap::ExportDmabuf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CUdeviceptr p = checked("exportDmabuf");
    const size_t off = sizeArg(info[0], "offset");
    const size_t n = sizeArg(info[1], "byteLength");
    checkRange(off, n, bytes_, "exportDmabuf");
    const CudaApi& cu = cuda();
    if (!cu.cuMemGetHandleForAddressRange) {
      throw Error(Code::Unavailable, "exportDmabuf needs cuMemGetHandleForAddressRange (CUDA driver >= 11.7)");
    }
    // The driver exports whole host pages; cuMemAlloc only promises 256-byte alignment.
    const long page = sysconf(_SC_PAGESIZE);
    if ((p + off) % page != 0 || n % page != 0) {
      throw Error(Code::InvalidArgument,
                  "exportDmabuf: the range must start at a page-aligned device address and span whole pages (" +
                      std::to_string(page) + " bytes); got address " + std::to_string((p + off) % page) +
                      " bytes past a page and " + std::to_string(n) + " bytes (allocate with ncclMemAlloc, "
                      "which is page-aligned, or start at offset " + std::to_string((page - p % page) % page) + ")");
    }
    useDevice(device_);
    int fd = -1;
    cuCheck(cu.cuMemGetHandleForAddressRange(&fd, p + off, n, kMemRangeHandleTypeDmaBufFd, 0),
            "cuMemGetHandleForAddressRange");
    return Napi::Number::New(env, fd);
  });
}

Napi::Value DeviceBufferWrap::GetPtr(const Napi::CallbackInfo& info) {
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(ptr_));
}
Napi::Value DeviceBufferWrap::GetBytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(bytes_));
}
Napi::Value DeviceBufferWrap::GetDevice(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), device_); }
Napi::Value DeviceBufferWrap::GetDisposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), disposed()); }
Napi::Value DeviceBufferWrap::GetAllocator(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), ncclMem_ ? "ncclMemAlloc" : "cuMemAlloc");
}

}  // namespace ncclnode

#include "buffers.h"

#include <string>

#include "../cuda/gpu_env.h"

namespace ncclnode {

BufferView viewOf(const Napi::Value& value, const char* what) {
  BufferView v;
  if (deviceBufferView(value, &v)) return v;  // a NativeDeviceBuffer: device memory
  if (value.IsTypedArray()) {
    auto ta = value.As<Napi::TypedArray>();
    auto ab = ta.ArrayBuffer();
    v.data = static_cast<uint8_t*>(ab.Data()) + ta.ByteOffset();
    v.bytes = ta.ByteLength();
  } else if (value.IsDataView()) {
    auto dv = value.As<Napi::DataView>();
    v.data = static_cast<uint8_t*>(dv.ArrayBuffer().Data()) + dv.ByteOffset();
    v.bytes = dv.ByteLength();
  } else if (value.IsArrayBuffer()) {
    auto ab = value.As<Napi::ArrayBuffer>();
    v.data = ab.Data();
    v.bytes = ab.ByteLength();
  } else {
    throw Error(Code::InvalidArgument,
                std::string(what) + ": expected a TypedArray, DataView or ArrayBuffer, received " +
                    (value.IsUndefined() ? "undefined" : value.IsNull() ? "null" : "another type"));
  }
  v.mem = MemKind::Host;
  return v;
}

BufferView hostViewOf(const Napi::Value& value, const char* what) {
  BufferView v = viewOf(value, what);
  if (v.mem != MemKind::Host) throw Error(Code::InvalidArgument, std::string(what) + ": expected host memory, received a DeviceBuffer");
  return v;
}

}  // namespace ncclnode

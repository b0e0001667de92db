// Host memory and its lifetime. A collective reads and writes the caller's memory
// from the communicator's thread while JavaScript keeps running, and JavaScript
// can take that memory away at any time: structuredClone/postMessage with a
// transfer list, ArrayBuffer.prototype.transfer and transferToFixedLength detach
// the ArrayBuffer and hand its memory to a new owner, which may free it (or, for
// a transfer to another length, the old memory is freed at once). Node-API gives
// no way to make a buffer non-detachable or to keep its memory alive, so each
// view takes a reference to V8's BackingStore (a std::shared_ptr): the memory then
// lives until the operation settles, whatever happens to the ArrayBuffer. That
// costs one atomic increment per buffer, against a copy in and out of every byte
// (the alternative that works through Node-API alone), and is safe on every
// detaching path. Node's markAsUntransferable is not enough: it is permanent, and
// ArrayBuffer.prototype.transfer ignores it. The price is a dependency on V8's
// headers, which ties the addon to the Node.js major version it was built for
// (cmake-js builds it on install). A detach during an operation is reported when
// the operation settles (engine.cpp), since its results went to the new owner.
#include "buffers.h"

#include <atomic>
#include <string>

#include "v8_value.h"

namespace ncclnode {

namespace {

std::atomic<DeviceMemoryRecognizer> deviceRecognizer{nullptr};

std::string describe(const Napi::Value& value) {
  if (value.IsUndefined()) return "undefined";
  if (value.IsNull()) return "null";
  if (value.IsNumber()) return "a number";
  if (value.IsString()) return "a string";
  if (value.IsBigInt()) return "a bigint";
  if (value.IsBoolean()) return "a boolean";
  if (value.IsArray()) return "an Array";
  if (value.IsFunction()) return "a function";
  if (value.IsObject()) {
    auto o = value.As<Napi::Object>();
    if (o.Has("device") && o.Has("dtype")) {
      return "an object with device and dtype that is not a DeviceBuffer (device memory comes from "
             "DeviceBuffer.alloc or DeviceBuffer.from)";
    }
    Napi::Value ctor = o.Get("constructor");
    if (ctor.IsFunction()) {
      std::string name = ctor.As<Napi::Object>().Get("name").ToString().Utf8Value();
      if (!name.empty() && name != "Object") return "a " + name;
    }
    return "a plain object";
  }
  return "another type";
}

// The backing store of an ArrayBuffer or SharedArrayBuffer (as a Value), with the
// checks that make holding it safe.
std::shared_ptr<v8::BackingStore> storeOf(v8::Local<v8::Value> buffer, const char* what) {
  if (buffer->IsSharedArrayBuffer()) return buffer.As<v8::SharedArrayBuffer>()->GetBackingStore();
  auto ab = buffer.As<v8::ArrayBuffer>();
  if (ab->WasDetached()) {
    throw Error(Code::InvalidArgument, std::string(what) + ": its ArrayBuffer is detached (it was transferred); "
                                       "expected memory with its contents, received a detached buffer of 0 bytes");
  }
  auto store = ab->GetBackingStore();
  // Shrinking a resizable ArrayBuffer releases the tail pages under a running
  // operation; growable SharedArrayBuffers only grow, so they are fine.
  if (store->IsResizableByUserJavaScript()) {
    throw Error(Code::InvalidArgument, std::string(what) + ": expected a fixed-length ArrayBuffer, received a "
                                       "resizable one (its memory could shrink while the operation runs)");
  }
  return store;
}

// The memory of an ArrayBuffer or SharedArrayBuffer (as a Value) without a reference
// to it, for a call that ends before JavaScript runs again (see viewOf).
void* dataOf(v8::Local<v8::Value> buffer, const char* what) {
  if (buffer->IsSharedArrayBuffer()) return buffer.As<v8::SharedArrayBuffer>()->Data();
  auto ab = buffer.As<v8::ArrayBuffer>();
  if (ab->WasDetached()) {
    throw Error(Code::InvalidArgument, std::string(what) + ": its ArrayBuffer is detached (it was transferred); "
                                       "expected memory with its contents, received a detached buffer of 0 bytes");
  }
  return ab->Data();
}

}  // namespace

void setDeviceMemoryRecognizer(DeviceMemoryRecognizer recognize) { deviceRecognizer.store(recognize); }

BufferView viewOf(const Napi::Value& value, const char* what, bool hold) {
  BufferView v;
  v8::Local<v8::Value> local = toV8(value);
  // Host arrays first: asking the device recognizer (type tags, unwrapping) about every
  // typed array costs more than the rest of this function.
  DeviceMemoryRecognizer device = local->IsArrayBufferView() ? nullptr : deviceRecognizer.load();
  if (device && device(value, &v)) return v;  // e.g. a NativeDeviceBuffer: device memory
  if (local->IsArrayBufferView()) {
    auto view = local.As<v8::ArrayBufferView>();
    v8::Local<v8::Value> buffer = view->Buffer();
    if (!hold) {
      v.data = static_cast<uint8_t*>(dataOf(buffer, what)) + view->ByteOffset();
      v.bytes = view->ByteLength();
      return v;
    }
    auto store = storeOf(buffer, what);
    v.data = static_cast<uint8_t*>(store->Data()) + view->ByteOffset();
    v.bytes = view->ByteLength();
    v.keep = std::move(store);
  } else if (local->IsArrayBuffer() || local->IsSharedArrayBuffer()) {
    v.bytes = local->IsSharedArrayBuffer() ? local.As<v8::SharedArrayBuffer>()->ByteLength()
                                           : local.As<v8::ArrayBuffer>()->ByteLength();
    if (!hold) {
      v.data = dataOf(local, what);
      return v;
    }
    auto store = storeOf(local, what);
    v.data = store->Data();
    v.keep = std::move(store);
  } else {
    throw Error(Code::InvalidArgument,
                std::string(what) + ": expected a TypedArray, DataView, ArrayBuffer or SharedArrayBuffer (host "
                                    "memory) or a DeviceBuffer, received " + describe(value));
  }
  v.mem = MemKind::Host;
  return v;
}

BufferView hostViewOf(const Napi::Value& value, const char* what) {
  BufferView v = viewOf(value, what);
  if (v.mem != MemKind::Host) throw Error(Code::InvalidArgument, std::string(what) + ": expected host memory, received a DeviceBuffer");
  return v;
}

bool detachedNow(const Napi::Value& value) {
  v8::Local<v8::Value> local = toV8(value);
  v8::Local<v8::Value> buffer = local;
  if (local->IsArrayBufferView()) buffer = local.As<v8::ArrayBufferView>()->Buffer();
  return buffer->IsArrayBuffer() && buffer.As<v8::ArrayBuffer>()->WasDetached();
}

Error detachedDestination(const std::string& call) {
  return Error(Code::InvalidArgument, call + ": the destination's ArrayBuffer was detached (transferred) while the call "
                                             "ran; the data went with the transferred memory. Keep destinations attached "
                                             "until the promise settles");
}

}  // namespace ncclnode

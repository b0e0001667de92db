// Reads the memory behind a JS value handed to a collective: a TypedArray,
// DataView, ArrayBuffer or SharedArrayBuffer (host memory), or a DeviceBuffer.
#pragma once

#include <napi.h>

#include <string>

#include "errors.h"
#include "op.h"

namespace ncclnode {

// Recognises a backend's own device-memory objects: true, with *out filled (mem =
// Device), for one of them. Core knows no backend; the CUDA layer registers its
// recogniser at load (native/cuda/gpu_addon.cpp). One per process: every
// environment's addon instance registers the same function.
using DeviceMemoryRecognizer = bool (*)(const Napi::Value& value, BufferView* out);
void setDeviceMemoryRecognizer(DeviceMemoryRecognizer recognize);

// Throws Error(InvalidArgument) naming `what` for anything else, for a detached
// ArrayBuffer and for a resizable one. A host view holds the memory's backing
// store (BufferView::keep) so that it outlives a detach; see buffers.cpp. With hold
// false it holds nothing (and takes a resizable buffer at its current length): for a
// call that is over before JavaScript runs again, which then can neither detach nor
// resize the memory.
BufferView viewOf(const Napi::Value& value, const char* what, bool hold = true);

// viewOf, for calls that only take host memory (copies, file I/O).
BufferView hostViewOf(const Napi::Value& value, const char* what);

// True when `value` (as passed to viewOf) is host memory whose ArrayBuffer has
// been detached since: transferred to another thread or context, or by
// ArrayBuffer.prototype.transfer. JS thread only.
bool detachedNow(const Napi::Value& value);

// The error for a call (a file read, a copy) whose destination's ArrayBuffer was
// detached while it ran: the memory was held, so nothing broke, but the data went
// with the transferred memory. (A collective says more: engine.cpp.)
Error detachedDestination(const std::string& call);

}  // namespace ncclnode

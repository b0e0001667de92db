// Reads the memory behind a JS value handed to a collective: a TypedArray,
// DataView or ArrayBuffer (host memory). Device buffers plug in here.
#pragma once

#include <napi.h>

#include "op.h"

namespace ncclnode {

// Throws Error(InvalidArgument) naming `what` for anything else.
BufferView viewOf(const Napi::Value& value, const char* what);

// viewOf, for calls that only take host memory (copies, file I/O).
BufferView hostViewOf(const Napi::Value& value, const char* what);

}  // namespace ncclnode

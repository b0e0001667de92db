// A 4 KiB-aligned heap block: what O_DIRECT wants of a buffer, offset and length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../core/errors.h"

namespace ncclnode {

constexpr size_t kIoAlign = 4096;

struct AlignedBuf {
  uint8_t* p = nullptr;
  explicit AlignedBuf(size_t n) {
    if (posix_memalign(reinterpret_cast<void**>(&p), kIoAlign, n) != 0) throw Error(Code::Io, "out of memory for I/O staging");
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

}  // namespace ncclnode

// Host memory copies of collective data: memmove, except where the destination starts 1-31
// bytes past the source's place in a 4 KiB page (copy_bytes.cpp says why).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncclnode {

// As memmove(dst, src, n): the two may overlap.
void copyBytes(void* dst, const void* src, size_t n);

// Bytes copyBytes has copied along its backward path in this process.
uint64_t backwardCopiedBytes();

}  // namespace ncclnode

// CRC32C (Castagnoli), the checksum the checkpoint format stores for every tensor.
// Chosen over CRC32 because x86 (SSE4.2) and ARMv8 compute it in hardware, so the
// writer checksums at memory speed while it copies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncclnode {

// Extends `crc` (0 to start) over `len` bytes; crc32c(crc32c(0,a),b) == crc32c(0,a+b).
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

// True when the hardware instruction is in use (reported by the benchmark).
bool crc32cHardware();

}  // namespace ncclnode

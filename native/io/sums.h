// Running CRC32C of one checksummed segment, whole and per chunk, fed in file order
// from wherever the bytes happen to be on the host (a staging block, a bounce buffer).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "crc32c.h"
#include "file_io.h"

namespace ncclnode {

class SumBuilder {
 public:
  SumBuilder(SegmentSums* out, size_t chunk) : out_(out), chunk_(chunk) {}
  // The next n bytes of the segment.
  void add(const uint8_t* p, size_t n) {
    size_t k = 0;
    while (k < n) {
      const size_t m = std::min(n - k, chunk_ - pos_ % chunk_);
      out_->crc = crc32c(out_->crc, p + k, m);
      chunkCrc_ = crc32c(chunkCrc_, p + k, m);
      k += m;
      pos_ += m;
      if (pos_ % chunk_ == 0) {
        out_->chunks.push_back(chunkCrc_);
        chunkCrc_ = 0;
      }
    }
  }
  // After the last byte: the partial last chunk.
  void finish() {
    if (pos_ % chunk_ != 0) out_->chunks.push_back(chunkCrc_);
  }

 private:
  SegmentSums* out_;
  size_t chunk_;
  size_t pos_ = 0;
  uint32_t chunkCrc_ = 0;
};

}  // namespace ncclnode

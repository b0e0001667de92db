// Plain C++ file work for the checkpoint writer and reader; no N-API here, so the
// functions run on io_queue's native threads and can be tested on their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ncclnode {

// One contiguous piece of the file's content, in file order.
struct Segment {
  const uint8_t* data;
  size_t len;
  bool checksum;  // false for the safetensors header
};

struct WriteOptions {
  bool direct = true;           // try O_DIRECT; fall back to buffered where refused
  size_t blockBytes = 8u << 20; // staging block: the size of each pwrite
  size_t chunkBytes = 1u << 20; // granularity of the per-chunk CRCs (partial reads verify these)
  bool sync = true;             // fsync before returning: the commit relies on it
  bool dropCache = true;        // leave the file out of the page cache (reads measure the disk)
};

struct SegmentSums {
  uint32_t crc = 0;
  std::vector<uint32_t> chunks;
};

struct WriteResult {
  uint64_t bytes = 0;
  bool direct = false;  // every block went through O_DIRECT
  double seconds = 0;
  std::vector<SegmentSums> sums;  // one per segment with checksum=true
};

// Writes the segments back to back into `path` (created or truncated). Throws Error(Io).
WriteResult writeFile(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o);

struct ReadItem {
  uint64_t offset;
  size_t len;
  uint8_t* dst;
};

// Reads each item's byte range into its destination; returns the CRC32C of each.
// A short read (truncated file) throws Error(Io) naming the offset.
std::vector<uint32_t> readFile(const std::string& path, const std::vector<ReadItem>& items, double* seconds);

// fsync on a directory: makes a rename inside it durable.
void fsyncDir(const std::string& path);

}  // namespace ncclnode

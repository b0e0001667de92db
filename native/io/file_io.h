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
  const uint8_t* data;  // a device address (CUdeviceptr) when device >= 0
  size_t len;
  bool checksum;  // false for the safetensors header
  int device = -1;
};

struct WriteOptions {
  bool direct = true;           // try O_DIRECT; fall back to buffered where refused
  size_t blockBytes = 8u << 20; // staging block: the size of each pwrite
  size_t chunkBytes = 1u << 20; // granularity of the per-chunk CRCs (partial reads verify these)
  bool sync = true;             // fsync before returning: the commit relies on it
  bool dropCache = true;        // leave the file out of the page cache (reads measure the disk)
  bool gds = true;              // device segments: try cuFile (gds_io.h) before staging them through host blocks
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
  bool gds = false;       // device segments went file-ward through cuFileWrite
  std::string gdsReason;  // why not, when there were device segments
};

// Writes the segments back to back into `path` (created or truncated). Throws Error(Io).
WriteResult writeFile(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o);

struct ReadItem {
  uint64_t offset;
  size_t len;
  uint8_t* dst;     // a device address when device >= 0
  int device = -1;
};

// Reads the items listed in `which` into their destinations (device ones through a
// host bounce buffer) and stores the CRC32C of each range at crcs[i].
// A short read (truncated file) throws Error(Io) naming the offset.
void readFile(const std::string& path, const std::vector<ReadItem>& items, const std::vector<size_t>& which,
              std::vector<uint32_t>* crcs);

// fsync on a directory: makes a rename inside it durable.
void fsyncDir(const std::string& path);

}  // namespace ncclnode

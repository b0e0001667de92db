// GPUDirect Storage paths of the checkpoint I/O: device segments go to the file
// with cuFileWrite and device destinations are filled with cuFileRead, no host
// staging of the data itself. Each returns false with *why when cuFile is absent
// or refuses (no O_DIRECT on the file system, handle registration refused, an I/O
// error), leaving the caller to redo the work through host memory.
#pragma once

#include <string>
#include <vector>

#include "file_io.h"

namespace ncclnode {

// Host segments (the header) are written with a buffered descriptor and flushed
// before any device data; device segments with cuFileWrite on an O_DIRECT one.
// CRCs: each device block is also copied to a host bounce buffer (on a private
// stream, overlapping the cuFileWrite) and checksummed there.
bool gdsWriteFile(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o,
                  WriteResult* r, std::string* why);

// Reads the device items listed in `which` with cuFileRead, then copies each range
// back to the host to compute crcs[i] (so the CRC is of what landed on the device).
bool gdsReadFile(const std::string& path, const std::vector<ReadItem>& items, const std::vector<size_t>& which,
                 std::vector<uint32_t>* crcs, std::string* why);

// Whether cuFile would take a file in `dir`: loads it, opens a probe file there
// with O_DIRECT and registers it. Never throws.
bool gdsProbe(const std::string& dir, std::string* why);

}  // namespace ncclnode

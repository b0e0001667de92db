// Host memory copies of collective data: memmove, except where the destination starts 1-31
// bytes past the source's place in a 4 KiB page on a CPU that stalls there (copy_bytes.cpp
// says why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclnode {

// As memmove(dst, src, n): the two may overlap.
void copyBytes(void* dst, const void* src, size_t n);

// Bytes copyBytes has copied along its backward path in this process.
uint64_t backwardCopiedBytes();

// This CPU's 4K-aliasing stall, measured once per process on first use (under a
// millisecond): a 64 KiB rep movsb 16 bytes into a page, from a page's start, against one
// half a page in; 1 where not measured (not x86-64).
double aliasingRatio();
// Whether that ratio reached 2: the default of the backward path here and of the TCP
// bounce buffer (net::TcpMesh::setBounce).
bool aliasingStalls();
// Whether copyBytes copies the band backward: NCCL_NODE_COPY_BACKWARD (1 or 0), else
// aliasingStalls().
bool copiesBackwardInBand();
// Empty, or why NCCL_NODE_COPY_BACKWARD's value was ignored (the backend's init reports it).
const std::string& copyBackwardEnvError();

}  // namespace ncclnode

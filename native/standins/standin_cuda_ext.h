// Extra C symbols of the stand-in libcuda.so.1 (not part of the real driver API).
// The stand-in libnccl uses them to run its collectives as stream work and to read
// "device" memory, which the stand-in keeps in host memory.
#pragma once

#include <cstddef>

extern "C" {
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

// Runs fn(arg) on the stream's executor thread, in order with the stream's other work.
int cuStandinEnqueue(CUstream stream, void (*fn)(void* arg), void* arg);
// Host address of [ptr, ptr + bytes), or null when that is not inside one allocation.
void* cuStandinHostPtr(CUdeviceptr ptr, size_t bytes);
}

// Used only where the CUDA toolkit's include directory is absent: nccl.h includes the
// runtime headers for cudaStream_t alone, which is the driver's CUstream.
#pragma once
#include <cuda.h>
typedef CUstream cudaStream_t;

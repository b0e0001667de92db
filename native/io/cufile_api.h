// The slice of GPUDirect Storage's cuFile C API (libcufile.so.0) the checkpoint
// I/O uses, declared from NVIDIA's documented ABI (no NVIDIA headers) and opened
// with dlopen on first use, like native/cuda/dl.cpp does for libcuda and libnccl,
// so the addon builds and runs where GDS is not installed (the writer falls back).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace ncclnode {

// CUfileError_t: {CUfileOpError err; CUresult cu_err;}, both ints, returned by value.
struct CUfileError {
  int err;
  int cu_err;
};
constexpr int kCufileSuccess = 0;
constexpr int kCufileHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD

// CUfileDescr_t: the file to register (Linux: an fd opened with O_DIRECT).
struct CUfileDescr {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // null: the kernel file system
};
using CUfileHandle = void*;

struct CufileApi {
  void* lib = nullptr;
  std::string path;
  CUfileError (*DriverOpen)();
  CUfileError (*DriverClose)();  // cuFileDriverClose_v2 where exported (cufile.h maps the name to it)
  CUfileError (*HandleRegister)(CUfileHandle*, CUfileDescr*);
  void (*HandleDeregister)(CUfileHandle);
  CUfileError (*BufRegister)(const void*, size_t, int);
  CUfileError (*BufDeregister)(const void*);
  // Bytes moved; < 0 on error: -1 with errno (a system error) or -CU_FILE_* (a cuFile one).
  ssize_t (*Read)(CUfileHandle, void*, size_t, off_t, off_t);
  ssize_t (*Write)(CUfileHandle, const void*, size_t, off_t, off_t);
};

// Loads libcufile (NCCL_NODE_LIBCUFILE, else libcufile.so.0) and the CUDA driver it
// needs, and opens the cuFile driver, once per process (never closed: other threads
// may be mid-I/O at exit). Null with *why set when any of that fails.
const CufileApi* tryCufile(std::string* why);

// "CU_FILE_DIO_NOT_SET (5020)" and the like, for messages.
std::string cufileErrorText(int err);
// Text for a negative cuFileRead/Write result.
std::string cufileIoErrorText(ssize_t r, int savedErrno);

}  // namespace ncclnode

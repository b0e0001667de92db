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

// The name of a CUfileOpError code (every value cufile.h defines, CU_FILE_SUCCESS = 0
// and CUFILEOP_BASE_ERR + n), or null for a code it does not define. constexpr so
// test/abi checks it against the real header at compile time.
constexpr const char* cufileErrorName(int err) {
  switch (err) {
    case 0: return "CU_FILE_SUCCESS";
    case 5001: return "CU_FILE_DRIVER_NOT_INITIALIZED";
    case 5002: return "CU_FILE_DRIVER_INVALID_PROPS";
    case 5003: return "CU_FILE_DRIVER_UNSUPPORTED_LIMIT";
    case 5004: return "CU_FILE_DRIVER_VERSION_MISMATCH";
    case 5005: return "CU_FILE_DRIVER_VERSION_READ_ERROR";
    case 5006: return "CU_FILE_DRIVER_CLOSING";
    case 5007: return "CU_FILE_PLATFORM_NOT_SUPPORTED";
    case 5008: return "CU_FILE_IO_NOT_SUPPORTED";
    case 5009: return "CU_FILE_DEVICE_NOT_SUPPORTED";
    case 5010: return "CU_FILE_NVFS_DRIVER_ERROR";
    case 5011: return "CU_FILE_CUDA_DRIVER_ERROR";
    case 5012: return "CU_FILE_CUDA_POINTER_INVALID";
    case 5013: return "CU_FILE_CUDA_MEMORY_TYPE_INVALID";
    case 5014: return "CU_FILE_CUDA_POINTER_RANGE_ERROR";
    case 5015: return "CU_FILE_CUDA_CONTEXT_MISMATCH";
    case 5016: return "CU_FILE_INVALID_MAPPING_SIZE";
    case 5017: return "CU_FILE_INVALID_MAPPING_RANGE";
    case 5018: return "CU_FILE_INVALID_FILE_TYPE";
    case 5019: return "CU_FILE_INVALID_FILE_OPEN_FLAG";
    case 5020: return "CU_FILE_DIO_NOT_SET";
    case 5022: return "CU_FILE_INVALID_VALUE";
    case 5023: return "CU_FILE_MEMORY_ALREADY_REGISTERED";
    case 5024: return "CU_FILE_MEMORY_NOT_REGISTERED";
    case 5025: return "CU_FILE_PERMISSION_DENIED";
    case 5026: return "CU_FILE_DRIVER_ALREADY_OPEN";
    case 5027: return "CU_FILE_HANDLE_NOT_REGISTERED";
    case 5028: return "CU_FILE_HANDLE_ALREADY_REGISTERED";
    case 5029: return "CU_FILE_DEVICE_NOT_FOUND";
    case 5030: return "CU_FILE_INTERNAL_ERROR";
    case 5031: return "CU_FILE_GETNEWFD_FAILED";
    case 5033: return "CU_FILE_NVFS_SETUP_ERROR";
    case 5034: return "CU_FILE_IO_DISABLED";
    case 5035: return "CU_FILE_BATCH_SUBMIT_FAILED";
    case 5036: return "CU_FILE_GPU_MEMORY_PINNING_FAILED";
    case 5037: return "CU_FILE_BATCH_FULL";
    case 5038: return "CU_FILE_ASYNC_NOT_SUPPORTED";
    case 5039: return "CU_FILE_INTERNAL_BATCH_SETUP_ERROR";
    case 5040: return "CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR";
    case 5041: return "CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR";
    case 5042: return "CU_FILE_INTERNAL_BATCH_CANCEL_ERROR";
    case 5043: return "CU_FILE_NOMEM_ERROR";
    case 5044: return "CU_FILE_IO_ERROR";
    case 5045: return "CU_FILE_INTERNAL_BUF_REGISTER_ERROR";
    case 5046: return "CU_FILE_HASH_OPR_ERROR";
    case 5047: return "CU_FILE_INVALID_CONTEXT_ERROR";
    case 5048: return "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR";
    case 5049: return "CU_FILE_BATCH_NOCOMPAT_ERROR";
    case 5050: return "CU_FILE_IO_MAX_ERROR";
    default: return nullptr;
  }
}
// "CU_FILE_DIO_NOT_SET (5020)" and the like, for messages.
std::string cufileErrorText(int err);
// Text for a negative cuFileRead/Write result.
std::string cufileIoErrorText(ssize_t r, int savedErrno);

}  // namespace ncclnode

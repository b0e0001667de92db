#include "cufile_api.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "../cuda/cuda_api.h"
#include "../cuda/dl.h"

namespace ncclnode {

namespace {

struct Loaded {
  CufileApi api;
  bool ok = false;
  std::string why;
};

template <class F>
bool bind(CufileApi& a, F& fn, const char* name, std::string* missing) {
  fn = reinterpret_cast<F>(symbol(a.lib, name));
  if (!fn) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return fn != nullptr;
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    // cuFileDriverOpen needs a working CUDA driver; a missing one is the better message.
    if (!tryCuda(&l.why)) return;
    CufileApi& a = l.api;
    a.lib = openLibrary("NCCL_NODE_LIBCUFILE", "libcufile.so.0", "GPUDirect Storage (libcufile.so.0)", &l.why);
    if (!a.lib) return;
    const char* env = std::getenv("NCCL_NODE_LIBCUFILE");
    a.path = env && *env ? env : "libcufile.so.0";
    std::string missing;
    bind(a, a.DriverOpen, "cuFileDriverOpen", &missing);
    a.DriverClose = reinterpret_cast<decltype(a.DriverClose)>(symbol(a.lib, "cuFileDriverClose_v2"));
    if (!a.DriverClose) bind(a, a.DriverClose, "cuFileDriverClose", &missing);
    bind(a, a.HandleRegister, "cuFileHandleRegister", &missing);
    bind(a, a.HandleDeregister, "cuFileHandleDeregister", &missing);
    bind(a, a.BufRegister, "cuFileBufRegister", &missing);
    bind(a, a.BufDeregister, "cuFileBufDeregister", &missing);
    bind(a, a.Read, "cuFileRead", &missing);
    bind(a, a.Write, "cuFileWrite", &missing);
    if (!missing.empty()) {
      l.why = a.path + " lacks " + missing + "; set NCCL_NODE_LIBCUFILE to a real libcufile.so.0";
      return;
    }
    const CUfileError e = a.DriverOpen();
    if (e.err != kCufileSuccess) {
      l.why = "cuFileDriverOpen failed: " + cufileErrorText(e.err) + (e.cu_err ? " (CUDA error " + std::to_string(e.cu_err) + ")" : "");
      return;
    }
    l.ok = true;
  });
  return l;
}

}  // namespace

const CufileApi* tryCufile(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

std::string cufileErrorText(int err) {
  // CUfileOpError values from cufile.h (CUFILEOP_BASE_ERR = 5000); the ones a writer meets.
  static const struct { int code; const char* name; } names[] = {
      {0, "CU_FILE_SUCCESS"}, {5001, "CU_FILE_DRIVER_NOT_INITIALIZED"}, {5007, "CU_FILE_PLATFORM_NOT_SUPPORTED"},
      {5008, "CU_FILE_IO_NOT_SUPPORTED"}, {5009, "CU_FILE_DEVICE_NOT_SUPPORTED"}, {5010, "CU_FILE_NVFS_DRIVER_ERROR"},
      {5011, "CU_FILE_CUDA_DRIVER_ERROR"}, {5012, "CU_FILE_CUDA_POINTER_INVALID"}, {5018, "CU_FILE_INVALID_FILE_TYPE"},
      {5019, "CU_FILE_INVALID_FILE_OPEN_FLAG"}, {5020, "CU_FILE_DIO_NOT_SET"}, {5022, "CU_FILE_INVALID_VALUE"},
      {5023, "CU_FILE_MEMORY_ALREADY_REGISTERED"}, {5024, "CU_FILE_MEMORY_NOT_REGISTERED"},
      {5025, "CU_FILE_PERMISSION_DENIED"}, {5027, "CU_FILE_HANDLE_NOT_REGISTERED"}, {5030, "CU_FILE_INTERNAL_ERROR"},
      {5034, "CU_FILE_IO_DISABLED"}, {5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED"}};
  for (const auto& n : names) {
    if (n.code == err) return std::string(n.name) + " (" + std::to_string(err) + ")";
  }
  return "cuFile error " + std::to_string(err);
}

std::string cufileIoErrorText(ssize_t r, int savedErrno) {
  if (r == -1) return std::strerror(savedErrno);
  return cufileErrorText(static_cast<int>(-r));
}

}  // namespace ncclnode

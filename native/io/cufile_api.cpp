#include "cufile_api.h"

#include <unistd.h>

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

// cuFile writes cufile.log into the working directory unless told otherwise
// (CUFILE_LOGFILE_PATH, or logging.dir in the JSON config CUFILE_ENV_PATH_JSON names).
// When the user set neither, the log goes to the OS temp dir, one file per process
// (ranks would overwrite a shared one). Returns the log's path, or "" when the user's
// own configuration decides.
std::string placeCufileLog() {
  const char* file = std::getenv("CUFILE_LOGFILE_PATH");
  if (file && *file) return file;
  const char* json = std::getenv("CUFILE_ENV_PATH_JSON");
  if (json && *json) return "";
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/nccl-node-cufile-" + std::to_string(getpid()) + ".log";
  setenv("CUFILE_LOGFILE_PATH", path.c_str(), 0);
  return path;
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    // cuFileDriverOpen needs a working CUDA driver; a missing one is the better message.
    if (!tryCuda(&l.why)) return;
    CufileApi& a = l.api;
    const std::string log = placeCufileLog();  // before the library reads its environment
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
      l.why = "cuFileDriverOpen failed: " + cufileErrorText(e.err) + (e.cu_err ? " (" + cuErrorText(e.cu_err) + ")" : "") +
              (log.empty() ? "" : "; cuFile's log: " + log);
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
  const char* name = cufileErrorName(err);
  return name ? std::string(name) + " (" + std::to_string(err) + ")" : "cuFile error " + std::to_string(err);
}

std::string cufileIoErrorText(ssize_t r, int savedErrno) {
  if (r == -1) return std::strerror(savedErrno);
  return cufileErrorText(static_cast<int>(-r));
}

}  // namespace ncclnode

#include "dl.h"

#include <dlfcn.h>

#include <cstdlib>

namespace ncclnode {

void* openLibrary(const char* envVar, const char* soname, const char* what, std::string* why) {
  const char* override = std::getenv(envVar);
  const std::string file = override && *override ? override : soname;
  // RTLD_GLOBAL: libnccl resolves the driver by soname; it must find this copy.
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib && why) {
    const char* err = dlerror();
    *why = std::string(what) + " could not be loaded from " + file + " (" + (err ? err : "unknown error") +
           "); install it, or set " + envVar + " to the library file to use";
  }
  return lib;
}

void* symbol(void* lib, const char* name) { return lib ? dlsym(lib, name) : nullptr; }

}  // namespace ncclnode

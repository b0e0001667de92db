// dlopen helpers shared by the CUDA, NCCL and NVML loaders.
#pragma once

#include <string>

namespace ncclnode {

// Opens the file named by env var `envVar`, else `soname` (searched the usual way).
// On failure returns null and sets *why to a message naming the file, the dlerror
// text and the variable that names another file.
void* openLibrary(const char* envVar, const char* soname, const char* what, std::string* why);

// dlsym that tolerates a missing symbol (null).
void* symbol(void* lib, const char* name);

}  // namespace ncclnode

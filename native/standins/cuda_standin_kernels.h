// Host twins of the kernels in native/kernels/kernels.cu, for the stand-in libcuda.
#pragma once

#include <functional>

// A module for an image (PTX text or an nvcc fatbin) that names at least one known
// kernel; null for anything else.
void* standinModuleLoad(const void* image);
// The kernel `name` if the module's image contains it, else null.
void* standinModuleFunction(void* module, const char* name);
// Reads the launch's parameters now (as the driver does) and returns the work to run
// on the stream. Returns a CUresult.
int standinPrepareLaunch(void* fn, void** params, std::function<void()>* work);

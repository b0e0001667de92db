// The Gloo backend's exports: createGloo.
#pragma once

#include <napi.h>

namespace ncclnode {

void registerGloo(Napi::Env env, Napi::Object exports);

}  // namespace ncclnode

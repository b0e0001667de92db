// verifiablePrepareHost / verifiableCompareHost: the benchmark's verifiable data on host
// memory, multi-threaded (host_verifiable.cpp).
#pragma once

#include <napi.h>

namespace ncclnode {

void registerHostVerifiable(Napi::Env env, Napi::Object exports);

}  // namespace ncclnode

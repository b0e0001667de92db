// Per-environment state of the addon (worker threads may load it more than once).
#pragma once

#include <napi.h>

#include <set>

namespace ncclnode {

class Engine;

struct AddonData {
  Napi::FunctionReference commCtor;
  // The class native errors are built with (NcclNodeError, from setErrorConstructor);
  // empty until JavaScript hands it over, and then plain Errors carry the code.
  Napi::FunctionReference errorCtor;
  std::set<Engine*> engines;  // live engines, stopped at environment teardown
};

// Set by the addon's entry (native/addon/addon.cpp) before any other call.
inline AddonData& addonData(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

}  // namespace ncclnode

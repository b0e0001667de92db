// Per-environment state of the addon (worker threads may load it more than once).
#pragma once

#include <napi.h>

#include <set>

namespace ncclnode {

class Engine;

struct AddonData {
  Napi::FunctionReference commCtor;
  std::set<Engine*> engines;  // live engines, stopped at environment teardown
};

AddonData& addonData(Napi::Env env);

}  // namespace ncclnode

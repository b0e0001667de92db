// Completes promises when CUDA events complete. One native thread per environment
// polls the watched events (cuEventQuery) and settles the promises on the JS thread
// through a thread-safe function: GPU waits never occupy the libuv pool or block JS.
#pragma once

#include <napi.h>

#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda_api.h"

namespace ncclnode {

class Poller {
 public:
  using Done = std::function<Napi::Value(Napi::Env)>;
  explicit Poller(Napi::Env env);
  ~Poller();

  // Records an event on `stream` now and resolves the returned promise with done(env)
  // once the GPU reaches it. `keep` stays referenced until then (buffers in use).
  Napi::Promise afterStream(Napi::Env env, int device, CUstream stream, Done done, std::vector<Napi::Value> keep);

 private:
  struct Item {
    int device;
    CUevent event;
    CUresult result = kCudaSuccess;
    Napi::Promise::Deferred deferred;
    Done done;
    std::vector<Napi::Reference<Napi::Value>> keep;
  };
  static void settle(Napi::Env env, Napi::Function, Poller* self, Item* item);
  void loop();

  using Tsfn = Napi::TypedThreadSafeFunction<Poller, Item, &Poller::settle>;
  Tsfn tsfn_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Item*> items_;
  bool stop_ = false;
  size_t pending_ = 0;  // JS thread: promises not settled yet
};

}  // namespace ncclnode

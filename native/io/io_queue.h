// Runs checkpoint file work (writes, reads) on the addon's own I/O threads and
// settles a promise per task on the JS thread through a thread-safe function.
// Disk work can take seconds: it must never sit in libuv's pool, where it would
// starve fs and dns calls of the training process.
#pragma once

#include <napi.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ncclnode {

class IoQueue {
 public:
  // `work` runs on an I/O thread; `done` runs on the JS thread and builds the value.
  using Work = std::function<void()>;
  using Done = std::function<Napi::Value(Napi::Env)>;

  IoQueue(Napi::Env env, size_t threads);
  ~IoQueue();

  // `keep`: JS values (the caller's arrays) referenced until the task settles.
  Napi::Promise submit(Napi::Env env, Work work, Done done, const std::vector<Napi::Value>& keep);

 private:
  struct Task {
    Work work;
    Done done;
    Napi::Promise::Deferred deferred;
    std::vector<Napi::Reference<Napi::Value>> keep;
    std::exception_ptr error;
  };
  static void settle(Napi::Env env, Napi::Function, IoQueue* self, Task* task);
  void loop();

  using Tsfn = Napi::TypedThreadSafeFunction<IoQueue, Task, &IoQueue::settle>;
  Tsfn tsfn_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> queue_;
  bool stop_ = false;
  size_t pending_ = 0;  // JS thread only
};

}  // namespace ncclnode

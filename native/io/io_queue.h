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
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ncclnode {

// What a task holds until it settles. The caller's arrays are referenced so they are not
// collected, and the memory under them (BufferView::keep: V8's backing store, or a
// DeviceBuffer's allocation) is held so that a transfer of the ArrayBuffer or a
// dispose() cannot free it under the I/O thread. A destination whose ArrayBuffer was
// transferred meanwhile got the data on the new owner's side: the call is rejected.
struct IoHold {
  void add(const Napi::Value& value, std::shared_ptr<void> memory, bool written) {
    values.push_back(value);
    this->memory.push_back(std::move(memory));
    if (written) destinations.push_back(values.size() - 1);
  }
  std::vector<Napi::Value> values;
  std::vector<std::shared_ptr<void>> memory;
  std::vector<size_t> destinations;  // indices into values
};

class IoQueue {
 public:
  // `work` runs on an I/O thread; `done` runs on the JS thread and builds the value.
  using Work = std::function<void()>;
  using Done = std::function<Napi::Value(Napi::Env)>;

  IoQueue(Napi::Env env, size_t threads);
  ~IoQueue();

  // `call` names the function in errors; `hold` lasts until the task settles.
  Napi::Promise submit(Napi::Env env, const char* call, Work work, Done done, const IoHold& hold);

 private:
  struct Task {
    Work work;
    Done done;
    Napi::Promise::Deferred deferred;
    const char* call;
    std::vector<Napi::Reference<Napi::Value>> keep;
    std::vector<std::shared_ptr<void>> memory;
    std::vector<size_t> destinations;  // indices into keep
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

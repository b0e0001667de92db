#include "io_queue.h"

#include "../core/buffers.h"
#include "../core/errors.h"
#include "../core/js_errors.h"

namespace ncclnode {

IoQueue::IoQueue(Napi::Env env, size_t threads) {
  tsfn_ = Tsfn::New(env, "nccl-node-io", 0, 1, this);
  tsfn_.Unref(env);  // only pending tasks keep the process alive
  for (size_t i = 0; i < threads; i++) threads_.emplace_back([this] { loop(); });
}

IoQueue::~IoQueue() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A task in progress finishes its file first: a half-written shard is harmless
  // (no manifest names it), but a torn fd would not be.
  for (auto& t : threads_) t.join();
  for (Task* t : queue_) delete t;
  tsfn_.Release();
}

Napi::Promise IoQueue::submit(Napi::Env env, const char* call, Work work, Done done, const IoHold& hold) {
  auto* task = new Task{std::move(work), std::move(done), Napi::Promise::Deferred::New(env), call, {}, hold.memory, hold.destinations, nullptr};
  for (const auto& v : hold.values) task->keep.push_back(Napi::Persistent(v));
  auto promise = task->deferred.Promise();
  if (pending_++ == 0) tsfn_.Ref(env);
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(task);
  }
  cv_.notify_one();
  return promise;
}

void IoQueue::loop() {
  for (;;) {
    Task* task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    try {
      task->work();
    } catch (...) {
      task->error = std::current_exception();
    }
    if (tsfn_.BlockingCall(task) != napi_ok) delete task;  // environment going away
  }
}

void IoQueue::settle(Napi::Env env, Napi::Function, IoQueue* self, Task* raw) {
  std::unique_ptr<Task> task(raw);
  if (env == nullptr) return;
  if (--self->pending_ == 0) self->tsfn_.Unref(env);
  Napi::HandleScope scope(env);
  if (task->error) {
    try {
      std::rethrow_exception(task->error);
    } catch (const Error& e) {
      task->deferred.Reject(makeError(env, e.code(), e.what()).Value());
    } catch (const std::exception& e) {
      task->deferred.Reject(makeError(env, Code::Io, e.what()).Value());
    }
    return;
  }
  for (size_t i : task->destinations) {
    if (!detachedNow(task->keep[i].Value())) continue;
    const Error e = detachedDestination(task->call);
    task->deferred.Reject(makeError(env, e.code(), e.what()).Value());
    return;
  }
  try {
    task->deferred.Resolve(task->done(env));
  } catch (const Napi::Error& e) {
    task->deferred.Reject(e.Value());
  }
}

}  // namespace ncclnode

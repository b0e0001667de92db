#include "poller.h"

#include <chrono>

#include "../core/js_errors.h"

namespace ncclnode {

Poller::Poller(Napi::Env env) {
  tsfn_ = Tsfn::New(env, "nccl-node-gpu-poller", 0, 1, this);
  tsfn_.Unref(env);  // only pending waits keep the process alive
  thread_ = std::thread([this] { loop(); });
}

Poller::~Poller() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  tsfn_.Release();
}

Napi::Promise Poller::afterStream(Napi::Env env, int device, CUstream stream, Done done, std::vector<Napi::Value> keep) {
  const CudaApi& cu = cuda();
  useDevice(device);
  CUevent ev = nullptr;
  cuCheck(cu.cuEventCreate(&ev, kEventDisableTiming), "cuEventCreate");
  const CUresult r = cu.cuEventRecord(ev, stream);
  if (r != kCudaSuccess) {
    cu.cuEventDestroy(ev);
    cuCheck(r, "cuEventRecord");
  }
  auto* item = new Item{device, ev, kCudaSuccess, Napi::Promise::Deferred::New(env), std::move(done), {}};
  for (auto& v : keep) item->keep.push_back(Napi::Persistent(v));
  auto promise = item->deferred.Promise();
  if (pending_++ == 0) tsfn_.Ref(env);
  {
    std::lock_guard<std::mutex> l(mu_);
    items_.push_back(item);
  }
  cv_.notify_all();
  return promise;
}

void Poller::loop() {
  std::unique_lock<std::mutex> l(mu_);
  auto nap = std::chrono::microseconds(20);
  while (!stop_) {
    if (items_.empty()) {
      cv_.wait(l, [this] { return stop_ || !items_.empty(); });
      nap = std::chrono::microseconds(20);
      continue;
    }
    std::vector<Item*> ready;
    for (auto it = items_.begin(); it != items_.end();) {
      const CUresult r = cuda().cuEventQuery((*it)->event);
      if (r == kCudaNotReady) { ++it; continue; }
      (*it)->result = r;
      ready.push_back(*it);
      it = items_.erase(it);
    }
    l.unlock();
    for (Item* item : ready) {
      if (tsfn_.BlockingCall(item) != napi_ok) delete item;  // environment going away
    }
    if (ready.empty()) {
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::milliseconds(1)) nap *= 2;
    } else {
      nap = std::chrono::microseconds(20);
    }
    l.lock();
  }
}

void Poller::settle(Napi::Env env, Napi::Function, Poller* self, Item* raw) {
  std::unique_ptr<Item> item(raw);
  if (env == nullptr) return;
  Napi::HandleScope scope(env);
  try {
    useDevice(item->device);
    cuda().cuEventDestroy(item->event);
    if (item->result != kCudaSuccess) {
      item->deferred.Reject(makeError(env, Code::Cuda, "GPU work failed: " + cuErrorText(item->result)).Value());
    } else {
      item->deferred.Resolve(item->done ? item->done(env) : env.Undefined());
    }
  } catch (const Error& e) {
    item->deferred.Reject(makeError(env, e.code(), e.what()).Value());
  } catch (const Napi::Error& e) {
    item->deferred.Reject(e.Value());
  }
  if (--self->pending_ == 0) self->tsfn_.Unref(env);
}

}  // namespace ncclnode
